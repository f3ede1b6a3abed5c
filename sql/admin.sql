-- Operating a queue (docs/sql-api.md): DLQ redrive and deletion, queue and lag statistics.
-- Redrive itself is Rust (src/redrive.rs, queen.dlq_redrive_v1); these select the rows
-- it moves, delete rows, and report. Every function is scoped to a tenant: another
-- tenant's rows behave exactly like rows that do not exist.

-- The DLQ rows of a queue that the by-queue redrive and delete act on: the tenant's rows
-- of queue p_queue (NULL group = every group), oldest failure first, at most p_limit
-- (NULL = all). One selection for both. PL/pgSQL: Citus plans no multi-shard join with
-- parameters inside a LANGUAGE sql function.
CREATE OR REPLACE FUNCTION queen.dlq_queue_ids(p_queue text, p_group text, p_limit int, p_tenant uuid)
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

-- Redrive up to p_limit DLQ rows of a queue (NULL group = every group), oldest failure
-- first, through queen.dlq_redrive_v1.
CREATE OR REPLACE FUNCTION queen.dlq_redrive_queue_v1(p_queue text, p_group text, p_limit int,
                                           p_tenant uuid DEFAULT queen.default_tenant())
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

-- The DLQ rows of one message address (partition id, transactionId), newest failure
-- first: one per consumer group that dead-lettered it (Queen's /messages/:pid/:txn).
-- PL/pgSQL, as Citus needs for a join with parameters.
CREATE OR REPLACE FUNCTION queen.dlq_ids_at_v1(p_partition_id uuid, p_transaction_id text,
                                    p_tenant uuid DEFAULT queen.default_tenant())
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

-- Delete the tenant's DLQ rows p_ids; returns {"deleted": n, "ids": [...]}. PL/pgSQL:
-- Citus plans no multi-shard DELETE with parameters inside a LANGUAGE sql function.
CREATE OR REPLACE FUNCTION queen.dlq_delete_v1(p_ids uuid[],
                                    p_tenant uuid DEFAULT queen.default_tenant())
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
CREATE OR REPLACE FUNCTION queen.dlq_delete_queue_v1(p_queue text, p_group text, p_limit int,
                                          p_tenant uuid DEFAULT queen.default_tenant())
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

-- The tenant's queues (all, or one by name) with their settings, newest first. A NULL
-- tenant lists every tenant's (the operator's view: the broker's /metrics); the broker
-- passes the caller's tenant on every API route.
CREATE OR REPLACE FUNCTION queen.queue_list_v1(p_tenant uuid DEFAULT queen.default_tenant(),
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
-- of the call): ORDER BY what you need. One statement whose distributed tables all join on
-- the partition id (the DLQ count and the segment probe as LATERAL subqueries), so that
-- Citus runs it on every shard at once; PL/pgSQL, as Citus needs for its parameters.
CREATE OR REPLACE FUNCTION queen.queue_stats_v1(p_tenant uuid DEFAULT queen.default_tenant(),
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
CREATE OR REPLACE FUNCTION queen.delete_consumer_group_v1(p_group text, p_queue text DEFAULT NULL,
                                               p_delete_metadata boolean DEFAULT true,
                                               p_tenant uuid DEFAULT queen.default_tenant())
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
CREATE OR REPLACE FUNCTION queen.seek_cursors(p_group text, p_queue_id uuid, p_tenant uuid, p_pids uuid[],
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
CREATE OR REPLACE FUNCTION queen.seek_target_queue(p_fn text, p_group text, p_queue text, p_ts timestamptz,
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
CREATE OR REPLACE FUNCTION queen.seek_consumer_group_v1(p_group text, p_queue text,
                                             p_timestamp timestamptz DEFAULT NULL,
                                             p_to_end boolean DEFAULT false,
                                             p_tenant uuid DEFAULT queen.default_tenant())
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
CREATE OR REPLACE FUNCTION queen.seek_partition_v1(p_group text, p_queue text, p_partition text,
                                        p_timestamp timestamptz DEFAULT NULL,
                                        p_to_end boolean DEFAULT NULL,
                                        p_tenant uuid DEFAULT queen.default_tenant())
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
CREATE OR REPLACE FUNCTION queen.update_consumer_group_subscription_v1(p_group text, p_timestamp timestamptz,
                                                            p_tenant uuid DEFAULT queen.default_tenant())
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
-- A trace as Queen's trace reads show it (sql/admin.sql's trace functions). Columns,
-- not the row: on Citus the row type of a shard is not queen.log_traces.
CREATE OR REPLACE FUNCTION queen.trace_json(p_id uuid, p_event_type text, p_data jsonb, p_group text,
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
CREATE OR REPLACE FUNCTION queen.check_page(p_fn text, p_limit int, p_offset int) RETURNS void
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
CREATE OR REPLACE FUNCTION queen.get_message_traces_v1(p_partition_id uuid, p_transaction_id text,
                                            p_tenant uuid DEFAULT queen.default_tenant())
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
CREATE OR REPLACE FUNCTION queen.get_traces_by_name_v1(p_name text, p_limit int DEFAULT 100, p_offset int DEFAULT 0,
                                            p_tenant uuid DEFAULT queen.default_tenant())
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
CREATE OR REPLACE FUNCTION queen.get_available_trace_names_v1(p_limit int DEFAULT 50, p_offset int DEFAULT 0,
                                                   p_tenant uuid DEFAULT queen.default_tenant())
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
-- The tenant's subscription records (docs/sql-api.md): per (queue, group) the mode and
-- instant its first contact with a partition starts from, and its conflation policy
-- (docs/decisions.md, "Conflation"; the consumer-group views).
CREATE OR REPLACE FUNCTION queen.subscriptions_v1(p_tenant uuid DEFAULT queen.default_tenant())
RETURNS TABLE(r_queue text, r_consumer_group text, r_mode text, r_timestamp timestamptz,
              r_created_at timestamptz, r_conflation bool)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT q.name::text, m.consumer_group, m.subscription_mode, m.subscription_timestamp, m.created_at,
           m.conflation
      FROM queen.consumer_groups_metadata m JOIN queen.queues q ON q.id = m.queue_id
     WHERE m.tenant_id = p_tenant AND q.tenant_id = p_tenant;
END $$;

-- Partition discovery (Queen 2.x's POST /api/v1/partitions/changed; docs/decisions.md,
-- "Partition discovery"): per entry {queue, since?, after?, limit?} the queue's partitions
-- written at or after `since`, in creation order, a page of `limit` (1..1000, 1000) after
-- the cursor `after`, with `next` while more follow; and one safeTime for the call: every
-- write stamped before it is visible to this call. A push stamps last_write_at after its
-- transaction began, so safeTime is the earlier of the clock, read first, and the start
-- of the oldest transaction then in progress; the partitions are read after both, in a
-- later snapshot (hence VOLATILE and READ COMMITTED only).
CREATE OR REPLACE FUNCTION queen.partitions_changed_v1(p_entries jsonb,
                                            p_tenant uuid DEFAULT queen.default_tenant())
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
