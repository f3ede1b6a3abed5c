-- queen_ack schema (docs/contract.md §2). Runs first in CREATE EXTENSION.
-- The schema is created here, not through the control file's `schema` key: a schema
-- PostgreSQL creates for the control file is not a member of the extension and would
-- survive DROP EXTENSION. The SET LOCAL makes the pgrx-generated functions that follow
-- land in it too; being LOCAL, it ends with the script (a plain SET would leak into the
-- caller's session after CREATE EXTENSION).
CREATE SCHEMA queen;
SET LOCAL search_path = queen, pg_catalog;

-- The tenant of every call that names none (docs/contract.md, conventions): the one SQL
-- spelling of queen_log::conventions::DEFAULT_TENANT (a #[pg_test] checks they agree).
-- Every table and function default below and in the #[pg_extern]s calls it. IMMUTABLE
-- and plain SQL, so a default that calls it is folded to the constant when the calling
-- statement is planned. It comes first so everything after it can name it.
CREATE OR REPLACE FUNCTION queen.default_tenant()
RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '00000000-0000-0000-0000-000000000001'::uuid $$;

CREATE TABLE queen.queues (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name varchar(255) NOT NULL,
    tenant_id uuid NOT NULL DEFAULT queen.default_tenant(),
    namespace varchar(255),
    task varchar(255),
    lease_time int DEFAULT 60,
    retry_limit int DEFAULT 3,
    dead_letter_queue bool DEFAULT true,
    dlq_after_max_retries bool DEFAULT true,
    dedup_window_seconds int NOT NULL DEFAULT 3600,
    retention_seconds int DEFAULT 0,
    completed_retention_seconds int DEFAULT 0,
    -- Further HTTP configure options, kept verbatim for the broker; the ack path never reads it.
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz DEFAULT now(),
    -- delayedProcessing: seconds a message stays invisible to every pop after its push.
    delayed_processing int NOT NULL DEFAULT 0 CHECK (delayed_processing >= 0),
    -- encryptionEnabled: every frame pushed must be sealed (flag 4, Queen's envelope);
    -- the broker seals with its key, the extension refuses plaintext (src/push.rs).
    encryption_enabled bool NOT NULL DEFAULT false,
    -- Queen's further options, each enforced (docs/decisions.md, "Queue options"):
    -- priority: namespace and task pops try higher-priority queues first;
    priority int NOT NULL DEFAULT 0 CHECK (priority >= 0),
    -- retryDelay (milliseconds): a failed ack's redelivery delay when the ack names none;
    retry_delay int NOT NULL DEFAULT 0 CHECK (retry_delay >= 0),
    -- maxSize: a cap on the queue's unconsumed messages, a push past it refused (0 = none);
    max_size int NOT NULL DEFAULT 0 CHECK (max_size >= 0),
    -- ttl (seconds): an older message is never delivered, counted as evicted (0 = none:
    -- set only when configure names it, never from Queen's default of 3600);
    ttl int NOT NULL DEFAULT 0 CHECK (ttl >= 0),
    -- windowBuffer (seconds): no pop serves a partition until this long after its last push;
    window_buffer int NOT NULL DEFAULT 0 CHECK (window_buffer >= 0),
    -- maxWaitTimeSeconds: run_maintenance retires messages waiting longer, counted (0 = none).
    max_wait_time_seconds int NOT NULL DEFAULT 0 CHECK (max_wait_time_seconds >= 0),
    UNIQUE (tenant_id, name)
);

-- The registry of partition names: one row per partition, holding its id. A partition's
-- name is unique in its queue HERE, not by a UNIQUE (queue_id, name) on log_partitions:
-- on a Citus cluster log_partitions is distributed by id, where such a key cannot be
-- enforced, while this small table is a reference table (a copy on every node, so a
-- lookup by names is local everywhere). Ids are random and never change (clients hold
-- them). queen.provision_partition() writes both rows.
CREATE TABLE queen.partition_names (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name text NOT NULL,
    CONSTRAINT partition_names_pkey PRIMARY KEY (id),
    CONSTRAINT partition_names_queue_id_name_key UNIQUE (queue_id, name),
    -- the target of log_partitions' foreign key: a partition row carries its own name
    CONSTRAINT partition_names_id_queue_id_name_key UNIQUE (id, queue_id, name)
);

CREATE TABLE queen.log_partitions (
    id uuid PRIMARY KEY,
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name text NOT NULL DEFAULT 'Default',
    last_offset bigint NOT NULL DEFAULT -1,
    log_start bigint NOT NULL DEFAULT 0,
    txns_start bigint NOT NULL DEFAULT 0,
    last_write_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- (queue_id, name) is unique because its registry row is.
    CONSTRAINT log_partitions_name_fkey FOREIGN KEY (id, queue_id, name)
        REFERENCES queen.partition_names (id, queue_id, name) ON DELETE CASCADE
);
-- A queue pop reads its queue's partitions (src/pop.rs, CANDIDATES): by this index, not
-- by a scan of every queue's partitions. queue_id never changes, so the updates a push
-- makes to a partition row stay HOT.
CREATE INDEX log_partitions_queue_idx ON queen.log_partitions (queue_id);

CREATE TABLE queen.log_segments (
    partition_id uuid NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    base_offset bigint NOT NULL,
    end_offset bigint NOT NULL,
    created_at timestamptz NOT NULL,
    blob bytea NOT NULL,
    PRIMARY KEY (partition_id, base_offset),
    CHECK (end_offset >= base_offset)
);
-- Blobs are zstd already: compressing them again only burns CPU.
ALTER TABLE queen.log_segments ALTER COLUMN blob SET STORAGE EXTERNAL;

-- Sidecar of transactionId hashes. Deliberately no FK: purge and retention run apart.
CREATE TABLE queen.log_txns (
    partition_id uuid NOT NULL,
    base_offset bigint NOT NULL,
    end_offset bigint NOT NULL,
    created_at timestamptz NOT NULL,
    hashes bytea NOT NULL,
    PRIMARY KEY (partition_id, base_offset),
    CHECK (length(hashes) = 16 * (end_offset - base_offset + 1))
);
-- Dedup probes filter by time within a partition.
CREATE INDEX log_txns_partition_created_idx ON queen.log_txns (partition_id, created_at);

-- The durable half of a (partition, group) cursor: what an ack commits. Every ack updates
-- its row; nothing indexed changes (the primary key only), so the update is HOT, and
-- fillfactor leaves room on the page for it.
CREATE TABLE queen.log_consumers (
    partition_id uuid NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    consumer_group text NOT NULL DEFAULT '__QUEUE_MODE__',
    committed bigint NOT NULL DEFAULT -1,
    batch_retry_count int NOT NULL DEFAULT 0,
    total_consumed bigint NOT NULL DEFAULT 0,
    lease_conflated bool NOT NULL DEFAULT false,
    -- Messages this group lost unconsumed to retention rule 1 (docs/contract.md §13).
    evicted bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- A nack's delay: no pop of this (partition, group) before this instant. Durable, so
    -- a crash or a failover never shortens a requested delay; never indexed (HOT).
    redeliver_at timestamptz,
    -- Messages a forward seek moved this cursor over unconsumed (docs/decisions.md,
    -- "Seeking a consumer group"): never silent, like evicted.
    seek_skipped bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_id, consumer_group)
) WITH (fillfactor = 70);

-- The lease half (docs/contract.md §2's worker_id, batch_end, lease_expires_at,
-- lease_acquired_at, attempt_offset, attempt_count), UNLOGGED: a lease needs no
-- durability (after a crash or a failover every lease is void and its batch redelivers,
-- which the contract prefers), so claiming one writes no WAL and a pop that only leases
-- commits without waiting for a flush. Its row lock is the one lock that serializes the
-- group's pops, acks and DLQ filings on the partition (a row lock on a logged table writes
-- WAL itself). A crash empties the table; a missing row is recreated on first use.
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
-- Lease renewal finds a worker's rows without scanning every lease.
CREATE INDEX log_leases_worker_idx ON queen.log_leases (worker_id) WHERE worker_id IS NOT NULL;

-- A snapshot that must outlive retention: no FK. The key includes partition_id so that
-- Citus can enforce it on the table distributed by partition; id leads, so lookups by
-- DLQ id use it.
CREATE TABLE queen.log_dlq (
    id uuid NOT NULL DEFAULT gen_random_uuid(),
    partition_id uuid NOT NULL,
    consumer_group text NOT NULL,
    "offset" bigint NOT NULL,
    message_id uuid,
    transaction_id text,
    payload jsonb,
    error text,
    retry_count int DEFAULT 0,
    failed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT log_dlq_pkey PRIMARY KEY (id, partition_id)
);
CREATE INDEX log_dlq_partition_failed_idx ON queen.log_dlq (partition_id, failed_at DESC);

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

CREATE TABLE queen.consumer_groups_metadata (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id uuid NOT NULL DEFAULT queen.default_tenant(),
    consumer_group text NOT NULL,
    queue_id uuid NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    subscription_mode text NOT NULL DEFAULT 'all'
        CHECK (subscription_mode IN ('all', 'new', 'timestamp')),
    subscription_timestamp timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Last-value delivery (docs/decisions.md, "Conflation"): stored at registration, wins after.
    conflation bool NOT NULL DEFAULT false,
    UNIQUE (tenant_id, consumer_group, queue_id)
);

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

-- Ephemeral queues' declarations (docs/decisions.md, "Ephemeral queues"; src/ephemeral.rs):
-- the options of a queue whose contents live in a broker's memory only. `options` holds
-- every knob (the effective values). A local table on a Citus coordinator: brokers read
-- it at start and on configure, never on the hot path.
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

-- Maintenance and the sampled history (sql/lifecycle.sql, sql/history.sql use them).
-- Log lifecycle (docs/contract.md §10, §13): sidecar purge on the queue's clock, orphan cleanup,
-- the plan of due work, and the one driver, CALL queen.run_maintenance(). Retention's
-- step is Rust (src/lifecycle.rs); every step is bounded by p_max_rows, touches one
-- partition (or one batch of orphans) and writes nothing when there is nothing to do, so
-- an idle run costs no WAL.

-- Where the orphan sweep stopped (it walks partition ids in order and wraps around).
CREATE TABLE queen.maintenance_state (
    key text PRIMARY KEY,
    value jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

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
