-- Queen's queue options, each accepted and enforced (docs/decisions.md, "Queue options").
-- Time is moved by ageing rows (created_at, last_write_at), never by sleeping, except a
-- retryDelay of a few hundred milliseconds. Each "-- options::NAME" comment names one check.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
CREATE SCHEMA regress;
-- Make the segments of queue p_queue p_seconds older (UTC arithmetic, dynamic SQL: as
-- maintenance.sql, for Citus).
CREATE FUNCTION regress.age(p_queue text, p_seconds int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE format($q$UPDATE queen.log_segments x
              SET created_at = ((x.created_at AT TIME ZONE 'UTC') - make_interval(secs => %s)) AT TIME ZONE 'UTC'
             FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
            WHERE p.id = x.partition_id AND q.name = %L$q$, p_seconds, p_queue);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;
CREATE FUNCTION regress.quiet(p_queue text, p_seconds int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
    EXECUTE format($q$UPDATE queen.log_partitions p
              SET last_write_at = ((p.last_write_at AT TIME ZONE 'UTC') - make_interval(secs => %s)) AT TIME ZONE 'UTC'
             FROM queen.queues q WHERE q.id = p.queue_id AND q.name = %L$q$, p_seconds, p_queue);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- options::accepted_and_echoed: Queen's Go SDK body is accepted; the answer carries every
-- option's effective value (ttl 0 where Queen would echo its default 3600).
SELECT r->'configured' AS configured, r->'options' AS options
  FROM queen.configure_queue_v1('go', NULL, NULL,
       '{"leaseTime":60,"maxSize":1000,"priority":10,"retryLimit":5}') r;
-- Queen's Python SDK test_configure_queue reads these back.
SELECT r->'options'->'leaseTime' AS lease_time, r->'options'->'retryLimit' AS retry_limit,
       r->'options'->'priority' AS priority, r->'options'->'maxSize' AS max_size
  FROM queen.configure_queue_v1('py', NULL, NULL,
       '{"leaseTime":60,"retryLimit":5,"priority":7,"maxSize":5000,"dlqAfterMaxRetries":true}') r;
-- A later configure keeps what it does not name.
SELECT r->'options'->'maxSize' AS max_size, r->'options'->'ttl' AS ttl
  FROM queen.configure_queue_v1('go', NULL, NULL, '{"ttl":30}') r;
-- options::refused: a negative or non-integer value is 22023, nothing stored.
SELECT queen.configure_queue_v1('go', NULL, NULL, '{"maxSize":-1}');
SELECT queen.configure_queue_v1('go', NULL, NULL, '{"windowBuffer":"soon"}');
SELECT queen.configure_queue_v1('go', NULL, NULL, '{"colour":1}');
SELECT priority, max_size, ttl FROM queen.queues WHERE name = 'go';

-- options::window_buffer: a partition is not served until it has been quiet that long.
SELECT queen.configure_queue_v1('win', NULL, NULL, '{"windowBuffer":60}') IS NOT NULL AS configured;
SELECT queen.push('win', '[1,2]', ARRAY['w1','w2'])->>'status' AS pushed;
SELECT count(*) AS served_while_busy FROM queen.pop('win', p_batch => 10, p_lease_seconds => 30);
-- A partition pop, whose first contact creates the cursor, waits as well.
SELECT count(*) AS served_by_partition
  FROM queen.log_pop_v1('win', 'Default', '__QUEUE_MODE__', 10, 30, 'w');
SELECT regress.quiet('win', 61);
SELECT count(*) AS served_when_quiet FROM queen.pop('win', p_batch => 10, p_lease_seconds => 30);

-- options::ttl: a message older than the ttl is never delivered; the group's evicted
-- count says how many it lost.
SELECT queen.configure_queue_v1('ttl', NULL, NULL, '{"ttl":60}') IS NOT NULL AS configured;
SELECT queen.push('ttl', '[1,2,3]', ARRAY['t1','t2','t3'])->>'status' AS pushed;
SELECT regress.age('ttl', 61);
SELECT queen.push('ttl', '[4]', ARRAY['t4'])->>'status' AS pushed;
SELECT r_transaction_id FROM queen.pop('ttl', p_batch => 10, p_lease_seconds => 30);
SELECT consumer_group, committed, evicted FROM queen.consumer_lag WHERE queue = 'ttl';
-- A queue that never set ttl keeps its old messages (Queen's default does not apply).
SELECT queen.push('keep', '[1]', ARRAY['k1'])->>'status' AS pushed;
SELECT regress.age('keep', 86400);
SELECT r_transaction_id FROM queen.pop('keep', p_batch => 10, p_lease_seconds => 30);

-- options::retry_delay: a failed ack holds the redelivery retryDelay milliseconds.
SELECT queen.configure_queue_v1('rd', NULL, NULL, '{"retryDelay":600}') IS NOT NULL AS configured;
SELECT queen.push('rd', '[1]', ARRAY['r1'])->>'status' AS pushed;
CREATE TEMP TABLE leased AS SELECT * FROM queen.pop('rd', p_batch => 10, p_lease_seconds => 30);
SELECT (a->>'redeliverAt')::timestamptz - clock_timestamp() BETWEEN interval '0.3 s' AND interval '0.6 s' AS held
  FROM (SELECT queen.ack(r_partition_id, r_lease_id, ARRAY['r1'], ARRAY['failed']) a FROM leased) x;
SELECT count(*) AS served_while_held FROM queen.pop('rd', p_batch => 10, p_lease_seconds => 30);
SELECT pg_sleep(0.7);
SELECT r_transaction_id AS redelivered FROM queen.pop('rd', p_batch => 10, p_lease_seconds => 30);

-- options::max_wait: run_maintenance moves groups past messages that waited longer,
-- counted in waitEvicted and the group's evicted; a consumed message is not counted.
SELECT queen.configure_queue_v1('mw', NULL, NULL, '{"maxWaitTimeSeconds":60}') IS NOT NULL AS configured;
SELECT queen.push('mw', '[1,2,3]', ARRAY['m1','m2','m3'])->>'status' AS pushed;
CREATE TEMP TABLE first AS SELECT * FROM queen.pop('mw', p_batch => 1, p_lease_seconds => 30);
SELECT queen.ack(r_partition_id, r_lease_id, ARRAY['m1'])->>'acked' AS acked FROM first;
SELECT regress.age('mw', 61);
SELECT queen.push('mw', '[4]', ARRAY['m4'])->>'status' AS pushed;
SELECT count(*) AS due FROM queen.wait_eviction_plan_v1();
CALL queen.run_maintenance(10000, 1000) \gset
SELECT (:'p_report'::jsonb)->'waitEvicted' AS wait_evicted, (:'p_report'::jsonb)->'evicted' AS evicted;
SELECT consumer_group, committed, evicted FROM queen.consumer_lag WHERE queue = 'mw';
SELECT count(*) AS due_after FROM queen.wait_eviction_plan_v1();
SELECT r_transaction_id FROM queen.pop('mw', p_batch => 10, p_lease_seconds => 30);
SELECT evicted FROM queen.history_lifecycle ORDER BY at DESC LIMIT 1;

-- options::max_wait_first_contact: a group that starts reading after messages waited
-- too long is not served them, even before maintenance ran (retired at its pop, counted).
SELECT queen.configure_queue_v1('mw2', NULL, NULL, '{"maxWaitTimeSeconds":60}') IS NOT NULL AS configured;
SELECT queen.push('mw2', '[1,2]', ARRAY['w1','w2'])->>'status' AS pushed;
SELECT regress.age('mw2', 61);
SELECT queen.push('mw2', '[3]', ARRAY['w3'])->>'status' AS pushed;
SELECT r_transaction_id FROM queen.pop('mw2', p_batch => 10, p_lease_seconds => 30);
SELECT consumer_group, evicted FROM queen.consumer_lag WHERE queue = 'mw2';

-- options::expiry_rule: the rule both halves apply (queen_log::lifecycle::expired):
-- older than the seconds expires, younger does not; 0 seconds is off; no message, false.
-- run_maintenance's plan calls it as queen.expired_v1; the pop's expiry in Rust.
SELECT queen.expired_v1(clock_timestamp() - interval '61 s', 60) AS older,
       queen.expired_v1(clock_timestamp() - interval '59 s', 60) AS younger,
       queen.expired_v1(clock_timestamp() - interval '1 day', 0) AS off,
       queen.expired_v1(NULL, 60) AS no_message;

-- options::max_size: a push that would leave more unconsumed messages than maxSize is
-- 54000 QFULL and writes nothing; consuming makes room.
SELECT queen.configure_queue_v1('cap', NULL, NULL, '{"maxSize":3}') IS NOT NULL AS configured;
SELECT queen.push('cap', '[1,2]', ARRAY['c1','c2'])->>'status' AS pushed;
SELECT queen.push('cap', '[3,4]', ARRAY['c3','c4']);
SELECT last_offset FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'cap';
SELECT queen.push('cap', '[3]', ARRAY['c3'])->>'status' AS pushed;
SELECT queen.push('cap', '[4]', ARRAY['c4']);
CREATE TEMP TABLE capped AS SELECT * FROM queen.pop('cap', p_batch => 2, p_lease_seconds => 30);
SELECT queen.ack(r_partition_id, r_lease_id, array_agg(r_transaction_id))->>'acked' AS acked
  FROM capped GROUP BY r_partition_id, r_lease_id;
SELECT queen.push('cap', '[4,5]', ARRAY['c4','c5'])->>'status' AS pushed;
-- Every partition counts toward the queue's cap: the queue holds 3, so a push into a
-- new partition is refused as well (rolled back, the new partition with it).
SELECT queen.push('cap', '[6]', ARRAY['o1'], 'other');

-- options::priority: stored, read by the broker's namespace and task pops.
SELECT name, priority FROM queen.queues WHERE name IN ('go', 'py') ORDER BY name;
