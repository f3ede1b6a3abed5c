-- State shared by every broker of a database (docs/availability.md): the two maintenance
-- modes and the replay marks of the brokers' push spools. Both live in
-- queen.maintenance_state (a key → jsonb table, a reference table on Citus), so this file
-- adds functions only. The time of a write is a parameter: Citus refuses a function call
-- in a modification of a reference table.

-- The maintenance modes: {"maintenanceMode": bool, "popMaintenanceMode": bool,
-- "updatedAt": text|null}. A mode never set is off.
CREATE OR REPLACE FUNCTION queen.system_state_v1() RETURNS jsonb
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_build_object(
        'maintenanceMode', COALESCE(bool_or((s.value->>'enabled')::bool)
                                    FILTER (WHERE s.key = 'maintenance_mode'), false),
        'popMaintenanceMode', COALESCE(bool_or((s.value->>'enabled')::bool)
                                       FILTER (WHERE s.key = 'pop_maintenance_mode'), false),
        'updatedAt', queen.iso_ms(max(s.updated_at)))
      FROM queen.maintenance_state s
     WHERE s.key IN ('maintenance_mode', 'pop_maintenance_mode')
$$;

-- Switches one mode: p_mode 'push' (Queen's maintenance mode: pushes go to the brokers'
-- spools, the database is left alone) or 'pop' (pops answer empty). Returns the modes.
CREATE OR REPLACE FUNCTION queen.system_state_set_v1(p_mode text, p_enabled bool,
                                          p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key text := CASE p_mode WHEN 'push' THEN 'maintenance_mode'
                              WHEN 'pop' THEN 'pop_maintenance_mode' END;
BEGIN
    IF v_key IS NULL THEN
        RAISE EXCEPTION 'system_state_set_v1: p_mode must be push or pop, got %',
            COALESCE(quote_literal(p_mode), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_enabled IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'system_state_set_v1: p_enabled and p_now must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO queen.maintenance_state AS s (key, value, updated_at)
    VALUES (v_key, jsonb_build_object('enabled', p_enabled), p_now)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
    RETURN queen.system_state_v1();
END $$;

-- The replay mark of one broker's spool: the sequence number of the last spool record
-- whose push committed (0: none yet). The broker moves it in the transaction that pushes
-- the records, so a replay cut off anywhere resumes exactly after what committed.
CREATE OR REPLACE FUNCTION queen.spool_mark_v1(p_spool uuid) RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT COALESCE((SELECT (s.value->>'seq')::bigint FROM queen.maintenance_state s
                      WHERE s.key = 'spool:' || p_spool::text), 0)
$$;

-- Moves the mark forward (never back: an older value leaves it as it is). Returns the mark.
CREATE OR REPLACE FUNCTION queen.spool_mark_set_v1(p_spool uuid, p_seq bigint,
                                        p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_spool IS NULL OR p_seq IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'spool_mark_set_v1: p_spool, p_seq and p_now must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_seq < 1 THEN
        RAISE EXCEPTION 'spool_mark_set_v1: p_seq must be >= 1, got %', p_seq
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO queen.maintenance_state AS s (key, value, updated_at)
    VALUES ('spool:' || p_spool::text, jsonb_build_object('seq', p_seq), p_now)
    ON CONFLICT (key) DO UPDATE SET value = s.value || EXCLUDED.value,
                                    updated_at = EXCLUDED.updated_at
     WHERE COALESCE((s.value->>'seq')::bigint, 0) < (EXCLUDED.value->>'seq')::bigint;
    RETURN queen.spool_mark_v1(p_spool);
END $$;

-- A push spool's hold on the sidecar purge: while the spool holds a push that may have
-- been written before it was spooled (its connection ended under the statement), no
-- sidecar row created after p_since is purged, so the replay finds the original however
-- long the outage lasted. NULL releases it. Returns the hold.
CREATE OR REPLACE FUNCTION queen.spool_hold_v1(p_spool uuid, p_since timestamptz,
                                    p_now timestamptz DEFAULT now())
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_spool IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'spool_hold_v1: p_spool and p_now must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    INSERT INTO queen.maintenance_state AS s (key, value, updated_at)
    VALUES ('spool:' || p_spool::text,
            CASE WHEN p_since IS NULL THEN '{}'::jsonb
                 ELSE jsonb_build_object('holdSince', p_since) END, p_now)
    ON CONFLICT (key) DO UPDATE SET value = (s.value - 'holdSince') || EXCLUDED.value,
                                    updated_at = EXCLUDED.updated_at;
    RETURN p_since;
END $$;
