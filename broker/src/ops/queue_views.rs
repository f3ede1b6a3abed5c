//! How the queue statistics (crate::ops::queue_stats, Queen's arithmetic in queen_log::stats)
//! render in Queen's admin shapes: shared by http/routes/resources.rs and
//! http/routes/status.rs.

use queen_log::stats::{Cursor, Figures, GroupTotals};
use serde::Serialize;
use serde_json::{json, Value};

use crate::ops::queue_stats::{PartitionStats, QueueStats};

/// Our per-(partition, group) figures.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CursorOut<'a> {
    name: &'a str,
    committed: i64,
    lag: i64,
    oldest_unconsumed_at: Option<&'a str>,
    oldest_unconsumed_age_seconds: Option<f64>,
    leased: bool,
    leased_messages: i64,
    worker_id: Option<&'a str>,
    retries: i64,
    total_consumed: i64,
    evicted: i64,
    skipped: i64,
    redeliver_at: Option<&'a str>,
    dead_letter: i64,
}

impl<'a> From<&'a Cursor> for CursorOut<'a> {
    fn from(c: &'a Cursor) -> Self {
        CursorOut {
            name: &c.group,
            committed: c.committed,
            lag: c.lag,
            oldest_unconsumed_at: c.oldest_unconsumed_at.as_deref(),
            oldest_unconsumed_age_seconds: c.oldest_unconsumed_age_s,
            leased: c.leased,
            leased_messages: c.leased_messages,
            worker_id: c.worker.as_deref(),
            retries: c.retries,
            total_consumed: c.total_consumed,
            evicted: c.evicted,
            skipped: c.skipped,
            redeliver_at: c.redeliver_at.as_deref(),
            dead_letter: c.dlq,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CursorTotals {
    total_consumed: i64,
    batches_consumed: i64,
}

/// Queen's message figures on the wire. Typed, like every per-partition part of these
/// views: a queue of 10,000 partitions renders ~8 MB, and `json!` maps cost most of it.
#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub struct FiguresOut {
    total: i64,
    pending: i64,
    processing: i64,
    completed: i64,
    /// Queen has `failed: null` in some views (no per-partition failure counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<Option<()>>,
    dead_letter: i64,
}

/// Queen's message figures; `net` subtracts the leased ones from pending (its resource
/// views do, its status views do not); `failed` is null where Queen has it null.
pub fn figures_out(f: &Figures, net: bool, with_failed: bool) -> FiguresOut {
    FiguresOut {
        total: f.total,
        pending: if net { f.ready() } else { f.pending },
        processing: f.processing,
        completed: f.completed,
        failed: with_failed.then_some(None),
        dead_letter: f.dead_letter,
    }
}

pub fn figures_json(f: &Figures, net: bool, with_failed: bool) -> Value {
    serde_json::to_value(figures_out(f, net, with_failed)).expect("figures serialise")
}

pub fn queue_figures(q: &QueueStats) -> Figures {
    let mut f = Figures::default();
    for p in &q.partitions {
        f.add(&p.stats.figures());
    }
    f
}

/// Our per-(queue, group) roll-up.
pub fn group_totals_json(name: &str, t: &GroupTotals) -> Value {
    json!({
        "name": name,
        "partitions": t.partitions,
        "partitionsWithLag": t.partitions_with_lag,
        "lag": t.lag,
        "maxTimeLagSeconds": t.max_age_s,
        "leasedPartitions": t.leased_partitions,
        "leasedMessages": t.leased_messages,
        "members": t.partitions,
        "activeWorkers": t.workers,
        "retries": t.retries,
        "totalConsumed": t.total_consumed,
        "evicted": t.evicted,
        "skipped": t.skipped,
        "deadLetter": t.dlq,
        "state": t.state(),
    })
}

pub fn group_totals(q: &QueueStats, group: &str) -> GroupTotals {
    GroupTotals::of(
        q.cursors()
            .filter(|(_, c)| c.group == group)
            .map(|(_, c)| c),
    )
}

/// One partition as Queen's queue detail has it, plus our offsets and cursors.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionOut<'a> {
    id: uuid::Uuid,
    name: &'a str,
    created_at: &'a str,
    messages: FiguresOut,
    stats: FiguresOut,
    cursor: CursorTotals,
    last_activity: Option<&'a str>,
    oldest_message: Option<&'a str>,
    newest_message: Option<&'a str>,
    /// Would need a scan of the partition's segments: not filled.
    retained_bytes: Option<()>,
    log_start: i64,
    last_offset: i64,
    consumer_groups: Vec<CursorOut<'a>>,
}

pub fn partition_out(p: &PartitionStats) -> PartitionOut<'_> {
    let f = figures_out(&p.stats.figures(), false, true);
    // The slowest reader's consumption (Queen's partition cursor).
    let slowest = p
        .stats
        .cursors
        .iter()
        .filter(|c| c.committed == p.stats.floor())
        .map(|c| c.total_consumed)
        .max()
        .unwrap_or(0);
    PartitionOut {
        id: p.id,
        name: &p.name,
        created_at: &p.created_at,
        messages: f,
        stats: f,
        cursor: CursorTotals {
            total_consumed: slowest,
            batches_consumed: 0,
        },
        last_activity: p.last_lease_at.as_deref(),
        oldest_message: p.stats.oldest_unconsumed().map(|(at, _)| at),
        newest_message: p.newest_message(),
        retained_bytes: None,
        log_start: p.stats.log_start,
        last_offset: p.stats.last_offset,
        consumer_groups: p.stats.cursors.iter().map(CursorOut::from).collect(),
    }
}
