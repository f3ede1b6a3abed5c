-- A library per version (docs/operations.md, "Upgrading"): the C functions of version V
-- run queen_ack-V.so, named by V's install script, so that a database still at an older
-- version keeps running its own library after a newer one is installed. An upgrade step
-- to V re-creates the C functions it changes with V's library and ends with
-- relink_library_v1('queen_ack-V'), which moves every other C function of the extension
-- there too: after ALTER EXTENSION queen_ack UPDATE no function runs an older library.
-- Superuser only (it creates C functions); not granted to queen_broker.
CREATE FUNCTION queen.relink_library_v1(p_library text)
RETURNS int
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f regprocedure;
    v_def text;
    v_new text;
    n int := 0;
BEGIN
    IF p_library IS NULL OR p_library !~ '^queen_ack-[0-9]+\.[0-9]+\.[0-9]+$' THEN
        RAISE EXCEPTION 'relink_library_v1: p_library must be queen_ack-MAJOR.MINOR.PATCH, got %',
                        COALESCE(quote_literal(p_library), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR f IN SELECT p.oid::regprocedure
               FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                              AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'queen_ack'
              WHERE p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c')
                AND p.probin IS DISTINCT FROM p_library
              ORDER BY p.oid
    LOOP
        -- The function exactly as it is (arguments, result, flags, settings, symbol),
        -- with only its library replaced; its grants and comment stay.
        v_def := pg_get_functiondef(f);
        v_new := regexp_replace(v_def, E'\nAS ''[^'']*'', ',
                                E'\nAS ' || quote_literal(p_library) || ', ');
        IF v_new = v_def THEN
            RAISE EXCEPTION 'relink_library_v1: no library found in the definition of %', f
                USING ERRCODE = 'internal_error';
        END IF;
        EXECUTE v_new;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
