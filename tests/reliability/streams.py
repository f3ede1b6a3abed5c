#!/usr/bin/env python3
"""reliability::streams_crash — exactly-once stream cycles through a killed broker and a
stopped PostgreSQL (docs/decisions.md, "Streams").

Two runners drive Queen's `/streams/v1` as its SDK does: pop a leased batch for the
stream's group, read the partition's state, commit one cycle (the state's new count and
sum, one sink item per message, the ack through the batch's last message), and on a lost
answer (connection error, 5xx) send the same bytes again until the broker answers. Mid
stream the broker is SIGKILLed and restarted (twice) and PostgreSQL is stopped with
`pg_ctl stop -m immediate` and started again (once); the same broker must recover.

Asserted afterwards: every partition's state counts each of its messages once (count and
sum), the sink holds one item per source message (each source transactionId once), every
source message is acknowledged, no cycle was answered 5xx after its retries ran out, no
deadlock and no broker panic.

usage: streams.py
"""

import threading
import time

from common import (Broker, Client, Failures, Stats, configure, deadlocks_in, exit_with, log,
                    pg_log_since, pg_log_size, pg_start, pg_stop_immediate, psql, q)

PARTITIONS = 4
PER_PARTITION = 150
RUNNERS = 2


class Streams:
    def __init__(self, port):
        self.run = f"relst{int(time.time())}"
        self.source, self.sink = f"{self.run}_src", f"{self.run}_sink"
        self.group = f"streams.{self.run}"
        self.port = port
        self.stats = Stats()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.counts = {"committed": 0, "replayed": 0, "refused": 0, "lost": 0}
        self.threads = []

    def setup(self):
        c = Client(self.port, self.stats)
        configure(c, self.source, leaseTime=2)
        configure(c, self.sink)
        for p in range(PARTITIONS):
            items = [{"queue": self.source, "partition": f"p{p}", "transactionId": f"s{p}-{i}",
                      "payload": {"n": i}} for i in range(PER_PARTITION)]
            st, body = c.json("POST", "/api/v1/push", {"items": items})
            assert st == 201, (st, body)
        st, body = c.json("POST", "/streams/v1/queries",
                          {"name": self.run, "source_queue": self.source, "sink_queue": self.sink,
                           "config_hash": "sum-v1"})
        assert st == 200, (st, body)
        self.query_id = body["query_id"]

    def call(self, c, path, body, deadline):
        """The SDK's retry: the same body until a non-5xx answer or the deadline. Not cut
        short by `stop`: a runner finishes the cycle it holds (a cycle begun as the run
        ended was counted lost before it was sent)."""
        while time.time() < deadline:
            try:
                st, res = c.json("POST", path, body, timeout=20)
            except Exception:
                time.sleep(0.2)
                continue
            if st >= 500:
                time.sleep(0.2)
                continue
            return st, res
        return None, None

    def runner(self, idx):
        c = Client(self.port, self.stats)
        path = (f"/api/v1/pop/queue/{q(self.source)}?batch=10&wait=true&timeout=300"
                f"&consumerGroup={q(self.group)}")
        while not self.stop.is_set():
            try:
                st, pop = c.json("GET", path, timeout=10)
            except Exception:
                time.sleep(0.2)
                continue
            if st != 200 or not pop or not pop.get("messages"):
                time.sleep(0.05)
                continue
            msgs = pop["messages"]
            pid = msgs[0]["partitionId"]
            st, state = self.call(c, "/streams/v1/state/get",
                                  {"query_id": self.query_id, "partition_id": pid, "keys": []},
                                  time.time() + 60)
            if st != 200:
                continue
            agg = next((r["value"] for r in state["rows"] if r["key"] == "agg"), {"n": 0, "sum": 0})
            agg = {"n": agg["n"] + len(msgs), "sum": agg["sum"] + sum(m["data"]["n"] for m in msgs)}
            body = {"query_id": self.query_id, "partition_id": pid, "consumer_group": self.group,
                    "state_ops": [{"type": "upsert", "key": "agg", "value": agg}],
                    "push_items": [{"queue": self.sink, "partition": msgs[0]["partition"],
                                    "payload": {"src": m["transactionId"]}} for m in msgs],
                    "ack": {"transactionId": msgs[-1]["transactionId"], "leaseId": pop["leaseId"],
                            "status": "completed", "count": len(msgs)},
                    "release_lease": True}
            st, res = self.call(c, "/streams/v1/cycle", body, time.time() + 60)
            with self.lock:
                if st is None:
                    self.counts["lost"] += 1
                elif st != 200:
                    self.counts[f"answered {st}"] = self.counts.get(f"answered {st}", 0) + 1
                elif res.get("success") is not True:
                    self.counts["refused"] += 1
                elif res.get("replayed"):
                    self.counts["replayed"] += 1
                else:
                    self.counts["committed"] += 1
            time.sleep(0.01 * idx)

    def start(self):
        self.threads = [threading.Thread(target=self.runner, args=(i,), daemon=True)
                        for i in range(RUNNERS)]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)

    def acked(self):
        out = psql(f"SELECT COALESCE(sum(c.committed + 1), 0) FROM queen.log_consumers c "
                   f"JOIN queen.log_partitions p ON p.id = c.partition_id "
                   f"JOIN queen.queues qq ON qq.id = p.queue_id "
                   f"WHERE qq.name = '{self.source}' AND c.consumer_group = '{self.group}'",
                   check=False)
        try:
            return int(out[0][0])
        except (IndexError, ValueError):
            return -1

    def wait_progress(self, at_least, within=60):
        deadline = time.time() + within
        while time.time() < deadline:
            if self.acked() >= at_least:
                return True
            time.sleep(0.1)
        return False


def sink_items(port, sink, stats):
    c = Client(port, stats)
    got = []
    while True:
        st, pop = c.json("GET", f"/api/v1/pop/queue/{q(sink)}?batch=100&wait=false"
                                f"&consumerGroup=verify&autoAck=true")
        if st != 200 or not pop or not pop.get("messages"):
            return got
        got += [m["data"]["src"] for m in pop["messages"]]


def main():
    fail = Failures()
    broker = Broker("streams")
    broker.start()
    mark = pg_log_size()
    s = Streams(broker.port)
    s.setup()
    total = PARTITIONS * PER_PARTITION
    s.start()
    for r in range(2):
        fail.check(s.wait_progress((r + 1) * total // 5), f"progress before kill {r}")
        broker.kill9()
        log(f"broker killed (round {r}) at {s.acked()} acknowledged")
        broker.start()
    fail.check(s.wait_progress(3 * total // 5), "progress before the database stop")
    st = pg_stop_immediate()
    fail.check(st.returncode == 0, f"pg_ctl stop: {st.stderr}")
    log(f"PostgreSQL stopped at {s.acked()} acknowledged")
    time.sleep(2)
    st = pg_start()
    fail.check(st.returncode == 0, f"pg_ctl start: {st.stderr}")
    fail.check(s.wait_progress(total, within=120), f"all acknowledged ({s.acked()} of {total})")
    s.finish()
    log(f"cycles: {s.counts}")
    fail.check(s.counts["lost"] == 0, f"a cycle found no broker within its retries: {s.counts}")
    fail.check(not [k for k in s.counts if k.startswith("answered")],
               f"a cycle was answered neither 200 nor 5xx: {s.counts}")
    fail.check(s.counts["replayed"] + s.counts["committed"] > 0, "cycles committed")
    rows = psql(f"SELECT p.name || '=' || (s.value->>'n') || ',' || (s.value->>'sum') "
                f"FROM queen.stream_state s JOIN queen.log_partitions p ON p.id = s.partition_id "
                f"WHERE s.query_id = '{s.query_id}' AND s.key = 'agg' ORDER BY p.name")
    want = "\n".join(f"p{p}={PER_PARTITION},{PER_PARTITION * (PER_PARTITION - 1) // 2}"
                     for p in range(PARTITIONS))
    rows = "\n".join(r[0] for r in rows)
    fail.check(rows == want, f"state counts each message once: {rows!r} != {want!r}")
    got = sink_items(broker.port, s.sink, s.stats)
    srcs = {f"s{p}-{i}" for p in range(PARTITIONS) for i in range(PER_PARTITION)}
    fail.check(len(got) == total and set(got) == srcs,
               f"the sink holds each source message once: {len(got)} items, "
               f"{len(set(got))} distinct, {len(srcs - set(got))} missing")
    fail.check(not deadlocks_in(pg_log_since(mark)), "no deadlock")
    fail.check(not broker.panics(), f"no panic: {broker.panics()[:3]}")
    broker.stop()
    exit_with(fail, "streams_crash")


if __name__ == "__main__":
    main()
