-- Citus only (tests/regress.sh runs citus_*.sql on the coordinator of tests/citus.sh):
-- what queen.distribute() lays out. Tables distributed by partition id and colocated,
-- or reference tables on every node; shards on the workers, none on the coordinator; the
-- per-partition functions registered with their partition argument; idempotent; refused
-- on a worker. Each "-- citus::NAME" comment names one check of the former shell suite
-- (docs/operations.md, "The test suites"). Node ports differ per run: they are compared, never shown.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;

-- citus::distribute_reports_what_it_did
SELECT jsonb_array_length(r->'referenceTables') AS reference_tables,
       jsonb_array_length(r->'distributedTables') AS distributed_tables,
       jsonb_array_length(r->'functions') AS functions, r->'workers' AS workers
  FROM queen.distribute() AS r;

-- citus::tables_are_distributed_or_reference (h: hash-distributed, n: reference)
SELECT logicalrelid::text AS "table", partmethod
  FROM pg_dist_partition WHERE logicalrelid::text LIKE 'queen.%' ORDER BY 1;

-- citus::per_partition_tables_are_colocated_by_partition_id (the stream state and
-- shards with the partition's log)
SELECT count(DISTINCT colocationid) AS colocation_groups,
       string_agg(DISTINCT column_to_column_name(logicalrelid, partkey), ',') AS keys
  FROM pg_dist_partition
 WHERE partmethod = 'h' AND (logicalrelid::text LIKE 'queen.log_%' OR logicalrelid::text LIKE 'queen.stream_%');

-- citus::shards_sit_on_both_workers_and_none_on_the_coordinator (group 0 is the coordinator)
SELECT array_agg(DISTINCT n.nodeport ORDER BY n.nodeport)
           = (SELECT array_agg(nodeport ORDER BY nodeport) FROM pg_dist_node WHERE groupid <> 0) AS on_every_worker,
       count(DISTINCT n.groupid) AS nodes, bool_and(n.groupid <> 0) AS none_on_the_coordinator
  FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid) JOIN pg_dist_node n USING (groupid)
 WHERE s.logicalrelid::text LIKE 'queen.log_%';

-- citus::reference_tables_are_on_every_node
SELECT count(DISTINCT pl.groupid) AS nodes
  FROM pg_dist_shard s JOIN pg_dist_placement pl USING (shardid)
 WHERE s.logicalrelid = 'queen.partition_names'::regclass;

-- citus::per_partition_functions_are_delegated_by_their_partition_argument
SELECT count(*) AS delegated_functions
  FROM queen.distributed_functions() f
  JOIN pg_proc p ON p.oid = f.r_function
  JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
 WHERE o.distribution_argument_index = array_position(p.proargnames, f.r_argument) - 1
   AND o.colocationid = (SELECT colocationid FROM pg_dist_partition
                          WHERE logicalrelid = 'queen.log_partitions'::regclass);

-- citus::distribute_is_idempotent
SELECT r->'referenceTables' AS reference_tables, r->'distributedTables' AS distributed_tables,
       r->'functions' AS functions
  FROM queen.distribute() AS r;

-- citus::distribute_refuses_on_a_worker
SELECT success, result ~ 'run it on the coordinator' AS says_where
  FROM run_command_on_workers('SELECT queen.distribute()') ORDER BY nodeport;

-- citus::every_worker_has_the_extension (the coordinator's version)
SELECT success, result = (SELECT extversion FROM pg_extension WHERE extname = 'queen_ack') AS same_version
  FROM run_command_on_workers($$SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'$$)
 ORDER BY nodeport;
