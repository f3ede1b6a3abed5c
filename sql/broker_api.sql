-- Functions the broker (or any client) calls besides the log contract: queue
-- configuration, deletion, DLQ listing, tenancy gates. With these, a broker role needs
-- EXECUTE only: no direct table writes (see sql/finalize.sql).

-- Create or reconfigure a queue from the HTTP configure options; the "Default" partition
-- always exists afterwards. Every option key is checked by queen.check_queue_options_v1
-- (an unknown key or a value out of range is 22023) and kept
-- verbatim in `options`.
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(p_queue text, p_namespace text, p_task text,
                                         p_options jsonb,
                                         p_tenant uuid DEFAULT queen.default_tenant())
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
    VALUES (p_queue, COALESCE(p_tenant, queen.default_tenant()),
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
                                      p_tenant uuid DEFAULT queen.default_tenant())
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

-- Queue settings the broker needs at pop time; NULL when the queue does not exist.
-- leaseTime is the lease a pop grants when asked for none, by the extension's one rule
-- (queen.effective_lease_time: NULL means 60, at least 1).
CREATE OR REPLACE FUNCTION queen.queue_info_v1(p_queue text,
                                    p_tenant uuid DEFAULT queen.default_tenant())
RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object('queueId', q.id, 'leaseTime', queen.effective_lease_time(q.lease_time),
                              'retryLimit', COALESCE(q.retry_limit, 3))
      FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue
$$;

-- Partition ids of the given set that belong to the tenant (the tenancy gate for acks).
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

-- Lease renewal gated by tenancy: renews only when the worker holds a live lease on a
-- partition of the caller's tenant, by log_renew_lease_v1 (the one renewal). A foreign
-- lease answers exactly like an unknown one. The tenancy proof is a statement of its own
-- (Citus plans no subquery over distributed tables inside a multi-shard UPDATE); the
-- instant is a value, as in log_renew_lease_v1.
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

-- The DLQ listing, newest failure first, with the frame's producer subject and created_at
-- when its segment still exists. Timestamps in milliseconds (the HTTP wire's form). The
-- page is chosen first, then each of its rows looks up its segment. PL/pgSQL: Citus
-- plans no multi-shard query with parameters inside a LANGUAGE sql function.
CREATE OR REPLACE FUNCTION queen.dlq_list_v1(p_queue text, p_group text, p_limit int, p_offset int,
                                  p_tenant uuid DEFAULT queen.default_tenant())
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

-- The (queue, partition) name pairs whose queue exists for the tenant: the partition's id
-- (NULL when the partition does not exist yet), the queue's dedup window and whether it
-- encrypts: what a push needs before it pushes (one round trip per request). r_index is
-- the 1-based position in the input arrays.
-- PL/pgSQL, not SQL: a SQL function that is not inlined (SECURITY DEFINER, SET) is parsed
-- and planned on every call; PL/pgSQL keeps its plan for the session (126 against 14 us
-- a call, measured: docs/benchmarks.md, "One message at a time").
CREATE OR REPLACE FUNCTION queen.partitions_lookup_v1(p_tenant uuid, p_queues text[], p_partitions text[])
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

-- The worker holding the (partition, group) cursor's lease, NULL when none (or no such
-- cursor): the transaction wire's fallback worker for an ack sent without a leaseId.
CREATE OR REPLACE FUNCTION queen.cursor_worker_v1(p_partition_id uuid, p_group text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT worker_id FROM queen.log_leases
             WHERE partition_id = p_partition_id AND consumer_group = p_group);
END $$;

-- A group's stored conflation policy on a queue (docs/decisions.md, "Conflation"): false
-- for an unregistered group, queue mode or an unknown queue. The pop answer echoes it.
CREATE OR REPLACE FUNCTION queen.group_conflation_v1(p_tenant uuid, p_queue text, p_group text)
RETURNS bool
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN COALESCE((SELECT m.conflation FROM queen.consumer_groups_metadata m
                       JOIN queen.queues q ON q.id = m.queue_id
                      WHERE m.tenant_id = p_tenant AND q.tenant_id = p_tenant
                        AND q.name = p_queue AND m.consumer_group = p_group), false);
END $$;

-- The dedup window of a partition as the broker's watermark cache loads it, in one
-- snapshot: the partition's last offset, its queue's window now, and the sidecar rows
-- inside that window, oldest first (one row with NULL base when there are none; no row
-- when the partition does not exist). PL/pgSQL with the instant as a value: Citus plans
-- neither a join with parameters inside a LANGUAGE sql function nor a volatile call on
-- its rows. On Citus it runs on the partition's worker (queen.distribute()).
CREATE OR REPLACE FUNCTION queen.dedup_window_v1(p_partition_id uuid)
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
