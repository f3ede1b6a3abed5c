-- What PostgreSQL's jsonb cannot hold (a \u0000, a lone surrogate escape, a number
-- outside numeric) is never stored, and a segment an older version wrote with it still
-- reads and still dead-letters (docs/decisions.md, "Payloads and names"). Each
-- "-- unstorable::NAME" comment names one check. A fresh empty database.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;

-- unstorable::sql_push_refuses: the plain push takes jsonb, which refuses it itself;
-- a prebuilt segment (the broker's and other producers' path) is refused by the
-- extension: 22P05 for the NUL, 22003 for the number, nothing written.
SELECT queen.push('poison', '["a\u0000b"]');
-- (Citus warns that a pg_temp function is not distributed: it need not be.)
SET client_min_messages TO error;
CREATE FUNCTION pg_temp.refusal(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN 'stored';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
RESET client_min_messages;
SELECT pg_temp.refusal($q$SELECT queen.log_push_one_v1('poison', 'Default', 1, queen.xxh3_128('p'), -1, '\x28b52ffd202e7101002a00000000010000000000700080000000000000040100707b227061796c6f6164223a22615c753030303062227d'::bytea)$q$) AS push;
SELECT pg_temp.refusal($q$SELECT queen.log_push_one_v1('poison', 'Default', 1, queen.xxh3_128('n'), -1, '\x28b52ffd202631010022000000000100000000007000800000000000000501006e7b226e223a31653230303030307d'::bytea)$q$) AS push;
SELECT (SELECT count(*) FROM queen.log_segments) AS segments, (SELECT count(*) FROM queen.log_partitions) AS partitions;

-- unstorable::decode_degrades: a segment holding such a frame decodes message by
-- message, that one as a JSON string of the text it holds.
SELECT frame_index, transaction_id, payload
  FROM queen.decode_segment_v1('\x28b52ffd206c6d0200d4031b00000000010070008000010100617b226e223a317d2a020100707b227061796c6f6164223a22615c753030303062227d1b030100637b226e223a337d0500506830b0865049c1650b1801'::bytea);

-- unstorable::old_poison_dead_letters: the same segment in a queue (as an older version
-- stored it: pushed, then its blob put in place by the superuser), retryLimit 0 with a
-- DLQ. Every message pops; the poison one fails into the DLQ and is not redelivered.
SELECT queen.configure_queue_v1('poison', NULL, NULL, '{"retryLimit": 0, "deadLetterQueue": true}') IS NOT NULL AS configured;
SELECT queen.push('poison', '[1, 2, 3]', ARRAY['a','p','c'])->>'status' AS status;
UPDATE queen.log_segments SET blob = '\x28b52ffd206c6d0200d4031b00000000010070008000010100617b226e223a317d2a020100707b227061796c6f6164223a22615c753030303062227d1b030100637b226e223a337d0500506830b0865049c1650b1801'::bytea;
SELECT r->>'offset' AS off, r->>'transactionId' AS txn, r->'payload' AS payload
  FROM jsonb_array_elements(queen.fetch_v1('[{"queue":"poison","partition":"Default","offset":0,"maxBytes":1000}]')
                            ->'entries'->0->'records') r;
CREATE TEMP TABLE got (txn text, payload jsonb, answer jsonb);
-- (Citus warns that a pg_temp function is not distributed: it need not be.)
SET client_min_messages TO error;
CREATE FUNCTION pg_temp.consume_one() RETURNS void LANGUAGE plpgsql AS $$
DECLARE m record;
BEGIN
    SELECT * INTO m FROM queen.pop('poison', p_batch => 1, p_lease_seconds => 30);
    INSERT INTO got VALUES (m.r_transaction_id, m.r_payload,
        queen.ack(m.r_partition_id, m.r_lease_id, ARRAY[m.r_transaction_id],
                  ARRAY[CASE m.r_transaction_id WHEN 'p' THEN 'failed' ELSE 'completed' END]));
END $$;
RESET client_min_messages;
SELECT pg_temp.consume_one(), pg_temp.consume_one(), pg_temp.consume_one();
SELECT txn, payload, answer->'ok' AS ok, answer->'acked' AS acked, answer->'dlq' AS dlq FROM got ORDER BY txn;
SELECT count(*) AS left_to_pop FROM queen.pop('poison', p_batch => 10);
SELECT transaction_id, payload, error FROM queen.log_dlq;

DROP EXTENSION queen_ack;
