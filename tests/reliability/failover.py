#!/usr/bin/env python3
"""reliability::failover_drill — a primary killed and its synchronous standby promoted
under load, two brokers on a multi-host URL (docs/availability.md, "Failover").

tests/failover.sh sets it up: a primary, a streaming standby named in
synchronous_standby_names (every commit waits for its flush), and QUEEN_DATABASE_URL
naming both hosts with target_session_attrs=read-write. Two brokers (each with its own
push spool), 4 producers (one partition each, numbered payloads; two producers per
broker) and 4 consumers (one group, two per broker) run; the primary is stopped with
`pg_ctl -m immediate`, the standby promoted. Asserted: every push was answered 201
(queued or buffered), both spools drain, every pushed transactionId is in its queue
exactly once and in its producer's order, no message acked with success is delivered
again to its group, the group's cursors (sampled every 200 ms) never move backward, no
panic. Reported: seconds from the kill to the first push written
directly again, and the replay rate.

usage: failover.py   (env FAILOVER_PRIMARY_DATA, FAILOVER_STANDBY_DATA)
"""

import os
import sys
import tempfile
import threading
import time

from common import (Broker, Client, Failures, Stats, as_pg, configure, exit_with, log, psql, q,
                    PGBIN)

sys.path.insert(0, os.path.dirname(__file__))
from outage import audit, check_exactly_once, spool_env, wait_drained  # noqa: E402

PRIMARY = os.environ["FAILOVER_PRIMARY_DATA"]
STANDBY = os.environ["FAILOVER_STANDBY_DATA"]
LONG = os.environ.get("RELIABILITY_LONG", "0") == "1"


def drill():
    f = Failures()
    brokers = []
    for name in ("fa", "fb"):
        b = Broker(name, env=spool_env(tempfile.mkdtemp(prefix=f"queen-spool-{name}-")))
        b.start()
        brokers.append(b)
    c = Client(brokers[0].port, Stats())
    queue = f"failover{int(time.time())}"
    configure(c, queue, leaseTime=5)
    parts = [f"p{i}" for i in range(4)]
    sent = {p: [] for p in parts}
    answers = {"queued": 0, "buffered": 0, "other": []}
    first_direct_after = {}
    acked, redelivered = set(), []
    stop = threading.Event()
    lock = threading.Lock()
    killed_at = [None]

    def produce(i, p):
        pc = Client(brokers[i // 2].port, Stats())
        n = 0
        while not stop.is_set():
            txid = f"{p}-{n}"
            sent_at = time.time()
            try:
                st, body = pc.json("POST", "/api/v1/push",
                                   {"items": [{"queue": queue, "partition": p, "transactionId": txid,
                                               "payload": {"n": n}}]}, timeout=30)
            except Exception as e:
                with lock:
                    answers["other"].append(f"{txid}: {e}")
                time.sleep(0.05)
                continue
            with lock:
                if st == 201 and body[0]["status"] in ("queued", "buffered"):
                    status = body[0]["status"]
                    answers[status] += 1
                    sent[p].append(txid)
                    n += 1
                    # A push sent after the kill and written directly: the new primary.
                    if (status == "queued" and killed_at[0] and sent_at > killed_at[0]
                            and p not in first_direct_after):
                        first_direct_after[p] = time.time() - killed_at[0]
                else:
                    answers["other"].append(f"{txid}: {st} {body}")
            time.sleep(0.01)

    def consume(i):
        cc = Client(brokers[i // 2].port, Stats())
        while not stop.is_set():
            try:
                st, body = cc.json("GET", f"/api/v1/pop/queue/{q(queue)}?batch=20&wait=true"
                                          f"&timeout=1000&consumerGroup=work", timeout=10)
            except Exception:
                time.sleep(0.2)
                continue
            if st != 200:
                time.sleep(0.2)
                continue
            msgs = body["messages"]
            with lock:
                redelivered.extend(m["transactionId"] for m in msgs if m["transactionId"] in acked)
            acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": body["leaseId"], "status": "completed"} for m in msgs]
            try:
                st, r = cc.json("POST", "/api/v1/ack/batch",
                                {"consumerGroup": "work", "acknowledgments": acks}, timeout=10)
            except Exception:
                continue
            if st == 200 and isinstance(r, list):
                with lock:
                    acked.update(a["transactionId"] for a, res in zip(acks, r)
                                 if res.get("success") is True)

    cursor_max, went_back = {}, []

    def sample_cursors():
        """Every 200 ms: the group's committed offsets (a failed read is skipped)."""
        while not stop.is_set():
            try:
                rows = psql(f"SELECT partition, committed FROM queen.consumer_lag "
                            f"WHERE queue = '{queue}' AND consumer_group = 'work'", timeout=5)
            except Exception:
                rows = []
            for part, committed in rows:
                c = int(committed)
                if c < cursor_max.get(part, -1):
                    went_back.append((part, cursor_max[part], c))
                cursor_max[part] = max(c, cursor_max.get(part, -1))
            time.sleep(0.2)

    threads = [threading.Thread(target=produce, args=(i, p)) for i, p in enumerate(parts)]
    threads += [threading.Thread(target=consume, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=sample_cursors))
    for t in threads:
        t.start()
    time.sleep(10 if LONG else 5)
    log("killing the primary (pg_ctl stop -m immediate)")
    as_pg(f"{PGBIN}/pg_ctl", "-D", PRIMARY, "stop", "-m", "immediate")
    killed_at[0] = time.time()
    time.sleep(1)
    log("promoting the standby")
    as_pg(f"{PGBIN}/pg_ctl", "-D", STANDBY, "promote", "-w")
    promoted = time.time()
    spooled = 0
    for b in brokers:
        bc = Client(b.port, Stats())
        started = time.time()
        d = wait_drained(bc)
        spooled += d.get("replayed", 0)
        log(f"broker {b.name}: drained {time.time() - started:.1f} s after its wait began: {d}")
    drain = time.time() - promoted
    time.sleep(3)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    log(f"answers: queued {answers['queued']}, buffered {answers['buffered']}, "
        f"other {len(answers['other'])}")
    if first_direct_after:
        log(f"first push written directly again {min(first_direct_after.values()):.1f} s after the kill")
    log(f"replayed {spooled} records; both spools empty {drain:.1f} s after the promotion")
    f.check(answers["buffered"] > 0, "no push was answered buffered")
    f.check(not answers["other"], f"pushes not answered 201: {answers['other'][:5]}")
    f.check(len(first_direct_after) == len(parts), "a producer never got a direct push after the failover")
    f.check(not redelivered, f"acked messages delivered again: {redelivered[:5]}")
    f.check(cursor_max, "no cursor sample was read")
    f.check(not went_back, f"a cursor moved backward: {went_back[:5]}")
    check_exactly_once(f, audit(c, queue, parts), sent)
    for b in brokers:
        f.check(not b.panics(), f"broker {b.name} panicked")
        b.stop()
    return f


if __name__ == "__main__":
    exit_with(drill(), "failover_drill")
