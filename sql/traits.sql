-- The per-function traits, in one table (sql/updates/README.md): which functions plan as
-- hot-path functions (sql/finalize.sql sets their plan settings), which run on the
-- Citus worker holding a partition and by which argument (sql/citus.sql registers them;
-- a forced one is delegated even when called from inside another function), and which
-- the broker role may not call (sql/finalize.sql revokes them). A function not listed
-- has none: planned as written, local to the coordinator on Citus, callable by the
-- broker. A row naming no arguments applies to every overload of the name.
CREATE OR REPLACE FUNCTION queen.function_traits_v1()
RETURNS TABLE(r_function regprocedure, r_hot_path bool, r_distribution_argument text,
              r_force_delegation bool, r_broker bool)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.oid::regprocedure, bool_or(t.hot), max(t.arg), bool_or(t.forced), bool_and(t.broker)
      FROM (VALUES
        -- The push, pop and ack paths plan without bitmap scans (docs/decisions.md,
        -- "Plans of the hot path"): one row, or a short range, by a key, in tables that
        -- are often small, where a bitmap scan's set-up costs more than an index scan's
        -- whole run.
        ('push', NULL, true, NULL, false, true),
        ('pop', NULL, true, NULL, false, true),
        ('ack', NULL, true, NULL, false, true),
        ('log_push_one_v1', NULL, true, NULL, false, true),
        ('log_push_at_v1', NULL, true, NULL, false, true),
        ('log_push_multi_v1', NULL, true, NULL, false, true),
        ('log_pop_v1', NULL, true, NULL, false, true),
        ('log_pop_queue_v1', NULL, true, NULL, false, true),
        ('log_pop_at_v1', NULL, true, NULL, false, true),
        ('broker_pop_v1', NULL, true, NULL, false, true),
        ('fetch_v1', NULL, true, NULL, false, true),
        ('fetch_partition_v1', NULL, true, NULL, false, true),
        ('log_ack_v1', NULL, true, NULL, false, true),
        ('log_ack_at_v1', NULL, true, NULL, false, true),
        ('log_ack_multi_v1', NULL, true, NULL, false, true),
        ('log_ack_by_hash_v1', NULL, true, NULL, false, true),
        ('log_ack_by_hash_v2', NULL, true, NULL, false, true),
        ('log_ack_by_hash_delay_v1', NULL, true, NULL, false, true),
        ('log_dlq_head_v1', NULL, true, NULL, false, true),
        ('log_transaction_wire_v1', NULL, true, NULL, false, true),
        ('partitions_lookup_v1', NULL, true, NULL, false, true),
        ('dedup_window_v1', NULL, true, NULL, false, true),
        -- Per partition: on Citus they run on the worker holding the partition named by
        -- the argument (docs/citus.md).
        ('ack', 'uuid, text, text[], text[], text, text[]', false, 'p_partition_id', false, true),
        ('log_push_at_v1', 'uuid, int, bytea, bigint, bytea, int, uuid', false, 'p_partition_id', false, true),
        ('log_pop_at_v1', 'uuid, text, int, int, text, bool, text, text, uuid', false, 'p_partition_id', false, true),
        ('log_ack_at_v1', 'uuid, text, text, bigint, bool, int', false, 'p_partition_id', false, true),
        ('log_ack_by_hash_v1', 'uuid, text, text, bytea[], text[]', false, 'p_partition_id', false, true),
        ('log_ack_by_hash_v2', 'uuid, text, text, bytea[], text[], text[], int', false, 'p_partition_id', false, true),
        ('log_ack_by_hash_delay_v1', 'uuid, text, text, bytea[], text[], int', false, 'p_partition_id', false, true),
        ('log_dlq_head_v1', 'uuid, text, text, bigint, uuid, text, jsonb, text', false, 'p_partition_id', false, true),
        -- Called from inside fetch_v1: Citus delegates such a nested call only when forced.
        ('fetch_partition_v1', 'uuid, bigint, bigint, bool', false, 'p_partition_id', true, true),
        ('cursor_worker_v1', 'uuid, text', false, 'p_partition_id', false, true),
        ('dedup_window_v1', 'uuid', false, 'p_partition_id', false, true),
        ('dlq_ids_at_v1', 'uuid, text, uuid', false, 'p_partition_id', false, true),
        ('log_segment_at_v1', 'uuid, bigint', false, 'p_pid', false, true),
        ('log_retention_step_v1', 'uuid, timestamptz, timestamptz, int', false, 'p_pid', false, true),
        ('log_txns_purge_step_v1', 'uuid, timestamptz, int', false, 'p_pid', false, true),
        -- Distributing the schema over Citus is the operator's step (as the extension's owner).
        ('distribute', 'int', false, NULL, false, false)
      ) AS t(name, args, hot, arg, forced, broker)
      JOIN pg_proc p ON p.pronamespace = 'queen'::regnamespace AND p.proname = t.name
     WHERE t.args IS NULL
        OR p.oid = to_regprocedure(format('queen.%I(%s)', t.name, t.args))
     GROUP BY p.oid
$$;
