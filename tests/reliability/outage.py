#!/usr/bin/env python3
"""reliability::outage_* — pushes through a database outage and a killed broker, with the
push spool (docs/availability.md).

outage_db_stop: 4 producers (one partition each, payloads numbered in order) and 4
consumers (one group, acking what they get) run against a broker with a spool; PostgreSQL
is stopped (`pg_ctl stop -m fast`) for 30 s and started again. Asserted: every push was
answered 201 (queued or buffered; never a 503: the spool took them), the spool drains,
every pushed transactionId is in its queue exactly once, in each producer's order, and a
message acked with success is never delivered again to that group.

outage_spool_kill9: push maintenance on, 3000 items spooled; maintenance off with a small
replay batch, the broker SIGKILLed while the replay runs, started again on the same spool
directory: every item is in its queue exactly once, in order.

usage: outage.py db_stop | spool_kill9
"""

import os
import sys
import tempfile
import threading
import time

from common import (Broker, Client, Failures, Stats, configure, exit_with, log, pg_start, psql,
                    q, as_pg, PGBIN, PG_DATA)

PRODUCERS = 4
CONSUMERS = 4


def spool_env(directory, **extra):
    env = {"QUEEN_SPOOL_DIR": directory, "QUEEN_SHARED_STATE_MS": "200",
           "QUEEN_POOL_TIMEOUT_MS": "1000",
           # The replay's progress in the broker's log (kept in the run's log folder).
           "RUST_LOG": "warn,queen_broker::http::spool_replay=debug"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def wait_drained(c, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            st, b = c.json("GET", "/api/v1/status/buffers", timeout=5)
            if st == 200 and b.get("pending") == 0:
                return b
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError("the spool did not drain")


def audit(c, queue, partitions):
    """Every message of `queue` per partition, in offset order, by a fresh group."""
    group = f"audit{int(time.time() * 1000)}"
    got = {p: [] for p in partitions}
    for p in partitions:
        while True:
            st, b = c.json("GET", f"/api/v1/pop/queue/{q(queue)}/partition/{q(p)}"
                                  f"?batch=500&consumerGroup={group}&subscriptionMode=all")
            if st == 204:
                break
            assert st == 200, (st, b)
            msgs = b["messages"]
            got[p].extend(m["transactionId"] for m in msgs)
            acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": b["leaseId"], "status": "completed"} for m in msgs]
            st, r = c.json("POST", "/api/v1/ack/batch",
                           {"consumerGroup": group, "acknowledgments": acks})
            assert st == 200, (st, r)
    return got


def check_exactly_once(f, got, sent):
    for p, txids in sent.items():
        have = got.get(p, [])
        f.check(len(have) == len(set(have)), f"{p}: a transactionId stored twice")
        f.check(have == txids, f"{p}: stored {len(have)} of {len(txids)} pushed, or out of order")


class Load:
    """Producers (one partition each, numbered payloads, one item a push) and consumers
    (group `work`, acking what they get) against the given broker ports, recording what
    every push was answered, what was acked, and any acked message delivered again.
    `killed_at` (set by a drill) starts the clock of `first_direct_after`: per partition,
    seconds until a push sent after it was written directly."""

    def __init__(self, queue, parts, producer_ports, consumer_ports):
        self.queue, self.parts = queue, parts
        self.sent = {p: [] for p in parts}
        self.answers = {"queued": 0, "buffered": 0, "other": []}
        self.acked, self.redelivered = set(), []
        self.first_direct_after, self.killed_at = {}, None
        self.stop, self.lock = threading.Event(), threading.Lock()
        self.threads = [threading.Thread(target=self.produce, args=(p, port))
                        for p, port in zip(parts, producer_ports)]
        self.threads += [threading.Thread(target=self.consume, args=(port,))
                         for port in consumer_ports]

    def start(self, *extra):
        self.threads += list(extra)
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        a = self.answers
        log(f"answers: queued {a['queued']}, buffered {a['buffered']}, other {len(a['other'])}")

    def produce(self, p, port):
        pc = Client(port, Stats())
        n = 0
        while not self.stop.is_set():
            txid = f"{p}-{n}"
            sent_at = time.time()
            try:
                st, body = pc.json("POST", "/api/v1/push",
                                   {"items": [{"queue": self.queue, "partition": p,
                                               "transactionId": txid, "payload": {"n": n}}]},
                                   timeout=30)
            except Exception as e:  # a dropped connection: nothing promised, push again
                with self.lock:
                    self.answers["other"].append(f"{txid}: {e}")
                time.sleep(0.05)
                continue
            with self.lock:
                if st == 201 and body[0]["status"] in ("queued", "buffered"):
                    status = body[0]["status"]
                    self.answers[status] += 1
                    self.sent[p].append(txid)
                    n += 1
                    # A push sent after the kill and written directly: the new primary.
                    if (status == "queued" and self.killed_at and sent_at > self.killed_at
                            and p not in self.first_direct_after):
                        self.first_direct_after[p] = time.time() - self.killed_at
                else:
                    self.answers["other"].append(f"{txid}: {st} {body}")
            time.sleep(0.01)

    def consume(self, port):
        cc = Client(port, Stats())
        while not self.stop.is_set():
            try:
                st, body = cc.json("GET", f"/api/v1/pop/queue/{q(self.queue)}?batch=20&wait=true"
                                          f"&timeout=1000&consumerGroup=work", timeout=10)
            except Exception:
                time.sleep(0.2)
                continue
            if st != 200:
                time.sleep(0.2)
                continue
            msgs = body["messages"]
            with self.lock:
                self.redelivered.extend(m["transactionId"] for m in msgs
                                        if m["transactionId"] in self.acked)
            acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": body["leaseId"], "status": "completed"} for m in msgs]
            try:
                st, r = cc.json("POST", "/api/v1/ack/batch",
                                {"consumerGroup": "work", "acknowledgments": acks}, timeout=10)
            except Exception:
                continue
            if st == 200 and isinstance(r, list):
                with self.lock:
                    self.acked.update(a["transactionId"] for a, res in zip(acks, r)
                                      if res.get("success") is True)

    def check(self, f):
        """What every drill asserts of the load itself."""
        f.check(self.answers["buffered"] > 0, "no push was answered buffered")
        f.check(not self.answers["other"],
                f"pushes not answered 201: {self.answers['other'][:5]}")
        f.check(not self.redelivered, f"acked messages delivered again: {self.redelivered[:5]}")


def db_stop():
    f = Failures()
    spool = tempfile.mkdtemp(prefix="queen-spool-")
    b = Broker("outage", env=spool_env(spool))
    b.start()
    c = Client(b.port, Stats())
    queue = f"outage{int(time.time())}"
    configure(c, queue, leaseTime=5)
    parts = [f"p{i}" for i in range(PRODUCERS)]
    load = Load(queue, parts, [b.port] * PRODUCERS, [b.port] * CONSUMERS)
    load.start()
    time.sleep(5)
    outage = 30
    log(f"stopping PostgreSQL for {outage} s")
    as_pg(f"{PGBIN}/pg_ctl", "-D", PG_DATA, "stop", "-m", os.environ.get("OUTAGE_STOP_MODE", "fast"))
    time.sleep(outage)
    st, spooled = c.json("GET", "/api/v1/status/buffers")
    log(f"spool while down: {spooled}")
    f.check(spooled.get("pending", 0) > 0, "nothing was spooled while the database was down")
    pg_start()
    back = time.time()
    drained = wait_drained(c)
    log(f"drained {time.time() - back:.1f} s after the restart: {drained}")
    time.sleep(3)
    load.finish()
    load.check(f)
    check_exactly_once(f, audit(c, queue, parts), load.sent)
    f.check(not b.panics(), "broker panicked")
    b.stop()
    return f


def spool_kill9():
    f = Failures()
    spool = tempfile.mkdtemp(prefix="queen-spool-")
    env = spool_env(spool, QUEEN_SPOOL_REPLAY_BATCH=50)
    b = Broker("spoolkill", env=env)
    b.start()
    c = Client(b.port, Stats())
    queue = f"spoolkill{int(time.time())}"
    parts = ["a", "b", "c"]
    sent = {p: [] for p in parts}
    st, body = c.json("POST", "/api/v1/system/maintenance", {"enabled": True})
    assert st == 200, (st, body)
    for r in range(100):
        items = []
        for p in parts:
            for k in range(10):
                txid = f"{p}-{r}-{k}"
                sent[p].append(txid)
                items.append({"queue": queue, "partition": p, "transactionId": txid,
                              "payload": {"r": r, "k": k}})
        st, body = c.json("POST", "/api/v1/push", {"items": items})
        f.check(st == 201 and all(x["status"] == "buffered" for x in body), f"push {r}: {st}")
    st, body = c.json("POST", "/api/v1/system/maintenance", {"enabled": False})
    assert st == 200, (st, body)
    deadline = time.time() + 30
    mid = None
    while time.time() < deadline:
        st, buf = c.json("GET", "/api/v1/status/buffers")
        if buf.get("replayed", 0) > 0:
            mid = buf
            break
        time.sleep(0.01)
    b.kill9()
    log(f"killed mid-replay at: {mid}")
    b.start()
    wait_drained(c)
    check_exactly_once(f, audit(c, queue, parts), sent)
    f.check(not b.panics(), "broker panicked")
    b.stop()
    return f


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "db_stop":
        exit_with(db_stop(), "outage_db_stop")
    elif which == "spool_kill9":
        exit_with(spool_kill9(), "outage_spool_kill9")
    else:
        sys.exit(__doc__)
