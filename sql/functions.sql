-- Hand-written SQL functions: the pieces that are one statement of SQL anyway.
-- Everything with a decision in it lives in Rust (src/, crates/queen_log).

-- UTC with microseconds, the timestamp form of every JSON result (contract conventions).
CREATE OR REPLACE FUNCTION queen.iso_utc(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') $$;

-- UTC with milliseconds: the timestamp form of Queen's answers (its routes' to_char). It
-- must agree with the Rust one, queen_log::time::iso_ms, which the extension and the broker
-- format their own timestamps with (a #[pg_test] in src/db.rs compares them).
CREATE OR REPLACE FUNCTION queen.iso_ms(ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;

-- Parse a subscription timestamp; NULL when it is not one (pop must never fail on it).
CREATE OR REPLACE FUNCTION queen.try_timestamptz(p text) RETURNS timestamptz
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

-- Where a new cursor starts (docs/contract.md §5): mode 'all' at log_start - 1; 'new' and
-- 'timestamp' just before the first segment created at or after p_ts, else at the end.
-- PL/pgSQL: Citus plans no join or subquery with parameters inside a LANGUAGE sql function.
CREATE OR REPLACE FUNCTION queen.seed_offset(p_pid uuid, p_mode text, p_ts timestamptz) RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_start bigint;
    v_last bigint;
    v_first bigint;
BEGIN
    SELECT p.log_start, p.last_offset INTO v_start, v_last FROM queen.log_partitions p WHERE p.id = p_pid;
    IF NOT FOUND THEN
        RETURN NULL;
    ELSIF p_mode = 'all' OR p_mode IS NULL THEN
        RETURN v_start - 1;
    ELSIF p_ts IS NULL THEN
        RETURN v_last;
    END IF;
    SELECT s.base_offset - 1 INTO v_first FROM queen.log_segments s
     WHERE s.partition_id = p_pid AND s.created_at >= p_ts
     ORDER BY s.base_offset LIMIT 1;
    RETURN COALESCE(v_first, v_last);
END $$;

-- The segment covering an offset, if any (docs/contract.md §4).
CREATE OR REPLACE FUNCTION queen.log_segment_at_v1(p_pid uuid, p_off bigint)
RETURNS TABLE(r_base bigint, r_end bigint, r_created timestamptz, r_blob bytea)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.base_offset, s.end_offset, s.created_at, s.blob
      FROM queen.log_segments s
     WHERE s.partition_id = p_pid AND s.base_offset <= p_off AND s.end_offset >= p_off
     ORDER BY s.base_offset DESC LIMIT 1
$$;

-- Lease renewal (docs/contract.md §8): extends live leases only, never shortens, never revives.
-- The instant is taken once and passed as a value: Citus refuses a volatile function in
-- an UPDATE of a distributed table (and plans a multi-shard UPDATE only from PL/pgSQL).
CREATE OR REPLACE FUNCTION queen.log_renew_lease_v1(p_worker text, p_seconds int) RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_until timestamptz := v_now + make_interval(secs => GREATEST(COALESCE(p_seconds, 1), 1));
    v_renewed bigint;
    v_min timestamptz;
BEGIN
    UPDATE queen.log_leases
       SET lease_expires_at = GREATEST(lease_expires_at, v_until)
     WHERE worker_id = p_worker AND lease_expires_at > v_now;
    GET DIAGNOSTICS v_renewed = ROW_COUNT;
    -- The renewed rows are exactly the worker's live ones now (renewal never shortens).
    SELECT min(lease_expires_at) INTO v_min FROM queen.log_leases
     WHERE worker_id = p_worker AND lease_expires_at > v_now;
    RETURN jsonb_build_object('renewed', v_renewed, 'expiresAt', queen.iso_utc(v_min));
END $$;

-- Create the partition p_name of queue p_queue_id unless it exists; returns its id. The
-- registry row first (its UNIQUE (queue_id, name) settles a race between two creators:
-- the second waits for the first and then finds its row, read by a statement of its own
-- so that it sees what the first committed), then the log_partitions row with that id.
-- The caller holds the queue row (FOR KEY SHARE) so a concurrent DELETE cannot interfere.
CREATE OR REPLACE FUNCTION queen.provision_partition(p_queue_id uuid, p_name text) RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id uuid;
BEGIN
    INSERT INTO queen.partition_names (queue_id, name) VALUES (p_queue_id, p_name)
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT id INTO v_id FROM queen.partition_names WHERE queue_id = p_queue_id AND name = p_name;
    IF v_id IS NOT NULL THEN
        INSERT INTO queen.log_partitions (id, queue_id, name) VALUES (v_id, p_queue_id, p_name)
        ON CONFLICT (id) DO NOTHING;
    END IF;
    RETURN v_id;
END $$;
