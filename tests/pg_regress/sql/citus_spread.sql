-- Citus only: the calls that span partitions on two workers. Queue "spread" has eight
-- partitions; one on each worker (A on the first, B on the second) is picked in SQL.
-- Queue-level pop, lease renewal, multi ack, the transaction wire (all or nothing),
-- multi push, DLQ listed / redriven / deleted, stats and views, the broker role through
-- the coordinator, delete_queue. Each "-- citus::NAME" comment names one check of the
-- former shell suite (docs/operations.md, "The test suites"); names and ids vary per run: compared, not
-- shown.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT queen.distribute() IS NOT NULL AS distributed;
CREATE SCHEMA regress;
-- A wire push op of the segment at offset 0 of queue/partition p_src_*, aimed at
-- p_queue/p_partition (as a broker sends it: hashes in hex, the blob in base64).
CREATE FUNCTION regress.wire_push(p_src_queue text, p_src_partition text, p_queue text, p_partition text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE v jsonb;
BEGIN
    EXECUTE format($q$SELECT jsonb_build_object('queue', %L, 'partition', %L, 'count', s.end_offset - s.base_offset + 1,
                                               'hashesHex', encode(t.hashes, 'hex'),
                                               'blobB64', translate(encode(s.blob, 'base64'), E'\n', ''))
                        FROM queen.log_segments s JOIN queen.log_txns t USING (partition_id, base_offset)
                       WHERE s.partition_id = %L AND s.base_offset = 0$q$,
                   p_queue, p_partition, regress.pid_of(p_src_queue, p_src_partition)) INTO v;
    RETURN v;
END $$;
CREATE FUNCTION regress.pid_of(p_queue text, p_partition text) RETURNS uuid LANGUAGE sql AS $$
    SELECT id FROM queen.partition_names
     WHERE name = p_partition AND queue_id = (SELECT id FROM queen.queues WHERE name = p_queue)
$$;
-- The port of the worker holding a partition.
CREATE FUNCTION regress.node_of(p_partition uuid) RETURNS int LANGUAGE sql AS $$
    SELECT n.nodeport FROM pg_dist_placement pl JOIN pg_dist_node n USING (groupid)
     WHERE pl.shardid = get_shard_id_for_distribution_column('queen.log_partitions', p_partition)
$$;

-- Two messages in each of eight partitions, one push each.
SELECT count(*) AS partitions_pushed
  FROM (SELECT queen.push('spread', format('[{"p":%s}]', i)::jsonb, ARRAY[format('s%s-0', i)], 'P' || i) AS a,
               queen.push('spread', format('[{"p":%s}]', i)::jsonb, ARRAY[format('s%s-1', i)], 'P' || i) AS b
          FROM generate_series(0, 7) i) x
 WHERE a->>'status' = 'queued' AND b->>'status' = 'queued';

-- citus::the_spread_queue_has_a_partition_on_each_worker
SELECT min(p.name) FILTER (WHERE regress.node_of(p.id) = w.first) AS pw1,
       min(p.name) FILTER (WHERE regress.node_of(p.id) = w.second) AS pw2
  FROM queen.partition_names p,
       (SELECT min(nodeport) AS first, max(nodeport) AS second FROM pg_dist_node WHERE groupid <> 0) w
 WHERE p.name LIKE 'P%' \gset
SELECT :'pw1' LIKE 'P_' AND :'pw2' LIKE 'P_' AND :'pw1' <> :'pw2' AS one_on_each_worker;
SELECT regress.pid_of('spread', :'pw1') AS a, regress.pid_of('spread', :'pw2') AS b \gset

-- citus::queue_level_pop_claims_partitions_on_both_workers
SELECT count(DISTINCT r_partition_id) AS partitions, count(*) AS rows
  FROM queen.log_pop_queue_v1('spread', 'gq', 100, 60, 'wq', false, 'all', '', 8);

-- citus::a_named_group_registers_once_in_the_reference_table
SELECT count(*) AS registrations FROM queen.consumer_groups_metadata WHERE consumer_group = 'gq';

-- citus::renewal_spans_workers
SELECT queen.log_renew_lease_v1('wq', 600)->'renewed' AS renewed;

-- citus::a_foreign_tenant_renews_nothing
SELECT queen.log_renew_lease_tenant_v1('wq', 600, '00000000-0000-0000-0000-000000000002')->'renewed' AS renewed;

-- citus::ack_multi_acks_on_both_workers
SELECT queen.log_ack_multi_v1(ARRAY[:'a', :'b'], ARRAY['gq', 'gq'], ARRAY[1, 1]::bigint[],
                              ARRAY['wq', 'wq'], ARRAY[2, 2]) AS r \gset
SELECT x.n, x.item->'ok' AS ok, x.item->'acked' AS acked
  FROM jsonb_array_elements(:'r'::jsonb->'results') WITH ORDINALITY AS x(item, n) ORDER BY x.n;

-- citus::ack_multi_committed_both
SELECT committed, count(*) AS partitions FROM queen.log_consumers
 WHERE consumer_group = 'gq' AND partition_id IN (:'a', :'b') GROUP BY committed;

-- The transaction wire across workers: all or nothing. fresh_a is new to A; dup_b
-- repeats B's own segment 0.
SELECT queen.push('wsrc', '[{"w":1}]', ARRAY['fresh-1'])->>'status' AS status;
SELECT regress.wire_push('wsrc', 'Default', 'spread', :'pw1') AS fresh_a,
       regress.wire_push('spread', :'pw2', 'spread', :'pw2') AS dup_b \gset
SELECT (SELECT string_agg(p.id || '=' || p.last_offset, ',' ORDER BY p.id) FROM queen.log_partitions p WHERE p.id IN (:'a', :'b'))
       || '|' || (SELECT count(*) FROM queen.log_txns WHERE partition_id IN (:'a', :'b')) AS before \gset

-- citus::a_wire_failing_on_one_worker_raises (the error's SQLSTATE, then its message
-- with the partition's name masked)
\set VERBOSITY sqlstate
SELECT queen.log_transaction_wire_v1(jsonb_build_object('pushes', jsonb_build_array(:'fresh_a'::jsonb, :'dup_b'::jsonb)));
\set VERBOSITY terse
SELECT regexp_replace(:'LAST_ERROR_MESSAGE', 'partition "P[0-7]"', 'partition "P?"') AS error;

-- citus::and_writes_nothing_on_either_worker
SELECT (SELECT string_agg(p.id || '=' || p.last_offset, ',' ORDER BY p.id) FROM queen.log_partitions p WHERE p.id IN (:'a', :'b'))
       || '|' || (SELECT count(*) FROM queen.log_txns WHERE partition_id IN (:'a', :'b')) = :'before' AS unchanged;

-- citus::a_wire_commits_on_both_workers (acked 0: the ack by hash needs the lease; the
-- wire still commits both pushes)
SELECT queen.push('wsrc', '[{"w":2}]', ARRAY['fresh-2'], 'Two')->>'status' AS status;
SELECT regress.wire_push('wsrc', 'Two', 'spread', :'pw2') AS fresh_b \gset
SELECT queen.log_transaction_wire_v1(jsonb_build_object(
           'pushes', jsonb_build_array(:'fresh_a'::jsonb, :'fresh_b'::jsonb),
           'acks', jsonb_build_array(jsonb_build_object('partitionId', :'a', 'group', 'gq', 'acks',
                       jsonb_build_array(jsonb_build_object('h', encode(queen.xxh3_128('s' || substr(:'pw1', 2) || '-1'), 'hex'))))))) AS r \gset
SELECT :'r'::jsonb->'ok' AS ok,
       (SELECT string_agg(x->>'status', ',') FROM jsonb_array_elements(:'r'::jsonb->'pushes') x) AS pushes,
       :'r'::jsonb->'acks'->0->'acked' AS acked;

-- citus::the_wire_pushes_are_there
SELECT count(*) AS partitions, bool_and(last_offset = 2) AS each_at_offset_2
  FROM queen.log_partitions WHERE id IN (:'a', :'b');

-- citus::multi_push_spans_workers_and_dedups_on_each (the segments passed as values: a
-- statement whose arguments read shards of one worker is routed there whole, and the
-- function then refuses to run a distributed query from inside a shard query)
SELECT regress.pid_of('wsrc', 'Default') AS wa, regress.pid_of('wsrc', 'Two') AS wb \gset
SELECT encode(hashes, 'hex') AS ha FROM queen.log_txns WHERE partition_id = :'wa' \gset
SELECT encode(hashes, 'hex') AS hb FROM queen.log_txns WHERE partition_id = :'wb' \gset
SELECT encode(blob, 'hex') AS ba FROM queen.log_segments WHERE partition_id = :'wa' \gset
SELECT encode(blob, 'hex') AS bb FROM queen.log_segments WHERE partition_id = :'wb' \gset
SELECT string_agg(x->>'status', ',') AS statuses
  FROM jsonb_array_elements(queen.log_push_multi_v1(ARRAY['spread', 'spread'], ARRAY[:'pw1', :'pw2'], ARRAY[1, 1],
           ARRAY[decode(:'ha', 'hex'), decode(:'hb', 'hex')], ARRAY[-1, -1]::bigint[],
           ARRAY[decode(:'ba', 'hex'), decode(:'bb', 'hex')])) x;

-- DLQ on both workers, listed, redriven, deleted.
SELECT queen.configure_queue_v1('spread', NULL, NULL, '{"retryLimit": 0}') IS NOT NULL AS configured;
SELECT DISTINCT r_lease_id AS lease FROM queen.pop('spread', :'pw1', p_batch => 1, p_lease_seconds => 60) \gset
SELECT queen.log_dlq_head_v1(:'a', '__QUEUE_MODE__', :'lease', 0, NULL, NULL, NULL, 'poison') AS answer \gset
SELECT DISTINCT r_lease_id AS lease FROM queen.pop('spread', :'pw2', p_batch => 1, p_lease_seconds => 60) \gset
SELECT queen.log_dlq_head_v1(:'b', '__QUEUE_MODE__', :'lease', 0, NULL, NULL, NULL, 'poison') AS answer \gset

-- citus::dlq_rows_on_both_workers
SELECT count(*) AS dlq_rows FROM queen.log_dlq WHERE partition_id IN (:'a', :'b');

-- citus::dlq_listing
SELECT queen.dlq_list_v1('spread', NULL, 10, 0)->'total' AS total;

-- citus::dlq_redrive_moves_rows_of_both_workers
SELECT queen.dlq_redrive_queue_v1('spread', NULL, 10)->'moved' AS moved;
SELECT count(*) AS dlq_rows FROM queen.log_dlq;

-- citus::a_redriven_message_is_delivered_again (this pop's lease holds A from now on)
SELECT count(*) FILTER (WHERE r_transaction_id LIKE 'dlq:%') AS redriven, min(r_lease_id) AS lease_a
  FROM queen.pop('spread', :'pw1', p_batch => 10) \gset
SELECT :redriven AS redriven;

-- citus::queue_stats_over_both_workers (nine partitions: configure created Default)
SELECT count(DISTINCT r_partition_id) AS partitions FROM queen.queue_stats_v1(p_queue => 'spread');

-- citus::lag_and_storage_views
SELECT (SELECT count(*) FROM queen.consumer_lag WHERE queue = 'spread' AND consumer_group = 'gq') AS lag_rows,
       (SELECT count(*) FROM queen.partition_storage WHERE queue = 'spread') AS storage_rows;

-- citus::the_broker_role_pops_by_id_through_the_coordinator
\c - queen_broker_test
SELECT sum(r_take) AS popped FROM queen.log_pop_at_v1(:'a', 'gb', 10, 30, 'wb');

-- citus::the_broker_role_cannot_distribute
SELECT queen.distribute();
\echo :LAST_ERROR_SQLSTATE
\c - postgres

-- A second head of each partition to the DLQ: A's under the lease still held since the
-- redriven pop, B's under a new pop's.
SELECT queen.log_dlq_head_v1(:'a', '__QUEUE_MODE__', :'lease_a', 1, NULL, NULL, NULL, 'poison again') AS answer \gset
SELECT DISTINCT r_lease_id AS lease FROM queen.pop('spread', :'pw2', p_batch => 1, p_lease_seconds => 60) \gset
SELECT queen.log_dlq_head_v1(:'b', '__QUEUE_MODE__', :'lease', 1, NULL, NULL, NULL, 'poison again') AS answer \gset
SELECT array_agg(id) AS ids FROM queen.log_dlq \gset

-- citus::another_tenant_deletes_no_dlq_row
SELECT queen.dlq_delete_v1(:'ids'::uuid[], '00000000-0000-0000-0000-000000000002')->'deleted' AS deleted;
SELECT count(*) AS dlq_rows FROM queen.log_dlq;

-- citus::dlq_delete_on_both_workers
SELECT queen.dlq_delete_v1(:'ids'::uuid[])->'deleted' AS deleted;
SELECT count(*) AS dlq_rows FROM queen.log_dlq;

-- citus::delete_queue_removes_everything_on_every_worker
SELECT queen.delete_queue_v1('spread') IS NOT NULL AS deleted;
SELECT (SELECT count(*) FROM queen.log_partitions WHERE id IN (:'a', :'b')) AS partitions,
       (SELECT count(*) FROM queen.log_txns WHERE partition_id IN (:'a', :'b')) AS txns,
       (SELECT count(*) FROM queen.log_consumers WHERE partition_id IN (:'a', :'b')) AS consumers,
       (SELECT count(*) FROM queen.partition_names WHERE id IN (:'a', :'b')) AS names;
