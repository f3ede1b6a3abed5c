-- Streams (src/streams.rs; docs/decisions.md, "Streams"): the cycle entry point and the
-- query's deletion. Rust reads and writes the rows; this file gives each request of a
-- merged call its own subtransaction.

-- Commits stream processing cycles: one request (a JSON object; the answer is its result)
-- or Queen's merged form (an array of requests with `idx`; the answer [{idx, result}]).
-- Each request is all or nothing in its own subtransaction: a refused one answers
-- {success: false, error} with nothing of it written, the others commit; one fenced out
-- by the state it read (QFENCE: a cycle without an ack whose state changed) answers
-- {success: true, fenced: why} with nothing of it written (queen_log::streams::
-- CycleResult::fenced, the broker's answer for the same error). A transient
-- failure (deadlock, serialization, resources, connection, shutdown) is raised for the
-- whole call instead: the caller retries, nothing was written.
CREATE OR REPLACE FUNCTION queen.streams_cycle_v1(
    p jsonb,
    p_tenant uuid DEFAULT queen.default_tenant()
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
            IF SQLSTATE = 'P0001' AND starts_with(SQLERRM, 'QFENCE') THEN
                v_result := jsonb_build_object(
                    'success', true,
                    'query_id', COALESCE(v_item->>'query_id', ''),
                    'partition_id', COALESCE(v_item->>'partition_id', ''),
                    'queueName', NULL, 'state_ops_applied', 0, 'push_results', '[]'::jsonb,
                    'ack_result', NULL, 'fenced', ltrim(substr(SQLERRM, 7)));
            ELSE
                v_result := jsonb_build_object(
                    'success', false,
                    'query_id', COALESCE(v_item->>'query_id', ''),
                    'partition_id', COALESCE(v_item->>'partition_id', ''),
                    'queueName', NULL, 'state_ops_applied', 0, 'push_results', '[]'::jsonb,
                    'ack_result', NULL, 'error', SQLERRM, 'sqlstate', SQLSTATE);
            END IF;
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
CREATE OR REPLACE FUNCTION queen.streams_delete_query_v1(
    p_name text,
    p_tenant uuid DEFAULT queen.default_tenant()
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
CREATE OR REPLACE FUNCTION queen.streams_orphans_step_v1(p_max_rows int) RETURNS jsonb
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
