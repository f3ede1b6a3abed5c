#!/usr/bin/env bash
# One retention step and one sidecar purge step on a partition holding 1,000,000 messages
# (10,000 segments of 100) against the same steps on a partition holding 100,000 (1,000
# segments): the steps are bounded by p_max_rows, not by history (the target:
# <= 50 ms a step).
# Server-side times (clock_timestamp() around the call), median of 5 steps each.
# It creates the extension in the given database: use a scratch database.
#   bench/lifecycle-steps.sh URL [MAX_ROWS...]        (default MAX_ROWS: 100 1000)
set -euo pipefail
URL=$1
shift
ROWS=("$@")
[ ${#ROWS[@]} -gt 0 ] || ROWS=(100 1000)
P=(psql "$URL" -X -qAt -v ON_ERROR_STOP=1)
export PGOPTIONS="-c client_min_messages=warning"
"${P[@]}" -c "DROP EXTENSION IF EXISTS queen_ack CASCADE" -c "CREATE EXTENSION queen_ack" >/dev/null
fill() { # queue segments
    # No dedup probe while filling (each probe would scan the whole young window); a
    # retention policy of an hour, which the measured steps' cutoffs are clamped to.
    "${P[@]}" -c "SELECT queen.configure_queue_v1('$1', NULL, NULL, '{\"dedupWindowSeconds\": 0, \"retentionSeconds\": 3600}')" >/dev/null
    "${P[@]}" -c "DO \$\$ BEGIN FOR i IN 1..$2 LOOP
        PERFORM queen.push('$1', (SELECT jsonb_agg(jsonb_build_object('n', i * 100 + k)) FROM generate_series(1, 100) k));
      END LOOP; END \$\$" >/dev/null
    "${P[@]}" -c "UPDATE queen.log_segments s SET created_at = s.created_at - interval '2 hours'
                    FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                   WHERE p.id = s.partition_id AND q.name = '$1'" \
              -c "UPDATE queen.log_txns s SET created_at = s.created_at - interval '2 hours'
                    FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                   WHERE p.id = s.partition_id AND q.name = '$1'" \
              -c "SELECT queen.configure_queue_v1('$1', NULL, NULL, '{\"dedupWindowSeconds\": 60}')" \
              -c "VACUUM ANALYZE queen.log_segments, queen.log_txns" >/dev/null
}
# Median of 5 steps' server time in ms: $1 queue, $2 the step call with PID for the partition.
median_ms() {
    "${P[@]}" -c "
      DO \$\$ DECLARE pid uuid; t0 timestamptz; ms float8[] := '{}'; BEGIN
        SELECT p.id INTO pid FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '$1';
        FOR i IN 1..5 LOOP
          t0 := clock_timestamp();
          PERFORM $2;
          ms := ms || extract(epoch FROM clock_timestamp() - t0) * 1000;
        END LOOP;
        RAISE WARNING '%', (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(ms) x);
      END \$\$" 2>&1 | sed -n 's/.*WARNING:  //p'
}
echo "filling: deep = 1,000,000 messages (10,000 segments), shallow = 100,000 (1,000 segments)"
fill deep 10000
fill shallow 1000
printf '%-40s %12s %12s\n' "step (median of 5, server ms)" "1e6 history" "1e5 history"
for n in "${ROWS[@]}"; do
    # Each measured step deletes n whole segments (rule 1: everything is 2 hours old); the
    # shallow partition is measured only while it still has 5 steps' worth.
    r_deep=$(median_ms deep "queen.log_retention_step_v1(pid, clock_timestamp() - interval '1 hour', NULL, $n)")
    p_deep=$(median_ms deep "queen.log_txns_purge_step_v1(pid, clock_timestamp(), $n)")
    r_shallow=- p_shallow=-
    if [ $((n * 5)) -le 1000 ]; then
        r_shallow=$(median_ms shallow "queen.log_retention_step_v1(pid, clock_timestamp() - interval '1 hour', NULL, $n)")
        p_shallow=$(median_ms shallow "queen.log_txns_purge_step_v1(pid, clock_timestamp(), $n)")
    fi
    printf '%-40s %12s %12s\n' "retention step, p_max_rows $n" "$r_deep" "$r_shallow"
    printf '%-40s %12s %12s\n' "purge step, p_max_rows $n" "$p_deep" "$p_shallow"
done
