-- Queen 2.x's reads from psql: queen.fetch_v1 (reads by offset) and
-- queen.partitions_changed_v1 (partition discovery). Neither takes a lease nor moves a
-- cursor. Each "-- reads::NAME" comment names one check. A fresh empty database.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
SELECT queen.push('orders', '[{"id":1},{"id":2},{"id":3}]', ARRAY['t1','t2','t3'], 'p1')->>'status' AS status;
SELECT queen.push('orders', '[{"id":4}]', ARRAY['t4'], 'p2')->>'status' AS status;

-- reads::fetch_from_an_offset: records, the ends, the next offset.
SELECT r->>'offset' AS off, r->>'transactionId' AS txn, r->'payload' AS payload
  FROM jsonb_array_elements(queen.fetch_v1('[{"queue":"orders","partition":"p1","offset":1,"maxBytes":1000}]')
                            ->'entries'->0->'records') r;
SELECT e->'highWatermark' AS hw, e->'logStartOffset' AS log_start, e->'nextOffset' AS next, e->'error' AS error
  FROM jsonb_array_elements(queen.fetch_v1('[{"queue":"orders","partition":"p1","offset":1,"maxBytes":1000}]')->'entries') e;

-- reads::fetch_errors: past the end, an unknown partition, an unknown queue.
SELECT e->>'partition' AS partition, e->>'error' AS error, jsonb_array_length(e->'records') AS records
  FROM jsonb_array_elements(queen.fetch_v1('[{"queue":"orders","partition":"p1","offset":4,"maxBytes":1000},
                                             {"queue":"orders","partition":"nope","offset":0,"maxBytes":1000},
                                             {"queue":"nobody","partition":"p1","offset":0,"maxBytes":1000}]')->'entries') e;

-- reads::fetch_budget: 12 bytes buy one record of 8 ({"id":1} as stored).
SELECT jsonb_array_length(queen.fetch_v1('[{"queue":"orders","partition":"p1","offset":0,"maxBytes":12}]')
                          ->'entries'->0->'records') AS records;

-- reads::fetch_bad_input
SELECT queen.fetch_v1('[{"queue":"orders","partition":"p1","offset":-1,"maxBytes":10}]');
SELECT queen.fetch_v1('[{"queue":"orders","partition":"p1","offset":0,"maxBytes":10,"isolation":1}]');

-- reads::nothing_moved: no lease, no cursor after the fetches.
SELECT (SELECT count(*) FROM queen.log_leases) AS leases, (SELECT count(*) FROM queen.log_consumers) AS cursors;

-- reads::changed: both partitions, in creation order, and a safeTime; a page of one.
SELECT p->>'name' AS name, p->'lastOffset' AS last_offset, p->'logStart' AS log_start
  FROM jsonb_array_elements(queen.partitions_changed_v1('[{"queue":"orders"}]')->'entries'->0->'partitions') p;
SELECT queen.partitions_changed_v1('[{"queue":"orders"}]') ? 'safeTime' AS has_safe_time;
SELECT jsonb_array_length(c->'entries'->0->'partitions') AS page, c->'entries'->0->'next' IS NOT NULL AS more
  FROM queen.partitions_changed_v1('[{"queue":"orders","limit":1}]') c;
SELECT queen.partitions_changed_v1('[{"queue":"nobody"}]')->'entries'->0->>'error' AS error;

-- reads::changed_bad_input
SELECT queen.partitions_changed_v1('[{"queue":"orders","limit":0}]');
SELECT queen.partitions_changed_v1('[{"queue":"orders","since":"soon"}]');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT queen.partitions_changed_v1('[{"queue":"orders"}]');
ROLLBACK;

DROP EXTENSION queen_ack;
