//! The sampled history (docs/observability.md): the sampler's writes
//! (`history_record_v1`, `history_queues_v1`) and the status and analytics routes' reads
//! (`history_brokers_v1`, `history_parked_series_v1`, `history_queues_series_v1`,
//! `history_lifecycle_series_v1`, `postgres_stats_v1`).

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Json as PgJson;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{get, Conn, DbError};

/// A time range and the width of its buckets, in minutes.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub bucket_minutes: i32,
}

/// One broker's figures in one bucket (`history_brokers_v1`).
#[derive(Debug, Clone, Default)]
pub struct BrokerBucket {
    pub bucket: DateTime<Utc>,
    pub broker: String,
    pub hostname: String,
    pub port: i32,
    pub samples: i64,
    pub push_requests: i64,
    pub push_messages: i64,
    pub pop_requests: i64,
    pub pop_messages: i64,
    pub pop_empty: i64,
    pub ack_requests: i64,
    pub ack_messages: i64,
    pub ack_failed: i64,
    pub transactions: i64,
    pub dlq: i64,
    pub server_errors: i64,
    pub db_errors: i64,
    pub cpu_user_us: i64,
    pub cpu_system_us: i64,
    pub rss_bytes_avg: Option<i64>,
    pub rss_bytes_max: i64,
    pub pool_size_avg: Option<f64>,
    pub pool_idle_avg: Option<f64>,
    pub pool_idle_min: Option<i32>,
    pub parked_avg: Option<f64>,
    pub parked_max: i32,
}

/// One queue's figures in one bucket (`history_queues_series_v1`).
#[derive(Debug, Clone, Default)]
pub struct QueueBucket {
    pub bucket: DateTime<Utc>,
    pub queue: String,
    pub namespace: Option<String>,
    pub task: Option<String>,
    pub pushed: i64,
    pub consumed: i64,
    pub partitions: Option<i32>,
    pub groups: Option<i32>,
    pub messages: Option<i64>,
    pub lag: Option<i64>,
    pub oldest_age_s: Option<i64>,
    pub dlq: Option<i64>,
    pub dlq_partitions: Option<i32>,
    pub leases: Option<i32>,
    pub leased_partitions: Option<i32>,
    pub leased_messages: Option<i64>,
    /// The running totals at the bucket's last snapshot.
    pub pushed_total: Option<i64>,
    pub consumed_total: Option<i64>,
}

/// One queue's traffic over a whole range (`history_queue_totals_v1`).
#[derive(Debug, Clone, Default)]
pub struct QueueTotal {
    pub queue: String,
    pub pushed: i64,
    pub consumed: i64,
    pub max_age_s: Option<i64>,
}

/// The long-polls parked on one queue of one broker in one bucket
/// (`history_parked_series_v1`).
#[derive(Debug, Clone, Default)]
pub struct ParkedBucket {
    pub bucket: DateTime<Utc>,
    pub queue: String,
    pub broker: String,
    pub hostname: String,
    pub parked_avg: Option<f64>,
    pub parked_max: i32,
}

/// What the lifecycle removed in one bucket (`history_lifecycle_series_v1`).
#[derive(Debug, Clone, Default)]
pub struct LifecycleBucket {
    pub bucket: DateTime<Utc>,
    pub runs: i64,
    pub messages: i64,
    pub expired_messages: i64,
    pub evicted: i64,
    pub segments: i64,
    pub sidecar_rows: i64,
}

/// A `numeric` column read as text (tokio-postgres has no numeric type), as f64.
fn numeric(row: &Row, i: usize) -> Result<Option<f64>, DbError> {
    Ok(get::<Option<String>>(row, i)?.and_then(|s| s.parse().ok()))
}

impl Conn {
    /// `queen.history_record_v1`: adds one sample of this broker to its current minute.
    pub async fn history_record(
        &self,
        broker: &str,
        hostname: &str,
        port: i32,
        pid: i32,
        sample: &Value,
    ) -> Result<(), DbError> {
        self.one(
            "SELECT queen.history_record_v1($1::text, $2::text, $3::int, $4::int, $5::jsonb)",
            &[&broker, &hostname, &port, &pid, &PgJson(sample)],
        )
        .await?;
        Ok(())
    }

    /// `queen.history_queues_v1`: files this minute's queue snapshot unless a broker did
    /// (`replace`: over what was filed); whether this call filed it.
    pub async fn history_queues(&self, rows: &Value, replace: bool) -> Result<bool, DbError> {
        let row = self
            .one(
                "SELECT queen.history_queues_v1($1::jsonb, now(), $2::bool)",
                &[&PgJson(rows), &replace],
            )
            .await?;
        get(&row, 0)
    }

    /// `queen.history_brokers_v1`: every broker's buckets of `r`, oldest first.
    pub async fn history_brokers(&self, r: Range) -> Result<Vec<BrokerBucket>, DbError> {
        let rows = self
            .rows(
                "SELECT r_bucket, r_broker, r_hostname, r_port, r_samples, r_push_requests, \
                 r_push_messages, r_pop_requests, r_pop_messages, r_pop_empty, r_ack_requests, \
                 r_ack_messages, r_ack_failed, r_transactions, r_dlq, r_server_errors, \
                 r_db_errors, r_cpu_user_us, r_cpu_system_us, r_rss_bytes_avg, r_rss_bytes_max, \
                 r_pool_size_avg::text, r_pool_idle_avg::text, r_pool_idle_min, \
                 r_parked_avg::text, r_parked_max \
                 FROM queen.history_brokers_v1($1::timestamptz, $2::timestamptz, \
                 $3::int * interval '1 minute')",
                &[&r.from, &r.to, &r.bucket_minutes],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(BrokerBucket {
                    bucket: get(row, 0)?,
                    broker: get(row, 1)?,
                    hostname: get(row, 2)?,
                    port: get(row, 3)?,
                    samples: get(row, 4)?,
                    push_requests: get(row, 5)?,
                    push_messages: get(row, 6)?,
                    pop_requests: get(row, 7)?,
                    pop_messages: get(row, 8)?,
                    pop_empty: get(row, 9)?,
                    ack_requests: get(row, 10)?,
                    ack_messages: get(row, 11)?,
                    ack_failed: get(row, 12)?,
                    transactions: get(row, 13)?,
                    dlq: get(row, 14)?,
                    server_errors: get(row, 15)?,
                    db_errors: get(row, 16)?,
                    cpu_user_us: get(row, 17)?,
                    cpu_system_us: get(row, 18)?,
                    rss_bytes_avg: get(row, 19)?,
                    rss_bytes_max: get(row, 20)?,
                    pool_size_avg: numeric(row, 21)?,
                    pool_idle_avg: numeric(row, 22)?,
                    pool_idle_min: get(row, 23)?,
                    parked_avg: numeric(row, 24)?,
                    parked_max: get(row, 25)?,
                })
            })
            .collect()
    }

    /// `queen.history_parked_series_v1`: the long-polls parked per queue and broker in
    /// the buckets of `r` (`tenant` and `queue` narrow it), oldest first.
    pub async fn history_parked_series(
        &self,
        r: Range,
        tenant: Option<Uuid>,
        queue: Option<&str>,
    ) -> Result<Vec<ParkedBucket>, DbError> {
        let rows = self
            .rows(
                "SELECT r_bucket, r_queue, r_broker, r_hostname, r_parked_avg::text, \
                 r_parked_max FROM queen.history_parked_series_v1($1::timestamptz, \
                 $2::timestamptz, $3::int * interval '1 minute', $4::uuid, $5::text)",
                &[&r.from, &r.to, &r.bucket_minutes, &tenant, &queue],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ParkedBucket {
                    bucket: get(row, 0)?,
                    queue: get(row, 1)?,
                    broker: get(row, 2)?,
                    hostname: get(row, 3)?,
                    parked_avg: numeric(row, 4)?,
                    parked_max: get(row, 5)?,
                })
            })
            .collect()
    }

    /// `queen.history_queues_series_v1`: the queues' buckets of `r` (`tenant` and
    /// `queue` narrow it), oldest first.
    pub async fn history_queues_series(
        &self,
        r: Range,
        tenant: Option<Uuid>,
        queue: Option<&str>,
    ) -> Result<Vec<QueueBucket>, DbError> {
        let rows = self
            .rows(
                "SELECT r_bucket, r_queue, r_namespace, r_task, r_pushed, r_consumed, \
                 r_partitions, r_groups, r_messages, r_lag, r_oldest_age_s, r_dlq, \
                 r_dlq_partitions, r_leases, r_leased_partitions, r_leased_messages, \
                 r_pushed_total, r_consumed_total \
                 FROM queen.history_queues_series_v1($1::timestamptz, $2::timestamptz, \
                 $3::int * interval '1 minute', $4::uuid, $5::text)",
                &[&r.from, &r.to, &r.bucket_minutes, &tenant, &queue],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(QueueBucket {
                    bucket: get(row, 0)?,
                    queue: get(row, 1)?,
                    namespace: get(row, 2)?,
                    task: get(row, 3)?,
                    pushed: get(row, 4)?,
                    consumed: get(row, 5)?,
                    partitions: get(row, 6)?,
                    groups: get(row, 7)?,
                    messages: get(row, 8)?,
                    lag: get(row, 9)?,
                    oldest_age_s: get(row, 10)?,
                    dlq: get(row, 11)?,
                    dlq_partitions: get(row, 12)?,
                    leases: get(row, 13)?,
                    leased_partitions: get(row, 14)?,
                    leased_messages: get(row, 15)?,
                    pushed_total: get(row, 16)?,
                    consumed_total: get(row, 17)?,
                })
            })
            .collect()
    }

    /// `queen.history_lag_series_v1`: the oldest unconsumed message's age (s) over the
    /// queues (`tenant`'s, or all) per bucket of `r`, oldest first.
    pub async fn history_lag_series(
        &self,
        r: Range,
        tenant: Option<Uuid>,
    ) -> Result<Vec<(DateTime<Utc>, Option<i64>)>, DbError> {
        let rows = self
            .rows(
                "SELECT r_bucket, r_max_age_s FROM queen.history_lag_series_v1($1::timestamptz, \
                 $2::timestamptz, $3::int * interval '1 minute', $4::uuid)",
                &[&r.from, &r.to, &r.bucket_minutes, &tenant],
            )
            .await?;
        rows.iter()
            .map(|row| Ok((get(row, 0)?, get(row, 1)?)))
            .collect()
    }

    /// `queen.history_queue_totals_v1`: per queue over all of `r`, what it consumed and
    /// the oldest age seen, most consumed first.
    pub async fn history_queue_totals(
        &self,
        r: Range,
        tenant: Option<Uuid>,
    ) -> Result<Vec<QueueTotal>, DbError> {
        let rows = self
            .rows(
                "SELECT r_queue, r_pushed, r_consumed, r_max_age_s \
                 FROM queen.history_queue_totals_v1($1::timestamptz, $2::timestamptz, $3::uuid)",
                &[&r.from, &r.to, &tenant],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(QueueTotal {
                    queue: get(row, 0)?,
                    pushed: get(row, 1)?,
                    consumed: get(row, 2)?,
                    max_age_s: get(row, 3)?,
                })
            })
            .collect()
    }

    /// `queen.history_pushed_v1`: messages pushed per minute into each of `queues` over
    /// `r`, by queue then minute.
    pub async fn history_pushed(
        &self,
        r: Range,
        queues: &[Uuid],
    ) -> Result<Vec<(Uuid, i64)>, DbError> {
        let rows = self
            .rows(
                "SELECT r_queue_id, r_pushed FROM queen.history_pushed_v1($1::timestamptz, \
                 $2::timestamptz, $3::uuid[])",
                &[&r.from, &r.to, &queues],
            )
            .await?;
        rows.iter()
            .map(|row| Ok((get(row, 0)?, get(row, 1)?)))
            .collect()
    }

    /// `queen.history_lifecycle_series_v1`: what the lifecycle removed in `r`'s buckets.
    pub async fn history_lifecycle_series(
        &self,
        r: Range,
    ) -> Result<Vec<LifecycleBucket>, DbError> {
        let rows = self
            .rows(
                "SELECT r_bucket, r_runs, r_messages, r_expired_messages, r_evicted, \
                 r_segments, r_sidecar_rows \
                 FROM queen.history_lifecycle_series_v1($1::timestamptz, $2::timestamptz, \
                 $3::int * interval '1 minute')",
                &[&r.from, &r.to, &r.bucket_minutes],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(LifecycleBucket {
                    bucket: get(row, 0)?,
                    runs: get(row, 1)?,
                    messages: get(row, 2)?,
                    expired_messages: get(row, 3)?,
                    evicted: get(row, 4)?,
                    segments: get(row, 5)?,
                    sidecar_rows: get(row, 6)?,
                })
            })
            .collect()
    }

    /// `queen.postgres_stats_v1`: PostgreSQL's statistics of the extension's tables.
    pub async fn postgres_stats(&self) -> Result<Value, DbError> {
        self.json("SELECT queen.postgres_stats_v1()", &[]).await
    }
}
