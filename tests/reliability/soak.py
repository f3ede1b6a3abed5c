#!/usr/bin/env python3
"""reliability::soak_with_faults — producers and consumers over many partitions and two
consumer groups, mixing every ack shape with injected faults, then a drain and a full
accounting against the database.

The broker runs its maintenance loop every second meanwhile (docs/operations.md): QA deletes what
both groups consumed (completedRetentionSeconds), QR deletes everything older than a few
seconds (retentionSeconds) while g2 does not read it until the drain, so g2 loses messages
to retention. Every message is accounted for: ok-acked, dead-lettered, dropped (QB) or
evicted, and the evictions the database counted equal the messages no ack or DLQ row took.

Short form: ~45 s of load + a drain bounded at 45 s. Long form (RELIABILITY_LONG=1): 300 s,
plus two races (docs/decisions.md, "Lock order"): new groups' first pops of QR racing its retention
steps (joiner: no cursor is ever seen below its partition's log start, and consumer_lag and
queue_stats_v1 agree at the end: 0 uncounted losses), and a queue QX deleted under load
(deleter: pushes spanning two of its partitions, first pops and deletions; 0 deadlocks in
the server log, no 500, the only refusal a retryable 503).
"""

import json
import random
import threading
import time
import uuid

from common import (backend_crashes_in, environment_note, Broker, Client, Failures, Psql, Stats, configure, deadlocks_in, exit_with,
                    log, maintenance_metrics, pg_log_since, pg_log_size, psql, q, LONG, SEED)

SOAK_SECONDS = 300 if LONG else 45
DRAIN_SECONDS = 90 if LONG else 45
MAX_MESSAGES = 60000 if LONG else 5000
PRODUCERS = 3
CONSUMERS_PER_GROUP = 4
PARTITIONS = 6
GROUPS = ["g1", "g2"]

RUN = f"rel{int(time.time())}{random.Random(SEED).randrange(1000):03d}"
QA = f"{RUN}_dlq"      # DLQ on, retryLimit 2
QB = f"{RUN}_drop"     # DLQ off: exhausted nacks are dropped
QR = f"{RUN}_ret"      # DLQ on, retryLimit 2, retentionSeconds: old segments go unconsumed
QUEUES = [QA, QB, QR]
LOAD_QUEUES = {"g1": QUEUES, "g2": [QA, QB]}  # g2 leaves QR alone until the drain
RETENTION_SECONDS = 4

fail = Failures()
stats = Stats()
lock = threading.Lock()

pushed = {}            # (pid, off) -> (queue, txn)
pid_queue = {}         # pid -> queue
deliveries = {}        # (group, pid, off) -> count
acked_ok = set()       # (group, pid, off) answered success for an ok status
pushed_at = {}         # (pid, off) -> when the push was answered
acked_at = {}          # (group, pid, off) -> when its ok-ack was answered
nacked = {}            # (group, pid, off) -> count of successful signal acks
dlq_reported = set()   # (group, pid, off) answered dlq:true for the signal item
faults = {"nack_failed": 0, "nack_retry": 0, "nack_dlq": 0, "abandoned_lease": 0,
          "bogus_lease_ack": 0, "expired_lease_ack": 0, "partial_ack": 0, "leaseless_ack": 0,
          "renewal": 0}
ack_errors = {}
stop_produce = threading.Event()
drain = threading.Event()
stop_consume = threading.Event()


def bump(d, k, n=1):
    with lock:
        d[k] = d.get(k, 0) + n


# ------------------------------------------------------------------ producers


def producer(idx, port):
    rnd = random.Random(SEED * 1000 + idx)
    c = Client(port, stats)
    seq = 0
    while not stop_produce.is_set():
        with lock:
            if len(pushed) >= MAX_MESSAGES:
                break
        items = []
        for _ in range(rnd.randint(1, 20)):
            queue = rnd.choice(QUEUES)
            part = f"p{rnd.randrange(PARTITIONS)}"
            txn = f"{RUN}-{idx}-{seq}"
            seq += 1
            items.append({"queue": queue, "partition": part, "payload": {"p": idx, "s": seq},
                          "transactionId": txn})
        try:
            st, body = c.json("POST", "/api/v1/push", {"items": items})
        except Exception as e:
            fail.add(f"push dropped: {e!r}")
            continue
        record_push(items, st, body)
        time.sleep(rnd.uniform(0.0, 0.03))


def record_push(items, st, body):
    if st != 201 or not isinstance(body, list) or len(body) != len(items):
        fail.add(f"push answered {st}: {str(body)[:200]}")
        return
    with lock:
        for it, r in zip(items, body):
            if r.get("status") != "queued" or r.get("offset") is None:
                fail.add(f"push item not queued: {r}")
                continue
            key = (r["partition_id"], r["offset"])
            if key in pushed:
                fail.add(f"offset allocated twice: {key}")
            pushed[key] = (it["queue"], it["transactionId"])
            pushed_at[key] = time.time()
            pid_queue[r["partition_id"]] = it["queue"]


# ------------------------------------------------------------------ consumers


def check_ack_shape(body, n, what):
    if not isinstance(body, list) or len(body) != n:
        fail.add(f"{what}: ack answer is not a {n}-array: {str(body)[:200]}")
        return False
    for i, r in enumerate(body):
        if r.get("index") != i:
            fail.add(f"{what}: index {r.get('index')} at {i}")
        if r.get("success") is True and r.get("error") is not None:
            fail.add(f"{what}: success with error {r}")
        if r.get("success") is False and not (isinstance(r.get("error"), str) and r["error"]):
            fail.add(f"{what}: failure without error {r}")
    return True


def send_acks(c, group, items, what, single=False):
    """Posts acks; items: list of (msg, status, leaseId or None). Returns the answer array."""
    acks = []
    for m, status, lease in items:
        a = {"transactionId": m["transactionId"], "partitionId": m["partitionId"]}
        if status is not None:
            a["status"] = status
        if status in ("failed", "dlq"):
            a["error"] = f"injected {status}"
        if lease is not None:
            a["leaseId"] = lease
        acks.append(a)
    try:
        if single and len(acks) == 1:
            acks[0]["consumerGroup"] = group
            st, body = c.json("POST", "/api/v1/ack", acks[0])
        else:
            st, body = c.json("POST", "/api/v1/ack/batch", {"consumerGroup": group, "acknowledgments": acks})
    except Exception as e:
        fail.add(f"{what}: ack dropped: {e!r}")
        return None
    if st != 200:
        fail.add(f"{what}: ack answered {st}: {str(body)[:200]}")
        return None
    if not check_ack_shape(body, len(acks), what):
        return None
    with lock:
        for (m, status, _), r in zip(items, body):
            key = (group, m["partitionId"], m["offset"])
            if r.get("success"):
                if status in (None, "completed", "ok", "success", "acked"):
                    if not r.get("noop"):
                        acked_ok.add(key)
                        acked_at[key] = time.time()
                else:
                    nacked[key] = nacked.get(key, 0) + 1
                    if r.get("dlq"):
                        dlq_reported.add(key)
            else:
                e = (r.get("error") or "")[:60]
                ack_errors[e] = ack_errors.get(e, 0) + 1
    return body


def consumer(group, idx, port):
    rnd = random.Random(SEED * 7919 + idx * 31 + GROUPS.index(group) * 97)
    c = Client(port, stats)
    pending = []  # (deadline, msgs, lease) of partial acks whose remainder we ack later
    while not stop_consume.is_set():
        clean = drain.is_set()
        queue = rnd.choice(QUEUES if clean else LOAD_QUEUES[group])
        lease_s = 5 if clean else rnd.choice([1, 2, 3])
        batch = rnd.randint(1, 12)
        if rnd.random() < 0.3 and not clean:
            path = f"/api/v1/pop/queue/{q(queue)}/partition/p{rnd.randrange(PARTITIONS)}"
        else:
            path = f"/api/v1/pop/queue/{q(queue)}"
        path += f"?batch={batch}&consumerGroup={group}&leaseSeconds={lease_s}"
        if rnd.random() < 0.2:
            path += "&wait=true&timeout=300"
        try:
            t0 = time.time()
            st, body = c.json("GET", path, timeout=30)
        except Exception as e:
            fail.add(f"pop dropped: {e!r}")
            time.sleep(0.05)
            continue
        if st == 204:
            time.sleep(0.02 if clean else 0.05)
            continue
        if st != 200 or not isinstance(body, dict) or not body.get("messages"):
            fail.add(f"pop answered {st}: {str(body)[:200]}")
            continue
        msgs = body["messages"]
        lease = body["leaseId"]
        record_pop(group, body)
        offs = [m["offset"] for m in msgs]
        if offs != list(range(offs[0], offs[0] + len(offs))) and len({m["partitionId"] for m in msgs}) == 1:
            fail.add(f"pop batch not contiguous: {offs}")
        if clean:
            send_acks(c, group, [(m, None, lease) for m in msgs], "drain-ack")
            continue
        r = rnd.random()
        n = len(msgs)
        if r < 0.33:
            send_acks(c, group, [(m, rnd.choice([None, "completed", "ok"]), lease) for m in msgs],
                      "full-ack", single=rnd.random() < 0.5)
        elif r < 0.43:
            st2, rb = c.json("POST", f"/api/v1/lease/{lease}/extend", {"seconds": 5})
            bump(faults, "renewal")
            young = time.time() - t0 < lease_s - 0.5
            if st2 != 200 or not isinstance(rb, dict):
                fail.add(f"extend answered {st2}: {rb}")
            # On QR retention may take the leased batch away before the extend (the lease
            # goes with it), as it may before the ack below: the renewal then honestly
            # renews nothing.
            elif young and queue != QR and not (rb.get("success") and rb.get("renewed", 0) >= 1):
                fail.add(f"extend of a live lease renewed nothing: {rb}")
            time.sleep(min(lease_s + 0.3, 1.2))  # past the original expiry: only the renewal keeps it
            body2 = send_acks(c, group, [(m, None, lease) for m in msgs], "renewed-ack")
            # (on QR, retention may take a renewed batch away: its ack then fails honestly)
            if young and body2 and queue != QR and not all(x.get("success") for x in body2):
                fail.add(f"ack under a renewed lease failed: {body2[:2]}")
        elif r < 0.53 and n > 1:
            k = rnd.randint(1, n - 1)
            bump(faults, "partial_ack")
            send_acks(c, group, [(m, None, lease) for m in msgs[:k]], "partial-ack")
            if rnd.random() < 0.5:
                pending.append((time.time() + rnd.uniform(0, lease_s * 1.5), msgs[k:], lease))
            else:
                bump(faults, "abandoned_lease")
        elif r < 0.63:
            bump(faults, "leaseless_ack")
            send_acks(c, group, [(m, None, None) for m in msgs], "leaseless-ack")
        elif r < 0.85:
            i = rnd.randrange(n)
            kinds = ["failed", "retry", "dlq"] if queue != QB else ["failed", "retry"]
            kind = rnd.choice(kinds)
            bump(faults, "nack_" + kind)
            items = [(m, None, lease) for m in msgs[:i]] + [(msgs[i], kind, lease)]
            send_acks(c, group, items, "nack", single=(len(items) == 1 and rnd.random() < 0.5))
        elif r < 0.93:
            bump(faults, "abandoned_lease")
        else:
            bump(faults, "bogus_lease_ack")
            body2 = send_acks(c, group, [(m, None, str(uuid.uuid4())) for m in msgs], "bogus-lease-ack")
            if body2 and any(x.get("success") and not x.get("noop") for x in body2):
                fail.add(f"ack with a foreign leaseId succeeded: {body2[:2]}")
        # remainders of partial acks whose time has come (some after their lease expired)
        now = time.time()
        due = [p for p in pending if p[0] <= now]
        pending[:] = [p for p in pending if p[0] > now]
        for _, rest, ls in due:
            bump(faults, "expired_lease_ack")
            send_acks(c, group, [(m, None, ls) for m in rest], "partial-rest")


def record_pop(group, body):
    with lock:
        for m in body["messages"]:
            key = (m["partitionId"], m["offset"])
            dk = (group, m["partitionId"], m["offset"])
            deliveries[dk] = deliveries.get(dk, 0) + 1
            exp = pushed.get(key)
            if exp is not None and exp[1] != m["transactionId"]:
                fail.add(f"offset {key} delivered txn {m['transactionId']} but pushed {exp[1]}")
            if m.get("leaseId") != body["leaseId"]:
                fail.add(f"message leaseId {m.get('leaseId')} != pop leaseId {body['leaseId']}")


def seed_retention_cursors(c):
    """Gives both groups a cursor on every QR partition before the load: retention counts
    what a group loses against its cursor; a group that never read a partition has none
    there (it starts at log_start when it first does)."""
    items = [{"queue": QR, "partition": f"p{i}", "payload": {"seed": i}, "transactionId": f"{RUN}-seed-{i}"}
             for i in range(PARTITIONS)]
    st, body = c.json("POST", "/api/v1/push", {"items": items})
    record_push(items, st, body)
    for g in GROUPS:
        for i in range(PARTITIONS):
            st, body = c.json("GET", f"/api/v1/pop/queue/{q(QR)}/partition/p{i}?batch=1&consumerGroup={g}")
            if not fail.check(st == 200, f"seed pop {g}/p{i}: {st} {body}"):
                continue
            record_pop(g, body)
            send_acks(c, g, [(m, None, body["leaseId"]) for m in body["messages"]], "seed-ack")


# ------------------------------------------------------------------ late joiners


late = {"joins": 0}


def prober(idx, port, queue=QB, mode="new", prefix="late", pause=(0.02, 0.08), counter=late):
    """Consumer groups joining mid-stream: a queue-level pop of a brand-new named group
    (subscriptionMode=new, autoAck) registers the group and seeds a cursor on every
    partition of QB while producers push. These groups are not part of the accounting.
    (A late group's cursors lag forever: on QA they would hold back rule 2.)"""
    rnd = random.Random(SEED * 31337 + idx + (0 if prefix == "late" else 7919))
    c = Client(port, stats)
    n = 0
    while not stop_produce.is_set():
        n += 1
        try:
            st, body = c.json("GET", f"/api/v1/pop/queue/{q(queue)}?batch=5&consumerGroup={prefix}{idx}_{n}"
                                     f"&subscriptionMode={mode}&autoAck=true")
        except Exception as e:
            fail.add(f"{prefix} pop dropped: {e!r}")
            continue
        if st not in (200, 204):
            fail.add(f"{prefix} pop answered {st}: {str(body)[:200]}")
        with lock:
            counter["joins"] += 1
        time.sleep(rnd.uniform(*pause))


# ------------------------------------------------------------------ long-form races


races = {"joins": 0, "deletes": 0, "qx_pushes": 0, "qx_503": 0}
QX = f"{RUN}_del"      # deleted under load (long form)


def joiner(idx, port):
    """A brand-new named group's first queue-level pop of QR (mode all, autoAck) every few
    seconds, racing the broker's retention steps on QR. The cursor sampler checks that no
    cursor is ever below its partition's log start (a loss nobody counted)."""
    prober(idx, port, queue=QR, mode="all", prefix="join", pause=(2.0, 4.0), counter=races)


def deleter(port):
    """QX deleted while pushes span two of its partitions and new groups pop it. Its own
    statistics: a push or pop racing the deletion may answer a retryable 503 (40001,
    nothing written), never another 5xx; deadlocks are looked for in the server log."""
    rnd = random.Random(SEED * 104729)
    own = Stats()
    c = Client(port, own)
    n = 0
    while not stop_produce.is_set():
        n += 1
        items = [{"queue": QX, "partition": p, "payload": {"n": n, "i": i}, "transactionId": f"{RUN}-x-{n}-{i}"}
                 for i, p in enumerate(["a", "b", "a"])]
        try:
            st, _ = c.json("POST", "/api/v1/push", {"items": items})
            races["qx_pushes"] += 1
            if st == 503:
                races["qx_503"] += 1
            elif st != 201:
                fail.add(f"QX push answered {st}")
            st, _ = c.json("GET", f"/api/v1/pop/queue/{q(QX)}?batch=2&consumerGroup=x{n % 7}&autoAck=true")
            if st == 503:
                races["qx_503"] += 1
            elif st not in (200, 204):
                fail.add(f"QX pop answered {st}")
            if rnd.random() < 0.5:
                st, _ = c.json("DELETE", f"/api/v1/resources/queues/{q(QX)}")
                races["deletes"] += 1
                fail.check(st == 200, f"QX delete answered {st}")
        except Exception as e:
            fail.add(f"QX request dropped: {e!r}")
        time.sleep(rnd.uniform(0.0, 0.01))


LOG_START_SQL = """
SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues qu ON qu.id = p.queue_id
 WHERE qu.name IN ('{a}', '{b}', '{r}') AND c.committed < p.log_start - 1""".format(a=QA, b=QB, r=QR)

VIEWS_AGREE_SQL = """
SELECT count(*) FROM queen.consumer_lag l
  JOIN queen.queue_stats_v1(NULL, '{r}') s ON s.r_partition_id = l.partition_id AND s.r_consumer_group = l.consumer_group
 WHERE l.queue = '{r}' AND l.lag IS DISTINCT FROM s.r_lag""".format(r=QR)


# ------------------------------------------------------------------ cursor sampler


SAMPLE_SQL = """
SELECT c.partition_id, c.consumer_group, c.committed
  FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues qu ON qu.id = p.queue_id
 WHERE qu.name IN ('{a}', '{b}', '{r}')""".format(a=QA, b=QB, r=QR)

samples = {"n": 0, "rows": 0, "backward": 0, "below_log_start": 0}


def sampler():
    s = Psql()
    last = {}
    try:
        while not stop_consume.is_set():
            try:
                rows = s.query(SAMPLE_SQL)
            except Exception as e:
                fail.add(f"sampler: {e}")
                break
            samples["n"] += 1
            if LONG:
                try:
                    below = int(s.query(LOG_START_SQL)[0].split("\t")[0])
                except Exception as e:
                    fail.add(f"sampler: {e}")
                    break
                samples["below_log_start"] += below
                fail.check(below == 0, f"{below} cursors below their partition's log start (uncounted loss)")
            for line in rows:
                parts = line.split("\t")
                if len(parts) != 3:
                    continue
                k = (parts[0], parts[1])
                v = int(parts[2])
                samples["rows"] += 1
                if k in last and v < last[k]:
                    samples["backward"] += 1
                    fail.add(f"cursor moved backward: {k} {last[k]} -> {v}")
                last[k] = v
            time.sleep(0.2)
    finally:
        s.close()


# ------------------------------------------------------------------ main


def all_committed():
    rows = psql(f"""
SELECT count(*) FILTER (WHERE c.committed IS DISTINCT FROM p.last_offset), count(*)
  FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id
  CROSS JOIN (VALUES ('g1'), ('g2')) g(name)
  LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = g.name
 WHERE qu.name IN ('{QA}', '{QB}', '{QR}') AND p.last_offset >= 0""")
    return int(rows[0][0]) == 0, int(rows[0][0])


def main():
    t_start = time.time()
    log_off = pg_log_size()
    broker = Broker("soak", env={"QUEEN_MAINTENANCE_INTERVAL_MS": "1000"})
    broker.start()
    c = Client(broker.port, stats)
    configure(c, QA, leaseTime=3, retryLimit=2, deadLetterQueue=True, dlqAfterMaxRetries=True,
              completedRetentionSeconds=2)
    configure(c, QB, leaseTime=3, retryLimit=1, deadLetterQueue=False, dlqAfterMaxRetries=False)
    configure(c, QR, leaseTime=3, retryLimit=2, deadLetterQueue=True, dlqAfterMaxRetries=True,
              retentionSeconds=RETENTION_SECONDS)
    seed_retention_cursors(c)
    log(f"soak: run {RUN}, broker :{broker.port}, {SOAK_SECONDS}s load, {len(QUEUES)}x{PARTITIONS} "
        f"partitions, groups {GROUPS}")

    threads = [threading.Thread(target=sampler, daemon=True)]
    threads += [threading.Thread(target=producer, args=(i, broker.port), daemon=True) for i in range(PRODUCERS)]
    threads += [threading.Thread(target=prober, args=(i, broker.port), daemon=True) for i in range(2)]
    if LONG:
        threads += [threading.Thread(target=joiner, args=(i, broker.port), daemon=True) for i in range(2)]
        threads += [threading.Thread(target=deleter, args=(broker.port,), daemon=True)]
    cons = [threading.Thread(target=consumer, args=(g, i, broker.port), daemon=True)
            for g in GROUPS for i in range(CONSUMERS_PER_GROUP)]
    for t in threads + cons:
        t.start()
    time.sleep(SOAK_SECONDS)
    stop_produce.set()
    for t in threads[1:]:
        t.join(timeout=30)
    log(f"soak: load phase over, {len(pushed)} pushed; draining")
    drain.set()
    t_drain = time.time()
    done = False
    while time.time() - t_drain < DRAIN_SECONDS:
        time.sleep(1.0)
        done, missing = all_committed()
        if done:
            break
    stop_consume.set()
    for t in cons + threads[:1]:
        t.join(timeout=40)
    fail.check(done, f"drain did not commit every (partition, group) within {DRAIN_SECONDS}s")
    log(f"soak: drained in {time.time() - t_drain:.1f}s")

    # ---------------------------------------------------------------- accounting
    pids = sorted(pid_queue)
    committed = {}
    for pid_, grp, off in psql(f"""
SELECT c.partition_id, c.consumer_group, c.committed FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id JOIN queen.queues qu ON qu.id = p.queue_id
 WHERE qu.name IN ('{QA}', '{QB}', '{QR}')"""):
        committed[(grp, pid_)] = int(off)
    last_off = {r[0]: int(r[1]) for r in psql(f"""
SELECT p.id, p.last_offset FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id
 WHERE qu.name IN ('{QA}', '{QB}', '{QR}')""")}
    dlq_rows = {}
    for pid_, grp, off in psql(f"""
SELECT d.partition_id, d.consumer_group, d."offset" FROM queen.log_dlq d
 WHERE d.partition_id IN (SELECT p.id FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id
                           WHERE qu.name IN ('{QA}', '{QB}', '{QR}'))"""):
        k = (grp, pid_, int(off))
        dlq_rows[k] = dlq_rows.get(k, 0) + 1
    for k, n in dlq_rows.items():
        fail.check(n == 1, f"DLQ row filed {n} times: {k}")
        fail.check(k in nacked, f"DLQ row for an offset never nacked by a client: {k}")
        fail.check(k in dlq_reported, f"DLQ row whose nack was not answered dlq:true: {k}")
    for k in dlq_reported:
        fail.check(k in dlq_rows, f"ack answered dlq:true but no DLQ row: {k}")

    n_pushed = len(pushed)
    fail.check(n_pushed == sum(v + 1 for p, v in last_off.items() if p in pid_queue),
               "pushed count != sum of last_offset+1 over partitions")
    counts = {g: {"committed_ok": 0, "dlq": 0, "dropped": 0, "evicted": 0} for g in GROUPS}
    for (pid_, off), (queue, txn) in pushed.items():
        for g in GROUPS:
            cm = committed.get((g, pid_), -1)
            if not fail.check(off <= cm, f"{g}: pushed {pid_}@{off} not committed (committed {cm})"):
                continue
            k = (g, pid_, off)
            if queue == QR and k not in dlq_rows and k not in acked_ok:
                counts[g]["evicted"] += 1  # retention took it before this group did
                continue
            fail.check(deliveries.get(k, 0) >= 1, f"{g}: {pid_}@{off} committed but never delivered")
            if k in dlq_rows:
                counts[g]["dlq"] += 1
            elif k in acked_ok:
                counts[g]["committed_ok"] += 1
            else:
                counts[g]["dropped"] += 1
                fail.check(queue == QB, f"{g}: {pid_}@{off} of DLQ-enabled queue committed without ok-ack or DLQ row")
                fail.check(k in nacked, f"{g}: {pid_}@{off} dropped but never nacked by a client")
    evicted_db = {g: int(n) for g, n in psql(f"""
SELECT consumer_group, sum(evicted) FROM queen.consumer_lag
 WHERE queue = '{QR}' AND consumer_group IN ('g1', 'g2') GROUP BY 1""")}
    # Retention also removes the evicted part of a batch that is leased at that moment
    # and counts it evicted; the consumer may still ack it (a positional ack moves the
    # cursor past it) — only a message acked when it was already old enough to be gone.
    late_acks = {g: sum(1 for (gg, p, o) in acked_ok if gg == g and pid_queue.get(p) == QR
                   and acked_at[(gg, p, o)] - pushed_at.get((p, o), 0) >= RETENTION_SECONDS - 1)
            for g in GROUPS}
    for g in GROUPS:
        n_db, n_client = evicted_db.get(g, 0), counts[g]["evicted"]
        fail.check(n_client <= n_db <= n_client + late_acks[g],
                   f"{g}: the database counted {n_db} evicted on {QR}; {n_client} messages were neither "
                   f"ok-acked nor dead-lettered and {late_acks[g]} were ok-acked when old enough to be evicted")
    if LONG:
        disagree = int(psql(VIEWS_AGREE_SQL)[0][0])
        fail.check(disagree == 0, f"consumer_lag and queue_stats_v1 disagree on {disagree} (partition, group) rows of {QR}")
        fail.check(races["joins"] >= 20 and races["deletes"] >= 20, f"too few races: {races}")
    fail.check(counts["g2"]["evicted"] > 0, f"g2 skipped {QR} for {SOAK_SECONDS}s and lost nothing to retention")
    n_deliv = sum(deliveries.values())
    dups = sum(v - 1 for v in deliveries.values() if v > 1)

    # ---------------------------------------------------------------- faults of the system
    fail.check(not stats.fivexx, f"5xx answers: {stats.fivexx[:5]}")
    fail.check(not stats.dropped, f"dropped connections: {stats.dropped[:5]}")
    fail.check(broker.alive(), "broker died")
    fail.check(not broker.panics(), f"broker panicked: {broker.panics()[:3]}")
    server_log = pg_log_since(log_off)
    dl = deadlocks_in(server_log)
    fail.check(not dl, f"deadlocks in the server log: {dl[:3]}")
    crashes = backend_crashes_in(server_log)
    fail.check(not crashes, f"PostgreSQL backends crashed: {crashes[:3]}")
    fail.check(samples["n"] >= 20, f"cursor sampler took only {samples['n']} samples")
    for g in GROUPS:  # the HTTP DLQ listing agrees with the table
        for queue in QUEUES:
            want = sum(1 for (gg, p, _) in dlq_rows if gg == g and pid_queue.get(p) == queue)
            st, body = c.json("GET", f"/api/v1/dlq?queue={q(queue)}&consumerGroup={g}&limit=1")
            total = body.get("pagination", {}).get("total") if isinstance(body, dict) else None
            fail.check(st == 200 and total == want, f"GET /dlq {queue}/{g}: {st} total={total}, want {want}")
    maint = maintenance_metrics(c)
    fail.check(maint.get('queen_maintenance_runs_total{result="ran"}', 0) >= 5, f"maintenance ran too rarely: {maint}")
    fail.check(maint.get('queen_maintenance_runs_total{result="failed"}', 1) == 0, f"maintenance runs failed: {maint}")
    for rule in ("expired", "completed"):
        fail.check(maint.get(f'queen_maintenance_segments_deleted_total{{rule="{rule}"}}', 0) > 0,
                   f"retention rule {rule} deleted nothing: {maint}")
    broker.stop()

    log(f"soak figures: pushed={n_pushed} partitions={len(pids)} groups={len(GROUPS)}")
    for g in GROUPS:
        tot = sum(counts[g].values())
        log(f"  group {g}: committed(ok-acked)={counts[g]['committed_ok']} dead-lettered={counts[g]['dlq']} "
            f"dropped(DLQ-off queue)={counts[g]['dropped']} evicted(retention)={counts[g]['evicted']} total={tot}; "
            f"database evicted={evicted_db.get(g, 0)} (acked late: {late_acks[g]})")
    log("  maintenance: " + ", ".join(f"{k.removeprefix('queen_maintenance_')}={v:g}" for k, v in sorted(maint.items())))
    log(f"  delivered={n_deliv} (distinct {len(deliveries)}) duplicates-redelivered={dups}")
    log(f"  faults injected={sum(faults.values())} {json.dumps(faults, sort_keys=True)}; "
        f"late-joining groups={late['joins']}")
    log(f"  ack item failures by error: {json.dumps(ack_errors, sort_keys=True)}")
    log(f"  http statuses: {json.dumps(stats.status, sort_keys=True)}; 5xx={len(stats.fivexx)} "
        f"dropped-connections={len(stats.dropped)}")
    if LONG:
        log(f"  races: {json.dumps(races, sort_keys=True)}; cursors below log start={samples['below_log_start']}")
    log(f"  cursor samples={samples['n']} rows={samples['rows']} backward={samples['backward']}; "
        f"deadlocks={len(dl)}; runtime {time.time() - t_start:.1f}s")
    environment_note(stats)
    exit_with(fail, "soak_with_faults")


if __name__ == "__main__":
    main()
