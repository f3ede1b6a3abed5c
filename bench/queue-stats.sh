#!/usr/bin/env bash
# Issue-16 measurement: the lag and queue statistics at 10,000 partitions, server time of
# queen.queue_stats_v1 (one queue, every queue) beside the views that scan segments
# (queen.partition_storage) and the plain cursor view (queen.consumer_lag), measured in
# one run with the rounds interleaved; then, with a release broker, the HTTP views built
# on it (GET /api/v1/resources/queues/:queue, /resources/queues, /metrics).
#
#   bash bench/queue-stats.sh [postgres-superuser-url]     (default: scripts/run.sh's cluster)
#   PARTITIONS=10000 SEGMENTS=1 MESSAGES=10 ROUNDS=20 bash bench/queue-stats.sh URL
#
# Seeds its own database queen_stats_bench: queue "big" with PARTITIONS partitions of
# SEGMENTS segments of MESSAGES messages each (the extra segments are copies of the
# first, written by SQL); group g1 consumed half of every partition's first segment,
# group g2 holds a live lease on every 10th partition, one DLQ row per 100 partitions;
# plus 50 small queues. The statistics read no segment but one index probe per lagging
# cursor, so their cost should not move with SEGMENTS; partition_storage's does.
set -euo pipefail
cd "$(dirname "$0")/.."
P=${PARTITIONS:-10000}
ROUNDS=${ROUNDS:-20}
M=${MESSAGES:-10}
S=${SEGMENTS:-1}
if [ -n "${1:-}" ]; then
    BASE=${1%/*}
else
    QUEEN_RUN_BROKER=0 bash scripts/run.sh >/dev/null 2>&1
    BASE=postgres://postgres@127.0.0.1:${QUEEN_PG_PORT:-5499}
fi
DB=$BASE/queen_stats_bench
PSQL=(psql -X -v ON_ERROR_STOP=1 -qAt)
"${PSQL[@]}" "$BASE/postgres" -c "DROP DATABASE IF EXISTS queen_stats_bench" -c "CREATE DATABASE queen_stats_bench"
"${PSQL[@]}" "$DB" -c "CREATE EXTENSION queen_ack"
echo "seeding $P partitions x $S segments x $M messages, cursors, leases, DLQ rows..."
payloads=$(python3 -c "import json; print(json.dumps(list(range($M))))")
"${PSQL[@]}" "$DB" <<SQL
DO \$\$ BEGIN
    FOR i IN 1..$P LOOP
        PERFORM queen.push('big', '$payloads', NULL, 'p' || i);
    END LOOP;
    FOR i IN 1..50 LOOP
        PERFORM queen.push('small-' || i, '[1,2,3]', NULL, 'Default');
    END LOOP;
END \$\$;
DO \$\$ BEGIN
    FOR i IN 1..$P LOOP
        PERFORM count(*) FROM queen.log_pop_v1('big', 'p' || i, 'g1', $M / 2, 60, '', true);
        IF i % 10 = 0 THEN
            PERFORM count(*) FROM queen.log_pop_v1('big', 'p' || i, 'g2', 3, 3600, 'w' || i);
        END IF;
    END LOOP;
END \$\$;
INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
SELECT s.partition_id, k * $M, k * $M + $M - 1, s.created_at, s.blob
  FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
  JOIN queen.queues q ON q.id = p.queue_id, generate_series(1, $S - 1) k
 WHERE q.name = 'big';
UPDATE queen.log_partitions p SET last_offset = $S * $M - 1
  FROM queen.queues q WHERE q.id = p.queue_id AND q.name = 'big';
INSERT INTO queen.log_dlq (partition_id, consumer_group, "offset", transaction_id, payload, error)
SELECT p.id, 'g1', 0, 'x', '{}', 'bench' FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'big' AND p.name ~ '00\$';
VACUUM ANALYZE;
SQL
"${PSQL[@]}" "$DB" -c "SELECT 'rows: ' || count(*) || ' stats rows, ' || count(DISTINCT r_partition_id) || ' partitions'
                         FROM queen.queue_stats_v1(NULL)"
echo "timing $ROUNDS rounds, interleaved..."
"${PSQL[@]}" "$DB" -F ' | ' <<SQL
CREATE TEMP TABLE t (what text, ms float8);
DO \$\$
DECLARE t0 timestamptz;
BEGIN
    FOR k IN 1..$ROUNDS LOOP
        t0 := clock_timestamp();
        PERFORM count(*) FROM queen.queue_stats_v1(p_queue => 'big');
        INSERT INTO t VALUES ('1 queue_stats_v1, queue big', extract(epoch FROM clock_timestamp() - t0) * 1000);
        t0 := clock_timestamp();
        PERFORM count(*) FROM queen.queue_stats_v1(NULL);
        INSERT INTO t VALUES ('2 queue_stats_v1, every queue', extract(epoch FROM clock_timestamp() - t0) * 1000);
        t0 := clock_timestamp();
        PERFORM count(*) FROM queen.queue_list_v1(NULL);
        INSERT INTO t VALUES ('3 queue_list_v1, every queue', extract(epoch FROM clock_timestamp() - t0) * 1000);
        t0 := clock_timestamp();
        PERFORM count(*) FROM queen.consumer_lag;
        INSERT INTO t VALUES ('4 view consumer_lag (no ages)', extract(epoch FROM clock_timestamp() - t0) * 1000);
        t0 := clock_timestamp();
        PERFORM count(*) FROM queen.partition_storage;
        INSERT INTO t VALUES ('5 view partition_storage (scans segments)', extract(epoch FROM clock_timestamp() - t0) * 1000);
    END LOOP;
END \$\$;
\pset footer off
\echo 'what | n | median ms | min ms | max ms'
SELECT what, count(*), round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
       round(min(ms)::numeric, 2), round(max(ms)::numeric, 2)
  FROM t GROUP BY what ORDER BY what;
SQL
BIN=${QUEEN_BROKER_BIN:-target/release/queen-broker}
if [ ! -x "$BIN" ]; then
    echo "no release broker at $BIN (cargo build --release -p queen_broker): HTTP part skipped"
    exit 0
fi
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
QUEEN_DATABASE_URL=$DB QUEEN_LISTEN=127.0.0.1:$PORT RUST_LOG=warn "$BIN" >/tmp/queen-stats-bench-broker.log 2>&1 &
BROKER=$!
trap 'kill $BROKER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
echo "HTTP, $ROUNDS requests each, interleaved (time to the last byte, release broker):"
declare -A times
paths=(/api/v1/resources/queues/big /api/v1/resources/queues /metrics)
for ((k = 0; k < ROUNDS; k++)); do
    for p in "${paths[@]}"; do
        times[$p]+="$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT$p") "
    done
    sleep 5.1 # past the /metrics cache: every /metrics request reads the statistics again
done
for p in "${paths[@]}"; do
    # shellcheck disable=SC2086
    python3 - "$p" ${times[$p]} <<'PY'
import statistics, sys
ms = sorted(float(x) * 1000 for x in sys.argv[2:])
print(f"{sys.argv[1]} | n {len(ms)} | median {statistics.median(ms):.1f} ms | min {ms[0]:.1f} | max {ms[-1]:.1f}")
PY
done
curl -s "http://127.0.0.1:$PORT/api/v1/resources/queues/big" | python3 -c "import json, sys; d = json.load(sys.stdin); print('GET /resources/queues/big:', len(d['partitions']), 'partitions, totals', d['totals'])"
