-- Least privilege, last in CREATE EXTENSION. Every function runs SECURITY DEFINER with a
-- pinned search_path, so callers need EXECUTE only. EXECUTE is revoked from PUBLIC and
-- granted to the NOLOGIN role `queen_broker` (cluster-wide, created once, kept by DROP
-- EXTENSION since other databases may use it). Give a login role membership:
--   CREATE ROLE broker LOGIN PASSWORD '...' IN ROLE queen_broker;
-- It reads no table either: the broker calls functions only (docs/security.md), so the schema is
-- not part of its API. What an operator reads comes through functions and the views
-- queen.partition_storage and queen.consumer_lag (a view reads as its owner).
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
-- Distributing the schema over Citus is the operator's step (as the extension's owner).
REVOKE EXECUTE ON FUNCTION queen.distribute(int) FROM queen_broker;
-- Re-pointing the C functions at a library is an upgrade's step (sql/library.sql).
REVOKE EXECUTE ON FUNCTION queen.relink_library_v1(text) FROM queen_broker;
