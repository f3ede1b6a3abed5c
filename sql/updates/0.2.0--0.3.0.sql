-- queen_ack 0.2.0 -> 0.3.0: what an upgrade cannot replay (sql/updates/README.md).
-- Every function, view and grant of 0.3.0 follows from its install script, replayed.

-- An upgrade replays every C function onto the new version's library, so the step that
-- moved them (0.2.0's relink) has no caller left.
DROP FUNCTION IF EXISTS queen.relink_library_v1(text);

-- Queen's further queue options, each enforced (docs/decisions.md, "Queue options").
ALTER TABLE queen.queues
    ADD COLUMN priority int NOT NULL DEFAULT 0 CHECK (priority >= 0),
    ADD COLUMN retry_delay int NOT NULL DEFAULT 0 CHECK (retry_delay >= 0),
    ADD COLUMN max_size int NOT NULL DEFAULT 0 CHECK (max_size >= 0),
    ADD COLUMN ttl int NOT NULL DEFAULT 0 CHECK (ttl >= 0),
    ADD COLUMN window_buffer int NOT NULL DEFAULT 0 CHECK (window_buffer >= 0),
    ADD COLUMN max_wait_time_seconds int NOT NULL DEFAULT 0 CHECK (max_wait_time_seconds >= 0);

-- Conflation (docs/decisions.md, "Conflation"): a group's last-value policy, stored when
-- it registers; broker_pop_v1 takes it as a trailing argument (a new signature).
ALTER TABLE queen.consumer_groups_metadata ADD COLUMN conflation bool NOT NULL DEFAULT false;
DROP FUNCTION IF EXISTS queen.broker_pop_v1(uuid, text, text, text, int, int, text, bool, text, text, int);
-- The consumer-group view's records gain the policy (a new result type).
DROP FUNCTION IF EXISTS queen.subscriptions_v1(uuid);

-- The default tenant has one SQL owner, queen.default_tenant() (sql/bootstrap.sql), which
-- the tables' defaults now call. No function of 0.3.0 exists yet when this file runs, so
-- it is declared here without its value (same signature and result): the replay of the
-- install script that follows, in the same transaction, gives it the body, volatility
-- and grants of sql/bootstrap.sql. A default refers to the function, not to its body.
CREATE FUNCTION queen.default_tenant() RETURNS uuid LANGUAGE sql AS $$ SELECT NULL::uuid $$;
ALTER TABLE queen.queues ALTER COLUMN tenant_id SET DEFAULT queen.default_tenant();
ALTER TABLE queen.consumer_groups_metadata ALTER COLUMN tenant_id SET DEFAULT queen.default_tenant();

-- A queue pop reads its queue's partitions by this index (sql/bootstrap.sql).
CREATE INDEX log_partitions_queue_idx ON queen.log_partitions (queue_id);

-- A push's dedup watermark names the partition and window it was computed for
-- (docs/decisions.md, "The push's lookup"): log_push_multi_v1 takes them as trailing
-- arguments (a new signature).
DROP FUNCTION IF EXISTS queen.log_push_multi_v1(text[], text[], int[], bytea[], bigint[], bytea[], uuid[]);
