"""One consumer of the bench's peer section (crates/queen_bench/src/peers), written the way
a user scripts one in Python with psycopg 3: an autocommit connection, parameters bound
by psycopg (server-side prepared after psycopg's default of 5 executions), each system's
documented consume cycle, rows fetched and payloads decoded into Python objects.

    peer_client.py --url URL --system queen|pgmq|pgq --worker I --batch B --seconds S

Consumes worker I's share (queen_ack: partition p<I> of the bench queue; pgmq: the one
shared queue; PgQ: queue bench_q<I>) until it is empty or S seconds have passed, then
prints one JSON object: {"msgs", "lat_ms" (each ack statement's latency), "errors",
"drained", "finished_s"}. It prints "ready" once connected and starts on a line on stdin. The harness starts one process per consumer, as a fleet of
Python consumers runs (one interpreter each: no GIL shared between them).
"""

import argparse
import json
import sys
import time

import psycopg

QUEEN_Q = "bench_peers"
PGMQ_Q = "bench"
PGQ_CONSUMER = "bench"
# Longer than any cell, so no message is delivered twice inside one (as the Rust client).
LEASE_SECS = 120


def consume_queen(conn, worker, batch, deadline, out):
    partition = f"p{worker}"
    while time.monotonic() < deadline and len(out["errors"]) < 5:
        rows = conn.execute(
            "SELECT r_partition_id, r_lease_id, r_transaction_id, r_payload"
            "  FROM queen.pop(%s, p_partition => %s, p_batch => %s, p_lease_seconds => %s)",
            (QUEEN_Q, partition, batch, LEASE_SECS),
        ).fetchall()
        if not rows:
            out["drained"] = True
            return
        pid, lease = rows[0][0], rows[0][1]
        txns = [r[2] for r in rows]
        t = time.perf_counter()
        (r,) = conn.execute("SELECT queen.ack(%s, %s, %s)", (pid, lease, txns)).fetchone()
        out["lat_ms"].append((time.perf_counter() - t) * 1000.0)
        acked = r.get("acked", -1)
        if acked != len(rows):
            out["errors"].append(f"ack: acked {acked} of {len(rows)}: {r.get('error')}")
        out["msgs"] += max(acked, 0)


def consume_pgmq(conn, batch, deadline, out):
    while time.monotonic() < deadline and len(out["errors"]) < 5:
        rows = conn.execute(
            "SELECT msg_id, message FROM pgmq.read(%s, %s, %s)", (PGMQ_Q, LEASE_SECS, batch)
        ).fetchall()
        if not rows:
            out["drained"] = True
            return
        ids = [r[0] for r in rows]
        t = time.perf_counter()
        (k,) = conn.execute("SELECT count(*) FROM pgmq.delete(%s, %s::bigint[])", (PGMQ_Q, ids)).fetchone()
        out["lat_ms"].append((time.perf_counter() - t) * 1000.0)
        if k != len(ids):
            out["errors"].append(f"pgmq delete: {k} of {len(ids)} ids")
        out["msgs"] += k


def consume_pgq(conn, worker, deadline, out):
    queue = f"bench_q{worker}"
    while time.monotonic() < deadline and len(out["errors"]) < 5:
        with conn.transaction():
            (batch_id,) = conn.execute("SELECT pgq.next_batch(%s, %s)", (queue, PGQ_CONSUMER)).fetchone()
            if batch_id is None:
                out["drained"] = True
                return
            rows = conn.execute("SELECT ev_id, ev_data FROM pgq.get_batch_events(%s)", (batch_id,)).fetchall()
            # PgQ's ev_data is text: a consumer decodes it as the others get it decoded.
            for r in rows:
                json.loads(r[1])
            t = time.perf_counter()
            conn.execute("SELECT pgq.finish_batch(%s)", (batch_id,))
        out["lat_ms"].append((time.perf_counter() - t) * 1000.0)
        out["msgs"] += len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--system", choices=["queen", "pgmq", "pgq"], required=True)
    ap.add_argument("--worker", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    a = ap.parse_args()
    out = {"msgs": 0, "lat_ms": [], "errors": [], "drained": False, "finished_s": 0.0}
    with psycopg.connect(a.url, autocommit=True) as conn:
        # Connected: wait for the harness's go (a line on stdin), sent once every
        # consumer is ready, when its clock starts.
        print("ready", flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        deadline = start + a.seconds
        try:
            if a.system == "queen":
                consume_queen(conn, a.worker, a.batch, deadline, out)
            elif a.system == "pgmq":
                consume_pgmq(conn, a.batch, deadline, out)
            else:
                consume_pgq(conn, a.worker, deadline, out)
        except psycopg.Error as e:
            out["errors"].append(f"{a.system}: {e}")
        out["finished_s"] = time.monotonic() - start
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
