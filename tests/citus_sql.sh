#!/usr/bin/env bash
# The Citus-specific psql suite (docs/citus.md), on the cluster of tests/citus.sh:
#   tests/citus_sql.sh <coordinator-url>       (the URL `tests/citus.sh start` printed)
# The layout (tables distributed and colocated, shards on both workers, functions
# registered with their partition argument), delegation proven on the workers
# (pg_stat_statements there, and the plan's node), plain-SQL push -> pop -> ack by
# transactionId on the coordinator, the calls that span partitions on two workers (atomic
# where the contract says so), distributing a database that already holds rows, and DROP
# EXTENSION leaving nothing on any node. Prints cargo-style lines and a result line.
set -uo pipefail
cd "$(dirname "$0")/.."
URL=${1:?usage: tests/citus_sql.sh <coordinator-url>}
export PGOPTIONS="-c client_min_messages=warning"
CPORT=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port)' "$URL")
W1=$((CPORT + 1)) W2=$((CPORT + 2))
DBNAME=queen_citus
DB=${URL%/*}/$DBNAME
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "test citus::$1 ... ok"; }
fail() { failed=$((failed + 1)); echo "test citus::$1 ... FAILED${2:+: $2}"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "expected [$3] got [$2]"; fi; }
sql() { psql "$DB" -X -qAt -v ON_ERROR_STOP=1 -c "$1" 2>&1; }
on() { psql "postgres://postgres@127.0.0.1:$1/${3:-$DBNAME}" -X -qAt -v ON_ERROR_STOP=1 -c "$2" 2>&1; }
jf() { echo "$1" | jq -r "$2" 2>/dev/null || echo "$1"; } # a field of a JSON result (else the text)
# The port of the worker holding a partition.
node_of() {
    sql "SELECT n.nodeport FROM pg_dist_placement pl JOIN pg_dist_node n USING (groupid)
          WHERE pl.shardid = get_shard_id_for_distribution_column('queen.log_partitions', '$1'::uuid)"
}
pid_of() { sql "SELECT id FROM queen.partition_names WHERE name = '$2' AND queue_id = (SELECT id FROM queen.queues WHERE name = '$1')"; }
# A wire push op of the segment at offset 0 of queue/partition $1/$2, aimed at $3/$4.
wire_push() {
    sql "SELECT jsonb_build_object('queue', '$3', 'partition', '$4', 'count', s.end_offset - s.base_offset + 1,
                                   'hashesHex', encode(t.hashes, 'hex'),
                                   'blobB64', translate(encode(s.blob, 'base64'), E'\n', ''))
           FROM queen.log_segments s JOIN queen.log_txns t USING (partition_id, base_offset)
          WHERE s.partition_id = '$(pid_of "$1" "$2")' AND s.base_offset = 0"
}

bash tests/citus.sh createdb "$DBNAME"
sql "CREATE EXTENSION queen_ack" >/dev/null
r=$(sql "SELECT queen.distribute()")
check distribute_reports_what_it_did "$(jf "$r" '"\(.referenceTables | length)|\(.distributedTables | length)|\(.functions | length)|\(.workers)"')" "4|6|13|2"

# --- layout ---------------------------------------------------------------------------
check tables_are_distributed_or_reference \
    "$(sql "SELECT string_agg(logicalrelid::text || ':' || partmethod::text, ',' ORDER BY logicalrelid::text)
              FROM pg_dist_partition WHERE logicalrelid::text LIKE 'queen.%'")" \
    "queen.consumer_groups_metadata:n,queen.log_consumers:h,queen.log_dlq:h,queen.log_leases:h,queen.log_partitions:h,queen.log_segments:h,queen.log_txns:h,queen.maintenance_state:n,queen.partition_names:n,queen.queues:n"
check per_partition_tables_are_colocated_by_partition_id \
    "$(sql "SELECT count(DISTINCT colocationid) || '|' || string_agg(DISTINCT column_to_column_name(logicalrelid, partkey), ',')
              FROM pg_dist_partition WHERE partmethod = 'h' AND logicalrelid::text LIKE 'queen.log_%'")" "1|id,partition_id"
check shards_sit_on_both_workers_and_none_on_the_coordinator \
    "$(sql "SELECT string_agg(DISTINCT n.nodeport::text, ',') FROM pg_dist_shard s
              JOIN pg_dist_placement pl USING (shardid) JOIN pg_dist_node n USING (groupid)
             WHERE s.logicalrelid::text LIKE 'queen.log_%'")" "$W1,$W2"
check reference_tables_are_on_every_node \
    "$(sql "SELECT count(DISTINCT pl.groupid) FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid)
             WHERE s.logicalrelid = 'queen.partition_names'::regclass")" "3"
check per_partition_functions_are_delegated_by_their_partition_argument \
    "$(sql "SELECT count(*) FROM queen.distributed_functions() f
              JOIN pg_proc p ON p.oid = f.r_function
              JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
             WHERE o.distribution_argument_index = array_position(p.proargnames, f.r_argument) - 1
               AND o.colocationid = (SELECT colocationid FROM pg_dist_partition
                                      WHERE logicalrelid = 'queen.log_partitions'::regclass)")" "13"
r=$(sql "SELECT queen.distribute()")
check distribute_is_idempotent "$(jf "$r" '"\(.referenceTables)|\(.distributedTables)|\(.functions)"')" "[]|[]|[]"
check distribute_refuses_on_a_worker "$(on "$W1" "SELECT queen.distribute()" | grep -o 'run it on the coordinator')" "run it on the coordinator"
check every_worker_has_the_extension "$(on "$W1" "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'")|$(on "$W2" "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'")" \
    "$(sql "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'")|$(sql "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'")"

# --- the walk-through over plain SQL on the coordinator ---------------------------------
check push "queued" "$(sql "SELECT queen.push('orders', '[{\"id\":1},{\"id\":2},null]', ARRAY['t1','t2','t3'])->>'status'")"
read -r pid lease <<<"$(sql "SELECT DISTINCT r_partition_id || ' ' || r_lease_id FROM queen.pop('orders', p_batch => 10, p_lease_seconds => 30)")"
check pop_leases_the_three "3" "$(sql "SELECT batch_end + 1 FROM queen.log_leases WHERE worker_id = '$lease'")"
worker=$(node_of "$pid")
other=$([ "$worker" = "$W1" ] && echo "$W2" || echo "$W1")
on "$worker" "SELECT pg_stat_statements_reset()" >/dev/null
on "$other" "SELECT pg_stat_statements_reset()" >/dev/null
r=$(sql "SELECT queen.ack('$pid', '$lease', ARRAY['t1','t2','t3'])")
check ack_by_transaction_id "$(jf "$r" '"\(.ok)|\(.acked)|\(.leaseReleased)"')" "true|3|true"
calls() { on "$1" "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE 'SELECT queen.ack(%'"; }
check the_ack_ran_on_the_worker_holding_the_partition "$(calls "$worker")|$(calls "$other")" "1|0"
check the_ack_committed_the_cursor "2|0" "$(sql "SELECT c.committed || '|' || count(l.worker_id) FROM queen.log_consumers c
                                                  LEFT JOIN queen.log_leases l USING (partition_id, consumer_group)
                                                 WHERE c.partition_id = '$pid' GROUP BY c.committed")"

# Every per-partition entry point is planned as one task on the partition's worker.
explain_node() { sql "EXPLAIN (VERBOSE, COSTS OFF) $1" | grep -o 'port=[0-9]*' | sort -u | tr '\n' ' '; }
H="ARRAY[queen.xxh3_128('t1')]"
for call in "queen.log_ack_by_hash_v1('$pid', 'g', 'w', $H, NULL)" \
            "queen.log_ack_by_hash_delay_v1('$pid', 'g', 'w', $H, NULL, 5)" \
            "queen.log_ack_at_v1('$pid', 'g', 'w', 1)" \
            "queen.log_dlq_head_v1('$pid', 'g', 'w', 0, NULL, NULL, NULL, 'x')" \
            "* FROM queen.log_pop_at_v1('$pid', 'g', 1, 30, 'w')" \
            "queen.log_push_at_v1('$pid', 1, queen.xxh3_128('t9'), -1, '\\x00')" \
            "queen.ack('$pid', 'w', ARRAY['t1'])" \
            "queen.cursor_worker_v1('$pid', 'g')" \
            "* FROM queen.dedup_window_v1('$pid')" \
            "queen.dlq_ids_at_v1('$pid', 't1')" \
            "* FROM queen.log_segment_at_v1('$pid', 0)" \
            "queen.log_retention_step_v1('$pid', NULL, NULL, 10)" \
            "queen.log_txns_purge_step_v1('$pid', now(), 10)"; do
    fn=${call#\* FROM }
    check "delegated_${fn%%(*}" "$(explain_node "SELECT $call")" "port=$worker "
done

# ... and runs there: every one executes on its worker without an error (a LANGUAGE sql
# body with parameters and a join is one Citus cannot plan: they are PL/pgSQL).
for call in "queen.log_ack_by_hash_v1('$pid', 'g', 'w', $H, NULL)" \
            "queen.log_ack_by_hash_delay_v1('$pid', 'g', 'w', $H, NULL, 5)" \
            "queen.log_ack_at_v1('$pid', 'g', 'w', 1)" \
            "queen.log_dlq_head_v1('$pid', 'g', 'w', 0, NULL, NULL, NULL, 'x')" \
            "count(*) FROM queen.log_pop_at_v1('$pid', 'g', 1, 30, 'w')" \
            "queen.log_push_at_v1('$pid', 3, '$(sql "SELECT '\\x' || encode(hashes, 'hex') FROM queen.log_txns WHERE partition_id = '$pid' AND base_offset = 0")'::bytea, -1, '$(sql "SELECT '\\x' || encode(blob, 'hex') FROM queen.log_segments WHERE partition_id = '$pid' AND base_offset = 0")'::bytea)" \
            "queen.ack('$pid', 'w', ARRAY['t1'])" \
            "queen.cursor_worker_v1('$pid', 'g')" \
            "count(*) FROM queen.dedup_window_v1('$pid')" \
            "queen.dlq_ids_at_v1('$pid', 't1')" \
            "count(*) FROM queen.log_segment_at_v1('$pid', 0)" \
            "queen.log_retention_step_v1('$pid', NULL, NULL, 10)" \
            "queen.log_txns_purge_step_v1('$pid', now(), 10)" \
            "queen.seed_offset('$pid', 'new', now() - interval '1 day')"; do
    fn=${call#count(\*) FROM }
    r=$(sql "SELECT $call")
    check "runs_${fn%%(*}" "$(echo "$r" | grep -c ERROR)" "0"
done

# First contact with a subscription mode, and a delayed queue (their statements carry a
# segment probe, which on Citus must name the partition itself).
check pop_first_contact_new "$(sql "SELECT count(*) FROM queen.log_pop_v1('orders', 'Default', 'gnew', 10, 30, 'wn', false, 'new', '')")" "0"
sql "SELECT queen.push('orders', '[4]', ARRAY['t4'])" >/dev/null
check pop_after_new "$(sql "SELECT sum(r_take) FROM queen.log_pop_v1('orders', 'Default', 'gnew', 10, 30, 'wn', false, 'new', '')")" "1"
check pop_first_contact_timestamp "$(sql "SELECT sum(r_take) FROM queen.log_pop_v1('orders', 'Default', 'gts', 10, 30, 'wt', false, 'timestamp', '2000-01-01')")" "4"
check queue_pop_registers_a_new_group "$(sql "SELECT count(*) FROM queen.log_pop_queue_v1('orders', 'gq2', 10, 30, 'wq2', false, 'new', '', 2)")|$(sql "SELECT subscription_mode FROM queen.consumer_groups_metadata WHERE consumer_group = 'gq2'")" "0|new"
sql "SELECT queen.configure_queue_v1('late', NULL, NULL, '{\"delayedProcessing\": 3600}')" >/dev/null
sql "SELECT queen.push('late', '[1]', ARRAY['l1'])" >/dev/null
check a_delayed_message_is_not_served_by_any_pop \
    "$(sql "SELECT (SELECT count(*) FROM queen.log_pop_v1('late', 'Default', 'g', 10, 30, 'w'))
                || '|' || (SELECT count(*) FROM queen.log_pop_queue_v1('late', 'g', 10, 30, 'w', false, 'all', '', 4))")" "0|0"

# --- calls that span partitions on two workers -------------------------------------------
# Queue "spread": eight partitions, at least one on each worker.
for i in 0 1 2 3 4 5 6 7; do
    sql "SELECT queen.push('spread', '[{\"p\":$i}]', ARRAY['s$i-0'], 'P$i'), queen.push('spread', '[{\"p\":$i}]', ARRAY['s$i-1'], 'P$i')" >/dev/null
done
pw1=$(sql "SELECT p.name FROM queen.partition_names p WHERE p.name LIKE 'P%'" | while read -r n; do
    [ "$(node_of "$(pid_of spread "$n")")" = "$W1" ] && echo "$n"; done | head -1)
pw2=$(sql "SELECT p.name FROM queen.partition_names p WHERE p.name LIKE 'P%'" | while read -r n; do
    [ "$(node_of "$(pid_of spread "$n")")" = "$W2" ] && echo "$n"; done | head -1)
check the_spread_queue_has_a_partition_on_each_worker "$( [ -n "$pw1" ] && [ -n "$pw2" ] && echo yes)" "yes"
A=$(pid_of spread "$pw1") B=$(pid_of spread "$pw2")

r=$(sql "SELECT count(DISTINCT r_partition_id) || '|' || count(*) FROM queen.log_pop_queue_v1('spread', 'gq', 100, 60, 'wq', false, 'all', '', 8)")
check queue_level_pop_claims_partitions_on_both_workers "$r" "8|16"
check a_named_group_registers_once_in_the_reference_table "$(sql "SELECT count(*) FROM queen.consumer_groups_metadata WHERE consumer_group = 'gq'")" "1"
r=$(sql "SELECT queen.log_renew_lease_v1('wq', 600)")
check renewal_spans_workers "$(jf "$r" .renewed)" "8"
r=$(sql "SELECT queen.log_renew_lease_tenant_v1('wq', 600, '00000000-0000-0000-0000-000000000002')")
check a_foreign_tenant_renews_nothing "$(jf "$r" .renewed)" "0"
r=$(sql "SELECT queen.log_ack_multi_v1(ARRAY['$A', '$B'], ARRAY['gq', 'gq'], ARRAY[1, 1]::bigint[], ARRAY['wq', 'wq'], ARRAY[2, 2])")
check ack_multi_acks_on_both_workers "$(jf "$r" '[.results[] | "\(.ok):\(.acked)"] | join(",")')" "true:2,true:2"
check ack_multi_committed_both "$(sql "SELECT string_agg(committed::text, ',') FROM queen.log_consumers WHERE consumer_group = 'gq' AND partition_id IN ('$A', '$B')")" "1,1"

# The transaction wire across workers: all or nothing.
counts() { sql "SELECT (SELECT string_agg(p.name || '=' || p.last_offset, ',' ORDER BY p.name) FROM queen.log_partitions p WHERE p.id IN ('$A', '$B'))
                       || '|' || (SELECT count(*) FROM queen.log_txns WHERE partition_id IN ('$A', '$B'))"; }
sql "SELECT queen.push('wsrc', '[{\"w\":1}]', ARRAY['fresh-1'])" >/dev/null
fresh_a=$(wire_push wsrc Default spread "$pw1")
dup_b=$(wire_push spread "$pw2" spread "$pw2")
before=$(counts)
r=$(sql "SELECT queen.log_transaction_wire_v1(jsonb_build_object('pushes', jsonb_build_array('$fresh_a'::jsonb, '$dup_b'::jsonb)))")
check a_wire_failing_on_one_worker_raises "$(echo "$r" | grep -o 'QDUP duplicate messages')" "QDUP duplicate messages"
check and_writes_nothing_on_either_worker "$(counts)" "$before"
sql "SELECT queen.push('wsrc', '[{\"w\":2}]', ARRAY['fresh-2'], 'Two')" >/dev/null
fresh_b=$(wire_push wsrc Two spread "$pw2")
r=$(sql "SELECT queen.log_transaction_wire_v1(jsonb_build_object('pushes', jsonb_build_array('$fresh_a'::jsonb, '$fresh_b'::jsonb),
            'acks', jsonb_build_array(jsonb_build_object('partitionId', '$A', 'group', 'gq', 'acks',
                                                         jsonb_build_array(jsonb_build_object('h', encode(queen.xxh3_128('s${pw1#P}-1'), 'hex')))))))")
check a_wire_commits_on_both_workers "$(jf "$r" '"\(.ok)|\([.pushes[].status] | join(","))|\(.acks[0].acked)"')" "true|queued,queued|0"
# (acked 0: the ack by hash needs the lease; the wire still commits both pushes)
check the_wire_pushes_are_there "$(sql "SELECT string_agg(p.name || '=' || p.last_offset, ',' ORDER BY p.name) FROM queen.log_partitions p WHERE p.id IN ('$A', '$B')")" \
    "$(printf '%s\n' "$pw1=2" "$pw2=2" | sort | paste -sd,)"

# Multi push across workers (one transaction). The segments are passed as values: a
# statement whose arguments read shards of one worker is routed there whole, and the
# function then refuses to run a distributed query from inside a shard query.
seg_of() { sql "SELECT 'decode(' || quote_literal(encode($2, 'hex')) || ', ''hex'')' FROM queen.$1 WHERE partition_id = '$3'"; }
r=$(sql "SELECT queen.log_push_multi_v1(ARRAY['spread', 'spread'], ARRAY['$pw1', '$pw2'], ARRAY[1, 1],
            ARRAY[$(seg_of log_txns hashes "$(pid_of wsrc Default)"), $(seg_of log_txns hashes "$(pid_of wsrc Two)")],
            ARRAY[-1, -1]::bigint[],
            ARRAY[$(seg_of log_segments blob "$(pid_of wsrc Default)"), $(seg_of log_segments blob "$(pid_of wsrc Two)")])")
check multi_push_spans_workers_and_dedups_on_each "$(jf "$r" '[.[].status] | join(",")')" "duplicate,duplicate"

# DLQ on both workers, listed, redriven, deleted.
sql "SELECT queen.configure_queue_v1('spread', NULL, NULL, '{\"retryLimit\": 0}')" >/dev/null
for p in "$A" "$B"; do
    lease=$(sql "SELECT DISTINCT r_lease_id FROM queen.pop('spread', (SELECT name FROM queen.partition_names WHERE id = '$p'), p_batch => 1, p_lease_seconds => 60)")
    sql "SELECT queen.log_dlq_head_v1('$p', '__QUEUE_MODE__', '$lease', 0, NULL, NULL, NULL, 'poison')" >/dev/null
done
check dlq_rows_on_both_workers "$(sql "SELECT count(*) FROM queen.log_dlq WHERE partition_id IN ('$A', '$B')")" "2"
check dlq_listing "$(sql "SELECT queen.dlq_list_v1('spread', NULL, 10, 0)->>'total'")" "2"
r=$(sql "SELECT queen.dlq_redrive_queue_v1('spread', NULL, 10)")
check dlq_redrive_moves_rows_of_both_workers "$(jf "$r" .moved)|$(sql "SELECT count(*) FROM queen.log_dlq")" "2|0"
check a_redriven_message_is_delivered_again "$(sql "SELECT count(*) FROM queen.pop('spread', '$pw1', p_batch => 10) WHERE r_transaction_id LIKE 'dlq:%'")" "1"
check queue_stats_over_both_workers "$(sql "SELECT count(DISTINCT r_partition_id) FROM queen.queue_stats_v1(p_queue => 'spread')")" "9"
# (nine partitions: configure created Default)
check lag_and_storage_views "$(sql "SELECT (SELECT count(*) FROM queen.consumer_lag WHERE queue = 'spread' AND consumer_group = 'gq')
                                           || '|' || (SELECT count(*) FROM queen.partition_storage WHERE queue = 'spread')")" "8|9"
check the_broker_role_pops_by_id_through_the_coordinator \
    "$(psql "postgres://queen_broker_test@127.0.0.1:$CPORT/$DBNAME" -X -qAt -c "SELECT sum(r_take) FROM queen.log_pop_at_v1('$A', 'gb', 10, 30, 'wb')" 2>&1)" "4"
check the_broker_role_cannot_distribute \
    "$(psql "postgres://queen_broker_test@127.0.0.1:$CPORT/$DBNAME" -X -qAt -c "SELECT queen.distribute()" 2>&1 | grep -o 'permission denied')" "permission denied"
for p in "$A" "$B"; do
    lease=$(sql "SELECT DISTINCT r_lease_id FROM queen.pop('spread', (SELECT name FROM queen.partition_names WHERE id = '$p'), p_batch => 1, p_lease_seconds => 60)")
    sql "SELECT queen.log_dlq_head_v1('$p', '__QUEUE_MODE__', '$lease', 1, NULL, NULL, NULL, 'poison again')" >/dev/null
done
ids=$(sql "SELECT string_agg(quote_literal(id), ',') FROM queen.log_dlq")
r=$(sql "SELECT queen.dlq_delete_v1(ARRAY[$ids]::uuid[], '00000000-0000-0000-0000-000000000002')")
check another_tenant_deletes_no_dlq_row "$(jf "$r" .deleted)|$(sql "SELECT count(*) FROM queen.log_dlq")" "0|2"
r=$(sql "SELECT queen.dlq_delete_v1(ARRAY[$ids]::uuid[])")
check dlq_delete_on_both_workers "$(jf "$r" .deleted)|$(sql "SELECT count(*) FROM queen.log_dlq")" "2|0"
r=$(sql "SELECT queen.delete_queue_v1('spread')")
check delete_queue_removes_everything_on_every_worker \
    "$(sql "SELECT (SELECT count(*) FROM queen.log_partitions WHERE id IN ('$A', '$B')) || '|' ||
                   (SELECT count(*) FROM queen.log_txns WHERE partition_id IN ('$A', '$B')) || '|' ||
                   (SELECT count(*) FROM queen.log_consumers WHERE partition_id IN ('$A', '$B')) || '|' ||
                   (SELECT count(*) FROM queen.partition_names WHERE id IN ('$A', '$B'))")" "0|0|0|0"

# Two producers create one new partition at once: one registry row, both pushes queued.
for i in 1 2 3 4; do
    sql "SELECT queen.push('race', '[{\"r\":$i}]', ARRAY['race-$i'], 'New')->>'status'" >"/tmp/qa-citus-race.$$.$i" &
done
wait
check concurrent_first_pushes_create_one_partition \
    "$(cat /tmp/qa-citus-race.$$.* | sort | uniq -c | awk '{print $1 " " $2}')|$(sql "SELECT count(*) FROM queen.partition_names WHERE name = 'New'")|$(sql "SELECT last_offset FROM queen.log_partitions WHERE name = 'New'")" \
    "4 queued|1|3"
rm -f /tmp/qa-citus-race.$$.*

# Queue-level pops of named groups from four clients at once, of one registered group and
# of a new group each (first contacts): none may deadlock. A registration locked the queue
# row FOR KEY SHARE on every pop; on a reference table Citus takes that as two shard
# resource locks, one after the other, and two pops taking them at once deadlocked (two
# pops in three failed with 40P01, the broker answered 503).
PGBENCH=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --bindir)/pgbench
sql "SELECT queen.push('busy', '[1,2,3,4]', ARRAY['b1','b2','b3','b4'])" >/dev/null
sql "SELECT count(*) FROM queen.pop('busy', NULL, 'known')" >/dev/null
echo "SELECT count(*) FROM queen.pop('busy', NULL, 'known');" >"/tmp/qa-citus-pop.$$.known"
printf '%s\n' '\set g random(1, 1000000000)' "SELECT count(*) FROM queen.pop('busy', NULL, 'g' || :g);" >"/tmp/qa-citus-pop.$$.first"
for kind in known first; do
    out=$("$PGBENCH" -n -c 4 -j 4 -T 3 --max-tries=1 --failures-detailed -f "/tmp/qa-citus-pop.$$.$kind" "$DB" 2>&1)
    check "concurrent_queue_pops_of_a_${kind}_group_never_deadlock" \
        "$(echo "$out" | sed -n 's/^number of deadlock failures: \([0-9]*\).*/\1/p')|$(echo "$out" | grep -c '^number of transactions actually processed: [1-9]')" "0|1"
done
rm -f /tmp/qa-citus-pop.$$.*

# --- a database that already holds rows, distributed afterwards; DROP EXTENSION -------------
bash tests/citus.sh dropdb "$DBNAME"
bash tests/citus.sh createdb "$DBNAME"
sql "CREATE EXTENSION queen_ack" >/dev/null
sql "SELECT queen.push('before', '[1,2,3,4]', ARRAY['b1','b2','b3','b4'])" >/dev/null
read -r bpid blease <<<"$(sql "SELECT DISTINCT r_partition_id || ' ' || r_lease_id FROM queen.pop('before', p_batch => 2, p_lease_seconds => 300)")"
r=$(sql "SELECT queen.distribute()")
check distribute_moves_the_rows_already_there "$(jf "$r" '.distributedTables | length')|$(sql "SELECT count(*) FROM queen.log_segments")|$(sql "SELECT last_offset FROM queen.log_partitions")" "6|1|3"
check the_coordinator_keeps_no_partition_rows "$(sql "SELECT pg_relation_size('queen.log_segments') + pg_relation_size('queen.log_partitions')")" "0"
r=$(sql "SELECT queen.ack('$bpid', '$blease', ARRAY['b1','b2'])")
check a_lease_from_before_acks_after "$(jf "$r" '"\(.acked)|\(.leaseReleased)"')" "2|true"
check the_rest_pops_after "$(sql "SELECT string_agg(r_transaction_id, ',' ORDER BY r_offset) FROM queen.pop('before', p_batch => 10)")" "b3,b4"
check drop_extension_leaves_nothing_on_any_node \
    "$(sql "DROP EXTENSION queen_ack; SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'")|$(on "$W1" "SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'")|$(on "$W2" "SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'")|$(sql "SELECT count(*) FROM pg_dist_partition")" \
    "0|0|0|0"
bash tests/citus.sh dropdb "$DBNAME"
echo "test result: $([ $failed -eq 0 ] && echo ok || echo FAILED). $passed passed; $failed failed"
[ $failed -eq 0 ]
