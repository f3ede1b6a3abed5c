-- Timers' reads (src/timers.rs writes and delivers; docs/decisions.md, "Timers").

-- One timer of the tenant's queue, with its payload exactly as stored (base64; an
-- envelope stays an envelope: `encrypted` says so). A miss is {"found": false}.
CREATE FUNCTION queen.timers_get_v1(
    p_queue text,
    p_key text,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE(
        (SELECT jsonb_build_object(
                    'found', true, 'queue', q.name, 'timerKey', t.timer_key,
                    'partition', t.partition, 'txn', t.txn, 'messageId', t.message_id,
                    'deliverAt', queen.iso_ms(t.deliver_at),
                    'payload', translate(encode(t.payload, 'base64'), E'\n', ''),
                    'encrypted', t.encrypted, 'attempts', t.attempts, 'lastError', t.last_error,
                    'createdAt', queen.iso_ms(t.created_at), 'updatedAt', queen.iso_ms(t.updated_at))
           FROM queen.timers t JOIN queen.queues q ON q.id = t.queue_id
          WHERE q.tenant_id = p_tenant AND q.name = p_queue AND t.timer_key = p_key),
        '{"found": false}'::jsonb)
$$;

-- A keyset page of one queue's pending timers, by key: `p_after` is exclusive, the
-- limit is clamped to 1..1000 (default 100), never refused; `truncated` says whether
-- more follow, `nextAfter` is the cursor for the next page.
CREATE FUNCTION queen.timers_list_v1(
    p_queue text,
    p_after text DEFAULT NULL,
    p_limit int DEFAULT NULL,
    p_tenant uuid DEFAULT '00000000-0000-0000-0000-000000000001'
) RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH lim AS (SELECT least(greatest(COALESCE(p_limit, 100), 1), 1000) AS n),
    page AS (
        SELECT t.* FROM queen.timers t JOIN queen.queues q ON q.id = t.queue_id
         WHERE q.tenant_id = p_tenant AND q.name = p_queue
           AND (p_after IS NULL OR t.timer_key > p_after)
         ORDER BY t.timer_key
         LIMIT (SELECT n + 1 FROM lim)),
    shown AS (
        SELECT * FROM page ORDER BY timer_key LIMIT (SELECT n FROM lim))
    SELECT jsonb_build_object(
        'queue', p_queue,
        'rows', COALESCE((SELECT jsonb_agg(jsonb_build_object(
                    'timerKey', s.timer_key, 'partition', s.partition, 'txn', s.txn,
                    'messageId', s.message_id, 'deliverAt', queen.iso_ms(s.deliver_at),
                    'encrypted', s.encrypted, 'attempts', s.attempts, 'lastError', s.last_error)
                    ORDER BY s.timer_key) FROM shown s), '[]'::jsonb),
        'truncated', (SELECT count(*) FROM page) > (SELECT n FROM lim),
        'nextAfter', CASE WHEN (SELECT count(*) FROM page) > (SELECT n FROM lim)
                          THEN (SELECT max(timer_key) FROM shown) END)
$$;
