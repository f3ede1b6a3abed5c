-- queen_ack 0.1.0 → 0.2.0, run by ALTER EXTENSION queen_ack UPDATE.
--
-- Written by hand, in the same commit as each SQL change of 0.2.0 (new functions,
-- changed signatures, new tables, columns, indexes, grants). tests/upgrade.sh proves that
-- 0.1.0 plus this script has exactly the catalog of a fresh 0.2.0 install and keeps
-- every row. Rules (README "Upgrading"):
--   - never DROP a table or column that holds user data; add, backfill, then constrain;
--   - a C function keeps its SQL signature and its symbol forever: an install of an older
--     version runs against the newest library. A new signature is a new Rust function (a
--     new symbol); the old one stays exported (`#[pg_extern(sql = false)]` shim);
--   - CREATE OR REPLACE bodies exactly as the fresh install writes them (the test
--     compares them token for token);
--   - grants to queen_broker are repeated for every new function (see sql/grants.sql).

-- The broker calls functions only (issue 14). ------------------------------------------

-- The broker's pop: partition or queue-level, the queue's lease time by default, and the
-- delivery attempt per row (src/broker_api.rs).
CREATE FUNCTION queen.broker_pop_v1(
    "p_tenant" uuid,
    "p_queue" TEXT,
    "p_partition" TEXT,
    "p_group" TEXT,
    "p_budget" INT,
    "p_lease_seconds" INT,
    "p_worker" TEXT,
    "p_auto_ack" bool DEFAULT false,
    "p_sub_mode" TEXT DEFAULT 'all',
    "p_sub_from" TEXT DEFAULT '',
    "p_max_partitions" INT DEFAULT 1
) RETURNS TABLE (
    "r_partition_id" uuid,
    "r_partition" TEXT,
    "r_base" bigint,
    "r_start_idx" INT,
    "r_take" INT,
    "r_msg_count" INT,
    "r_created_at" timestamp with time zone,
    "r_blob" bytea,
    "r_attempt" INT
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'broker_pop_v1_wrapper';

-- Partitions of (queue, partition) name pairs with their dedup window (sql/broker_api.sql).
CREATE FUNCTION queen.partitions_lookup_v1(p_tenant uuid, p_queues text[], p_partitions text[])
RETURNS TABLE(r_index int, r_partition_id uuid, r_dedup_window int)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT t.i::int, p.id, q.dedup_window_seconds
      FROM unnest(p_queues, p_partitions) WITH ORDINALITY AS t(qn, pn, i)
      JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = t.qn
      JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = t.pn
$$;

-- The worker holding a cursor's lease (sql/broker_api.sql).
CREATE FUNCTION queen.cursor_worker_v1(p_partition_id uuid, p_group text)
RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT worker_id FROM queen.log_consumers
     WHERE partition_id = p_partition_id AND consumer_group = p_group
$$;

REVOKE ALL ON FUNCTION queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int),
                       queen.partitions_lookup_v1(uuid, text[], text[]),
                       queen.cursor_worker_v1(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int),
                          queen.partitions_lookup_v1(uuid, text[], text[]),
                          queen.cursor_worker_v1(uuid, text) TO queen_broker;
