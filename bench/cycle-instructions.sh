#!/usr/bin/env bash
# Instructions per consume cycle (queen.pop of B messages + queen.ack of them by
# transactionId, each committed) counted by callgrind on a single-user backend: a figure
# that does not drift with the machine's speed, for comparing two builds
# (docs/benchmarks.md, "One message at a time"). Runs N1 and N2 cycles from the same
# snapshot of a data directory holding 10,000 messages in segments of 100 and prints
# (Ir(N2) - Ir(N1)) / (N2 - N1); the callgrind files stay in target/cycle-instructions/
# for callgrind_annotate --inclusive=yes.
#   bench/cycle-instructions.sh [B] [N1] [N2]          defaults 1 100 300
# Uses the queen_ack installed in PG_CONFIG's PostgreSQL (install the release build
# first: PG_CONFIG=... scripts/install-extension.sh --release) and Debian's valgrind
# (apt-get install valgrind). PgBouncer-free, network-free: the protocol, the client
# and each statement's parse and commit round trip are not in the figure.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-1} N1=${2:-100} N2=${3:-300}
PG_CONFIG=${PG_CONFIG:-$(bash scripts/pg.sh 15)}
BIN=$("$PG_CONFIG" --bindir)
command -v valgrind >/dev/null || { echo "cycle-instructions: valgrind is not installed" >&2; exit 2; }
OUT=$PWD/target/cycle-instructions
SNAP=$OUT/snapshot
# The server runs as postgres and writes the callgrind files here.
install -d -o postgres -g postgres "$OUT"
as_pg() { sudo -u postgres "$@"; }

# The snapshot: a fresh cluster, the extension, one partition of 100 segments.
rm -rf "$SNAP"
install -d -o postgres -g postgres "$SNAP"
as_pg "$BIN/initdb" -D "$SNAP" -U postgres -A trust >/dev/null
as_pg "$BIN/postgres" --single -D "$SNAP" -j postgres >/dev/null 2>&1 <<'SQL'
CREATE EXTENSION queen_ack;
SELECT count(queen.push('cycle', (SELECT jsonb_agg(jsonb_build_object('id', lpad((s * 100 + i)::text, 12, '0'), 'kind', 'bench', 'body', repeat('x', 59))) FROM generate_series(1, 100) i), NULL, 'p')) FROM generate_series(0, 99) s;
SQL

run() { # cycles -> instructions counted
    local n=$1 d=$OUT/run
    rm -rf "$d"
    cp -a "$SNAP" "$d"
    as_pg valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.$B.$n" \
        "$BIN/postgres" --single -D "$d" -j postgres >"$OUT/log.$B.$n" 2>&1 <<SQL
DO \$\$
DECLARE r record;
BEGIN
  FOR i IN 1..$n LOOP
    SELECT r_partition_id AS pid, r_lease_id AS lease, array_agg(r_transaction_id) AS txns INTO r
      FROM queen.pop('cycle', p_partition => 'p', p_batch => $B, p_lease_seconds => 60) GROUP BY 1, 2;
    COMMIT;
    PERFORM queen.ack(r.pid, r.lease, r.txns);
    COMMIT;
  END LOOP;
END \$\$;
SQL
    grep -h 'Collected' "$OUT/log.$B.$n" | awk '{print $4}'
}
a=$(run "$N1")
b=$(run "$N2")
echo "batch $B: $(((b - a) / (N2 - N1))) instructions per cycle (callgrind: $N1 cycles $a, $N2 cycles $b)"
