#!/usr/bin/env python3
"""Steady push/consume under retention (docs/operations.md, lifecycle): do the tables plateau, and what does
maintenance cost the requests running beside it?

    plateau.py run --seconds 600 --retention 60 [--maintenance-ms 10000] [--check] [--json OUT]
    plateau.py report --out DIR RUN.json ...     # chart + Markdown from saved runs

`run` starts a broker (maintenance on unless --maintenance-ms 0), configures one queue
of 4 partitions with `retentionSeconds` (`completedRetentionSeconds` half of it, the
dedup window equal to it, so the sidecar purges on the clock's 900 s floor),
pushes RATE messages/s in requests of 10 from 2 producers while 2 consumers pop (batch
50, long-poll) and ack, and samples every 10 s: the queue's segments and sidecar rows and
bytes (queen.partition_storage) and, per table, total relation bytes, live and dead
tuples and autovacuum runs (pg_stat_user_tables). Push and ack latencies are measured
at the client. With --check (reliability::plateau_long, RELIABILITY_LONG=1) it asserts
that the queue's segment bytes and every table's bytes stop growing once retention is
in steady state; the sidecar is held to its clock instead (contract: GREATEST(dedup
window, completed retention, 900 s)), since a run shorter than that cannot see it purge.
"""

import argparse
import json
import os
import threading
import time

from common import Broker, Client, Failures, Psql, configure, exit_with, log, maintenance_metrics, q

PARTITIONS = 4
SAMPLE_SECONDS = 10
PURGE_CLOCK_FLOOR = 900  # docs/contract.md §13: the sidecar purge clock's floor (the queue's window is shorter)
TABLES = ["log_segments", "log_txns", "log_consumers", "log_leases", "log_partitions"]
# Growth allowed between the middle and the end of a steady run, and an absolute slack
# below which sizes are noise (a page or two of an index).
GROWTH = 1.25
SLACK_BYTES = 512 * 1024


def percentile(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


class Load:
    def __init__(self, port, queue, rate, fail):
        self.port, self.queue, self.rate, self.fail = port, queue, rate, fail
        self.stop = threading.Event()
        self.push_ms, self.ack_ms = [], []
        self.pushed = self.acked = 0
        self.lock = threading.Lock()

    def producer(self, idx):
        c = Client(self.port)
        every = 10 / (self.rate / 2)  # two producers, 10 messages a request
        seq, nxt = 0, time.time()
        while not self.stop.is_set():
            items = [{"queue": self.queue, "partition": f"p{(seq + i) % PARTITIONS}",
                      "payload": {"p": idx, "s": seq + i, "pad": "x" * 64},
                      "transactionId": f"{self.queue}-{idx}-{seq + i}"} for i in range(10)]
            seq += 10
            t0 = time.perf_counter()
            st, body = c.json("POST", "/api/v1/push", {"items": items})
            ms = (time.perf_counter() - t0) * 1000
            if st != 201:
                self.fail.add(f"push answered {st}: {str(body)[:200]}")
            with self.lock:
                self.push_ms.append(ms)
                self.pushed += len(items)
            nxt += every
            time.sleep(max(0.0, nxt - time.time()))

    def consumer(self, idx):
        c = Client(self.port)
        while not self.stop.is_set():
            st, body = c.json("GET", f"/api/v1/pop/queue/{q(self.queue)}?batch=50&wait=true&timeout=1000"
                                     f"&consumerGroup=g")
            if st == 204:
                continue
            if st != 200:
                self.fail.add(f"pop answered {st}: {str(body)[:200]}")
                time.sleep(0.5)
                continue
            acks = [{"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": body["leaseId"]} for m in body["messages"]]
            t0 = time.perf_counter()
            st, ans = c.json("POST", "/api/v1/ack/batch", {"consumerGroup": "g", "acknowledgments": acks})
            ms = (time.perf_counter() - t0) * 1000
            if st != 200:
                self.fail.add(f"ack answered {st}: {str(ans)[:200]}")
            with self.lock:
                self.ack_ms.append(ms)
                self.acked += sum(1 for a in (ans or []) if isinstance(a, dict) and a.get("success"))


def sample(db, queue, t):
    row = db.query(f"""
SELECT COALESCE(sum(segments), 0), COALESCE(sum(segment_bytes), 0),
       COALESCE(sum(sidecar_rows), 0), COALESCE(sum(sidecar_bytes), 0)
  FROM queen.partition_storage WHERE queue = '{queue}'""")[0].split("\t")
    s = {"t": round(t, 1), "segments": int(row[0]), "segment_bytes": int(row[1]),
         "sidecar_rows": int(row[2]), "sidecar_bytes": int(row[3]), "tables": {}}
    for line in db.query(f"""
SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup, autovacuum_count
  FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname IN ({",".join(f"'{t}'" for t in TABLES)})"""):
        name, size, live, dead, av = line.split("\t")
        s["tables"][name] = {"bytes": int(size), "live": int(live), "dead": int(dead), "autovacuums": int(av)}
    return s


def run(args, fail):
    label = "on" if args.maintenance_ms else "off"
    queue = f"plateau{int(time.time())}_{label}"
    broker = Broker(f"plateau-{label}", env={"QUEEN_MAINTENANCE_INTERVAL_MS": str(args.maintenance_ms)})
    broker.start()
    try:
        return measure(args, fail, broker, label, queue)
    finally:
        broker.stop()  # also when a run fails: a stray broker would go on maintaining


def measure(args, fail, broker, label, queue):
    c = Client(broker.port)
    # The dedup window as long as retention, so the sidecar's purge clock is its 900 s
    # floor, not the default window's hour: a run of ~15 min sees the sidecar plateau too.
    configure(c, queue, leaseTime=30, retentionSeconds=args.retention,
              completedRetentionSeconds=max(1, args.retention // 2), dedupWindowSeconds=args.retention)
    load = Load(broker.port, queue, args.rate, fail)
    threads = [threading.Thread(target=load.producer, args=(i,), daemon=True) for i in range(2)]
    threads += [threading.Thread(target=load.consumer, args=(i,), daemon=True) for i in range(2)]
    log(f"plateau: queue {queue}, maintenance {label} ({args.maintenance_ms} ms), retention "
        f"{args.retention}s, {args.rate} msgs/s for {args.seconds}s")
    db = Psql()
    t0 = time.time()
    samples = [sample(db, queue, 0.0)]
    for t in threads:
        t.start()
    while time.time() - t0 < args.seconds:
        time.sleep(SAMPLE_SECONDS - (time.time() - t0) % SAMPLE_SECONDS)
        s = sample(db, queue, time.time() - t0)
        samples.append(s)
        log(f"  t={s['t']:.0f}s segments={s['segments']} ({s['segment_bytes'] / 1e6:.2f} MB) sidecar={s['sidecar_rows']} "
            f"({s['sidecar_bytes'] / 1e6:.2f} MB) tables={sum(x['bytes'] for x in s['tables'].values()) / 1e6:.2f} MB "
            f"dead cursors={s['tables'].get('log_consumers', {}).get('dead')}")
    load.stop.set()
    for t in threads:
        t.join(timeout=30)
    maint = maintenance_metrics(c)
    c.request("DELETE", f"/api/v1/resources/queues/{q(queue)}")
    db.close()
    result = {
        "label": label, "maintenance_ms": args.maintenance_ms, "retention": args.retention,
        "rate": args.rate, "seconds": args.seconds, "pushed": load.pushed, "acked": load.acked,
        "push_p50_ms": percentile(load.push_ms, 50), "push_p99_ms": percentile(load.push_ms, 99),
        "ack_p50_ms": percentile(load.ack_ms, 50), "ack_p99_ms": percentile(load.ack_ms, 99),
        "maintenance": maint, "samples": samples,
    }
    log(f"plateau {label}: pushed {load.pushed}, acked {load.acked}; push p50/p99 "
        f"{result['push_p50_ms']:.2f}/{result['push_p99_ms']:.2f} ms, ack p50/p99 "
        f"{result['ack_p50_ms']:.2f}/{result['ack_p99_ms']:.2f} ms")
    return result


def steady(samples, retention):
    """The samples of the steady state, split in a middle and a final part: from two
    retention periods in (the first deletions are due after one) to the end."""
    live = [s for s in samples if s["t"] >= 2 * retention + SAMPLE_SECONDS]
    half = len(live) // 2
    return live[:half], live[half:]


def check(result, fail):
    mid, end = steady(result["samples"], result["retention"])
    if not fail.check(len(mid) >= 3, f"run too short to see a plateau: {len(mid)} middle samples"):
        return
    series = {"queue segment bytes": lambda s: s["segment_bytes"]}
    sidecar_steady = result["seconds"] > PURGE_CLOCK_FLOOR + 2 * result["retention"] + 60
    for t in TABLES if sidecar_steady else [t for t in TABLES if t != "log_txns"]:
        series[f"table {t} bytes"] = lambda s, t=t: s["tables"].get(t, {}).get("bytes", 0)
    if sidecar_steady:
        series["queue sidecar bytes"] = lambda s: s["sidecar_bytes"]
    else:
        log(f"plateau: the sidecar purges on a {PURGE_CLOCK_FLOOR}s clock; a {result['seconds']}s run "
            f"holds it to that clock instead")
        oldest_allowed = (PURGE_CLOCK_FLOOR + 60) * result["rate"] * 1.2  # a row holds ≥ 1 message
        worst = max(s["sidecar_rows"] for s in result["samples"])
        fail.check(worst <= oldest_allowed, f"sidecar rows {worst} exceed what its clock keeps ({oldest_allowed:.0f})")
    for name, f in series.items():
        a, b = max(f(s) for s in mid), max(f(s) for s in end)
        fail.check(b <= a * GROWTH + SLACK_BYTES,
                   f"{name} kept growing: {a} in the middle of the steady state, {b} at the end")
        log(f"plateau: {name}: {a / 1e6:.2f} MB (middle) -> {b / 1e6:.2f} MB (end)")
    fail.check(result["maintenance"].get('queen_maintenance_runs_total{result="failed"}', 1) == 0,
               f"maintenance runs failed: {result['maintenance']}")


# ----------------------------------------------------------------------------- report


def tables_bytes(s):
    return sum(x["bytes"] for x in s["tables"].values())


def svg_chart(runs, title):
    """Queue bytes (segments + sidecar) and all tables' bytes over time, one line each per run."""
    w, h, pad = 760, 380, 60
    lines = []
    for r in runs:
        pts_q = [(s["t"] / 60, (s["segment_bytes"] + s["sidecar_bytes"]) / 1e6) for s in r["samples"]]
        base = tables_bytes(r["samples"][0])
        pts_t = [(s["t"] / 60, (tables_bytes(s) - base) / 1e6) for s in r["samples"]]
        lines.append((f"queue segments + sidecar, maintenance {r['label']}", pts_q, r["label"] == "on", False))
        lines.append((f"log tables' growth since the start (heap + TOAST + indexes), maintenance {r['label']}",
                      pts_t, r["label"] == "on", True))
    xmax = max(p[0] for _, pts, _, _ in lines for p in pts) or 1
    ymax = max(p[1] for _, pts, _, _ in lines for p in pts) * 1.05 or 1
    X = lambda x: pad + x / xmax * (w - 2 * pad)  # noqa: E731
    Y = lambda y: h - pad - y / ymax * (h - 2 * pad)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 20 * len(lines)}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - pad + 35}" text-anchor="middle">minutes</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">MB</text>']
    for i in range(6):
        xv, yv = xmax * i / 5, ymax * i / 5
        out.append(f'<text x="{X(xv)}" y="{h - pad + 15}" text-anchor="middle">{xv:.1f}</text>')
        out.append(f'<text x="{pad - 5}" y="{Y(yv) + 4}" text-anchor="end">{yv:.1f}</text>')
    for i, (name, pts, on, dashed) in enumerate(lines):
        color = "#1f77b4" if on else "#d62728"
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in pts)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{path}"/>')
        ly = h + 20 * i
        out.append(f'<line x1="{pad}" y1="{ly}" x2="{pad + 30}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{pad + 38}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


def report(args):
    runs = [json.load(open(p)) for p in args.runs]
    os.makedirs(args.out, exist_ok=True)
    chart = "lifecycle_bytes_over_time.svg"
    with open(os.path.join(args.out, chart), "w") as f:
        f.write(svg_chart(runs, f"Steady load with retention {runs[0]['retention']} s: bytes over time"))
    md = ["## Lifecycle: table bytes over time, and what maintenance costs requests", "",
          f"`bash bench/lifecycle.sh --seconds {runs[0]['seconds']}`: one queue of {PARTITIONS} partitions, "
          f"retentionSeconds {runs[0]['retention']} (completedRetentionSeconds half of it, the dedup window "
          f"equal to it, so the sidecar purges on the clock's {PURGE_CLOCK_FLOOR} s floor), "
          f"{runs[0]['rate']} msgs/s pushed in requests of 10 by 2 producers, 2 consumers popping "
          "(batch 50) and acking; the same run with the broker's maintenance loop on "
          f"(every {max(r['maintenance_ms'] for r in runs)} ms) and off (retention configured, never "
          "enforced: what 0.1.0 did), each on a fresh cluster. Latencies at the client, over the whole run. "
          "\"Tables grew\": heap + TOAST + indexes of the log tables since the run's start; the "
          "sidecar grows until its clock, then its deleted rows are vacuumed and reused.", "",
          "| maintenance | pushed | push p50 / p99 ms | ack p50 / p99 ms | queue MB at end | tables grew, MB | cursor dead tuples at end | autovacuums (all tables) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        last = r["samples"][-1]
        md.append(f"| {r['label']} | {r['pushed']} | {r['push_p50_ms']:.2f} / {r['push_p99_ms']:.2f} | "
                  f"{r['ack_p50_ms']:.2f} / {r['ack_p99_ms']:.2f} | "
                  f"{(last['segment_bytes'] + last['sidecar_bytes']) / 1e6:.2f} | "
                  f"{(tables_bytes(last) - tables_bytes(r['samples'][0])) / 1e6:.2f} | "
                  f"{last['tables'].get('log_consumers', {}).get('dead', 0)} | "
                  f"{sum(x['autovacuums'] - r['samples'][0]['tables'].get(n, {}).get('autovacuums', 0) for n, x in last['tables'].items())} |")
    by = {r["label"]: r for r in runs}
    if "on" in by and "off" in by:
        md += ["", f"p99 with maintenance / without: push {by['on']['push_p99_ms'] / by['off']['push_p99_ms']:.2f}×, "
                   f"ack {by['on']['ack_p99_ms'] / by['off']['ack_p99_ms']:.2f}× (target ≤ 1.5×)."]
        m = by["on"]["maintenance"]
        md += ["", "Maintenance did: " + ", ".join(
            f"{k.removeprefix('queen_maintenance_')} {v:g}" for k, v in sorted(m.items())
            if "timestamp" not in k) + "."]
    md += ["", f"![bytes over time]({chart})", ""]
    with open(os.path.join(args.out, "lifecycle.md"), "w") as f:
        f.write("\n".join(md))
    # The bench report gains this section (replacing an earlier one; it is always last).
    rep = os.path.join(args.out, "report.md")
    if os.path.exists(rep):
        text = open(rep).read()
        head = text.split(md[0])[0].rstrip("\n")
        with open(rep, "w") as f:
            f.write(head + "\n\n" + "\n".join(md))
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seconds", type=int, default=600)
    r.add_argument("--retention", type=int, default=60)
    r.add_argument("--rate", type=int, default=200)
    r.add_argument("--maintenance-ms", type=int, default=10000)
    r.add_argument("--check", action="store_true")
    r.add_argument("--json")
    p = sub.add_parser("report")
    p.add_argument("--out", required=True)
    p.add_argument("runs", nargs="+")
    args = ap.parse_args()
    if args.cmd == "report":
        return report(args)
    fail = Failures()
    result = run(args, fail)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    if args.check:
        check(result, fail)
    exit_with(fail, "plateau")


if __name__ == "__main__":
    main()
