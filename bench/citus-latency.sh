#!/usr/bin/env bash
# Per-call latency and CPU of the hot calls on one node vs through a Citus coordinator
# (docs/citus.md), measured side by side in one run with pgbench (-M prepared, the broker's
# bind-parameter form; -r per-statement latencies).
#   bench/citus-latency.sh ONE_NODE_URL CITUS_URL [SECONDS] [CLIENTS]
# (superuser URLs of tests/cluster.sh's and tests/citus.sh's clusters; default 20 s a
# script, 1 client). Each side gets a scratch database queen_lat (dropped at the end):
# queue `lat` (dedup off, so one pre-encoded 10-message segment can be pushed again and
# again), one partition per client. Scripts, each a consume cycle of one client on its
# own partition:
#   hash   push 10 (log_push_one_v1, by names) -> pop 10 by id (log_pop_at_v1) ->
#          ack the 10 by transactionId (log_ack_by_hash_v1)
#   pos    push 10 by id (log_push_at_v1) -> pop 10 by id -> positional ack (log_ack_at_v1)
#   named  pop by names (broker_pop_v1: on Citus it runs on the coordinator) -> ack_at
# CPU per call and node: the clusters' postmasters' reaped children (cutime + cstime from
# /proc, in clock ticks) before and after each script; pgbench's backends exit at its end.
# Prints a table per side and the Citus/one-node ratios. Check `uptime` first: the
# figures are only worth something on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ONE=${1:?usage: $0 ONE_NODE_URL CITUS_URL [SECONDS] [CLIENTS]}
CITUS=${2:?usage: $0 ONE_NODE_URL CITUS_URL [SECONDS] [CLIENTS]}
SECS=${3:-20}
CLIENTS=${4:-1}
export PGOPTIONS="-c client_min_messages=warning"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBENCH=$("$PG_CONFIG" --bindir)/pgbench
WORK=$(mktemp -d /tmp/queen-citus-lat.XXXXXX)
[ -n "${QUEEN_BENCH_KEEP:-}" ] && echo "citus-latency: keeping $WORK and the queen_lat databases" >&2 || trap 'rm -rf "$WORK"' EXIT
. tests/testdb.sh
TICK=$(getconf CLK_TCK)

# The data directories of a side's nodes (tests/cluster.sh, tests/citus.sh layouts).
datadirs() { # side
    local p
    p=$(port_of "$2")
    if [ "$1" = one ]; then echo "/tmp/qa-test-cluster-$p"; else echo "/tmp/qa-citus-$p /tmp/qa-citus-$((p + 1)) /tmp/qa-citus-$((p + 2))"; fi
}
# Reaped-children CPU ticks of a node's postmaster.
cpu_ticks() { # datadir
    local pm
    pm=$(sudo head -1 "$1/postmaster.pid")
    awk '{print $16 + $17}' "/proc/$pm/stat"
}

prepare() { # side url -> db url on stdout
    local db=${2%/*}/queen_lat
    if [ "$1" = citus ]; then
        QUEEN_TEST_CITUS=1 testdb_create "$2" queen_lat
        psql "$db" -X -qAt -c "$(QUEEN_TEST_CITUS=1 testdb_install_sql)" >/dev/null
    else
        testdb_create "$2" queen_lat
        psql "$db" -X -qAt -c "CREATE EXTENSION queen_ack" >/dev/null
    fi
    psql "$db" -X -qAt -c "SELECT queen.configure_queue_v1('lat', NULL, NULL, '{\"dedupWindowSeconds\": 0, \"leaseTime\": 30}')" \
        -c "SELECT queen.push('lat', (SELECT jsonb_agg(jsonb_build_object('n', k, 'pad', repeat('x', 80))) FROM generate_series(0, 9) k),
                             (SELECT array_agg('t' || k) FROM generate_series(0, 9) k), 'seed')" >/dev/null
    for c in $(seq 0 $((CLIENTS - 1))); do
        psql "$db" -X -qAt -c "SELECT queen.push('lat', '[1]', ARRAY['init'], 'p$c')" \
            -c "SELECT count(*) FROM queen.log_pop_v1('lat', 'p$c', 'g', 10, 30, 'w', true)" >/dev/null
    done
    echo "$db"
}

scripts() { # db: writes the pgbench scripts with the seed segment as literals
    local seg hashes arr
    seg=$(psql "$1" -X -qAt -c "SELECT encode(s.blob, 'hex') FROM queen.log_segments s JOIN queen.partition_names n ON n.id = s.partition_id WHERE n.name = 'seed'")
    hashes=$(psql "$1" -X -qAt -c "SELECT encode(t.hashes, 'hex') FROM queen.log_txns t JOIN queen.partition_names n ON n.id = t.partition_id WHERE n.name = 'seed'")
    arr=$(psql "$1" -X -qAt -c "SELECT string_agg('''\\x' || encode(queen.xxh3_128('t' || k), 'hex') || '''::bytea', ',') FROM generate_series(0, 9) k")
    local head="\\set c :client_id
SELECT id AS pid FROM queen.partition_names WHERE name = 'p' || :c
\\gset
SELECT queen.log_push_one_v1('lat', 'p' || :c, 10, '\\x$hashes'::bytea, -1, '\\x$seg'::bytea);"
    cat >"$WORK/hash.sql" <<EOF
$head
SELECT count(*) AS n FROM queen.log_pop_at_v1(:pid, 'g', 10, 30, 'w' || :c);
SELECT queen.log_ack_by_hash_v1(:pid, 'g', 'w' || :c, ARRAY[$arr], NULL);
EOF
    cat >"$WORK/pos.sql" <<EOF
\\set c :client_id
SELECT id AS pid FROM queen.partition_names WHERE name = 'p' || :c
\\gset
SELECT queen.log_push_at_v1(:pid, 10, '\\x$hashes'::bytea, -1, '\\x$seg'::bytea);
SELECT max(r_base + r_start_idx + r_take - 1) AS upto FROM queen.log_pop_at_v1(:pid, 'g', 10, 30, 'w' || :c)
\\gset
SELECT queen.log_ack_at_v1(:pid, 'g', 'w' || :c, :upto);
EOF
    cat >"$WORK/named.sql" <<EOF
$head
SELECT max(r_base + r_start_idx + r_take - 1) AS upto FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'lat', 'p' || :c, 'g', 10, 30, 'w' || :c)
\\gset
SELECT queen.log_ack_at_v1(:pid, 'g', 'w' || :c, :upto);
EOF
}

run() { # side db script -> "stmt-latencies... | tps | cpu ms per cycle per node"
    local side=$1 db=$2 script=$3 before after d out
    before=""; for d in $(datadirs "$side" "$db"); do before="$before $(cpu_ticks "$d")"; done
    out=$("$PGBENCH" -n -M prepared -r -T "$SECS" -c "$CLIENTS" -j "$CLIENTS" -f "$WORK/$script.sql" "$db" 2>&1)
    echo "$out" >"$WORK/$side.$script.out"; [ -z "${QUEEN_BENCH_RAW:-}" ] || echo "$out" >&2
    sleep 1 # the backends are reaped
    after=""; for d in $(datadirs "$side" "$db"); do after="$after $(cpu_ticks "$d")"; done
    local tx lat
    tx=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
    lat=$(echo "$out" | awk '/statement latencies in milliseconds/ {on=1; next} on && NF > 1 {print $1}' | paste -sd' ')
    python3 - "$tx" "$SECS" "$TICK" "$before" "$after" "$lat" <<'PY'
import sys
tx, secs, tick = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
before, after = [int(x) for x in sys.argv[4].split()], [int(x) for x in sys.argv[5].split()]
lat = [float(x) for x in sys.argv[6].split()]
cpu = [(a - b) / tick * 1000 / max(tx, 1) for a, b in zip(after, before)]
print(" ".join(f"{x:.3f}" for x in lat), "|", f"{tx / secs:.1f}", "|", " ".join(f"{x:.3f}" for x in cpu))
PY
}

echo "citus-latency: $(date -u +%FT%TZ), ${SECS}s per script, $CLIENTS client(s), load: $(uptime | sed 's/.*load average: //')"
ONE_DB=$(prepare one "$ONE")
CITUS_DB=$(prepare citus "$CITUS")
scripts "$ONE_DB"
declare -A R
# Interleaved, so that drift in machine load hits both sides alike.
for script in hash pos named; do
    for side in one citus; do
        db=$ONE_DB; [ "$side" = citus ] && db=$CITUS_DB
        R[$side.$script]=$(run "$side" "$db" "$script")
    done
done
echo "load after: $(uptime | sed 's/.*load average: //')"
python3 - "${R[one.hash]}" "${R[citus.hash]}" "${R[one.pos]}" "${R[citus.pos]}" "${R[one.named]}" "${R[citus.named]}" <<'PY'
import sys
def parse(s):
    lat, tps, cpu = s.split("|")
    lat = [float(x) for x in lat.split()]
    return lat, float(tps), [float(x) for x in cpu.split()]
# pgbench -r lists every command: \set, the pid lookup, then the three calls measured.
names = {"hash": ["\\set", "resolve pid", "push 10 by names (log_push_one_v1)", "pop 10 by id (log_pop_at_v1)", "ack 10 by hash (log_ack_by_hash_v1)"],
         "pos": ["\\set", "resolve pid", "push 10 by id (log_push_at_v1)", "pop 10 by id (log_pop_at_v1)", "positional ack (log_ack_at_v1)"],
         "named": ["\\set", "resolve pid", "push 10 by names (log_push_one_v1)", "pop 10 by names (broker_pop_v1)", "positional ack (log_ack_at_v1)"]}
args = sys.argv[1:]
print("| script | call | one node ms | Citus ms | Citus − one node |")
print("|---|---|---:|---:|---:|")
cpu_rows = []
for k, script in enumerate(["hash", "pos", "named"]):
    (la, ta, ca), (lb, tb, cb) = parse(args[2 * k]), parse(args[2 * k + 1])
    for i, n in enumerate(names[script]):
        if i < 2:
            continue
        print(f"| {script} | {n} | {la[i]:.3f} | {lb[i]:.3f} | +{lb[i] - la[i]:.3f} |")
    print(f"| {script} | **cycle (10 messages)** | {1000 / ta:.3f} | {1000 / tb:.3f} | ×{ta / tb:.2f} slower |")
    cpu_rows.append((script, ca, cb))
print()
print("| script | CPU ms per cycle: one node | coordinator | worker 1 | worker 2 | Citus total |")
print("|---|---:|---:|---:|---:|---:|")
for script, ca, cb in cpu_rows:
    print(f"| {script} | {ca[0]:.3f} | {cb[0]:.3f} | {cb[1]:.3f} | {cb[2]:.3f} | {sum(cb):.3f} |")
PY
[ -n "${QUEEN_BENCH_KEEP:-}" ] || testdb_drop "$ONE" queen_lat
[ -n "${QUEEN_BENCH_KEEP:-}" ] || QUEEN_TEST_CITUS=1 testdb_drop "$CITUS" queen_lat
