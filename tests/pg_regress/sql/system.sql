-- The state every broker of a database shares (docs/availability.md): the maintenance
-- modes (queen.system_state_v1, queen.system_state_set_v1) and the spool replay marks
-- (queen.spool_mark_v1, queen.spool_mark_set_v1). Each "-- system::NAME" comment names
-- one check. A fresh empty database.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;

-- system::modes_start_off: a mode never set is off, with no time.
SELECT queen.system_state_v1();

-- system::push_mode_on_then_pop_mode: each mode is switched alone; the time is the caller's.
SELECT queen.system_state_set_v1('push', true, '2026-12-03 10:00:00+00') - 'updatedAt';
SELECT queen.system_state_set_v1('pop', true, '2026-12-03 10:00:05+00');
SELECT queen.system_state_set_v1('push', false, '2026-12-03 10:00:07+00');

-- system::bad_mode_and_nulls_refused: 22023 / 22004, nothing changes.
SELECT queen.system_state_set_v1('all', true);
SELECT queen.system_state_set_v1(NULL, true);
SELECT queen.system_state_set_v1('pop', NULL);
SELECT queen.system_state_v1() - 'updatedAt';

-- system::spool_mark_starts_at_zero_and_moves_forward_only
SELECT queen.spool_mark_v1('6f1c1d9e-0000-4000-8000-000000000001');
SELECT queen.spool_mark_set_v1('6f1c1d9e-0000-4000-8000-000000000001', 10);
SELECT queen.spool_mark_set_v1('6f1c1d9e-0000-4000-8000-000000000001', 4);
SELECT queen.spool_mark_set_v1('6f1c1d9e-0000-4000-8000-000000000001', 25);
-- another spool has its own mark
SELECT queen.spool_mark_v1('6f1c1d9e-0000-4000-8000-000000000002');

-- system::spool_mark_bad_input_refused
SELECT queen.spool_mark_set_v1('6f1c1d9e-0000-4000-8000-000000000001', 0);
SELECT queen.spool_mark_set_v1(NULL, 3);
SELECT queen.spool_mark_v1('6f1c1d9e-0000-4000-8000-000000000001');

-- system::mark_rolls_back_with_its_push: a mark moved in a transaction that rolls back
-- is not moved (the replay pushes and marks in one transaction).
BEGIN;
SELECT queen.spool_mark_set_v1('6f1c1d9e-0000-4000-8000-000000000001', 99);
ROLLBACK;
SELECT queen.spool_mark_v1('6f1c1d9e-0000-4000-8000-000000000001');

-- system::broker_role_can_call_them
SELECT has_function_privilege('queen_broker', 'queen.system_state_set_v1(text, bool, timestamptz)', 'EXECUTE')
   AND has_function_privilege('queen_broker', 'queen.spool_mark_set_v1(uuid, bigint, timestamptz)', 'EXECUTE')
   AND NOT has_function_privilege('public', 'queen.spool_mark_set_v1(uuid, bigint, timestamptz)', 'EXECUTE')
       AS granted;

-- system::spool_hold_keeps_sidecar_rows_from_the_purge: a hold keeps every sidecar row
-- created after it; released, the purge takes them; the hold survives a mark move.
SELECT queen.push('held', '[1,2]', ARRAY['h1', 'h2'])->>'status' AS pushed;
SELECT p.id AS pid, now() - interval '2 hours' AS old, now() - interval '3 hours' AS since
  FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'held' \gset
UPDATE queen.log_txns SET created_at = :'old' WHERE partition_id = :'pid';
SELECT queen.spool_hold_v1('6f1c1d9e-0000-4000-8000-000000000003', :'since') IS NOT NULL AS held;
SELECT queen.spool_mark_set_v1('6f1c1d9e-0000-4000-8000-000000000003', 7);
SELECT (value ? 'holdSince') AS hold_kept, value->>'seq' AS seq FROM queen.maintenance_state
 WHERE key = 'spool:6f1c1d9e-0000-4000-8000-000000000003';
SELECT r->>'deleted' AS deleted_while_held, r->>'clamped' AS clamped
  FROM (SELECT queen.log_txns_purge_step_v1(:'pid', now(), 100) AS r) s;
SELECT queen.spool_hold_v1('6f1c1d9e-0000-4000-8000-000000000003', NULL) IS NULL AS released;
SELECT queen.spool_mark_v1('6f1c1d9e-0000-4000-8000-000000000003') AS mark_kept;
SELECT r->>'deleted' AS deleted_after_release
  FROM (SELECT queen.log_txns_purge_step_v1(:'pid', now(), 100) AS r) s;
