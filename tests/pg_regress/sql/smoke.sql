-- The README's psql walk-through, typed as a reader would, and CREATE/DROP EXTENSION
-- leaving nothing behind. Each "-- smoke::NAME" comment names one check (the map from the
-- old shell suite: docs/operations.md, "The test suites"). tests/regress.sh gives this file a fresh empty
-- database; on Citus that database has citus and its workers, and the extension is
-- distributed right after CREATE EXTENSION, as an operator does.
\set VERBOSITY terse
\set SHOW_CONTEXT never

-- smoke::create_extension
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;

-- smoke::push
SELECT queen.push('orders', '[{"id":1},{"id":2},null]', ARRAY['t1','t2','t3'])->>'status' AS status;

-- smoke::pop_decoded
SELECT r_offset, r_transaction_id, r_payload
  FROM queen.pop('orders', p_batch => 10, p_lease_seconds => 30)
 ORDER BY r_offset;

-- smoke::ack_by_txn: the partition id and lease id of the pop, as the walk-through passes
-- them (on Citus such a call is delegated to the worker holding the partition).
SELECT partition_id AS pid, worker_id AS lease FROM queen.log_leases \gset
SELECT r->'acked' AS acked, r->'leaseReleased' AS lease_released
  FROM queen.ack(:'pid', :'lease', ARRAY['t1','t2','t3']) AS r;

-- smoke::decode
SELECT count(*) AS decoded FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d;

-- smoke::xxh3_hello
SELECT queen.xxh3_128_hex('hello');

-- smoke::drop_extension_leaves_nothing
DROP EXTENSION queen_ack;
SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'queen') AS schemas,
       (SELECT count(*) FROM pg_proc WHERE proname LIKE 'log_%_v1') AS functions;

-- smoke::recreate_extension
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
SELECT count(*) AS schemas FROM pg_namespace WHERE nspname = 'queen';

-- smoke::create_extension_keeps_callers_search_path
DROP EXTENSION queen_ack;
CREATE EXTENSION queen_ack;
SHOW search_path;
