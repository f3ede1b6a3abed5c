-- 0.1.0's queen.log_consumers columns (alphabetical, as tests/upgrade.sh snapshots them),
-- read from where they live since 0.2.0: the durable cursor row and its unlogged lease row.
SELECT l.attempt_count, l.attempt_offset, l.batch_end, c.batch_retry_count, c.committed,
       c.consumer_group, c.created_at, l.lease_acquired_at, c.lease_conflated,
       l.lease_expires_at, c.partition_id, c.total_consumed, l.worker_id
  FROM queen.log_consumers c
  LEFT JOIN queen.log_leases l ON l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group
