#!/usr/bin/env bash
# Issue-3 measurement: log_ack_by_hash_v1 on a full 500-message leased batch with 1,000
# and with 1,000,000 messages of unpurged sidecar history below the cursor, measured side
# by side in one run (rounds interleaved), printed as mean/median/min/max and the ratio.
# A second case, the bogus ack: 500 hashes nobody pushed, under a live lease, at both
# depths (rows "unknown"); it must not cost more than a real ack.
# Uses the main job's cluster (scripts/run.sh: release build) and its own database, or
# the server QUEEN_BENCH_URL names (postgres://... of any database; queen_bench is
# created next to it), e.g. a tests/cluster.sh cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${ITERS:-40}
if [ -n "${QUEEN_BENCH_URL:-}" ]; then
    PSQL=(psql -v ON_ERROR_STOP=1 -qAt)
    db() { echo "${QUEEN_BENCH_URL%/*}/$1"; }
else
    QUEEN_RUN_BROKER=0 bash scripts/run.sh >/dev/null 2>&1
    PSQL=(psql -h /tmp/qa-run-sock -p "${QUEEN_PG_PORT:-5499}" -U postgres -v ON_ERROR_STOP=1 -qAt)
    db() { echo "dbname=$1"; }
fi
"${PSQL[@]}" -d "$(db postgres)" -c "DROP DATABASE IF EXISTS queen_bench" -c "CREATE DATABASE queen_bench"
"${PSQL[@]}" -d "$(db queen_bench)" -c "CREATE EXTENSION queen_ack" \
    -c "CREATE TABLE bench_timings (depth bigint, ms float8)"
# One psql session per call: the pg_temp helpers live in it; each -c is its own transaction.
run() {
    local args=()
    for sql in "$@"; do args+=(-c "$sql"); done
    "${PSQL[@]}" -d "$(db queen_bench)" -f bench/ack_depth.sql "${args[@]}"
}
echo "seeding shallow (1,000) and deep (1,000,000) histories..."
run "SELECT pg_temp.seed('shallow', 1000)" "SELECT pg_temp.seed('deep', 1000000)" >/dev/null
"${PSQL[@]}" -d "$(db queen_bench)" -c "VACUUM ANALYZE"
echo "timing $ITERS rounds each, interleaved..."
for ((i = 0; i < ITERS; i += 5)); do
    run "CALL pg_temp.run('shallow', 1000, 5)" "CALL pg_temp.run('deep', 1000000, 5)" >/dev/null
    run "CALL pg_temp.run_unknown('shallow', 1000, 5)" "CALL pg_temp.run_unknown('deep', 1000000, 5)" >/dev/null
done
"${PSQL[@]}" -d "$(db queen_bench)" -F ' | ' <<'SQL'
\pset footer off
\echo 'case | depth | n | mean ms | median ms | min ms | max ms'
SELECT CASE WHEN depth < 0 THEN '500 unknown' ELSE '500 real' END, abs(depth), count(*), round(avg(ms)::numeric, 3), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3),
       round(min(ms)::numeric, 3), round(max(ms)::numeric, 3)
  FROM bench_timings GROUP BY depth ORDER BY depth < 0, abs(depth);
SELECT 'ratio deep/shallow (mean): ' || round((SELECT avg(ms) FROM bench_timings WHERE depth = 1000000)::numeric
       / (SELECT avg(ms) FROM bench_timings WHERE depth = 1000)::numeric, 2);
SELECT 'ratio unknown/real at 1e6 (mean): ' || round((SELECT avg(ms) FROM bench_timings WHERE depth = -1000000)::numeric
       / (SELECT avg(ms) FROM bench_timings WHERE depth = 1000000)::numeric, 2);
SQL
