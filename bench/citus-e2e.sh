#!/usr/bin/env bash
# End to end through the broker on one node vs through a Citus coordinator (docs/citus.md):
# queen-bench's section 3 (4 producers push batches of B over HTTP, 8 consumers long-poll
# pop batches of B and ack them, registry + ack fusion, release broker) against each side,
# ROUNDS times, the side that opens a round rotating so that drift in machine load hits all
# alike. Four sides: one node; Citus as configured (Citus defaults); Citus with
# citus.max_adaptive_executor_pool_size = 1 (docs/citus.md, "Recommended": a multi-shard
# statement then uses one cached connection per worker instead of opening and closing
# more); and that database with the broker connected to worker 1 instead of the
# coordinator (Citus workers take client connections and route what they receive).
#   bench/citus-e2e.sh ONE_NODE_URL CITUS_URL [ROUNDS]
# Superuser URLs of tests/cluster.sh's and tests/citus.sh's clusters, with the release
# extension installed (scripts/install-extension.sh --release). Each side gets a scratch
# database (queen_e2e, queen_e2e_pool1), dropped at the end. Every run's report goes to
# $QUEEN_BENCH_OUT/SIDE-N/ (default results/bench-citus); the comparison (median over
# rounds of consumed and pushed msgs/s, push and ack p50 / p99 per batch size, the ratio
# to one node, and the worker sessions each side opened) is printed and written to
# $QUEEN_BENCH_OUT/e2e.md. Check `uptime` first: all nodes share this machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ONE=${1:?usage: $0 ONE_NODE_URL CITUS_URL [ROUNDS]}
CITUS=${2:?usage: $0 ONE_NODE_URL CITUS_URL [ROUNDS]}
ROUNDS=${3:-2}
OUT=${QUEEN_BENCH_OUT:-results/bench-citus}
# Run logs are not results: they go under target/ (reports and the summary stay in $OUT).
LOGS=target/bench-logs/${OUT#results/}
export PGOPTIONS="-c client_min_messages=warning"
. tests/testdb.sh
# tests/citus.sh createdb finds the cluster by its coordinator port.
CPORT=$(port_of "$CITUS")
export QUEEN_CITUS_PORT=$CPORT
cargo build --release -q -p queen_broker -p queen_bench

prepare() { # side -> the scratch database's url
    local admin=$CITUS name=queen_e2e
    case $1 in
    one) admin=$ONE ;;
    citus_pool1) name=queen_e2e_pool1 ;;
    esac
    local db=${admin%/*}/$name
    if [ "$1" = one ]; then
        testdb_create "$admin" "$name"
        psql "$db" -X -qAt -c "CREATE EXTENSION queen_ack" >/dev/null
    else
        QUEEN_TEST_CITUS=1 testdb_create "$admin" "$name"
        psql "$db" -X -qAt -c "$(QUEEN_TEST_CITUS=1 testdb_install_sql)" >/dev/null
    fi
    [ "$1" != citus_pool1 ] ||
        psql "$db" -X -qAt -c "ALTER DATABASE $name SET citus.max_adaptive_executor_pool_size = 1" >/dev/null
    echo "$db"
}
# Sessions the workers have started in a side's database so far (Citus connection churn).
worker_sessions() { # database name
    local p n=0
    for p in $((CPORT + 1)) $((CPORT + 2)); do
        n=$((n + $(psql -X -qAt -h 127.0.0.1 -p "$p" -U postgres -d "$1" \
            -c "SELECT sessions FROM pg_stat_database WHERE datname = current_database()")))
    done
    echo "$n"
}
cleanup() {
    testdb_drop "$ONE" queen_e2e || true
    QUEEN_TEST_CITUS=1 testdb_drop "$CITUS" queen_e2e || true
    QUEEN_TEST_CITUS=1 testdb_drop "$CITUS" queen_e2e_pool1 || true
}
trap cleanup EXIT

mkdir -p "$OUT" "$LOGS"
header="citus-e2e: $(date -u +%FT%TZ), $ROUNDS round(s), load before: $(uptime | sed 's/.*load average: //')"
echo "$header"
SIDES=(one citus citus_pool1 worker_pool1)
declare -A DB SESSIONS
for side in one citus citus_pool1; do DB[$side]=$(prepare "$side"); done
DB[worker_pool1]=postgres://postgres@127.0.0.1:$((CPORT + 1))/queen_e2e_pool1
for side in "${SIDES[@]}"; do SESSIONS[$side]=0; done
for r in $(seq 1 "$ROUNDS"); do
    for k in "${!SIDES[@]}"; do
        side=${SIDES[$(((k + r - 1) % ${#SIDES[@]}))]}
        db=${DB[$side]}
        echo "citus-e2e: round $r, $side" >&2
        [ "$side" = one ] || before=$(worker_sessions "${db##*/}")
        ./target/release/queen-bench --database-url "$db" --quick --sections 3 \
            --out "$OUT/$side-$r" --log-dir "$LOGS/$side-$r" >"$LOGS/$side-$r.log" 2>&1 ||
            { tail -20 "$LOGS/$side-$r.log" >&2; exit 1; }
        [ "$side" = one ] ||
            SESSIONS[$side]=$((SESSIONS[$side] + $(worker_sessions "${db##*/}") - before))
    done
done
footer="load after: $(uptime | sed 's/.*load average: //')"
echo "$footer"

python3 - "$OUT" "$ROUNDS" "$header" "$footer" "${SESSIONS[citus]}" "${SESSIONS[citus_pool1]}" "${SESSIONS[worker_pool1]}" <<'PY' | tee "$OUT/e2e.md"
import re, statistics, sys
out, rounds, header, footer = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
sessions = {"citus": int(sys.argv[5]), "citus_pool1": int(sys.argv[6]), "worker_pool1": int(sys.argv[7])}

def num(cell):
    return float(re.sub(r"[^0-9.]", "", cell) or "nan")

def rows(path):
    """Section 3's table: batch -> (pushed, consumed, push p50, push p99, ack p50, ack p99)."""
    text = open(path).read()
    sec = text[text.index("3. End to end"):]
    got = {}
    for line in sec.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 8 and cells[0].isdigit():
            got[int(cells[0])] = tuple(num(cells[i]) for i in (1, 2, 4, 5, 6, 7))
    return got

sides = {"one": "one node", "citus": "Citus (defaults)", "citus_pool1": "Citus, pool size 1",
         "worker_pool1": "Citus, pool size 1, broker on worker 1"}
runs = {s: [rows(f"{out}/{s}-{r}/report.md") for r in range(1, rounds + 1)] for s in sides}
med = lambda s, b, i: statistics.median(run[b][i] for run in runs[s])
print(f"# End to end through the broker: one node vs Citus\n\n{header}; {footer}.\n")
print("`bench/citus-e2e.sh` (queen-bench section 3, `--quick`: 3 s runs, the median of 3 per batch")
print(f"size per report; below, the median over {rounds} report(s) per side). The coordinator and both")
print("workers share this machine with the one-node cluster, the broker and the load generators.")
print("Pool size 1 = `citus.max_adaptive_executor_pool_size = 1` on the coordinator. Worker sessions:")
print(f"connections the workers accepted during a side's runs: Citus (defaults) {sessions['citus']:,},")
print(f"pool size 1 {sessions['citus_pool1']:,}, broker on worker 1 {sessions['worker_pool1']:,} (its own included).\n")
print("| B | side | consumed msgs/s | / one node | pushed msgs/s | push p50 / p99 ms | ack p50 / p99 ms |")
print("|---:|---|---:|---:|---:|---:|---:|")
for b in sorted(runs["one"][0]):
    base = med("one", b, 1)
    for s, label in sides.items():
        v = [med(s, b, i) for i in range(6)]
        print(f"| {b} | {label} | {v[1]:,.0f} | {v[1] / base:.2f} | {v[0]:,.0f} "
              f"| {v[2]:.2f} / {v[3]:.2f} | {v[4]:.2f} / {v[5]:.2f} |")
PY
