//! Operating queues: configuration, deletion, the DLQ, the statistics, and what the
//! database has installed (sql/broker_api.sql, sql/admin.sql).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use queen_log::wire::{
    Configured, Deleted, DlqDeleted, DlqPage, GroupDeleted, GroupSeek, PartitionSeek, Redriven,
    SubscriptionUpdated,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_postgres::Row;
use uuid::Uuid;

use super::{get, Conn, DbError};
use crate::util::iso_ms;

/// A queue's settings: a row of `queue_list_v1`.
/// `queen.get_message_v1`'s answer: the payload and whether it is sealed, typed (the
/// reader opens a sealed one); every other key passed through as the extension wrote it.
#[derive(Debug, Deserialize, Serialize)]
pub struct MessageDetail {
    pub payload: Value,
    #[serde(rename = "isEncrypted")]
    pub is_encrypted: bool,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Clone)]
pub struct QueueRow {
    pub tenant: Uuid,
    pub id: Uuid,
    pub name: String,
    pub namespace: Option<String>,
    pub task: Option<String>,
    pub created_at: Option<String>,
    pub lease_time: Option<i32>,
    pub retry_limit: Option<i32>,
    pub dead_letter_queue: Option<bool>,
    pub delayed_processing: i32,
    pub retention_seconds: Option<i32>,
    pub options: Value,
}

/// A row of `queue_stats_v1`: one (partition, group) cursor, or a partition without
/// cursors (`group` None, and the cursor columns NULL). Timestamps in the HTTP form
/// (milliseconds).
#[derive(Debug, Clone)]
pub struct StatsRow {
    pub queue_id: Uuid,
    pub partition_id: Uuid,
    pub partition: String,
    pub partition_created_at: Option<String>,
    pub log_start: i64,
    pub last_offset: i64,
    pub last_write_at: Option<String>,
    pub group: Option<String>,
    pub committed: Option<i64>,
    pub lag: Option<i64>,
    pub oldest_unconsumed_at: Option<String>,
    pub oldest_unconsumed_age_s: Option<f64>,
    pub leased: Option<bool>,
    pub leased_messages: Option<i64>,
    pub worker: Option<String>,
    pub lease_acquired_at: Option<String>,
    pub retries: Option<i32>,
    pub total_consumed: Option<i64>,
    pub evicted: Option<i64>,
    pub redeliver_at: Option<String>,
    pub dlq: Option<i64>,
    pub skipped: Option<i64>,
}

/// A subscription record as the consumer-group views show it.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub mode: String,
    pub timestamp: Option<String>,
    pub created_at: Option<String>,
    /// The group's stored conflation policy (docs/decisions.md, "Conflation").
    pub conflation: bool,
}

/// A timestamp column in the HTTP form.
fn ts(r: &Row, i: usize) -> Result<Option<String>, DbError> {
    Ok(get::<Option<DateTime<Utc>>>(r, i)?.map(iso_ms))
}

impl QueueRow {
    fn read(r: &Row) -> Result<Self, DbError> {
        Ok(QueueRow {
            tenant: get(r, 0)?,
            id: get(r, 1)?,
            name: get(r, 2)?,
            namespace: get(r, 3)?,
            task: get(r, 4)?,
            created_at: ts(r, 5)?,
            lease_time: get(r, 6)?,
            retry_limit: get(r, 7)?,
            dead_letter_queue: get(r, 8)?,
            delayed_processing: get(r, 9)?,
            retention_seconds: get(r, 10)?,
            options: get(r, 11)?,
        })
    }
}

impl StatsRow {
    fn read(r: &Row) -> Result<Self, DbError> {
        Ok(StatsRow {
            queue_id: get(r, 0)?,
            partition_id: get(r, 1)?,
            partition: get(r, 2)?,
            partition_created_at: ts(r, 3)?,
            log_start: get(r, 4)?,
            last_offset: get(r, 5)?,
            last_write_at: ts(r, 6)?,
            group: get(r, 7)?,
            committed: get(r, 8)?,
            lag: get(r, 9)?,
            oldest_unconsumed_at: ts(r, 10)?,
            oldest_unconsumed_age_s: get(r, 11)?,
            leased: get(r, 12)?,
            leased_messages: get(r, 13)?,
            worker: get(r, 14)?,
            lease_acquired_at: ts(r, 15)?,
            retries: get(r, 16)?,
            total_consumed: get(r, 17)?,
            evicted: get(r, 18)?,
            redeliver_at: ts(r, 19)?,
            dlq: get(r, 20)?,
            skipped: get(r, 21)?,
        })
    }
}

impl Conn {
    /// `queen.configure_queue_v1`: create or update a queue and its "Default" partition
    /// (no direct table writes: the broker may run as a least-privilege member of
    /// `queen_broker`).
    pub async fn configure_queue(
        &self,
        queue: &str,
        namespace: Option<&str>,
        task: Option<&str>,
        options: &Value,
        tenant: Uuid,
    ) -> Result<Configured, DbError> {
        self.json(
            "SELECT queen.configure_queue_v1($1::text, $2::text, $3::text, $4::jsonb, $5::uuid)",
            &[&queue, &namespace, &task, options, &tenant],
        )
        .await
    }

    /// `queen.delete_queue_v1`: the tenant's queue with everything it holds, in one
    /// transaction.
    pub async fn delete_queue(&self, queue: &str, tenant: Uuid) -> Result<Deleted, DbError> {
        self.json(
            "SELECT queen.delete_queue_v1($1::text, $2::uuid)",
            &[&queue, &tenant],
        )
        .await
    }

    /// `queen.delete_consumer_group_v1`: the tenant's group on every queue (`queue` None)
    /// or on one, with its subscription records when `delete_metadata`.
    pub async fn delete_consumer_group(
        &self,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
        tenant: Uuid,
    ) -> Result<GroupDeleted, DbError> {
        // Deleting a group everywhere takes row locks on many partitions and writes a
        // reference table on Citus, where it can lose a distributed deadlock to a
        // concurrent pop (measured in the Citus broker suite): the loser rolled back
        // whole, so it is run again.
        self.json_retrying_lost_races(
            "SELECT queen.delete_consumer_group_v1($1::text, $2::text, $3::boolean, $4::uuid)",
            &[&group, &queue, &delete_metadata, &tenant],
        )
        .await
    }

    /// `queen.seek_consumer_group_v1`: the tenant's group on every partition of `queue`,
    /// to the end or to the first message created at or after `timestamp` (text that
    /// PostgreSQL parses: a bad one is 22007, a 400).
    pub async fn seek_consumer_group(
        &self,
        group: &str,
        queue: &str,
        timestamp: Option<&str>,
        to_end: bool,
        tenant: Uuid,
    ) -> Result<GroupSeek, DbError> {
        self.json(
            "SELECT queen.seek_consumer_group_v1($1::text, $2::text, $3::text::timestamptz, \
             $4::boolean, $5::uuid)",
            &[&group, &queue, &timestamp, &to_end, &tenant],
        )
        .await
    }

    /// `queen.seek_partition_v1`: one partition; to the end unless `timestamp` is given.
    pub async fn seek_partition(
        &self,
        group: &str,
        queue: &str,
        partition: &str,
        timestamp: Option<&str>,
        tenant: Uuid,
    ) -> Result<PartitionSeek, DbError> {
        self.json(
            "SELECT queen.seek_partition_v1($1::text, $2::text, $3::text, $4::text::timestamptz, \
             NULL, $5::uuid)",
            &[&group, &queue, &partition, &timestamp, &tenant],
        )
        .await
    }

    /// `queen.update_consumer_group_subscription_v1`: the instant the tenant's group
    /// starts partitions it has not read yet, on every queue.
    pub async fn update_subscription(
        &self,
        group: &str,
        timestamp: &str,
        tenant: Uuid,
    ) -> Result<SubscriptionUpdated, DbError> {
        self.json(
            "SELECT queen.update_consumer_group_subscription_v1($1::text, $2::text::timestamptz, \
             $3::uuid)",
            &[&group, &timestamp, &tenant],
        )
        .await
    }

    /// `queen.list_messages_v1`: one page of the tenant's messages, newest first, with
    /// Queen's filters (a JSON object of its keys).
    /// Read as `T`: the whole page as JSON, or a typed view of it (queen_log::wire).
    pub async fn list_messages<T: serde::de::DeserializeOwned>(
        &self,
        filters: &Value,
        tenant: Uuid,
    ) -> Result<T, DbError> {
        self.json(
            "SELECT queen.list_messages_v1($1::jsonb, $2::uuid)",
            &[filters, &tenant],
        )
        .await
    }

    /// `queen.fetch_v1`: reads by offset, one answer entry per asked (queen_log::fetch).
    pub async fn fetch(
        &self,
        entries: &[queen_log::fetch::EntryIn],
        max_bytes: i64,
        tenant: Uuid,
    ) -> Result<queen_log::fetch::FetchOut, DbError> {
        let entries = serde_json::to_value(entries)
            .map_err(|e| DbError::Unreadable(format!("fetch entries: {e}")))?;
        self.json(
            "SELECT queen.fetch_v1($1::jsonb, $2::bigint, $3::uuid)",
            &[&entries, &max_bytes, &tenant],
        )
        .await
    }

    /// `queen.partitions_changed_v1`: partition discovery with its safeTime.
    pub async fn partitions_changed(
        &self,
        entries: &Value,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.partitions_changed_v1($1::jsonb, $2::uuid)",
            &[entries, &tenant],
        )
        .await
    }

    /// `queen.get_message_v1`: one message of the tenant by address (P0002 when there is
    /// none).
    pub async fn get_message(
        &self,
        pid: Uuid,
        txn: &str,
        tenant: Uuid,
    ) -> Result<MessageDetail, DbError> {
        self.json(
            "SELECT queen.get_message_v1($1::uuid, $2::text, $3::uuid)",
            &[&pid, &txn, &tenant],
        )
        .await
    }

    /// `queen.record_trace_v1`: one trace for a message of the tenant (P0002 when the
    /// tenant has no such message).
    pub async fn record_trace(&self, trace: &Value, tenant: Uuid) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.record_trace_v1($1::jsonb, $2::uuid)",
            &[trace, &tenant],
        )
        .await
    }

    /// `queen.get_message_traces_v1`: the traces of one message, oldest first.
    pub async fn message_traces(
        &self,
        pid: Uuid,
        txn: &str,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.get_message_traces_v1($1::uuid, $2::text, $3::uuid)",
            &[&pid, &txn, &tenant],
        )
        .await
    }

    /// `queen.get_traces_by_name_v1`: one page of the traces carrying `name`.
    pub async fn traces_by_name(
        &self,
        name: &str,
        limit: i32,
        offset: i32,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.get_traces_by_name_v1($1::text, $2::int, $3::int, $4::uuid)",
            &[&name, &limit, &offset, &tenant],
        )
        .await
    }

    /// `queen.get_available_trace_names_v1`: one page of the tenant's trace names.
    pub async fn trace_names(
        &self,
        limit: i32,
        offset: i32,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.get_available_trace_names_v1($1::int, $2::int, $3::uuid)",
            &[&limit, &offset, &tenant],
        )
        .await
    }

    /// `queen.dlq_list_v1`: one page of the tenant's DLQ, newest failure first.
    pub async fn dlq_list(
        &self,
        queue: Option<&str>,
        group: Option<&str>,
        limit: i32,
        offset: i32,
        tenant: Uuid,
    ) -> Result<DlqPage, DbError> {
        self.json(
            "SELECT queen.dlq_list_v1($1::text, $2::text, $3::int, $4::int, $5::uuid)",
            &[&queue, &group, &limit, &offset, &tenant],
        )
        .await
    }

    /// `queen.dlq_redrive_v1`: the tenant's DLQ rows `ids` back into their partitions.
    pub async fn dlq_redrive(&self, ids: &[Uuid], tenant: Uuid) -> Result<Redriven, DbError> {
        self.json(
            "SELECT queen.dlq_redrive_v1($1::uuid[], $2::uuid)",
            &[&ids, &tenant],
        )
        .await
    }

    /// `queen.dlq_redrive_queue_v1`: up to `limit` rows of a queue (and group), oldest
    /// failure first.
    pub async fn dlq_redrive_queue(
        &self,
        queue: &str,
        group: Option<&str>,
        limit: i32,
        tenant: Uuid,
    ) -> Result<Redriven, DbError> {
        self.json(
            "SELECT queen.dlq_redrive_queue_v1($1::text, $2::text, $3::int, $4::uuid)",
            &[&queue, &group, &limit, &tenant],
        )
        .await
    }

    /// `queen.dlq_delete_v1`: the tenant's DLQ rows `ids`.
    pub async fn dlq_delete(&self, ids: &[Uuid], tenant: Uuid) -> Result<DlqDeleted, DbError> {
        self.json(
            "SELECT queen.dlq_delete_v1($1::uuid[], $2::uuid)",
            &[&ids, &tenant],
        )
        .await
    }

    /// `queen.dlq_delete_queue_v1`: a queue's (and group's) rows, oldest failure first,
    /// at most `limit` when given.
    pub async fn dlq_delete_queue(
        &self,
        queue: &str,
        group: Option<&str>,
        limit: Option<i32>,
        tenant: Uuid,
    ) -> Result<DlqDeleted, DbError> {
        self.json(
            "SELECT queen.dlq_delete_queue_v1($1::text, $2::text, $3::int, $4::uuid)",
            &[&queue, &group, &limit, &tenant],
        )
        .await
    }

    /// `queen.dlq_ids_at_v1`: the tenant's DLQ rows at (partition, transactionId),
    /// newest failure first.
    pub async fn dlq_ids_at(
        &self,
        pid: Uuid,
        txn: &str,
        tenant: Uuid,
    ) -> Result<Vec<Uuid>, DbError> {
        let row = self
            .one(
                "SELECT queen.dlq_ids_at_v1($1::uuid, $2::text, $3::uuid)",
                &[&pid, &txn, &tenant],
            )
            .await?;
        get(&row, 0)
    }

    /// `queen.queue_list_v1`: the tenant's queues (`tenant` None: every tenant's; one
    /// by name or all), newest first.
    pub async fn queue_list(
        &self,
        tenant: Option<Uuid>,
        queue: Option<&str>,
    ) -> Result<Vec<QueueRow>, DbError> {
        let rows = self
            .rows(
                "SELECT r_tenant_id, r_queue_id, r_queue, r_namespace, r_task, r_created_at,
                        r_lease_time, r_retry_limit, r_dead_letter_queue, r_delayed_processing,
                        r_retention_seconds, r_options
                   FROM queen.queue_list_v1($1::uuid, $2::text)",
                &[&tenant, &queue],
            )
            .await?;
        rows.iter().map(QueueRow::read).collect()
    }

    /// `queen.queue_stats_v1`: the cursor rows of the same queues, unordered.
    pub async fn queue_stats(
        &self,
        tenant: Option<Uuid>,
        queue: Option<&str>,
    ) -> Result<Vec<StatsRow>, DbError> {
        let rows = self
            .rows(
                "SELECT r_queue_id, r_partition_id, r_partition, r_partition_created_at,
                        r_log_start, r_last_offset, r_last_write_at, r_consumer_group,
                        r_committed, r_lag, r_oldest_unconsumed_at, r_oldest_unconsumed_age,
                        r_leased, r_leased_messages, r_worker, r_lease_acquired_at, r_retries,
                        r_total_consumed, r_evicted, r_redeliver_at, r_dlq, r_skipped
                   FROM queen.queue_stats_v1($1::uuid, $2::text)",
                &[&tenant, &queue],
            )
            .await?;
        rows.iter().map(StatsRow::read).collect()
    }

    /// `queen.subscriptions_v1`: the tenant's subscription records, keyed (queue, group).
    pub async fn subscriptions(
        &self,
        tenant: Uuid,
    ) -> Result<HashMap<(String, String), Subscription>, DbError> {
        let rows = self
            .rows(
                "SELECT r_queue, r_consumer_group, r_mode, r_timestamp, r_created_at, r_conflation
                   FROM queen.subscriptions_v1($1::uuid)",
                &[&tenant],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let sub = Subscription {
                    mode: get(r, 2)?,
                    timestamp: ts(r, 3)?,
                    created_at: ts(r, 4)?,
                    conflation: get(r, 5)?,
                };
                Ok(((get(r, 0)?, get(r, 1)?), sub))
            })
            .collect()
    }

    /// The installed version of the `queen_ack` extension (`pg_extension.extversion`),
    /// None when it is not installed in this database. Also the health probe's round
    /// trip.
    pub async fn extension_version(&self) -> Result<Option<String>, DbError> {
        let rows = self
            .rows(
                "SELECT extversion::text FROM pg_catalog.pg_extension WHERE extname = 'queen_ack'",
                &[],
            )
            .await?;
        rows.first().map_or(Ok(None), |r| get(r, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::MessageDetail;

    /// The keys passed through keep every digit (the broker parses with
    /// `arbitrary_precision`), and the answer is written back unchanged.
    #[test]
    fn message_detail_passes_the_other_keys_through_exactly() {
        let text = r#"{"isEncrypted":false,"offset":12345678901234567890123,"payload":{"n":0.10000000000000000001},"queueConfig":{"leaseTime":30}}"#;
        let m: MessageDetail = serde_json::from_str(text).unwrap();
        assert!(!m.is_encrypted);
        let back: serde_json::Value = serde_json::to_value(&m).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
        assert_eq!(back.to_string(), text);
    }
}
