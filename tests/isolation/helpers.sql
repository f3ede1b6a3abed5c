-- The races' helpers, loaded by tests/isolation.sh into each spec's fresh database before
-- the spec runs (their bodies resolve queen.* when called, so they go in before the spec's
-- setup creates the extension). What each one reads is what tests/races.sh read in psql.
-- The SQL functions name queen.* too: their bodies are checked when called, not now.
SET check_function_bodies = off;
CREATE SCHEMA race;
-- What a session wants to check after the others finish and that its own output would
-- show in a number that varies from run to run.
CREATE TABLE race.noted (what text PRIMARY KEY, v text);

CREATE FUNCTION race.pid(q text, p text) RETURNS uuid LANGUAGE sql STABLE AS $$
    SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.name = $1 AND p.name = $2
$$;

-- Every segment of the queue becomes that much older.
CREATE FUNCTION race.age(q text, secs int) RETURNS void LANGUAGE sql AS $$
    UPDATE queen.log_segments s SET created_at = s.created_at - make_interval(secs => $2)
      FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE p.id = s.partition_id AND q.name = $1
$$;

-- 30 messages in each of P1 and P2 (three segments of 10), drained by group gA; aged an
-- hour; then 5 young ones each. Configured with the given retention options.
CREATE FUNCTION race.setup_drained(q text, options jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM queen.configure_queue_v1(q, NULL, NULL, options);
    FOR p IN 1..2 LOOP
        FOR s IN 0..2 LOOP
            PERFORM queen.push(q, (SELECT jsonb_agg(i) FROM generate_series(s * 10, s * 10 + 9) i), NULL, 'P' || p);
        END LOOP;
    END LOOP;
    PERFORM count(*) FROM queen.log_pop_queue_v1(q, 'gA', 1000, 60, 'wA', true, 'all', '', 2);
    PERFORM race.age(q, 3600);
    PERFORM queen.push(q, '[30,31,32,33,34]', NULL, 'P1');
    PERFORM queen.push(q, '[30,31,32,33,34]', NULL, 'P2');
END
$$;

-- No cursor is ever left below its partition's log start (what retention took from a
-- group is counted in its cursor's `evicted`): the count of those below.
CREATE FUNCTION race.below(q text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
      JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.committed < p.log_start - 1
$$;
-- The two lag views agree: the count of (partition, group) where they do not.
CREATE FUNCTION race.disagree(q text) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM queen.consumer_lag l
      JOIN queen.queue_stats_v1(NULL, $1) s ON s.r_partition_id = l.partition_id AND s.r_consumer_group = l.consumer_group
     WHERE l.queue = $1 AND l.lag IS DISTINCT FROM s.r_lag
$$;
-- Messages delivered to the group (auto-ack) until a pop brings none.
CREATE FUNCTION race.drain(q text, g text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    total bigint := 0;
BEGIN
    FOR _ IN 1..20 LOOP
        SELECT COALESCE(sum(r_take), 0) INTO n FROM queen.log_pop_queue_v1(q, g, 1000, 60, 'w', true, 'all', '', 10);
        EXIT WHEN n = 0;
        total := total + n;
    END LOOP;
    RETURN total;
END
$$;
CREATE FUNCTION race.evicted(q text, g text) RETURNS bigint LANGUAGE sql AS $$
    SELECT COALESCE(sum(c.evicted), 0)::bigint FROM queen.log_consumers c JOIN queen.log_partitions p ON p.id = c.partition_id
      JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND c.consumer_group = $2
$$;
CREATE FUNCTION race.live(q text) RETURNS bigint LANGUAGE sql AS $$
    SELECT sum(p.last_offset - p.log_start + 1)::bigint FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1
$$;
