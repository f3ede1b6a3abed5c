#!/usr/bin/env python3
"""Focused repro of the 40P01 seen by soak_with_faults: multi-partition pushes racing the
first queue-level pops of fresh consumer groups (which seed a cursor row per partition,
taking FK KEY SHARE locks on log_partitions rows) on the same queue.

usage: QUEEN_DATABASE_URL=... python3 tests/reliability/repro_pop_push_deadlock.py [rounds]
           [both|pushes|pops|both-registered|both-queue-mode]
Prints the number of 5xx answers and deadlock reports; exit 1 if any deadlock happened.
"""
import sys
import threading
import time

from common import Broker, Client, Stats, configure, deadlocks_in, log, pg_log_since, pg_log_size

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
MODE = sys.argv[2] if len(sys.argv) > 2 else "both"  # both | pushes | pops | both-registered | both-queue-mode
PARTS = 12


def main():
    off = pg_log_size()
    stats = Stats()
    b = Broker("repro")
    b.start()
    c = Client(b.port, stats)
    run = f"dl{int(time.time())}"
    for r in range(ROUNDS):
        queue = f"{run}_{r}"
        configure(c, queue, leaseTime=5)
        # partitions exist, each with data
        c.json("POST", "/api/v1/push", {"items": [{"queue": queue, "partition": f"p{i}", "payload": i}
                                                  for i in range(PARTS)]})
        go = threading.Event()
        if MODE == "both-registered":  # every group registered (cursors seeded) beforehand
            for k in range(8):
                for j in range(3):
                    c.json("GET", f"/api/v1/pop/queue/{queue}?batch=1&consumerGroup=grp{k}_{j}&leaseSeconds=1"
                                  "&subscriptionMode=new")

        def pusher(k):
            cl = Client(b.port, stats)
            go.wait()
            for j in range(5):
                items = [{"queue": queue, "partition": f"p{(i * 7 + k + j) % PARTS}", "payload": j}
                         for i in range(PARTS)]
                cl.json("POST", "/api/v1/push", {"items": items})

        def popper(k):
            cl = Client(b.port, stats)
            go.wait()
            for j in range(3):
                g = "" if MODE == "both-queue-mode" else f"&consumerGroup=grp{k}_{j}"
                cl.json("GET", f"/api/v1/pop/queue/{queue}?batch=2{g}&leaseSeconds=5")

        ts = [threading.Thread(target=pusher, args=(k,)) for k in range(3 if MODE != "pops" else 0)]
        ts += [threading.Thread(target=popper, args=(k,)) for k in range(8 if MODE != "pushes" else 0)]
        for t in ts:
            t.start()
        go.set()
        for t in ts:
            t.join()
    b.stop()
    dl = deadlocks_in(pg_log_since(off))
    log(f"mode={MODE} rounds={ROUNDS} statuses={stats.status} deadlock-log-lines={len(dl)}")
    for x in stats.fivexx[:5]:
        log("  5xx:", x)
    sys.exit(1 if dl or stats.fivexx else 0)


if __name__ == "__main__":
    main()
