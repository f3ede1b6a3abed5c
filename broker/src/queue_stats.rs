//! Queue and lag statistics for the admin routes (routes/resources.rs, routes/status.rs)
//! and the Prometheus gauges (metrics.rs): the rows of `queen.queue_list_v1` and
//! `queen.queue_stats_v1`, read into `queen_log::stats` and grouped per queue and
//! partition. Every view is rendered from these, so they all count alike.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use queen_log::stats::{Cursor, Partition};
use serde_json::Value;
use uuid::Uuid;

use crate::error::ApiResult;
use crate::state::AppState;
use crate::util::iso_ms;

/// A queue's settings (`queue_list_v1`).
#[derive(Debug, Clone)]
pub struct QueueMeta {
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

/// One partition: its identity and its figures.
#[derive(Debug, Clone)]
pub struct PartitionStats {
    pub id: Uuid,
    pub name: String,
    pub created_at: String,
    /// The last push; only meaningful while the partition retains messages.
    pub last_write_at: String,
    /// The newest lease taken on it by any group.
    pub last_lease_at: Option<String>,
    pub stats: Partition,
}

impl PartitionStats {
    /// The newest retained message's instant (the last push), null when empty.
    pub fn newest_message(&self) -> Option<&str> {
        (self.stats.last_offset >= self.stats.log_start).then_some(self.last_write_at.as_str())
    }
}

/// A queue with its partitions, in partition name order (cursors in group order).
#[derive(Debug, Clone)]
pub struct QueueStats {
    pub meta: QueueMeta,
    pub partitions: Vec<PartitionStats>,
}

impl QueueStats {
    /// The cursors of every partition, with their partition.
    pub fn cursors(&self) -> impl Iterator<Item = (&PartitionStats, &Cursor)> {
        self.partitions
            .iter()
            .flat_map(|p| p.stats.cursors.iter().map(move |c| (p, c)))
    }

    /// The consumer groups with a cursor on some partition, sorted bytewise.
    pub fn groups(&self) -> Vec<&str> {
        let mut g: Vec<&str> = self.cursors().map(|(_, c)| c.group.as_str()).collect();
        g.sort_unstable();
        g.dedup();
        g
    }
}

const LIST: &str = "SELECT r_tenant_id, r_queue_id, r_queue, r_namespace, r_task, r_created_at,
        r_lease_time, r_retry_limit, r_dead_letter_queue, r_delayed_processing,
        r_retention_seconds, r_options
   FROM queen.queue_list_v1($1::uuid, $2::text)";

const STATS: &str = "SELECT r_queue_id, r_partition_id, r_partition, r_partition_created_at,
        r_log_start, r_last_offset, r_last_write_at, r_consumer_group, r_committed, r_lag,
        r_oldest_unconsumed_at, r_oldest_unconsumed_age, r_leased, r_leased_messages, r_worker,
        r_lease_acquired_at, r_retries, r_total_consumed, r_evicted, r_redeliver_at, r_dlq
   FROM queen.queue_stats_v1($1::uuid, $2::text)";

/// The tenant's queues (one by name, or all; `tenant` None = every tenant, for /metrics),
/// newest first, each with its partitions and cursors. Both statements run on one
/// connection, pipelined.
pub async fn load(
    state: &AppState,
    tenant: Option<Uuid>,
    queue: Option<&str>,
) -> ApiResult<Vec<QueueStats>> {
    let db = state.db().await?;
    let (list, stats) = (
        db.prepare_cached(LIST).await?,
        db.prepare_cached(STATS).await?,
    );
    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&tenant, &queue];
    let (metas, rows) = tokio::join!(db.query(&list, &args), db.query(&stats, &args));
    let mut queues: Vec<QueueStats> = metas?
        .iter()
        .map(|r| QueueStats {
            meta: meta(r),
            partitions: Vec::new(),
        })
        .collect();
    let index: HashMap<Uuid, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.meta.id, i))
        .collect();
    let mut parts: HashMap<Uuid, usize> = HashMap::new();
    for r in rows?.iter() {
        // A queue created between the two statements has no list row: skip it.
        let Some(&qi) = index.get(&r.get::<_, Uuid>(0)) else {
            continue;
        };
        let q = &mut queues[qi];
        let pid: Uuid = r.get(1);
        let pi = *parts.entry(pid).or_insert_with(|| {
            q.partitions.push(partition(r));
            q.partitions.len() - 1
        });
        add_row(&mut q.partitions[pi], r);
    }
    // The rows come unordered: partitions by name, cursors by group, bytewise.
    for q in &mut queues {
        q.partitions.sort_by(|a, b| a.name.cmp(&b.name));
        for p in &mut q.partitions {
            p.stats.cursors.sort_by(|a, b| a.group.cmp(&b.group));
        }
    }
    Ok(queues)
}

fn ts(t: Option<DateTime<Utc>>) -> Option<String> {
    t.map(iso_ms)
}

fn meta(r: &tokio_postgres::Row) -> QueueMeta {
    QueueMeta {
        tenant: r.get(0),
        id: r.get(1),
        name: r.get(2),
        namespace: r.get(3),
        task: r.get(4),
        created_at: ts(r.get(5)),
        lease_time: r.get(6),
        retry_limit: r.get(7),
        dead_letter_queue: r.get(8),
        delayed_processing: r.get(9),
        retention_seconds: r.get(10),
        options: r.get(11),
    }
}

/// A partition from the first of its stats rows.
fn partition(r: &tokio_postgres::Row) -> PartitionStats {
    PartitionStats {
        id: r.get(1),
        name: r.get(2),
        created_at: ts(r.get(3)).unwrap_or_default(),
        last_write_at: ts(r.get(6)).unwrap_or_default(),
        last_lease_at: None,
        stats: Partition {
            log_start: r.get(4),
            last_offset: r.get(5),
            ..Partition::default()
        },
    }
}

/// One stats row into its partition: its cursor, or (a row without a group) what a
/// partition without cursors reports.
fn add_row(p: &mut PartitionStats, r: &tokio_postgres::Row) {
    let oldest_at = ts(r.get(10));
    let oldest_age: Option<f64> = r.get(11);
    let Some(group) = r.get::<_, Option<String>>(7) else {
        p.stats.oldest_at = oldest_at;
        p.stats.oldest_age_s = oldest_age;
        return;
    };
    let lease_at = ts(r.get(15));
    if lease_at > p.last_lease_at {
        p.last_lease_at = lease_at;
    }
    p.stats.cursors.push(Cursor {
        group,
        committed: r.get(8),
        lag: r.get::<_, Option<i64>>(9).unwrap_or(0),
        oldest_unconsumed_at: oldest_at,
        oldest_unconsumed_age_s: oldest_age,
        leased: r.get(12),
        leased_messages: r.get(13),
        worker: r.get(14),
        retries: i64::from(r.get::<_, Option<i32>>(16).unwrap_or(0)),
        total_consumed: r.get::<_, Option<i64>>(17).unwrap_or(0),
        evicted: r.get::<_, Option<i64>>(18).unwrap_or(0),
        redeliver_at: ts(r.get(19)),
        dlq: r.get(20),
    });
}
