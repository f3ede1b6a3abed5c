"""End-to-end test of queen_ack's broker with the real Queen MQ Python SDK (queen-mq).

Usage: e2e.py <broker base url>

Every scenario drives the broker through the SDK's public API (Queen.queue(...).config/
create/push/pop/consume/dlq, Queen.ack, Queen.renew, Queen.transaction()), on its own
uniquely named queues. The HTTP exchanges are recorded by a pass-through httpx transport
(handed to the SDK through its documented `transport=` option) only so that a failure
can print the exact request and response that broke; no scenario talks raw HTTP but
to check a stream's state (`streams_state`), and the recovery scenario runs the SDK's
stream in its own process (tests/python/stream_runner.py) to kill it.

Prints one `test python::<name> ... ok|FAILED` line per scenario (cargo's format); the
caller (tests/python_e2e.sh) prints the summary line. Exit status 1 on any failure.
"""

import asyncio
import contextlib
import os
import sys
import time
import traceback
import uuid

import httpx
from queen import Queen

BASE_URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:6632"
RUN = uuid.uuid4().hex[:8]
# The recording transport of the run (set in main): a scenario may look at the exact
# HTTP status of an SDK call whose method hides it (pop() returns [] on any error).
TRANSPORT = None


class RecordingTransport(httpx.AsyncBaseTransport):
    """Forwards every request to the real transport and keeps (request, response) pairs."""

    def __init__(self):
        self.inner = httpx.AsyncHTTPTransport()
        self.log = []

    async def handle_async_request(self, request):
        body = request.content
        resp = await self.inner.handle_async_request(request)
        content = await resp.aread()
        await resp.aclose()
        self.log.append((request.method, str(request.url), body, resp.status_code, content))
        return httpx.Response(
            resp.status_code, headers=resp.headers, content=content, request=request
        )

    def dump(self, since=0, out=sys.stderr):
        for method, url, body, status, content in self.log[since:]:
            print(f"    > {method} {url} {body.decode(errors='replace')[:600]}", file=out)
            print(f"    < {status} {content.decode(errors='replace')[:600]}", file=out)

    async def aclose(self):
        await self.inner.aclose()


def qname(tag):
    return f"py-e2e-{RUN}-{tag}"


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def configure(client, queue, **options):
    res = await client.queue(queue).config(options).create()
    check(isinstance(res, dict) and res.get("configured") is True, f"configure {queue}: {res!r}")
    return res


async def pop(client, queue, batch=None, wait=False):
    b = client.queue(queue).wait(wait)
    if batch:
        b = b.batch(batch)
    if wait:
        b = b.timeout_millis(3000)
    return await b.pop()


# ---------------------------------------------------------------------------------------
# Scenarios
# ---------------------------------------------------------------------------------------


async def test_configure_queue(client):
    q = qname("cfg")
    res = await client.queue(q).config(
        {"lease_time": 7, "retry_limit": 1, "retention_seconds": 3600}
    ).create()
    check(isinstance(res, dict), f"configure answered {res!r}")
    check(res.get("configured") is True, f"configured != true: {res!r}")
    check(res.get("queue") == q, f"queue echoed as {res.get('queue')!r}")
    check(res.get("queueId"), f"no queueId: {res!r}")
    check(res.get("partitionId"), f"no partitionId: {res!r}")
    opts = res.get("options") or {}
    # The SDK sends every QUEUE_DEFAULTS key camelCased; the broker echoes them verbatim.
    check(opts.get("leaseTime") == 7, f"leaseTime echo {opts.get('leaseTime')!r}")
    check(opts.get("retryLimit") == 1, f"retryLimit echo {opts.get('retryLimit')!r}")
    # Every option Queen takes is accepted and enforced (docs/decisions.md, "Queue
    # options"), echoed with its effective value: here the SDK's defaults.
    check(opts.get("priority") == 0, f"priority (SDK default) echo {opts.get('priority')!r}")
    check(opts.get("encryptionEnabled") is False, f"encryptionEnabled not echoed: {opts!r}")
    tuned = await client.queue(qname("cfgo")).config({"priority": 4, "max_size": 5000}).create()
    topts = tuned.get("options") or {}
    check(tuned.get("configured") is True and topts.get("priority") == 4
          and topts.get("maxSize") == 5000, f"priority/maxSize must be accepted: {tuned!r}")
    # encryptionEnabled is implemented, but this broker runs without QUEEN_ENCRYPTION_KEY.
    for option, why in (({"encryption_enabled": True}, "QUEEN_ENCRYPTION_KEY"),):
        try:
            refused = await client.queue(qname("cfgx")).config(option).create()
        except Exception as e:  # the SDK raises on a 4xx
            refused = {"error": str(e)}
        name = next(iter(option))
        camel = name.split("_")[0] + "".join(w.capitalize() for w in name.split("_")[1:])
        error = str(refused.get("error"))
        check("configured" not in refused and f"options.{camel}" in error and why in error,
              f"{option} must be refused naming {camel} ({why}): {refused!r}")
    # Re-configuring is idempotent and keeps the queue id.
    again = await client.queue(q).config({"lease_time": 7, "retry_limit": 1}).create()
    check(again.get("queueId") == res.get("queueId"), f"queueId changed: {res!r} -> {again!r}")
    # The partition the configure answer names is the one messages land in.
    await client.queue(q).push([{"data": {"hello": "world"}}])
    msgs = await pop(client, q)
    check(len(msgs) == 1, f"pop after configure gave {msgs!r}")
    check(msgs[0]["partitionId"] == res["partitionId"], f"partitionId {msgs[0]['partitionId']} != {res['partitionId']}")
    ack = await client.ack(msgs[0])
    check(ack.get("success") is True, f"ack: {ack!r}")


async def test_push_consume_ack(client):
    q = qname("ack")
    await configure(client, q, lease_time=2, retry_limit=1)

    # Part 1: push a batch, consume() it with the SDK's automatic batch ack.
    payloads = [{"i": i, "text": f"msg-{i}", "nested": {"ok": True}} for i in range(5)]
    txids = [str(uuid.uuid4()) for _ in payloads]
    res = await client.queue(q).push([{"data": p, "transactionId": t} for p, t in zip(payloads, txids)])
    check(isinstance(res, list) and len(res) == 5, f"push answered {res!r}")
    check(all(r.get("status") == "queued" for r in res), f"push statuses {res!r}")
    check([r.get("transaction_id") for r in res] == txids, f"push transaction ids {res!r}")
    check(len({r.get("message_id") for r in res}) == 5, f"push message ids {res!r}")

    # Re-pushing a transactionId is a duplicate carrying the original message id.
    dup = await client.queue(q).push([{"data": {"dup": True}, "transactionId": txids[0]}])
    check(dup[0].get("status") == "duplicate", f"re-push status {dup!r}")
    check(dup[0].get("message_id") == res[0].get("message_id"), f"duplicate id {dup!r} vs {res[0]!r}")

    seen = []

    async def handler(messages):
        seen.extend(messages)

    await (
        client.queue(q).batch(10).wait(False).limit(5).idle_millis(5000).consume(handler)
    )
    check([m["data"] for m in seen] == payloads, f"consumed payloads {[m.get('data') for m in seen]!r}")
    check([m["transactionId"] for m in seen] == txids, "consumed transaction ids differ")
    check(all(m.get("leaseId") for m in seen), "consumed messages carry no leaseId")

    # Part 2: pop + explicit per-message ack.
    more = [{"j": j} for j in range(3)]
    await client.queue(q).push([{"data": p} for p in more])
    msgs = await pop(client, q, batch=10)
    check([m["data"] for m in msgs] == more, f"popped payloads {[m.get('data') for m in msgs]!r}")
    for m in msgs:
        a = await client.ack(m, True)
        check(a.get("success") is True, f"ack {m['transactionId']}: {a!r}")

    # Nothing was redelivered: wait out the 2 s lease, the queue must be drained.
    await asyncio.sleep(2.6)
    rest = await pop(client, q, batch=10)
    check(rest == [], f"acked messages redelivered after lease expiry: {[m.get('data') for m in rest]!r}")

    # Part 3: consume() with its default long-poll (wait=true) parked on an empty queue
    # wakes up for a push made while it waits.
    got = []

    async def one(message):
        got.append(message["data"])

    t0 = time.monotonic()
    async def long_poll_consume():
        await client.queue(q).batch(1).timeout_millis(5000).limit(1).each().consume(one)

    task = asyncio.create_task(long_poll_consume())
    await asyncio.sleep(0.5)
    await client.queue(q).push([{"data": {"late": True}}])
    await asyncio.wait_for(task, timeout=8)
    check(got == [{"late": True}], f"long-poll consume got {got!r}")
    check(time.monotonic() - t0 < 4.5, f"long-poll took {time.monotonic() - t0:.1f}s to see the push")


async def test_nack_to_dlq(client):
    q = qname("dlq")
    await configure(client, q, lease_time=30, retry_limit=1)
    txid = str(uuid.uuid4())
    await client.queue(q).push([{"data": {"poison": True}, "transactionId": txid}])

    # retryLimit 1 = two deliveries, then the DLQ.
    m1 = await pop(client, q, batch=1)
    check(len(m1) == 1 and m1[0]["transactionId"] == txid, f"first delivery {m1!r}")
    n1 = await client.ack(m1[0], False, {"error": "boom attempt 1"})
    check(n1.get("success") is True, f"first nack: {n1!r}")
    check(not n1.get("dlq"), f"first nack already went to the DLQ: {n1!r}")

    m2 = await pop(client, q, batch=1)
    check(len(m2) == 1 and m2[0]["transactionId"] == txid, f"no redelivery after nack: {m2!r}")
    check(m2[0]["data"] == {"poison": True}, f"redelivered payload {m2[0].get('data')!r}")
    n2 = await client.ack(m2[0], False, {"error": "boom attempt 2: giving up"})
    check(n2.get("success") is True, f"second nack: {n2!r}")
    check(n2.get("dlq") is True, f"second nack did not report dlq: {n2!r}")

    m3 = await pop(client, q, batch=1)
    check(m3 == [], f"message delivered after reaching the DLQ: {m3!r}")

    dlq = await client.queue(q).dlq().get()
    rows = [r for r in dlq.get("messages", []) if r.get("transactionId") == txid]
    check(len(rows) == 1, f"DLQ listing for {q}: {dlq!r}")
    row = rows[0]
    check(row.get("queue") == q, f"DLQ row queue {row.get('queue')!r}")
    check("boom attempt 2: giving up" in (row.get("errorMessage") or ""), f"DLQ errorMessage {row.get('errorMessage')!r}")
    check(row.get("data") == {"poison": True}, f"DLQ data {row.get('data')!r}")
    check((dlq.get("pagination") or {}).get("total") == 1, f"DLQ pagination {dlq.get('pagination')!r}")

    # The same through consume(): a handler that raises is nacked by the SDK with the
    # exception text as the error (consumer_manager.py, _process_message).
    q2 = qname("dlq2")
    await configure(client, q2, lease_time=30, retry_limit=1)
    txid2 = str(uuid.uuid4())
    await client.queue(q2).push([{"data": {"bad": 2}, "transactionId": txid2}])
    attempts = []

    async def failing(message):
        attempts.append(message.get("deliveryAttempt"))
        raise ValueError(f"handler exploded on attempt {len(attempts)}")

    await client.queue(q2).batch(1).wait(False).limit(2).idle_millis(4000).each().consume(failing)
    check(len(attempts) == 2, f"consume saw {len(attempts)} deliveries for retryLimit 1: {attempts!r}")
    check(await pop(client, q2, batch=1) == [], "message still deliverable after its second nack")
    dlq2 = await client.queue(q2).dlq().get()
    rows2 = [r for r in dlq2.get("messages", []) if r.get("transactionId") == txid2]
    check(len(rows2) == 1, f"DLQ listing for {q2}: {dlq2!r}")
    check("handler exploded on attempt 2" in (rows2[0].get("errorMessage") or ""),
          f"DLQ errorMessage {rows2[0].get('errorMessage')!r}")


async def test_lease_renew(client):
    q = qname("lease")
    await configure(client, q, lease_time=2, retry_limit=3)

    # Control: an unrenewed 2 s lease expires and redelivers promptly. This is what gives
    # the "not redelivered after the lease" checks of every scenario their meaning.
    await client.queue(q).push([{"data": {"control": True}}])
    first = await pop(client, q, batch=1)
    check(len(first) == 1 and first[0]["data"] == {"control": True}, f"control pop {first!r}")
    await asyncio.sleep(2.6)
    second = await pop(client, q, batch=1)
    check(len(second) == 1 and second[0]["transactionId"] == first[0]["transactionId"],
          f"unacked message not redelivered 0.6 s after its 2 s lease: {second!r}")
    check(second[0].get("deliveryAttempt") == 2, f"redelivery attempt {second[0].get('deliveryAttempt')!r}")
    check(second[0]["leaseId"] != first[0]["leaseId"], "redelivery reused the expired leaseId")
    stale = await client.ack(first[0])
    check(stale.get("success") is False, f"ack with the expired lease was accepted: {stale!r}")
    a0 = await client.ack(second[0])
    check(a0.get("success") is True, f"ack of the redelivery: {a0!r}")

    await client.queue(q).push([{"data": {"slow": 1}}])

    # Part 1: explicit renew while holding the message past its original lease.
    msgs = await pop(client, q, batch=1)
    check(len(msgs) == 1, f"pop {msgs!r}")
    m = msgs[0]
    r = await client.renew(m)
    check(r.get("success") is True, f"renew: {r!r}")
    check(r.get("newExpiresAt"), f"renew without newExpiresAt: {r!r}")
    check(r.get("renewed", 1) >= 1, f"renew count: {r!r}")
    await asyncio.sleep(2.6)  # past the 2 s lease the pop granted
    other = await pop(client, q, batch=1)
    check(other == [], f"renewed message redelivered to another consumer: {other!r}")
    a = await client.ack(m, True)
    check(a.get("success") is True, f"ack after renew: {a!r}")
    gone = await client.renew(m)
    check(gone.get("success") is False, f"renewing a lease released by its ack succeeded: {gone!r}")

    # Part 2: consume() with the SDK's background renewal during a slow handler.
    await client.queue(q).push([{"data": {"slow": 2}}])
    observed = {}

    async def handler(message):
        await asyncio.sleep(3.2)  # longer than the 2 s lease; renewed every 0.5 s
        observed["concurrent"] = await pop(client, q, batch=1)
        observed["data"] = message["data"]

    await (
        client.queue(q).batch(1).wait(False).limit(1).idle_millis(5000)
        .renew_lease(True, 500).each().consume(handler)
    )
    check(observed.get("data") == {"slow": 2}, f"handler saw {observed!r}")
    check(observed.get("concurrent") == [], f"message leaked to a second consumer during renewal: {observed!r}")
    # The handler's auto-ack committed: a renewed-then-acked message never returns.
    after = await pop(client, q, batch=1)
    check(after == [], f"message still deliverable after consume acked it: {after!r}")


async def test_transaction(client):
    src, dst = qname("tx-src"), qname("tx-dst")
    await configure(client, src, lease_time=2, retry_limit=3)
    await configure(client, dst, lease_time=30, retry_limit=3)
    await client.queue(src).push([{"data": {"order": 42}}])
    msgs = await pop(client, src, batch=1)
    check(len(msgs) == 1, f"pop {msgs!r}")
    m = msgs[0]

    out_txid = str(uuid.uuid4())
    res = await (
        client.transaction()
        .ack(m)
        .queue(dst)
        .push([{"data": {"shipped": 42}, "transactionId": out_txid}])
        .commit()
    )
    check(res.get("success") is True, f"transaction: {res!r}")
    results = res.get("results") or []
    check(len(results) == 2, f"transaction results {results!r}")
    by_type = {r.get("type"): r for r in results}
    check(by_type.get("ack", {}).get("success") is True, f"ack op {results!r}")
    check(by_type.get("push", {}).get("success") is True, f"push op {results!r}")
    check(by_type["push"].get("transactionId") == out_txid, f"push op txid {results!r}")

    pushed = await pop(client, dst, batch=10)
    check(len(pushed) == 1, f"pushed message not consumable: {pushed!r}")
    check(pushed[0]["data"] == {"shipped": 42}, f"pushed payload {pushed[0].get('data')!r}")
    check(pushed[0]["transactionId"] == out_txid, f"pushed txid {pushed[0].get('transactionId')!r}")
    a = await client.ack(pushed[0])
    check(a.get("success") is True, f"ack of pushed message: {a!r}")

    await asyncio.sleep(2.6)  # the source lease (2 s) would have expired had the ack not landed
    again = await pop(client, src, batch=10)
    check(again == [], f"transaction-acked message redelivered: {again!r}")

    # A transaction whose ack names a lease that is gone commits nothing.
    await client.queue(src).push([{"data": {"order": 43}}])
    m2 = (await pop(client, src, batch=1))[0]
    ok = await client.ack(m2)
    check(ok.get("success") is True, f"ack {ok!r}")
    lost_txid = str(uuid.uuid4())
    failed = None
    try:
        failed = await client.transaction().ack(m2).queue(dst).push(
            [{"data": {"never": True}, "transactionId": lost_txid}]
        ).commit()
    except Exception as e:  # noqa: BLE001
        failed = e
    # The SDK raises on success:false (queen/builders/transaction_builder.py, commit()).
    check(isinstance(failed, Exception), f"commit with a released lease did not fail: {failed!r}")
    leaked = await pop(client, dst, batch=10)
    check(all(x.get("transactionId") != lost_txid for x in leaked),
          f"push of a rejected transaction was committed (commit -> {failed!r})")


async def test_push_delayed_message(client):
    """Queen's own SDK test pushDelayedMessage (clients/client-js/test-v2/push.js) with the
    Python SDK, step for step: the same queue name, option, transactionId, payload, pops
    and sleep. Queen's runner first deletes its test queues; so does this."""
    with contextlib.suppress(Exception):
        await client.queue("test-queue-delayed").delete()
    q = await client.queue("test-queue-delayed").config({"delayed_processing": 2}).create()
    check(q.get("configured") is True, f"configure: {q!r}")
    check((q.get("options") or {}).get("delayedProcessing") == 2, f"delayedProcessing echo: {q!r}")
    await client.queue("test-queue-delayed").push(
        [{"transactionId": "test-transaction-dealyed-id", "data": {"message": "Hello, world!", "aaa": "1"}}]
    )
    pop1 = await client.queue("test-queue-delayed").batch(1).wait(False).pop()
    check(pop1 == [], f"Message not delayed: {pop1!r}")
    # pop() answers [] on errors too: the broker really said 204 (nothing yet).
    check(TRANSPORT.log[-1][3] == 204, f"immediate pop answered {TRANSPORT.log[-1][3]}")
    await asyncio.sleep(2.5)
    pop2 = await client.queue("test-queue-delayed").batch(1).wait(True).pop()
    check(len(pop2) == 1, f"Message not delivered after the delay: {pop2!r}")
    check(pop2[0]["transactionId"] == "test-transaction-dealyed-id", f"delivered {pop2[0]!r}")
    check(pop2[0]["data"] == {"message": "Hello, world!", "aaa": "1"}, f"payload {pop2[0].get('data')!r}")
    await client.queue("test-queue-delayed").delete()


async def test_admin_helpers(client):
    """The SDK's admin helpers against the broker: the resource, status and consumer-group
    views, and a dead-lettered message retried (redriven) and deleted by address."""
    q = qname("admin")
    admin = client.admin
    await configure(client, q, retry_limit=0, lease_time=30)
    bad, bad2 = str(uuid.uuid4()), str(uuid.uuid4())
    await client.queue(q).push([{"data": {"bad": 1}, "transactionId": bad}, {"data": {"ok": 1}},
                                {"data": {"bad": 2}, "transactionId": bad2}])
    m = await pop(client, q, batch=1)
    n = await client.ack(m[0], False, {"error": "poison"})
    check(n.get("dlq") is True, f"retryLimit 0: the first nack dead-letters: {n!r}")
    pid = m[0]["partitionId"]

    listed = [x for x in (await admin.list_queues())["queues"] if x["name"] == q]
    check(len(listed) == 1, f"list_queues does not list {q}")
    check(listed[0]["messages"]["total"] == 3 and listed[0]["messages"]["deadLetter"] == 1,
          f"list_queues figures {listed[0]['messages']!r}")
    detail = await admin.get_queue(q)
    check(detail["totals"]["pending"] == 2 and detail["partitions"][0]["id"] == pid, f"get_queue {detail!r}")
    depth = await admin.get_queue_depth(q)
    check(depth["pending"] == 2 and depth["partitions"][0]["pending"] == 2, f"get_queue_depth {depth!r}")
    parts = await admin.get_partitions(queue=q)
    check(parts["partitions"][0]["id"] == pid, f"get_partitions {parts!r}")
    overview = await admin.get_overview()
    check(overview["queues"] >= 1 and "lag" in overview, f"get_overview {overview!r}")
    stats = await admin.get_queue_stats(queue=q)
    check(stats["queues"][0]["messages"]["deadLetter"] == 1, f"get_queue_stats {stats!r}")
    sdetail = await admin.get_queue_detail(q)
    check(sdetail["queue"]["config"]["retryLimit"] == 0, f"get_queue_detail {sdetail!r}")
    groups = [g for g in await admin.list_consumer_groups() if g["queueName"] == q]
    check([g["name"] for g in groups] == ["__QUEUE_MODE__"], f"list_consumer_groups {groups!r}")
    qm = await admin.get_consumer_group("__QUEUE_MODE__")
    check(qm[q]["partitions"][0]["offsetLag"] == 2, f"get_consumer_group {qm.get(q)!r}")
    lagging = await admin.get_lagging_consumers(0)
    check(any(x["queue_name"] == q for x in lagging), "get_lagging_consumers misses the queue")

    # retry_message: the dead-lettered message goes back as a new message, once.
    r = await admin.retry_message(pid, bad)
    check(r.get("success") is True and r.get("result") == "moved" and r.get("dlqRowRemoved") is True,
          f"retry_message {r!r}")
    redriven = r["replayedAs"]["transaction_id"]
    check(redriven.startswith("dlq:") and redriven.endswith(":" + bad), f"redrive transactionId {redriven!r}")
    dlq = await client.queue(q).dlq().get()
    check(dlq.get("messages") == [], f"DLQ after retry_message {dlq!r}")
    msgs = await pop(client, q, batch=10)
    check([x["data"] for x in msgs] == [{"ok": 1}, {"bad": 2}, {"bad": 1}], f"after retry {msgs!r}")
    check(msgs[2]["transactionId"] == redriven, f"redriven delivery {msgs[2]!r}")
    # Retried once only: the address has no DLQ row any more.
    raised = None
    try:
        await admin.retry_message(pid, bad)
    except Exception as e:  # noqa: BLE001  (the SDK raises on 404)
        raised = e
    check(raised is not None and "not found" in str(raised).lower(), f"second retry_message: {raised!r}")

    # delete_message: dead-letter the second poison message, then delete its row.
    a0 = await client.ack(msgs[0], True)
    check(a0.get("success") is True, f"ack {a0!r}")
    n2 = await client.ack(msgs[1], False, {"error": "poison 2"})
    check(n2.get("dlq") is True, f"second dead letter {n2!r}")
    rest = await pop(client, q, batch=10)
    check([x["transactionId"] for x in rest] == [redriven], f"after the second dead letter {rest!r}")
    a2 = await client.ack(rest[0], True)
    check(a2.get("success") is True, f"ack of the redriven message {a2!r}")
    d = await admin.delete_message(pid, bad2)
    check(d.get("success") is True and d.get("deleted") == 1, f"delete_message {d!r}")
    check((await client.queue(q).dlq().get()).get("messages") == [], "DLQ after delete_message")
    check(await pop(client, q, batch=10) == [], "deleting a DLQ row redelivers nothing")


async def test_kv(client):
    """client.kv (Queen 2.x): versions fence a stale writer, putIfAbsent has one winner,
    incr refuses past max, a bad namespace is the SDK's kv_bad_request; and tx.once is
    a gate that shares the fate of the push beside it (docs/decisions.md, "Key/value")."""
    ns = qname("kv")
    put = await client.kv.put(ns, "round:trip", {"state": "held"}, ttl_seconds=60)
    check(put["applied"] is True and put["version"] > 0, f"put {put!r}")
    got = await client.kv.get(ns, "round:trip")
    check(got["found"] is True and got["value"] == {"state": "held"}, f"get {got!r}")
    check(not await client.kv.get(ns, "never:written"), "a miss is falsy")
    stale = await client.kv.put(ns, "round:trip", 2, ttl_seconds=60, expect=put["version"] - 1)
    check(stale["applied"] is False and stale["reason"] == "version", f"stale {stale!r}")
    results = await asyncio.gather(
        *[client.kv.put_if_absent(ns, "claim", {"by": i}, ttl_seconds=60) for i in range(6)])
    check(sum(1 for r in results if r["applied"]) == 1, f"one winner {results!r}")
    check(await client.kv.once(ns, "once:1", ttl_seconds=60) is True, "first once")
    check(await client.kv.once(ns, "once:1", ttl_seconds=60) is False, "second once")
    for expected in (1, 2):
        r = await client.kv.incr(ns, "limit", max=2, ttl_seconds=60)
        check(r["applied"] is True and int(r["value"]) == expected, f"incr {r!r}")
    r = await client.kv.incr(ns, "limit", max=2, ttl_seconds=60)
    check(r["applied"] is False and r["reason"] == "limit", f"incr past max {r!r}")
    many = await client.kv.get_many(ns, ["claim", "nope"])
    check(many["missing"] == ["nope"] and len(many["rows"]) == 1, f"get_many {many!r}")
    for i in range(3):
        await client.kv.put(ns, f"walk:{i}", i, ttl_seconds=60)
    rows = await client.kv.list_all(ns, "walk:", limit=2)
    check([r["key"] for r in rows] == ["walk:0", "walk:1", "walk:2"], f"list_all {rows!r}")
    code = None
    try:
        await client.kv.put("NOT A NAMESPACE", "k", 1, ttl_seconds=60)
    except Exception as e:  # noqa: BLE001  (KvError)
        code = getattr(e, "code", None)
    check(code == "kv_bad_request", f"bad namespace code {code!r}")

    q = qname("kv-gate")
    await configure(client, q, lease_time=30)
    first = await client.transaction().queue(q).push([{"data": {"attempt": 1}}]).once(
        ns, "gate:evt-1", ttl_seconds=300).commit()
    check(first["success"] is True, f"first bundle {first!r}")
    second = await client.transaction().queue(q).push([{"data": {"attempt": 2}}]).once(
        ns, "gate:evt-1", ttl_seconds=300).commit()
    check(second["success"] is False and second["reason"] == "kv_precondition"
          and second["kvReason"] == "exists" and second["failedIndex"] == 1,
          f"the losing bundle {second!r}")
    msgs = await pop(client, q, batch=10)
    check([m["data"] for m in msgs] == [{"attempt": 1}], f"the losing bundle pushed {msgs!r}")


async def test_locks(client):
    """client.lock / client.semaphore (Queen 2.x): one holder, a guarded transaction
    commits while held, a higher token for the next holder, a semaphore of 2 grants 2
    (docs/decisions.md, "Locks")."""
    name = qname("lock")
    a = client.lock(name, ttl_seconds=30)
    b = client.lock(name, ttl_seconds=30)
    try:
        check(await a.acquire() is True, "a acquires")
        check(await b.acquire() is False, "b must not acquire a held lock")
        token = a.token
        who = await client.locks.get(name)
        check(who["holders"][0]["owner"] == a.owner and who["holders"][0]["token"] == token,
              f"get {who!r}")
        row = await client.kv.get("queen-locks", f"{name}#0")
        check(row["version"] == token and row["value"]["owner"] == a.owner, f"the permit row {row!r}")
        q = qname("lock-q")
        await configure(client, q, lease_time=30)
        res = await client.transaction().guard(a).queue(q).push([{"data": {"step": 1}}]).commit()
        check(res["success"] is True, f"guarded step {res!r}")
        check(await a.release() is True, "release")
        check(await b.acquire() is True, "free after the release")
        check(b.token > token, "a later holder, a higher token")
        msgs = await pop(client, q, batch=10)
        check([m["data"] for m in msgs] == [{"step": 1}], f"guarded push {msgs!r}")
    finally:
        await a.release()
        await b.release()
    sem = [client.semaphore(qname("sem"), 2, ttl_seconds=30) for _ in range(4)]
    try:
        got = [await p.acquire() for p in sem]
        check(got == [True, True, False, False], f"a semaphore of 2 granted {got!r}")
        check(sorted(p.slot for p in sem if p.held) == [0, 1], "one holder per slot")
    finally:
        for p in sem:
            await p.release()


async def test_timers(client):
    """client.timers / client.timer(queue) / tx.timer() of the 2.x SDK: a timer arrives
    once, not before its deliverAt, with the txn and message id promised at schedule
    time; reschedule, cancel (then absent), the keyset list, and the rider of a
    transaction, all checked against what the queue then holds."""
    q = qname("timers")
    await configure(client, q)
    t0 = time.monotonic()
    res = await client.timers.schedule(q, "fire:1", {"orderId": "9f1"}, delay_ms=500)
    check(res["status"] == "scheduled" and res["ok"] is True and res["messageId"], f"schedule {res!r}")
    check(await pop(client, q, batch=10) == [], "a timer must not arrive before its deliverAt")
    got = []
    while not got and time.monotonic() - t0 < 10:
        got = await pop(client, q, batch=10)
        if not got:
            await asyncio.sleep(0.05)
    check(time.monotonic() - t0 >= 0.5, "arrived early")
    check([m["data"] for m in got] == [{"orderId": "9f1"}], f"delivered {got!r}")
    check(got[0]["transactionId"] == res["txn"] and got[0]["id"] == res["messageId"], f"ids {got!r}")
    check((await client.timers.peek(q, "fire:1"))["found"] is False, "no row after delivery")

    first = await client.timers.schedule(q, "later", {"v": 1}, delay_ms=3_600_000)
    again = await client.timers.reschedule(q, "later", {"v": 2}, delay_ms=1_800_000)
    check(again["status"] == "rescheduled" and again["deliverAt"] < first["deliverAt"], f"reschedule {again!r}")
    for i in range(3):
        await client.timer(q).key(f"list:{i}").payload({"i": i}).after_ms(3_600_000).schedule()
    rows = await client.timers.list_all(q, limit=2)
    check([r["timerKey"] for r in rows] == ["later", "list:0", "list:1", "list:2"], f"list_all {rows!r}")
    gone = await client.timers.cancel(q, "later", txn=again["txn"])
    check(gone["status"] == "cancelled" and gone["txn"] == again["txn"], f"cancel {gone!r}")
    absent = await client.timers.cancel(q, "later", txn=again["txn"])
    check(absent["status"] == "absent" and not absent, f"cancel again {absent!r}")
    # A batch applies in order (Queen's rule): one key may appear several times.
    op = client.timers.op
    r = await client.timers.batch([op.schedule(q, "dup", {"v": 1}, delay_ms=60_000),
                                   op.cancel(q, "dup")])
    check([x["status"] for x in r] == ["scheduled", "cancelled"] and all(r),
          f"schedule then cancel {r!r}")
    check((await client.timers.peek(q, "dup"))["found"] is False, "cancelled in the same call")
    r = await client.timers.batch([op.cancel(q, "dup"),
                                   op.schedule(q, "dup", {"v": 2}, delay_ms=60_000)])
    check([x["status"] for x in r] == ["absent", "scheduled"], f"cancel then schedule {r!r}")
    r = await client.timers.batch([op.schedule(q, "dup", {"v": 3}, delay_ms=60_000),
                                   op.schedule(q, "dup", {"v": 4}, delay_ms=60_000)])
    check([x["status"] for x in r] == ["rescheduled", "rescheduled"], f"schedule twice {r!r}")
    peek = await client.timers.peek(q, "dup")
    check(peek["found"] is True and peek["txn"] == r[1]["txn"], f"the second wins {peek!r}")
    await client.timers.cancel(q, "dup")

    # The rider: committed with the push beside it.
    r = await (client.transaction().queue(q).push([{"data": {"with": "timer"}}])
               .timer(q).key("saga:1").payload({"saga": 1}).after_ms(60_000).schedule().commit())
    check(r["success"] is True, f"transaction with a timer {r!r}")
    check((await client.timers.peek(q, "saga:1"))["found"] is True, "the rider's timer is pending")
    r = await client.transaction().timer(q).key("saga:1").cancel().commit()
    check(r["success"] is True and (await client.timers.peek(q, "saga:1"))["found"] is False, f"rider cancel {r!r}")
    for i in range(3):
        await client.timers.cancel(q, f"list:{i}")


async def test_trace_seek_browse(client):
    """msg.trace() inside consume, the admin trace reads, a seek that replays, the
    subscription update, and the message listing and lookup, all through the SDK."""
    q = qname("seek")
    admin = client.admin
    name = f"py-trace-{RUN}"
    # A group of this run only: a subscription update moves the group's records on every
    # queue, and the test database holds other runs' groups.
    g = f"py-g-{RUN}"
    await configure(client, q, lease_time=30)
    txids = [str(uuid.uuid4()) for _ in range(3)]
    await client.queue(q).push([{"data": {"i": i}, "transactionId": t} for i, t in enumerate(txids)])
    traced = []

    async def handler(message):
        r = await message["trace"]({"traceName": name, "eventType": "step", "data": {"i": message["data"]["i"]}})
        traced.append(r)

    await client.queue(q).group(g).batch(1).wait(False).limit(3).each().consume(handler)
    check(len(traced) == 3 and all(r.get("success") is True for r in traced), f"msg.trace() answers {traced!r}")
    by_name = await admin.get_traces_by_name(name)
    check(by_name.get("total") == 3, f"get_traces_by_name {by_name!r}")
    pid = by_name["traces"][0]["partition_id"]
    one = await admin.get_traces_for_message(pid, txids[0])
    check([t["data"] for t in one["traces"]] == [{"i": 0}], f"get_traces_for_message {one!r}")
    names = await admin.get_trace_names(limit=1000)
    check(any(n["trace_name"] == name for n in names["trace_names"]), f"get_trace_names {names!r}")

    # Everything consumed; a seek back replays all three, a seek to the end skips them.
    listed = await admin.list_messages(queue=q)
    check([m["transactionId"] for m in listed["messages"]] == txids[::-1], f"list_messages {listed!r}")
    check(all(m["status"] == "completed" for m in listed["messages"]), f"statuses {listed!r}")
    s = await admin.seek_consumer_group(g, q, {"timestamp": "2000-01-01T00:00:00Z"})
    check(s.get("success") is True and s.get("replayed") == 3, f"seek back {s!r}")
    detail = await admin.get_message(pid, txids[1])
    check(detail["payload"] == {"i": 1} and detail["status"] == "pending", f"get_message {detail!r}")
    again = []

    async def collect(message):
        again.append(message["data"]["i"])

    await client.queue(q).group(g).batch(10).wait(False).limit(3).each().consume(collect)
    check(again == [0, 1, 2], f"replayed after the seek {again!r}")
    s = await admin.seek_consumer_group(g, q, {"toEnd": True})
    check(s.get("success") is True, f"seek to end {s!r}")
    u = await client.update_consumer_group_timestamp(g, "2000-01-01T00:00:00Z")
    check(u.get("rowsUpdated") == 1, f"update_consumer_group_timestamp {u!r}")


async def test_fetch_by_offset(client):
    """queue(...).fetch() and changed_since() of the 2.x SDK: reads by offset, exactly
    what was pushed, in order, with the high watermark, and partition discovery; no
    lease, so a consumer still gets every message."""
    q = qname("fetch")
    await configure(client, q)
    await client.queue(q).partition("p1").push([{"data": {"i": i}, "transactionId": f"f{i}"} for i in range(5)])
    read = await client.queue(q).fetch(["p1", "nobody"])
    recs = read["p1"]["records"]
    check([r["transactionId"] for r in recs] == [f"f{i}" for i in range(5)], f"fetch records {read!r}")
    check([r["payload"] for r in recs] == [{"i": i} for i in range(5)], f"fetch payloads {recs!r}")
    check([r["offset"] for r in recs] == list(range(5)), f"fetch offsets {recs!r}")
    check(read["p1"]["highWatermark"] == 5 and read["p1"]["nextOffset"] == 5, f"fetch ends {read['p1']!r}")
    check(read["nobody"]["records"] == [], f"fetch of a partition nobody wrote {read['nobody']!r}")
    tail = await client.queue(q).fetch("p1", offsets={"p1": 3})
    check([r["transactionId"] for r in tail["p1"]["records"]] == ["f3", "f4"], f"fetch from 3 {tail!r}")
    # Small budgets: the SDK asks again until the end it first saw.
    looped = await client.queue(q).fetch(["p1"], max_bytes=10)
    check(len(looped["p1"]["records"]) == 5, f"fetch in small steps {looped!r}")
    # Discovery: p1 is listed; since the answer's safeTime, only what is written later.
    changed = await client.queue(q).changed_since()
    check([p["name"] for p in changed["partitions"]] == ["Default", "p1"], f"changed_since {changed!r}")
    await client.queue(q).partition("p2").push([{"data": {"i": 9}, "transactionId": "f9"}])
    later = await client.queue(q).changed_since(changed["safeTime"])
    check([p["name"] for p in later["partitions"]] == ["p2"], f"changed_since(safeTime) {later!r}")
    got = await client.queue(q).partition("p1").batch(10).wait(False).pop()
    check(len(got) == 5, f"a pop after the fetches still gets every message: {got!r}")


async def test_namespace_pop(client):
    """A pop by namespace and by task through the 2.x SDK (`queue().namespace(...)`)."""
    ns = qname("ns")
    for q in ("alpha", "beta"):
        await client.queue(f"{ns}.{q}").push([{"data": {"q": q}, "transactionId": f"{q}-1"}])
    got = await client.queue().namespace(ns).batch(1).wait(False).pop()
    check(len(got) == 1 and got[0]["data"]["q"] in ("alpha", "beta"), f"namespace pop {got!r}")
    both = await client.queue().namespace(ns).task("beta").batch(10).wait(False).pop()
    remaining = {"alpha", "beta"} - {got[0]["data"]["q"]}
    if "beta" in remaining:
        check([m["data"] for m in both] == [{"q": "beta"}], f"namespace+task pop {both!r}")
    else:
        check(both == [], f"beta was already served: {both!r}")


async def test_conflation(client):
    """The 2.x SDK's `.conflation()` (docs/decisions.md, "Conflation"): the group gets the
    newest message only, its ack retires the rest, the SDK sees the echo on empty pops too
    (it raises when the echo is missing), and the refusals with no group and with
    commit-on-delivery raise."""
    q = qname("conflate")
    await client.queue(q).push([{"data": {"n": i}, "transactionId": f"c{i}"} for i in range(1, 6)])
    got = await client.queue(q).group("last").conflation().batch(10).wait(False).pop()
    check([m["data"] for m in got] == [{"n": 5}], f"a conflating pop gets the newest only: {got!r}")
    ack = await client.ack(got[0], True, {"group": "last"})
    check(ack.get("success", True) is not False, f"the newest's ack: {ack!r}")
    empty = await client.queue(q).group("last").conflation().batch(10).wait(False).pop()
    check(empty == [], f"everything behind it was retired: {empty!r}")
    every = await client.queue(q).group("all").batch(10).wait(False).pop()
    check(len(every) == 5, f"a group without conflation gets every message: {every!r}")
    for builder in (client.queue(q).conflation(),
                    client.queue(q).group("x").conflation().commit_on_delivery()):
        try:
            await builder.wait(False).pop()
            raised = "returned"
        except Exception as e:  # the SDK raises a conflating pop's 400
            raised = str(e)
        check(raised != "returned", f"a refused conflating pop must raise: {raised!r}")


async def test_binary_push(client):
    """binary_push (QPB1), push_compression (framed groups, and QTB1 for a transaction's
    pushes) and framed_pop (answered JSON here: docs/decisions.md, "Binary bodies"): the
    same messages arrive, in order, as with the JSON body."""
    plain_q, framed_q = qname("bin-plain"), qname("bin-framed")
    seen = len(TRANSPORT.log)
    binary = Queen(url=BASE_URL, transport=TRANSPORT, retry_attempts=1, timeout_millis=10000,
                   binary_push=True)
    framed = Queen(url=BASE_URL, transport=TRANSPORT, retry_attempts=1, timeout_millis=10000,
                   binary_push=True, push_compression=True, framed_pop=True)
    try:
        big = 123456789012345678901234567890
        res = await binary.queue(plain_q).partition("p").push(
            [{"data": {"n": big, "i": i}, "transactionId": f"bp-{i}"} for i in range(3)])
        check([r.get("status") for r in res] == ["queued"] * 3, f"binary push {res!r}")
        sent = [r for r in TRANSPORT.log[seen:] if r[1].endswith("/api/v1/push")]
        check(sent and sent[-1][2][:4] == b"QPB1", "binary_push did not send QPB1")
        again = await binary.queue(plain_q).partition("p").push(
            [{"data": {"i": 0}, "transactionId": "bp-0"}])
        check(again[0].get("status") == "duplicate", f"binary duplicate {again!r}")
        got = await pop(client, plain_q, batch=10)
        check([m["transactionId"] for m in got] == ["bp-0", "bp-1", "bp-2"], f"pop {got!r}")
        check(got[0]["data"]["n"] == big, f"payload {got[0]['data']!r}")
        for m in got:
            await client.ack(m)

        seen = len(TRANSPORT.log)
        res = await framed.queue(framed_q).push([{"data": {"k": i}} for i in range(4)])
        check(len(res) == 4 and all(r.get("status") == "queued" for r in res), f"{res!r}")
        body = [r for r in TRANSPORT.log[seen:] if r[1].endswith("/api/v1/push")][-1][2]
        check(body[:5] == b"QPB1\x08", f"push_compression sent flags {body[:5]!r}")
        msgs = await framed.queue(framed_q).batch(10).wait(False).pop()
        check([m["data"] for m in msgs] == [{"k": i} for i in range(4)], f"framed {msgs!r}")
        check([m["id"] for m in msgs] == [r["message_id"] for r in res], "client's ids kept")

        # A transaction: the ack in the JSON head, the pushes as framed groups (QTB1).
        seen = len(TRANSPORT.log)
        out = await (
            framed.transaction()
            .queue(plain_q).push([{"data": {"moved": 1}, "transactionId": "bt-1"}])
            .ack(msgs[0])
            .commit()
        )
        check(out.get("success") is True, f"binary transaction {out!r}")
        kinds = [r.get("type") for r in out.get("results", [])]
        check(kinds == ["push", "ack"], f"results back in the caller's order: {kinds!r}")
        tx = [r for r in TRANSPORT.log[seen:] if r[1].endswith("/api/v1/transaction")][-1][2]
        check(tx[:4] == b"QTB1", f"transaction body {tx[:4]!r}")
        moved = await pop(client, plain_q, batch=10)
        check([m["data"] for m in moved] == [{"moved": 1}], f"moved {moved!r}")
    finally:
        with contextlib.redirect_stdout(sys.stderr):
            await binary.close()
            await framed.close()


async def test_ephemeral(client):
    """client.ephemeral (Queen 2.x): a declared queue, fan-out across groups and
    competition within one, a retry that comes back with attempts+1, the long-poll's
    empty list, commit on delivery, a reset that makes earlier ids stale, and the one 404
    (docs/decisions.md, "Ephemeral queues")."""
    from queen.errors import EphemeralQueueNotFoundError

    eph = client.ephemeral
    q = qname("eph")
    conf = await eph.configure(q, max_length=100, retry_limit=1, lease_seconds=30)
    check(conf["created"] is True and conf["options"]["maxLength"] == 100
          and conf["options"]["policy"] == "reject", f"configure {conf!r}")
    pushed = await eph.push(q, [{"payload": {"n": 1}}, {"n": 2}], partition="room-1")
    check(pushed["pushed"] == 2, f"push {pushed!r}")
    a = (await eph.pop(q, batch=10, group="workers"))["messages"]
    check([m["payload"] for m in a] == [{"n": 1}, {"n": 2}]
          and all(m["attempts"] == 0 and m["partition"] == "room-1" for m in a), f"pop {a!r}")
    check(not (await eph.pop(q, batch=10, group="workers"))["messages"], "one group competes")
    tail = (await eph.pop(q, batch=10, group="tail"))["messages"]
    check(len(tail) == 2, f"another group fans out {tail!r}")
    done = await eph.ack(q, a[0], group="workers")
    check(done["results"][0]["outcome"] == "acked", f"ack {done!r}")
    retry = await eph.ack(q, [{"id": a[1]["id"], "status": "retry"}], group="workers")
    check(retry["results"][0]["outcome"] == "redelivered", f"retry {retry!r}")
    back = (await eph.pop(q, group="workers"))["messages"]
    check(len(back) == 1 and back[0]["attempts"] == 1 and back[0]["payload"] == {"n": 2},
          f"redelivered {back!r}")
    empty = await eph.pop(q, group="workers", wait=True, timeout=200)
    check(empty["messages"] == [], f"an empty long-poll {empty!r}")
    depth = await eph.depth(q)
    check(depth["length"] == 2 and depth["options"]["retryLimit"] == 1, f"depth {depth!r}")
    listed = await eph.queues()
    check(any(x["queue"] == q and x["declared"] for x in listed["queues"]), f"queues {listed!r}")
    auto = (await eph.pop(q, batch=10, group="auto", commit_on_delivery=True))["messages"]
    check(len(auto) == 2, f"commit on delivery {auto!r}")
    nothing = await eph.ack(q, auto[0], group="auto")
    check(nothing["results"][0]["outcome"] == "unknown", f"nothing to ack {nothing!r}")
    reset = await eph.reset(q)
    check(reset["dropped"] == 2, f"reset {reset!r}")
    stale = await eph.ack(q, back[0], group="workers")
    check(stale["results"][0]["outcome"] == "stale", f"after a reset {stale!r}")
    gone = await eph.delete(q)
    check(gone["deleted"] is True, f"delete {gone!r}")
    missing = None
    try:
        await eph.depth(q)
    except EphemeralQueueNotFoundError as e:
        missing = e.code
    check(missing == "ephemeral_queue_not_found", f"depth of a deleted queue {missing!r}")


async def drain(client, queue, group, want, within=15.0):
    """Pops `queue` for `group` (auto-acked) until `want` messages arrived or `within`
    seconds passed; returns their payloads."""
    got = []
    deadline = time.monotonic() + within
    while len(got) < want and time.monotonic() < deadline:
        msgs = await client.queue(queue).group(group).batch(100).wait(False).pop()
        for m in msgs:
            got.append(m["data"])
            await client.ack(m, True, {"group": group})
        if not msgs:
            await asyncio.sleep(0.1)
    return got


async def streams_state(query_id, partition_id):
    """The state rows of a (query, partition), read through the broker's state route (a
    check of what the SDK wrote; the SDK reads it the same way)."""
    async with httpx.AsyncClient() as h:
        r = await h.post(f"{BASE_URL}/streams/v1/state/get",
                         json={"query_id": query_id, "partition_id": partition_id, "keys": []})
    check(r.status_code == 200, f"state/get {r.status_code} {r.text}")
    return r.json()["rows"]


async def test_streams_tumbling_sum(client):
    """queen.streams: a tumbling-window sum into a sink queue (docs/decisions.md,
    "Streams"): every window's sum arrives once, their total is the input's, the source
    is fully acknowledged and the windows' state is gone once flushed."""
    from queen import Stream

    src, sink = qname("st-sum-src"), qname("st-sum-sink")
    await configure(client, src)
    await configure(client, sink)
    await client.queue(src).push([{"data": {"amount": i}} for i in range(1, 41)])
    runner = await (
        Stream.from_(client.queue(src))
        .window_tumbling(seconds=1, idle_flush_ms=300)
        .reduce(lambda acc, d: acc + d["amount"], 0)
        .to(client.queue(sink))
        .run(query_id=qname("sum"), url=BASE_URL, batch_size=15, max_partitions=1)
    )
    try:
        total, got = 0, []
        deadline = time.monotonic() + 15
        while total < 820 and time.monotonic() < deadline:
            got += await drain(client, sink, "check", 1, within=0.5)
            total = sum(g["value"] for g in got)
        check(total == 820, f"the windows' sums add up to the input's: {got!r}")
        m = runner.metrics()
        check(m["messagesTotal"] == 40 and m["errorsTotal"] == 0, f"runner {m!r}")
        peek = await client.queue(src).group("peek").batch(1).wait(False).pop()
        rows = await streams_state(m["serverQueryId"], peek[0]["partitionId"])
        check(rows == [], f"flushed windows leave no state: {rows!r}")
        check(await drain(client, sink, "check", 1, within=1.0) == [], "each window once")
    finally:
        await runner.stop()


async def test_streams_key_by_reduce(client):
    """queen.streams: keyBy + a windowed reduce + a post-map into a sink partitioned by
    key: each user's count and sum arrive in the user's partition."""
    from queen import Stream

    src, sink = qname("st-key-src"), qname("st-key-sink")
    await configure(client, src)
    await configure(client, sink)
    users = ["alice", "bob", "carol"]
    await client.queue(src).push(
        [{"data": {"user": users[i % 3], "amount": i}} for i in range(30)])
    runner = await (
        Stream.from_(client.queue(src))
        .key_by(lambda m: m["data"]["user"])
        .window_tumbling(seconds=1, idle_flush_ms=300)
        .reduce(lambda acc, d: {"n": acc["n"] + 1, "sum": acc["sum"] + d["amount"]},
                {"n": 0, "sum": 0})
        .map(lambda acc, ctx: {"user": ctx["key"], **acc})
        .to(client.queue(sink), partition=lambda v: v["user"])
        .run(query_id=qname("per-user"), url=BASE_URL, batch_size=30, max_partitions=1)
    )
    try:
        per_user = {}
        deadline = time.monotonic() + 15
        while sum(v["n"] for v in per_user.values()) < 30 and time.monotonic() < deadline:
            for g in await drain(client, sink, "check", 1, within=0.5):
                u = per_user.setdefault(g["user"], {"n": 0, "sum": 0})
                u["n"] += g["n"]
                u["sum"] += g["sum"]
        want = {u: {"n": 10, "sum": sum(i for i in range(30) if i % 3 == k)}
                for k, u in enumerate(users)}
        check(per_user == want, f"per user {per_user!r}, want {want!r}")
        for u in users:
            part = await client.queue(sink).partition(u).group("by-partition").batch(10) \
                .wait(False).pop()
            check(part and all(m["data"]["user"] == u for m in part), f"partition {u}: {part!r}")
    finally:
        await runner.stop()


async def test_streams_recovery(client):
    """queen.streams: a runner process killed (SIGKILL) mid-stream and started again
    under the same query id: every source message is counted in the state once and
    arrives in the sink once (the cycle commits state, sink and ack together; the batch
    the kill interrupted is redelivered when its lease runs out)."""
    src, sink, query = qname("st-rec-src"), qname("st-rec-sink"), qname("recovery")
    n = 60
    await configure(client, src, leaseTime=2)
    await configure(client, sink)
    await client.queue(src).push([{"data": {"n": i}} for i in range(n)])
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_runner.py")

    async def start():
        p = await asyncio.create_subprocess_exec(
            sys.executable, runner, BASE_URL, src, sink, query, stdout=asyncio.subprocess.PIPE)
        line = (await asyncio.wait_for(p.stdout.readline(), 10)).decode().split()
        check(line[:1] == ["ready"], f"runner start: {line!r}")
        return p, line[1]

    p, query_id = await start()
    try:
        seen = await drain(client, sink, "observer", 10)
        check(len(seen) >= 10, f"the stream ran before the kill: {seen!r}")
        p.kill()
        await p.wait()
        p, again = await start()
        check(again == query_id, "the same query after a restart")
        got = await drain(client, sink, "verify", n, within=15)
        check(sorted(g["n"] for g in got) == list(range(n)), f"each message once: {got!r}")
        check(await drain(client, sink, "verify", 1, within=1.0) == [], "nothing twice")
        peek = await client.queue(src).group("peek").batch(1).wait(False).pop()
        rows = await streams_state(query_id, peek[0]["partitionId"])
        check([r["value"] for r in rows] == [{"n": n, "sum": n * (n - 1) // 2}],
              f"the state counted each message once: {rows!r}")
    finally:
        if p.returncode is None:
            p.kill()
            await p.wait()


SCENARIOS = [
    ("configure_queue", test_configure_queue),
    ("push_consume_ack", test_push_consume_ack),
    ("nack_to_dlq", test_nack_to_dlq),
    ("lease_renew", test_lease_renew),
    ("transaction_ack_and_push", test_transaction),
    ("kv", test_kv),
    ("locks", test_locks),
    ("push_delayed_message", test_push_delayed_message),
    ("admin_helpers", test_admin_helpers),
    ("trace_seek_browse", test_trace_seek_browse),
    ("fetch_by_offset", test_fetch_by_offset),
    ("namespace_pop", test_namespace_pop),
    ("conflation", test_conflation),
    ("timers", test_timers),
    ("binary_push", test_binary_push),
    ("ephemeral", test_ephemeral),
    ("streams_tumbling_sum", test_streams_tumbling_sum),
    ("streams_key_by_reduce", test_streams_key_by_reduce),
    ("streams_recovery", test_streams_recovery),
]


async def main():
    global TRANSPORT
    transport = TRANSPORT = RecordingTransport()
    client = Queen(url=BASE_URL, transport=transport, retry_attempts=1, timeout_millis=10000)
    passed = failed = 0
    for name, fn in SCENARIOS:
        mark = len(transport.log)
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(fn(client), timeout=25)
            passed += 1
            print(f"test python::{name} ... ok", flush=True)
            print(f"  {name}: {time.monotonic() - t0:.1f}s", file=sys.stderr)
            if os.environ.get("QUEEN_E2E_TRACE"):
                transport.dump(mark)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            failed += 1
            print(f"test python::{name} ... FAILED", flush=True)
            print(f"  {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exc(limit=3, file=sys.stderr)
            print("  HTTP exchanges of this scenario:", file=sys.stderr)
            transport.dump(mark)
            sys.stderr.flush()
    # Best-effort cleanup of this run's queues.
    mark = len(transport.log)
    for tag in ("cfg", "ack", "dlq", "dlq2", "lease", "tx-src", "tx-dst", "admin", "seek"):
        try:
            await client.queue(qname(tag)).delete()
        except Exception:  # noqa: BLE001
            pass
    if os.environ.get("QUEEN_E2E_TRACE"):
        transport.dump(mark)
    sys.stdout.flush()
    with contextlib.redirect_stdout(sys.stderr):
        await client.close()
    print(f"python e2e: {passed} passed; {failed} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
