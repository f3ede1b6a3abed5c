-- The hot path's statements run cached generic plans: a statement PostgreSQL plans anew
-- on every call costs more than the call itself (docs/benchmarks.md, "One message at a
-- time"). Each "-- plans::NAME" comment names one check. pg_stat_statements (preloaded by
-- the test clusters) counts how often each statement inside the extension's functions
-- was planned. On Citus the calls inside a DO block are not delegated, and Citus plans a
-- distributed statement on every call by design (its shard is chosen from the
-- parameters), so there only the behaviour checks at the end run.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
SET pg_stat_statements.track = 'all';
SET pg_stat_statements.track_planning = on;

-- 20,000 messages in 200 segments of 100 (the bench's 107-byte JSON: wide segment rows),
-- analyzed.
SELECT count(queen.push('plans',
         (SELECT jsonb_agg(jsonb_build_object('id', lpad((s * 100 + i)::text, 12, '0'),
                                              'kind', 'bench', 'body', repeat('x', 59)))
            FROM generate_series(1, 100) i), NULL, 'p'))
  FROM generate_series(0, 199) s;
-- And a queue of 60 partitions, each with a cursor and a lease row, beside the queue
-- 'plans' of one: with those statistics the custom plans of several statements (the
-- queue pop's page of candidates, its claim, its segment read) looked cheaper than their
-- generic ones, and they were planned on every call.
SELECT count(queen.push('plans_wide', '[1, 2]', NULL, 'w' || i)) AS wide FROM generate_series(1, 60) i;
SELECT count(*) AS leased FROM generate_series(1, 60) i,
       LATERAL queen.pop('plans_wide', p_batch => 1, p_lease_seconds => 60) p;
ANALYZE queen.log_segments, queen.log_partitions, queen.log_consumers, queen.log_leases;
-- Page fetches made dear: a statement whose custom plan (knowing the pop's batch) looks
-- cheaper than its generic plan is then planned on every call, whatever the table's
-- size; one whose estimate does not depend on its parameters is planned once.
SET random_page_cost = 1000;
SET seq_page_cost = 1000;
SELECT pg_stat_statements_reset() IS NOT NULL AS reset;

-- plans::hot_paths_plan_each_statement_once: in one session, 40 each of: queen.pop
-- (batch 1 and 3) of a partition and queen.ack by transactionId; queen.pop of the queue
-- (any ready partition) and the positional ack; the broker's lookup before a push
-- (partitions_lookup_v1) and queen.push into a queue with a dedup window, whose sidecar
-- is probed; the broker's pop (broker_pop_v1) and ack (log_ack_at_v1). A statement of
-- theirs planned more often than the first calls' custom plans (five, then the generic
-- one) is one planned on every call.
SELECT queen.configure_queue_v1('plans_dedup', NULL, NULL, '{"dedupWindowSeconds": 3600}') IS NOT NULL AS configured;
DO $$
DECLARE
    r record;
BEGIN
    -- One transaction that reads over every shard and then creates partition d: Citus
    -- wants that on one connection per node (docs/citus.md, "Creating in a transaction
    -- that read across shards"); harmless without Citus.
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
    FOR i IN 1..40 LOOP
        SELECT r_partition_id AS pid, r_lease_id AS lease, array_agg(r_transaction_id) AS txns
          INTO r
          FROM queen.pop('plans', p_partition => 'p', p_batch => 1 + (i % 2) * 2,
                         p_lease_seconds => 60)
         GROUP BY 1, 2;
        PERFORM queen.ack(r.pid, r.lease, r.txns);
        SELECT r_partition_id AS pid, r_lease_id AS lease, max(r_offset) AS upto
          INTO r
          FROM queen.pop('plans', p_batch => 1, p_lease_seconds => 60)
         GROUP BY 1, 2;
        PERFORM queen.log_ack_at_v1(r.pid, '__QUEUE_MODE__', r.lease, r.upto);
        PERFORM queen.partitions_lookup_v1('00000000-0000-0000-0000-000000000001',
                                           ARRAY['plans_dedup', 'plans'], ARRAY['d', 'p']);
        PERFORM queen.push('plans_dedup', jsonb_build_array(i), ARRAY['t' || i], 'd');
        SELECT r_partition_id AS pid, r_base + r_start_idx + r_take - 1 AS upto
          INTO r
          FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'plans', 'p',
                                   '__QUEUE_MODE__', 1, 60, 'w' || i);
        PERFORM queen.log_ack_at_v1(r.pid, '__QUEUE_MODE__', 'w' || i, r.upto);
    END LOOP;
END $$;
SELECT regexp_replace(left(query, 50), '\s+', ' ', 'g') AS statement, calls, plans
  FROM pg_stat_statements
 WHERE NOT toplevel AND calls >= 40 AND plans > 6
   AND NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
   -- PostgreSQL's own foreign-key checks (one cached plan per constraint, all with the
   -- same text: PostgreSQL 18 counts them here, 15 and 17 do not).
   AND query NOT LIKE 'SELECT 1 FROM ONLY %FOR KEY SHARE OF x'
 ORDER BY 1;
-- plans::a_capped_push_reads_its_queue_twice: a push into a queue with a maxSize reads
-- the queue's row with the partition it resolves (dedup window, encryption, maxSize) and
-- once more in the statement that locks the queue for its maxSize check, whose count
-- reads the partitions only; the allocation and the multi-push's tail lock read no queue.
-- 10 single pushes and 10 multi-pushes (the transaction wire's path).
SELECT queen.configure_queue_v1('plans_cap', NULL, NULL, '{"maxSize": 1000, "dedupWindowSeconds": 0}') IS NOT NULL AS configured;
SELECT queen.push('plans_cap', '[0]', NULL, 'c') IS NOT NULL AS created;
CREATE TEMP TABLE cap_seg AS
SELECT s.blob, t.hashes FROM queen.log_segments s
  JOIN queen.log_txns t ON t.partition_id = s.partition_id AND t.base_offset = s.base_offset
  JOIN queen.partition_names n ON n.id = s.partition_id WHERE n.name = 'c';
SELECT pg_stat_statements_reset() IS NOT NULL AS reset;
SELECT count(queen.push('plans_cap', jsonb_build_array(i), NULL, 'c')) AS single,
       count(queen.log_push_multi_v1(ARRAY['plans_cap'], ARRAY['c'], ARRAY[1], ARRAY[c.hashes],
                                     ARRAY[-1::bigint], ARRAY[c.blob])) AS multi
  FROM generate_series(1, 10) i, cap_seg c;
-- (On Citus they run distributed and are counted on the workers: true there.)
SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
       OR (SELECT count(*) = 2 AND min(calls) = 20 FROM pg_stat_statements
            WHERE NOT toplevel AND calls >= 10 AND query ~ 'queen\.queues') AS two_statements_read_queues;
SELECT sum(c.total_consumed) AS consumed FROM queen.consumer_lag c WHERE c.queue = 'plans';
SELECT count(*) AS pushed FROM queen.log_segments s
  JOIN queen.partition_names n ON n.id = s.partition_id WHERE n.name = 'd';
