-- Scale-out on Citus (docs/citus.md): the one step that turns a database with the extension
-- into the distributed layout. Every per-partition table is hash-distributed by partition
-- id, all colocated with log_partitions (a partition's rows, segments, sidecar, cursors,
-- leases and DLQ rows live in one shard group, on one worker); the timers are
-- distributed by queue; the small shared tables are reference tables (a copy on every
-- node); every function that touches one
-- partition is registered with its partition argument, so a call on the coordinator runs
-- on the worker holding that partition. Nothing here runs without Citus: on one node the
-- function refuses with 55000 and the schema is used as it is.

-- The per-partition functions and the argument naming their partition (sql/traits.sql).
CREATE OR REPLACE FUNCTION queen.distributed_functions()
RETURNS TABLE(r_function regprocedure, r_argument text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r_function, r_distribution_argument FROM queen.function_traits_v1()
     WHERE r_distribution_argument IS NOT NULL
     ORDER BY r_function::text
$$;

-- Distribute this database over the Citus cluster it is the coordinator of (run it once,
-- as a superuser, on the coordinator, after CREATE EXTENSION queen_ack and citus_add_node
-- for the workers). Idempotent: what is already distributed is left alone, so it is also
-- the step to run after an upgrade that added a function. Rows already there move into
-- the shards. p_shard_count (default: citus.shard_count) is the shard count of the
-- partition tables. Returns what it did.
CREATE OR REPLACE FUNCTION queen.distribute(p_shard_count int DEFAULT NULL) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_reference text[] := ARRAY['queen.queues', 'queen.partition_names',
                                'queen.consumer_groups_metadata', 'queen.maintenance_state',
                                'queen.stream_queries'];
    -- log_partitions first (the colocation group), log_consumers before log_leases (FK).
    v_distributed text[] := ARRAY['queen.log_partitions', 'queen.log_segments', 'queen.log_txns',
                                  'queen.log_consumers', 'queen.log_leases', 'queen.log_dlq',
                                  'queen.log_traces', 'queen.timers', 'queen.kv',
                                  'queen.stream_state', 'queen.stream_shards'];
    -- Called from inside another function (fetch_v1 calls fetch_partition_v1): Citus
    -- delegates such a nested call only when told to (sql/traits.sql).
    v_forced regprocedure[] := ARRAY(SELECT r_function FROM queen.function_traits_v1()
                                      WHERE r_force_delegation);
    v_table text;
    v_new_ref text[] := '{}';
    v_new_dist text[] := '{}';
    v_new_fn text[] := '{}';
    v_members int := 0;
    r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'queen.distribute: the citus extension is not installed in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'On a Citus coordinator: CREATE EXTENSION citus, citus_add_node() for each worker, then SELECT queen.distribute().';
    END IF;
    IF NOT citus_is_coordinator() THEN
        RAISE EXCEPTION 'queen.distribute: run it on the coordinator'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF p_shard_count IS NOT NULL THEN
        IF p_shard_count < 1 THEN
            RAISE EXCEPTION 'queen.distribute: p_shard_count must be >= 1, got %', p_shard_count
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM set_config('citus.shard_count', p_shard_count::text, true);
    END IF;
    -- Citus builds no distributed plan from a generic one with parameters: the hot-path
    -- functions plan as Citus does, per call (sql/finalize.sql set generic plans when
    -- this database had no Citus).
    FOR r IN SELECT r_function FROM queen.function_traits_v1() WHERE r_hot_path LOOP
        EXECUTE format('ALTER FUNCTION %s RESET plan_cache_mode', r.r_function);
    END LOOP;
    -- The foreign keys to a reference table would otherwise make Citus convert the tables
    -- still local into "citus local tables", which fails for tables an extension owns.
    PERFORM set_config('citus.enable_local_reference_table_foreign_keys', 'off', true);
    FOREACH v_table IN ARRAY v_reference LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = v_table::regclass) THEN
            PERFORM create_reference_table(v_table::regclass);
            v_new_ref := v_new_ref || v_table;
        END IF;
    END LOOP;
    FOREACH v_table IN ARRAY v_distributed LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = v_table::regclass) THEN
            IF v_table = 'queen.log_partitions' THEN
                PERFORM create_distributed_table(v_table::regclass, 'id');
            ELSIF v_table = 'queen.timers' THEN
                -- Keyed by (queue, key): one shard per queue's timers, so a schedule,
                -- a cancel and a sweep's row locks each touch one shard.
                PERFORM create_distributed_table(v_table::regclass, 'queue_id',
                                                 colocate_with => 'none');
            ELSIF v_table = 'queen.kv' THEN
                -- Keyed by (tenant, namespace, key): every op names its key, one shard.
                PERFORM create_distributed_table(v_table::regclass, 'key',
                                                 colocate_with => 'none');
            ELSE
                PERFORM create_distributed_table(v_table::regclass, 'partition_id',
                                                 colocate_with => 'queen.log_partitions');
            END IF;
            v_new_dist := v_new_dist || v_table;
        END IF;
    END LOOP;
    -- Rows that were there before were copied into the shards; the coordinator's own
    -- copies go (it holds no partition data).
    FOREACH v_table IN ARRAY v_reference || v_distributed LOOP
        IF v_table = ANY(v_new_ref || v_new_dist) THEN
            PERFORM truncate_local_data_after_distributing_table(v_table::regclass);
        END IF;
    END LOOP;
    FOR r IN SELECT f.r_function, f.r_argument FROM queen.distributed_functions() f LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_object o
                        WHERE o.classid = 'pg_proc'::regclass AND o.objid = r.r_function
                          AND o.distribution_argument_index IS NOT NULL) THEN
            PERFORM create_distributed_function(r.r_function, r.r_argument,
                                                colocate_with => 'queen.log_partitions',
                                                force_delegation => CASE WHEN r.r_function = ANY(v_forced) THEN true END);
            v_new_fn := v_new_fn || r.r_function::text;
        END IF;
    END LOOP;
    -- The coordinator's placements of the reference tables become members of the
    -- extension, so that a plain DROP EXTENSION queen_ack removes them too.
    FOR r IN SELECT s.logicalrelid, s.shardid FROM pg_dist_shard s
               JOIN pg_dist_placement pl ON pl.shardid = s.shardid
              WHERE pl.groupid = 0 AND s.logicalrelid::text = ANY(v_reference)
                AND to_regclass(shard_name(s.logicalrelid, s.shardid)) IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM pg_depend d
                                 WHERE d.classid = 'pg_class'::regclass
                                   AND d.objid = to_regclass(shard_name(s.logicalrelid, s.shardid))
                                   AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e') LOOP
        EXECUTE format('ALTER EXTENSION queen_ack ADD TABLE %s', shard_name(r.logicalrelid, r.shardid));
        v_members := v_members + 1;
    END LOOP;
    RETURN jsonb_build_object(
        'referenceTables', to_jsonb(v_new_ref), 'distributedTables', to_jsonb(v_new_dist),
        'functions', to_jsonb(v_new_fn), 'coordinatorPlacementsAdded', v_members,
        'workers', (SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0),
        'shardCount', (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'queen.log_partitions'::regclass));
END $$;
