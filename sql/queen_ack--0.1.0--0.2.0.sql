-- queen_ack 0.1.0 → 0.2.0, run by ALTER EXTENSION queen_ack UPDATE.
--
-- Written by hand, in the same commit as each SQL change of 0.2.0 (new functions,
-- changed signatures, new tables, columns, indexes, grants). tests/upgrade.sh proves that
-- 0.1.0 plus this script has exactly the catalog of a fresh 0.2.0 install and keeps
-- every row. Rules (docs/operations.md, "Upgrading"):
--   - never DROP a table or column that holds user data; add, backfill, then constrain;
--   - a C function names this version's library, 'queen_ack-0.2.0' (0.1.0's scripts
--     name MODULE_PATHNAME, its queen_ack.so); the script ends by moving every other C
--     function there (queen.relink_library_v1), so each version runs its own library;
--   - CREATE OR REPLACE bodies exactly as the fresh install writes them (the test
--     compares them token for token);
--   - grants to queen_broker are repeated for every new function (see sql/grants.sql).


-- A schema that distributes (docs/citus.md): every unique key and foreign key is one Citus can
-- enforce once the per-partition tables are distributed by partition id. First, so that
-- every function below may name the registry. -------------------------------------------

-- The registry of partition names (sql/bootstrap.sql), filled with every partition as it
-- is: ids never change (clients hold them in flight).
CREATE TABLE queen.partition_names (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name text NOT NULL,
    CONSTRAINT partition_names_pkey PRIMARY KEY (id),
    CONSTRAINT partition_names_queue_id_name_key UNIQUE (queue_id, name),
    CONSTRAINT partition_names_id_queue_id_name_key UNIQUE (id, queue_id, name)
);
INSERT INTO queen.partition_names (id, queue_id, name)
SELECT id, queue_id, name FROM queen.log_partitions;
-- (queue_id, name) is unique through the registry now; a partition id is always given.
ALTER TABLE queen.log_partitions DROP CONSTRAINT log_partitions_queue_id_name_key,
    ALTER COLUMN id DROP DEFAULT,
    ADD CONSTRAINT log_partitions_name_fkey FOREIGN KEY (id, queue_id, name)
        REFERENCES queen.partition_names (id, queue_id, name) ON DELETE CASCADE;
-- The DLQ's key includes the distribution column.
ALTER TABLE queen.log_dlq DROP CONSTRAINT log_dlq_pkey,
    ADD CONSTRAINT log_dlq_pkey PRIMARY KEY (id, partition_id);

-- Leases move to an UNLOGGED table (docs/decisions.md): claiming a lease writes no WAL, a pop
-- that only leases commits without waiting for a flush, and an ack's update of the
-- durable cursor row is HOT (nothing indexed changes on it any more). ------------------
CREATE UNLOGGED TABLE queen.log_leases (
    partition_id uuid NOT NULL,
    consumer_group text NOT NULL,
    worker_id text,
    batch_end bigint,
    lease_expires_at timestamptz,
    lease_acquired_at timestamptz,
    attempt_offset bigint,
    attempt_count int NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_id, consumer_group),
    FOREIGN KEY (partition_id, consumer_group)
        REFERENCES queen.log_consumers (partition_id, consumer_group) ON DELETE CASCADE
);
CREATE INDEX log_leases_worker_idx ON queen.log_leases (worker_id) WHERE worker_id IS NOT NULL;
-- Every lease in flight moves with its state, so a lease taken before the upgrade is
-- still honoured after it; then the columns leave log_consumers (their data lives on in
-- log_leases: nothing is lost).
INSERT INTO queen.log_leases (partition_id, consumer_group, worker_id, batch_end, lease_expires_at,
                              lease_acquired_at, attempt_offset, attempt_count)
SELECT partition_id, consumer_group, worker_id, batch_end, lease_expires_at,
       lease_acquired_at, attempt_offset, attempt_count
  FROM queen.log_consumers;
DROP INDEX queen.log_consumers_worker_idx;
ALTER TABLE queen.log_consumers
    DROP COLUMN worker_id, DROP COLUMN batch_end, DROP COLUMN lease_expires_at,
    DROP COLUMN lease_acquired_at, DROP COLUMN attempt_offset, DROP COLUMN attempt_count;
ALTER TABLE queen.log_consumers SET (fillfactor = 70);

-- Renewal extends the lease rows.
CREATE OR REPLACE FUNCTION queen.log_renew_lease_v1(p_worker text, p_seconds int) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_until timestamptz := v_now + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1));
    v_renewed bigint;
    v_min timestamptz;
BEGIN
    UPDATE queen.log_leases
       SET lease_expires_at = GREATEST(lease_expires_at, v_until)
     WHERE worker_id = p_worker AND lease_expires_at > v_now;
    GET DIAGNOSTICS v_renewed = ROW_COUNT;
    -- The renewed rows are exactly the worker's live ones now (renewal never shortens).
    SELECT min(lease_expires_at) INTO v_min FROM queen.log_leases
     WHERE worker_id = p_worker AND lease_expires_at > v_now;
    RETURN jsonb_build_object('renewed', v_renewed, 'expiresAt', queen.iso_utc(v_min));
END $$;

CREATE OR REPLACE FUNCTION queen.log_renew_lease_tenant_v1(p_worker text, p_seconds int, p_tenant uuid)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_until timestamptz := v_now + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1));
    v_renewed bigint := 0;
    v_min timestamptz;
BEGIN
    IF EXISTS (SELECT 1 FROM queen.log_leases l
                 JOIN queen.partition_names n ON n.id = l.partition_id
                 JOIN queen.queues q ON q.id = n.queue_id
                WHERE l.worker_id = p_worker AND l.lease_expires_at > v_now
                  AND q.tenant_id = p_tenant) THEN
        UPDATE queen.log_leases
           SET lease_expires_at = GREATEST(lease_expires_at, v_until)
         WHERE worker_id = p_worker AND lease_expires_at > v_now;
        GET DIAGNOSTICS v_renewed = ROW_COUNT;
        -- The renewed rows are exactly the worker's live ones now (renewal never shortens).
        SELECT min(lease_expires_at) INTO v_min FROM queen.log_leases
         WHERE worker_id = p_worker AND lease_expires_at > v_now;
    END IF;
    RETURN jsonb_build_object('renewed', v_renewed, 'expiresAt', queen.iso_utc(v_min));
END $$;

-- The broker calls functions only (docs/security.md). -----------------------------------

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
AS 'queen_ack-0.2.0', 'broker_pop_v1_wrapper';

-- Partitions of (queue, partition) name pairs with their queue's dedup window and encryption
-- switch; a pair whose queue exists but partition does not has a NULL id (sql/broker_api.sql).
CREATE FUNCTION queen.partitions_lookup_v1(p_tenant uuid, p_queues text[], p_partitions text[])
RETURNS TABLE(r_index int, r_partition_id uuid, r_dedup_window int, r_encrypted bool)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT t.i::int, p.id, q.dedup_window_seconds, q.encryption_enabled
      FROM unnest(p_queues, p_partitions) WITH ORDINALITY AS t(qn, pn, i)
      JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = t.qn
      LEFT JOIN queen.partition_names p ON p.queue_id = q.id AND p.name = t.pn;
END $$;

-- The worker holding a cursor's lease (sql/broker_api.sql).
CREATE FUNCTION queen.cursor_worker_v1(p_partition_id uuid, p_group text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT worker_id FROM queen.log_leases
             WHERE partition_id = p_partition_id AND consumer_group = p_group);
END $$;

REVOKE ALL ON FUNCTION queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int),
                       queen.partitions_lookup_v1(uuid, text[], text[]),
                       queen.cursor_worker_v1(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int),
                          queen.partitions_lookup_v1(uuid, text[], text[]),
                          queen.cursor_worker_v1(uuid, text) TO queen_broker;

-- Log lifecycle (docs/operations.md): retention, the purge clock's clamp, orphan cleanup, the
-- driver, storage and lag views. Copied from sql/lifecycle.sql. ------------------------

-- Messages a group lost unconsumed to retention rule 1.
ALTER TABLE queen.log_consumers ADD COLUMN evicted bigint NOT NULL DEFAULT 0;

CREATE FUNCTION queen.log_retention_step_v1(
    "p_pid" uuid,
    "p_all_cutoff" timestamp with time zone,
    "p_completed_cutoff" timestamp with time zone,
    "p_max_rows" INT
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'log_retention_step_v1_wrapper';

-- maxWaitTimeSeconds' step (src/lifecycle.rs; docs/decisions.md, "Queue options").
CREATE FUNCTION queen.log_wait_eviction_step_v1(
    "p_pid" uuid
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'log_wait_eviction_step_v1_wrapper';

-- Where the orphan sweep stopped (it walks partition ids in order and wraps around).
CREATE TABLE queen.maintenance_state (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One purge step for one partition (docs/contract.md §10, §13): whole sidecar rows older than the
-- cutoff, from the low end, at most p_max_rows; txns_start moves past them. The cutoff is
-- clamped to now - GREATEST(dedup window, completed retention, 900 s) of the partition's
-- queue: hashes inside the window are what dedup and acks by id need; and to the oldest
-- push spool hold.
CREATE OR REPLACE FUNCTION queen.log_txns_purge_step_v1(p_pid uuid, p_cutoff timestamptz, p_max_rows int)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_floor timestamptz;
    v_cut timestamptz;
    v_deleted int;
    v_last bigint;
    v_end bigint;
    v_start bigint;
BEGIN
    IF p_pid IS NULL OR p_cutoff IS NULL OR p_max_rows IS NULL THEN
        RAISE EXCEPTION 'log_txns_purge_step_v1: arguments must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_max_rows < 1 THEN
        RAISE EXCEPTION 'log_txns_purge_step_v1: p_max_rows must be >= 1, got %', p_max_rows
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The partition row first, as a push locks it: purge and push serialize per partition.
    SELECT p.txns_start,
           clock_timestamp() - make_interval(secs => GREATEST(q.dedup_window_seconds,
                                                              COALESCE(q.completed_retention_seconds, 0), 900))
      INTO v_start, v_floor
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = p_pid
       FOR NO KEY UPDATE OF p;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('deleted', 0, 'new_txns_start', NULL, 'done', true, 'clamped', false);
    END IF;
    -- A push spool's hold (docs/availability.md): sidecar rows a spooled push may be a
    -- duplicate of are kept until its replay has looked for them.
    v_cut := LEAST(p_cutoff, v_floor,
                   (SELECT min((s.value->>'holdSince')::timestamptz) FROM queen.maintenance_state s
                     WHERE s.key LIKE 'spool:%' AND s.value ? 'holdSince'));
    -- created_at is monotone in base_offset, so "older than the cutoff" is a prefix: the
    -- victims are the rows up to the last one found. Two plain statements (on Citus a
    -- DELETE in a CTE runs through intermediate results sent to every node).
    SELECT count(*), max(v.base_offset), max(v.end_offset) INTO v_deleted, v_last, v_end
      FROM (SELECT t.base_offset, t.end_offset FROM queen.log_txns t
             WHERE t.partition_id = p_pid AND t.created_at < v_cut
             ORDER BY t.base_offset LIMIT p_max_rows) v;
    IF v_deleted > 0 THEN
        DELETE FROM queen.log_txns
         WHERE partition_id = p_pid AND base_offset <= v_last AND created_at < v_cut;
    END IF;
    IF v_deleted > 0 AND v_end + 1 > v_start THEN
        UPDATE queen.log_partitions SET txns_start = v_end + 1 WHERE id = p_pid;
        v_start := v_end + 1;
    END IF;
    RETURN jsonb_build_object('deleted', v_deleted, 'new_txns_start', v_start,
                              'done', v_deleted < p_max_rows, 'clamped', p_cutoff > v_floor);
END $$;

-- The purge for every partition, each on its queue's clock, in ONE transaction (kept
-- from 0.1.0; run_maintenance does the same work in short transactions).
CREATE OR REPLACE FUNCTION queen.log_txns_purge_all_v1(p_max_rows int DEFAULT 10000) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    v_step jsonb;
    v_partitions int := 0;
    v_deleted bigint := 0;
BEGIN
    FOR r IN SELECT p.id FROM queen.log_partitions p ORDER BY p.id LOOP
        LOOP
            v_step := queen.log_txns_purge_step_v1(r.id, 'infinity', p_max_rows);
            v_deleted := v_deleted + (v_step->>'deleted')::bigint;
            EXIT WHEN (v_step->>'done')::bool;
        END LOOP;
        v_partitions := v_partitions + 1;
    END LOOP;
    RETURN jsonb_build_object('partitions', v_partitions, 'deleted', v_deleted);
END $$;

-- One bounded step of orphan cleanup: sidecar and DLQ rows (the tables without a foreign
-- key) of partitions that no longer exist — e.g. after a plain DELETE FROM queen.queues.
-- It walks the distinct partition ids of both tables in order from where the last step
-- stopped (a loose index scan: cost grows with partitions, not rows), removes at most
-- p_max_rows rows, and wraps around at the end.
CREATE FUNCTION queen.log_orphans_step_v1(p_max_rows int) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_from uuid;
    v_ids uuid[];
    v_alive uuid[];
    v_pid uuid;
    v_n int;
    v_txns int := 0;
    v_dlq int := 0;
    v_now timestamptz := now();
BEGIN
    IF p_max_rows IS NULL OR p_max_rows < 1 THEN
        RAISE EXCEPTION 'log_orphans_step_v1: p_max_rows must be >= 1, got %', p_max_rows
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT (value->>'from')::uuid INTO v_from FROM queen.maintenance_state WHERE key = 'orphans';
    v_from := COALESCE(v_from, '00000000-0000-0000-0000-000000000000');
    -- The next distinct partition ids of both tables after v_from.
    SELECT array_agg(id ORDER BY id) INTO v_ids
      FROM (SELECT id FROM unnest(queen.partition_ids_after('queen.log_txns', v_from, 1000)) id
            UNION
            SELECT id FROM unnest(queen.partition_ids_after('queen.log_dlq', v_from, 1000)) id
            ORDER BY id LIMIT 1000) ids;
    v_alive := ARRAY(SELECT id FROM queen.log_partitions WHERE id = ANY(v_ids));
    -- Per orphaned partition (one shard each on Citus), its sidecar rows, then its DLQ rows.
    FOR v_pid IN SELECT i FROM unnest(v_ids) i WHERE i <> ALL (v_alive) ORDER BY i LOOP
        EXIT WHEN v_txns + v_dlq >= p_max_rows;
        WITH gone AS (
            DELETE FROM queen.log_txns t USING (
                SELECT base_offset FROM queen.log_txns WHERE partition_id = v_pid
                 ORDER BY base_offset LIMIT p_max_rows - v_txns - v_dlq) v
             WHERE t.partition_id = v_pid AND t.base_offset = v.base_offset
            RETURNING 1)
        SELECT count(*) INTO v_n FROM gone;
        v_txns := v_txns + v_n;
        WITH gone AS (
            DELETE FROM queen.log_dlq d USING (
                SELECT id FROM queen.log_dlq WHERE partition_id = v_pid
                 LIMIT p_max_rows - v_txns - v_dlq) v
             WHERE d.partition_id = v_pid AND d.id = v.id
            RETURNING 1)
        SELECT count(*) INTO v_n FROM gone;
        v_dlq := v_dlq + v_n;
    END LOOP;
    -- Move on only past ids that are now clean; after the last one start over (an idle
    -- sweep leaves the row unchanged and writes nothing). The time is a value: Citus
    -- refuses a function call in an upsert's SET.
    IF v_txns + v_dlq < p_max_rows THEN
        INSERT INTO queen.maintenance_state AS s (key, value)
        VALUES ('orphans', jsonb_build_object('from', CASE WHEN array_length(v_ids, 1) = 1000
                                                           THEN v_ids[1000] END))
        ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = v_now
        WHERE s.value IS DISTINCT FROM EXCLUDED.value;
    END IF;
    RETURN jsonb_build_object('checked', COALESCE(array_length(v_ids, 1), 0),
                              'removed', v_txns + v_dlq,
                              'done', v_ids IS NULL OR array_length(v_ids, 1) < 1000 AND v_txns + v_dlq < p_max_rows);
END $$;

-- The partitions with lifecycle work due now, with the cutoffs of their queue: retention
-- when the oldest segment is older than a retention cutoff, purge when the oldest sidecar
-- row is older than the purge clock. One index probe per partition and table.
CREATE FUNCTION queen.maintenance_plan_v1()
RETURNS TABLE(r_partition_id uuid, r_all_cutoff timestamptz, r_completed_cutoff timestamptz,
              r_purge_cutoff timestamptz, r_retention_due bool, r_purge_due bool)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH c AS (
        SELECT p.id,
               CASE WHEN q.retention_seconds > 0
                    THEN now.t - make_interval(secs => q.retention_seconds) END AS all_cut,
               CASE WHEN q.completed_retention_seconds > 0
                    THEN now.t - make_interval(secs => q.completed_retention_seconds) END AS done_cut,
               now.t - make_interval(secs => GREATEST(q.dedup_window_seconds,
                                                      COALESCE(q.completed_retention_seconds, 0), 900)) AS purge_cut,
               (SELECT s.created_at FROM queen.log_segments s WHERE s.partition_id = p.id
                 ORDER BY s.base_offset LIMIT 1) AS oldest_segment,
               (SELECT t.created_at FROM queen.log_txns t WHERE t.partition_id = p.id
                 ORDER BY t.base_offset LIMIT 1) AS oldest_hashes
          FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id,
               (SELECT clock_timestamp() AS t) now)
    SELECT id, all_cut, done_cut, purge_cut,
           COALESCE(oldest_segment < all_cut OR oldest_segment < done_cut, false),
           COALESCE(oldest_hashes < purge_cut, false)
      FROM c
     WHERE oldest_segment < all_cut OR oldest_segment < done_cut OR oldest_hashes < purge_cut
     ORDER BY id
$$;

-- The driver (docs/contract.md §13): every due step for every partition, a COMMIT after each, so
-- no transaction stays open long. Exactly one runner works at a time: each step runs
-- under a transaction-level advisory lock, and a run that cannot take it returns at once
-- (ran: false). A run stops after p_time_budget_ms (more: true says work is left).
-- SECURITY INVOKER and without SET on purpose: PostgreSQL allows COMMIT only there; the
-- steps it calls are SECURITY DEFINER. Reports in p_report (INOUT jsonb).
CREATE PROCEDURE queen.run_maintenance(p_time_budget_ms int DEFAULT 10000,
                                       p_max_rows int DEFAULT 1000,
                                       INOUT p_report jsonb DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    v_start timestamptz := pg_catalog.clock_timestamp();
    v_budget interval;
    v_step jsonb;
    r record;
    v_partitions int := 0;
    v_segments bigint := 0;
    v_messages bigint := 0;
    v_expired bigint := 0;
    v_expired_messages bigint := 0;
    v_evicted bigint := 0;
    v_wait_evicted bigint := 0;
    v_traces bigint := 0;
    v_purged bigint := 0;
    v_orphans bigint := 0;
    v_kv bigint := 0;
    v_streams bigint := 0;
    v_more bool := false;
    v_interrupted bool := false;
BEGIN
    IF p_time_budget_ms IS NULL OR p_time_budget_ms < 1 OR p_max_rows IS NULL OR p_max_rows < 1 THEN
        RAISE EXCEPTION 'run_maintenance: p_time_budget_ms and p_max_rows must be >= 1'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_budget := pg_catalog.make_interval(secs => p_time_budget_ms / 1000.0);
    IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN
        p_report := pg_catalog.jsonb_build_object('ran', false, 'reason', 'another run_maintenance holds the lock');
        RETURN;
    END IF;
    <<steps>>
    BEGIN
        LOOP
            v_step := queen.log_orphans_step_v1(p_max_rows);
            v_orphans := v_orphans + (v_step->>'removed')::bigint;
            COMMIT;
            EXIT WHEN (v_step->>'done')::bool;
            IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
            IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
        END LOOP;
        -- Key/value rows past their expiry (docs/decisions.md, "Key/value").
        LOOP
            v_step := queen.kv_expire_step_v1(p_max_rows);
            v_kv := v_kv + (v_step->>'removed')::bigint;
            COMMIT;
            EXIT WHEN (v_step->>'done')::bool;
            IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
            IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
        END LOOP;
        -- Stream state of source partitions that no longer exist (docs/decisions.md, "Streams").
        LOOP
            v_step := queen.streams_orphans_step_v1(p_max_rows);
            v_streams := v_streams + (v_step->>'removed')::bigint;
            COMMIT;
            EXIT WHEN (v_step->>'done')::bool;
            IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
            IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
        END LOOP;
        -- maxWaitTimeSeconds (docs/decisions.md, "Queue options"): groups move past the
        -- messages that waited longer, counted; a busy partition is left for the next run.
        FOR r IN SELECT * FROM queen.wait_eviction_plan_v1() LOOP
            IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
            IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
            v_step := queen.log_wait_eviction_step_v1(r.r_partition_id);
            v_wait_evicted := v_wait_evicted + (v_step->>'evicted')::bigint;
            COMMIT;
        END LOOP;
        FOR r IN SELECT * FROM queen.maintenance_plan_v1() LOOP
            IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
            IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
            v_partitions := v_partitions + 1;
            WHILE r.r_retention_due LOOP
                v_step := queen.log_retention_step_v1(r.r_partition_id, r.r_all_cutoff, r.r_completed_cutoff, p_max_rows);
                v_segments := v_segments + (v_step->>'deleted')::bigint;
                v_messages := v_messages + (v_step->>'messages')::bigint;
                v_expired := v_expired + (v_step->>'expired')::bigint;
                v_expired_messages := v_expired_messages + (v_step->>'expired_messages')::bigint;
                v_evicted := v_evicted + (v_step->>'evicted')::bigint;
                v_traces := v_traces + coalesce((v_step->>'traces')::bigint, 0);
                COMMIT;
                EXIT WHEN (v_step->>'done')::bool;
                IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
                IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
            END LOOP;
            WHILE r.r_purge_due LOOP
                v_step := queen.log_txns_purge_step_v1(r.r_partition_id, r.r_purge_cutoff, p_max_rows);
                v_purged := v_purged + (v_step->>'deleted')::bigint;
                COMMIT;
                EXIT WHEN (v_step->>'done')::bool;
                IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
                IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
            END LOOP;
        END LOOP;
    END steps;
    p_report := pg_catalog.jsonb_build_object(
        'ran', true, 'partitions', v_partitions, 'segments', v_segments, 'messages', v_messages,
        'expiredSegments', v_expired, 'expiredMessages', v_expired_messages, 'evicted', v_evicted, 'waitEvicted', v_wait_evicted, 'traces', v_traces, 'sidecarRows', v_purged,
        'orphanRows', v_orphans, 'kvExpired', v_kv, 'streamOrphans', v_streams, 'more', v_more, 'interrupted', v_interrupted,
        'durationMs', round(extract(epoch FROM pg_catalog.clock_timestamp() - v_start) * 1000, 1));
    -- Into the sampled history (docs/observability.md): what retention removed is counted.
    PERFORM queen.history_lifecycle_v1(p_report);
END $$;

-- What is stored and why, per partition (a psql user's first look): segments and their
-- bytes, sidecar rows, the live offset range, the oldest live message's age.
CREATE VIEW queen.partition_storage AS
SELECT q.tenant_id, q.name AS queue, p.name AS partition, p.id AS partition_id,
       p.log_start, p.last_offset, p.txns_start,
       s.segments, s.segment_bytes, t.sidecar_rows, t.sidecar_bytes,
       s.oldest_at AS oldest_message_at,
       clock_timestamp() - s.oldest_at AS oldest_message_age,
       q.retention_seconds, q.completed_retention_seconds, q.dedup_window_seconds
  FROM queen.log_partitions p
  JOIN queen.queues q ON q.id = p.queue_id
  LEFT JOIN LATERAL (SELECT count(*) AS segments, COALESCE(sum(pg_column_size(blob)), 0) AS segment_bytes,
                            min(created_at) AS oldest_at
                       FROM queen.log_segments WHERE partition_id = p.id) s ON true
  LEFT JOIN LATERAL (SELECT count(*) AS sidecar_rows, COALESCE(sum(pg_column_size(hashes)), 0) AS sidecar_bytes
                       FROM queen.log_txns WHERE partition_id = p.id) t ON true;

-- Per consumer group and partition: how far behind it is, and what retention took from it.
CREATE VIEW queen.consumer_lag AS
SELECT q.tenant_id, q.name AS queue, p.name AS partition, c.partition_id, c.consumer_group,
       c.committed, p.last_offset, GREATEST(p.last_offset - c.committed, 0) AS lag,
       c.evicted, c.total_consumed, c.batch_retry_count,
       COALESCE(l.worker_id IS NOT NULL AND l.lease_expires_at > clock_timestamp(), false) AS leased
  FROM queen.log_consumers c
  LEFT JOIN queen.log_leases l ON l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id;

REVOKE ALL ON FUNCTION queen.log_retention_step_v1(uuid, timestamptz, timestamptz, int),
                       queen.log_orphans_step_v1(int),
                       queen.maintenance_plan_v1(),
                       queen.log_wait_eviction_step_v1(uuid) FROM PUBLIC;
REVOKE ALL ON PROCEDURE queen.run_maintenance(int, int, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.log_retention_step_v1(uuid, timestamptz, timestamptz, int),
                          queen.log_orphans_step_v1(int),
                          queen.maintenance_plan_v1(),
                          queen.log_wait_eviction_step_v1(uuid) TO queen_broker;
GRANT EXECUTE ON PROCEDURE queen.run_maintenance(int, int, jsonb) TO queen_broker;
GRANT SELECT ON queen.partition_storage, queen.consumer_lag TO queen_broker;

-- Hardening: bounds and races. ----------------------------------------------------

-- 12.6: the one name rule for SQL callers (src/names.rs); push, pop and configure refuse a
-- name over 255 bytes with 22023 instead of failing inside a btree index.
CREATE FUNCTION queen.check_name_v1(
    "p_kind" TEXT,
    "p_name" TEXT
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'check_name_v1_wrapper';
REVOKE ALL ON FUNCTION queen.check_name_v1(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.check_name_v1(text, text) TO queen_broker;

-- 12.8: the FK-less sidecar and DLQ rows are deleted after the cascade, which waits for a
-- concurrent DLQ filing; deleting them first left that filing's row behind.
-- Delete a queue with everything hanging off it (partitions, segments, cursors by FK;
-- the FK-less sidecar and DLQ rows explicitly). The FK-less rows go AFTER the cascade:
-- it waits for a DLQ filing that holds a cursor row, so a row that filing inserted is
-- committed and visible by then (deleting them first left such rows behind).
CREATE OR REPLACE FUNCTION queen.delete_queue_v1(p_queue text,
                                      p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id uuid;
    v_pids uuid[];
    v_pid uuid;
BEGIN
    SELECT id INTO v_id FROM queen.queues WHERE tenant_id = p_tenant AND name = p_queue FOR UPDATE;
    IF v_id IS NULL THEN
        RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', false);
    END IF;
    -- From the registry: on Citus a read of the distributed log_partitions here would
    -- forbid the write to the (reference) queues table in the same transaction.
    v_pids := ARRAY(SELECT id FROM queen.partition_names WHERE queue_id = v_id ORDER BY id);
    -- Lease rows first, in the global lock order, as every ack path does (lease row, then
    -- cursor row): the cascade below deletes cursor rows before lease rows, so without
    -- this a DLQ filing holding a lease row deadlocked against it (40P01). One statement
    -- per partition, in ascending id: on Citus a row lock names one partition.
    FOREACH v_pid IN ARRAY v_pids LOOP
        PERFORM 1 FROM queen.log_leases WHERE partition_id = v_pid
          ORDER BY consumer_group COLLATE "C" FOR UPDATE;
    END LOOP;
    DELETE FROM queen.queues WHERE id = v_id;
    DELETE FROM queen.log_txns WHERE partition_id = ANY(v_pids);
    DELETE FROM queen.log_dlq WHERE partition_id = ANY(v_pids);
    RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', true);
END $$;


-- Delivery features: delayedProcessing, nack with delay, DLQ redrive and delete, lag and queue
-- statistics. ---------------------------------------------------------------------------

-- delayedProcessing (seconds): no pop serves a message before created_at + delay.
ALTER TABLE queen.queues
    ADD COLUMN delayed_processing int NOT NULL DEFAULT 0 CHECK (delayed_processing >= 0);
-- A nack's delay, durable: no pop of the (partition, group) before this instant.
ALTER TABLE queen.log_consumers ADD COLUMN redeliver_at timestamptz;
-- Forward seeks' count of what they passed over (docs/decisions.md, "Seeking a consumer group").
ALTER TABLE queen.log_consumers ADD COLUMN seek_skipped bigint NOT NULL DEFAULT 0;
-- encryptionEnabled, enforced by push (docs/decisions.md, "Payload encryption").
ALTER TABLE queen.queues ADD COLUMN encryption_enabled bool NOT NULL DEFAULT false;
-- Queen's further options, each enforced (docs/decisions.md, "Queue options").
ALTER TABLE queen.queues
    ADD COLUMN priority int NOT NULL DEFAULT 0 CHECK (priority >= 0),
    ADD COLUMN retry_delay int NOT NULL DEFAULT 0 CHECK (retry_delay >= 0),
    ADD COLUMN max_size int NOT NULL DEFAULT 0 CHECK (max_size >= 0),
    ADD COLUMN ttl int NOT NULL DEFAULT 0 CHECK (ttl >= 0),
    ADD COLUMN window_buffer int NOT NULL DEFAULT 0 CHECK (window_buffer >= 0),
    ADD COLUMN max_wait_time_seconds int NOT NULL DEFAULT 0 CHECK (max_wait_time_seconds >= 0);

-- The partitions where maxWaitTimeSeconds has work (docs/decisions.md, "Queue options"):
-- of a queue with the option set, the slowest group's next message (or, for a group
-- registered on the queue without a cursor here, the log start's) is older than the
-- cutoff. One index probe per such partition; queues without the option cost nothing.
CREATE FUNCTION queen.wait_eviction_plan_v1()
RETURNS TABLE(r_partition_id uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.id
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id,
           LATERAL (SELECT LEAST((SELECT min(c.committed) FROM queen.log_consumers c
                                   WHERE c.partition_id = p.id),
                                 CASE WHEN EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                                                    WHERE m.queue_id = q.id
                                                      AND NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                                                       WHERE c.partition_id = p.id
                                                                         AND c.consumer_group = m.consumer_group))
                                      THEN p.log_start - 1 END) AS slowest) s
     WHERE q.max_wait_time_seconds > 0 AND s.slowest < p.last_offset
       AND (SELECT g.created_at FROM queen.log_segments g
             WHERE g.partition_id = p.id AND g.end_offset > s.slowest
             ORDER BY g.base_offset LIMIT 1)
           < clock_timestamp() - make_interval(secs => q.max_wait_time_seconds)
     ORDER BY p.id
$$;
REVOKE ALL ON FUNCTION queen.wait_eviction_plan_v1() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.wait_eviction_plan_v1() TO queen_broker;

-- UTC with milliseconds: the timestamp form of Queen's answers (its routes' to_char), as
-- the broker's own HTTP timestamps (broker/src/util.rs iso_ms).
CREATE FUNCTION queen.iso_ms(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;
REVOKE ALL ON FUNCTION queen.iso_ms(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.iso_ms(timestamptz) TO queen_broker;

-- Configure reads delayedProcessing (sql/broker_api.sql).
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(p_queue text, p_namespace text, p_task text,
                                         p_options jsonb,
                                         p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o jsonb := COALESCE(p_options, '{}'::jsonb);
    v_queue queen.queues;
    v_pid uuid;
BEGIN
    IF p_queue IS NULL OR btrim(p_queue) = '' THEN
        RAISE EXCEPTION 'queue name must be a non-empty string' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The one name rule (queen_log::names): at most 255 bytes, 22023 otherwise.
    PERFORM queen.check_name_v1('queue', p_queue);
    IF jsonb_typeof(o) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Every option is enforced or refused (queen_log::options, the broker's rule too).
    o := queen.check_queue_options_v1(o);
    INSERT INTO queen.queues AS q (name, tenant_id, namespace, task, lease_time, retry_limit,
                                   dead_letter_queue, dlq_after_max_retries, dedup_window_seconds,
                                   retention_seconds, completed_retention_seconds, delayed_processing,
                                   encryption_enabled, priority, retry_delay, max_size, ttl,
                                   window_buffer, max_wait_time_seconds, options)
    VALUES (p_queue, COALESCE(p_tenant, '00000000-0000-0000-0000-000000000001'),
            COALESCE(p_namespace, CASE WHEN strpos(p_queue, '.') > 0 THEN split_part(p_queue, '.', 1) ELSE p_queue END),
            COALESCE(p_task, CASE WHEN strpos(p_queue, '.') > 0 THEN substr(p_queue, strpos(p_queue, '.') + 1) ELSE '' END),
            COALESCE((o->>'leaseTime')::int, 60), COALESCE((o->>'retryLimit')::int, 3),
            COALESCE((o->>'deadLetterQueue')::bool, true), COALESCE((o->>'dlqAfterMaxRetries')::bool, true),
            COALESCE((o->>'dedupWindowSeconds')::int, 3600), COALESCE((o->>'retentionSeconds')::int, 0),
            COALESCE((o->>'completedRetentionSeconds')::int, 0),
            COALESCE((o->>'delayedProcessing')::int, 0),
            COALESCE((o->>'encryptionEnabled')::bool, false),
            COALESCE((o->>'priority')::int, 0), COALESCE((o->>'retryDelay')::int, 0),
            COALESCE((o->>'maxSize')::int, 0), COALESCE((o->>'ttl')::int, 0),
            COALESCE((o->>'windowBuffer')::int, 0), COALESCE((o->>'maxWaitTimeSeconds')::int, 0), o)
    ON CONFLICT (tenant_id, name) DO UPDATE SET
        namespace = COALESCE(p_namespace, q.namespace),
        task = COALESCE(p_task, q.task),
        lease_time = COALESCE((o->>'leaseTime')::int, q.lease_time),
        retry_limit = COALESCE((o->>'retryLimit')::int, q.retry_limit),
        dead_letter_queue = COALESCE((o->>'deadLetterQueue')::bool, q.dead_letter_queue),
        dlq_after_max_retries = COALESCE((o->>'dlqAfterMaxRetries')::bool, q.dlq_after_max_retries),
        dedup_window_seconds = COALESCE((o->>'dedupWindowSeconds')::int, q.dedup_window_seconds),
        retention_seconds = COALESCE((o->>'retentionSeconds')::int, q.retention_seconds),
        completed_retention_seconds = COALESCE((o->>'completedRetentionSeconds')::int, q.completed_retention_seconds),
        delayed_processing = COALESCE((o->>'delayedProcessing')::int, q.delayed_processing),
        encryption_enabled = COALESCE((o->>'encryptionEnabled')::bool, q.encryption_enabled),
        priority = COALESCE((o->>'priority')::int, q.priority),
        retry_delay = COALESCE((o->>'retryDelay')::int, q.retry_delay),
        max_size = COALESCE((o->>'maxSize')::int, q.max_size),
        ttl = COALESCE((o->>'ttl')::int, q.ttl),
        window_buffer = COALESCE((o->>'windowBuffer')::int, q.window_buffer),
        max_wait_time_seconds = COALESCE((o->>'maxWaitTimeSeconds')::int, q.max_wait_time_seconds),
        options = q.options || o
    RETURNING * INTO v_queue;
    v_pid := queen.provision_partition(v_queue.id, 'Default');
    -- The queue's effective options after this call, every key of Queen's answer (its
    -- 012_configure.sql), so a client reads back what is enforced: ttl 0 where Queen
    -- echoes its default 3600 (docs/decisions.md, "Queue options").
    RETURN jsonb_build_object('configured', true, 'queueId', v_queue.id, 'partitionId', v_pid,
                              'queue', v_queue.name,
                              'namespace', v_queue.namespace, 'task', v_queue.task,
                              'leaseTime', v_queue.lease_time, 'retryLimit', v_queue.retry_limit,
                              'options', jsonb_build_object(
        'priority', v_queue.priority, 'leaseTime', v_queue.lease_time,
        'retryLimit', v_queue.retry_limit, 'retryDelay', v_queue.retry_delay,
        'maxSize', v_queue.max_size, 'ttl', v_queue.ttl,
        'deadLetterQueue', v_queue.dead_letter_queue,
        'dlqAfterMaxRetries', v_queue.dlq_after_max_retries,
        'delayedProcessing', v_queue.delayed_processing, 'windowBuffer', v_queue.window_buffer,
        'retentionSeconds', v_queue.retention_seconds,
        'completedRetentionSeconds', v_queue.completed_retention_seconds,
        'retentionEnabled', COALESCE(v_queue.retention_seconds, 0) > 0
                            OR COALESCE(v_queue.completed_retention_seconds, 0) > 0,
        'encryptionEnabled', v_queue.encryption_enabled,
        'maxWaitTimeSeconds', v_queue.max_wait_time_seconds,
        'dedupWindowSeconds', v_queue.dedup_window_seconds));
EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range OR check_violation THEN
    RAISE EXCEPTION 'invalid option value: %', SQLERRM USING ERRCODE = 'invalid_parameter_value';
END $$;

-- log_ack_by_hash_v1 with a nack delay (src/ack.rs).
CREATE FUNCTION queen.log_ack_by_hash_delay_v1(
    "p_partition_id" uuid,
    "p_group" TEXT,
    "p_worker" TEXT,
    "p_hashes" bytea[],
    "p_statuses" TEXT[],
    "p_delay_seconds" INT
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'log_ack_by_hash_delay_v1_wrapper';

-- DLQ rows back into their partitions (src/redrive.rs).
CREATE FUNCTION queen.dlq_redrive_v1(
    "p_ids" uuid[],
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'dlq_redrive_v1_wrapper';

-- Redrive selection, DLQ deletion and statistics (sql/admin.sql).
-- Redrive up to p_limit DLQ rows of a queue (NULL group = every group), oldest failure
-- first, through queen.dlq_redrive_v1.
CREATE FUNCTION queen.dlq_redrive_queue_v1(p_queue text, p_group text, p_limit int,
                                           p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL OR p_limit IS NULL THEN
        RAISE EXCEPTION 'dlq_redrive_queue_v1: p_queue and p_limit must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_limit < 1 THEN
        RAISE EXCEPTION 'dlq_redrive_queue_v1: p_limit must be >= 1, got %', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN queen.dlq_redrive_v1(ARRAY(
        SELECT d.id FROM queen.log_dlq d
          JOIN queen.log_partitions p ON p.id = d.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.tenant_id = p_tenant AND q.name = p_queue
           AND (p_group IS NULL OR d.consumer_group = p_group)
         ORDER BY d.failed_at, d.id LIMIT p_limit), p_tenant);
END $$;

-- The DLQ rows of one message address (partition id, transactionId), newest failure
-- first: one per consumer group that dead-lettered it (Queen's /messages/:pid/:txn).
CREATE FUNCTION queen.dlq_ids_at_v1(p_partition_id uuid, p_transaction_id text,
                                    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS uuid[]
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ARRAY(
        SELECT d.id FROM queen.log_dlq d
          JOIN queen.log_partitions p ON p.id = d.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE d.partition_id = p_partition_id AND p.id = p_partition_id
           AND d.transaction_id = p_transaction_id AND q.tenant_id = p_tenant
         ORDER BY d.failed_at DESC, d.id);
END $$;

-- Delete the tenant's DLQ rows p_ids; returns {"deleted": n, "ids": [...]}.
CREATE FUNCTION queen.dlq_delete_v1(p_ids uuid[],
                                    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v jsonb;
BEGIN
    WITH gone AS (
        DELETE FROM queen.log_dlq d
         USING queen.log_partitions p, queen.queues q
         WHERE d.id = ANY(p_ids) AND p.id = d.partition_id AND q.id = p.queue_id
           AND q.tenant_id = p_tenant
        RETURNING d.id)
    SELECT jsonb_build_object('deleted', count(*),
                              'ids', COALESCE(jsonb_agg(id ORDER BY id), '[]'::jsonb))
      INTO v FROM gone;
    RETURN v;
END $$;

-- Delete up to p_limit DLQ rows of a queue (NULL group = every group; NULL limit = all),
-- oldest failure first.
CREATE FUNCTION queen.dlq_delete_queue_v1(p_queue text, p_group text, p_limit int,
                                          p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'dlq_delete_queue_v1: p_queue must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_limit < 1 THEN
        RAISE EXCEPTION 'dlq_delete_queue_v1: p_limit must be >= 1, got %', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN queen.dlq_delete_v1(ARRAY(
        SELECT d.id FROM queen.log_dlq d
          JOIN queen.log_partitions p ON p.id = d.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.tenant_id = p_tenant AND q.name = p_queue
           AND (p_group IS NULL OR d.consumer_group = p_group)
         ORDER BY d.failed_at, d.id LIMIT p_limit), p_tenant);
END $$;

-- The tenant's queues (all, or one by name) with their settings, newest first. A NULL
-- tenant lists every tenant's (the operator's view: the broker's /metrics); the broker
-- passes the caller's tenant on every API route.
CREATE FUNCTION queen.queue_list_v1(p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001',
                                    p_queue text DEFAULT NULL)
RETURNS TABLE(r_tenant_id uuid, r_queue_id uuid, r_queue text, r_namespace text, r_task text,
              r_created_at timestamptz,
              r_lease_time int, r_retry_limit int, r_dead_letter_queue bool,
              r_dlq_after_max_retries bool, r_delayed_processing int, r_retention_seconds int,
              r_completed_retention_seconds int, r_dedup_window_seconds int, r_options jsonb)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.tenant_id, q.id, q.name, q.namespace, q.task, q.created_at, q.lease_time, q.retry_limit,
           q.dead_letter_queue, q.dlq_after_max_retries, q.delayed_processing,
           q.retention_seconds, q.completed_retention_seconds, q.dedup_window_seconds, q.options
      FROM queen.queues q
     WHERE (p_tenant IS NULL OR q.tenant_id = p_tenant) AND (p_queue IS NULL OR q.name = p_queue)
     ORDER BY q.created_at DESC, q.name
$$;

-- Lag and queue statistics: one row per (partition, consumer group), and one row with a
-- NULL group for a partition no group has read yet; a NULL tenant as for queue_list_v1. Read from the partition rows
-- (last_offset, log_start), the cursor and lease rows, the DLQ rows, and one index probe
-- per lagging cursor for the created_at of its first unconsumed message: no segment is
-- scanned, so the cost grows with partitions and groups, never with messages.
--   r_lag: messages still to deliver, last_offset - max(committed, log_start - 1);
--   r_oldest_unconsumed_at / _age (seconds): the first message the group has not
--     consumed (for a partition without cursors: its oldest message);
--   r_leased / r_leased_messages / r_worker: a live lease, its span and its leaseId;
--   r_retries: retry budget spent on the batch at the cursor; r_dlq: the group's DLQ rows;
--   r_redeliver_at: a nack's delay still pending (NULL once it has passed);
--   r_skipped: messages forward seeks moved the cursor over unconsumed.
-- Rows come in no particular order (sorting 10,000 partitions' rows by name cost a third
-- of the call): ORDER BY what you need.
CREATE FUNCTION queen.queue_stats_v1(p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001',
                                     p_queue text DEFAULT NULL)
RETURNS TABLE(r_tenant_id uuid, r_queue_id uuid, r_queue text, r_partition_id uuid, r_partition text,
              r_partition_created_at timestamptz, r_log_start bigint, r_last_offset bigint,
              r_last_write_at timestamptz, r_consumer_group text, r_committed bigint, r_lag bigint,
              r_oldest_unconsumed_at timestamptz, r_oldest_unconsumed_age double precision,
              r_leased bool, r_leased_messages bigint, r_worker text, r_lease_acquired_at timestamptz,
              r_retries int, r_total_consumed bigint, r_evicted bigint, r_redeliver_at timestamptz,
              r_dlq bigint, r_skipped bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT k.tenant_id, k.queue_id, k.queue, k.id, k.name, k.created_at, k.log_start, k.last_offset,
           k.last_write_at, k.consumer_group, k.committed,
           CASE WHEN k.consumer_group IS NOT NULL THEN GREATEST(k.last_offset - k.consumed_to, 0) END,
           o.created_at, extract(epoch FROM v_now - o.created_at)::float8,
           k.live, CASE WHEN k.live THEN GREATEST(k.batch_end - k.committed, 0) ELSE 0 END,
           CASE WHEN k.live THEN k.worker_id END, k.lease_acquired_at,
           k.batch_retry_count, k.total_consumed, k.evicted,
           CASE WHEN k.redeliver_at > v_now THEN k.redeliver_at END,
           COALESCE(d.n, 0), k.seek_skipped
      FROM (SELECT q.tenant_id, q.id AS queue_id, q.name::text AS queue, p.id, p.name, p.created_at,
                   p.log_start, p.last_offset, p.last_write_at,
                   c.consumer_group, c.committed, c.batch_retry_count, c.total_consumed,
                   c.evicted, c.redeliver_at, c.seek_skipped, l.batch_end, l.worker_id, l.lease_acquired_at,
                   COALESCE(l.worker_id IS NOT NULL AND l.lease_expires_at > v_now, false) AS live,
                   GREATEST(COALESCE(c.committed, -1), p.log_start - 1) AS consumed_to
              FROM queen.queues q
              JOIN queen.log_partitions p ON p.queue_id = q.id
              LEFT JOIN queen.log_consumers c ON c.partition_id = p.id
              LEFT JOIN queen.log_leases l
                ON l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group
             WHERE (p_tenant IS NULL OR q.tenant_id = p_tenant) AND (p_queue IS NULL OR q.name = p_queue)) k
      LEFT JOIN LATERAL (
          SELECT count(*) AS n FROM queen.log_dlq d
           WHERE d.partition_id = k.id AND d.consumer_group = k.consumer_group) d ON true
      LEFT JOIN LATERAL (
          SELECT s.created_at FROM queen.log_segments s
           WHERE k.last_offset > k.consumed_to
             AND s.partition_id = k.id AND s.base_offset <= k.consumed_to + 1
           ORDER BY s.base_offset DESC LIMIT 1) o ON true;
END $$;

REVOKE ALL ON FUNCTION queen.log_ack_by_hash_delay_v1(uuid, text, text, bytea[], text[], int),
                       queen.dlq_redrive_v1(uuid[], uuid),
                       queen.dlq_redrive_queue_v1(text, text, int, uuid),
                       queen.dlq_ids_at_v1(uuid, text, uuid),
                       queen.dlq_delete_v1(uuid[], uuid),
                       queen.dlq_delete_queue_v1(text, text, int, uuid),
                       queen.queue_list_v1(uuid, text),
                       queen.queue_stats_v1(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.log_ack_by_hash_delay_v1(uuid, text, text, bytea[], text[], int),
                          queen.dlq_redrive_v1(uuid[], uuid),
                          queen.dlq_redrive_queue_v1(text, text, int, uuid),
                          queen.dlq_ids_at_v1(uuid, text, uuid),
                          queen.dlq_delete_v1(uuid[], uuid),
                          queen.dlq_delete_queue_v1(text, text, int, uuid),
                          queen.queue_list_v1(uuid, text),
                          queen.queue_stats_v1(uuid, text) TO queen_broker;

-- The broker reads no table (docs/security.md): the dedup cache's load is a function too. 

-- The dedup window of a partition as the broker's watermark cache loads it, in one
-- snapshot: the partition's last offset, its queue's window now, and the sidecar rows
-- inside that window, oldest first (one row with NULL base when there are none; no row
-- when the partition does not exist). PL/pgSQL with the instant as a value: Citus plans
-- neither a join with parameters inside a LANGUAGE sql function nor a volatile call on
-- its rows. On Citus it runs on the partition's worker (queen.distribute()).
CREATE FUNCTION queen.dedup_window_v1(p_partition_id uuid)
RETURNS TABLE(r_last_offset bigint, r_window int, r_base bigint, r_hashes bytea)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    RETURN QUERY
    SELECT p.last_offset, q.dedup_window_seconds, t.base_offset, t.hashes
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
      LEFT JOIN queen.log_txns t ON t.partition_id = p_partition_id
           AND t.created_at >= v_now - make_interval(secs => q.dedup_window_seconds)
     WHERE p.id = p_partition_id
     ORDER BY t.base_offset;
END $$;
REVOKE ALL ON FUNCTION queen.dedup_window_v1(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.dedup_window_v1(uuid) TO queen_broker;

-- The broker role reads no table (docs/security.md): 0.1.0 granted SELECT on every table.
REVOKE SELECT ON ALL TABLES IN SCHEMA queen FROM queen_broker;
GRANT SELECT ON queen.partition_storage, queen.consumer_lag TO queen_broker;

-- Scale-out on Citus (docs/citus.md): partition creation through the registry, an id-addressed
-- partition pop, the orphan sweep's per-table scan (a per-shard one on Citus), and the
-- distribution step. -------------------------------------------------------------------
-- Create the partition p_name of queue p_queue_id unless it exists; returns its id. The
-- registry row first (its UNIQUE (queue_id, name) settles a race between two creators:
-- the second waits for the first and then finds its row, read by a statement of its own
-- so that it sees what the first committed), then the log_partitions row with that id.
-- The caller holds the queue row (FOR KEY SHARE) so a concurrent DELETE cannot interfere.
CREATE FUNCTION queen.provision_partition(p_queue_id uuid, p_name text) RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id uuid;
BEGIN
    INSERT INTO queen.partition_names (queue_id, name) VALUES (p_queue_id, p_name)
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT id INTO v_id FROM queen.partition_names WHERE queue_id = p_queue_id AND name = p_name;
    IF v_id IS NOT NULL THEN
        INSERT INTO queen.log_partitions (id, queue_id, name) VALUES (v_id, p_queue_id, p_name)
        ON CONFLICT (id) DO NOTHING;
    END IF;
    RETURN v_id;
END $$;

-- The DLQ listing in PL/pgSQL, the page first (sql/broker_api.sql).
CREATE OR REPLACE FUNCTION queen.dlq_list_v1(p_queue text, p_group text, p_limit int, p_offset int,
                                  p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_total bigint;
    v_page jsonb;
BEGIN
    SELECT count(*) INTO v_total
      FROM queen.log_dlq d
      JOIN queen.log_partitions p ON p.id = d.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.tenant_id = p_tenant AND (p_queue IS NULL OR q.name = p_queue)
       AND (p_group IS NULL OR d.consumer_group = p_group);
    SELECT COALESCE(jsonb_agg(jsonb_build_object(
            'id', COALESCE(pg.message_id, pg.id), 'dlqId', pg.id,
            'transactionId', pg.transaction_id, 'partitionId', pg.partition_id,
            'queue', pg.queue, 'partition', pg.partition, 'consumerGroup', pg.consumer_group,
            'offset', pg."offset", 'errorMessage', pg.error, 'retryCount', pg.retry_count,
            'data', pg.payload,
            'createdAt', queen.iso_ms((SELECT s.r_created
                                         FROM queen.log_segment_at_v1(pg.partition_id, pg."offset") s)),
            'failedAt', queen.iso_ms(pg.failed_at))
            ORDER BY pg.failed_at DESC, pg.id), '[]'::jsonb) INTO v_page
      FROM (SELECT d.*, q.name AS queue, p.name AS partition
              FROM queen.log_dlq d
              JOIN queen.log_partitions p ON p.id = d.partition_id
              JOIN queen.queues q ON q.id = p.queue_id
             WHERE q.tenant_id = p_tenant AND (p_queue IS NULL OR q.name = p_queue)
               AND (p_group IS NULL OR d.consumer_group = p_group)
             ORDER BY d.failed_at DESC, d.id
             LIMIT GREATEST(COALESCE(p_limit, 100), 0) OFFSET GREATEST(COALESCE(p_offset, 0), 0)) pg;
    RETURN jsonb_build_object('total', v_total, 'messages', v_page);
END $$;

-- Where a new cursor starts, in PL/pgSQL (sql/functions.sql).
CREATE OR REPLACE FUNCTION queen.seed_offset(p_pid uuid, p_mode text, p_ts timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_start bigint;
    v_last bigint;
    v_first bigint;
BEGIN
    SELECT p.log_start, p.last_offset INTO v_start, v_last FROM queen.log_partitions p WHERE p.id = p_pid;
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF p_mode = 'all' OR p_mode IS NULL THEN
        RETURN v_start - 1;
    ELSIF p_ts IS NULL THEN
        RETURN v_last;
    END IF;
    SELECT s.base_offset - 1 INTO v_first FROM queen.log_segments s
     WHERE s.partition_id = p_pid AND s.created_at >= p_ts
     ORDER BY s.base_offset LIMIT 1;
    RETURN COALESCE(v_first, v_last);
END $$;

-- Ownership through the registry (sql/broker_api.sql).
CREATE OR REPLACE FUNCTION queen.owned_partitions_v1(p_pids uuid[], p_tenant uuid)
RETURNS SETOF uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT n.id FROM queen.partition_names n JOIN queen.queues q ON q.id = n.queue_id
     WHERE n.id = ANY(p_pids) AND q.tenant_id = p_tenant;
END $$;

-- Whether a table is distributed by Citus in this database (false without Citus).
CREATE FUNCTION queen.is_distributed(p_table regclass) RETURNS bool
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v bool;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
        INTO v USING p_table;
    RETURN v;
END $$;

-- The first p_limit distinct partition ids of a per-partition table above p_from, in
-- order: a loose index scan of its primary key (a recursive CTE, one probe per distinct
-- id), so the cost grows with partitions, not rows. Citus refuses a recursive CTE over a
-- distributed table, so there the same scan runs on every shard (run_command_on_shards,
-- in parallel) and the lists are merged.
CREATE FUNCTION queen.partition_ids_after(p_table regclass, p_from uuid, p_limit int) RETURNS uuid[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_scan text := format($q$
        WITH RECURSIVE t(id) AS (
            (SELECT partition_id FROM %%1$s WHERE partition_id > %1$L ORDER BY partition_id LIMIT 1)
            UNION ALL
            SELECT (SELECT x.partition_id FROM %%1$s x WHERE x.partition_id > t.id
                     ORDER BY x.partition_id LIMIT 1)
              FROM t WHERE t.id IS NOT NULL)
        SELECT COALESCE(array_agg(id ORDER BY id), '{}')::text
          FROM (SELECT id FROM t WHERE id IS NOT NULL LIMIT %2$s) a$q$, p_from, p_limit);
    v_text text;
    v_ids uuid[];
BEGIN
    IF NOT queen.is_distributed(p_table) THEN
        EXECUTE format(v_scan, p_table) INTO v_text;
        RETURN v_text::uuid[];
    END IF;
    EXECUTE $q$SELECT array_agg(r.result ORDER BY r.shardid) FILTER (WHERE NOT r.success),
                      ARRAY(SELECT DISTINCT u FROM unnest(array_agg(r.result) FILTER (WHERE r.success)) s,
                                   unnest(s::uuid[]) u ORDER BY u LIMIT $2)
                 FROM pg_catalog.run_command_on_shards($1, $3) r$q$
        INTO v_text, v_ids USING p_table, p_limit, v_scan;
    IF v_text IS NOT NULL THEN
        RAISE EXCEPTION 'partition_ids_after(%): a shard scan failed: %', p_table, v_text;
    END IF;
    RETURN v_ids;
END $$;

-- A partition pop addressed by partition id (src/broker_api.rs).
CREATE FUNCTION queen.log_pop_at_v1(
    "p_partition_id" uuid,
    "p_group" TEXT,
    "p_budget" INT,
    "p_lease_seconds" INT,
    "p_worker" TEXT,
    "p_auto_ack" bool DEFAULT false,
    "p_sub_mode" TEXT DEFAULT 'all',
    "p_sub_from" TEXT DEFAULT '',
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
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
AS 'queen_ack-0.2.0', 'log_pop_at_v1_wrapper';

-- A push addressed by partition id (src/push.rs).
CREATE FUNCTION queen.log_push_at_v1(
    "p_partition_id" uuid,
    "p_msg_count" INT,
    "p_hashes" bytea,
    "p_verified" bigint,
    "p_blob" bytea,
    "p_window" INT DEFAULT NULL,
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'log_push_at_v1_wrapper';

-- The distribution step (sql/citus.sql).
-- The per-partition functions and the argument naming their partition.
CREATE FUNCTION queen.distributed_functions()
RETURNS TABLE(r_function regprocedure, r_argument text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f::regprocedure, a FROM (VALUES
        ('queen.log_ack_by_hash_v1(uuid, text, text, bytea[], text[])', 'p_partition_id'),
        ('queen.log_ack_by_hash_delay_v1(uuid, text, text, bytea[], text[], int)', 'p_partition_id'),
        ('queen.log_ack_at_v1(uuid, text, text, bigint, bool, int)', 'p_partition_id'),
        ('queen.log_dlq_head_v1(uuid, text, text, bigint, uuid, text, jsonb, text)', 'p_partition_id'),
        ('queen.log_pop_at_v1(uuid, text, int, int, text, bool, text, text, uuid)', 'p_partition_id'),
        ('queen.log_push_at_v1(uuid, int, bytea, bigint, bytea, int, uuid)', 'p_partition_id'),
        ('queen.ack(uuid, text, text[], text[], text)', 'p_partition_id'),
        ('queen.cursor_worker_v1(uuid, text)', 'p_partition_id'),
        ('queen.dedup_window_v1(uuid)', 'p_partition_id'),
        ('queen.dlq_ids_at_v1(uuid, text, uuid)', 'p_partition_id'),
        ('queen.log_segment_at_v1(uuid, bigint)', 'p_pid'),
        ('queen.log_retention_step_v1(uuid, timestamptz, timestamptz, int)', 'p_pid'),
        ('queen.log_txns_purge_step_v1(uuid, timestamptz, int)', 'p_pid')) AS t(f, a)
$$;

-- Distribute this database over the Citus cluster it is the coordinator of (run it once,
-- as a superuser, on the coordinator, after CREATE EXTENSION queen_ack and citus_add_node
-- for the workers). Idempotent: what is already distributed is left alone, so it is also
-- the step to run after an upgrade that added a function. Rows already there move into
-- the shards. p_shard_count (default: citus.shard_count) is the shard count of the
-- partition tables. Returns what it did.
CREATE FUNCTION queen.distribute(p_shard_count int DEFAULT NULL) RETURNS jsonb
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
    -- delegates such a nested call only when told to.
    v_forced regprocedure[] := ARRAY['queen.fetch_partition_v1(uuid, bigint, bigint, bool)'::regprocedure];
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

REVOKE ALL ON FUNCTION queen.provision_partition(uuid, text),
                       queen.is_distributed(regclass),
                       queen.partition_ids_after(regclass, uuid, int),
                       queen.log_pop_at_v1(uuid, text, int, int, text, bool, text, text, uuid),
                       queen.log_push_at_v1(uuid, int, bytea, bigint, bytea, int, uuid),
                       queen.distributed_functions(),
                       queen.distribute(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.provision_partition(uuid, text),
                          queen.is_distributed(regclass),
                          queen.partition_ids_after(regclass, uuid, int),
                          queen.log_pop_at_v1(uuid, text, int, int, text, bool, text, text, uuid),
                          queen.log_push_at_v1(uuid, int, bytea, bigint, bytea, int, uuid),
                          queen.distributed_functions() TO queen_broker;

-- ---------------------------------------------------------------------------------
-- DLQ filed in the ack's own call (src/ack.rs, src/native.rs; docs/decisions.md,
-- "Dead-letter filing").
-- log_ack_by_hash_v2: the by-hash ack whose dlq verdict files the DLQ row in the same
-- statement, its error text from p_errors; v1 and delay_v1 keep their hand-off answer.
CREATE FUNCTION queen.log_ack_by_hash_v2(
    "p_partition_id" uuid,
    "p_group" TEXT,
    "p_worker" TEXT,
    "p_hashes" bytea[],
    "p_statuses" TEXT[] DEFAULT NULL,
    "p_errors" TEXT[] DEFAULT NULL,
    "p_delay_seconds" INT DEFAULT 0
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'log_ack_by_hash_v2_wrapper';

-- queen.ack gains p_errors (trailing, default NULL: every existing call still works) and
-- files a dlq verdict in the same call.
DROP FUNCTION queen.ack(uuid, text, text[], text[], text);
CREATE FUNCTION queen.ack(
    "p_partition_id" uuid,
    "p_lease_id" TEXT,
    "p_transaction_ids" TEXT[],
    "p_statuses" TEXT[] DEFAULT NULL,
    "p_group" TEXT DEFAULT '__QUEUE_MODE__',
    "p_errors" TEXT[] DEFAULT NULL
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'ack_wrapper';

-- Both new signatures in the Citus distribution list (sql/citus.sql).
CREATE OR REPLACE FUNCTION queen.distributed_functions()
RETURNS TABLE(r_function regprocedure, r_argument text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f::regprocedure, a FROM (VALUES
        ('queen.log_ack_by_hash_v1(uuid, text, text, bytea[], text[])', 'p_partition_id'),
        ('queen.log_ack_by_hash_delay_v1(uuid, text, text, bytea[], text[], int)', 'p_partition_id'),
        ('queen.log_ack_by_hash_v2(uuid, text, text, bytea[], text[], text[], int)', 'p_partition_id'),
        ('queen.log_ack_at_v1(uuid, text, text, bigint, bool, int)', 'p_partition_id'),
        ('queen.log_dlq_head_v1(uuid, text, text, bigint, uuid, text, jsonb, text)', 'p_partition_id'),
        ('queen.log_pop_at_v1(uuid, text, int, int, text, bool, text, text, uuid)', 'p_partition_id'),
        ('queen.log_push_at_v1(uuid, int, bytea, bigint, bytea, int, uuid)', 'p_partition_id'),
        ('queen.ack(uuid, text, text[], text[], text, text[])', 'p_partition_id'),
        ('queen.cursor_worker_v1(uuid, text)', 'p_partition_id'),
        ('queen.dedup_window_v1(uuid)', 'p_partition_id'),
        ('queen.dlq_ids_at_v1(uuid, text, uuid)', 'p_partition_id'),
        ('queen.log_segment_at_v1(uuid, bigint)', 'p_pid'),
        ('queen.log_retention_step_v1(uuid, timestamptz, timestamptz, int)', 'p_pid'),
        ('queen.log_txns_purge_step_v1(uuid, timestamptz, int)', 'p_pid'),
        ('queen.fetch_partition_v1(uuid, bigint, bigint, bool)', 'p_partition_id')) AS t(f, a)
$$;

REVOKE ALL ON FUNCTION queen.log_ack_by_hash_v2(uuid, text, text, bytea[], text[], text[], int),
                       queen.ack(uuid, text, text[], text[], text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.log_ack_by_hash_v2(uuid, text, text, bytea[], text[], text[], int),
                          queen.ack(uuid, text, text[], text[], text, text[]) TO queen_broker;


-- One pop request, one lease rule, one renewal, one DLQ selection. --------------------

-- The lease a pop grants when asked for none, by the one rule (queen_log::conventions,
-- src/broker_api.rs); queue_info_v1 reports it, so leaseTime now floors at 1 as pops do.
CREATE FUNCTION queen.effective_lease_time(
    "p_lease_time" INT
) RETURNS INT
IMMUTABLE PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'effective_lease_time_wrapper';
REVOKE ALL ON FUNCTION queen.effective_lease_time(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.effective_lease_time(int) TO queen_broker;

CREATE OR REPLACE FUNCTION queen.queue_info_v1(p_queue text,
                                    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('queueId', q.id, 'leaseTime', queen.effective_lease_time(q.lease_time),
                              'retryLimit', COALESCE(q.retry_limit, 3))
      FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue
$$;

-- The tenant-gated renewal renews through log_renew_lease_v1 (one renewal body).
CREATE OR REPLACE FUNCTION queen.log_renew_lease_tenant_v1(p_worker text, p_seconds int, p_tenant uuid)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF EXISTS (SELECT 1 FROM queen.log_leases l
                 JOIN queen.partition_names n ON n.id = l.partition_id
                 JOIN queen.queues q ON q.id = n.queue_id
                WHERE l.worker_id = p_worker AND l.lease_expires_at > v_now
                  AND q.tenant_id = p_tenant) THEN
        RETURN queen.log_renew_lease_v1(p_worker, p_seconds);
    END IF;
    RETURN jsonb_build_object('renewed', 0, 'expiresAt', NULL::text);
END $$;

-- One selection for the by-queue DLQ redrive and delete.
CREATE FUNCTION queen.dlq_queue_ids(p_queue text, p_group text, p_limit int, p_tenant uuid)
RETURNS uuid[]
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN ARRAY(
        SELECT d.id FROM queen.log_dlq d
          JOIN queen.log_partitions p ON p.id = d.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE q.tenant_id = p_tenant AND q.name = p_queue
           AND (p_group IS NULL OR d.consumer_group = p_group)
         ORDER BY d.failed_at, d.id LIMIT p_limit);
END $$;
REVOKE ALL ON FUNCTION queen.dlq_queue_ids(text, text, int, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.dlq_queue_ids(text, text, int, uuid) TO queen_broker;

CREATE OR REPLACE FUNCTION queen.dlq_redrive_queue_v1(p_queue text, p_group text, p_limit int,
                                           p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL OR p_limit IS NULL THEN
        RAISE EXCEPTION 'dlq_redrive_queue_v1: p_queue and p_limit must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_limit < 1 THEN
        RAISE EXCEPTION 'dlq_redrive_queue_v1: p_limit must be >= 1, got %', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN queen.dlq_redrive_v1(queen.dlq_queue_ids(p_queue, p_group, p_limit, p_tenant), p_tenant);
END $$;

CREATE OR REPLACE FUNCTION queen.dlq_delete_queue_v1(p_queue text, p_group text, p_limit int,
                                          p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'dlq_delete_queue_v1: p_queue must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_limit < 1 THEN
        RAISE EXCEPTION 'dlq_delete_queue_v1: p_limit must be >= 1, got %', p_limit
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN queen.dlq_delete_v1(queen.dlq_queue_ids(p_queue, p_group, p_limit, p_tenant), p_tenant);
END $$;


-- Hardening (one lock order with queue deletion; retention counts every eviction): ----
-- delete_queue_v1 locks the partition rows in ascending id (after the lease rows) before
-- the cascade.
-- Delete a queue with everything hanging off it (partitions, segments, cursors by FK;
-- the FK-less sidecar and DLQ rows explicitly). Locks in the one lock order of every
-- statement that waits for more than one of these rows (docs/decisions.md, "Lock order"): the
-- queue row, then the lease rows (as every ack path, before the cursor rows the cascade
-- deletes first and the partition row a cursor update's foreign key check locks), then
-- the partition rows in ascending id (as a multi-partition push; the cascade alone took
-- them in creation order and deadlocked with such pushes). A retention step, which holds
-- a partition row, takes lease rows only with SKIP LOCKED. One statement per partition:
-- on Citus a row lock names one partition.
-- The FK-less rows go AFTER the cascade: it waits for a DLQ filing that holds a cursor
-- row, so a row that filing inserted is committed and visible by then.
CREATE OR REPLACE FUNCTION queen.delete_queue_v1(p_queue text,
                                      p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id uuid;
    v_pids uuid[];
    v_pid uuid;
BEGIN
    SELECT id INTO v_id FROM queen.queues WHERE tenant_id = p_tenant AND name = p_queue FOR UPDATE;
    IF v_id IS NULL THEN
        RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', false);
    END IF;
    -- From the registry: on Citus a multi-shard read of the distributed log_partitions
    -- here would forbid the write to the (reference) queues table in the same transaction.
    v_pids := ARRAY(SELECT id FROM queen.partition_names WHERE queue_id = v_id ORDER BY id);
    FOREACH v_pid IN ARRAY v_pids LOOP
        PERFORM 1 FROM queen.log_leases WHERE partition_id = v_pid
          ORDER BY consumer_group COLLATE "C" FOR UPDATE;
    END LOOP;
    FOREACH v_pid IN ARRAY v_pids LOOP
        PERFORM 1 FROM queen.log_partitions WHERE id = v_pid FOR UPDATE;
    END LOOP;
    DELETE FROM queen.queues WHERE id = v_id;
    DELETE FROM queen.log_txns WHERE partition_id = ANY(v_pids);
    DELETE FROM queen.log_dlq WHERE partition_id = ANY(v_pids);
    RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', true);
END $$;

-- Consumer-group deletion (sql/admin.sql). ---------------------------------------------
-- Delete a consumer group (docs/sql-api.md): its cursors and lease rows on every partition
-- of the tenant's queues, or of queue p_queue only, and (p_delete_metadata) its
-- subscription records, so that its next pop starts it as new (its subscription mode).
-- Queen's answer: {success, consumerGroup, deletedPartitions (cursors removed),
-- metadataDeleted}. An unknown queue or group deletes nothing and says 0. DLQ rows stay
-- (they are the queue's record of what failed). The subscription records first: they are
-- a reference table on Citus, which refuses a write there after a multi-shard statement.
-- Then the lease rows in the global lock order (partition ascending, one statement per
-- partition: on Citus a row lock names one partition), as every ack path takes them
-- before the cursor row, then the cursors (their lease rows go with them, by cascade). A
-- lease voided this way answers a late ack "consumer not found".
CREATE FUNCTION queen.delete_consumer_group_v1(p_group text, p_queue text DEFAULT NULL,
                                               p_delete_metadata boolean DEFAULT true,
                                               p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qids uuid[];
    v_pids uuid[];
    v_pid uuid;
    v_n bigint := 0;
    v_k bigint;
BEGIN
    IF p_group IS NULL OR p_group = '' OR p_delete_metadata IS NULL OR p_tenant IS NULL THEN
        RAISE EXCEPTION 'delete_consumer_group_v1: p_group must be a non-empty name; p_delete_metadata and p_tenant must not be NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM queen.check_name_v1('consumer group', p_group);
    IF p_queue IS NOT NULL THEN
        PERFORM queen.check_name_v1('queue', p_queue);
    END IF;
    v_qids := ARRAY(SELECT id FROM queen.queues
                     WHERE tenant_id = p_tenant AND (p_queue IS NULL OR name = p_queue) ORDER BY id);
    IF p_delete_metadata THEN
        DELETE FROM queen.consumer_groups_metadata
         WHERE tenant_id = p_tenant AND consumer_group = p_group AND queue_id = ANY(v_qids);
    END IF;
    v_pids := ARRAY(SELECT id FROM queen.partition_names WHERE queue_id = ANY(v_qids) ORDER BY id);
    FOREACH v_pid IN ARRAY v_pids LOOP
        PERFORM 1 FROM queen.log_leases
          WHERE partition_id = v_pid AND consumer_group = p_group FOR UPDATE;
    END LOOP;
    FOREACH v_pid IN ARRAY v_pids LOOP
        DELETE FROM queen.log_consumers WHERE partition_id = v_pid AND consumer_group = p_group;
        GET DIAGNOSTICS v_k = ROW_COUNT;
        v_n := v_n + v_k;
    END LOOP;
    RETURN jsonb_build_object('success', true, 'consumerGroup', p_group,
                              'deletedPartitions', v_n, 'metadataDeleted', p_delete_metadata);
END $$;
REVOKE ALL ON FUNCTION queen.delete_consumer_group_v1(text, text, boolean, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.delete_consumer_group_v1(text, text, boolean, uuid) TO queen_broker;
-- Move group p_group's cursors on partitions p_pids (ascending id, all of queue
-- p_queue_id) to the end (p_to_end) or to just before the first message created at or
-- after p_ts, clamped to [log_start - 1, last_offset] (docs/decisions.md, "Seeking a
-- consumer group"). One row per partition moved: where the cursor was (r_from, its
-- effective position) and where it is (r_to). In the global lock order: the lease rows
-- first, then the partition rows FOR SHARE (a push or a retention step in flight
-- finishes first; the bounds are read after), then the cursor rows; one partition per
-- statement (on Citus a row lock names one partition). A live lease of the group there
-- is voided (its late ack: "invalid or expired lease"), its retry budget and a pending
-- nack delay are cleared; what a forward move passes over is added to seek_skipped. A
-- partition the group has no cursor on gets one, counted from where its subscription
-- would have started it (mode 'all' or none: the log start; otherwise the first message
-- since its instant: queen.seed_offset, as the pop seeds).
CREATE FUNCTION queen.seek_cursors(p_group text, p_queue_id uuid, p_tenant uuid, p_pids uuid[],
                                   p_ts timestamptz, p_to_end boolean)
RETURNS TABLE (r_partition_id uuid, r_from bigint, r_to bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n int := coalesce(array_length(p_pids, 1), 0);
    v_start bigint[];
    v_target bigint[];
    v_mode text;
    v_sub_ts timestamptz;
    v_ls bigint;
    v_lo bigint;
    v_seed bigint;
    v_committed bigint;
BEGIN
    FOR i IN 1..v_n LOOP
        PERFORM 1 FROM queen.log_leases
          WHERE partition_id = p_pids[i] AND consumer_group = p_group FOR UPDATE;
    END LOOP;
    FOR i IN 1..v_n LOOP
        SELECT log_start, last_offset INTO v_ls, v_lo
          FROM queen.log_partitions WHERE id = p_pids[i] FOR SHARE;
        CONTINUE WHEN NOT FOUND;  -- deleted meanwhile: nothing to move
        v_start[i] := v_ls;
        -- Where a start "since p_ts" begins (the end: since nothing), the pop's own rule.
        v_target[i] := GREATEST(LEAST(queen.seed_offset(p_pids[i], 'timestamp',
                                                        CASE WHEN p_to_end THEN NULL ELSE p_ts END),
                                      v_lo), v_ls - 1);
    END LOOP;
    SELECT subscription_mode, subscription_timestamp INTO v_mode, v_sub_ts
      FROM queen.consumer_groups_metadata
     WHERE tenant_id = p_tenant AND consumer_group = p_group AND queue_id = p_queue_id;
    FOR i IN 1..v_n LOOP
        CONTINUE WHEN v_target[i] IS NULL;
        SELECT committed INTO v_committed FROM queen.log_consumers
         WHERE partition_id = p_pids[i] AND consumer_group = p_group FOR UPDATE;
        IF NOT FOUND THEN
            v_seed := queen.seed_offset(p_pids[i], v_mode, v_sub_ts);
            INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
            VALUES (p_pids[i], p_group, v_seed) ON CONFLICT DO NOTHING;
            SELECT committed INTO v_committed FROM queen.log_consumers
             WHERE partition_id = p_pids[i] AND consumer_group = p_group FOR UPDATE;
        END IF;
        r_partition_id := p_pids[i];
        r_from := GREATEST(v_committed, v_start[i] - 1);
        r_to := v_target[i];
        UPDATE queen.log_consumers
           SET committed = r_to, batch_retry_count = 0, redeliver_at = NULL,
               seek_skipped = seek_skipped + GREATEST(r_to - r_from, 0)
         WHERE partition_id = p_pids[i] AND consumer_group = p_group;
        UPDATE queen.log_leases
           SET worker_id = NULL, batch_end = NULL, lease_expires_at = NULL,
               lease_acquired_at = NULL, attempt_offset = NULL, attempt_count = 0
         WHERE partition_id = p_pids[i] AND consumer_group = p_group;
        RETURN NEXT;
    END LOOP;
END $$;
-- The checks both seeks share: names, the tenant's queue (P0002 when unknown), and the
-- group known there (a cursor on one of its partitions or a subscription record; else
-- P0002: a seek of a mistyped group must not create one), a target that is exactly one
-- of p_ts / p_to_end and not in the future. Returns the queue's id.
CREATE FUNCTION queen.seek_target_queue(p_fn text, p_group text, p_queue text, p_ts timestamptz,
                                        p_to_end boolean, p_tenant uuid)
RETURNS uuid
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid uuid;
BEGIN
    IF p_group IS NULL OR p_queue IS NULL OR p_to_end IS NULL OR p_tenant IS NULL THEN
        RAISE EXCEPTION '%: p_group, p_queue, p_to_end and p_tenant must not be NULL', p_fn
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_group = '' THEN
        RAISE EXCEPTION '%: p_group must be a non-empty name', p_fn USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM queen.check_name_v1('consumer group', p_group);
    PERFORM queen.check_name_v1('queue', p_queue);
    IF p_to_end = (p_ts IS NOT NULL) THEN
        RAISE EXCEPTION '%: give either a timestamp or toEnd = true, not both and not neither', p_fn
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_ts > clock_timestamp() THEN
        RAISE EXCEPTION '%: timestamp % is in the future', p_fn, p_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT id INTO v_qid FROM queen.queues WHERE tenant_id = p_tenant AND name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue "%" not found', p_queue USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata
                    WHERE tenant_id = p_tenant AND consumer_group = p_group AND queue_id = v_qid)
       AND NOT EXISTS (SELECT 1 FROM queen.log_consumers
                        WHERE consumer_group = p_group
                          AND partition_id = ANY(ARRAY(SELECT id FROM queen.partition_names
                                                        WHERE queue_id = v_qid))) THEN
        RAISE EXCEPTION 'consumer group "%" has never read queue "%"', p_group, p_queue
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v_qid;
END $$;
-- Queen's seek of a consumer group on a queue (docs/sql-api.md): every partition of the
-- queue, to the end or to the first message created at or after p_timestamp. Answer:
-- {success, consumerGroup, queueName, seekToEnd, targetTimestamp, partitionsUpdated,
-- skipped (messages passed over forwards), replayed (messages to be delivered again)}.
CREATE FUNCTION queen.seek_consumer_group_v1(p_group text, p_queue text,
                                             p_timestamp timestamptz DEFAULT NULL,
                                             p_to_end boolean DEFAULT false,
                                             p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_qid uuid := queen.seek_target_queue('seek_consumer_group_v1', p_group, p_queue,
                                          p_timestamp, p_to_end, p_tenant);
    v_n bigint;
    v_skipped bigint;
    v_replayed bigint;
BEGIN
    SELECT count(*), coalesce(sum(GREATEST(r_to - r_from, 0)), 0),
           coalesce(sum(GREATEST(r_from - r_to, 0)), 0)
      INTO v_n, v_skipped, v_replayed
      FROM queen.seek_cursors(p_group, v_qid, p_tenant,
                              ARRAY(SELECT id FROM queen.partition_names WHERE queue_id = v_qid ORDER BY id),
                              p_timestamp, p_to_end);
    RETURN jsonb_build_object(
        'success', true, 'consumerGroup', p_group, 'queueName', p_queue, 'seekToEnd', p_to_end,
        'targetTimestamp', queen.iso_ms(p_timestamp),
        'partitionsUpdated', v_n, 'skipped', v_skipped, 'replayed', v_replayed);
END $$;
-- Queen's seek of one partition (docs/sql-api.md): to the end by default (Queen's only
-- form), or to p_timestamp. Answer: {success, consumerGroup, queueName, partitionName,
-- updated, cursorMovedTo (creation time of the last message now behind the cursor, or
-- null), offset (the cursor), skipped, replayed}. An unknown partition is P0002.
CREATE FUNCTION queen.seek_partition_v1(p_group text, p_queue text, p_partition text,
                                        p_timestamp timestamptz DEFAULT NULL,
                                        p_to_end boolean DEFAULT NULL,
                                        p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_to_end boolean := coalesce(p_to_end, p_timestamp IS NULL);
    v_qid uuid := queen.seek_target_queue('seek_partition_v1', p_group, p_queue,
                                          p_timestamp, v_to_end, p_tenant);
    v_pid uuid;
    m record;
BEGIN
    PERFORM queen.check_name_v1('partition', p_partition);
    SELECT id INTO v_pid FROM queen.partition_names WHERE queue_id = v_qid AND name = p_partition;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'partition "%" of queue "%" not found', p_partition, p_queue
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT * INTO m FROM queen.seek_cursors(p_group, v_qid, p_tenant, ARRAY[v_pid], p_timestamp, v_to_end);
    RETURN jsonb_build_object(
        'success', true, 'consumerGroup', p_group, 'queueName', p_queue,
        'partitionName', p_partition, 'updated', m.r_partition_id IS NOT NULL,
        'cursorMovedTo', (SELECT queen.iso_ms(s.created_at)
                            FROM queen.log_segments s
                           WHERE s.partition_id = v_pid AND s.base_offset <= m.r_to
                             AND s.end_offset >= m.r_to),
        'offset', m.r_to, 'skipped', GREATEST(m.r_to - m.r_from, 0),
        'replayed', GREATEST(m.r_from - m.r_to, 0));
END $$;
-- Queen's subscription update (docs/sql-api.md): the instant every subscription record of
-- group p_group (all the tenant's queues) starts a partition the group has not read yet.
-- Existing cursors do not move (seek moves them). A record of mode 'all' becomes
-- 'timestamp': Queen reads the instant whatever the mode. A group without a record is
-- P0002; an instant in the future is 22023. Answer: {success, consumerGroup, newTimestamp,
-- rowsUpdated}.
CREATE FUNCTION queen.update_consumer_group_subscription_v1(p_group text, p_timestamp timestamptz,
                                                            p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n bigint;
BEGIN
    IF p_group IS NULL OR p_timestamp IS NULL OR p_tenant IS NULL THEN
        RAISE EXCEPTION 'update_consumer_group_subscription_v1: p_group, p_timestamp and p_tenant must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_group = '' THEN
        RAISE EXCEPTION 'update_consumer_group_subscription_v1: p_group must be a non-empty name'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM queen.check_name_v1('consumer group', p_group);
    IF p_timestamp > clock_timestamp() THEN
        RAISE EXCEPTION 'update_consumer_group_subscription_v1: subscriptionTimestamp % is in the future', p_timestamp
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE queen.consumer_groups_metadata
       SET subscription_timestamp = p_timestamp,
           subscription_mode = CASE WHEN subscription_mode = 'all' THEN 'timestamp' ELSE subscription_mode END
     WHERE tenant_id = p_tenant AND consumer_group = p_group;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n = 0 THEN
        RAISE EXCEPTION 'consumer group "%" has no subscription record', p_group
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN jsonb_build_object('success', true, 'consumerGroup', p_group,
        'newTimestamp', queen.iso_ms(p_timestamp),
        'rowsUpdated', v_n);
END $$;
REVOKE ALL ON FUNCTION queen.seek_cursors(text, uuid, uuid, uuid[], timestamptz, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.seek_cursors(text, uuid, uuid, uuid[], timestamptz, boolean) TO queen_broker;
REVOKE ALL ON FUNCTION queen.seek_target_queue(text, text, text, timestamptz, boolean, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.seek_target_queue(text, text, text, timestamptz, boolean, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.seek_consumer_group_v1(text, text, timestamptz, boolean, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.seek_consumer_group_v1(text, text, timestamptz, boolean, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.seek_partition_v1(text, text, text, timestamptz, boolean, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.seek_partition_v1(text, text, text, timestamptz, boolean, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.update_consumer_group_subscription_v1(text, timestamptz, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.update_consumer_group_subscription_v1(text, timestamptz, uuid) TO queen_broker;

-- Message browsing (src/browse.rs): Queen's message listing and lookup by address.
CREATE FUNCTION queen.list_messages_v1(
    "p_filters" jsonb DEFAULT '{}',
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
STABLE SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'list_messages_v1_wrapper';
CREATE FUNCTION queen.get_message_v1(
    "p_partition_id" uuid,
    "p_transaction_id" text,
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
STABLE SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'get_message_v1_wrapper';
REVOKE ALL ON FUNCTION queen.list_messages_v1(jsonb, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.list_messages_v1(jsonb, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.get_message_v1(uuid, text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.get_message_v1(uuid, text, uuid) TO queen_broker;

-- Configure's option rule (src/broker_api.rs, queen_log::options), called by configure_queue_v1.
CREATE FUNCTION queen.check_queue_options_v1(
    "p_options" jsonb
) RETURNS jsonb
IMMUTABLE STRICT PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'check_queue_options_v1_wrapper';
REVOKE ALL ON FUNCTION queen.check_queue_options_v1(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.check_queue_options_v1(jsonb) TO queen_broker;

-- Traces (docs/decisions.md, "Traces"): what a consumer recorded about a message while
-- processing it (Queen's msg.trace()). A trace lives as long as its message: the
-- retention step deletes the traces below a partition's new log start (counted), a
-- queue deletion cascades. At most 100 per message (queen.record_trace_v1).
CREATE TABLE queen.log_traces (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    partition_id uuid NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    "offset" bigint NOT NULL,
    transaction_id text NOT NULL,
    tenant_id uuid NOT NULL,
    consumer_group text NOT NULL,
    event_type text NOT NULL,
    data jsonb NOT NULL,
    worker_id text,
    names text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT log_traces_pkey PRIMARY KEY (id, partition_id)
);
CREATE INDEX log_traces_message_idx ON queen.log_traces (partition_id, transaction_id);
CREATE INDEX log_traces_offset_idx ON queen.log_traces (partition_id, "offset");
CREATE INDEX log_traces_names_idx ON queen.log_traces USING gin (names);

-- A trace as Queen's trace reads show it (sql/admin.sql's trace functions). Columns,
-- not the row: on Citus the row type of a shard is not queen.log_traces.
CREATE FUNCTION queen.trace_json(p_id uuid, p_event_type text, p_data jsonb, p_group text,
                                 p_worker text, p_created timestamptz, p_names text[])
RETURNS jsonb
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('id', p_id, 'event_type', p_event_type, 'data', p_data,
                              'consumer_group', p_group, 'worker_id', p_worker,
                              'created_at', queen.iso_ms(p_created),
                              'trace_names', to_jsonb(ARRAY(SELECT n FROM unnest(p_names) n ORDER BY n)))
$$;
-- A page's limit and offset (the trace reads): limit 1 to 1,000, offset >= 0; 22023 else.
CREATE FUNCTION queen.check_page(p_fn text, p_limit int, p_offset int) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000 OR p_offset IS NULL OR p_offset < 0 THEN
        RAISE EXCEPTION '%: limit must be 1 to 1000 and offset >= 0, got % and %', p_fn, p_limit, p_offset
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END $$;
-- Queen's traces of one message (docs/sql-api.md), oldest first: {traces: [...]}. Another
-- tenant's message, or an address nobody has, has none.
CREATE FUNCTION queen.get_message_traces_v1(p_partition_id uuid, p_transaction_id text,
                                            p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object('traces', coalesce((
        SELECT jsonb_agg(queen.trace_json(t.id, t.event_type, t.data, t.consumer_group,
                                          t.worker_id, t.created_at, t.names)
                         ORDER BY t.created_at, t.id)
          FROM queen.log_traces t
         WHERE t.partition_id = p_partition_id AND t.transaction_id = p_transaction_id
           AND t.tenant_id = p_tenant), '[]'::jsonb));
END $$;
-- Queen's traces carrying a name (docs/sql-api.md), oldest first, one page, with the
-- message's queue and partition: {traces, total, pagination: {limit, offset}}.
-- message_payload is null: the payload stays in its segment (get_message_v1 reads it).
CREATE FUNCTION queen.get_traces_by_name_v1(p_name text, p_limit int DEFAULT 100, p_offset int DEFAULT 0,
                                            p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_total bigint;
    v_page jsonb;
BEGIN
    PERFORM queen.check_page('get_traces_by_name_v1', p_limit, p_offset);
    SELECT count(*) INTO v_total FROM queen.log_traces t
     WHERE t.tenant_id = p_tenant AND t.names @> ARRAY[p_name];
    SELECT coalesce(jsonb_agg(pg.j || jsonb_build_object(
               'transaction_id', pg.transaction_id, 'partition_id', pg.partition_id,
               'queue_name', pg.queue_name, 'partition_name', pg.partition_name,
               'message_payload', NULL) ORDER BY pg.created_at, pg.id), '[]'::jsonb)
      INTO v_page
      FROM (SELECT queen.trace_json(t.id, t.event_type, t.data, t.consumer_group, t.worker_id,
                                    t.created_at, t.names) AS j,
                   t.id, t.created_at, t.transaction_id, t.partition_id,
                   q.name::text AS queue_name, n.name AS partition_name
              FROM queen.log_traces t
              JOIN queen.partition_names n ON n.id = t.partition_id
              JOIN queen.queues q ON q.id = n.queue_id
             WHERE t.tenant_id = p_tenant AND t.names @> ARRAY[p_name]
             ORDER BY t.created_at, t.id LIMIT p_limit OFFSET p_offset) pg;
    RETURN jsonb_build_object('traces', v_page, 'total', v_total,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END $$;
-- Queen's trace names (docs/sql-api.md), most recently seen first: {trace_names:
-- [{trace_name, trace_count, message_count, last_seen}], total, pagination}.
CREATE FUNCTION queen.get_available_trace_names_v1(p_limit int DEFAULT 50, p_offset int DEFAULT 0,
                                                   p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_total bigint;
    v_names jsonb;
BEGIN
    PERFORM queen.check_page('get_available_trace_names_v1', p_limit, p_offset);
    SELECT count(DISTINCT n) INTO v_total
      FROM queen.log_traces t, unnest(t.names) n WHERE t.tenant_id = p_tenant;
    SELECT coalesce(jsonb_agg(jsonb_build_object('trace_name', s.n, 'trace_count', s.traces,
                                                 'message_count', s.messages,
                                                 'last_seen', queen.iso_ms(s.last))
                              ORDER BY s.last DESC, s.n), '[]'::jsonb)
      INTO v_names
      FROM (SELECT n, count(*) AS traces,
                   count(DISTINCT t.partition_id::text || '/' || t.transaction_id) AS messages, max(t.created_at) AS last
              FROM queen.log_traces t, unnest(t.names) n
             WHERE t.tenant_id = p_tenant
             GROUP BY n ORDER BY max(t.created_at) DESC, n LIMIT p_limit OFFSET p_offset) s;
    RETURN jsonb_build_object('trace_names', v_names, 'total', v_total,
                              'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END $$;
REVOKE ALL ON FUNCTION queen.trace_json(uuid, text, jsonb, text, text, timestamptz, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.trace_json(uuid, text, jsonb, text, text, timestamptz, text[]) TO queen_broker;
REVOKE ALL ON FUNCTION queen.check_page(text, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.check_page(text, int, int) TO queen_broker;
REVOKE ALL ON FUNCTION queen.get_message_traces_v1(uuid, text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.get_message_traces_v1(uuid, text, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.get_traces_by_name_v1(text, int, int, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.get_traces_by_name_v1(text, int, int, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.get_available_trace_names_v1(int, int, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.get_available_trace_names_v1(int, int, uuid) TO queen_broker;
-- Recording a trace (src/traces.rs).
CREATE FUNCTION queen.record_trace_v1(
    "p_data" jsonb,
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'record_trace_v1_wrapper';
REVOKE ALL ON FUNCTION queen.record_trace_v1(jsonb, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.record_trace_v1(jsonb, uuid) TO queen_broker;
-- The tenant's subscription records (docs/sql-api.md): per (queue, group) the mode and
-- instant its first contact with a partition starts from (the consumer-group views).
CREATE FUNCTION queen.subscriptions_v1(p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE(r_queue text, r_consumer_group text, r_mode text, r_timestamp timestamptz,
              r_created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT q.name::text, m.consumer_group, m.subscription_mode, m.subscription_timestamp, m.created_at
      FROM queen.consumer_groups_metadata m JOIN queen.queues q ON q.id = m.queue_id
     WHERE m.tenant_id = p_tenant AND q.tenant_id = p_tenant;
END $$;
REVOKE ALL ON FUNCTION queen.subscriptions_v1(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.subscriptions_v1(uuid) TO queen_broker;

-- Reads by offset (src/fetch.rs, queen_log::fetch): Queen 2.x's fetch, no lease, no cursor.
CREATE FUNCTION queen.fetch_v1(
    "p_entries" jsonb,
    "p_max_bytes" bigint DEFAULT 8388608,
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
STABLE SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'fetch_v1_wrapper';
REVOKE ALL ON FUNCTION queen.fetch_v1(jsonb, bigint, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.fetch_v1(jsonb, bigint, uuid) TO queen_broker;
-- Its per-partition half (a distributed function on Citus, docs/citus.md).
CREATE FUNCTION queen.fetch_partition_v1(
    "p_partition_id" uuid,
    "p_offset" bigint,
    "p_budget" bigint,
    "p_must_progress" bool
) RETURNS TEXT
STABLE SECURITY DEFINER
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'fetch_partition_v1_wrapper';
REVOKE ALL ON FUNCTION queen.fetch_partition_v1(uuid, bigint, bigint, bool) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.fetch_partition_v1(uuid, bigint, bigint, bool) TO queen_broker;

-- Partition discovery (sql/admin.sql; Queen 2.x's POST /api/v1/partitions/changed; docs/decisions.md,
-- "Partition discovery"): per entry {queue, since?, after?, limit?} the queue's partitions
-- written at or after `since`, in creation order, a page of `limit` (1..1000, 1000) after
-- the cursor `after`, with `next` while more follow; and one safeTime for the call: every
-- write stamped before it is visible to this call. A push stamps last_write_at after its
-- transaction began, so safeTime is the earlier of the clock, read first, and the start
-- of the oldest transaction then in progress; the partitions are read after both, in a
-- later snapshot (hence VOLATILE and READ COMMITTED only).
CREATE FUNCTION queen.partitions_changed_v1(p_entries jsonb,
                                            p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz;
    v_oldest timestamptz;
    v_out jsonb := '[]'::jsonb;
    e jsonb;
    v_queue uuid;
    v_since timestamptz;
    v_limit int;
    v_after_at timestamptz;
    v_after_id uuid;
    v_page jsonb;
    v_more boolean;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'partitions_changed_v1 needs READ COMMITTED: its safeTime rests on a snapshot taken after it'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    IF jsonb_typeof(p_entries) IS DISTINCT FROM 'array' OR jsonb_array_length(p_entries) > 1024 THEN
        RAISE EXCEPTION 'partitions_changed: entries must be a JSON array of at most 1024'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Other roles' transactions are visible in pg_stat_activity to a superuser or a
    -- member of pg_read_all_stats only; without them safeTime could pass a write.
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER') THEN
        RAISE EXCEPTION 'partitions_changed_v1: the extension owner % must be a superuser or a member of pg_read_all_stats', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    v_now := clock_timestamp();
    SELECT min(a.xact_start) INTO v_oldest FROM pg_stat_activity a
     WHERE a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL;
    FOR e IN SELECT x FROM jsonb_array_elements(p_entries) x LOOP
        IF jsonb_typeof(e) <> 'object' OR jsonb_typeof(e->'queue') IS DISTINCT FROM 'string'
           OR EXISTS (SELECT 1 FROM jsonb_object_keys(e) k WHERE k NOT IN ('queue', 'since', 'after', 'limit')) THEN
            RAISE EXCEPTION 'partitions_changed: an entry is {queue, since?, after?, limit?}: %', e
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_limit := COALESCE((e->>'limit')::int, 1000);
        IF v_limit NOT BETWEEN 1 AND 1000 THEN
            RAISE EXCEPTION 'partitions_changed: limit must be 1 to 1000, got %', v_limit
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_since := (e->>'since')::timestamptz;
        v_after_at := NULL;
        v_after_id := NULL;
        IF e->>'after' IS NOT NULL THEN
            BEGIN
                v_after_at := to_timestamp(0) + split_part(e->>'after', '/', 1)::bigint * interval '1 microsecond';
                v_after_id := split_part(e->>'after', '/', 2)::uuid;
            EXCEPTION WHEN others THEN
                RAISE EXCEPTION 'partitions_changed: after % is not a cursor this function answered', e->>'after'
                    USING ERRCODE = 'invalid_parameter_value';
            END;
        END IF;
        SELECT q.id INTO v_queue FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = e->>'queue';
        IF v_queue IS NULL THEN
            v_out := v_out || jsonb_build_array(jsonb_build_object('queue', e->>'queue',
                         'partitions', '[]'::jsonb, 'next', NULL, 'error', 'UNKNOWN_TOPIC_OR_PARTITION'));
            CONTINUE;
        END IF;
        SELECT COALESCE(jsonb_agg(jsonb_build_object('name', p.name, 'id', p.id, 'lastOffset', p.last_offset,
                                                     'logStart', p.log_start, 'lastWriteAt', queen.iso_ms(p.last_write_at),
                                                     '_at', ((extract(epoch FROM p.created_at) * 1000000)::numeric)::bigint)
                                  ORDER BY p.created_at, p.id), '[]'::jsonb),
               count(*) > v_limit
          INTO v_page, v_more
          FROM (SELECT * FROM queen.log_partitions p
                 WHERE p.queue_id = v_queue
                   AND (v_since IS NULL OR p.last_write_at >= v_since)
                   AND (v_after_id IS NULL OR (p.created_at, p.id) > (v_after_at, v_after_id))
                 ORDER BY p.created_at, p.id LIMIT v_limit + 1) p;
        IF v_more THEN
            v_page := v_page - v_limit;
        END IF;
        v_out := v_out || jsonb_build_array(jsonb_build_object(
            'queue', e->>'queue',
            'partitions', (SELECT COALESCE(jsonb_agg(x - '_at' ORDER BY o), '[]'::jsonb)
                             FROM jsonb_array_elements(v_page) WITH ORDINALITY t(x, o)),
            'next', CASE WHEN v_more THEN (v_page->-1->>'_at') || '/' || (v_page->-1->>'id') END));
    END LOOP;
    RETURN jsonb_build_object('entries', v_out,
                              'safeTime', queen.iso_ms(LEAST(v_now, COALESCE(v_oldest, v_now))));
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR invalid_text_representation THEN
    RAISE EXCEPTION 'partitions_changed: %', SQLERRM USING ERRCODE = 'invalid_parameter_value';
END $$;
REVOKE ALL ON FUNCTION queen.partitions_changed_v1(jsonb, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.partitions_changed_v1(jsonb, uuid) TO queen_broker;

-- Timers (docs/decisions.md, "Timers"; src/timers.rs): Queen 2.x's scheduled messages,
-- one pending per (queue, key). A due timer is delivered into its queue by a push whose
-- transactionId is `txn` and whose message id is `message_id` (both promised at schedule
-- time), and its row is deleted in the same transaction: there is no tombstone. The
-- payload is the frame's (JSON text, or Queen's envelope when `encrypted`). `attempts`
-- and `last_error` record deliveries that could not be made (the row then waits).
CREATE TABLE queen.timers (
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    -- byte order: a list page is a keyset over the primary key, the same on every node
    timer_key text COLLATE "C" NOT NULL,
    partition text NOT NULL DEFAULT 'Default',
    txn text NOT NULL,
    message_id uuid NOT NULL,
    payload bytea NOT NULL,
    encrypted bool NOT NULL DEFAULT false,
    deliver_at timestamptz NOT NULL,
    attempts int NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT timers_pkey PRIMARY KEY (queue_id, timer_key)
);
-- The sweeper's scan: the earliest due first.
CREATE INDEX timers_deliver_at_idx ON queen.timers (deliver_at);

-- Key/value (docs/decisions.md, "Key/value"; src/kv.rs): Queen 2.x's versioned keys,
-- one row per (tenant, namespace, key). `expires_at` NULL lives forever; a row past it
-- is absent to every op and removed by run_maintenance. `version` only grows (one past
-- the row's, never below the write's clock in microseconds).
CREATE TABLE queen.kv (
    tenant_id uuid NOT NULL,
    -- byte order: a prefix page is a keyset over the primary key, the same on every node
    ns text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    value jsonb NOT NULL,
    version bigint NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL,
    CONSTRAINT kv_pkey PRIMARY KEY (tenant_id, ns, key)
);
-- Maintenance's scan: the earliest expired first.
CREATE INDEX kv_expires_at_idx ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;

-- Timers' writes and deliveries (src/timers.rs).
CREATE FUNCTION queen."timers_apply_v1"(
	"p_ops" jsonb,
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'timers_apply_v1_wrapper';
CREATE FUNCTION queen."timers_fire_v1"(
	"p_limit" INT DEFAULT 1000
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'timers_fire_v1_wrapper';

-- Timers' reads (src/timers.rs writes and delivers; docs/decisions.md, "Timers").

-- One timer of the tenant's queue, with its payload exactly as stored (base64; an
-- envelope stays an envelope: `encrypted` says so). A miss is {"found": false}.
CREATE FUNCTION queen.timers_get_v1(
    p_queue text,
    p_key text,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue uuid;
    v_out jsonb;
BEGIN
    -- By the queue's id: one shard on Citus (plpgsql, since Citus plans no parameterized
    -- SQL-function statement over a distributed table).
    SELECT q.id INTO v_queue FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    SELECT jsonb_build_object(
               'found', true, 'queue', p_queue, 'timerKey', t.timer_key,
               'partition', t.partition, 'txn', t.txn, 'messageId', t.message_id,
               'deliverAt', queen.iso_ms(t.deliver_at),
               'payload', translate(encode(t.payload, 'base64'), E'\n', ''),
               'encrypted', t.encrypted, 'attempts', t.attempts, 'lastError', t.last_error,
               'createdAt', queen.iso_ms(t.created_at), 'updatedAt', queen.iso_ms(t.updated_at))
      INTO v_out
      FROM queen.timers t WHERE t.queue_id = v_queue AND t.timer_key = p_key;
    RETURN COALESCE(v_out, '{"found": false}'::jsonb);
END $$;

-- A keyset page of one queue's pending timers, by key: `p_after` is exclusive, the
-- limit is clamped to 1..1000 (default 100), never refused; `truncated` says whether
-- more follow, `nextAfter` is the cursor for the next page.
CREATE FUNCTION queen.timers_list_v1(
    p_queue text,
    p_after text DEFAULT NULL,
    p_limit int DEFAULT NULL,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue uuid;
    v_n int := least(greatest(COALESCE(p_limit, 100), 1), 1000);
    v_rows jsonb;
    v_more bool;
    v_last text;
BEGIN
    SELECT q.id INTO v_queue FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    -- One row past the page says whether more follow.
    WITH page AS (
        SELECT t.* FROM queen.timers t
         WHERE t.queue_id = v_queue AND (p_after IS NULL OR t.timer_key > p_after)
         ORDER BY t.timer_key
         LIMIT v_n + 1),
    shown AS (SELECT * FROM page ORDER BY timer_key LIMIT v_n)
    SELECT COALESCE((SELECT jsonb_agg(jsonb_build_object(
                        'timerKey', s.timer_key, 'partition', s.partition, 'txn', s.txn,
                        'messageId', s.message_id, 'deliverAt', queen.iso_ms(s.deliver_at),
                        'encrypted', s.encrypted, 'attempts', s.attempts, 'lastError', s.last_error)
                        ORDER BY s.timer_key) FROM shown s), '[]'::jsonb),
           (SELECT count(*) FROM page) > v_n,
           (SELECT max(timer_key) FROM shown)
      INTO v_rows, v_more, v_last;
    RETURN jsonb_build_object('queue', p_queue, 'rows', v_rows, 'truncated', v_more,
                              'nextAfter', CASE WHEN v_more THEN v_last END);
END $$;
REVOKE ALL ON FUNCTION queen.timers_apply_v1(jsonb, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.timers_apply_v1(jsonb, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.timers_fire_v1(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.timers_fire_v1(int) TO queen_broker;
REVOKE ALL ON FUNCTION queen.timers_get_v1(text, text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.timers_get_v1(text, text, uuid) TO queen_broker;
REVOKE ALL ON FUNCTION queen.timers_list_v1(text, text, int, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.timers_list_v1(text, text, int, uuid) TO queen_broker;

-- Key/value (src/kv.rs, queen_log::kv; docs/decisions.md, "Key/value").
CREATE FUNCTION queen."kv_apply_v1"(
	"p_ops" jsonb,
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'kv_apply_v1_wrapper';
CREATE FUNCTION queen."kv_expire_step_v1"(
	"p_max_rows" INT DEFAULT 1000
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'kv_expire_step_v1_wrapper';
REVOKE ALL ON FUNCTION queen.kv_apply_v1(jsonb, uuid), queen.kv_expire_step_v1(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.kv_apply_v1(jsonb, uuid), queen.kv_expire_step_v1(int) TO queen_broker;

-- Locks and semaphores (src/locks.rs, queen_log::locks; docs/decisions.md, "Locks").
CREATE FUNCTION queen."locks_apply_v1"(
	"p_ops" jsonb,
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'locks_apply_v1_wrapper';
REVOKE ALL ON FUNCTION queen.locks_apply_v1(jsonb, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.locks_apply_v1(jsonb, uuid) TO queen_broker;

-- The tenant's key/value and timer stores, as Queen's queue list reports them
-- (`kvRows`, `kvBytes`, `timerRows`, `timerBytes`; bytes are the rows' stored sizes).
CREATE FUNCTION queen.store_sizes_v1(
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_kv record;
    v_timers record;
BEGIN
    SELECT count(*) AS n, COALESCE(sum(pg_column_size(k.*)), 0) AS bytes INTO v_kv
      FROM queen.kv k WHERE k.tenant_id = p_tenant;
    SELECT count(*) AS n, COALESCE(sum(pg_column_size(t.*)), 0) AS bytes INTO v_timers
      FROM queen.timers t JOIN queen.queues q ON q.id = t.queue_id WHERE q.tenant_id = p_tenant;
    RETURN jsonb_build_object('kvRows', v_kv.n, 'kvBytes', v_kv.bytes,
                              'timerRows', v_timers.n, 'timerBytes', v_timers.bytes);
END $$;
REVOKE ALL ON FUNCTION queen.store_sizes_v1(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.store_sizes_v1(uuid) TO queen_broker;

-- Ephemeral queues' declarations (src/ephemeral.rs, sql/ephemeral.sql; docs/decisions.md,
-- "Ephemeral queues"): the options only, the contents stay in a broker's memory.
CREATE TABLE queen.ephemeral_queues (
    tenant_id uuid NOT NULL,
    name text COLLATE "C" NOT NULL,
    options jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT ephemeral_queues_pkey PRIMARY KEY (tenant_id, name)
);
CREATE FUNCTION queen."ephemeral_configure_v1"(
	"p_queue" TEXT,
	"p_options" jsonb DEFAULT '{}',
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'ephemeral_configure_v1_wrapper';
CREATE FUNCTION queen.ephemeral_delete_v1(
    p_queue text,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM queen.ephemeral_queues e WHERE e.tenant_id = p_tenant AND e.name = p_queue;
    RETURN FOUND;
END $$;

-- Every declaration of every tenant, as a broker loads them at start:
-- [{tenant, queue, options}], by tenant and name.
CREATE FUNCTION queen.ephemeral_declared_v1() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE(jsonb_agg(jsonb_build_object('tenant', e.tenant_id, 'queue', e.name,
                                                 'options', e.options)
                              ORDER BY e.tenant_id, e.name), '[]'::jsonb)
      FROM queen.ephemeral_queues e
$$;
REVOKE ALL ON FUNCTION queen.ephemeral_configure_v1(text, jsonb, uuid),
    queen.ephemeral_delete_v1(text, uuid), queen.ephemeral_declared_v1() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.ephemeral_configure_v1(text, jsonb, uuid),
    queen.ephemeral_delete_v1(text, uuid), queen.ephemeral_declared_v1() TO queen_broker;

-- Streams (docs/decisions.md, "Streams"; src/streams.rs): Queen's stream queries, their
-- keyed state per (query, source partition, key), and per such shard the digest of the
-- last committed cycle (a retry of that commit is recognised and changes nothing). State
-- and shards go with their query (ON DELETE CASCADE); run_maintenance removes those of
-- partitions that no longer exist.
CREATE TABLE queen.stream_queries (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL,
    name text COLLATE "C" NOT NULL,
    source_queue text NOT NULL,
    sink_queue text,
    config_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT stream_queries_pkey PRIMARY KEY (id),
    CONSTRAINT stream_queries_name_key UNIQUE (tenant_id, name)
);
CREATE TABLE queen.stream_state (
    query_id uuid NOT NULL REFERENCES queen.stream_queries (id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    key text COLLATE "C" NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT stream_state_pkey PRIMARY KEY (query_id, partition_id, key)
);
CREATE TABLE queen.stream_shards (
    query_id uuid NOT NULL REFERENCES queen.stream_queries (id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    last_digest text,
    cycles bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT stream_shards_pkey PRIMARY KEY (query_id, partition_id)
);
CREATE FUNCTION queen."streams_register_query_v1"(
	"p" jsonb,
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'streams_register_query_v1_wrapper';
CREATE FUNCTION queen."streams_state_get_v1"(
	"p" jsonb,
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'streams_state_get_v1_wrapper';
CREATE FUNCTION queen."streams_cycle_request_v1"(
	"p" jsonb,
	"p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'queen_ack-0.2.0', 'streams_cycle_request_v1_wrapper';
-- Streams (src/streams.rs; docs/decisions.md, "Streams"): the cycle entry point and the
-- query's deletion. Rust reads and writes the rows; this file gives each request of a
-- merged call its own subtransaction.

-- Commits stream processing cycles: one request (a JSON object; the answer is its result)
-- or Queen's merged form (an array of requests with `idx`; the answer [{idx, result}]).
-- Each request is all or nothing in its own subtransaction: a refused one answers
-- {success: false, error} with nothing of it written, the others commit. A transient
-- failure (deadlock, serialization, resources, connection, shutdown) is raised for the
-- whole call instead: the caller retries, nothing was written.
CREATE FUNCTION queen.streams_cycle_v1(
    p jsonb,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_items jsonb;
    v_item jsonb;
    v_result jsonb;
    v_out jsonb := '[]';
    v_i int := 0;
BEGIN
    IF p IS NULL THEN
        RAISE EXCEPTION 'p must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    v_items := CASE jsonb_typeof(p) WHEN 'array' THEN p WHEN 'object' THEN jsonb_build_array(p) END;
    IF v_items IS NULL OR EXISTS (SELECT 1 FROM jsonb_array_elements(v_items) e
                                   WHERE jsonb_typeof(e) <> 'object') THEN
        RAISE EXCEPTION 'cycle: a JSON object or an array of objects'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_array_length(v_items) > 1000 THEN
        RAISE EXCEPTION 'cycle: at most 1000 requests in one call'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_item IN SELECT e FROM jsonb_array_elements(v_items) e LOOP
        BEGIN
            v_result := queen.streams_cycle_request_v1(v_item - 'idx', p_tenant);
        EXCEPTION WHEN OTHERS THEN
            IF SQLSTATE IN ('40001', '40P01') OR left(SQLSTATE, 2) IN ('08', '53', '57', '58', 'XX') THEN
                RAISE;
            END IF;
            v_result := jsonb_build_object(
                'success', false,
                'query_id', COALESCE(v_item->>'query_id', ''),
                'partition_id', COALESCE(v_item->>'partition_id', ''),
                'queueName', NULL, 'state_ops_applied', 0, 'push_results', '[]'::jsonb,
                'ack_result', NULL, 'error', SQLERRM, 'sqlstate', SQLSTATE);
        END;
        v_out := v_out || jsonb_build_array(jsonb_build_object(
            'idx', COALESCE((v_item->>'idx')::bigint, v_i), 'result', v_result));
        v_i := v_i + 1;
    END LOOP;
    IF jsonb_typeof(p) = 'object' THEN
        RETURN v_out->0->'result';
    END IF;
    RETURN v_out;
END $$;

-- Deletes a stream query with its state and shards (ON DELETE CASCADE); whether it
-- existed.
CREATE FUNCTION queen.streams_delete_query_v1(
    p_name text,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    DELETE FROM queen.stream_queries s WHERE s.tenant_id = p_tenant AND s.name = p_name;
    RETURN FOUND;
END $$;

-- One bounded step of stream cleanup for run_maintenance: the state and shard rows of
-- source partitions that no longer exist (a deleted queue), shard by shard. The shards
-- are few (queries × partitions), the state rows go by primary-key prefix.
CREATE FUNCTION queen.streams_orphans_step_v1(p_max_rows int) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    v_n int;
    v_removed int := 0;
    v_full bool := false;
    v_ids uuid[];
    v_alive uuid[];
BEGIN
    IF p_max_rows IS NULL OR p_max_rows < 1 THEN
        RAISE EXCEPTION 'streams_orphans_step_v1: p_max_rows must be >= 1, got %', p_max_rows
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Two statements, not a join: on Citus the shards are a local table and the
    -- partitions a distributed one.
    v_ids := ARRAY(SELECT DISTINCT s.partition_id FROM queen.stream_shards s);
    v_alive := ARRAY(SELECT p.id FROM queen.log_partitions p WHERE p.id = ANY (v_ids));
    FOR r IN SELECT s.query_id, s.partition_id FROM queen.stream_shards s
              WHERE s.partition_id <> ALL (v_alive)
              ORDER BY s.query_id, s.partition_id LOOP
        WITH gone AS (
            DELETE FROM queen.stream_state t USING (
                SELECT key FROM queen.stream_state
                 WHERE query_id = r.query_id AND partition_id = r.partition_id
                 LIMIT p_max_rows - v_removed) v
             WHERE t.query_id = r.query_id AND t.partition_id = r.partition_id AND t.key = v.key
            RETURNING 1)
        SELECT count(*) INTO v_n FROM gone;
        v_removed := v_removed + v_n;
        IF v_removed >= p_max_rows THEN
            v_full := true;
            EXIT;
        END IF;
        DELETE FROM queen.stream_shards
         WHERE query_id = r.query_id AND partition_id = r.partition_id;
        v_removed := v_removed + 1;
        IF v_removed >= p_max_rows THEN
            v_full := true;
            EXIT;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('removed', v_removed, 'done', NOT v_full);
END $$;
REVOKE ALL ON FUNCTION queen.streams_register_query_v1(jsonb, uuid),
    queen.streams_state_get_v1(jsonb, uuid), queen.streams_cycle_request_v1(jsonb, uuid),
    queen.streams_cycle_v1(jsonb, uuid), queen.streams_delete_query_v1(text, uuid),
    queen.streams_orphans_step_v1(int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.streams_register_query_v1(jsonb, uuid),
    queen.streams_state_get_v1(jsonb, uuid), queen.streams_cycle_request_v1(jsonb, uuid),
    queen.streams_cycle_v1(jsonb, uuid), queen.streams_delete_query_v1(text, uuid),
    queen.streams_orphans_step_v1(int) TO queen_broker;

-- sql/system.sql: the maintenance modes and the spool replay marks.
-- State shared by every broker of a database (docs/availability.md): the two maintenance
-- modes and the replay marks of the brokers' push spools. Both live in
-- queen.maintenance_state (a key → jsonb table, a reference table on Citus), so this file
-- adds functions only. The time of a write is a parameter: Citus refuses a function call
-- in a modification of a reference table.

-- The maintenance modes: {"maintenanceMode": bool, "popMaintenanceMode": bool,
-- "updatedAt": text|null}. A mode never set is off.
CREATE FUNCTION queen.system_state_v1() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'maintenanceMode', COALESCE(bool_or((s.value->>'enabled')::bool)
                                    FILTER (WHERE s.key = 'maintenance_mode'), false),
        'popMaintenanceMode', COALESCE(bool_or((s.value->>'enabled')::bool)
                                       FILTER (WHERE s.key = 'pop_maintenance_mode'), false),
        'updatedAt', queen.iso_ms(max(s.updated_at)))
      FROM queen.maintenance_state s
     WHERE s.key IN ('maintenance_mode', 'pop_maintenance_mode')
$$;

-- Switches one mode: p_mode 'push' (Queen's maintenance mode: pushes go to the brokers'
-- spools, the database is left alone) or 'pop' (pops answer empty). Returns the modes.
CREATE FUNCTION queen.system_state_set_v1(p_mode text, p_enabled bool,
                                          p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text := CASE p_mode WHEN 'push' THEN 'maintenance_mode'
                              WHEN 'pop' THEN 'pop_maintenance_mode' END;
BEGIN
    IF v_key IS NULL THEN
        RAISE EXCEPTION 'system_state_set_v1: p_mode must be push or pop, got %',
            COALESCE(quote_literal(p_mode), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_enabled IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'system_state_set_v1: p_enabled and p_now must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO queen.maintenance_state AS s (key, value, updated_at)
    VALUES (v_key, jsonb_build_object('enabled', p_enabled), p_now)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
    RETURN queen.system_state_v1();
END $$;

-- The replay mark of one broker's spool: the sequence number of the last spool record
-- whose push committed (0: none yet). The broker moves it in the transaction that pushes
-- the records, so a replay cut off anywhere resumes exactly after what committed.
CREATE FUNCTION queen.spool_mark_v1(p_spool uuid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE((SELECT (s.value->>'seq')::bigint FROM queen.maintenance_state s
                      WHERE s.key = 'spool:' || p_spool::text), 0)
$$;

-- Moves the mark forward (never back: an older value leaves it as it is). Returns the mark.
CREATE FUNCTION queen.spool_mark_set_v1(p_spool uuid, p_seq bigint,
                                        p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_spool IS NULL OR p_seq IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'spool_mark_set_v1: p_spool, p_seq and p_now must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_seq < 1 THEN
        RAISE EXCEPTION 'spool_mark_set_v1: p_seq must be >= 1, got %', p_seq
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO queen.maintenance_state AS s (key, value, updated_at)
    VALUES ('spool:' || p_spool::text, jsonb_build_object('seq', p_seq), p_now)
    ON CONFLICT (key) DO UPDATE SET value = s.value || EXCLUDED.value,
                                    updated_at = EXCLUDED.updated_at
     WHERE COALESCE((s.value->>'seq')::bigint, 0) < (EXCLUDED.value->>'seq')::bigint;
    RETURN queen.spool_mark_v1(p_spool);
END $$;

-- A push spool's hold on the sidecar purge: while the spool holds a push that may have
-- been written before it was spooled (its connection ended under the statement), no
-- sidecar row created after p_since is purged, so the replay finds the original however
-- long the outage lasted. NULL releases it. Returns the hold.
CREATE FUNCTION queen.spool_hold_v1(p_spool uuid, p_since timestamptz,
                                    p_now timestamptz DEFAULT now())
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_spool IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'spool_hold_v1: p_spool and p_now must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO queen.maintenance_state AS s (key, value, updated_at)
    VALUES ('spool:' || p_spool::text,
            CASE WHEN p_since IS NULL THEN '{}'::jsonb
                 ELSE jsonb_build_object('holdSince', p_since) END, p_now)
    ON CONFLICT (key) DO UPDATE SET value = (s.value - 'holdSince') || EXCLUDED.value,
                                    updated_at = EXCLUDED.updated_at;
    RETURN p_since;
END $$;

REVOKE ALL ON FUNCTION queen.system_state_v1(), queen.system_state_set_v1(text, bool, timestamptz),
    queen.spool_mark_v1(uuid), queen.spool_mark_set_v1(uuid, bigint, timestamptz),
    queen.spool_hold_v1(uuid, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.system_state_v1(),
    queen.system_state_set_v1(text, bool, timestamptz), queen.spool_mark_v1(uuid),
    queen.spool_mark_set_v1(uuid, bigint, timestamptz),
    queen.spool_hold_v1(uuid, timestamptz, timestamptz) TO queen_broker;

-- ---------------------------------------------------------------------------------
-- The sampled history of the status and analytics routes (sql/history.sql).
-- The sampled history behind the status and analytics routes (docs/observability.md).
-- Brokers write it from their own counters, off the hot path: every broker adds its
-- counters' growth into its row of the current minute (history_record_v1), the first
-- broker of a minute files a snapshot of every queue (history_queues_v1), and
-- run_maintenance files its own report (history_lifecycle_v1) and trims what is older
-- than the GUC queen.history_retention (default 7 days). No push, pop or ack statement
-- reads or writes these tables. On Citus they stay local tables of the coordinator,
-- where the brokers connect: they are small and only ever read there.

-- One row per broker and minute. Counters are what happened in that minute; gauges are
-- summed over the samples taken in it (average = sum / samples) with their extreme.
CREATE TABLE queen.history_brokers (
    bucket timestamptz NOT NULL,
    broker text NOT NULL,
    hostname text NOT NULL,
    port int NOT NULL,
    pid int NOT NULL,
    samples int NOT NULL DEFAULT 0,
    push_requests bigint NOT NULL DEFAULT 0,
    push_messages bigint NOT NULL DEFAULT 0,
    pop_requests bigint NOT NULL DEFAULT 0,
    pop_messages bigint NOT NULL DEFAULT 0,
    pop_empty bigint NOT NULL DEFAULT 0,
    ack_requests bigint NOT NULL DEFAULT 0,
    ack_messages bigint NOT NULL DEFAULT 0,
    ack_failed bigint NOT NULL DEFAULT 0,
    transactions bigint NOT NULL DEFAULT 0,
    dlq bigint NOT NULL DEFAULT 0,
    server_errors bigint NOT NULL DEFAULT 0,
    db_errors bigint NOT NULL DEFAULT 0,
    cpu_user_us bigint NOT NULL DEFAULT 0,
    cpu_system_us bigint NOT NULL DEFAULT 0,
    rss_bytes_sum bigint NOT NULL DEFAULT 0,
    rss_bytes_max bigint NOT NULL DEFAULT 0,
    pool_size_sum bigint NOT NULL DEFAULT 0,
    pool_idle_sum bigint NOT NULL DEFAULT 0,
    pool_idle_min int,
    parked_sum bigint NOT NULL DEFAULT 0,
    parked_max int NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, broker)
);

-- One row per queue and minute: a snapshot of what the database holds. `pushed` and
-- `consumed` only grow (offsets ever assigned; messages consumed over every group), so a
-- minute's traffic is the difference from the snapshot before it.
CREATE TABLE queen.history_queues (
    bucket timestamptz NOT NULL,
    queue_id uuid NOT NULL,
    tenant_id uuid,
    queue text NOT NULL,
    namespace text,
    task text,
    partitions int NOT NULL,
    groups int NOT NULL,
    messages bigint NOT NULL,
    pushed bigint NOT NULL,
    consumed bigint NOT NULL,
    lag bigint NOT NULL,
    oldest_age_s bigint,
    dlq bigint NOT NULL,
    dlq_partitions int NOT NULL DEFAULT 0,
    leases int NOT NULL DEFAULT 0,
    leased_partitions int NOT NULL DEFAULT 0,
    leased_messages bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue_id)
);
CREATE INDEX history_queues_queue ON queen.history_queues (queue_id, bucket);

-- One row per run_maintenance that ran: what retention removed, by cause.
CREATE TABLE queen.history_lifecycle (
    at timestamptz NOT NULL,
    messages bigint NOT NULL,
    expired_messages bigint NOT NULL,
    evicted bigint NOT NULL,
    segments bigint NOT NULL,
    sidecar_rows bigint NOT NULL,
    duration_ms numeric NOT NULL
);
CREATE INDEX history_lifecycle_at ON queen.history_lifecycle (at);

-- One row per broker, minute and queue with long-polls parked on it in that minute's
-- samples: the parked count summed over the samples (average = sum / the broker row's
-- samples: a sample without the queue counted 0) with its extreme. Only queues with a
-- parked long-poll get a row, so its size is bounded by the parked long-polls.
CREATE TABLE queen.history_parked (
    bucket timestamptz NOT NULL,
    broker text NOT NULL,
    tenant_id uuid NOT NULL,
    queue text NOT NULL,
    parked_sum bigint NOT NULL,
    parked_max int NOT NULL,
    PRIMARY KEY (bucket, broker, tenant_id, queue)
);

-- How long the history is kept: the GUC queen.history_retention (an interval), 7 days
-- when unset or unreadable.
CREATE FUNCTION queen.history_retention() RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN COALESCE(NULLIF(current_setting('queen.history_retention', true), '')::interval,
                    interval '7 days');
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
    RETURN interval '7 days';
END $$;

-- Adds one broker's sample to its row of p_now's minute: p_sample holds the counters'
-- growth since its last sample and the gauges now (keys as the columns, camelCase).
CREATE FUNCTION queen.history_record_v1(p_broker text, p_hostname text, p_port int, p_pid int,
                                        p_sample jsonb, p_now timestamptz DEFAULT now())
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s jsonb := p_sample;
    v_bucket timestamptz := date_trunc('minute', p_now);
BEGIN
    IF p_broker IS NULL OR p_hostname IS NULL OR p_port IS NULL OR p_pid IS NULL
       OR p_sample IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'history_record_v1: no argument may be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(p_sample) <> 'object' THEN
        RAISE EXCEPTION 'history_record_v1: p_sample must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO queen.history_brokers AS h (
        bucket, broker, hostname, port, pid, samples,
        push_requests, push_messages, pop_requests, pop_messages, pop_empty,
        ack_requests, ack_messages, ack_failed, transactions, dlq, server_errors, db_errors,
        cpu_user_us, cpu_system_us, rss_bytes_sum, rss_bytes_max,
        pool_size_sum, pool_idle_sum, pool_idle_min, parked_sum, parked_max)
    VALUES (v_bucket, p_broker, p_hostname, p_port, p_pid, 1,
        COALESCE((s->>'pushRequests')::bigint, 0), COALESCE((s->>'pushMessages')::bigint, 0),
        COALESCE((s->>'popRequests')::bigint, 0), COALESCE((s->>'popMessages')::bigint, 0),
        COALESCE((s->>'popEmpty')::bigint, 0), COALESCE((s->>'ackRequests')::bigint, 0),
        COALESCE((s->>'ackMessages')::bigint, 0), COALESCE((s->>'ackFailed')::bigint, 0),
        COALESCE((s->>'transactions')::bigint, 0), COALESCE((s->>'dlq')::bigint, 0),
        COALESCE((s->>'serverErrors')::bigint, 0), COALESCE((s->>'dbErrors')::bigint, 0),
        COALESCE((s->>'cpuUserUs')::bigint, 0), COALESCE((s->>'cpuSystemUs')::bigint, 0),
        COALESCE((s->>'rssBytes')::bigint, 0), COALESCE((s->>'rssBytes')::bigint, 0),
        COALESCE((s->>'poolSize')::bigint, 0), COALESCE((s->>'poolIdle')::bigint, 0),
        (s->>'poolIdle')::int, COALESCE((s->>'parked')::bigint, 0),
        COALESCE((s->>'parked')::int, 0))
    ON CONFLICT (bucket, broker) DO UPDATE SET
        pid = EXCLUDED.pid,
        samples = h.samples + 1,
        push_requests = h.push_requests + EXCLUDED.push_requests,
        push_messages = h.push_messages + EXCLUDED.push_messages,
        pop_requests = h.pop_requests + EXCLUDED.pop_requests,
        pop_messages = h.pop_messages + EXCLUDED.pop_messages,
        pop_empty = h.pop_empty + EXCLUDED.pop_empty,
        ack_requests = h.ack_requests + EXCLUDED.ack_requests,
        ack_messages = h.ack_messages + EXCLUDED.ack_messages,
        ack_failed = h.ack_failed + EXCLUDED.ack_failed,
        transactions = h.transactions + EXCLUDED.transactions,
        dlq = h.dlq + EXCLUDED.dlq,
        server_errors = h.server_errors + EXCLUDED.server_errors,
        db_errors = h.db_errors + EXCLUDED.db_errors,
        cpu_user_us = h.cpu_user_us + EXCLUDED.cpu_user_us,
        cpu_system_us = h.cpu_system_us + EXCLUDED.cpu_system_us,
        rss_bytes_sum = h.rss_bytes_sum + EXCLUDED.rss_bytes_sum,
        rss_bytes_max = GREATEST(h.rss_bytes_max, EXCLUDED.rss_bytes_max),
        pool_size_sum = h.pool_size_sum + EXCLUDED.pool_size_sum,
        pool_idle_sum = h.pool_idle_sum + EXCLUDED.pool_idle_sum,
        pool_idle_min = LEAST(h.pool_idle_min, EXCLUDED.pool_idle_min),
        parked_sum = h.parked_sum + EXCLUDED.parked_sum,
        parked_max = GREATEST(h.parked_max, EXCLUDED.parked_max);
    -- The long-polls parked per queue: [{"tenantId", "queue", "parked"}].
    IF jsonb_typeof(s->'parkedQueues') = 'array' THEN
        INSERT INTO queen.history_parked AS h (bucket, broker, tenant_id, queue,
                                                parked_sum, parked_max)
        SELECT v_bucket, p_broker, (e->>'tenantId')::uuid, e->>'queue',
               sum((e->>'parked')::int), max((e->>'parked')::int)
          FROM jsonb_array_elements(s->'parkedQueues') e
         WHERE (e->>'parked')::int > 0
         GROUP BY 3, 4
        ON CONFLICT (bucket, broker, tenant_id, queue) DO UPDATE SET
            parked_sum = h.parked_sum + EXCLUDED.parked_sum,
            parked_max = GREATEST(h.parked_max, EXCLUDED.parked_max);
    ELSIF s ? 'parkedQueues' AND jsonb_typeof(s->'parkedQueues') <> 'null' THEN
        RAISE EXCEPTION 'history_record_v1: parkedQueues must be a JSON array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END $$;

-- Files p_now's minute snapshot of the queues (p_rows: one object per queue, keys as the
-- columns, camelCase), unless a broker already filed that minute; p_replace files it over
-- what was filed (a refresh asked for). Returns whether it filed.
CREATE FUNCTION queen.history_queues_v1(p_rows jsonb, p_now timestamptz DEFAULT now(),
                                        p_replace bool DEFAULT false)
RETURNS bool
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_bucket timestamptz := date_trunc('minute', p_now);
BEGIN
    IF p_rows IS NULL OR p_now IS NULL OR p_replace IS NULL
       OR jsonb_typeof(p_rows) <> 'array' THEN
        RAISE EXCEPTION 'history_queues_v1: p_rows must be a JSON array, p_now and p_replace not NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One filer per minute across brokers: the first to take the minute's lock files it.
    IF p_replace THEN
        PERFORM pg_advisory_xact_lock(1903519086, 3);
        DELETE FROM queen.history_queues WHERE bucket = v_bucket;
    ELSIF NOT pg_try_advisory_xact_lock(1903519086, 3)
          OR EXISTS (SELECT 1 FROM queen.history_queues WHERE bucket = v_bucket) THEN
        RETURN false;
    END IF;
    INSERT INTO queen.history_queues (bucket, queue_id, tenant_id, queue, namespace, task,
                                      partitions, groups, messages, pushed, consumed, lag,
                                      oldest_age_s, dlq, dlq_partitions, leases,
                                      leased_partitions, leased_messages)
    SELECT v_bucket, (r->>'queueId')::uuid, (r->>'tenantId')::uuid, r->>'queue',
           r->>'namespace', r->>'task', (r->>'partitions')::int, (r->>'groups')::int,
           (r->>'messages')::bigint, (r->>'pushed')::bigint, (r->>'consumed')::bigint,
           (r->>'lag')::bigint, (r->>'oldestAgeS')::bigint, (r->>'dlq')::bigint,
           COALESCE((r->>'dlqPartitions')::int, 0), COALESCE((r->>'leases')::int, 0),
           COALESCE((r->>'leasedPartitions')::int, 0),
           COALESCE((r->>'leasedMessages')::bigint, 0)
      FROM jsonb_array_elements(p_rows) r
    ON CONFLICT DO NOTHING;
    RETURN true;
END $$;

-- run_maintenance's report into the history, and the trim of everything older than the
-- history's retention. Called by run_maintenance when it ran.
CREATE FUNCTION queen.history_lifecycle_v1(p_report jsonb, p_now timestamptz DEFAULT now())
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cut timestamptz := p_now - queen.history_retention();
BEGIN
    INSERT INTO queen.history_lifecycle (at, messages, expired_messages, evicted, segments,
                                         sidecar_rows, duration_ms)
    VALUES (p_now, COALESCE((p_report->>'messages')::bigint, 0),
            COALESCE((p_report->>'expiredMessages')::bigint, 0),
            -- lost unconsumed: to retention rule 1 and to maxWaitTimeSeconds
            COALESCE((p_report->>'evicted')::bigint, 0) + COALESCE((p_report->>'waitEvicted')::bigint, 0),
            COALESCE((p_report->>'segments')::bigint, 0),
            COALESCE((p_report->>'sidecarRows')::bigint, 0),
            COALESCE((p_report->>'durationMs')::numeric, 0));
    DELETE FROM queen.history_brokers WHERE bucket < v_cut;
    DELETE FROM queen.history_parked WHERE bucket < v_cut;
    DELETE FROM queen.history_queues WHERE bucket < v_cut;
    DELETE FROM queen.history_lifecycle WHERE at < v_cut;
END $$;

-- The brokers' rows of [p_from, p_to], rolled up into p_bucket wide buckets per broker.
CREATE FUNCTION queen.history_brokers_v1(p_from timestamptz, p_to timestamptz, p_bucket interval)
RETURNS TABLE(r_bucket timestamptz, r_broker text, r_hostname text, r_port int,
              r_samples bigint, r_push_requests bigint, r_push_messages bigint,
              r_pop_requests bigint, r_pop_messages bigint, r_pop_empty bigint,
              r_ack_requests bigint, r_ack_messages bigint, r_ack_failed bigint,
              r_transactions bigint, r_dlq bigint, r_server_errors bigint, r_db_errors bigint,
              r_cpu_user_us bigint, r_cpu_system_us bigint, r_rss_bytes_avg bigint,
              r_rss_bytes_max bigint, r_pool_size_avg numeric, r_pool_idle_avg numeric,
              r_pool_idle_min int, r_parked_avg numeric, r_parked_max int)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT date_bin(p_bucket, h.bucket, timestamptz '2000-01-01') AS b, h.broker,
           max(h.hostname), max(h.port),
           sum(h.samples)::bigint, sum(h.push_requests)::bigint, sum(h.push_messages)::bigint,
           sum(h.pop_requests)::bigint, sum(h.pop_messages)::bigint, sum(h.pop_empty)::bigint,
           sum(h.ack_requests)::bigint, sum(h.ack_messages)::bigint, sum(h.ack_failed)::bigint,
           sum(h.transactions)::bigint, sum(h.dlq)::bigint, sum(h.server_errors)::bigint,
           sum(h.db_errors)::bigint, sum(h.cpu_user_us)::bigint, sum(h.cpu_system_us)::bigint,
           (sum(h.rss_bytes_sum) / NULLIF(sum(h.samples), 0))::bigint, max(h.rss_bytes_max),
           round(sum(h.pool_size_sum)::numeric / NULLIF(sum(h.samples), 0), 1),
           round(sum(h.pool_idle_sum)::numeric / NULLIF(sum(h.samples), 0), 1),
           min(h.pool_idle_min),
           round(sum(h.parked_sum)::numeric / NULLIF(sum(h.samples), 0), 2), max(h.parked_max)
      FROM queen.history_brokers h
     WHERE h.bucket >= date_trunc('minute', p_from) AND h.bucket <= p_to
     GROUP BY 1, 2
     ORDER BY 1, 2
$$;

-- The long-polls parked per queue and broker over [p_from, p_to] in p_bucket wide
-- buckets: the average over the broker's samples of the bucket (Queen's
-- queue-parked-replicas) and the extreme. p_tenant and p_queue narrow it (NULL: all).
CREATE FUNCTION queen.history_parked_series_v1(p_from timestamptz, p_to timestamptz,
                                               p_bucket interval, p_tenant uuid, p_queue text)
RETURNS TABLE(r_bucket timestamptz, r_queue text, r_broker text, r_hostname text,
              r_parked_avg numeric, r_parked_max int)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH parked AS (
        SELECT date_bin(p_bucket, p.bucket, timestamptz '2000-01-01') AS b, p.broker,
               p.queue, sum(p.parked_sum) AS parked_sum, max(p.parked_max) AS parked_max
          FROM queen.history_parked p
         WHERE p.bucket >= date_trunc('minute', p_from) AND p.bucket <= p_to
           AND (p_tenant IS NULL OR p.tenant_id = p_tenant)
           AND (p_queue IS NULL OR p.queue = p_queue)
         GROUP BY 1, 2, 3
    ),
    samples AS (
        SELECT date_bin(p_bucket, h.bucket, timestamptz '2000-01-01') AS b, h.broker,
               max(h.hostname) AS hostname, sum(h.samples) AS samples
          FROM queen.history_brokers h
         WHERE h.bucket >= date_trunc('minute', p_from) AND h.bucket <= p_to
           AND h.broker IN (SELECT broker FROM parked)
         GROUP BY 1, 2
    )
    SELECT p.b, p.queue, p.broker, s.hostname,
           round(p.parked_sum::numeric / NULLIF(s.samples, 0), 2), p.parked_max
      FROM parked p JOIN samples s ON s.b = p.b AND s.broker = p.broker
     ORDER BY p.b, p.queue COLLATE "C", p.broker COLLATE "C"
$$;

-- The queues' traffic of [p_from, p_to] in p_bucket wide buckets: pushes and
-- consumptions are the growth from the snapshot before (a queue recreated, or partitions
-- removed, count 0, never negative); lag, age, DLQ and the running totals are the
-- bucket's last snapshot.
-- p_tenant and p_queue narrow it (NULL: all).
CREATE FUNCTION queen.history_queues_series_v1(p_from timestamptz, p_to timestamptz,
                                               p_bucket interval, p_tenant uuid, p_queue text)
RETURNS TABLE(r_bucket timestamptz, r_queue text, r_namespace text, r_task text,
              r_pushed bigint, r_consumed bigint, r_partitions int, r_groups int,
              r_messages bigint, r_lag bigint, r_oldest_age_s bigint, r_dlq bigint,
              r_dlq_partitions int, r_leases int, r_leased_partitions int,
              r_leased_messages bigint, r_pushed_total bigint, r_consumed_total bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Its sorts stay in memory at 60,000 snapshots (1,000 queues, an hour): measured, see
-- docs/benchmarks.md.
SET work_mem = '32MB'
AS $$
    WITH inside AS (
        SELECT h.* FROM queen.history_queues h
         WHERE h.bucket >= date_trunc('minute', p_from) AND h.bucket <= p_to
           AND (p_tenant IS NULL OR h.tenant_id = p_tenant)
           AND (p_queue IS NULL OR h.queue = p_queue)
    ),
    -- Each queue's snapshot before the range (however long before: a gap in the
    -- sampling), the base of its first bucket's growth. One index probe per queue.
    base AS (
        SELECT p.* FROM (SELECT DISTINCT queue_id FROM inside) q
         CROSS JOIN LATERAL (SELECT h.* FROM queen.history_queues h
                              WHERE h.queue_id = q.queue_id
                                AND h.bucket < date_trunc('minute', p_from)
                              ORDER BY h.bucket DESC LIMIT 1) p
    ),
    snaps AS (
        SELECT h.*, date_bin(p_bucket, h.bucket, timestamptz '2000-01-01') AS b,
               GREATEST(h.pushed - lag(h.pushed) OVER w, 0) AS d_pushed,
               GREATEST(h.consumed - lag(h.consumed) OVER w, 0) AS d_consumed,
               row_number() OVER (PARTITION BY h.queue_id, date_bin(p_bucket, h.bucket,
                                  timestamptz '2000-01-01') ORDER BY h.bucket DESC) AS newest
          FROM (SELECT * FROM inside UNION ALL SELECT * FROM base) h
        WINDOW w AS (PARTITION BY h.queue_id ORDER BY h.bucket)
    )
    SELECT s.b, max(s.queue), max(s.namespace), max(s.task),
           COALESCE(sum(s.d_pushed), 0)::bigint, COALESCE(sum(s.d_consumed), 0)::bigint,
           max(s.partitions) FILTER (WHERE s.newest = 1),
           max(s.groups) FILTER (WHERE s.newest = 1),
           max(s.messages) FILTER (WHERE s.newest = 1),
           max(s.lag) FILTER (WHERE s.newest = 1),
           max(s.oldest_age_s) FILTER (WHERE s.newest = 1),
           max(s.dlq) FILTER (WHERE s.newest = 1),
           max(s.dlq_partitions) FILTER (WHERE s.newest = 1),
           max(s.leases) FILTER (WHERE s.newest = 1),
           max(s.leased_partitions) FILTER (WHERE s.newest = 1),
           max(s.leased_messages) FILTER (WHERE s.newest = 1),
           max(s.pushed) FILTER (WHERE s.newest = 1),
           max(s.consumed) FILTER (WHERE s.newest = 1)
      FROM snaps s
     WHERE s.bucket >= date_trunc('minute', p_from)
     GROUP BY s.b, s.queue_id
     ORDER BY s.b, max(s.queue) COLLATE "C"
$$;

-- The age of the oldest unconsumed message over every queue (p_tenant's, or all) in
-- p_bucket wide buckets of [p_from, p_to]: one pass, no per-queue ordering, for the whole
-- system's throughput series.
CREATE FUNCTION queen.history_lag_series_v1(p_from timestamptz, p_to timestamptz,
                                            p_bucket interval, p_tenant uuid)
RETURNS TABLE(r_bucket timestamptz, r_max_age_s bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT date_bin(p_bucket, h.bucket, timestamptz '2000-01-01'), max(h.oldest_age_s)
      FROM queen.history_queues h
     WHERE h.bucket >= date_trunc('minute', p_from) AND h.bucket <= p_to
       AND (p_tenant IS NULL OR h.tenant_id = p_tenant)
     GROUP BY 1 ORDER BY 1
$$;

-- Per queue over the whole of [p_from, p_to]: what it took and consumed, net (its last
-- snapshot's totals less those of the snapshot before the range, or of its first in it:
-- a partition removed in between lowers it, where history_queues_series_v1 counts the
-- buckets before the removal), and the oldest age seen. One pass, no per-row ordering.
CREATE FUNCTION queen.history_queue_totals_v1(p_from timestamptz, p_to timestamptz,
                                              p_tenant uuid)
RETURNS TABLE(r_queue text, r_pushed bigint, r_consumed bigint, r_max_age_s bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH inside AS (
        SELECT h.queue_id, max(h.queue) AS queue, min(h.bucket) AS first_at,
               max(h.oldest_age_s) AS max_age,
               (array_agg(h.pushed ORDER BY h.bucket DESC))[1] AS last_pushed,
               (array_agg(h.consumed ORDER BY h.bucket DESC))[1] AS last_consumed,
               (array_agg(h.pushed ORDER BY h.bucket))[1] AS first_pushed,
               (array_agg(h.consumed ORDER BY h.bucket))[1] AS first_consumed
          FROM queen.history_queues h
         WHERE h.bucket >= date_trunc('minute', p_from) AND h.bucket <= p_to
           AND (p_tenant IS NULL OR h.tenant_id = p_tenant)
         GROUP BY h.queue_id
    )
    SELECT i.queue,
           GREATEST(i.last_pushed - COALESCE(b.pushed, i.first_pushed), 0),
           GREATEST(i.last_consumed - COALESCE(b.consumed, i.first_consumed), 0),
           i.max_age
      FROM inside i
      LEFT JOIN LATERAL (SELECT h.pushed, h.consumed FROM queen.history_queues h
                          WHERE h.queue_id = i.queue_id AND h.bucket < i.first_at
                          ORDER BY h.bucket DESC LIMIT 1) b ON true
     ORDER BY 3 DESC, i.queue COLLATE "C"
$$;

-- Messages pushed per minute into each of p_queues over [p_from, p_to] (the growth between
-- a queue's consecutive snapshots, never negative), for the console's sparklines: one
-- index range and one probe per queue.
CREATE FUNCTION queen.history_pushed_v1(p_from timestamptz, p_to timestamptz, p_queues uuid[])
RETURNS TABLE(r_queue_id uuid, r_bucket timestamptz, r_pushed bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.queue_id, s.bucket, s.d FROM (
        SELECT h.queue_id, h.bucket,
               GREATEST(h.pushed - lag(h.pushed) OVER (PARTITION BY h.queue_id ORDER BY h.bucket), 0) AS d
          FROM unnest(p_queues) q(id)
          CROSS JOIN LATERAL (
                (SELECT x.queue_id, x.bucket, x.pushed FROM queen.history_queues x
                  WHERE x.queue_id = q.id AND x.bucket >= date_trunc('minute', p_from)
                    AND x.bucket <= p_to)
                UNION ALL
                -- The snapshot before the range, however far back: its first minute's base.
                (SELECT x.queue_id, x.bucket, x.pushed FROM queen.history_queues x
                  WHERE x.queue_id = q.id AND x.bucket < date_trunc('minute', p_from)
                  ORDER BY x.bucket DESC LIMIT 1)) h) s
     WHERE s.bucket >= date_trunc('minute', p_from)
     ORDER BY s.queue_id, s.bucket
$$;

-- What retention removed in [p_from, p_to], in p_bucket wide buckets.
CREATE FUNCTION queen.history_lifecycle_series_v1(p_from timestamptz, p_to timestamptz,
                                                  p_bucket interval)
RETURNS TABLE(r_bucket timestamptz, r_runs bigint, r_messages bigint,
              r_expired_messages bigint, r_evicted bigint, r_segments bigint,
              r_sidecar_rows bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT date_bin(p_bucket, l.at, timestamptz '2000-01-01'), count(*),
           sum(l.messages)::bigint, sum(l.expired_messages)::bigint, sum(l.evicted)::bigint,
           sum(l.segments)::bigint, sum(l.sidecar_rows)::bigint
      FROM queen.history_lifecycle l
     WHERE l.at >= p_from AND l.at <= p_to
     GROUP BY 1 ORDER BY 1
$$;

-- PostgreSQL's own view of the extension's tables, in the keys of Queen's
-- /api/v1/analytics/postgres-stats: cache hit ratios, dead tuples, HOT updates, the
-- statements running over a second in this database, autovacuum, shared_buffers and the
-- sizes of every table of the schema (a fixed set, largest first: a top 20 left out
-- log_segments once the schema had more tables). Bounded: catalog and statistics views
-- only. pg_buffercache is not read (bufferUsage is always empty).
CREATE FUNCTION queen.postgres_stats_v1() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'timestamp', queen.iso_ms(now()),
        'database', current_database(),
        'databaseCache', (
            SELECT jsonb_build_object('database', d.datname, 'diskReads', d.blks_read,
                       'cacheHits', d.blks_hit,
                       'cacheHitRatio', round(d.blks_hit::numeric
                                              / NULLIF(d.blks_hit + d.blks_read, 0) * 100, 2))
              FROM pg_stat_database d WHERE d.datname = current_database()),
        'tableCache', COALESCE((
            SELECT jsonb_agg(jsonb_build_object('schema', t.schemaname, 'table', t.relname,
                       'diskReads', t.heap_blks_read, 'cacheHits', t.heap_blks_hit,
                       'cacheHitRatio', round(t.heap_blks_hit::numeric
                           / NULLIF(t.heap_blks_hit + t.heap_blks_read, 0) * 100, 2))
                       ORDER BY t.heap_blks_read DESC NULLS LAST)
              FROM pg_statio_user_tables t WHERE t.schemaname = 'queen'), '[]'),
        'indexCache', COALESCE((
            SELECT jsonb_agg(x ORDER BY (x->>'diskReads')::bigint DESC NULLS LAST) FROM (
                SELECT jsonb_build_object('schema', i.schemaname, 'table', i.relname,
                           'index', i.indexrelname, 'diskReads', i.idx_blks_read,
                           'cacheHits', i.idx_blks_hit,
                           'cacheHitRatio', round(i.idx_blks_hit::numeric
                               / NULLIF(i.idx_blks_hit + i.idx_blks_read, 0) * 100, 2)) AS x
                  FROM pg_statio_user_indexes i WHERE i.schemaname = 'queen'
                 ORDER BY i.idx_blks_read DESC NULLS LAST LIMIT 20) s), '[]'),
        'cacheSummary', jsonb_build_object(
            'tables', (SELECT jsonb_build_object('diskReads', sum(heap_blks_read),
                           'cacheHits', sum(heap_blks_hit),
                           'hitRatio', round(sum(heap_blks_hit)::numeric
                               / NULLIF(sum(heap_blks_hit) + sum(heap_blks_read), 0) * 100, 2))
                         FROM pg_statio_user_tables WHERE schemaname = 'queen'),
            'indexes', (SELECT jsonb_build_object('diskReads', sum(idx_blks_read),
                            'cacheHits', sum(idx_blks_hit),
                            'hitRatio', round(sum(idx_blks_hit)::numeric
                                / NULLIF(sum(idx_blks_hit) + sum(idx_blks_read), 0) * 100, 2))
                          FROM pg_statio_user_indexes WHERE schemaname = 'queen')),
        'deadTuples', COALESCE((
            SELECT jsonb_agg(x) FROM (
                SELECT jsonb_build_object('schema', t.schemaname, 'table', t.relname,
                           'deadTuples', t.n_dead_tup, 'liveTuples', t.n_live_tup,
                           'deadPercentage', round(t.n_dead_tup::numeric
                                                   / NULLIF(t.n_live_tup, 0) * 100, 2),
                           'lastVacuum', queen.iso_ms(t.last_vacuum),
                           'lastAutovacuum', queen.iso_ms(t.last_autovacuum)) AS x
                  FROM pg_stat_user_tables t
                 WHERE t.schemaname = 'queen' AND t.n_dead_tup > 0
                 ORDER BY t.n_dead_tup DESC LIMIT 15) s), '[]'),
        'hotUpdates', COALESCE((
            SELECT jsonb_agg(x) FROM (
                SELECT jsonb_build_object('schema', t.schemaname, 'table', t.relname,
                           'totalUpdates', t.n_tup_upd, 'hotUpdates', t.n_tup_hot_upd,
                           'hotUpdatePercentage', round(t.n_tup_hot_upd::numeric
                                                        / NULLIF(t.n_tup_upd, 0) * 100, 2)) AS x
                  FROM pg_stat_user_tables t
                 WHERE t.schemaname = 'queen' AND t.n_tup_upd > 0
                 ORDER BY t.n_tup_upd DESC LIMIT 15) s), '[]'),
        'activeQueries', COALESCE((
            SELECT jsonb_agg(x) FROM (
                SELECT jsonb_build_object('pid', a.pid,
                           'duration', extract(epoch FROM now() - a.query_start),
                           'state', a.state, 'query', left(a.query, 200),
                           'waitEventType', a.wait_event_type, 'waitEvent', a.wait_event) AS x
                  FROM pg_stat_activity a
                 WHERE a.datname = current_database() AND a.state <> 'idle'
                   AND a.query_start < now() - interval '1 second'
                   AND a.pid <> pg_backend_pid()
                 ORDER BY a.query_start LIMIT 10) s), '[]'),
        'autovacuumStatus', COALESCE((
            SELECT jsonb_agg(x) FROM (
                SELECT jsonb_build_object('table', t.relname,
                           'lastAutovacuum', queen.iso_ms(t.last_autovacuum),
                           'deadTuples', t.n_dead_tup, 'autovacuumCount', t.autovacuum_count,
                           'autoanalyzeCount', t.autoanalyze_count) AS x
                  FROM pg_stat_user_tables t
                 WHERE t.schemaname = 'queen' AND t.n_dead_tup > 1000
                 ORDER BY t.n_dead_tup DESC LIMIT 10) s), '[]'),
        'bufferConfig', (SELECT jsonb_build_object('sharedBuffers', s.setting,
                             'sharedBuffersSize', pg_size_pretty(s.setting::bigint * 8192))
                           FROM pg_settings s WHERE s.name = 'shared_buffers'),
        'bufferUsage', '[]'::jsonb,
        'tableSizes', COALESCE((
            SELECT jsonb_agg(x) FROM (
                SELECT jsonb_build_object('table', c.relname,
                           'totalSize', pg_size_pretty(pg_total_relation_size(c.oid)),
                           'totalSizeBytes', pg_total_relation_size(c.oid),
                           'tableSize', pg_size_pretty(pg_relation_size(c.oid)),
                           'tableSizeBytes', pg_relation_size(c.oid),
                           'indexSize', pg_size_pretty(pg_indexes_size(c.oid)),
                           'indexSizeBytes', pg_indexes_size(c.oid)) AS x
                  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'p')
                 ORDER BY pg_total_relation_size(c.oid) DESC, c.relname) s), '[]'))
$$;

REVOKE ALL ON FUNCTION queen.history_retention(),
    queen.history_record_v1(text, text, int, int, jsonb, timestamptz),
    queen.history_queues_v1(jsonb, timestamptz, bool), queen.history_lifecycle_v1(jsonb, timestamptz),
    queen.history_brokers_v1(timestamptz, timestamptz, interval),
    queen.history_parked_series_v1(timestamptz, timestamptz, interval, uuid, text),
    queen.history_queues_series_v1(timestamptz, timestamptz, interval, uuid, text),
    queen.history_lifecycle_series_v1(timestamptz, timestamptz, interval),
    queen.history_lag_series_v1(timestamptz, timestamptz, interval, uuid),
    queen.history_queue_totals_v1(timestamptz, timestamptz, uuid),
    queen.history_pushed_v1(timestamptz, timestamptz, uuid[]),
    queen.postgres_stats_v1() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.history_retention(),
    queen.history_record_v1(text, text, int, int, jsonb, timestamptz),
    queen.history_queues_v1(jsonb, timestamptz, bool), queen.history_lifecycle_v1(jsonb, timestamptz),
    queen.history_brokers_v1(timestamptz, timestamptz, interval),
    queen.history_parked_series_v1(timestamptz, timestamptz, interval, uuid, text),
    queen.history_queues_series_v1(timestamptz, timestamptz, interval, uuid, text),
    queen.history_lifecycle_series_v1(timestamptz, timestamptz, interval),
    queen.history_lag_series_v1(timestamptz, timestamptz, interval, uuid),
    queen.history_queue_totals_v1(timestamptz, timestamptz, uuid),
    queen.history_pushed_v1(timestamptz, timestamptz, uuid[]),
    queen.postgres_stats_v1() TO queen_broker;


-- The hot path's functions plan without bitmap scans (sql/plan_settings.sql).
-- The functions of the push, pop and ack paths plan without bitmap scans (docs/decisions.md,
-- "Plans of the hot path"). Their statements look up one row, or a short range, by a key,
-- in tables that are often small (a queue of a few partitions): there PostgreSQL prefers a
-- bitmap scan, whose set-up alone costs more than an index scan's whole run, and every
-- statement sets its plan up anew. Off, a batch-1 consume cycle took 20 % fewer
-- instructions (1.55M -> 1.23M, callgrind). Set per function, so nothing else a session
-- runs is touched; enable_bitmapscan = off makes a bitmap scan the last choice, never
-- refused.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'queen'::regnamespace
                AND p.proname = ANY (ARRAY[
                    'push', 'pop', 'ack',
                    'log_push_one_v1', 'log_push_at_v1', 'log_push_multi_v1',
                    'log_pop_v1', 'log_pop_queue_v1', 'log_pop_at_v1', 'broker_pop_v1',
                    'fetch_v1', 'fetch_partition_v1',
                    'log_ack_v1', 'log_ack_at_v1', 'log_ack_multi_v1', 'log_ack_by_hash_v1',
                    'log_ack_by_hash_v2', 'log_ack_by_hash_delay_v1', 'log_dlq_head_v1',
                    'log_transaction_wire_v1'])
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_bitmapscan = off', f);
    END LOOP;
END $$;

-- A library per version (sql/library.sql): 0.2.0's C functions run queen_ack-0.2.0.so
-- (the ones above name it); every C function of 0.1.0 not re-created above moves there
-- too. Last, so that nothing of 0.1.0's library is left behind.
-- A library per version (docs/operations.md, "Upgrading"): the C functions of version V
-- run queen_ack-V.so, named by V's install script, so that a database still at an older
-- version keeps running its own library after a newer one is installed. An upgrade step
-- to V re-creates the C functions it changes with V's library and ends with
-- relink_library_v1('queen_ack-V'), which moves every other C function of the extension
-- there too: after ALTER EXTENSION queen_ack UPDATE no function runs an older library.
-- Superuser only (it creates C functions); not granted to queen_broker.
CREATE FUNCTION queen.relink_library_v1(p_library text)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f regprocedure;
    v_def text;
    v_new text;
    n int := 0;
BEGIN
    IF p_library IS NULL OR p_library !~ '^queen_ack-[0-9]+\.[0-9]+\.[0-9]+$' THEN
        RAISE EXCEPTION 'relink_library_v1: p_library must be queen_ack-MAJOR.MINOR.PATCH, got %',
                        COALESCE(quote_literal(p_library), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR f IN SELECT p.oid::regprocedure
               FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                              AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'queen_ack'
              WHERE p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
                AND p.probin IS DISTINCT FROM p_library
              ORDER BY p.oid
    LOOP
        -- The function exactly as it is (arguments, result, flags, settings, symbol),
        -- with only its library replaced; its grants and comment stay.
        v_def := pg_get_functiondef(f);
        v_new := regexp_replace(v_def, E'\nAS ''[^'']*'', ',
                                E'\nAS ' || quote_literal(p_library) || ', ');
        IF v_new = v_def THEN
            RAISE EXCEPTION 'relink_library_v1: no library found in the definition of %', f
                USING ERRCODE = 'internal_error';
        END IF;
        EXECUTE v_new;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
REVOKE ALL ON FUNCTION queen.relink_library_v1(text) FROM PUBLIC;
SELECT queen.relink_library_v1('queen_ack-0.2.0');
