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
        UPDATE queen.log_leases
           SET lease_expires_at = GREATEST(lease_expires_at,
                   clock_timestamp() + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1)))
         WHERE worker_id = p_worker AND lease_expires_at > clock_timestamp()
        RETURNING lease_expires_at)
    SELECT jsonb_build_object('renewed', count(*),
                              'expiresAt', queen.iso_utc(min(lease_expires_at)))
      FROM renewed
$$;
