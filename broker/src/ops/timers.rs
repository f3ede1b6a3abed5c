//! The timer sweeper (docs/decisions.md, "Timers"): a loop on a connection of its own
//! that calls `queen.timers_fire_v1`, which delivers the due timers in one transaction.
//! Every broker runs one; two sweepers never deliver the same timer (its row is locked
//! SKIP LOCKED), so more brokers only mean more sweeps.
//!
//! The loop sleeps until the earliest pending timer falls due, at most
//! `QUEEN_TIMER_SWEEP_MS`; a schedule through this broker that falls due earlier than
//! the planned wake-up wakes it at once ([`TimerSweeper::scheduled`]), so the lateness a
//! timer sees is one sweep, not one sleep. A timer scheduled through another broker (or
//! from SQL) is picked up within `QUEEN_TIMER_SWEEP_MS`.
//!
//! A delivery appends messages, so it asks the write gate first
//! (crate::engine::write_gate): while push maintenance is on or this broker's spool holds
//! records not yet replayed, the loop does not sweep; the due timers stay due (not lost)
//! and are delivered in due order once the gate opens (after the spooled records).

use std::future::Future;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use queen_log::timers::{DeliveredTo, SweepReport, SWEEP_MAX};
use tokio::sync::Notify;

use crate::db::timers::SweepConn;
use crate::engine::write_gate::{Targets, WriteGate};

/// How often a sweep held back by the write gate looks again.
const GATE_RETRY: Duration = Duration::from_millis(100);

/// What the sweeper has done (for `/metrics`), and its wake-up.
#[derive(Default)]
pub struct TimerSweeper {
    pub sweeps: AtomicU64,
    pub failed: AtomicU64,
    pub fired: AtomicU64,
    pub duplicates: AtomicU64,
    wake: Notify,
    /// When the loop means to sweep next (unix milliseconds).
    next_sweep_ms: AtomicI64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl TimerSweeper {
    /// A timer was scheduled through this broker, due in `delay_ms`: wake the loop when
    /// it would otherwise sleep past that instant.
    pub fn scheduled(&self, delay_ms: i64) {
        if now_ms().saturating_add(delay_ms) < self.next_sweep_ms.load(Ordering::Relaxed) {
            self.wake.notify_one();
        }
    }

    fn record(&self, r: &SweepReport) {
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        self.fired
            .fetch_add(r.fired.max(0) as u64, Ordering::Relaxed);
        self.duplicates
            .fetch_add(r.duplicates.max(0) as u64, Ordering::Relaxed);
    }
}

/// The pause after a sweep: none when it found a full batch, else until the next due
/// timer, at most `longest`.
fn pause(r: &SweepReport, longest: Duration) -> Duration {
    match r.next_due_ms {
        Some(ms) => Duration::from_millis(ms.max(0) as u64).min(longest),
        None => longest,
    }
}

/// Starts the loop unless `QUEEN_TIMER_SWEEP_MS` is 0. `delivered` is told each queue a
/// sweep delivered into (the server wakes the long-polls parked on it); the loop ends
/// when `stop` resolves.
pub fn start(
    url: &str,
    sweep_ms: u64,
    sweeper: Arc<TimerSweeper>,
    gate: Arc<WriteGate>,
    delivered: impl Fn(&DeliveredTo) + Send + Sync + 'static,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    if sweep_ms == 0 {
        return;
    }
    let conn = SweepConn::new(url);
    let longest = Duration::from_millis(sweep_ms);
    tokio::spawn(async move {
        tokio::select! {
            _ = run_forever(conn, &sweeper, &gate, &delivered, longest) => {}
            _ = stop => {}
        }
    });
}

async fn run_forever(
    mut conn: SweepConn,
    sweeper: &TimerSweeper,
    gate: &WriteGate,
    delivered: &(impl Fn(&DeliveredTo) + Sync),
    longest: Duration,
) {
    loop {
        // A delivery may go to any partition of any tenant.
        if !gate.open_for(Targets::Any) {
            tokio::time::sleep(GATE_RETRY).await;
            continue;
        }
        // Set before the sweep: a schedule committed during it must still wake the loop.
        sweeper
            .next_sweep_ms
            .store(now_ms() + longest.as_millis() as i64, Ordering::Relaxed);
        let wait = match conn.fire(SWEEP_MAX).await {
            Ok(r) => {
                sweeper.record(&r);
                r.queues.iter().for_each(delivered);
                pause(&r, longest)
            }
            Err(e) => {
                sweeper.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("timer sweep failed: {e}");
                longest
            }
        };
        if wait.is_zero() {
            tokio::task::yield_now().await;
            continue;
        }
        sweeper
            .next_sweep_ms
            .store(now_ms() + wait.as_millis() as i64, Ordering::Relaxed);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = sweeper.wake.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(next_due_ms: Option<i64>) -> SweepReport {
        SweepReport {
            next_due_ms,
            ..Default::default()
        }
    }

    #[test]
    fn the_pause_is_until_the_next_due_timer_at_most_the_longest() {
        let longest = Duration::from_millis(1000);
        assert_eq!(pause(&report(Some(0)), longest), Duration::ZERO);
        assert_eq!(
            pause(&report(Some(250)), longest),
            Duration::from_millis(250)
        );
        assert_eq!(pause(&report(Some(60_000)), longest), longest);
        assert_eq!(pause(&report(None), longest), longest);
    }

    #[test]
    fn a_schedule_due_before_the_planned_sweep_wakes_the_loop() {
        let s = TimerSweeper::default();
        s.next_sweep_ms.store(now_ms() + 1000, Ordering::Relaxed);
        s.scheduled(5_000);
        // No permit stored: a later notified() would wait.
        let woke = futures_util::FutureExt::now_or_never(s.wake.notified());
        assert!(woke.is_none());
        s.scheduled(10);
        assert!(futures_util::FutureExt::now_or_never(s.wake.notified()).is_some());
    }
}
