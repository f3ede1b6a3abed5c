-- queen_ack 0.2.0 -> 0.3.0: what an upgrade cannot replay (sql/updates/README.md).
-- Every function, view and grant of 0.3.0 follows from its install script, replayed.

-- An upgrade replays every C function onto the new version's library, so the step that
-- moved them (0.2.0's relink) has no caller left.
DROP FUNCTION IF EXISTS queen.relink_library_v1(text);
