-- CALL queen.run_maintenance() as an operator (or pg_cron) calls it: it commits between
-- steps, so it runs here, at the top level of a session, not inside a #[pg_test]
-- transaction (docs/operations.md). Each "-- maintenance::NAME" comment names one check
-- (docs/operations.md, "The test suites" maps the old shell suite). What needs two sessions at once or
-- pg_cron's clock stays in tests/maintenance.sh.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
-- Make the segments and sidecar rows of the queues named LIKE p_queues p_seconds older;
-- returns how many rows it aged. (UTC arithmetic: Citus refuses a STABLE timestamptz -
-- interval on a column; dynamic SQL: literal values plan on Citus where parameters in a
-- join may not.)
-- (a schema of the test's own: Citus warns on a function in pg_temp, which it cannot
-- send to the workers)
CREATE SCHEMA regress;
CREATE FUNCTION regress.age(p_queues text, p_seconds int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE t text; n bigint; total bigint := 0;
BEGIN
    FOREACH t IN ARRAY ARRAY['log_segments', 'log_txns'] LOOP
        EXECUTE format($q$UPDATE queen.%I x
                  SET created_at = ((x.created_at AT TIME ZONE 'UTC') - make_interval(secs => %s)) AT TIME ZONE 'UTC'
                 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                WHERE p.id = x.partition_id AND q.name LIKE %L$q$, t, p_seconds, p_queues);
        GET DIAGNOSTICS n = ROW_COUNT;
        total := total + n;
    END LOOP;
    RETURN total;
END $$;

-- maintenance::idle_run_does_nothing (the report, but for its duration)
CALL queen.run_maintenance(10000, 1000) \gset
SELECT key, value FROM jsonb_each(:'p_report') WHERE key <> 'durationMs' ORDER BY key;

-- Rule 1 on a queue with retention, the sidecar purge on the queue's clock, and the
-- orphans of a plain DELETE FROM queen.queues (how Queen's SDK suites clean up): one run.
SELECT queen.configure_queue_v1('ret', NULL, NULL, '{"retentionSeconds": 60, "dedupWindowSeconds": 60}') IS NOT NULL AS configured;
SELECT queen.push('ret', '[1,2,3]')->>'status' AS a, queen.push('ret', '[4]')->>'status' AS b,
       queen.push('gone', '[1,2]')->>'status' AS c, queen.push('gone', '[3]', NULL, 'P2')->>'status' AS d;
SELECT regress.age('ret', 1000) AS aged_rows;
SELECT queen.push('ret', '[5]')->>'status' AS young;
DELETE FROM queen.queues WHERE name = 'gone';

-- maintenance::one_run_applies_retention_purge_and_removes_orphans
CALL queen.run_maintenance(10000, 1000) \gset
SELECT r->'segments' AS segments, r->'messages' AS messages,
       r->'sidecarRows' AS sidecar_rows, r->'orphanRows' AS orphan_rows
  FROM (SELECT :'p_report'::jsonb AS r) x;

-- maintenance::retention_left_the_young_message_and_log_start
SELECT count(*) AS segments, min(base_offset) AS first_offset FROM queen.log_segments;
SELECT log_start FROM queen.log_partitions;

-- maintenance::orphans_are_gone
SELECT count(*) AS orphans FROM queen.log_txns t
 WHERE NOT EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = t.partition_id);

-- maintenance::storage_view_shows_what_is_left
SELECT queue, partition, segments, sidecar_rows, log_start, last_offset FROM queen.partition_storage;

-- maintenance::second_run_has_nothing_left
CALL queen.run_maintenance(10000, 1000) \gset
SELECT r->'segments' AS segments, r->'sidecarRows' AS sidecar_rows, r->'orphanRows' AS orphan_rows
  FROM (SELECT :'p_report'::jsonb AS r) x;

-- maintenance::time_budget_stops_a_run_and_says_more: fifty partitions with due work, a
-- budget of 1 ms.
SELECT count(*) FILTER (WHERE queen.push('more' || i, '[1]')->>'status' = 'queued') AS queued
  FROM generate_series(1, 50) i;
SELECT regress.age('more%', 5000) AS aged_rows;
CALL queen.run_maintenance(1, 1) \gset
SELECT :'p_report'::jsonb->'ran' AS ran, :'p_report'::jsonb->'more' AS more;

-- maintenance::bad_arguments_are_refused
CALL queen.run_maintenance(0);
\echo :LAST_ERROR_SQLSTATE
CALL queen.run_maintenance(10, 0);
\echo :LAST_ERROR_SQLSTATE
