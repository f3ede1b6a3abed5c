-- Last in CREATE EXTENSION and replayed last by every upgrade (scripts/upgrade-scripts.py):
-- what follows from the per-function traits (sql/traits.sql) and least privilege.

-- The hot-path functions plan without bitmap scans and run generic plans only
-- (docs/decisions.md, "Plans of the hot path"). Bitmap scans off: a batch-1 consume cycle
-- took 20 % fewer instructions (1.55M -> 1.23M, callgrind); off makes a bitmap scan the
-- last choice, never refused. Generic plans only: a statement whose custom plan looked
-- cheaper than its generic one was planned on every call (the queue pop's page of
-- candidates, on 6 calls of 10 under load); their statements read by key. Not where
-- Citus is installed: Citus builds no distributed plan from a generic one with
-- parameters, and plans its statements per call anyway (queen.distribute() resets it in
-- a database that gets Citus later). Set per function, so nothing else a session runs is
-- touched.
DO $$
DECLARE
    f regprocedure;
    v_generic text := CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
                           THEN '' ELSE ' SET plan_cache_mode = force_generic_plan' END;
BEGIN
    FOR f IN SELECT r_function FROM queen.function_traits_v1() WHERE r_hot_path ORDER BY 1 LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_bitmapscan = off%s', f, v_generic);
    END LOOP;
END $$;

-- Least privilege. Every function runs SECURITY DEFINER with a pinned search_path, so
-- callers need EXECUTE only. EXECUTE is revoked from PUBLIC and granted to the NOLOGIN
-- role `queen_broker` (cluster-wide, created once, kept by DROP EXTENSION since other
-- databases may use it). Give a login role membership:
--   CREATE ROLE broker LOGIN PASSWORD '...' IN ROLE queen_broker;
-- It reads no table either: the broker calls functions only (docs/security.md), so the
-- schema is not part of its API. What an operator reads comes through functions and the
-- views queen.partition_storage and queen.consumer_lag (a view reads as its owner).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'queen_broker') THEN
        CREATE ROLE queen_broker NOLOGIN;
    END IF;
END $$;
REVOKE ALL ON ALL ROUTINES IN SCHEMA queen FROM PUBLIC;
GRANT USAGE ON SCHEMA queen TO queen_broker;
GRANT EXECUTE ON ALL ROUTINES IN SCHEMA queen TO queen_broker;
GRANT SELECT ON queen.partition_storage, queen.consumer_lag TO queen_broker;
-- The default tenant is a constant every omitted p_tenant evaluates in the caller's
-- rights (a default is part of the calling statement), so whoever may call a function
-- may evaluate its default.
GRANT EXECUTE ON FUNCTION queen.default_tenant() TO PUBLIC;
-- What the traits keep from the broker.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT r_function FROM queen.function_traits_v1() WHERE NOT r_broker ORDER BY 1 LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM queen_broker', f);
    END LOOP;
END $$;
