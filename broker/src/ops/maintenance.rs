//! The maintenance loop: every `QUEEN_MAINTENANCE_INTERVAL_MS` the broker runs
//! `CALL queen.run_maintenance(budget, max_rows)` on a connection of its own, so a run
//! never takes a slot of the request pool and a saturated pool never starves retention.
//!
//! The procedure serializes runners with an advisory lock: with N brokers on one
//! database, a broker whose call finds the lock taken counts a skipped run and tries again
//! next interval. A run that reports `more` (its time budget ran out with work left) is
//! followed by the next one at once instead of after a full interval, so a backlog drains
//! at the budget's pace. Failures (database down, a step refused) are logged and counted;
//! the connection is opened again on the next run.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use queen_log::wire::MaintenanceReport;

use crate::config::Config;
use crate::db::maintenance::MaintenanceConn;

/// Pause between two runs while a backlog drains (`more`): the loop yields the database
/// for a moment between budgets instead of running back to back.
const BACKLOG_PAUSE: Duration = Duration::from_millis(100);

/// What the loop has done, for `/metrics` (crate::ops::exposition).
#[derive(Default)]
pub struct MaintenanceStats {
    pub runs: AtomicU64,
    pub skipped: AtomicU64,
    pub failed: AtomicU64,
    /// Segments and messages deleted by rule 1 (`retentionSeconds`: expired, consumed
    /// or not) and by rule 2 (`completedRetentionSeconds`: consumed by every group).
    pub segments_expired: AtomicU64,
    pub segments_completed: AtomicU64,
    pub messages_expired: AtomicU64,
    pub messages_completed: AtomicU64,
    pub evicted: AtomicU64,
    pub traces: AtomicU64,
    pub sidecar_rows: AtomicU64,
    pub orphan_rows: AtomicU64,
    pub kv_expired: AtomicU64,
    /// The last run that did its work (not skipped, not failed).
    pub last: Mutex<Option<LastRun>>,
}

/// When the last completed run ended and what it reported.
#[derive(Clone, Copy, Debug)]
pub struct LastRun {
    pub unix_seconds: f64,
    pub duration_seconds: f64,
    pub more: bool,
}

impl MaintenanceStats {
    /// Adds one report to the counters.
    pub fn record(&self, r: &MaintenanceReport) {
        if !r.ran {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let add = |c: &AtomicU64, n: i64| c.fetch_add(n.max(0) as u64, Ordering::Relaxed);
        add(&self.runs, 1);
        add(&self.segments_expired, r.expired_segments);
        add(&self.segments_completed, r.segments - r.expired_segments);
        add(&self.messages_expired, r.expired_messages);
        add(&self.messages_completed, r.messages - r.expired_messages);
        add(&self.evicted, r.evicted);
        add(&self.traces, r.traces);
        add(&self.sidecar_rows, r.sidecar_rows);
        add(&self.orphan_rows, r.orphan_rows);
        add(&self.kv_expired, r.kv_expired);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        *self.last.lock().expect("maintenance stats poisoned") = Some(LastRun {
            unix_seconds: now,
            duration_seconds: r.duration_ms / 1000.0,
            more: r.more,
        });
    }
}

/// Starts the loop when `QUEEN_MAINTENANCE_INTERVAL_MS` is not 0 (the server does, at
/// its start: building an `AppState` starts nothing). It ends when `stop` resolves; a
/// run in flight is abandoned (its finished steps are committed).
pub fn start(
    cfg: &Config,
    stats: Arc<MaintenanceStats>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let every = Duration::from_millis(cfg.maintenance_interval_ms);
    if every.is_zero() {
        return;
    }
    let db = MaintenanceConn::new(&cfg.database_url, cfg.maintenance_budget_ms);
    let max_rows = cfg.maintenance_max_rows;
    tokio::spawn(async move {
        tokio::select! {
            _ = run_forever(db, max_rows, &stats, every) => {}
            _ = stop => {}
        }
    });
}

async fn run_forever(
    mut db: MaintenanceConn,
    max_rows: u32,
    stats: &MaintenanceStats,
    every: Duration,
) {
    loop {
        let wait = match db.run(max_rows).await {
            Ok(report) => {
                stats.record(&report);
                if report.ran && report.more {
                    BACKLOG_PAUSE
                } else {
                    every
                }
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("maintenance run failed: {e}");
                every
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_splits_by_rule_and_a_skip_counts_nothing_else() {
        let s = MaintenanceStats::default();
        s.record(&MaintenanceReport {
            ran: true,
            segments: 5,
            messages: 500,
            expired_segments: 2,
            expired_messages: 150,
            evicted: 40,
            traces: 0,
            sidecar_rows: 7,
            orphan_rows: 3,
            duration_ms: 12.5,
            ..Default::default()
        });
        s.record(&MaintenanceReport::default());
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!((get(&s.runs), get(&s.skipped)), (1, 1));
        assert_eq!(
            (get(&s.segments_expired), get(&s.segments_completed)),
            (2, 3)
        );
        assert_eq!(
            (get(&s.messages_expired), get(&s.messages_completed)),
            (150, 350)
        );
        assert_eq!(
            (get(&s.evicted), get(&s.sidecar_rows), get(&s.orphan_rows)),
            (40, 7, 3)
        );
        let last = s.last.lock().unwrap().expect("a completed run");
        assert_eq!(last.duration_seconds, 0.0125);
    }

    #[test]
    fn the_report_reads_what_run_maintenance_writes() {
        let r: MaintenanceReport = serde_json::from_str(
            r#"{"ran": true, "partitions": 3, "segments": 12, "messages": 1200,
                "expiredSegments": 2, "expiredMessages": 200, "evicted": 150,
                "sidecarRows": 40, "orphanRows": 7, "more": false, "interrupted": false,
                "durationMs": 18.4}"#,
        )
        .unwrap();
        assert_eq!(
            (r.segments, r.expired_messages, r.duration_ms),
            (12, 200, 18.4)
        );
        let skipped: MaintenanceReport = serde_json::from_str(
            r#"{"ran": false, "reason": "another run_maintenance holds the lock"}"#,
        )
        .unwrap();
        assert!(!skipped.ran && skipped.reason.is_some());
    }
}
