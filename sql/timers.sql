-- Timers' reads (src/timers.rs writes and delivers; docs/decisions.md, "Timers").

-- One timer of the tenant's queue, with its payload exactly as stored (base64; an
-- envelope stays an envelope: `encrypted` says so). A miss is {"found": false}.
CREATE OR REPLACE FUNCTION queen.timers_get_v1(
    p_queue text,
    p_key text,
    p_tenant uuid DEFAULT queen.default_tenant()
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
CREATE OR REPLACE FUNCTION queen.timers_list_v1(
    p_queue text,
    p_after text DEFAULT NULL,
    p_limit int DEFAULT NULL,
    p_tenant uuid DEFAULT queen.default_tenant()
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

-- The tenant's key/value and timer stores, as Queen's queue list reports them
-- (`kvRows`, `kvBytes`, `timerRows`, `timerBytes`; bytes are the rows' stored sizes).
CREATE OR REPLACE FUNCTION queen.store_sizes_v1(
    p_tenant uuid DEFAULT queen.default_tenant()
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
