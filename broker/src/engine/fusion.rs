//! Ack fusion (docs/broker-contract.md §4): fast-path acks are parked on a shard (chosen by
//! a hash of the partition id, so one partition's acks share a shard) and flushed together
//! as one `log_ack_multi_v1` call. The shards are crate::engine::lanes, which hold the
//! adaptive rule: an ack that finds its shard idle (nothing parked, nothing in flight) runs
//! the one `log_ack_at_v1` that `QUEEN_ACK_FUSION=0` runs, in its own handler; only acks
//! that overlap park, and a shard flushes what is parked at once, at most one flush in
//! flight per shard. `QUEEN_ACK_FUSION_HOLD_MS` is only the lanes' liveness backstop tick.
//!
//! Flushes of all shards together are capped by `QUEEN_ACK_FUSION_MAX_INFLIGHT` (default:
//! the broker's CPU count). Measured on 2 cores, 64 consumers: eight shards flushing ~2
//! rows each at once spent the pool and the CPU on commits and were no faster than fusion
//! off, while one or two flushes at a time carried 8–17 rows each and ran 14–33 % faster.
//! A shard whose flush has to wait for a slot keeps collecting, so under load the cap turns
//! into bigger flushes; with a free slot an arrival still flushes at once. Entries
//! with the same (partition, group, worker) fold to max(batch_end) and share that row's
//! verdict; different workers never fold. Verdicts map back by input ordinal. A reply is
//! sent only after the flush (or the inline call) committed, so a 200 means durable. The
//! shard task, not the waiting handler, holds the pooled connection of a flush.
//! [`Fusion::shutdown`] finishes pending and in-flight flushes and answers every parked
//! ack before it returns.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_log::wire::{MultiAck, Reply};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::config::default_max_inflight;
use crate::db::ack::AckRow;
use crate::db::{Conn, Db, DbError};

use crate::engine::lanes::{Lanes, Refused};

/// Period of the coalesce summary log line.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// The backstop tick when `QUEEN_ACK_FUSION_HOLD_MS` is the default.
pub const DEFAULT_HOLD: Duration = Duration::from_millis(3);

/// One parked fast-path ack: a whole delivered batch, acked positionally.
pub struct Parked {
    pub pid: Uuid,
    pub group: String,
    pub worker: String,
    pub batch_end: i64,
    pub count: i32,
}

impl Parked {
    /// The positional ack this parked ack stands for (`log_ack_at_v1`'s arguments).
    pub fn row(&self) -> AckRow<'_> {
        AckRow {
            pid: self.pid,
            group: &self.group,
            worker: &self.worker,
            batch_end: self.batch_end,
            count: self.count,
        }
    }
}

/// What a flush says about a parked ack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Committed: the cursor is durable at batch_end.
    Committed,
    /// The database refused this row (lease expired or reassigned): use the SQL path.
    Rejected(String),
    /// The flush failed as a whole (connection lost, timeout): use the SQL path.
    FlushFailed(String),
}

/// Counters of the shards together, for `/metrics` and the coalesce summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FusionStats {
    /// `log_ack_multi_v1` calls that committed, and the rows they carried.
    pub commits: u64,
    pub rows: u64,
    /// Parked acks answered by a committed flush (acks − rows were folded).
    pub acks: u64,
    /// Acks that found their shard idle and ran one `log_ack_at_v1` inline (answered,
    /// committed or refused; a refusal also counts in `rejected_rows`).
    pub inline: u64,
    /// Rows the database refused (their acks take the SQL path).
    pub rejected_rows: u64,
    /// Flushes that failed as a whole (inline ones included), and the acks they carried.
    pub failed_flushes: u64,
    pub failed_acks: u64,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    rows: AtomicU64,
    acks: AtomicU64,
    inline: AtomicU64,
    rejected_rows: AtomicU64,
    failed_flushes: AtomicU64,
    failed_acks: AtomicU64,
}

impl Stats {
    fn snapshot(&self) -> FusionStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FusionStats {
            commits: l(&self.commits),
            rows: l(&self.rows),
            acks: l(&self.acks),
            inline: l(&self.inline),
            rejected_rows: l(&self.rejected_rows),
            failed_flushes: l(&self.failed_flushes),
            failed_acks: l(&self.failed_acks),
        }
    }
}

/// The shards; see the module docs.
pub struct Fusion {
    db: Db,
    shards: Lanes<Parked, Verdict>,
    stats: Arc<Stats>,
    stop: watch::Sender<bool>,
    summary: Mutex<Option<JoinHandle<()>>>,
}

impl Fusion {
    /// Starts `shards` flush tasks with the default backstop tick and in-flight cap, on
    /// the current tokio runtime (so this must be called from inside one).
    pub fn start(db: Db, shards: usize) -> Self {
        Self::start_with(db, shards, DEFAULT_HOLD, default_max_inflight())
    }

    /// Starts `shards` flush tasks whose backstop tick is `hold` (0 = 1 ms), at most
    /// `max_inflight` (at least 1) flushes running at once across them.
    pub fn start_with(db: Db, shards: usize, hold: Duration, max_inflight: usize) -> Self {
        let stats = Arc::new(Stats::default());
        let (p, st) = (db.clone(), stats.clone());
        let shards = Lanes::start(shards, max_inflight, hold, move |batch| {
            flush(p.clone(), batch, st.clone())
        });
        let (stop, stop_rx) = watch::channel(false);
        let summary = tokio::spawn(summary_loop(stats.clone(), stop_rx));
        Fusion {
            db,
            shards,
            stats,
            stop,
            summary: Mutex::new(Some(summary)),
        }
    }

    /// Acks one batch: inline when its shard is idle, else parked until its flush.
    /// Never holds a connection while parked.
    pub async fn ack(&self, parked: Parked) -> Verdict {
        let shard = shard_of(parked.pid, self.shards.len());
        match self.shards.run(shard, parked, |p| self.inline(p)).await {
            Ok(v) => v,
            Err(Refused::Closed(_)) => Verdict::FlushFailed("ack fusion is shut down".into()),
            Err(Refused::Dropped) => {
                Verdict::FlushFailed("ack fusion shard dropped the ack".into())
            }
        }
    }

    /// The idle-shard path: one `log_ack_at_v1`, exactly what fusion off runs.
    async fn inline(&self, p: Parked) -> Verdict {
        let result = match self.db.conn().await {
            Ok(db) => ack_at(&db, &p).await.map_err(|e| {
                db.discard_if_lost(&e);
                e.to_string()
            }),
            Err(e) => Err(e.to_string()),
        };
        let s = &self.stats;
        match result {
            Ok(v) => {
                s.inline.fetch_add(1, Ordering::Relaxed);
                if v != Verdict::Committed {
                    s.rejected_rows.fetch_add(1, Ordering::Relaxed);
                }
                v
            }
            Err(e) => {
                s.failed_flushes.fetch_add(1, Ordering::Relaxed);
                s.failed_acks.fetch_add(1, Ordering::Relaxed);
                Verdict::FlushFailed(e)
            }
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> FusionStats {
        self.stats.snapshot()
    }

    /// Graceful shutdown: later acks are refused (their handlers use the SQL path), every
    /// ack already parked is flushed and answered, in-flight flushes finish; returns when
    /// every shard task has ended. Idempotent.
    pub async fn shutdown(&self) {
        self.shards.shutdown().await;
        let _ = self.stop.send(true);
        let summary = self.summary.lock().expect("fusion summary poisoned").take();
        if let Some(t) = summary {
            let _ = t.await;
        }
        log_summary(&self.stats, &mut FusionStats::default(), true);
    }
}

/// The shard of a partition among `n` (public for tests that need two partitions on one
/// shard).
pub fn shard_of(pid: Uuid, n: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    pid.hash(&mut h);
    (h.finish() % n as u64) as usize
}

/// The coalesce summary about every 10 s while there is traffic, and once at shutdown.
async fn summary_loop(stats: Arc<Stats>, mut stop: watch::Receiver<bool>) {
    let mut last = FusionStats::default();
    let mut tick = tokio::time::interval(LOG_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => log_summary(&stats, &mut last, false),
            r = stop.changed() => if r.is_err() || *stop.borrow() { return },
        }
    }
}

/// Logs the window since `last` (skipped when nothing happened, unless `force`).
fn log_summary(stats: &Stats, last: &mut FusionStats, force: bool) {
    let now = stats.snapshot();
    let commits = now.commits - last.commits;
    let rows = now.rows - last.rows;
    let failed = now.failed_flushes - last.failed_flushes;
    if commits == 0 && failed == 0 && !force {
        return;
    }
    tracing::info!(
        commits,
        rows,
        acks = now.acks - last.acks,
        rows_per_commit = format!("{:.2}", rows as f64 / commits.max(1) as f64),
        rejected_rows = now.rejected_rows - last.rejected_rows,
        failed_flushes = failed,
        total_commits = now.commits,
        total_rows = now.rows,
        "ack fusion coalesce summary"
    );
    *last = now;
}

/// One folded row: (partition, group, worker) → max(batch_end), summed counts.
#[derive(Debug, PartialEq, Eq)]
struct Row {
    pid: Uuid,
    group: String,
    worker: String,
    end: i64,
    count: i32,
}

/// Folds parked acks into rows; returns the rows and, per parked ack, its row's ordinal.
fn fold<'a>(parked: impl Iterator<Item = &'a Parked>) -> (Vec<Row>, Vec<usize>) {
    let mut rows: Vec<Row> = Vec::new();
    let mut index: HashMap<(Uuid, &str, &str), usize> = HashMap::new();
    let mut row_of = Vec::new();
    for p in parked {
        let r = *index
            .entry((p.pid, p.group.as_str(), p.worker.as_str()))
            .or_insert_with(|| {
                rows.push(Row {
                    pid: p.pid,
                    group: p.group.clone(),
                    worker: p.worker.clone(),
                    end: p.batch_end,
                    count: 0,
                });
                rows.len() - 1
            });
        rows[r].end = rows[r].end.max(p.batch_end);
        rows[r].count = rows[r].count.saturating_add(p.count);
        row_of.push(r);
    }
    (rows, row_of)
}

/// Folds the batch into rows, runs one multi call, answers every parked ack with its
/// row's verdict (in batch order).
async fn flush(db: Db, batch: Vec<Parked>, stats: Arc<Stats>) -> Vec<Verdict> {
    let (rows, row_of) = fold(batch.iter());
    let verdicts = match run_multi(&db, &rows).await {
        Ok(v) => {
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats.rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
            stats.acks.fetch_add(batch.len() as u64, Ordering::Relaxed);
            let rejected = v.iter().filter(|v| **v != Verdict::Committed).count();
            stats
                .rejected_rows
                .fetch_add(rejected as u64, Ordering::Relaxed);
            v
        }
        Err(e) => {
            stats.failed_flushes.fetch_add(1, Ordering::Relaxed);
            stats
                .failed_acks
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            vec![Verdict::FlushFailed(e); rows.len()]
        }
    };
    row_of.into_iter().map(|r| verdicts[r].clone()).collect()
}

/// One `log_ack_multi_v1` for the folded rows (prepared once per pooled connection: a
/// flush is one round trip, not two).
async fn run_multi(db: &Db, rows: &[Row]) -> Result<Vec<Verdict>, String> {
    let conn = db.conn().await.map_err(|e| e.to_string())?;
    let args: Vec<AckRow<'_>> = rows
        .iter()
        .map(|r| AckRow {
            pid: r.pid,
            group: &r.group,
            worker: &r.worker,
            batch_end: r.end,
            count: r.count,
        })
        .collect();
    match conn.log_ack_multi(&args).await {
        Ok(v) => verdicts(v, rows.len()),
        Err(e) => {
            let msg = e.to_string();
            conn.discard_if_lost(&e);
            Err(msg)
        }
    }
}

/// The inline path of an idle shard: one `log_ack_at_v1`, exactly what fusion off runs.
/// Committed or the refusal.
async fn ack_at(db: &Conn, p: &Parked) -> Result<Verdict, DbError> {
    Ok(match db.log_ack_at(&p.row()).await? {
        Reply::Done(_) => Verdict::Committed,
        Reply::Refused(e) => Verdict::Rejected(e),
    })
}

/// The per-row verdicts of a `log_ack_multi_v1` answer, by input ordinal.
fn verdicts(v: MultiAck, n: usize) -> Result<Vec<Verdict>, String> {
    if !v.ok || v.results.len() != n {
        return Err(format!(
            "unexpected log_ack_multi_v1 result: ok={} with {} results for {n} rows",
            v.ok,
            v.results.len()
        ));
    }
    Ok(v.results
        .into_iter()
        .map(|r| match r.ok {
            true => Verdict::Committed,
            false => Verdict::Rejected(r.error.unwrap_or_else(|| "rejected".into())),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(pid: Uuid, worker: &str, end: i64) -> Parked {
        Parked {
            pid,
            group: "g".into(),
            worker: worker.into(),
            batch_end: end,
            count: 2,
        }
    }

    #[test]
    fn same_worker_folds_to_max_end_other_workers_never() {
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let parked = [
            p(a, "w", 5),
            p(b, "w", 3),
            p(a, "w", 9),
            p(a, "x", 4),
            p(a, "w", 7),
        ];
        let (rows, row_of) = fold(parked.iter());
        assert_eq!(rows.len(), 3);
        assert_eq!(row_of, vec![0, 1, 0, 2, 0]);
        assert_eq!((rows[0].end, rows[0].count), (9, 6));
        assert_eq!((rows[1].pid, rows[1].end), (b, 3));
        assert_eq!((rows[2].worker.as_str(), rows[2].end), ("x", 4));
    }

    #[test]
    fn verdicts_by_ordinal() {
        let v: MultiAck = serde_json::from_value(json!({"ok": true, "results": [
            {"ok": true, "acked": 2, "error": null},
            {"ok": false, "acked": 0, "error": "invalid or expired lease"},
        ]}))
        .unwrap();
        assert_eq!(
            verdicts(v.clone(), 2).unwrap(),
            vec![
                Verdict::Committed,
                Verdict::Rejected("invalid or expired lease".into())
            ]
        );
        assert!(verdicts(v, 3).is_err());
    }

    #[test]
    fn shards_are_stable_per_partition() {
        let pid = Uuid::now_v7();
        assert_eq!(shard_of(pid, 8), shard_of(pid, 8));
        assert!(shard_of(pid, 8) < 8);
        assert_eq!(shard_of(pid, 1), 0);
    }
}
