-- Hand-written SQL functions: the pieces that are one statement of SQL anyway.
-- Everything with a decision in it lives in Rust (src/, crates/queen_log).

-- UTC with microseconds, the timestamp form of every JSON result (contract conventions).
CREATE FUNCTION queen.iso_utc(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') $$;

-- Parse a subscription timestamp; NULL when it is not one (pop must never fail on it).
CREATE FUNCTION queen.try_timestamptz(p text) RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p IS NULL OR btrim(p) = '' THEN
        RETURN NULL;
    END IF;
    RETURN p::timestamptz;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$;

-- Where a new cursor starts (contract §5): mode 'all' at log_start - 1; 'new' and
-- 'timestamp' just before the first segment created at or after p_ts, else at the end.
CREATE FUNCTION queen.seed_offset(p_pid uuid, p_mode text, p_ts timestamptz) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE
        WHEN p_mode = 'all' OR p_mode IS NULL THEN p.log_start - 1
        WHEN p_ts IS NULL THEN p.last_offset
        ELSE COALESCE((SELECT s.base_offset - 1 FROM queen.log_segments s
                        WHERE s.partition_id = p.id AND s.created_at >= p_ts
                        ORDER BY s.base_offset LIMIT 1), p.last_offset)
    END
    FROM queen.log_partitions p WHERE p.id = p_pid
$$;

-- The segment covering an offset, if any (contract §4).
CREATE FUNCTION queen.log_segment_at_v1(p_pid uuid, p_off bigint)
RETURNS TABLE(r_base bigint, r_end bigint, r_created timestamptz, r_blob bytea)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.base_offset, s.end_offset, s.created_at, s.blob
      FROM queen.log_segments s
     WHERE s.partition_id = p_pid AND s.base_offset <= p_off AND s.end_offset >= p_off
     ORDER BY s.base_offset DESC LIMIT 1
$$;

-- Lease renewal (contract §8): extends live leases only, never shortens, never revives.
CREATE FUNCTION queen.log_renew_lease_v1(p_worker text, p_seconds int) RETURNS jsonb
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH renewed AS (
        UPDATE queen.log_consumers
           SET lease_expires_at = GREATEST(lease_expires_at,
                   clock_timestamp() + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1)))
         WHERE worker_id = p_worker AND lease_expires_at > clock_timestamp()
        RETURNING lease_expires_at)
    SELECT jsonb_build_object('renewed', count(*),
                              'expiresAt', queen.iso_utc(min(lease_expires_at)))
      FROM renewed
$$;

-- One purge step for one partition (contract §10): whole sidecar rows older than the
-- cutoff, from the low end, at most p_max_rows; txns_start moves past them.
CREATE FUNCTION queen.log_txns_purge_step_v1(p_pid uuid, p_cutoff timestamptz, p_max_rows int)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
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
    -- created_at is monotone in base_offset, so "older than the cutoff" is a prefix.
    WITH victims AS (
        SELECT t.base_offset FROM queen.log_txns t
         WHERE t.partition_id = p_pid AND t.created_at < p_cutoff
         ORDER BY t.base_offset LIMIT p_max_rows),
    gone AS (
        DELETE FROM queen.log_txns t USING victims v
         WHERE t.partition_id = p_pid AND t.base_offset = v.base_offset
        RETURNING t.end_offset)
    SELECT count(*), max(end_offset) INTO v_deleted, v_end FROM gone;

    UPDATE queen.log_partitions
       SET txns_start = GREATEST(txns_start, COALESCE(v_end + 1, txns_start))
     WHERE id = p_pid
    RETURNING txns_start INTO v_start;

    RETURN jsonb_build_object('deleted', v_deleted, 'new_txns_start', v_start,
                              'done', v_deleted < p_max_rows);
END $$;

-- The purge for every partition, each on its queue's clock:
-- now - GREATEST(dedup window, completed retention, 900 s).
CREATE FUNCTION queen.log_txns_purge_all_v1(p_max_rows int DEFAULT 10000) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    v_step jsonb;
    v_partitions int := 0;
    v_deleted bigint := 0;
BEGIN
    FOR r IN
        SELECT p.id, clock_timestamp() - make_interval(secs => GREATEST(
                   q.dedup_window_seconds, COALESCE(q.completed_retention_seconds, 0), 900)) AS cutoff
          FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
         ORDER BY p.id
    LOOP
        LOOP
            v_step := queen.log_txns_purge_step_v1(r.id, r.cutoff, p_max_rows);
            v_deleted := v_deleted + (v_step->>'deleted')::bigint;
            EXIT WHEN (v_step->>'done')::bool;
        END LOOP;
        v_partitions := v_partitions + 1;
    END LOOP;
    RETURN jsonb_build_object('partitions', v_partitions, 'deleted', v_deleted);
END $$;
