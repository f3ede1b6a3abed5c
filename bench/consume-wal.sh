#!/usr/bin/env bash
# WAL bytes, WAL records and WAL flushes (fsyncs) per consumed message over plain SQL:
# N cycles of queen.pop (one transaction) + queen.ack by transactionId (another), batch B,
# from a pre-filled queue. Byte and record counts are deterministic (not timings).
# It recreates the extension in the given database: use a scratch database.
#   bench/consume-wal.sh URL BATCH N      e.g. for b in 1 10 100; do bench/consume-wal.sh $URL $b 300; done
set -euo pipefail
URL=$1; B=$2; N=$3
P="psql $URL -X -qAt -v ON_ERROR_STOP=1"
$P -c "DROP EXTENSION IF EXISTS queen_ack CASCADE" -c "CREATE EXTENSION queen_ack" >/dev/null 2>&1 || true
$P -c "SELECT queen.configure_queue_v1('walq', NULL, NULL, '{}')" >/dev/null
# prefill N*B messages in segments of B
$P -c "DO \$\$ BEGIN FOR i IN 1..$N LOOP PERFORM queen.push('walq', (SELECT jsonb_agg(jsonb_build_object('orderId', i*1000+k, 'customer', 'c-' || k, 'amount', 123.45, 'note', 'payload of about a hundred bytes in total......')) FROM generate_series(1,$B) k)); END LOOP; END \$\$" >/dev/null
$P -c "CHECKPOINT" >/dev/null
# (WAL syncs moved from pg_stat_wal to pg_stat_io in 18: tests/pg_stats.tsv)
. "$(dirname "$0")/../tests/pg_stats.sh"
WAL_SYNCS=$(pg_stats_expr wal_syncs "$($P -c "SHOW server_version_num")")
read lsn0 sync0 rec0 <<<"$($P -F' ' -c "SELECT pg_current_wal_lsn(), $WAL_SYNCS, wal_records FROM pg_stat_wal")"
cat > /tmp/cycle.sql <<SQL
SELECT r_partition_id AS pid, r_lease_id AS lease, array_agg(r_transaction_id)::text AS txns
  FROM queen.pop('walq', 'Default', p_batch => $B, p_lease_seconds => 30) GROUP BY r_partition_id, r_lease_id \\gset
SELECT queen.ack(:'pid'::uuid, :'lease', :'txns'::text[]);
SQL
for i in $(seq 1 $N); do cat /tmp/cycle.sql; done | $P >/dev/null
read lsn1 sync1 rec1 <<<"$($P -F' ' -c "SELECT pg_current_wal_lsn(), $WAL_SYNCS, wal_records FROM pg_stat_wal")"
bytes=$($P -c "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
msgs=$((N * B))
echo "batch $B: $N cycles, $msgs msgs: WAL $bytes bytes = $(python3 -c "print(round($bytes/$msgs,1))") B/msg; wal_sync $((sync1-sync0)) ($(python3 -c "print(round(($sync1-$sync0)/$N,2))")/cycle); records $(python3 -c "print(round(($rec1-$rec0)/$msgs,2))")/msg"
