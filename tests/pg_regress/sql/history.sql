-- The sampled history of the status and analytics routes (docs/observability.md):
-- queen.history_record_v1 (a broker's minute), queen.history_queues_v1 (the queues'
-- snapshot), queen.history_lifecycle_v1 (run_maintenance's report and the trim), and
-- their series. Each "-- history::NAME" comment names one check. A fresh empty database.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;

-- history::samples_of_a_minute_add_up: counters add, gauges sum with their extremes.
SELECT queen.history_record_v1('h:1', 'h', 1, 7, '{"pushMessages": 5, "pushRequests": 1, "rssBytes": 100, "poolSize": 4, "poolIdle": 3, "parked": 2}', '2026-12-03 10:00:05+00');
SELECT queen.history_record_v1('h:1', 'h', 1, 7, '{"pushMessages": 7, "ackMessages": 2, "rssBytes": 300, "poolSize": 4, "poolIdle": 1, "parked": 0}', '2026-12-03 10:00:45+00');
SELECT queen.history_record_v1('h:2', 'h', 2, 8, '{"pushMessages": 1}', '2026-12-03 10:00:50+00');
SELECT queen.history_record_v1('h:1', 'h', 1, 7, '{"pushMessages": 3}', '2026-12-03 10:01:10+00');
SELECT r_bucket, r_broker, r_samples, r_push_messages, r_ack_messages, r_rss_bytes_avg,
       r_rss_bytes_max, r_pool_idle_avg, r_pool_idle_min, r_parked_avg, r_parked_max
  FROM queen.history_brokers_v1('2026-12-03 10:00:30+00', '2026-12-03 10:02:00+00', interval '1 minute');

-- history::buckets_roll_up: a five-minute bucket holds both minutes.
SELECT r_bucket, r_broker, r_samples, r_push_messages
  FROM queen.history_brokers_v1('2026-12-03 10:00:00+00', '2026-12-03 10:04:00+00', interval '5 minutes');

-- history::bad_samples_refused: NULLs 22004, a sample that is not an object 22023,
-- parkedQueues that is not an array 22023 (and nothing of it recorded).
SELECT queen.history_record_v1(NULL, 'h', 1, 7, '{}');
SELECT queen.history_record_v1('h:1', 'h', 1, 7, '[1]');
SELECT queen.history_record_v1('h:1', 'h', 1, 7, '{"parkedQueues": {"q": 1}}', '2026-12-03 10:00:55+00');
SELECT r_samples FROM queen.history_brokers_v1('2026-12-03 10:00:00+00', '2026-12-03 10:00:59+00', interval '1 minute') WHERE r_broker = 'h:1';

-- history::parked_per_queue_and_broker: each sample's long-polls per queue add up; the
-- average is over the broker's samples of the bucket (a sample without the queue counts
-- 0); tenant and queue narrow it; a queue with none parked gets no row.
SELECT queen.history_record_v1('p:1', 'p', 1, 9, '{"parked": 3, "parkedQueues": [{"tenantId": "6f1c1d9e-0000-4000-8000-000000000001", "queue": "a", "parked": 2}, {"tenantId": "6f1c1d9e-0000-4000-8000-000000000001", "queue": "b", "parked": 1}, {"tenantId": "6f1c1d9e-0000-4000-8000-000000000001", "queue": "c", "parked": 0}]}', '2026-12-03 10:03:05+00');
SELECT queen.history_record_v1('p:1', 'p', 1, 9, '{"parked": 4, "parkedQueues": [{"tenantId": "6f1c1d9e-0000-4000-8000-000000000001", "queue": "a", "parked": 4}]}', '2026-12-03 10:03:25+00');
SELECT queen.history_record_v1('p:1', 'p', 1, 9, '{"parked": 0, "parkedQueues": []}', '2026-12-03 10:03:45+00');
SELECT queen.history_record_v1('p:2', 'p', 2, 10, '{"parked": 1, "parkedQueues": [{"tenantId": "6f1c1d9e-0000-4000-8000-000000000002", "queue": "a", "parked": 1}]}', '2026-12-03 10:03:50+00');
SELECT * FROM queen.history_parked_series_v1('2026-12-03 10:03:00+00', '2026-12-03 10:04:00+00', interval '1 minute', NULL, NULL);
SELECT * FROM queen.history_parked_series_v1('2026-12-03 10:03:00+00', '2026-12-03 10:04:00+00', interval '1 minute', '6f1c1d9e-0000-4000-8000-000000000002', NULL);
SELECT r_queue, r_broker FROM queen.history_parked_series_v1('2026-12-03 10:03:00+00', '2026-12-03 10:04:00+00', interval '1 minute', NULL, 'b');
SELECT count(*) AS rows_of_c FROM queen.history_parked WHERE queue = 'c';

-- history::one_snapshot_a_minute: the second filer of a minute files nothing; a refresh
-- (p_replace) files over it.
SELECT queen.history_queues_v1('[{"queueId": "6f1c1d9e-0000-4000-8000-00000000000a", "queue": "q", "partitions": 2, "groups": 1, "messages": 10, "pushed": 10, "consumed": 0, "lag": 10, "dlq": 0}]', '2026-12-03 10:00:10+00');
SELECT queen.history_queues_v1('[{"queueId": "6f1c1d9e-0000-4000-8000-00000000000a", "queue": "q", "partitions": 2, "groups": 1, "messages": 99, "pushed": 99, "consumed": 0, "lag": 99, "dlq": 0}]', '2026-12-03 10:00:20+00');
SELECT queen.history_queues_v1('[{"queueId": "6f1c1d9e-0000-4000-8000-00000000000a", "queue": "q", "partitions": 2, "groups": 1, "messages": 12, "pushed": 12, "consumed": 2, "lag": 10, "dlq": 0}]', '2026-12-03 10:00:30+00', true);
SELECT queen.history_queues_v1('[{"queueId": "6f1c1d9e-0000-4000-8000-00000000000a", "queue": "q", "partitions": 2, "groups": 1, "messages": 4, "pushed": 40, "consumed": 36, "lag": 4, "oldestAgeS": 9, "dlq": 1, "dlqPartitions": 1, "leases": 1, "leasedPartitions": 1, "leasedMessages": 3}]', '2026-12-03 10:07:00+00');
SELECT queen.history_queues_v1('[{"queueId": "6f1c1d9e-0000-4000-8000-00000000000a", "queue": "q", "partitions": 1, "groups": 1, "messages": 0, "pushed": 30, "consumed": 36, "lag": 0, "dlq": 0}]', '2026-12-03 10:08:00+00');

-- history::growth_between_snapshots: a bucket's traffic is the growth from the snapshot
-- before it (found however far back), a shrinking count is none; the rest is the
-- bucket's last snapshot.
SELECT * FROM queen.history_queues_series_v1('2026-12-03 10:05:00+00', '2026-12-03 10:09:00+00', interval '1 minute', NULL, 'q');
SELECT r_bucket, r_pushed, r_consumed, r_lag, r_pushed_total
  FROM queen.history_queues_series_v1('2026-12-03 10:00:00+00', '2026-12-03 10:09:00+00', interval '15 minutes', NULL, NULL);
SELECT count(*) FROM queen.history_queues_series_v1('2026-12-03 10:00:00+00', '2026-12-03 10:09:00+00', interval '1 minute', '6f1c1d9e-0000-4000-8000-0000000000ff', NULL) AS other_tenant;

-- history::lag_and_totals_in_one_pass: the oldest age over every queue per bucket; per
-- queue over the range, the growth from the snapshot before it to its last.
SELECT * FROM queen.history_lag_series_v1('2026-12-03 10:00:00+00', '2026-12-03 10:09:00+00', interval '1 minute', NULL);
SELECT * FROM queen.history_queue_totals_v1('2026-12-03 10:05:00+00', '2026-12-03 10:09:00+00', NULL);
SELECT * FROM queen.history_queue_totals_v1('2026-12-03 10:00:00+00', '2026-12-03 10:09:00+00', NULL);

-- history::pushed_per_minute_of_some_queues: the console's sparklines.
SELECT * FROM queen.history_pushed_v1('2026-12-03 10:05:00+00', '2026-12-03 10:09:00+00', ARRAY['6f1c1d9e-0000-4000-8000-00000000000a'::uuid, '6f1c1d9e-0000-4000-8000-0000000000ff'::uuid]);

-- history::bad_snapshot_refused: 22023.
SELECT queen.history_queues_v1('{}');
SELECT queen.history_queues_v1('[]', NULL);

-- history::lifecycle_reports_and_trim: a report is filed; rows older than
-- queen.history_retention go.
SET queen.history_retention = '1 hour';
SELECT queen.history_lifecycle_v1('{"messages": 40, "expiredMessages": 5, "evicted": 3, "segments": 4, "sidecarRows": 9, "durationMs": 2.5}', '2026-12-03 10:30:00+00');
SELECT * FROM queen.history_lifecycle_series_v1('2026-12-03 10:00:00+00', '2026-12-03 11:00:00+00', interval '1 hour');
SELECT count(*) AS snapshots_left FROM queen.history_queues;
SELECT queen.history_lifecycle_v1('{}', '2026-12-03 11:07:30+00');
SELECT (SELECT count(*) FROM queen.history_brokers) AS brokers,
       (SELECT count(*) FROM queen.history_parked) AS parked,
       (SELECT count(*) FROM queen.history_queues) AS queues,
       (SELECT count(*) FROM queen.history_lifecycle) AS runs;
RESET queen.history_retention;
SELECT queen.history_retention();
SET queen.history_retention = 'soon';
SELECT queen.history_retention();
RESET queen.history_retention;

-- history::postgres_stats_keys: Queen's keys.
SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(queen.postgres_stats_v1()) k;
