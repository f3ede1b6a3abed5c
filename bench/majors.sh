#!/usr/bin/env bash
# One benchmark per PostgreSQL major, side by side (docs/postgres-versions.md, "One
# benchmark per major"): for each major, a cluster of its own with the release build
# installed in its private tree (scripts/pg.sh N), and in every round, the majors taken
# in turn:
#   - the ack-depth check (bench/ack-depth.sh, ITERS 20): the by-hash ack of a leased
#     500-message batch 1,000 and 1,000,000 messages deep, and 500 unknown hashes;
#   - the SQL consume cell at batch 10: 8 consumers, each draining its own partition of
#     a pre-filled queue with the documented cycle (queen.pop(q, p_partition => 'p<i>',
#     p_batch => 10, p_lease_seconds => 120), then queen.ack(partition, lease,
#     transactionIds)), driven by pgbench (-M prepared, 8 clients, 2 threads), each
#     client a fixed number of cycles that drains its partition exactly; msgs/s =
#     pgbench's tps without connection time × 10.
# Prints one line per major and round, then the medians.
#   bench/majors.sh                    MAJORS="15 17 18" ROUNDS=3 PER_PARTITION=25000
set -euo pipefail
cd "$(dirname "$0")/.."
MAJORS=${MAJORS:-15 17 18}
ROUNDS=${ROUNDS:-3}
PER=${PER_PARTITION:-25000}
OUT=$(mktemp -d /tmp/queen-majors.XXXXXX)
declare -A URL=() PGC=()

port_of() { echo $((5470 + $1 - 15)); }
stop_all() {
    local n
    for n in "${!PGC[@]}"; do
        PG_CONFIG=${PGC[$n]} QUEEN_TEST_PG_PORT=$(port_of "$n") bash tests/cluster.sh stop || true
    done
}
trap stop_all EXIT

for n in $MAJORS; do
    PGC[$n]=$(bash scripts/pg.sh "$n")
    PG_CONFIG=${PGC[$n]} bash scripts/install-extension.sh --release
    URL[$n]=$(PG_CONFIG=${PGC[$n]} QUEEN_TEST_PG_PORT=$(port_of "$n") QUEEN_TEST_SKIP_INSTALL=1 \
        bash tests/cluster.sh start)
    echo "PostgreSQL $n: $("${PGC[$n]}" --version) at ${URL[$n]}" >&2
done

# The consume cell on major N: a fresh queue of 8 partitions of PER messages (107-byte
# JSON, pushed 100 to a statement), then pgbench drains them. Prints msgs/s.
consume_cell() { # major
    local n=$1 url=${URL[$1]} bin
    bin=$("${PGC[$1]}" --bindir)
    psql "$url" -X -qAt -v ON_ERROR_STOP=1 >/dev/null <<SQL
SELECT queen.delete_queue_v1('bench_majors');
SELECT count(queen.push('bench_majors',
         (SELECT jsonb_agg(jsonb_build_object('id', lpad((p::bigint * 1000000000 + b * 100 + i)::text, 12, '0'),
                                              'kind', 'bench', 'body', repeat('x', 59)))
            FROM generate_series(1, 100) i),
         NULL, 'p' || p))
  FROM generate_series(0, 7) p, generate_series(0, $PER / 100 - 1) b;
CHECKPOINT;
SQL
    cat >"$OUT/consume.sql" <<'SQL'
SELECT r_partition_id AS pid, r_lease_id AS lease, array_agg(r_transaction_id)::text AS txns
  FROM queen.pop('bench_majors', p_partition => 'p' || :client_id, p_batch => 10, p_lease_seconds => 120)
 GROUP BY 1, 2 \gset
SELECT queen.ack(:pid::uuid, :lease, :txns::text[])->>'acked' AS acked \gset
SQL
    "$bin/pgbench" -n -M prepared -c 8 -j 2 -t $((PER / 10)) -f "$OUT/consume.sql" "$url" >"$OUT/pgbench-$n.log" 2>&1 ||
        { tail -5 "$OUT/pgbench-$n.log" >&2; echo failed; return; }
    local left
    left=$(psql "$url" -X -qAt -c "SELECT sum(c.lag) FROM queen.consumer_lag c WHERE c.queue = 'bench_majors'")
    [ "$left" = 0 ] || { echo "failed: $left messages left"; return; }
    awk '/without initial connection time/ {printf "%.0f\n", $3 * 10}' "$OUT/pgbench-$n.log"
}

# bench/ack-depth.sh on major N: the three median ms (real 1,000 deep, real 1,000,000
# deep, unknown 1,000,000 deep).
ack_depth() { # major
    QUEEN_BENCH_URL=${URL[$1]} ITERS=20 bash bench/ack-depth.sh >"$OUT/ack-$1.log" 2>&1 ||
        { echo "failed failed failed"; return; }
    awk -F ' [|] ' '$1 == "500 real" && $2 == 1000 {a = $5} $1 == "500 real" && $2 == 1000000 {b = $5}
                    $1 == "500 unknown" && $2 == 1000000 {c = $5} END {print a, b, c}' "$OUT/ack-$1.log"
}

echo "round major consume_msgs_per_s ack_1e3_ms ack_1e6_ms unknown_1e6_ms"
for ((r = 1; r <= ROUNDS; r++)); do
    for n in $MAJORS; do
        echo "$r $n $(consume_cell "$n") $(ack_depth "$n")" | tee -a "$OUT/rounds"
    done
done
echo "median over $ROUNDS rounds:"
for n in $MAJORS; do
    awk -v n="$n" '$2 == n {c[++k] = $3; a[k] = $4; b[k] = $5; u[k] = $6}
        function med(v, k,   i, j, t) {
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] + 0 < v[i] + 0) {t = v[i]; v[i] = v[j]; v[j] = t}
            return v[int((k + 1) / 2)]
        }
        END {print n, med(c, k), med(a, k), med(b, k), med(u, k)}' "$OUT/rounds"
done
rm -rf "$OUT"
