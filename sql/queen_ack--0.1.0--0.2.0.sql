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


-- Leases move to an UNLOGGED table (issue 13.5): claiming a lease writes no WAL, a pop
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
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH renewed AS (
        UPDATE queen.log_leases
           SET lease_expires_at = GREATEST(lease_expires_at,
                   clock_timestamp() + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1)))
         WHERE worker_id = p_worker AND lease_expires_at > clock_timestamp()
        RETURNING lease_expires_at)
    SELECT jsonb_build_object('renewed', count(*),
                              'expiresAt', queen.iso_utc(min(lease_expires_at)))
      FROM renewed
$$;

CREATE OR REPLACE FUNCTION queen.log_renew_lease_tenant_v1(p_worker text, p_seconds int, p_tenant uuid)
RETURNS jsonb
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH renewed AS (
        UPDATE queen.log_leases c
           SET lease_expires_at = GREATEST(c.lease_expires_at,
                   clock_timestamp() + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1)))
         WHERE c.worker_id = p_worker AND c.lease_expires_at > clock_timestamp()
           AND EXISTS (SELECT 1 FROM queen.log_leases c2
                         JOIN queen.log_partitions p ON p.id = c2.partition_id
                         JOIN queen.queues q ON q.id = p.queue_id
                        WHERE c2.worker_id = p_worker AND c2.lease_expires_at > clock_timestamp()
                          AND q.tenant_id = p_tenant)
        RETURNING c.lease_expires_at)
    SELECT jsonb_build_object('renewed', count(*),
                              'expiresAt', queen.iso_utc(min(lease_expires_at)))
      FROM renewed
$$;

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
    SELECT worker_id FROM queen.log_leases
     WHERE partition_id = p_partition_id AND consumer_group = p_group
$$;

REVOKE ALL ON FUNCTION queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int),
                       queen.partitions_lookup_v1(uuid, text[], text[]),
                       queen.cursor_worker_v1(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int),
                          queen.partitions_lookup_v1(uuid, text[], text[]),
                          queen.cursor_worker_v1(uuid, text) TO queen_broker;

-- Log lifecycle (issue 11): retention, the purge clock's clamp, orphan cleanup, the
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
AS 'MODULE_PATHNAME', 'log_retention_step_v1_wrapper';

-- Where the orphan sweep stopped (it walks partition ids in order and wraps around).
CREATE TABLE queen.maintenance_state (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- One purge step for one partition (contract §10, §13): whole sidecar rows older than the
-- cutoff, from the low end, at most p_max_rows; txns_start moves past them. The cutoff is
-- clamped to now - GREATEST(dedup window, completed retention, 900 s) of the partition's
-- queue: hashes inside the window are what dedup and acks by id need.
CREATE OR REPLACE FUNCTION queen.log_txns_purge_step_v1(p_pid uuid, p_cutoff timestamptz, p_max_rows int)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_floor timestamptz;
    v_cut timestamptz;
    v_deleted int;
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
    v_cut := LEAST(p_cutoff, v_floor);
    -- created_at is monotone in base_offset, so "older than the cutoff" is a prefix.
    WITH victims AS (
        SELECT t.base_offset FROM queen.log_txns t
         WHERE t.partition_id = p_pid AND t.created_at < v_cut
         ORDER BY t.base_offset LIMIT p_max_rows),
    gone AS (
        DELETE FROM queen.log_txns t USING victims v
         WHERE t.partition_id = p_pid AND t.base_offset = v.base_offset
        RETURNING t.end_offset)
    SELECT count(*), max(end_offset) INTO v_deleted, v_end FROM gone;
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
    v_orphans uuid[];
    v_txns int := 0;
    v_dlq int := 0;
BEGIN
    IF p_max_rows IS NULL OR p_max_rows < 1 THEN
        RAISE EXCEPTION 'log_orphans_step_v1: p_max_rows must be >= 1, got %', p_max_rows
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT (value->>'from')::uuid INTO v_from FROM queen.maintenance_state WHERE key = 'orphans';
    v_from := COALESCE(v_from, '00000000-0000-0000-0000-000000000000');
    -- The next distinct partition ids of both tables after v_from.
    WITH RECURSIVE t(id) AS (
        (SELECT partition_id FROM queen.log_txns WHERE partition_id > v_from ORDER BY partition_id LIMIT 1)
        UNION ALL
        SELECT (SELECT x.partition_id FROM queen.log_txns x WHERE x.partition_id > t.id
                 ORDER BY x.partition_id LIMIT 1)
          FROM t WHERE t.id IS NOT NULL),
    d(id) AS (
        (SELECT partition_id FROM queen.log_dlq WHERE partition_id > v_from ORDER BY partition_id LIMIT 1)
        UNION ALL
        SELECT (SELECT x.partition_id FROM queen.log_dlq x WHERE x.partition_id > d.id
                 ORDER BY x.partition_id LIMIT 1)
          FROM d WHERE d.id IS NOT NULL)
    SELECT array_agg(id ORDER BY id) INTO v_ids
      FROM (SELECT id FROM (SELECT id FROM t WHERE id IS NOT NULL LIMIT 1000) a
            UNION
            SELECT id FROM (SELECT id FROM d WHERE id IS NOT NULL LIMIT 1000) b
            ORDER BY id LIMIT 1000) ids;
    SELECT array_agg(i) INTO v_orphans FROM unnest(v_ids) i
     WHERE NOT EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = i);
    IF v_orphans IS NOT NULL THEN
        WITH gone AS (
            DELETE FROM queen.log_txns t USING (
                SELECT partition_id, base_offset FROM queen.log_txns
                 WHERE partition_id = ANY(v_orphans) ORDER BY partition_id, base_offset
                 LIMIT p_max_rows) v
             WHERE t.partition_id = v.partition_id AND t.base_offset = v.base_offset
            RETURNING 1)
        SELECT count(*) INTO v_txns FROM gone;
        WITH gone AS (
            DELETE FROM queen.log_dlq d USING (
                SELECT id FROM queen.log_dlq WHERE partition_id = ANY(v_orphans)
                 LIMIT GREATEST(p_max_rows - v_txns, 0)) v
             WHERE d.id = v.id
            RETURNING 1)
        SELECT count(*) INTO v_dlq FROM gone;
    END IF;
    -- Move on only past ids that are now clean; after the last one start over (an idle
    -- sweep leaves the row unchanged and writes nothing).
    IF v_txns + v_dlq < p_max_rows THEN
        INSERT INTO queen.maintenance_state AS s (key, value)
        VALUES ('orphans', jsonb_build_object('from', CASE WHEN array_length(v_ids, 1) = 1000
                                                           THEN v_ids[1000] END))
        ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()
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

-- The driver (contract §13): every due step for every partition, a COMMIT after each, so
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
    v_purged bigint := 0;
    v_orphans bigint := 0;
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
        'expiredSegments', v_expired, 'expiredMessages', v_expired_messages, 'evicted', v_evicted, 'sidecarRows', v_purged,
        'orphanRows', v_orphans, 'more', v_more, 'interrupted', v_interrupted,
        'durationMs', round(extract(epoch FROM pg_catalog.clock_timestamp() - v_start) * 1000, 1));
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
                       queen.maintenance_plan_v1() FROM PUBLIC;
REVOKE ALL ON PROCEDURE queen.run_maintenance(int, int, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.log_retention_step_v1(uuid, timestamptz, timestamptz, int),
                          queen.log_orphans_step_v1(int),
                          queen.maintenance_plan_v1() TO queen_broker;
GRANT EXECUTE ON PROCEDURE queen.run_maintenance(int, int, jsonb) TO queen_broker;
GRANT SELECT ON queen.partition_storage, queen.consumer_lag TO queen_broker;

-- Hardening (issue 12). ----------------------------------------------------------------

-- 12.6: the one name rule for SQL callers (src/names.rs); push, pop and configure refuse a
-- name over 255 bytes with 22023 instead of failing inside a btree index.
CREATE FUNCTION queen.check_name_v1(
    "p_kind" TEXT,
    "p_name" TEXT
) RETURNS TEXT
IMMUTABLE STRICT PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'check_name_v1_wrapper';
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
BEGIN
    SELECT id INTO v_id FROM queen.queues WHERE tenant_id = p_tenant AND name = p_queue FOR UPDATE;
    IF v_id IS NULL THEN
        RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', false);
    END IF;
    v_pids := ARRAY(SELECT id FROM queen.log_partitions WHERE queue_id = v_id);
    -- Lease rows first, in the global lock order, as every ack path does (lease row, then
    -- cursor row): the cascade below deletes cursor rows before lease rows, so without
    -- this a DLQ filing holding a lease row deadlocked against it (40P01).
    PERFORM 1 FROM queen.log_leases WHERE partition_id = ANY(v_pids)
      ORDER BY partition_id, consumer_group COLLATE "C" FOR UPDATE;
    DELETE FROM queen.queues WHERE id = v_id;
    DELETE FROM queen.log_txns WHERE partition_id = ANY(v_pids);
    DELETE FROM queen.log_dlq WHERE partition_id = ANY(v_pids);
    RETURN jsonb_build_object('deleted', true, 'queue', p_queue, 'existed', true);
END $$;


-- Issue 16: delayedProcessing, nack with delay, DLQ redrive and delete, lag and queue
-- statistics. ---------------------------------------------------------------------------

-- delayedProcessing (seconds): no pop serves a message before created_at + delay.
ALTER TABLE queen.queues
    ADD COLUMN delayed_processing int NOT NULL DEFAULT 0 CHECK (delayed_processing >= 0);
-- A nack's delay, durable: no pop of the (partition, group) before this instant.
ALTER TABLE queen.log_consumers ADD COLUMN redeliver_at timestamptz;

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
    INSERT INTO queen.queues AS q (name, tenant_id, namespace, task, lease_time, retry_limit,
                                   dead_letter_queue, dlq_after_max_retries, dedup_window_seconds,
                                   retention_seconds, completed_retention_seconds, delayed_processing,
                                   options)
    VALUES (p_queue, COALESCE(p_tenant, '00000000-0000-0000-0000-000000000001'),
            COALESCE(p_namespace, CASE WHEN strpos(p_queue, '.') > 0 THEN split_part(p_queue, '.', 1) ELSE p_queue END),
            COALESCE(p_task, CASE WHEN strpos(p_queue, '.') > 0 THEN substr(p_queue, strpos(p_queue, '.') + 1) ELSE '' END),
            COALESCE((o->>'leaseTime')::int, 60), COALESCE((o->>'retryLimit')::int, 3),
            COALESCE((o->>'deadLetterQueue')::bool, true), COALESCE((o->>'dlqAfterMaxRetries')::bool, true),
            COALESCE((o->>'dedupWindowSeconds')::int, 3600), COALESCE((o->>'retentionSeconds')::int, 0),
            COALESCE((o->>'completedRetentionSeconds')::int, 0),
            COALESCE((o->>'delayedProcessing')::int, 0), o)
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
        options = q.options || o
    RETURNING * INTO v_queue;
    INSERT INTO queen.log_partitions (queue_id, name) VALUES (v_queue.id, 'Default')
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT id INTO v_pid FROM queen.log_partitions WHERE queue_id = v_queue.id AND name = 'Default';
    RETURN jsonb_build_object('queueId', v_queue.id, 'partitionId', v_pid, 'queue', v_queue.name,
                              'namespace', v_queue.namespace, 'task', v_queue.task,
                              'leaseTime', v_queue.lease_time, 'retryLimit', v_queue.retry_limit);
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
AS 'MODULE_PATHNAME', 'log_ack_by_hash_delay_v1_wrapper';

-- DLQ rows back into their partitions (src/redrive.rs).
CREATE FUNCTION queen.dlq_redrive_v1(
    "p_ids" uuid[],
    "p_tenant" uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'dlq_redrive_v1_wrapper';

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
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(
        SELECT d.id FROM queen.log_dlq d
          JOIN queen.log_partitions p ON p.id = d.partition_id
          JOIN queen.queues q ON q.id = p.queue_id
         WHERE d.partition_id = p_partition_id AND d.transaction_id = p_transaction_id
           AND q.tenant_id = p_tenant
         ORDER BY d.failed_at DESC, d.id)
$$;

-- Delete the tenant's DLQ rows p_ids; returns {"deleted": n, "ids": [...]}.
CREATE FUNCTION queen.dlq_delete_v1(p_ids uuid[],
                                    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS jsonb
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH gone AS (
        DELETE FROM queen.log_dlq d
         USING queen.log_partitions p, queen.queues q
         WHERE d.id = ANY(p_ids) AND p.id = d.partition_id AND q.id = p.queue_id
           AND q.tenant_id = p_tenant
        RETURNING d.id)
    SELECT jsonb_build_object('deleted', count(*),
                              'ids', COALESCE(jsonb_agg(id ORDER BY id), '[]'::jsonb))
      FROM gone
$$;

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
--   r_redeliver_at: a nack's delay still pending (NULL once it has passed).
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
              r_dlq bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH now AS (SELECT clock_timestamp() AS t),
    parts AS (
        SELECT q.tenant_id, q.id AS queue_id, q.name::text AS queue, p.id, p.name, p.created_at,
               p.log_start, p.last_offset, p.last_write_at
          FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id
         WHERE (p_tenant IS NULL OR q.tenant_id = p_tenant) AND (p_queue IS NULL OR q.name = p_queue)),
    dlq AS (
        SELECT d.partition_id, d.consumer_group, count(*) AS n
          FROM queen.log_dlq d JOIN parts x ON x.id = d.partition_id
         GROUP BY 1, 2),
    cursors AS (
        SELECT x.*, c.consumer_group, c.committed, c.batch_retry_count, c.total_consumed,
               c.evicted, c.redeliver_at, l.batch_end, l.worker_id, l.lease_acquired_at,
               COALESCE(l.worker_id IS NOT NULL AND l.lease_expires_at > now.t, false) AS live,
               GREATEST(COALESCE(c.committed, -1), x.log_start - 1) AS consumed_to, now.t AS now
          FROM parts x CROSS JOIN now
          LEFT JOIN queen.log_consumers c ON c.partition_id = x.id
          LEFT JOIN queen.log_leases l
            ON l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group)
    SELECT k.tenant_id, k.queue_id, k.queue, k.id, k.name, k.created_at, k.log_start, k.last_offset,
           k.last_write_at, k.consumer_group, k.committed,
           CASE WHEN k.consumer_group IS NOT NULL THEN GREATEST(k.last_offset - k.consumed_to, 0) END,
           o.created_at, extract(epoch FROM k.now - o.created_at)::float8,
           k.live, CASE WHEN k.live THEN GREATEST(k.batch_end - k.committed, 0) ELSE 0 END,
           CASE WHEN k.live THEN k.worker_id END, k.lease_acquired_at,
           k.batch_retry_count, k.total_consumed, k.evicted,
           CASE WHEN k.redeliver_at > k.now THEN k.redeliver_at END,
           COALESCE(d.n, 0)
      FROM cursors k
      LEFT JOIN dlq d ON d.partition_id = k.id AND d.consumer_group = k.consumer_group
      LEFT JOIN LATERAL (
          SELECT s.created_at FROM queen.log_segments s
           WHERE k.last_offset > k.consumed_to
             AND s.partition_id = k.id AND s.base_offset <= k.consumed_to + 1
           ORDER BY s.base_offset DESC LIMIT 1) o ON true
$$;

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

-- The broker reads no table (issue 14): the dedup cache's load is a function too. -------

-- The dedup window of a partition as the broker's watermark cache loads it, in one
-- snapshot: the partition's last offset, its queue's window now, and the sidecar rows
-- inside that window, oldest first (one row with NULL base when there are none; no row
-- when the partition does not exist).
CREATE FUNCTION queen.dedup_window_v1(p_partition_id uuid)
RETURNS TABLE(r_last_offset bigint, r_window int, r_base bigint, r_hashes bytea)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT p.last_offset, q.dedup_window_seconds, t.base_offset, t.hashes
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
      LEFT JOIN queen.log_txns t ON t.partition_id = p.id
           AND t.created_at >= clock_timestamp() - make_interval(secs => q.dedup_window_seconds)
     WHERE p.id = p_partition_id
     ORDER BY t.base_offset
$$;
REVOKE ALL ON FUNCTION queen.dedup_window_v1(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION queen.dedup_window_v1(uuid) TO queen_broker;

-- The broker role reads no table (issue 14): 0.1.0 granted SELECT on every table.
REVOKE SELECT ON ALL TABLES IN SCHEMA queen FROM queen_broker;
GRANT SELECT ON queen.partition_storage, queen.consumer_lag TO queen_broker;
