-- Conflation, Queen 2.x's last-value delivery (docs/decisions.md, "Conflation"): a
-- conflating group's pop of a partition serves only the newest message, under a lease
-- whose ack commits the cursor past it. Each "-- conflation::NAME" comment names one check.
\set VERBOSITY terse
\set SHOW_CONTEXT never
CREATE EXTENSION queen_ack;
SELECT CASE WHEN EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')
            THEN queen.distribute() IS NOT NULL ELSE true END AS installed;
SELECT queen.push('c', '[1,2,3,4,5]', ARRAY['m1','m2','m3','m4','m5'])->>'status' AS pushed;

-- conflation::newest_only: the first pop asking for it registers the group conflating and
-- serves offset 4 (the fifth message) alone.
CREATE TEMP TABLE got AS
SELECT r_partition_id, r_base + r_start_idx AS first_offset, r_take
  FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'c', 'Default', 'g', 10, 30, 'w1',
                           p_conflation => true);
SELECT first_offset, r_take FROM got;
SELECT consumer_group, conflation FROM queen.consumer_groups_metadata ORDER BY consumer_group;
SELECT queen.group_conflation_v1('00000000-0000-0000-0000-000000000001', 'c', 'g') AS echoed;

-- conflation::ack_retires_behind: the ack of the newest moves the cursor past all five.
SELECT queen.ack(r_partition_id, 'w1', ARRAY['m5'], NULL, 'g')->>'acked' AS acked FROM got;
SELECT c.committed FROM queen.log_consumers c WHERE c.consumer_group = 'g';
-- conflation::then_empty: nothing is left for the group.
SELECT count(*) AS served_after FROM queen.pop('c', p_group => 'g', p_batch => 10, p_lease_seconds => 30);

-- conflation::stored_wins: a later pop without the flag (queen.pop has none) is still
-- conflated, and one asking for false cannot turn it off.
SELECT queen.push('c', '[6,7,8]', ARRAY['m6','m7','m8'])->>'status' AS pushed;
SELECT r_transaction_id, r_offset FROM queen.pop('c', p_group => 'g', p_batch => 10, p_lease_seconds => 30);
SELECT queen.push('c', '[9]', ARRAY['m9'])->>'status' AS pushed;
UPDATE queen.log_leases SET lease_expires_at = now() - interval '1 second' WHERE consumer_group = 'g';
SELECT r_base + r_start_idx AS first_offset, r_take
  FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'c', 'Default', 'g', 10, 30, 'w2',
                           p_conflation => false);

-- conflation::others_unaffected: a group without it gets every message, in order.
SELECT string_agg(r_transaction_id, ',' ORDER BY r_offset) AS all_served
  FROM queen.pop('c', p_group => 'h', p_batch => 10, p_lease_seconds => 30);
SELECT consumer_group, conflation FROM queen.consumer_groups_metadata ORDER BY consumer_group;

-- conflation::queue_level: a queue-level pop of a conflating group serves each partition's
-- newest.
SELECT queen.push('cq', '[1,2]', ARRAY['a1','a2'], 'pa')->>'status' AS pushed;
SELECT queen.push('cq', '[3,4]', ARRAY['b1','b2'], 'pb')->>'status' AS pushed;
SELECT r_partition, r_base + r_start_idx AS first_offset, r_take
  FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'cq', NULL, 'g', 10, 30, 'w3',
                           p_max_partitions => 5, p_conflation => true)
 ORDER BY r_partition;

-- conflation::refused: without a named group, and with auto-ack (commit on delivery).
SELECT * FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'c', 'Default', '__QUEUE_MODE__', 10, 30, 'w',
                                  p_conflation => true);
SELECT * FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'c', 'Default', 'z', 10, 30, '',
                                  p_auto_ack => true, p_conflation => true);
-- A conflating group's stored policy refuses auto-ack too.
SELECT * FROM queen.broker_pop_v1('00000000-0000-0000-0000-000000000001', 'c', 'Default', 'g', 10, 30, '',
                                  p_auto_ack => true);
-- The compatibility pop's flag stays unsupported (docs/contract.md §5).
SELECT * FROM queen.log_pop_v1('c', 'Default', 'g', 1, 30, 'w', p_conflate => true);
