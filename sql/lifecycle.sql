

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

-- Whether a table is distributed by Citus in this database (false without Citus).
CREATE OR REPLACE FUNCTION queen.is_distributed(p_table regclass) RETURNS bool
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
CREATE OR REPLACE FUNCTION queen.partition_ids_after(p_table regclass, p_from uuid, p_limit int) RETURNS uuid[]
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

-- One bounded step of orphan cleanup: sidecar and DLQ rows (the tables without a foreign
-- key) of partitions that no longer exist — e.g. after a plain DELETE FROM queen.queues.
-- It walks the distinct partition ids of both tables in order from where the last step
-- stopped (queen.partition_ids_after: cost grows with partitions, not rows), removes at
-- most p_max_rows rows, partition by partition, and wraps around at the end.
CREATE OR REPLACE FUNCTION queen.log_orphans_step_v1(p_max_rows int) RETURNS jsonb
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
CREATE OR REPLACE FUNCTION queen.maintenance_plan_v1()
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

-- The partitions where maxWaitTimeSeconds has work (docs/decisions.md, "Queue options"):
-- of a queue with the option set, the slowest group's next message (or, for a group
-- registered on the queue without a cursor here, the log start's) is older than the
-- cutoff. Queues without the option cost nothing. Per partition, each read names the
-- partition (a router query on Citus, which refuses the correlated form).
CREATE OR REPLACE FUNCTION queen.wait_eviction_plan_v1()
RETURNS TABLE(r_partition_id uuid)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    v_slowest bigint;
    v_groups text[];
    v_oldest timestamptz;
BEGIN
    FOR r IN SELECT p.id, p.queue_id, p.log_start, p.last_offset, q.max_wait_time_seconds AS wait
               FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id
              WHERE q.max_wait_time_seconds > 0
              ORDER BY p.id
    LOOP
        SELECT min(c.committed), array_agg(c.consumer_group) INTO v_slowest, v_groups
          FROM queen.log_consumers c WHERE c.partition_id = r.id;
        IF EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                    WHERE m.queue_id = r.queue_id
                      AND m.consumer_group <> ALL (COALESCE(v_groups, '{}'))) THEN
            v_slowest := LEAST(v_slowest, r.log_start - 1);
        END IF;
        CONTINUE WHEN v_slowest IS NULL OR v_slowest >= r.last_offset;
        SELECT g.created_at INTO v_oldest FROM queen.log_segments g
         WHERE g.partition_id = r.id AND g.end_offset > v_slowest
         ORDER BY g.base_offset LIMIT 1;
        -- The expiry rule has one home, queen_log::lifecycle (the pop applies it too).
        IF queen.expired_v1(v_oldest, r.wait) THEN
            r_partition_id := r.id;
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;

-- The driver (docs/contract.md §13): every due step for every partition, a COMMIT after each, so
-- no transaction stays open long. Exactly one runner works at a time: each step runs
-- under a transaction-level advisory lock, and a run that cannot take it returns at once
-- (ran: false). A run stops after p_time_budget_ms (more: true says work is left).
-- SECURITY INVOKER and without SET on purpose: PostgreSQL allows COMMIT only there; the
-- steps it calls are SECURITY DEFINER. Reports in p_report (INOUT jsonb).
CREATE OR REPLACE PROCEDURE queen.run_maintenance(p_time_budget_ms int DEFAULT 10000,
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
    v_sweep int;
    -- Rows removed by the sweeps: orphans, key/value, streams.
    v_removed bigint[] := ARRAY[0, 0, 0];
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
        -- The table-wide sweeps, in this order, each until done: orphan sidecar and DLQ
        -- rows; key/value rows past their expiry (docs/decisions.md, "Key/value"); stream
        -- state of source partitions that no longer exist (docs/decisions.md, "Streams").
        -- The budget and the lock before every step, as the loops below: a COMMIT
        -- releases the lock, so a sweep's first step after another sweep finished must
        -- take it again (one runner at a time).
        FOR v_sweep IN 1..3 LOOP
            LOOP
                IF pg_catalog.clock_timestamp() - v_start > v_budget THEN v_more := true; EXIT steps; END IF;
                IF NOT pg_catalog.pg_try_advisory_xact_lock(1903519086, 1) THEN v_interrupted := true; EXIT steps; END IF;
                v_step := CASE v_sweep
                              WHEN 1 THEN queen.log_orphans_step_v1(p_max_rows)
                              WHEN 2 THEN queen.kv_expire_step_v1(p_max_rows)
                              ELSE queen.streams_orphans_step_v1(p_max_rows)
                          END;
                v_removed[v_sweep] := v_removed[v_sweep] + (v_step->>'removed')::bigint;
                COMMIT;
                EXIT WHEN (v_step->>'done')::bool;
            END LOOP;
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
        'orphanRows', v_removed[1], 'kvExpired', v_removed[2], 'streamOrphans', v_removed[3], 'more', v_more, 'interrupted', v_interrupted,
        'durationMs', round(extract(epoch FROM pg_catalog.clock_timestamp() - v_start) * 1000, 1));
    -- Into the sampled history (docs/observability.md): what retention removed is counted.
    PERFORM queen.history_lifecycle_v1(p_report);
END $$;

-- What is stored and why, per partition (a psql user's first look): segments and their
-- bytes, sidecar rows, the live offset range, the oldest live message's age.
CREATE OR REPLACE VIEW queen.partition_storage AS
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
CREATE OR REPLACE VIEW queen.consumer_lag AS
SELECT q.tenant_id, q.name AS queue, p.name AS partition, c.partition_id, c.consumer_group,
       c.committed, p.last_offset, GREATEST(p.last_offset - c.committed, 0) AS lag,
       c.evicted, c.total_consumed, c.batch_retry_count,
       COALESCE(l.worker_id IS NOT NULL AND l.lease_expires_at > clock_timestamp(), false) AS leased
  FROM queen.log_consumers c
  LEFT JOIN queen.log_leases l ON l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group
  JOIN queen.log_partitions p ON p.id = c.partition_id
  JOIN queen.queues q ON q.id = p.queue_id;
