//! Queue and lag statistics for the admin routes (http/routes/resources.rs,
//! http/routes/status.rs) and the Prometheus gauges (ops/exposition.rs): the rows of `queen.queue_list_v1` and
//! `queen.queue_stats_v1`, read into `queen_log::stats` and grouped per queue and
//! partition. Every view is rendered from these, so they all count alike.

use std::collections::HashMap;

use queen_log::stats::{Cursor, Partition};
use uuid::Uuid;

use crate::db::{Db, StatsRow};
use crate::error::ApiResult;

/// A queue's settings (`queue_list_v1`, read by crate::db).
pub use crate::db::QueueRow as QueueMeta;

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

/// The tenant's queues (one by name, or all; `tenant` None = every tenant, for /metrics),
/// newest first, each with its partitions and cursors. Both statements run on one
/// connection, pipelined.
pub async fn load(
    db: &Db,
    tenant: Option<Uuid>,
    queue: Option<&str>,
) -> ApiResult<Vec<QueueStats>> {
    let db = db.conn().await?;
    let (metas, rows) = tokio::join!(db.queue_list(tenant, queue), db.queue_stats(tenant, queue));
    let mut queues: Vec<QueueStats> = metas?
        .into_iter()
        .map(|meta| QueueStats {
            meta,
            partitions: Vec::new(),
        })
        .collect();
    let index: HashMap<Uuid, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.meta.id, i))
        .collect();
    let mut parts: HashMap<Uuid, usize> = HashMap::new();
    for r in rows? {
        // A queue created between the two statements has no list row: skip it.
        let Some(&qi) = index.get(&r.queue_id) else {
            continue;
        };
        let q = &mut queues[qi];
        let pi = *parts.entry(r.partition_id).or_insert_with(|| {
            q.partitions.push(partition(&r));
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

/// A partition from the first of its stats rows.
fn partition(r: &StatsRow) -> PartitionStats {
    PartitionStats {
        id: r.partition_id,
        name: r.partition.clone(),
        created_at: r.partition_created_at.clone().unwrap_or_default(),
        last_write_at: r.last_write_at.clone().unwrap_or_default(),
        last_lease_at: None,
        stats: Partition {
            log_start: r.log_start,
            last_offset: r.last_offset,
            ..Partition::default()
        },
    }
}

/// One stats row into its partition: its cursor, or (a row without a group) what a
/// partition without cursors reports.
fn add_row(p: &mut PartitionStats, r: StatsRow) {
    let Some(group) = r.group else {
        p.stats.oldest_at = r.oldest_unconsumed_at;
        p.stats.oldest_age_s = r.oldest_unconsumed_age_s;
        return;
    };
    if r.lease_acquired_at > p.last_lease_at {
        p.last_lease_at = r.lease_acquired_at;
    }
    p.stats.cursors.push(Cursor {
        group,
        committed: r.committed.unwrap_or(0),
        lag: r.lag.unwrap_or(0),
        oldest_unconsumed_at: r.oldest_unconsumed_at,
        oldest_unconsumed_age_s: r.oldest_unconsumed_age_s,
        leased: r.leased.unwrap_or(false),
        leased_messages: r.leased_messages.unwrap_or(0),
        worker: r.worker,
        retries: i64::from(r.retries.unwrap_or(0)),
        total_consumed: r.total_consumed.unwrap_or(0),
        evicted: r.evicted.unwrap_or(0),
        skipped: r.skipped.unwrap_or(0),
        redeliver_at: r.redeliver_at,
        dlq: r.dlq.unwrap_or(0),
    });
}
