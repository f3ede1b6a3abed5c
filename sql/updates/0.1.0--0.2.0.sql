-- queen_ack 0.1.0 -> 0.2.0: what an upgrade cannot replay (sql/updates/README.md).
-- Tables, columns, indexes, moved rows and the drop of one changed signature; every
-- function, view and grant of 0.2.0 follows from its install script, replayed by
-- scripts/upgrade-scripts.py. Released with 0.2.0: never edit.

-- A schema that distributes (docs/citus.md): every unique key and foreign key is one Citus can
-- enforce once the per-partition tables are distributed by partition id. First, so that
-- every function below may name the registry. -------------------------------------------

-- The registry of partition names (sql/bootstrap.sql), filled with every partition as it
-- is: ids never change (clients hold them in flight).
CREATE TABLE queen.partition_names (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name text NOT NULL,
    CONSTRAINT partition_names_pkey PRIMARY KEY (id),
    CONSTRAINT partition_names_queue_id_name_key UNIQUE (queue_id, name),
    CONSTRAINT partition_names_id_queue_id_name_key UNIQUE (id, queue_id, name)
);

INSERT INTO queen.partition_names (id, queue_id, name)
SELECT id, queue_id, name FROM queen.log_partitions;

-- (queue_id, name) is unique through the registry now; a partition id is always given.
ALTER TABLE queen.log_partitions DROP CONSTRAINT log_partitions_queue_id_name_key,
    ALTER COLUMN id DROP DEFAULT,
    ADD CONSTRAINT log_partitions_name_fkey FOREIGN KEY (id, queue_id, name)
        REFERENCES queen.partition_names (id, queue_id, name) ON DELETE CASCADE;

-- The DLQ's key includes the distribution column.
ALTER TABLE queen.log_dlq DROP CONSTRAINT log_dlq_pkey,
    ADD CONSTRAINT log_dlq_pkey PRIMARY KEY (id, partition_id);


-- Leases move to an UNLOGGED table (docs/decisions.md): claiming a lease writes no WAL, a pop
-- that only leases commits without waiting for a flush, and an ack's update of the
-- durable cursor row is HOT (nothing indexed changes on it any more). ------------------
CREATE UNLOGGED TABLE queen.log_leases (
    partition_id uuid NOT NULL,
    consumer_group text NOT NULL,
    worker_id text,
    batch_end bigint,
    lease_expires_at timestamptz,
    lease_acquired_at timestamptz,
    attempt_offset bigint,
    attempt_count int NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_id, consumer_group),
    FOREIGN KEY (partition_id, consumer_group)
        REFERENCES queen.log_consumers (partition_id, consumer_group) ON DELETE CASCADE
);

CREATE INDEX log_leases_worker_idx ON queen.log_leases (worker_id) WHERE worker_id IS NOT NULL;

-- Every lease in flight moves with its state, so a lease taken before the upgrade is
-- still honoured after it; then the columns leave log_consumers (their data lives on in
-- log_leases: nothing is lost).
INSERT INTO queen.log_leases (partition_id, consumer_group, worker_id, batch_end, lease_expires_at,
                              lease_acquired_at, attempt_offset, attempt_count)
SELECT partition_id, consumer_group, worker_id, batch_end, lease_expires_at,
       lease_acquired_at, attempt_offset, attempt_count
  FROM queen.log_consumers;

DROP INDEX queen.log_consumers_worker_idx;

ALTER TABLE queen.log_consumers
    DROP COLUMN worker_id, DROP COLUMN batch_end, DROP COLUMN lease_expires_at,
    DROP COLUMN lease_acquired_at, DROP COLUMN attempt_offset, DROP COLUMN attempt_count;

ALTER TABLE queen.log_consumers SET (fillfactor = 70);


-- Log lifecycle (docs/operations.md): retention, the purge clock's clamp, orphan cleanup, the
-- driver, storage and lag views. -------------------------

-- Messages a group lost unconsumed to retention rule 1.
ALTER TABLE queen.log_consumers ADD COLUMN evicted bigint NOT NULL DEFAULT 0;


-- Where the orphan sweep stopped (it walks partition ids in order and wraps around).
CREATE TABLE queen.maintenance_state (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);



-- Delivery features: delayedProcessing, nack with delay, DLQ redrive and delete, lag and queue
-- statistics. ---------------------------------------------------------------------------

-- delayedProcessing (seconds): no pop serves a message before created_at + delay.
ALTER TABLE queen.queues
    ADD COLUMN delayed_processing int NOT NULL DEFAULT 0 CHECK (delayed_processing >= 0);

-- A nack's delay, durable: no pop of the (partition, group) before this instant.
ALTER TABLE queen.log_consumers ADD COLUMN redeliver_at timestamptz;

-- Forward seeks' count of what they passed over (docs/decisions.md, "Seeking a consumer group").
ALTER TABLE queen.log_consumers ADD COLUMN seek_skipped bigint NOT NULL DEFAULT 0;

-- encryptionEnabled, enforced by push (docs/decisions.md, "Payload encryption").
ALTER TABLE queen.queues ADD COLUMN encryption_enabled bool NOT NULL DEFAULT false;


-- queen.ack gains p_errors (trailing, default NULL: every existing call still works) and
-- files a dlq verdict in the same call.
DROP FUNCTION queen.ack(uuid, text, text[], text[], text);


-- Traces (docs/decisions.md, "Traces"): what a consumer recorded about a message while
-- processing it (Queen's msg.trace()). A trace lives as long as its message: the
-- retention step deletes the traces below a partition's new log start (counted), a
-- queue deletion cascades. At most 100 per message (queen.record_trace_v1).
CREATE TABLE queen.log_traces (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    partition_id uuid NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    "offset" bigint NOT NULL,
    transaction_id text NOT NULL,
    tenant_id uuid NOT NULL,
    consumer_group text NOT NULL,
    event_type text NOT NULL,
    data jsonb NOT NULL,
    worker_id text,
    names text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT log_traces_pkey PRIMARY KEY (id, partition_id)
);

CREATE INDEX log_traces_message_idx ON queen.log_traces (partition_id, transaction_id);

CREATE INDEX log_traces_offset_idx ON queen.log_traces (partition_id, "offset");

CREATE INDEX log_traces_names_idx ON queen.log_traces USING gin (names);


-- Timers (docs/decisions.md, "Timers"; src/timers.rs): Queen 2.x's scheduled messages,
-- one pending per (queue, key). A due timer is delivered into its queue by a push whose
-- transactionId is `txn` and whose message id is `message_id` (both promised at schedule
-- time), and its row is deleted in the same transaction: there is no tombstone. The
-- payload is the frame's (JSON text, or Queen's envelope when `encrypted`). `attempts`
-- and `last_error` record deliveries that could not be made (the row then waits).
CREATE TABLE queen.timers (
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    -- byte order: a list page is a keyset over the primary key, the same on every node
    timer_key text COLLATE "C" NOT NULL,
    partition text NOT NULL DEFAULT 'Default',
    txn text NOT NULL,
    message_id uuid NOT NULL,
    payload bytea NOT NULL,
    encrypted bool NOT NULL DEFAULT false,
    deliver_at timestamptz NOT NULL,
    attempts int NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT timers_pkey PRIMARY KEY (queue_id, timer_key)
);

-- The sweeper's scan: the earliest due first.
CREATE INDEX timers_deliver_at_idx ON queen.timers (deliver_at);


-- Key/value (docs/decisions.md, "Key/value"; src/kv.rs): Queen 2.x's versioned keys,
-- one row per (tenant, namespace, key). `expires_at` NULL lives forever; a row past it
-- is absent to every op and removed by run_maintenance. `version` only grows (one past
-- the row's, never below the write's clock in microseconds).
CREATE TABLE queen.kv (
    tenant_id uuid NOT NULL,
    -- byte order: a prefix page is a keyset over the primary key, the same on every node
    ns text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    value jsonb NOT NULL,
    version bigint NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL,
    CONSTRAINT kv_pkey PRIMARY KEY (tenant_id, ns, key)
);

-- Maintenance's scan: the earliest expired first.
CREATE INDEX kv_expires_at_idx ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;


-- Ephemeral queues' declarations (src/ephemeral.rs, sql/ephemeral.sql; docs/decisions.md,
-- "Ephemeral queues"): the options only, the contents stay in a broker's memory.
CREATE TABLE queen.ephemeral_queues (
    tenant_id uuid NOT NULL,
    name text COLLATE "C" NOT NULL,
    options jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT ephemeral_queues_pkey PRIMARY KEY (tenant_id, name)
);


-- Streams (docs/decisions.md, "Streams"; src/streams.rs): Queen's stream queries, their
-- keyed state per (query, source partition, key), and per such shard the digest of the
-- last committed cycle (a retry of that commit is recognised and changes nothing). State
-- and shards go with their query (ON DELETE CASCADE); run_maintenance removes those of
-- partitions that no longer exist.
CREATE TABLE queen.stream_queries (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL,
    name text COLLATE "C" NOT NULL,
    source_queue text NOT NULL,
    sink_queue text,
    config_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT stream_queries_pkey PRIMARY KEY (id),
    CONSTRAINT stream_queries_name_key UNIQUE (tenant_id, name)
);

CREATE TABLE queen.stream_state (
    query_id uuid NOT NULL REFERENCES queen.stream_queries (id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    key text COLLATE "C" NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT stream_state_pkey PRIMARY KEY (query_id, partition_id, key)
);

CREATE TABLE queen.stream_shards (
    query_id uuid NOT NULL REFERENCES queen.stream_queries (id) ON DELETE CASCADE,
    partition_id uuid NOT NULL,
    last_digest text,
    cycles bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT stream_shards_pkey PRIMARY KEY (query_id, partition_id)
);


-- ---------------------------------------------------------------------------------
-- The sampled history of the status and analytics routes (sql/history.sql).
-- The sampled history behind the status and analytics routes (docs/observability.md).
-- Brokers write it from their own counters, off the hot path: every broker adds its
-- counters' growth into its row of the current minute (history_record_v1), the first
-- broker of a minute files a snapshot of every queue (history_queues_v1), and
-- run_maintenance files its own report (history_lifecycle_v1) and trims what is older
-- than the GUC queen.history_retention (default 7 days). No push, pop or ack statement
-- reads or writes these tables. On Citus they stay local tables of the coordinator,
-- where the brokers connect: they are small and only ever read there.

-- One row per broker and minute. Counters are what happened in that minute; gauges are
-- summed over the samples taken in it (average = sum / samples) with their extreme.
CREATE TABLE queen.history_brokers (
    bucket timestamptz NOT NULL,
    broker text NOT NULL,
    hostname text NOT NULL,
    port int NOT NULL,
    pid int NOT NULL,
    samples int NOT NULL DEFAULT 0,
    push_requests bigint NOT NULL DEFAULT 0,
    push_messages bigint NOT NULL DEFAULT 0,
    pop_requests bigint NOT NULL DEFAULT 0,
    pop_messages bigint NOT NULL DEFAULT 0,
    pop_empty bigint NOT NULL DEFAULT 0,
    ack_requests bigint NOT NULL DEFAULT 0,
    ack_messages bigint NOT NULL DEFAULT 0,
    ack_failed bigint NOT NULL DEFAULT 0,
    transactions bigint NOT NULL DEFAULT 0,
    dlq bigint NOT NULL DEFAULT 0,
    server_errors bigint NOT NULL DEFAULT 0,
    db_errors bigint NOT NULL DEFAULT 0,
    cpu_user_us bigint NOT NULL DEFAULT 0,
    cpu_system_us bigint NOT NULL DEFAULT 0,
    rss_bytes_sum bigint NOT NULL DEFAULT 0,
    rss_bytes_max bigint NOT NULL DEFAULT 0,
    pool_size_sum bigint NOT NULL DEFAULT 0,
    pool_idle_sum bigint NOT NULL DEFAULT 0,
    pool_idle_min int,
    parked_sum bigint NOT NULL DEFAULT 0,
    parked_max int NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, broker)
);


-- One row per queue and minute: a snapshot of what the database holds. `pushed` and
-- `consumed` only grow (offsets ever assigned; messages consumed over every group), so a
-- minute's traffic is the difference from the snapshot before it.
CREATE TABLE queen.history_queues (
    bucket timestamptz NOT NULL,
    queue_id uuid NOT NULL,
    tenant_id uuid,
    queue text NOT NULL,
    namespace text,
    task text,
    partitions int NOT NULL,
    groups int NOT NULL,
    messages bigint NOT NULL,
    pushed bigint NOT NULL,
    consumed bigint NOT NULL,
    lag bigint NOT NULL,
    oldest_age_s bigint,
    dlq bigint NOT NULL,
    dlq_partitions int NOT NULL DEFAULT 0,
    leases int NOT NULL DEFAULT 0,
    leased_partitions int NOT NULL DEFAULT 0,
    leased_messages bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, queue_id)
);

CREATE INDEX history_queues_queue ON queen.history_queues (queue_id, bucket);


-- One row per run_maintenance that ran: what retention removed, by cause.
CREATE TABLE queen.history_lifecycle (
    at timestamptz NOT NULL,
    messages bigint NOT NULL,
    expired_messages bigint NOT NULL,
    evicted bigint NOT NULL,
    segments bigint NOT NULL,
    sidecar_rows bigint NOT NULL,
    duration_ms numeric NOT NULL
);

CREATE INDEX history_lifecycle_at ON queen.history_lifecycle (at);


-- One row per broker, minute and queue with long-polls parked on it in that minute's
-- samples: the parked count summed over the samples (average = sum / the broker row's
-- samples: a sample without the queue counted 0) with its extreme. Only queues with a
-- parked long-poll get a row, so its size is bounded by the parked long-polls.
CREATE TABLE queen.history_parked (
    bucket timestamptz NOT NULL,
    broker text NOT NULL,
    tenant_id uuid NOT NULL,
    queue text NOT NULL,
    parked_sum bigint NOT NULL,
    parked_max int NOT NULL,
    PRIMARY KEY (bucket, broker, tenant_id, queue)
);

-- The broker role reads no table (docs/security.md): 0.1.0 granted SELECT on every table.
-- (The views it may read are granted again by the replayed grants.)
REVOKE SELECT ON ALL TABLES IN SCHEMA queen FROM queen_broker;
