#!/usr/bin/env python3
"""The differential run (docs/citus.md, "Tests"): one seeded scenario of pushes, pops (by partition and
queue-level), acks by transactionId and positional, nacks (with and without a delay), DLQ
filings, lease renewals and multi-partition acks, run step by step against a one-node
database and a distributed one. Every call's result must be the same on both, and so
must the state at the end (every queen table, and the queue statistics).

    citus_differential.py ONE_NODE_DB_URL CITUS_DB_URL [steps] [seed]

Both databases hold a fresh CREATE EXTENSION queen_ack (the Citus one distributed);
tests/citus_differential.sh prepares them. Partitions are created with the same ids in
both (queue-level pops break ties by partition id), and every lease id is chosen here, so
results differ only in what is random or a clock reading by design: message ids,
timestamps. Those are normalised away. Python 3 stdlib and psql only.
"""

import json
import random
import subprocess
import sys
import uuid

ONE, CITUS = sys.argv[1], sys.argv[2]
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 400
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else 15
NS = uuid.UUID("5d5c4f63-0a6e-4b0c-9d0e-5f1b51ab0015")
QUEUES = {"dq": '{"retryLimit": 2}', "dd": '{"retryLimit": 1, "deadLetterQueue": false, "dlqAfterMaxRetries": false}'}
PARTITIONS = ["P0", "P1", "P2", "P3", "P4", "P5"]
GROUPS = ["__QUEUE_MODE__", "g1"]
# Keys whose values are random or clock readings by design.
RANDOM_KEYS = {"messageId", "createdAt", "id", "expiresAt", "redeliverAt"}


def psql(url, sql):
    """(ok, output): the statement's rows as text, or the ERROR line."""
    r = subprocess.run(["psql", url, "-X", "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       capture_output=True, text=True)
    if r.returncode != 0:
        err = [l for l in r.stderr.splitlines() if l.startswith("ERROR:")]
        return False, err[0] if err else r.stderr.strip()
    return True, r.stdout.rstrip("\n")


def normalise(v):
    """Random and clock-valued fields become whether they were there."""
    if isinstance(v, dict):
        return {k: (x is not None if k in RANDOM_KEYS else normalise(x)) for k, x in sorted(v.items())}
    if isinstance(v, list):
        return [normalise(x) for x in v]
    return v


def as_json(text):
    try:
        return normalise(json.loads(text))
    except ValueError:
        return text


def pid(queue, name):
    return str(uuid.uuid5(NS, f"{queue}/{name}"))


class Run:
    def __init__(self):
        self.rnd = random.Random(SEED)
        self.step = 0
        self.txns = {}          # (pid, offset) -> transactionId, from the push results
        self.counter = 0
        self.leases = {}        # (pid, group) -> (worker, [offsets])
        self.mismatches = []
        self.calls = {}

    def both(self, what, sql, parse=as_json):
        """Run one call on both databases; they must agree. Returns the one-node result."""
        self.step += 1
        self.calls[what] = self.calls.get(what, 0) + 1
        a, b = psql(ONE, sql), psql(CITUS, sql)
        na, nb = (a[0], parse(a[1]) if a[0] else a[1]), (b[0], parse(b[1]) if b[0] else b[1])
        if na != nb:
            self.mismatches.append((self.step, what, sql, na, nb))
        return a

    # ---------------------------------------------------------------- operations

    def push(self):
        q, p = self.rnd.choice(list(QUEUES)), self.rnd.choice(PARTITIONS)
        n = self.rnd.randint(1, 4)
        ids = []
        for _ in range(n):
            if self.txns and self.rnd.random() < 0.08:
                ids.append(self.rnd.choice(list(self.txns.values())))  # a duplicate
            else:
                self.counter += 1
                ids.append(f"{q}-{p}-{self.counter}")
        if len(set(ids)) != len(ids):
            ids = list(dict.fromkeys(ids))
        payloads = json.dumps([{"n": self.counter, "i": i} for i in range(len(ids))])
        arr = ",".join(f"'{t}'" for t in ids)
        ok, out = self.both("push", f"SELECT queen.push('{q}', '{payloads}', ARRAY[{arr}], '{p}')")
        if ok:
            r = json.loads(out)
            if r.get("status") == "queued":
                for m in r["messages"]:
                    self.txns[(pid(q, p), m["offset"])] = m["transactionId"]

    def pop(self):
        q = self.rnd.choice(list(QUEUES))
        g = self.rnd.choice(GROUPS)
        worker = f"w{self.step}"
        budget = self.rnd.randint(1, 5)
        if self.rnd.random() < 0.5:
            target, maxp = f"'{self.rnd.choice(PARTITIONS)}'", 1
        else:
            target, maxp = "NULL", self.rnd.randint(1, 3)
        sql = (f"SELECT r_partition_id, r_partition, r_base, r_start_idx, r_take, r_msg_count, r_attempt "
               f"FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', '{q}', {target}, '{g}', "
               f"{budget}, 300, '{worker}', false, 'all', '', {maxp}) ORDER BY 1, 3")
        ok, out = self.both("pop", sql, parse=lambda t: t)
        if ok and out:
            got = {}
            for line in out.splitlines():
                p, _, base, start, take = line.split("|")[:5]
                got.setdefault(p, []).extend(range(int(base) + int(start), int(base) + int(start) + int(take)))
            for p, offs in got.items():
                self.leases[(p, g)] = (worker, offs)

    def _lease(self):
        if not self.leases:
            return None
        key = self.rnd.choice(sorted(self.leases))
        return key, self.leases[key]

    def _settled(self, key, result):
        if isinstance(result, dict) and (result.get("leaseReleased") or result.get("ok") is False):
            self.leases.pop(key, None)

    def ack_hash(self):
        pick = self._lease()
        if not pick:
            return
        (p, g), (worker, offs) = pick
        chosen = sorted(self.rnd.sample(offs, self.rnd.randint(1, len(offs))))
        hashes = ",".join(f"queen.xxh3_128('{self.txns.get((p, o), 'unknown')}')" for o in chosen)
        statuses = ",".join(f"'{self.rnd.choices(['completed', 'failed', 'retry', 'dlq'], [6, 2, 1, 1])[0]}'"
                            for _ in chosen)
        if self.rnd.random() < 0.15:
            sql = (f"SELECT queen.log_ack_by_hash_delay_v1('{p}', '{g}', '{worker}', ARRAY[{hashes}], "
                   f"ARRAY[{statuses}], 3600)")
        else:
            sql = f"SELECT queen.log_ack_by_hash_v1('{p}', '{g}', '{worker}', ARRAY[{hashes}], ARRAY[{statuses}])"
        ok, out = self.both("ack_by_hash", sql)
        if not ok:
            return
        r = json.loads(out)
        if r.get("dlq"):
            ok, out = self.both("dlq_filing", f"SELECT queen.log_dlq_head_v1('{p}', '{g}', '{worker}', {r['off']}, "
                                              f"NULL, NULL, NULL, 'poison at step {self.step}')")
            self.leases.pop((p, g), None)
        else:
            self._settled((p, g), r)

    def ack_at(self):
        pick = self._lease()
        if not pick:
            return
        (p, g), (worker, offs) = pick
        if self.rnd.random() < 0.2:
            sql = f"SELECT queen.log_ack_at_v1('{p}', '{g}', '{worker}', NULL, false)"
        else:
            sql = f"SELECT queen.log_ack_at_v1('{p}', '{g}', '{worker}', {max(offs)})"
        ok, out = self.both("ack_at", sql)
        if ok:
            self._settled((p, g), json.loads(out))

    def ack_multi(self):
        keys = sorted(self.leases)
        if len(keys) < 2:
            return
        picked = self.rnd.sample(keys, 2)
        rows = [(p, g, self.leases[(p, g)][0], max(self.leases[(p, g)][1]), len(self.leases[(p, g)][1]))
                for p, g in picked]
        col = lambda i, t: ",".join(f"'{r[i]}'" if t == "text" else str(r[i]) for r in rows)
        sql = (f"SELECT queen.log_ack_multi_v1(ARRAY[{col(0, 'text')}], ARRAY[{col(1, 'text')}], "
               f"ARRAY[{col(3, 'int')}]::bigint[], ARRAY[{col(2, 'text')}], ARRAY[{col(4, 'int')}])")
        ok, out = self.both("ack_multi", sql)
        if ok:
            for key, res in zip(picked, json.loads(out)["results"]):
                if res["ok"]:
                    self.leases.pop(key, None)

    def renew(self):
        pick = self._lease()
        worker = pick[1][0] if pick and self.rnd.random() < 0.8 else "never-issued"
        self.both("renew", f"SELECT queen.log_renew_lease_v1('{worker}', 600)")

    def bogus_ack(self):
        pick = self._lease()
        if not pick:
            return
        (p, g), (_, offs) = pick
        self.both("ack_with_a_wrong_lease", f"SELECT queen.log_ack_at_v1('{p}', '{g}', 'not-the-lease', {max(offs)})")

    # ---------------------------------------------------------------- the run

    def setup(self):
        for q, opts in QUEUES.items():
            # (its queue id and Default partition id are random on each side)
            self.both("configure", f"SELECT queen.configure_queue_v1('{q}', NULL, NULL, '{opts}') - 'queueId' - 'partitionId'")
            for p in PARTITIONS:
                # The same partition ids on both sides (rows as provisioning writes them).
                self.both("partition", f"INSERT INTO queen.partition_names (id, queue_id, name) "
                                       f"SELECT '{pid(q, p)}', id, '{p}' FROM queen.queues WHERE name = '{q}'; "
                                       f"INSERT INTO queen.log_partitions (id, queue_id, name) "
                                       f"SELECT '{pid(q, p)}', id, '{p}' FROM queen.queues WHERE name = '{q}'")

    def run(self):
        self.setup()
        ops = [(self.push, 30), (self.pop, 25), (self.ack_hash, 20), (self.ack_at, 9),
               (self.ack_multi, 5), (self.renew, 6), (self.bogus_ack, 5)]
        fns, weights = zip(*ops)
        for _ in range(STEPS):
            self.rnd.choices(fns, weights)[0]()
        return self.compare_state()

    # Partitions by name (queue/partition): the Default partitions configure creates have
    # random ids, different on the two sides.
    NAME = "(SELECT q.name || '/' || n.name FROM queen.partition_names n JOIN queen.queues q ON q.id = n.queue_id WHERE n.id = {})"
    STATE = {
        "queues": "SELECT name, retry_limit, dead_letter_queue FROM queen.queues",
        "partitions": f"SELECT {NAME.format('p.id')}, last_offset, log_start, txns_start FROM queen.log_partitions p",
        "segments": f"SELECT {NAME.format('partition_id')}, base_offset, end_offset, length(blob) > 0 FROM queen.log_segments",
        "sidecar": f"SELECT {NAME.format('partition_id')}, base_offset, end_offset, md5(hashes) FROM queen.log_txns",
        "cursors": f"SELECT {NAME.format('partition_id')}, consumer_group, committed, batch_retry_count, total_consumed,"
                   " evicted, redeliver_at IS NOT NULL FROM queen.log_consumers",
        "leases": f"SELECT {NAME.format('partition_id')}, consumer_group, worker_id, batch_end, attempt_offset,"
                  " attempt_count, lease_expires_at IS NOT NULL FROM queen.log_leases",
        "dlq": f"SELECT {NAME.format('partition_id')}, consumer_group, \"offset\", transaction_id, payload, error,"
               " retry_count FROM queen.log_dlq",
        "subscriptions": "SELECT m.consumer_group, q.name, m.subscription_mode FROM queen.consumer_groups_metadata m"
                         " JOIN queen.queues q ON q.id = m.queue_id",
        "queue_stats": "SELECT r_queue, r_partition, r_consumer_group, r_committed, r_lag, r_leased,"
                       " r_leased_messages, r_worker, r_retries, r_total_consumed, r_dlq,"
                       " r_redeliver_at IS NOT NULL FROM queen.queue_stats_v1()",
    }

    def compare_state(self):
        diffs = []
        for name, sql in self.STATE.items():
            a, b = psql(ONE, f"SELECT t::text FROM ({sql}) t ORDER BY 1"), psql(CITUS, f"SELECT t::text FROM ({sql}) t ORDER BY 1")
            if a != b:
                diffs.append((name, a, b))
            elif not a[0]:
                diffs.append((name, a, "(error on both)"))
        return diffs


def main():
    run = Run()
    diffs = run.run()
    counts = ", ".join(f"{k} {v}" for k, v in sorted(run.calls.items()))
    print(f"differential: {run.step} calls on each side ({counts}), seed {SEED}")
    failed = 0
    if run.mismatches:
        failed += 1
        print(f"test citus_differential::every_call_gives_the_same_result ... FAILED: {len(run.mismatches)} differ")
        for step, what, sql, a, b in run.mismatches[:5]:
            print(f"    step {step} {what}: {sql}\n      one node: {a}\n      citus:    {b}")
    else:
        print("test citus_differential::every_call_gives_the_same_result ... ok")
    if diffs:
        failed += 1
        print("test citus_differential::the_final_state_is_the_same ... FAILED")
        for name, a, b in diffs:
            print(f"    {name}:\n      one node: {str(a)[:600]}\n      citus:    {str(b)[:600]}")
    else:
        print("test citus_differential::the_final_state_is_the_same ... ok")
    rows = psql(ONE, "SELECT (SELECT count(*) FROM queen.log_segments) || ' segments, ' || "
                     "(SELECT count(*) FROM queen.log_dlq) || ' DLQ rows, ' || "
                     "(SELECT sum(total_consumed) FROM queen.log_consumers) || ' consumed'")[1]
    print(f"differential: state compared: {rows}")
    print(f"test result: {'ok' if not failed else 'FAILED'}. {2 - failed} passed; {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
