-- The cost of browsing messages at 1M messages (docs/benchmarks.md, "Message browsing"):
-- 1,000 segments of 1,000 messages (~120-byte payloads) over 10 partitions of queue
-- "big", a group g whose cursor is half-way through every partition, then psql's \timing
-- of queen.list_messages_v1 (first page, a page 500,000 deep, a status filter, 1,000 of
-- one partition) and of queen.get_message_v1 by transactionId.
--   createdb queen_list_bench && psql -d queen_list_bench -c 'CREATE EXTENSION queen_ack'
--   psql -d queen_list_bench -X -qAt -f bench/listing.sql
\timing off
SELECT queen.configure_queue_v1('big', NULL, NULL, '{}') IS NOT NULL;
DO $$
DECLARE p jsonb := (SELECT jsonb_agg(jsonb_build_object('n', g, 'pad', repeat('x', 100))) FROM generate_series(1, 1000) g);
BEGIN
  FOR i IN 1..1000 LOOP
    PERFORM queen.push('big', p, NULL, 'P' || (i % 10));
  END LOOP;
END $$;
SELECT count(*) AS segments, sum(end_offset - base_offset + 1) AS messages FROM queen.log_segments;
-- a group that consumed half of each partition
SELECT count(*) FROM queen.log_pop_queue_v1('big', 'g', 1, 30, 'w');
UPDATE queen.log_consumers SET committed = 49999 WHERE consumer_group = 'g';
INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
  SELECT id, 'g', 49999 FROM queen.log_partitions p WHERE NOT EXISTS (SELECT 1 FROM queen.log_consumers c WHERE c.partition_id = p.id AND c.consumer_group='g');
\timing on
SELECT jsonb_array_length(queen.list_messages_v1('{"queue": "big"}')->'messages') AS first_page;
SELECT jsonb_array_length(queen.list_messages_v1('{"queue": "big"}')->'messages') AS first_page_again;
SELECT jsonb_array_length(queen.list_messages_v1('{"queue": "big", "offset": 500000}')->'messages') AS deep_page;
SELECT jsonb_array_length(queen.list_messages_v1('{"queue": "big", "status": "completed"}')->'messages') AS completed_page;
SELECT jsonb_array_length(queen.list_messages_v1('{"queue": "big", "partition": "P3", "limit": 1000}')->'messages') AS one_partition_1000;
SELECT (queen.get_message_v1((SELECT id FROM queen.log_partitions WHERE name = 'P3'), (SELECT transaction_id FROM queen.decode_segment_v1((SELECT blob FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id WHERE p.name='P3' ORDER BY base_offset LIMIT 1)) LIMIT 1)))->>'offset' AS lookup_offset;
