-- Citus only: a database that already holds rows (and a live lease), distributed
-- afterwards; then DROP EXTENSION leaves nothing on any node. Each "-- citus::NAME"
-- comment names one check of the former shell suite (docs/operations.md, "The test suites").
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT queen.push('before', '[1,2,3,4]', ARRAY['b1','b2','b3','b4'])->>'status' AS status;
SELECT DISTINCT r_partition_id AS bpid, r_lease_id AS blease
  FROM queen.pop('before', p_batch => 2, p_lease_seconds => 300) \gset

-- citus::distribute_moves_the_rows_already_there
SELECT jsonb_array_length(queen.distribute()->'distributedTables') AS distributed_tables;
SELECT (SELECT count(*) FROM queen.log_segments) AS segments,
       (SELECT last_offset FROM queen.log_partitions) AS last_offset;

-- citus::the_coordinator_keeps_no_partition_rows (its shell tables are empty)
SELECT pg_relation_size('queen.log_segments') + pg_relation_size('queen.log_partitions') AS local_bytes;

-- citus::a_lease_from_before_acks_after
SELECT r->'acked' AS acked, r->'leaseReleased' AS lease_released
  FROM queen.ack(:'bpid', :'blease', ARRAY['b1','b2']) AS r;

-- citus::the_rest_pops_after
SELECT string_agg(r_transaction_id, ',' ORDER BY r_offset) AS popped
  FROM queen.pop('before', p_batch => 10);

-- citus::drop_extension_leaves_nothing_on_any_node
DROP EXTENSION queen_ack;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'queen';
SELECT success, result AS schemas
  FROM run_command_on_workers($$SELECT count(*) FROM pg_namespace WHERE nspname = 'queen'$$)
 ORDER BY nodeport;
SELECT count(*) AS distributed_tables FROM pg_dist_partition;
