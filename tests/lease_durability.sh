#!/usr/bin/env bash
# Leases live in an UNLOGGED table (docs/decisions.md): a crash or a failover voids every lease
# and its batch redelivers, while every committed ack survives. Proven for real:
#   1. a PostgreSQL crash (pg_ctl stop -m immediate) with a batch leased and unacked;
#   2. a streaming standby (pg_basebackup -R) promoted after the primary dies with a
#      batch leased and unacked.
# Each time: the acked cursor is intact, the old lease is refused, the batch is delivered
# again as a first delivery, and acking it loses nothing. A nack's delay is
# durable: the crash does not make the held batch deliverable early.
#   tests/lease_durability.sh            (own short-lived clusters; prints cargo-style lines)
set -uo pipefail
cd "$(dirname "$0")/.."
export PGOPTIONS="-c client_min_messages=warning"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$("$PG_CONFIG" --bindir)
PORT=$((${QUEEN_TEST_PG_PORT:-5498} + 200))
SPORT=$((PORT + 1))
PDATA=/tmp/qa-test-cluster-$PORT
SDATA=/tmp/qa-standby-$SPORT
SSOCK=/tmp/qa-standby-sock-$SPORT
as_pg() { sudo -u postgres "$@"; }
passed=0 failed=0
SUITE=lease_durability
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sql() { psql "postgres://postgres@127.0.0.1:$1/queen_test" -X -qAt -v ON_ERROR_STOP=1 -c "$2" 2>&1; }
cleanup() {
    as_pg "$PGBIN/pg_ctl" -D "$SDATA" stop -m immediate >/dev/null 2>&1
    QUEEN_TEST_PG_PORT=$PORT bash tests/cluster.sh stop
    rm -rf "$SDATA" "$SSOCK"
}
trap cleanup EXIT

# A batch leased on port $1: prints "partition_id lease_id first_offset".
lease_batch() {
    sql "$1" "SELECT r_partition_id || ' ' || r_lease_id || ' ' || min(r_offset)
                FROM queen.pop('dur', p_batch => 3, p_lease_seconds => 300)
               GROUP BY r_partition_id, r_lease_id"
}
ack_batch() { # port pid lease first
    sql "$1" "SELECT queen.ack('$2', '$3', ARRAY['t$4', 't$(($4 + 1))', 't$(($4 + 2))'])->>'$5'"
}
committed() { sql "$1" "SELECT committed FROM queen.consumer_lag WHERE queue = 'dur'"; }
caught_up() { # primary port, standby port
    local want
    want=$(psql "postgres://postgres@127.0.0.1:$1/postgres" -X -qAt -c "SELECT pg_current_wal_lsn()")
    for _ in $(seq 1 100); do
        [ "$(psql "postgres://postgres@127.0.0.1:$2/postgres" -X -qAt -c "SELECT pg_last_wal_replay_lsn() >= '$want'")" = t ] && return 0
        sleep 0.1
    done
    return 1
}

QUEEN_TEST_PG_PORT=$PORT QUEEN_TEST_SKIP_INSTALL=1 bash tests/cluster.sh start >/dev/null 2>&1 ||
    { fail cluster_starts; echo "test result: FAILED. $passed passed; $failed failed"; exit 1; }
sql $PORT "SELECT queen.push('dur', '[0,1,2,3,4,5,6,7,8,9,10,11]',
                             ARRAY['t0','t1','t2','t3','t4','t5','t6','t7','t8','t9','t10','t11'])" >/dev/null
read -r pid lease first <<<"$(lease_batch $PORT)"
check acked_batch_commits "$(ack_batch $PORT "$pid" "$lease" "$first" acked)" "3"

# 0. A pop that only leases writes no WAL, so its commit does not wait for a flush: 40
# queue-level pops of a registered group (each its own transaction, the lease expired
# in between) must cost far fewer WAL syncs than pops (the WAL writer flushes the commit
# records of those transactions in the background, a few times a second). Until 0.2.0
# every such pop locked the queue row, a logged write: one flush each.
sql $PORT "SELECT queen.push('quiet', '[0]', ARRAY['q0'])" >/dev/null
sql $PORT "SELECT count(*) FROM queen.pop('quiet', p_group => 'wg', p_lease_seconds => 300)" >/dev/null
# (WAL syncs moved from pg_stat_wal to pg_stat_io in 18: tests/pg_stats.tsv)
. tests/pg_stats.sh
wal_syncs=$(pg_stats_expr wal_syncs "$(sql $PORT "SHOW server_version_num")")
syncs=$( { echo "SELECT pg_stat_force_next_flush();"
           echo "SELECT $wal_syncs AS s0 \gset"
           for _ in $(seq 1 40); do
               echo "UPDATE queen.log_leases SET lease_expires_at = now() - interval '1 s' WHERE consumer_group = 'wg';"
               echo "SELECT count(*) FROM queen.pop('quiet', p_group => 'wg', p_lease_seconds => 300);"
           done
           echo "SELECT pg_stat_force_next_flush();"
           echo "SELECT 'syncs=' || ($wal_syncs - :s0);"; } |
         psql "postgres://postgres@127.0.0.1:$PORT/queen_test" -X -qAt -v ON_ERROR_STOP=1 2>&1 | sed -n 's/^syncs=//p')
if [ -n "$syncs" ] && [ "$syncs" -lt 20 ]; then ok lease_only_pop_waits_for_no_wal_flush
else fail lease_only_pop_waits_for_no_wal_flush "40 lease-only pops cost ${syncs:-?} WAL syncs"; fi

# 1. Crash with a batch leased and unacked, and another nacked with a 600 s delay.
sql $PORT "SELECT queen.push('held', '[0]', ARRAY['h0'])" >/dev/null
check nack_delay_held_before_the_crash "$(sql $PORT "SELECT queen.log_ack_by_hash_delay_v1(r_partition_id,
        '__QUEUE_MODE__', r_lease_id, ARRAY[queen.xxh3_128(r_transaction_id)], ARRAY['failed'], 600)->>'leaseReleased'
        FROM queen.pop('held', p_lease_seconds => 300)")" "true"
read -r pid lease first <<<"$(lease_batch $PORT)"
check lease_taken_before_the_crash "$first" "3"
as_pg "$PGBIN/pg_ctl" -D "$PDATA" stop -m immediate >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$PDATA" -l "$PDATA/server.log" -w \
    -o "-p $PORT -k /tmp/qa-test-sock-$PORT -c listen_addresses=127.0.0.1" start >/dev/null
check crash_keeps_the_acked_cursor "$(committed $PORT)" "2"
check crash_voids_every_lease "$(sql $PORT "SELECT count(*) FROM queen.log_leases")" "0"
check crash_keeps_a_nack_delay "$(sql $PORT "SELECT count(*) FROM queen.pop('held')")|$(sql $PORT "SELECT c.redeliver_at > clock_timestamp() + interval '500 s'
        FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
        JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'held'")" "0|t"
check crash_old_lease_is_refused "$(ack_batch $PORT "$pid" "$lease" "$first" error)" "invalid or expired lease"
read -r pid lease2 first2 <<<"$(lease_batch $PORT)"
check crash_batch_redelivers "$first2|$(sql $PORT "SELECT attempt_count FROM queen.log_leases")" "3|1"
check crash_redelivered_batch_acks "$(ack_batch $PORT "$pid" "$lease2" "$first2" acked)" "3"

# 2. A streaming standby promoted after the primary dies with a batch leased.
as_pg rm -rf "$SDATA"
install -d -o postgres -g postgres "$SSOCK"
as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p $PORT -U postgres -D "$SDATA" -R -X stream >/dev/null 2>&1 &&
    as_pg "$PGBIN/pg_ctl" -D "$SDATA" -l "$SDATA/server.log" -w \
        -o "-p $SPORT -k $SSOCK -c listen_addresses=127.0.0.1" start >/dev/null ||
    fail standby_starts "$(tail -3 "$SDATA/server.log" 2>/dev/null)"
read -r pid lease first <<<"$(lease_batch $PORT)"
check lease_taken_before_the_failover "$first" "6"
caught_up $PORT $SPORT && ok standby_replayed_everything || fail standby_replayed_everything
as_pg "$PGBIN/pg_ctl" -D "$PDATA" stop -m immediate >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$SDATA" promote -w >/dev/null
check failover_keeps_the_acked_cursor "$(committed $SPORT)" "5"
check failover_voids_every_lease "$(sql $SPORT "SELECT count(*) FROM queen.log_leases")" "0"
check failover_old_lease_is_refused "$(ack_batch $SPORT "$pid" "$lease" "$first" error)" "invalid or expired lease"
read -r pid lease2 first2 <<<"$(lease_batch $SPORT)"
check failover_batch_redelivers "$first2" "6"
check failover_redelivered_batch_acks "$(ack_batch $SPORT "$pid" "$lease2" "$first2" acked)" "3"
read -r pid lease3 first3 <<<"$(lease_batch $SPORT)"
check nothing_lost_the_rest_follows "$first3|$(ack_batch $SPORT "$pid" "$lease3" "$first3" acked)|$(committed $SPORT)" "9|3|11"

echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
