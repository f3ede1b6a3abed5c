-- Citus only: the walk-through over plain SQL on the coordinator, and every
-- per-partition entry point delegated to the worker holding its partition: planned as
-- one task on that worker (EXPLAIN names its node) and run there without an error (a
-- LANGUAGE sql body with parameters and a join is one Citus cannot plan: they are
-- PL/pgSQL). Then first contact with a subscription mode, and a delayed queue (their
-- statements carry a segment probe, which on Citus must name the partition itself).
-- Each "-- citus::NAME" comment names one check of the former shell suite
-- (docs/operations.md, "The test suites"). Node ports differ per run: the plans' ports are piped through
-- sed, which names the holder's.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT queen.distribute() IS NOT NULL AS distributed;

-- citus::push
SELECT queen.push('orders', '[{"id":1},{"id":2},null]', ARRAY['t1','t2','t3'])->>'status' AS status;

-- citus::pop_leases_the_three
SELECT DISTINCT r_partition_id AS pid, r_lease_id AS lease
  FROM queen.pop('orders', p_batch => 10, p_lease_seconds => 30) \gset
SELECT batch_end + 1 AS leased FROM queen.log_leases WHERE worker_id = :'lease';

-- The worker holding the partition, and its statistics from now on.
SELECT n.nodeport AS holder FROM pg_dist_placement pl JOIN pg_dist_node n USING (groupid)
 WHERE pl.shardid = get_shard_id_for_distribution_column('queen.log_partitions', :'pid'::uuid) \gset
\setenv HOLDER :holder
SELECT bool_and(success) AS reset FROM run_command_on_workers('SELECT pg_stat_statements_reset()');

-- citus::ack_by_transaction_id
SELECT queen.ack(:'pid', :'lease', ARRAY['t1','t2','t3']) AS r \gset
SELECT :'r'::jsonb->'ok' AS ok, :'r'::jsonb->'acked' AS acked, :'r'::jsonb->'leaseReleased' AS lease_released;

-- citus::the_ack_ran_on_the_worker_holding_the_partition
SELECT nodeport = :holder AS holds_the_partition, result AS ack_calls
  FROM run_command_on_workers($$SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements
                                 WHERE query LIKE 'SELECT queen.ack(%'$$)
 ORDER BY 1 DESC;

-- citus::the_ack_committed_the_cursor
SELECT c.committed, count(l.worker_id) AS leases
  FROM queen.log_consumers c LEFT JOIN queen.log_leases l USING (partition_id, consumer_group)
 WHERE c.partition_id = :'pid' GROUP BY c.committed;

-- citus::a_fetch_reads_on_the_worker_holding_the_partition: fetch_v1 calls its
-- per-partition half from inside itself; Citus runs that call on the holder (one
-- statement there, none on the other worker), so only the records travel.
SELECT jsonb_array_length(queen.fetch_v1('[{"queue":"orders","partition":"Default","offset":0,"maxBytes":1000}]')
                          ->'entries'->0->'records') AS records;
SELECT nodeport = :holder AS holds_the_partition, result AS fetch_calls
  FROM run_command_on_workers($$SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements
                                 WHERE query LIKE '%queen.fetch_partition_v1(%'$$)
 ORDER BY 1 DESC;

-- citus::delegated_NAME: each entry point is planned as one task on the holder's node
-- (the plan's node ports, the holder's named so).

-- citus::delegated_log_ack_by_hash_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_ack_by_hash_v1(:'pid', 'g', 'w', ARRAY[queen.xxh3_128('t1')], NULL)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_ack_by_hash_delay_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_ack_by_hash_delay_v1(:'pid', 'g', 'w', ARRAY[queen.xxh3_128('t1')], NULL, 5)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_ack_at_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_ack_at_v1(:'pid', 'g', 'w', 1)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_dlq_head_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_dlq_head_v1(:'pid', 'g', 'w', 0, NULL, NULL, NULL, 'x')
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_pop_at_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM queen.log_pop_at_v1(:'pid', 'g', 1, 30, 'w')
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_push_at_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_push_at_v1(:'pid', 1, queen.xxh3_128('t9'), -1, '\x00')
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_ack
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.ack(:'pid', 'w', ARRAY['t1'])
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_cursor_worker_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.cursor_worker_v1(:'pid', 'g')
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_dedup_window_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM queen.dedup_window_v1(:'pid')
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_dlq_ids_at_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.dlq_ids_at_v1(:'pid', 't1')
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_segment_at_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM queen.log_segment_at_v1(:'pid', 0)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_retention_step_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_retention_step_v1(:'pid', NULL, NULL, 10)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_log_txns_purge_step_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.log_txns_purge_step_v1(:'pid', now(), 10)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"

-- citus::delegated_fetch_partition_v1
EXPLAIN (VERBOSE, COSTS OFF) SELECT queen.fetch_partition_v1(:'pid', 0, 1000, true)
\g | grep -o 'port=[0-9]*' | sort -u | sed "s/^port=$HOLDER$/the holder/"


-- citus::runs_NAME: ... and each runs there without an error (its answer is kept in a
-- variable, not shown: an error would show). The push repeats segment 0 of the partition.
SELECT '\x' || encode(hashes, 'hex') AS hashes FROM queen.log_txns WHERE partition_id = :'pid' AND base_offset = 0 \gset
SELECT '\x' || encode(blob, 'hex') AS blob FROM queen.log_segments WHERE partition_id = :'pid' AND base_offset = 0 \gset

-- citus::runs_log_ack_by_hash_v1
SELECT queen.log_ack_by_hash_v1(:'pid', 'g', 'w', ARRAY[queen.xxh3_128('t1')], NULL) AS answer \gset

-- citus::runs_log_ack_by_hash_delay_v1
SELECT queen.log_ack_by_hash_delay_v1(:'pid', 'g', 'w', ARRAY[queen.xxh3_128('t1')], NULL, 5) AS answer \gset

-- citus::runs_log_ack_at_v1
SELECT queen.log_ack_at_v1(:'pid', 'g', 'w', 1) AS answer \gset

-- citus::runs_log_dlq_head_v1
SELECT queen.log_dlq_head_v1(:'pid', 'g', 'w', 0, NULL, NULL, NULL, 'x') AS answer \gset

-- citus::runs_log_pop_at_v1
SELECT count(*) AS answer FROM queen.log_pop_at_v1(:'pid', 'g', 1, 30, 'w') \gset

-- citus::runs_log_push_at_v1
SELECT queen.log_push_at_v1(:'pid', 3, :'hashes'::bytea, -1, :'blob'::bytea) AS answer \gset

-- citus::runs_ack
SELECT queen.ack(:'pid', 'w', ARRAY['t1']) AS answer \gset

-- citus::runs_cursor_worker_v1
SELECT queen.cursor_worker_v1(:'pid', 'g') AS answer \gset

-- citus::runs_dedup_window_v1
SELECT count(*) AS answer FROM queen.dedup_window_v1(:'pid') \gset

-- citus::runs_dlq_ids_at_v1
SELECT queen.dlq_ids_at_v1(:'pid', 't1') AS answer \gset

-- citus::runs_log_segment_at_v1
SELECT count(*) AS answer FROM queen.log_segment_at_v1(:'pid', 0) \gset

-- citus::runs_fetch_partition_v1
SELECT queen.fetch_partition_v1(:'pid', 0, 1000, true)::jsonb->'highWatermark' AS answer \gset

-- citus::runs_log_retention_step_v1
SELECT queen.log_retention_step_v1(:'pid', NULL, NULL, 10) AS answer \gset

-- citus::runs_log_txns_purge_step_v1
SELECT queen.log_txns_purge_step_v1(:'pid', now(), 10) AS answer \gset

-- citus::runs_seed_offset
SELECT queen.seed_offset(:'pid', 'new', now() - interval '1 day') AS answer \gset


-- citus::pop_first_contact_new
SELECT count(*) AS popped FROM queen.log_pop_v1('orders', 'Default', 'gnew', 10, 30, 'wn', false, 'new', '');

-- citus::pop_after_new
SELECT queen.push('orders', '[4]', ARRAY['t4'])->>'status' AS status;
SELECT sum(r_take) AS popped FROM queen.log_pop_v1('orders', 'Default', 'gnew', 10, 30, 'wn', false, 'new', '');

-- citus::pop_first_contact_timestamp
SELECT sum(r_take) AS popped
  FROM queen.log_pop_v1('orders', 'Default', 'gts', 10, 30, 'wt', false, 'timestamp', '2000-01-01');

-- citus::queue_pop_registers_a_new_group
SELECT count(*) AS popped FROM queen.log_pop_queue_v1('orders', 'gq2', 10, 30, 'wq2', false, 'new', '', 2);
SELECT subscription_mode FROM queen.consumer_groups_metadata WHERE consumer_group = 'gq2';

-- citus::a_delayed_message_is_not_served_by_any_pop
SELECT queen.configure_queue_v1('late', NULL, NULL, '{"delayedProcessing": 3600}') IS NOT NULL AS configured;
SELECT queen.push('late', '[1]', ARRAY['l1'])->>'status' AS status;
SELECT (SELECT count(*) FROM queen.log_pop_v1('late', 'Default', 'g', 10, 30, 'w')) AS by_partition,
       (SELECT count(*) FROM queen.log_pop_queue_v1('late', 'g', 10, 30, 'w', false, 'all', '', 4)) AS by_queue;
