-- Streams from psql (docs/sql-api.md "Streams"): register a query, pop the source,
-- commit a cycle (state ops, sink pushes and the source ack in one transaction), read
-- the state back. Each "-- streams::NAME" comment names one check.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
SELECT queen.push('events', '[{"amount": 1}, {"amount": 2}, {"amount": 3}, {"amount": 4}]',
                  ARRAY['e1', 'e2', 'e3', 'e4'])->>'status' AS pushed;
SELECT queen.push('other', '[{"amount": 9}]', ARRAY['o1'])->>'status' AS pushed_other;

-- streams::register_fresh: a new name is fresh, its id is the one later calls use.
SELECT r->'success' AS success, r->'fresh' AS fresh, r->'reset' AS reset, r->>'name' AS name
  FROM queen.streams_register_query_v1(
       '{"name": "sum", "source_queue": "events", "sink_queue": "sums", "config_hash": "h1"}') r;
SELECT r->>'query_id' AS qid
  FROM queen.streams_register_query_v1(
       '{"name": "sum", "source_queue": "events", "sink_queue": "sums", "config_hash": "h1"}') r \gset
-- streams::register_same_hash_keeps: the same hash again is not fresh and keeps the id.
SELECT r->'fresh' AS fresh, r->>'query_id' = :'qid' AS same_id
  FROM queen.streams_register_query_v1(
       '{"name": "sum", "source_queue": "events", "sink_queue": "sums", "config_hash": "h1"}') r;
-- streams::register_bad_input_refused: Queen's texts, 22023, nothing stored.
SELECT queen.streams_register_query_v1('{"source_queue": "events", "config_hash": "h"}');
SELECT queen.streams_register_query_v1('{"name": "x", "source_queue": "events"}');
SELECT queen.streams_register_query_v1('{"name": "x", "source_queue": "events", "config_hash": "h", "colour": 1}');
SELECT count(*) AS queries FROM queen.stream_queries;

-- The source batch, leased to the stream's group.
SELECT r_partition_id AS pid, r_lease_id AS lease
  FROM queen.pop('events', p_partition => 'Default', p_group => 'streams.sum', p_batch => 3) LIMIT 1 \gset
SELECT p.id AS other_pid FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
 WHERE q.name = 'other' \gset

-- streams::cycle_commits_all_three: state upserted, the sink pushed, the cursor past e3
-- (cumulative: e1..e3), the lease released.
SELECT r->'success' AS success, r->>'queueName' AS queue, r->'state_ops_applied' AS ops,
       r->'push_results'->0->>'status' AS pushed, r->'ack_result' AS ack
  FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'state_ops', '[{"type": "upsert", "key": "w\u001f0", "value": {"acc": 6, "windowEnd": 1000}},
                      {"type": "upsert", "key": "w\u001f1", "value": {"acc": 0, "windowEnd": 2000}},
                      {"type": "upsert", "key": "a%b", "value": 1}]'::jsonb,
       'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 6}, "transactionId": "s-1"}]'::jsonb,
       'ack', jsonb_build_object('transactionId', 'e3', 'leaseId', :'lease', 'status', 'completed', 'count', 3))) r;
SELECT committed, total_consumed FROM queen.log_consumers WHERE consumer_group = 'streams.sum';
SELECT r_transaction_id, r_payload FROM queen.pop('sums', p_partition => 'p1', p_auto_ack => true);

-- streams::retry_of_the_last_cycle_is_a_noop: the same request again (its answer was
-- lost) is recognised: replayed, nothing applied twice.
SELECT r->'success' AS success, r->'replayed' AS replayed, r->'state_ops_applied' AS ops
  FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'state_ops', '[{"type": "upsert", "key": "w\u001f0", "value": {"acc": 6, "windowEnd": 1000}},
                      {"type": "upsert", "key": "w\u001f1", "value": {"acc": 0, "windowEnd": 2000}},
                      {"type": "upsert", "key": "a%b", "value": 1}]'::jsonb,
       'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 6}, "transactionId": "s-1"}]'::jsonb,
       'ack', jsonb_build_object('transactionId', 'e3', 'leaseId', :'lease', 'status', 'completed', 'count', 3))) r;
SELECT count(*) AS sink_messages FROM queen.log_txns t JOIN queen.log_partitions p ON p.id = t.partition_id
  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'sums';

-- streams::state_get_filters: all keys by key order; by keys; by a literal prefix (a
-- `%` is a character, not a wildcard); by ripeness (numeric windowEnd at or before).
SELECT jsonb_path_query_array(r->'rows', '$[*].key') AS all_keys
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid')) r;
SELECT jsonb_path_query_array(r->'rows', '$[*].value') AS by_keys
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid',
       'keys', '["a%b", "missing"]'::jsonb)) r;
SELECT jsonb_path_query_array(r->'rows', '$[*].key') AS by_prefix
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid',
       'key_prefix', 'a%')) r;
SELECT jsonb_path_query_array(r->'rows', '$[*].key') AS wildcard_is_literal
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid',
       'key_prefix', '%')) r;
SELECT jsonb_path_query_array(r->'rows', '$[*].key') AS ripe
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid',
       'ripe_at_or_before', 1500)) r;
-- streams::state_of_another_tenant_is_empty: a query id of one tenant reads nothing for another.
SELECT r->'rows' AS other_tenant
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid'),
                                  '00000000-0000-0000-0000-0000000000aa') r;

-- The rest of the batch (e4), leased again.
SELECT r_lease_id AS lease2
  FROM queen.pop('events', p_partition => 'Default', p_group => 'streams.sum', p_batch => 3) \gset

-- streams::refused_cycle_writes_nothing: a wrong lease refuses the cycle whole: the
-- state upsert, the sink push and the cursor move are all undone.
SELECT r->'success' AS success, regexp_replace(r->>'error', '[0-9a-f-]{36}', '<id>', 'g') AS error, r->'state_ops_applied' AS ops
  FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'state_ops', '[{"type": "delete", "key": "a%b"}]'::jsonb,
       'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 99}}]'::jsonb,
       'ack', jsonb_build_object('transactionId', 'e4', 'leaseId', 'not-the-lease'))) r;
SELECT count(*) AS keys_kept FROM queen.stream_state;
SELECT count(*) AS sink_messages FROM queen.log_txns t JOIN queen.log_partitions p ON p.id = t.partition_id
  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'sums';
SELECT committed FROM queen.log_consumers WHERE consumer_group = 'streams.sum';
-- streams::ack_of_an_acknowledged_message_refused: e2 is below the cursor.
SELECT regexp_replace(r->>'error', '[0-9a-f-]{36}', '<id>', 'g') AS error FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'ack', jsonb_build_object('transactionId', 'e2', 'leaseId', :'lease2'))) r;
-- streams::partition_of_another_queue_refused: the partition must be the source queue's.
SELECT regexp_replace(r->>'error', '[0-9a-f-]{36}', '<id>', 'g') AS error FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'other_pid')) r;
-- streams::bad_cycle_input_refused: field-named errors (22023) as failed results.
SELECT r->>'error' AS error, r->>'sqlstate' AS sqlstate FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid',
       'state_ops', '[{"type": "merge", "key": "k"}]'::jsonb)) r;
SELECT r->>'error' AS error FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid',
       'state_ops', jsonb_build_array(jsonb_build_object('type', 'upsert', 'key', repeat('k', 1025))))) r;
SELECT r->>'error' AS error FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'push_items', '[{"payload": {}}]'::jsonb)) r;
SELECT r->>'error' AS error FROM queen.streams_cycle_v1('{"partition_id": "x"}') r;
SELECT queen.streams_cycle_v1('"text"');

-- streams::merged_call_each_request_alone: Queen's merged form; the refused request
-- rolls back alone, the other commits; results by idx.
SELECT jsonb_path_query_array(r, '$[*].idx') AS idx, jsonb_path_query_array(r, '$[*].result.success') AS success
  FROM queen.streams_cycle_v1(jsonb_build_array(
       jsonb_build_object('idx', 0, 'query_id', :'qid', 'partition_id', :'pid',
                          'state_ops', '[{"type": "upsert", "key": "never", "value": 1}]'::jsonb,
                          'ack', jsonb_build_object('transactionId', 'nope', 'leaseId', :'lease2')),
       jsonb_build_object('idx', 1, 'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
                          'state_ops', '[{"type": "delete", "key": "w\u001f0"}]'::jsonb,
                          'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 4}, "transactionId": "s-2"},
                                          {"queue": "sums", "partition": "p1", "payload": {"value": 4}, "transactionId": "s-2"},
                                          {"queue": "sums", "partition": "p1", "payload": {"value": 5}, "transactionId": "s-1"}]'::jsonb,
                          'ack', jsonb_build_object('transactionId', 'e4', 'leaseId', :'lease2')))) r;
-- streams::sink_duplicates_are_answers: a transactionId twice in one cycle, or already in
-- the sink partition, is a duplicate result; only s-2 was written.
SELECT r_transaction_id, r_payload FROM queen.pop('sums', p_partition => 'p1', p_auto_ack => true);
SELECT jsonb_path_query_array(r->'rows', '$[*].key') AS keys_after
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid')) r;
SELECT committed FROM queen.log_consumers WHERE consumer_group = 'streams.sum';

-- streams::keep_lease_and_dead_letter: release_lease false commits through the message
-- and keeps the rest leased; status failed files the message in the DLQ.
SELECT queen.push('events', '[{"amount": 5}, {"amount": 6}, {"amount": 7}]', ARRAY['e5', 'e6', 'e7'])->>'status' AS pushed;
SELECT r_lease_id AS lease3
  FROM queen.pop('events', p_partition => 'Default', p_group => 'streams.sum', p_batch => 3) LIMIT 1 \gset
SELECT r->'ack_result' AS ack FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum', 'release_lease', false,
       'ack', jsonb_build_object('transactionId', 'e5', 'leaseId', :'lease3'))) r;
SELECT r->'ack_result' AS ack FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'ack', jsonb_build_object('transactionId', 'e6', 'leaseId', :'lease3', 'status', 'failed',
                                 'error', 'bad amount'))) r;
SELECT transaction_id, error FROM queen.log_dlq;
SELECT committed FROM queen.log_consumers WHERE consumer_group = 'streams.sum';

-- streams::flush_fenced_by_the_state_it_read: a cycle without an ack (the SDKs' idle
-- flush) commits only over the state it read: a row it deletes that is gone (another
-- cycle closed the window) or the source leased to its group (a cycle in flight read the
-- same rows) rolls it back, answered success with `fenced` and nothing applied; once the
-- lease is released it commits.
SELECT r->'success' AS success, r->'state_ops_applied' AS ops, r->'push_results' AS pushed,
       regexp_replace(r->>'fenced', '[0-9a-f-]{36}', '<id>', 'g') AS fenced
  FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'state_ops', '[{"type": "delete", "key": "w\u001f1"}, {"type": "delete", "key": "w\u001f0"}]'::jsonb,
       'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 0}}]'::jsonb)) r;
SELECT r_lease_id AS lease4
  FROM queen.pop('events', p_partition => 'Default', p_group => 'streams.sum', p_batch => 3) \gset
SELECT jsonb_path_query_array(r, '$[*].result.success') AS success,
       regexp_replace(r->0->'result'->>'fenced', '[0-9a-f-]{36}', '<id>', 'g') AS fenced
  FROM queen.streams_cycle_v1(jsonb_build_array(jsonb_build_object(
       'idx', 0, 'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'state_ops', '[{"type": "delete", "key": "w\u001f1"}]'::jsonb,
       'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 0}}]'::jsonb))) r;
SELECT jsonb_path_query_array(r->'rows', '$[*].key') AS keys_kept
  FROM queen.streams_state_get_v1(jsonb_build_object('query_id', :'qid', 'partition_id', :'pid')) r;
SELECT r->'ack_result'->'lease_released' AS released FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'ack', jsonb_build_object('transactionId', 'e7', 'leaseId', :'lease4'))) r;
SELECT r->'success' AS success, r->'state_ops_applied' AS ops, r ? 'fenced' AS fenced
  FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'consumer_group', 'streams.sum',
       'state_ops', '[{"type": "delete", "key": "w\u001f1"}]'::jsonb,
       'push_items', '[{"queue": "sums", "partition": "p1", "payload": {"value": 0}}]'::jsonb)) r;
SELECT count(*) AS sink_messages FROM queen.log_txns t JOIN queen.log_partitions p ON p.id = t.partition_id
  JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'sums';

-- streams::reset_wipes_state: another hash is a conflict answer without reset (nothing
-- changes), and wipes the state with it (same id).
SELECT r->'success' AS success, r->>'error' AS error
  FROM queen.streams_register_query_v1('{"name": "sum", "source_queue": "events", "config_hash": "h2"}') r;
SELECT count(*) AS keys_kept FROM queen.stream_state;
SELECT jsonb_path_query_array(r, '$[*].result.reset') AS reset, (r->0->'result'->>'query_id') = :'qid' AS same_id
  FROM queen.streams_register_query_v1('[{"idx": 0, "name": "sum", "source_queue": "events", "config_hash": "h2", "reset": true}]') r;
SELECT count(*) AS keys_left FROM queen.stream_state;

-- streams::lifecycle: a deleted source queue's state goes with run_maintenance; a
-- deleted query takes its state and shards with it.
SELECT r->'success' AS success FROM queen.streams_cycle_v1(jsonb_build_object(
       'query_id', :'qid', 'partition_id', :'pid', 'state_ops', '[{"type": "upsert", "key": "k", "value": 1}]'::jsonb)) r;
SELECT (queen.delete_queue_v1('events'))->'deleted' AS deleted;
CALL queen.run_maintenance() \gset
SELECT :'p_report'::jsonb->'streamOrphans' AS stream_orphans;
SELECT (SELECT count(*) FROM queen.stream_state) AS state_rows,
       (SELECT count(*) FROM queen.stream_shards) AS shards;
SELECT queen.streams_delete_query_v1('sum') AS deleted, queen.streams_delete_query_v1('sum') AS again;
SELECT count(*) AS queries FROM queen.stream_queries;
