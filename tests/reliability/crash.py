#!/usr/bin/env python3
"""reliability::crash_broker_kill9 and reliability::crash_pg_immediate.

An ack flood (full-batch acks with the pop's leaseId: the registry fast path through ack
fusion) runs against the real broker while
  - broker_kill9: the broker is SIGKILLed mid-flood and restarted (several rounds);
  - pg_immediate: PostgreSQL is stopped with `pg_ctl stop -m immediate` mid-flood (during
    fusion flushes) and restarted; the SAME broker process must become healthy again.
Invariant: for every (partition, group), committed >= the highest offset of any ack item
answered 200 with success:true; every push item answered 201 "queued" is still stored.

usage: crash.py broker_kill9 | pg_immediate
"""

import json
import random
import sys
import threading
import time

from common import (backend_crashes_in, environment_note, Broker, Client, Failures, Stats, configure, deadlocks_in, exit_with, log,
                    pg_log_since, pg_log_size, pg_start, pg_stop_immediate, psql, q, LONG, SEED)

PARTITIONS = 8
GROUPS = ["c1", "c2"]
CONSUMERS = 6


class Flood:
    def __init__(self, name, port, fail):
        self.run = f"rel{name}{int(time.time())}"
        self.queue = f"{self.run}_q"
        self.port = port
        self.fail = fail
        self.stats = Stats()
        self.lock = threading.Lock()
        self.max_acked = {}      # (group, pid) -> highest offset answered success
        self.acked_items = 0
        self.pushed = {}         # (pid, off) -> txn answered queued
        self.stop = threading.Event()
        self.paused = threading.Event()
        self.threads = []
        self.seq = 0
        self.conn_errors = 0
        self.flush_failed = 0

    def setup(self, n_messages):
        c = Client(self.port, self.stats)
        configure(c, self.queue, leaseTime=2, retryLimit=3)
        self.push_some(c, n_messages)

    def push_some(self, c, n):
        while n > 0:
            items = []
            for _ in range(min(n, 100)):
                self.seq += 1
                items.append({"queue": self.queue, "partition": f"p{self.seq % PARTITIONS}",
                              "payload": {"s": self.seq}, "transactionId": f"{self.run}-{self.seq}"})
            n -= len(items)
            try:
                st, body = c.json("POST", "/api/v1/push", {"items": items}, timeout=10)
            except Exception:
                with self.lock:
                    self.conn_errors += 1
                time.sleep(0.05)
                continue
            if st == 201 and isinstance(body, list):
                with self.lock:
                    for it, r in zip(items, body):
                        if r.get("status") == "queued":
                            self.pushed[(r["partition_id"], r["offset"])] = it["transactionId"]

    def consumer(self, idx):
        rnd = random.Random(SEED + idx)
        c = Client(self.port, self.stats)
        group = GROUPS[idx % len(GROUPS)]
        while not self.stop.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            path = f"/api/v1/pop/queue/{q(self.queue)}"
            if rnd.random() < 0.5:
                path += f"/partition/p{rnd.randrange(PARTITIONS)}"
            path += f"?batch={rnd.randint(3, 20)}&consumerGroup={group}&leaseSeconds=2"
            try:
                st, body = c.json("GET", path, timeout=10)
            except Exception:
                with self.lock:
                    self.conn_errors += 1
                time.sleep(0.05)
                continue
            if st != 200:
                time.sleep(0.02)
                continue
            msgs = body["messages"]
            acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": body["leaseId"]} for m in msgs]
            try:
                st, res = c.json("POST", "/api/v1/ack/batch", {"consumerGroup": group, "acknowledgments": acks},
                                 timeout=20)
            except Exception:
                with self.lock:
                    self.conn_errors += 1
                continue
            if st != 200 or not isinstance(res, list):
                continue
            with self.lock:
                for m, r in zip(msgs, res):
                    if r.get("success") is True:
                        k = (group, m["partitionId"])
                        self.acked_items += 1
                        if m["offset"] > self.max_acked.get(k, -1):
                            self.max_acked[k] = m["offset"]
                    elif "flush failed" in (r.get("error") or ""):
                        self.flush_failed += 1

    def producer(self):
        c = Client(self.port, self.stats)
        while not self.stop.is_set():
            if not self.paused.is_set():
                self.push_some(c, 20)
            time.sleep(0.02)

    def start(self):
        self.threads = [threading.Thread(target=self.consumer, args=(i,), daemon=True) for i in range(CONSUMERS)]
        self.threads.append(threading.Thread(target=self.producer, daemon=True))
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)

    def snapshot(self):
        with self.lock:
            return dict(self.max_acked), dict(self.pushed), self.acked_items

    def verify(self, what):
        max_acked, pushed, n = self.snapshot()
        committed = {}
        for pid, grp, off in psql(f"""
SELECT c.partition_id, c.consumer_group, c.committed FROM queen.log_consumers c
  JOIN queen.log_partitions p ON p.id = c.partition_id JOIN queen.queues qu ON qu.id = p.queue_id
 WHERE qu.name = '{self.queue}'"""):
            committed[(grp, pid)] = int(off)
        lost = 0
        for k, off in max_acked.items():
            cm = committed.get(k, -1)
            if cm < off:
                lost += 1
                self.fail.add(f"{what}: ack answered success up to {off} but committed {cm} for {k}")
        segs = {}
        for pid, base, end in psql(f"""
SELECT s.partition_id, s.base_offset, s.end_offset FROM queen.log_segments s
  JOIN queen.log_partitions p ON p.id = s.partition_id JOIN queen.queues qu ON qu.id = p.queue_id
 WHERE qu.name = '{self.queue}'"""):
            segs.setdefault(pid, []).append((int(base), int(end)))
        missing = 0
        for (pid, off) in pushed:
            if not any(b <= off <= e for b, e in segs.get(pid, [])):
                missing += 1
                if missing <= 5:
                    self.fail.add(f"{what}: push answered queued at {pid}@{off} but no segment holds it")
        log(f"  {what}: {len(max_acked)} (partition, group) cursors checked, {n} ack items answered "
            f"success so far, {len(pushed)} pushes checked; lost acks={lost} lost pushes={missing}")
        return n

    def progress_after(self, n0, seconds, what):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.snapshot()[2] > n0 + 50:
                return True
            time.sleep(0.2)
        self.fail.add(f"{what}: no ack progress within {seconds}s")
        return False


def broker_kill9():
    fail = Failures()
    t0 = time.time()
    log_off = pg_log_size()
    broker = Broker("kill9")
    broker.start()
    fl = Flood("k", broker.port, fail)
    fl.setup(4000)
    fl.start()
    rounds = 10 if LONG else 5
    kills = 0
    for r in range(rounds):
        n0 = fl.snapshot()[2]
        fl.progress_after(n0, 20, f"round {r} before kill")
        time.sleep(random.Random(SEED + r).uniform(0.3, 1.2))
        broker.kill9()
        kills += 1
        log(f"  round {r}: broker SIGKILLed")
        time.sleep(0.3)
        fl.verify(f"after kill {r}")
        broker.start()
        n1 = fl.snapshot()[2]
        # leases of the dead process expire after 2 s, then everything flows again
        fl.progress_after(n1, 20, f"round {r} after restart")
    fl.finish()
    n = fl.verify("final")
    fail.check(broker.alive(), "broker died outside the injected kills")
    fivexx = [x for x in fl.stats.fivexx]
    fail.check(not fivexx, f"5xx answers: {fivexx[:5]}")
    server_log = pg_log_since(log_off)
    dl = deadlocks_in(server_log)
    fail.check(not dl, f"deadlocks: {dl[:3]}")
    crashes = backend_crashes_in(server_log)
    fail.check(not crashes, f"PostgreSQL backends crashed: {crashes[:3]}")
    fail.check(not broker.panics(), f"broker panicked: {broker.panics()[:3]}")
    broker.stop()
    log(f"broker_kill9 figures: kills={kills} ack-items-succeeded={n} pushed={len(fl.pushed)} "
        f"connection-errors(expected)={fl.conn_errors} statuses={json.dumps(fl.stats.status, sort_keys=True)} "
        f"runtime {time.time() - t0:.1f}s")
    environment_note(fl.stats)
    exit_with(fail, "crash_broker_kill9")


def pg_immediate():
    fail = Failures()
    t0 = time.time()
    broker = Broker("pgcrash", env={"QUEEN_STATEMENT_TIMEOUT_MS": "10000"})
    broker.start()
    pid_before = broker.proc.pid
    fl = Flood("p", broker.port, fail)
    fl.setup(4000)
    fl.start()
    rounds = 5 if LONG else 2
    health = Client(broker.port)
    recover_times = []
    for r in range(rounds):
        n0 = fl.snapshot()[2]
        fl.progress_after(n0, 20, f"round {r} before crash")
        time.sleep(0.5)
        res = pg_stop_immediate()
        fail.check(res.returncode == 0, f"pg_ctl stop -m immediate failed: {res.stderr}")
        log(f"  round {r}: PostgreSQL stopped -m immediate")
        time.sleep(1.5)  # the flood keeps hitting a dead database
        st = None
        try:
            st, _ = health.request("GET", "/health", timeout=10)
        except Exception as e:
            fail.add(f"/health dropped the connection while the database was down: {e!r}")
        fail.check(st == 503, f"/health while the database is down answered {st}, want 503")
        res = pg_start()
        fail.check(res.returncode == 0, f"pg_ctl start failed: {res.stderr} {res.stdout}")
        t_up = time.time()
        healthy = False
        while time.time() - t_up < 30:
            try:
                st, _ = health.request("GET", "/health", timeout=5)
                if st == 200:
                    healthy = True
                    break
            except Exception:
                pass
            time.sleep(0.2)
        recover_times.append(time.time() - t_up)
        fail.check(healthy, "broker did not become healthy within 30s of the database restart")
        fail.check(broker.alive() and broker.proc.pid == pid_before, "broker process was restarted or died")
        fl.verify(f"after PG crash {r}")
        n1 = fl.snapshot()[2]
        fl.progress_after(n1, 20, f"round {r} after PG restart")
    fl.finish()
    n = fl.verify("final")
    bad = [x for x in fl.stats.fivexx if x[2] != 503]
    fail.check(not bad, f"5xx other than 503 while the database was down: {bad[:5]}")
    fail.check(not broker.panics(), f"broker panicked: {broker.panics()[:3]}")
    broker.stop()
    log(f"pg_immediate figures: crashes={rounds} ack-items-succeeded={n} pushed={len(fl.pushed)} "
        f"flush-failed-answers={fl.flush_failed} recovery(s)={['%.1f' % x for x in recover_times]} "
        f"statuses={json.dumps(fl.stats.status, sort_keys=True)} runtime {time.time() - t0:.1f}s")
    environment_note(fl.stats)
    exit_with(fail, "crash_pg_immediate")


if __name__ == "__main__":
    {"broker_kill9": broker_kill9, "pg_immediate": pg_immediate}[sys.argv[1]]()
