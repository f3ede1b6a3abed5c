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

from common import (Broker, Client, Failures, Stats, as_pg, configure, exit_with, log, psql,
                    PGBIN)

sys.path.insert(0, os.path.dirname(__file__))
from outage import Load, audit, check_exactly_once, spool_env, wait_drained  # noqa: E402

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
    # Two producers and two consumers on each broker.
    ports = [brokers[i // 2].port for i in range(4)]
    load = Load(queue, parts, ports, ports)
    cursor_max, went_back = {}, []

    def sample_cursors():
        """Every 200 ms: the group's committed offsets (a failed read is skipped)."""
        while not load.stop.is_set():
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

    load.start(threading.Thread(target=sample_cursors))
    time.sleep(10 if LONG else 5)
    log("killing the primary (pg_ctl stop -m immediate)")
    as_pg(f"{PGBIN}/pg_ctl", "-D", PRIMARY, "stop", "-m", "immediate")
    load.killed_at = time.time()
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
    load.finish()
    if load.first_direct_after:
        log(f"first push written directly again {min(load.first_direct_after.values()):.1f} s "
            "after the kill")
    log(f"replayed {spooled} records; both spools empty {drain:.1f} s after the promotion")
    load.check(f)
    f.check(len(load.first_direct_after) == len(parts),
            "a producer never got a direct push after the failover")
    f.check(cursor_max, "no cursor sample was read")
    f.check(not went_back, f"a cursor moved backward: {went_back[:5]}")
    check_exactly_once(f, audit(c, queue, parts), load.sent)
    for b in brokers:
        f.check(not b.panics(), f"broker {b.name} panicked")
        b.stop()
    return f


if __name__ == "__main__":
    exit_with(drill(), "failover_drill")
