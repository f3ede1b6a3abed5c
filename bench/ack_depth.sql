-- Mean/median time of log_ack_by_hash_v1 for a full 500-message leased batch, on a
-- partition with :depth messages of unpurged sidecar history below the cursor.
-- Timed inside the server (clock_timestamp around the call): function cost, no network.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;

CREATE OR REPLACE FUNCTION pg_temp.seed(p_queue text, p_depth bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE seg int := 500; n bigint := 0;
BEGIN
    DELETE FROM queen.queues WHERE name = p_queue;
    WHILE n < p_depth LOOP
        -- Real frames (push validates blobs): transactionIds <queue>-h-<offset>, so the
        -- sidecar holds queen.xxh3_128(<queue>-h-<offset>); dedup window 0 after the first.
        PERFORM queen.push(p_queue, (SELECT jsonb_agg(0) FROM generate_series(1, seg)),
            ARRAY(SELECT p_queue || '-h-' || (n + g) FROM generate_series(0, seg - 1) g ORDER BY g));
        UPDATE queen.queues SET dedup_window_seconds = 0
         WHERE name = p_queue AND dedup_window_seconds <> 0;
        n := n + seg;
    END LOOP;
    -- History below the cursor: a lease-less cursor already at the end of it.
    INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
    SELECT p.id, 'bench', p.last_offset FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = p_queue;
END $$;

CREATE OR REPLACE PROCEDURE pg_temp.run(p_queue text, p_depth bigint, p_iters int)
LANGUAGE plpgsql AS $$
DECLARE
    pid uuid; hashes bytea[]; t0 timestamptz; r jsonb; base bigint;
BEGIN
    SELECT p.id INTO pid FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.name = p_queue;
    FOR i IN 1..p_iters LOOP
        SELECT last_offset + 1 INTO base FROM queen.log_partitions WHERE id = pid;
        SELECT array_agg(queen.xxh3_128(p_queue || '-b-' || (base + g)) ORDER BY g)
          INTO hashes FROM generate_series(0, 499) g;
        PERFORM queen.push(p_queue, (SELECT jsonb_agg(0) FROM generate_series(1, 500)),
            ARRAY(SELECT p_queue || '-b-' || (base + g) FROM generate_series(0, 499) g ORDER BY g));
        PERFORM count(*) FROM queen.log_pop_v1(p_queue, 'Default', 'bench', 500, 60, 'bench-w');
        t0 := clock_timestamp();
        r := queen.log_ack_by_hash_v1(pid, 'bench', 'bench-w', hashes, NULL);
        INSERT INTO public.bench_timings VALUES (p_depth, extract(epoch FROM clock_timestamp() - t0) * 1000);
        IF (r->>'acked')::int <> 500 THEN
            RAISE EXCEPTION 'bench ack did not ack the batch: %', r;
        END IF;
        COMMIT; -- one transaction per round, as a broker would run it
    END LOOP;
END $$;


-- The bogus ack: 500 hashes nobody pushed, acked under a live lease of a 500-message
-- batch, on the same :depth history. Answers acked 0 and 500 unresolved; timed the same
-- way. The real batch is acked afterwards (untimed) so every round starts alike.
CREATE OR REPLACE PROCEDURE pg_temp.run_unknown(p_queue text, p_depth bigint, p_iters int)
LANGUAGE plpgsql AS $$
DECLARE
    pid uuid; real bytea[]; bogus bytea[]; t0 timestamptz; r jsonb; base bigint;
BEGIN
    SELECT p.id INTO pid FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
     WHERE q.name = p_queue;
    FOR i IN 1..p_iters LOOP
        SELECT last_offset + 1 INTO base FROM queen.log_partitions WHERE id = pid;
        SELECT array_agg(queen.xxh3_128(p_queue || '-b-' || (base + g)) ORDER BY g),
               array_agg(queen.xxh3_128(p_queue || '-bogus-' || (base + g)) ORDER BY g)
          INTO real, bogus FROM generate_series(0, 499) g;
        PERFORM queen.push(p_queue, (SELECT jsonb_agg(0) FROM generate_series(1, 500)),
            ARRAY(SELECT p_queue || '-b-' || (base + g) FROM generate_series(0, 499) g ORDER BY g));
        PERFORM count(*) FROM queen.log_pop_v1(p_queue, 'Default', 'bench', 500, 60, 'bench-w');
        t0 := clock_timestamp();
        r := queen.log_ack_by_hash_v1(pid, 'bench', 'bench-w', bogus, NULL);
        INSERT INTO public.bench_timings VALUES (-p_depth, extract(epoch FROM clock_timestamp() - t0) * 1000);
        IF (r->>'acked')::int <> 0 OR jsonb_array_length(r->'unresolvedHashes') <> 500 THEN
            RAISE EXCEPTION 'bogus ack did not answer 500 unresolved: %', r;
        END IF;
        r := queen.log_ack_by_hash_v1(pid, 'bench', 'bench-w', real, NULL);
        IF (r->>'acked')::int <> 500 THEN
            RAISE EXCEPTION 'bench ack did not ack the batch: %', r;
        END IF;
        COMMIT;
    END LOOP;
END $$;
