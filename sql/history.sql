

-- How long the history is kept: the GUC queen.history_retention (an interval), 7 days
-- when unset or unreadable.
CREATE OR REPLACE FUNCTION queen.history_retention() RETURNS interval
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
CREATE OR REPLACE FUNCTION queen.history_record_v1(p_broker text, p_hostname text, p_port int, p_pid int,
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
CREATE OR REPLACE FUNCTION queen.history_queues_v1(p_rows jsonb, p_now timestamptz DEFAULT now(),
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
CREATE OR REPLACE FUNCTION queen.history_lifecycle_v1(p_report jsonb, p_now timestamptz DEFAULT now())
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
CREATE OR REPLACE FUNCTION queen.history_brokers_v1(p_from timestamptz, p_to timestamptz, p_bucket interval)
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
CREATE OR REPLACE FUNCTION queen.history_parked_series_v1(p_from timestamptz, p_to timestamptz,
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
CREATE OR REPLACE FUNCTION queen.history_queues_series_v1(p_from timestamptz, p_to timestamptz,
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
CREATE OR REPLACE FUNCTION queen.history_lag_series_v1(p_from timestamptz, p_to timestamptz,
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
CREATE OR REPLACE FUNCTION queen.history_queue_totals_v1(p_from timestamptz, p_to timestamptz,
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
CREATE OR REPLACE FUNCTION queen.history_pushed_v1(p_from timestamptz, p_to timestamptz, p_queues uuid[])
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
CREATE OR REPLACE FUNCTION queen.history_lifecycle_series_v1(p_from timestamptz, p_to timestamptz,
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
CREATE OR REPLACE FUNCTION queen.postgres_stats_v1() RETURNS jsonb
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
