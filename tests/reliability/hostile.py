#!/usr/bin/env python3
"""reliability::hostile_input — a seeded, bounded random fuzz over the HTTP API.

Each input is one request against a real route (malformed/truncated JSON, wrong types,
huge arrays and strings, invalid UUIDs, control characters and invalid UTF-8, unknown
statuses, duplicate items, negative/huge numbers, in query strings, paths and bodies).
Asserted for every input:
  - no 5xx, no dropped connection, the broker never dies or logs a panic;
  - a 4xx carries a JSON object body with a non-empty string "error";
  - a rejected request (4xx, or a transaction answered success:false) changes nothing:
    row counts of every queen table and a digest of cursor, partition and queue rows are
    the same before and after it.
Short form: 2000 inputs (RELIABILITY_FUZZ_INPUTS overrides); long form: 20000.
The broker runs with QUEEN_BODY_LIMIT_MB=2 so oversized bodies exercise the 413 path.

Inputs at the limits: partition and consumer-group names of 256 bytes to 10 KB on every route
that takes one (must be 400, item 6; 255 bytes must not be refused), lease extend
`seconds` of 0, negative, fractional, string, null or above QUEEN_MAX_LEASE_SECONDS (must
be 400, item 12), and a slow-client phase on a broker with 2 s header/body timeouts and
8 connections at most (item 9): clients trickling a header or a body one byte a second
are closed within 10 s (the body ones answered 408), a ninth connection gets 503 with
Retry-After, and a freed slot is served again. A DELETE-race phase (items 7 and 8): each
round deletes a fresh queue while a first pop of a new group, a push into a new partition
and a DLQ filing hit it at the same instant; no answer may be a 5xx other than a 503 with
Retry-After, and no DLQ or sidecar row of a deleted partition may remain.
"""

import json
import os
import random
import socket
import threading
import time
import uuid

from common import backend_crashes_in, environment_note, pg_log_since, pg_log_size, Broker, Client, Failures, Psql, Stats, exit_with, log, q, LONG, SEED

N_INPUTS = int(os.environ.get("RELIABILITY_FUZZ_INPUTS", "20000" if LONG else "2000"))
BODY_LIMIT_MB = 2

RUN = f"relfz{int(time.time())}"

# Row counts of every queen table (segments and sidecar rows: of this run's queues; a
# segment written anywhere else moves some partition's last_offset, which the partition
# sums catch), whole-table aggregates of every mutable cursor/partition/queue column
# (catch an update anywhere), and exact row digests of this run's own queues.
SNAPSHOT = """
SELECT concat_ws(',',
  (SELECT count(*) FROM queen.queues), (SELECT count(*) FROM queen.log_partitions),
  (SELECT count(*) FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
     JOIN queen.queues qu ON qu.id = p.queue_id WHERE qu.name LIKE '""" + RUN + """%'),
  (SELECT count(*) FROM queen.log_txns t WHERE t.partition_id IN (SELECT p.id FROM queen.log_partitions p
     JOIN queen.queues qu ON qu.id = p.queue_id WHERE qu.name LIKE '""" + RUN + """%')),
  (SELECT count(*) FROM queen.log_dlq), (SELECT count(*) FROM queen.consumer_groups_metadata),
  (SELECT concat_ws('/', count(*), md5(string_agg(key || value::text, ';' ORDER BY query_id, partition_id, key)))
     FROM queen.stream_state),
  (SELECT concat_ws('/', count(*), md5(string_agg(coalesce(last_digest, ''), ';' ORDER BY query_id, partition_id)))
     FROM queen.stream_shards), (SELECT count(*) FROM queen.stream_queries),
  (SELECT concat_ws('/', count(*), sum(committed), sum(batch_end), count(worker_id), sum(batch_retry_count),
                    sum(attempt_count), sum(total_consumed), max(lease_expires_at))
     FROM queen.log_consumers LEFT JOIN queen.log_leases USING (partition_id, consumer_group)),
  (SELECT concat_ws('/', sum(last_offset), sum(log_start), sum(txns_start)) FROM queen.log_partitions),
  (SELECT concat_ws('/', sum(lease_time), sum(retry_limit), count(*) FILTER (WHERE dead_letter_queue),
                    sum(dedup_window_seconds)) FROM queen.queues),
  (SELECT coalesce(md5(string_agg(concat_ws('|', c.partition_id, c.consumer_group, c.committed, l.batch_end,
               l.worker_id, l.lease_expires_at, c.batch_retry_count, l.attempt_offset, l.attempt_count,
               c.total_consumed), ';' ORDER BY c.partition_id, c.consumer_group COLLATE "C")), '')
     FROM queen.log_consumers c
     LEFT JOIN queen.log_leases l ON l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group
     JOIN queen.log_partitions p ON p.id = c.partition_id
     JOIN queen.queues qu ON qu.id = p.queue_id WHERE qu.name LIKE '""" + RUN + """%'),
  (SELECT coalesce(md5(string_agg(concat_ws('|', qu.id, qu.name, qu.lease_time, qu.retry_limit,
               qu.dead_letter_queue, qu.dlq_after_max_retries, qu.dedup_window_seconds, qu.retention_seconds,
               qu.completed_retention_seconds), ';' ORDER BY qu.id)), '')
     FROM queen.queues qu WHERE qu.name LIKE '""" + RUN + """%'))"""

QUEUE = f"{RUN}_q"
GROUP = "fz"

WEIRD_STRINGS = [
    "", " ", "\u0000", "a\u0000b", "\u0001\u0002\u001f", "\n\r\t", "\u007f", "\u202e", "\ufeff",
    "\U0001F4A9", "\ud7ff", "é" * 300, "x" * 256, "x" * 70000, "'; DROP TABLE queen.queues; --",
    "%00", "../../etc", "__QUEUE_MODE__", "null", "Default", "00000000-0000-0000-0000-000000000000",
    "not-a-uuid", "0" * 32, "{}", "[]",
]
RAW_BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80"]
JSON_ESCAPE_BAD = ["\\ud800", "\\udfff", "\\ud800\\u0041", "\\u00", "\\x41", "\\"]
WEIRD_NUMS = [0, -1, -2147483648, 2147483647, 2147483648, 9223372036854775807, 9223372036854775808,
              -9223372036854775809, 10 ** 30, 1.5, -0.0, 1e308, "1", "abc", None, True, [], {}]
WEIRD_QUERY_NUMS = ["0", "-1", "1", "5", "abc", "1e3", "1.5", "2147483647", "2147483648", "99999999999999999999",
                    "-9223372036854775809", "%00", "%FF", "+1", "%201", "0x10", "", "NaN", "inf"]
# Names around the 255-byte limit and far beyond it (a btree index row
# overflowed from about 2,700 bytes; a 10 KB name needed 10232 bytes).
# Random hex cannot be compressed below the index row limit (a run of one letter can).


def hexname(n, rnd=random.Random(SEED)):
    return "".join(rnd.choice("0123456789abcdef") for _ in range(n))


LONG_NAMES = [hexname(255), "é" * 127, hexname(256), "é" * 128, "\U0001F4A9" * 64, hexname(2700), hexname(2728),
              "é" * 1400, hexname(10240)]
# Lease extend `seconds` that must be refused (default max lease 86400).
EXTEND_BAD = [0, -1, -86400, 1.5, "60", None, True, [], {}, 10 ** 12, 2 ** 31, 86401]
# Requests of these families must be answered 400 when they reach the broker unmangled.
EXPECT_400 = ("names_bad", "extend_bad")
STATUSES = ["completed", "failed", "retry", "dlq", "FAILED", "Completed", "nack", "", " ok", "ok ", "success",
            "acked", "ok", "null", "\u0000", "dlq\u0000", "é", None, 1, True, [], {}]


class Ctx:
    """Real ids to mutate around: partition ids, transactionIds, a live lease."""

    def __init__(self, client):
        self.c = client
        self.pids = []
        self.txns = []
        self.lease = str(uuid.uuid4())
        self.msgs = []
        st, body = client.json("POST", "/streams/v1/queries",
                               {"name": f"{RUN}-stream", "source_queue": QUEUE, "config_hash": "h"})
        self.query_id = body["query_id"] if st == 200 else str(uuid.uuid4())

    def refresh(self, rnd):
        items = [{"queue": QUEUE, "partition": rnd.choice(["a", "b"]), "payload": {"i": i},
                  "transactionId": f"{RUN}-{rnd.randrange(10 ** 9)}"} for i in range(10)]
        st, body = self.c.json("POST", "/api/v1/push", {"items": items})
        if st == 201:
            for r in body:
                if r.get("partition_id") and r["partition_id"] not in self.pids:
                    self.pids.append(r["partition_id"])
            self.txns += [it["transactionId"] for it in items]
            self.txns = self.txns[-200:]
        st, body = self.c.json("GET", f"/api/v1/pop/queue/{QUEUE}?batch=5&consumerGroup={GROUP}&leaseSeconds=300")
        if st == 200:
            self.lease = body["leaseId"]
            self.msgs = body["messages"]


def pick(rnd, xs):
    return xs[rnd.randrange(len(xs))]


def weird_value(rnd, depth=0):
    r = rnd.random()
    if r < 0.35:
        return pick(rnd, WEIRD_STRINGS)
    if r < 0.7:
        return pick(rnd, WEIRD_NUMS)
    if r < 0.8 and depth < 3:
        return [weird_value(rnd, depth + 1) for _ in range(rnd.randint(0, 3))]
    if r < 0.9 and depth < 3:
        return {pick(rnd, ["queue", "items", "x", ""]): weird_value(rnd, depth + 1)}
    return str(uuid.uuid4())


def ack_item(rnd, ctx):
    m = pick(rnd, ctx.msgs) if ctx.msgs and rnd.random() < 0.5 else None
    a = {"transactionId": m["transactionId"] if m else (pick(rnd, ctx.txns) if ctx.txns else "t"),
         "partitionId": m["partitionId"] if m else (pick(rnd, ctx.pids) if ctx.pids else str(uuid.uuid4()))}
    if rnd.random() < 0.6:
        a["status"] = pick(rnd, STATUSES)
    if rnd.random() < 0.5:
        a["leaseId"] = pick(rnd, [ctx.lease, str(uuid.uuid4()), "", "nope", None, 7])
    if rnd.random() < 0.3:
        a["consumerGroup"] = pick(rnd, [GROUP, "", None, "\u0000", "x" * 5000, 5])
    if rnd.random() < 0.2:
        a["error"] = pick(rnd, WEIRD_STRINGS + [None, 3])
    return a


def push_item(rnd, ctx):
    it = {"queue": pick(rnd, [QUEUE] * 6 + WEIRD_STRINGS + [None, 5, []]),
          "partition": pick(rnd, ["a", "b", None, ""] + WEIRD_STRINGS[:12] + [1]),
          "payload": weird_value(rnd)}
    if rnd.random() < 0.7:
        it["transactionId"] = pick(rnd, WEIRD_STRINGS + ctx.txns[-5:] + [None, 1, {}])
    if rnd.random() < 0.2:
        it["traceId"] = pick(rnd, WEIRD_STRINGS + [str(uuid.uuid4()), 12])
    return it


def stream_request(rnd, ctx):
    """Queen's /streams/v1: registrations, state reads and cycles around real ids."""
    ids = [ctx.query_id, str(uuid.uuid4()), "x", None, 5, ""]
    pids = ctx.pids[:3] + [str(uuid.uuid4()), "x", None, 7]
    k = rnd.randrange(3)
    if k == 0:
        body = {"name": pick(rnd, [f"{RUN}-stream", "", None, 3] + WEIRD_STRINGS),
                "source_queue": pick(rnd, [QUEUE, "", None, "x" * 300]),
                "config_hash": pick(rnd, ["h", "h2", "", None, 1]), "reset": weird_value(rnd)}
        return "POST", "/streams/v1/queries", body, "stream_register"
    if k == 1:
        body = {"query_id": pick(rnd, ids), "partition_id": pick(rnd, pids),
                "keys": pick(rnd, [[], ["a"], "a", None, [1], ["x"] * 20000]),
                "key_prefix": pick(rnd, WEIRD_STRINGS + [None, 1]),
                "ripe_at_or_before": pick(rnd, WEIRD_QUERY_NUMS + [None])}
        return "POST", "/streams/v1/state/get", body, "stream_state"
    m = pick(rnd, ctx.msgs) if ctx.msgs else None
    ops = [{"type": pick(rnd, ["upsert", "delete", "merge", None, 1]),
            "key": pick(rnd, ["k", "", None, 5, "x" * 2000] + WEIRD_STRINGS[:6]),
            "value": weird_value(rnd)} for _ in range(rnd.randint(0, 3))]
    items = [push_item(rnd, ctx) for _ in range(rnd.randint(0, 2))]
    ack = pick(rnd, [None, {
        "transactionId": pick(rnd, ([m["transactionId"]] if m else []) + ctx.txns[-3:] + [None, "", 4]),
        "leaseId": pick(rnd, [ctx.lease, "x", None, ""]), "status": pick(rnd, STATUSES),
        "count": pick(rnd, [1, -1, "1", None])}])
    body = {"query_id": pick(rnd, ids), "consumer_group": pick(rnd, [GROUP, "", None, 5]),
            "partition_id": m["partitionId"] if m and rnd.random() < 0.5 else pick(rnd, pids),
            "state_ops": ops, "push_items": items, "ack": ack, "release_lease": weird_value(rnd)}
    return "POST", "/streams/v1/cycle", body, "stream_cycle"


def base_request(rnd, ctx):
    """A plausible request of a random endpoint: (method, path, body object or None, tag)."""
    k = rnd.randrange(12)
    if k == 11:
        return stream_request(rnd, ctx)
    if k == 9:
        return names_request(rnd, ctx)
    if k == 10:
        lease = pick(rnd, [ctx.lease, str(uuid.uuid4()), "not-a-uuid"])
        return "POST", f"/api/v1/lease/{lease}/extend", {"seconds": pick(rnd, EXTEND_BAD)}, "extend_bad"
    if k == 0:
        opts = {pick(rnd, ["leaseTime", "retryLimit", "deadLetterQueue", "dlqAfterMaxRetries",
                           "retentionSeconds", "completedRetentionSeconds", "dedupWindowSeconds", "priority"]):
                weird_value(rnd) for _ in range(rnd.randint(0, 4))}
        return "POST", "/api/v1/configure", {"queue": pick(rnd, [QUEUE + "_c"] + WEIRD_STRINGS + [None, 3]),
                                             "namespace": weird_value(rnd), "options": opts}, "configure"
    if k == 1:
        n = pick(rnd, [0, 1, 2, 3, 10])
        items = [push_item(rnd, ctx) for _ in range(n)]
        if items and rnd.random() < 0.3:
            items.append(dict(items[0]))  # duplicate item
        return "POST", "/api/v1/push", {"items": items}, "push"
    if k == 2:
        return "POST", "/api/v1/ack", ack_item(rnd, ctx), "ack"
    if k == 3:
        items = [ack_item(rnd, ctx) for _ in range(pick(rnd, [0, 1, 2, 5]))]
        if items and rnd.random() < 0.4:
            items += items  # duplicate items
        return "POST", "/api/v1/ack/batch", {"consumerGroup": pick(rnd, [GROUP, None, "", 5]),
                                              "acknowledgments": items}, "ack_batch"
    if k == 4:
        lease = pick(rnd, [ctx.lease, str(uuid.uuid4()), "not-a-uuid", "%00", "%FF%FE", "x" * 300, "-1"])
        body = pick(rnd, [{"seconds": weird_value(rnd)}, None, {}, {"seconds": 5}, []])
        return "POST", f"/api/v1/lease/{lease}/extend", body, "extend"
    if k == 5:
        ops = []
        for _ in range(rnd.randint(0, 3)):
            if rnd.random() < 0.5:
                ops.append({"type": "push", "items": [push_item(rnd, ctx) for _ in range(rnd.randint(0, 2))]})
            else:
                a = ack_item(rnd, ctx)
                a["type"] = pick(rnd, ["ack", "ack", "nack", "", None, 3])
                ops.append(a)
        body = {"operations": ops}
        if rnd.random() < 0.3:
            body["requiredLeases"] = pick(rnd, [[ctx.lease], ["x"], [1], "x", None, [str(uuid.uuid4())] * 3])
        return "POST", "/api/v1/transaction", body, "transaction"
    if k == 6:
        return "GET", pop_path(rnd), None, "pop"
    if k == 7:
        qs = "&".join(f"{n}={pick(rnd, WEIRD_QUERY_NUMS + [QUEUE, GROUP, '%F0%9F'])}"
                      for n in rnd.sample(["queue", "consumerGroup", "limit", "offset"], rnd.randint(0, 4)))
        return "GET", "/api/v1/dlq?" + qs, None, "dlq"
    return "DELETE", "/api/v1/resources/queues/" + pick(rnd, [f"{RUN}_nonexistent", "%00", "%FF", "x" * 300,
                                                                 "%E2%80%AE", "a%2Fb"]), None, "delete"


def names_request(rnd, ctx):
    """A request naming a partition or consumer group around or beyond 255 bytes."""
    name = pick(rnd, LONG_NAMES)
    tag = "names_ok" if len(name.encode()) <= 255 else "names_bad"
    r = rnd.randrange(7)
    if r == 0:
        return "POST", "/api/v1/push", {"items": [{"queue": QUEUE, "partition": name, "payload": 1}]}, tag
    if r == 1:
        return "GET", f"/api/v1/pop/queue/{QUEUE}/partition/{q(name)}?batch=1", None, tag
    if r == 2:
        return "GET", f"/api/v1/pop/queue/{QUEUE}?batch=1&consumerGroup={q(name)}", None, tag
    if r == 3:
        items = [ack_item(rnd, ctx) for _ in range(2)]
        for it in items:
            it.pop("consumerGroup", None)
        return "POST", "/api/v1/ack/batch", {"consumerGroup": name, "acknowledgments": items}, tag
    if r == 4:
        return "POST", "/api/v1/transaction", {"operations": [
            {"type": "push", "items": [{"queue": QUEUE, "partition": name, "payload": 1}]}]}, tag
    if r == 5:
        a = ack_item(rnd, ctx)
        a.update({"type": "ack", "consumerGroup": name})
        return "POST", "/api/v1/transaction", {"operations": [a]}, tag
    return "GET", f"/api/v1/dlq?consumerGroup={q(name)}", None, tag


def trickle(port, head, body, out, key):
    """Item 9: sends `head` then `body` one byte a second (for a header-trickle, the
    header itself); records when the broker closed the connection and what it said."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.time()
    got = b""
    closed = None
    try:
        if head:
            s.sendall(head)
        for b in body:
            try:
                s.send(bytes([b]))
            except OSError:
                closed = time.time() - t0
                break
            s.settimeout(1.0)
            try:
                d = s.recv(4096)
                if not d:
                    closed = time.time() - t0
                    break
                got += d
            except socket.timeout:
                pass
            except OSError:
                closed = time.time() - t0
                break
            if time.time() - t0 > 20:
                break
        if closed is None and got:
            # An answer came: wait (bounded) for the close that must follow it.
            s.settimeout(5)
            try:
                while s.recv(4096):
                    pass
                closed = time.time() - t0
            except OSError:
                closed = time.time() - t0
    finally:
        s.close()
    out[key] = (closed, got)


def http_get_on(s, path):
    """One keep-alive GET on an open socket: the raw answer (status line first)."""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    s.settimeout(5)
    got = b""
    while b"\r\n\r\n" not in got:
        d = s.recv(4096)
        if not d:
            return got
        got += d
    head, _, body = got.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        d = s.recv(4096)
        if not d:
            break
        body += d
    return head + b"\r\n\r\n" + body


def slow_clients(fail):
    """Item 9 on its own broker: trickled headers and bodies are closed within the
    timeouts, connections over the cap get 503, a freed slot is served."""
    cap = 8
    broker = Broker("hostile-slow", env={"QUEEN_HEADER_READ_TIMEOUT_MS": "2000",
                                          "QUEEN_BODY_READ_TIMEOUT_MS": "2000",
                                          "QUEEN_MAX_CONNECTIONS": str(cap)})
    broker.start()
    body = json.dumps({"items": [{"queue": f"{RUN}_slow", "payload": "x" * 64}]}).encode()
    post_head = (f"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n").encode()
    get_head = ("GET /api/v1/pop/queue/%s HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n" % (QUEUE, "a" * 40)).encode()
    out = {}
    threads = [threading.Thread(target=trickle, args=(broker.port, b"", get_head, out, f"header{i}")) for i in range(2)]
    threads += [threading.Thread(target=trickle, args=(broker.port, post_head, body, out, f"body{i}")) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for key, (closed, got) in sorted(out.items()):
        fail.check(closed is not None and closed < 10, f"slow client {key} not closed within 10 s ({closed})")
        if key.startswith("body"):
            fail.check(got.startswith(b"HTTP/1.1 408"), f"slow body {key} answered {got[:60]!r}, not 408")
        else:
            fail.check(b" 200 " not in got[:20], f"slow header {key} was served: {got[:60]!r}")
    held = []
    for _ in range(cap):
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        fail.check(http_get_on(s, "/health").startswith(b"HTTP/1.1 200"), "held connection not served")
        held.append(s)
    over = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    try:
        ans = http_get_on(over, "/health")
    except OSError as e:
        ans = repr(e).encode()
    over.close()
    fail.check(ans.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in ans.lower(),
               f"connection over the cap answered {ans[:80]!r}")
    held.pop().close()
    served = False
    deadline = time.time() + 5
    while time.time() < deadline and not served:
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        try:
            served = http_get_on(s, "/health").startswith(b"HTTP/1.1 200")
        except OSError:
            pass
        s.close()
        time.sleep(0.05)
    fail.check(served, "a freed connection slot was not served again")
    for s in held:
        s.close()
    fail.check(broker.alive(), "slow-client broker died")
    panics = broker.panics()
    fail.check(not panics, f"slow-client broker panicked: {panics[:3]}")
    broker.stop()
    summary = {k: (round(v[0], 1) if v[0] is not None else None, v[1][:12].decode("latin-1")) for k, v in out.items()}
    log(f"hostile slow clients: {json.dumps(summary, sort_keys=True)}; over-cap answer {ans[:12]!r}")


DELETE_RACE_ROUNDS = 600 if LONG else 120


def delete_races(port, fail):
    """Items 7 and 8: DELETE of a queue racing the calls that create rows under it."""
    setup = Client(port)
    statuses = {}
    lock = threading.Lock()

    def hit(method, path, body):
        st, resp = Client(port).json(method, path, body)
        with lock:
            statuses[f"{method} {path.split('/')[3]} {st}"] = statuses.get(f"{method} {path.split('/')[3]} {st}", 0) + 1
        fail.check(st < 500 or st == 503, f"delete race: {method} {path} -> {st} {str(resp)[:160]}")
        return st, resp

    pids = []
    for r in range(DELETE_RACE_ROUNDS):
        qn = f"{RUN}_del{r}"
        setup.json("POST", "/api/v1/configure", {"queue": qn, "options": {"retryLimit": 0, "deadLetterQueue": True}})
        setup.json("POST", "/api/v1/push", {"items": [{"queue": qn, "payload": r, "transactionId": "poison"}]})
        st, pop = setup.json("GET", f"/api/v1/pop/queue/{qn}?consumerGroup=g")
        acks = [] if st != 200 else [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                      "leaseId": pop["leaseId"], "status": "failed", "error": "boom"}
                                     for m in pop["messages"]]
        pids += [m["partitionId"] for m in (pop["messages"] if st == 200 else [])]
        calls = [("DELETE", f"/api/v1/resources/queues/{qn}", None),
                 ("GET", f"/api/v1/pop/queue/{qn}?consumerGroup=new{r}", None),
                 ("POST", "/api/v1/push", {"items": [{"queue": qn, "partition": f"p{r}", "payload": 1,
                                                      "transactionId": f"t{r}"}]}),
                 ("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": acks})]
        threads = [threading.Thread(target=hit, args=c) for c in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    # Rows of the deleted partitions only: other suites on this database leave orphans on
    # purpose (a plain DELETE FROM queen.queues, for the orphan cleanup).
    ids = "'{" + ",".join(pids) + "}'::uuid[]"
    orphans = Psql().query(
        f"SELECT (SELECT count(*) FROM queen.log_dlq WHERE partition_id = ANY({ids})) + "
        f"(SELECT count(*) FROM queen.log_txns WHERE partition_id = ANY({ids}))")
    fail.check(orphans == ["0"], f"delete race left rows of deleted partitions: {orphans}")
    log(f"hostile delete races: {DELETE_RACE_ROUNDS} rounds, answers {json.dumps(statuses, sort_keys=True)}, "
        f"orphan rows {orphans}")


def pop_path(rnd):
    queue = pick(rnd, [QUEUE] * 5 + ["%00", "%FF", "x" * 300, "%E2%80%AE", "no_such_queue", "a%2Fb"])
    path = f"/api/v1/pop/queue/{queue}"
    if rnd.random() < 0.4:
        path += "/partition/" + pick(rnd, ["a", "b", "Default", "%00", "%FF", "zz", "x" * 300])
    params = []
    for name in rnd.sample(["batch", "leaseSeconds", "consumerGroup", "autoAck", "subscriptionMode",
                            "subscriptionFrom", "partitions", "wait", "timeout", "bogus"], rnd.randint(0, 6)):
        if name == "consumerGroup":
            v = pick(rnd, [GROUP, "fz2", "", "%00", "%FF", "__QUEUE_MODE__", "x" * 300])
        elif name in ("autoAck", "wait"):
            v = pick(rnd, ["true", "false", "1", "0", "yes", "maybe", "", "%00"])
        elif name == "subscriptionMode":
            v = pick(rnd, ["all", "new", "timestamp", "bogus", "", "%FF"])
        elif name == "subscriptionFrom":
            v = pick(rnd, ["now", "2020-01-01T00%3A00%3A00Z", "garbage", "%FF", "99999-01-01", "-1"])
        elif name == "timeout":
            v = pick(rnd, ["0", "50", "200", "-1", "abc", "1e3", "%FF"])
        else:
            v = pick(rnd, WEIRD_QUERY_NUMS)
        params.append(f"{name}={v}")
    # a long-poll is bounded: wait=true only with an explicit small timeout
    if any(p.startswith("wait=") and p.split("=", 1)[1] in ("true", "1", "yes") for p in params):
        params = [p for p in params if not p.startswith("timeout=")] + ["timeout=" + pick(rnd, ["0", "50", "200"])]
    return path + ("?" + "&".join(params) if params else "")


def encode(rnd, method, body):
    """Turns a body object into bytes, possibly corrupted. Returns (bytes|None, corruption)."""
    if body is None:
        return (None, "none") if rnd.random() < 0.8 else (pick(rnd, [b"", b"{", b"\xff"]), "junk-on-get")
    raw = json.dumps(body, ensure_ascii=rnd.random() < 0.5).encode("utf-8", "surrogatepass")
    r = rnd.random()
    if r < 0.45:
        return raw, "valid"
    if r < 0.55:
        return raw[: rnd.randrange(max(1, len(raw)))], "truncated"
    if r < 0.62:
        s = raw.decode("utf-8", "replace")
        i = s.rfind('"', 0, rnd.randrange(1, len(s) + 1))
        if i > 0:
            return s[:i].encode() + pick(rnd, RAW_BAD_UTF8) + s[i:].encode(), "bad-utf8"
        return raw + pick(rnd, RAW_BAD_UTF8), "bad-utf8"
    if r < 0.68:
        s = raw.decode("utf-8", "replace")
        i = s.find('":"')
        if i > 0:
            return (s[: i + 3] + pick(rnd, JSON_ESCAPE_BAD) + s[i + 3:]).encode(), "bad-escape"
        return raw, "valid"
    if r < 0.72:
        d = rnd.choice([200, 5000, 100000])
        return (b"[" * d + b"]" * d), "deep-nesting"
    if r < 0.76:
        return bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 64))), "random-bytes"
    if r < 0.80:
        return pick(rnd, [b"", b" ", b"null", b"[]", b"{}", b"1", b"\"x\"", b"true", b"{\"items\":null}",
                          b"{\"acknowledgments\":{}}", b"{\"operations\":\"x\"}", b"{\"a\":1,\"a\":2}",
                          b"\xef\xbb\xbf{}", b"{}garbage", b"{} {}"]), "tiny"
    if r < 0.84:
        return huge_body(rnd, method), "huge"
    if r < 0.90:
        return replace_some_value(rnd, body), "wrong-type"
    return raw, "valid"


def replace_some_value(rnd, body):
    def walk(o):
        if isinstance(o, dict) and o:
            k = pick(rnd, list(o))
            if rnd.random() < 0.5:
                o[k] = weird_value(rnd)
            else:
                walk(o[k])
        elif isinstance(o, list) and o:
            i = rnd.randrange(len(o))
            if rnd.random() < 0.5:
                o[i] = weird_value(rnd)
            else:
                walk(o[i])
    b = json.loads(json.dumps(body))
    walk(b)
    return json.dumps(b).encode("utf-8", "surrogatepass")


def huge_body(rnd, method):
    r = rnd.random()
    if r < 0.25:  # over the configured body limit
        return b'{"items":[{"queue":"' + QUEUE.encode() + b'","payload":"' + b"x" * (BODY_LIMIT_MB * 1024 * 1024 + 10) + b'"}]}'
    if r < 0.5:  # a huge string where an id goes
        return json.dumps({"transactionId": "t" * rnd.choice([70000, 1000000]), "partitionId": str(uuid.uuid4()),
                           "queue": "q" * 100000, "acknowledgments": [], "items": []}).encode()
    if r < 0.75:  # a huge array of ack items (all for an unknown partition: rejected per item)
        pid = str(uuid.uuid4())
        return json.dumps({"acknowledgments": [{"transactionId": f"h{i}", "partitionId": pid}
                                               for i in range(rnd.choice([1000, 5000]))]}).encode()
    return json.dumps({"items": [{"queue": "", "payload": i} for i in range(rnd.choice([1000, 20000]))],
                       "operations": [{"type": "bogus"}] * 2000}).encode()


def main():
    t0 = time.time()
    rnd = random.Random(SEED * 104729)
    fail = Failures()
    stats = Stats()
    log_off = pg_log_size()
    broker = Broker("hostile", env={"QUEEN_BODY_LIMIT_MB": str(BODY_LIMIT_MB)})
    broker.start()
    c = Client(broker.port, stats)
    setup = Client(broker.port)
    st, _ = setup.json("POST", "/api/v1/configure", {"queue": QUEUE, "options": {"leaseTime": 300, "retryLimit": 1}})
    fail.check(st == 200, f"configure {QUEUE} answered {st}")
    ctx = Ctx(setup)
    ctx.refresh(rnd)
    snap = Psql()
    before = snap.query(SNAPSHOT)
    tags = {}
    outcomes = {"2xx": 0, "4xx": 0, "5xx": 0, "dropped": 0, "rejected_checked": 0}
    wrong_ct = 0
    for i in range(N_INPUTS):
        if i % 150 == 149:
            ctx.refresh(rnd)
            before = snap.query(SNAPSHOT)
        method, path, body, tag = base_request(rnd, ctx)
        data, corruption = encode(rnd, method, body)
        headers = {}
        if rnd.random() < 0.05:
            headers["Content-Type"] = pick(rnd, ["text/plain", "application/x-www-form-urlencoded", "", "\u00e9"
                                                 .encode("latin-1").decode("latin-1")])
            wrong_ct += 1
        key = f"{tag}/{corruption}"
        tags[key] = tags.get(key, 0) + 1
        desc = f"#{i} {method} {path[:100]} [{corruption}] body={(data or b'')[:160]!r}"
        c.close()  # one connection per input: a drop is attributable to this input alone
        try:
            status, resp = c.request(method, path, data, timeout=30, headers=headers)
        except Exception as e:
            outcomes["dropped"] += 1
            fail.add(f"connection dropped: {desc}: {e!r}")
            if not broker.alive():
                fail.add("broker died; restarting it to continue")
                broker.start()
            before = snap.query(SNAPSHOT)
            continue
        after = snap.query(SNAPSHOT)
        rejected = False
        if status >= 500:
            outcomes["5xx"] += 1
            fail.add(f"{status}: {desc} -> {resp[:200]!r}")
        elif status >= 400:
            outcomes["4xx"] += 1
            rejected = True
            try:
                j = json.loads(resp)
                ok = isinstance(j, dict) and isinstance(j.get("error"), str) and j["error"].strip() != ""
            except ValueError:
                ok = False
            fail.check(ok, f"{status} without a JSON error body: {desc} -> {resp[:120]!r}")
        else:
            outcomes["2xx"] += 1
            if tag in ("transaction", "stream_cycle") and status == 200:
                try:
                    j = json.loads(resp)
                    rejected = isinstance(j, dict) and j.get("success") is False
                except ValueError:
                    fail.add(f"transaction 200 with a non-JSON body: {desc}")
        if tag in EXPECT_400 and corruption in ("valid", "none", "junk-on-get"):
            fail.check(status == 400, f"{tag} must be 400: {desc} -> {status} {resp[:160]!r}")
        if rejected:
            outcomes["rejected_checked"] += 1
            fail.check(after == before, f"rejected request ({status}) changed the tables: {desc} "
                                        f"-> {resp[:160]!r}; before {before} after {after}")
        before = after
    snap.close()
    fail.check(broker.alive(), "broker died")
    panics = broker.panics()
    fail.check(not panics, f"broker panicked: {panics[:3]}")
    crashes = backend_crashes_in(pg_log_since(log_off))
    fail.check(not crashes, f"PostgreSQL backends crashed: {crashes[:3]}")
    delete_races(broker.port, fail)
    fail.check(broker.alive(), "broker died in the delete races")
    broker.stop()
    slow_clients(fail)
    log(f"hostile figures: inputs tried={N_INPUTS} 2xx={outcomes['2xx']} 4xx={outcomes['4xx']} "
        f"5xx={outcomes['5xx']} dropped={outcomes['dropped']} rejected-with-table-check={outcomes['rejected_checked']} "
        f"odd-content-type={wrong_ct} runtime {time.time() - t0:.1f}s")
    log(f"  statuses: {json.dumps(stats.status, sort_keys=True)}")
    log(f"  families: {json.dumps(dict(sorted(tags.items())))}")
    environment_note(stats)
    exit_with(fail, "hostile_input")


if __name__ == "__main__":
    main()
