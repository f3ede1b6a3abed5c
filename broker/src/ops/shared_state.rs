//! The maintenance modes every broker of a database shares (docs/availability.md): held
//! here as two flags the push and pop routes read for free, refreshed from
//! `queen.system_state_v1` every `QUEEN_SHARED_STATE_MS`, so a mode switched through one
//! broker reaches the others within that interval (Queen's server polls its
//! `system_state` table the same way, and broadcasts besides). While the database cannot
//! be read, the last modes read stay in force.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::db::system::Modes;
use crate::db::Db;

/// The modes in force in this broker.
#[derive(Default)]
pub struct SharedModes {
    push: AtomicBool,
    pop: AtomicBool,
    /// Reads of the modes that failed (the database unreachable).
    pub failed_reads: AtomicU64,
}

impl SharedModes {
    /// Push maintenance: pushes go to the spool, the database is left alone.
    pub fn push_maintenance(&self) -> bool {
        self.push.load(Ordering::Relaxed)
    }

    /// Pop maintenance: pops answer empty.
    pub fn pop_maintenance(&self) -> bool {
        self.pop.load(Ordering::Relaxed)
    }

    /// Takes the modes read from the database (or just written through it), logging a
    /// change.
    pub fn set(&self, m: Modes) {
        let was_push = self.push.swap(m.maintenance_mode, Ordering::Relaxed);
        let was_pop = self.pop.swap(m.pop_maintenance_mode, Ordering::Relaxed);
        if was_push != m.maintenance_mode {
            tracing::warn!(
                enabled = m.maintenance_mode,
                "push maintenance mode {}",
                if m.maintenance_mode {
                    "on: pushes go to the push spool, the database is left alone"
                } else {
                    "off: the push spool replays into the database"
                }
            );
        }
        if was_pop != m.pop_maintenance_mode {
            tracing::warn!(
                enabled = m.pop_maintenance_mode,
                "pop maintenance mode {}",
                if m.pop_maintenance_mode {
                    "on: pops answer empty"
                } else {
                    "off"
                }
            );
        }
    }

    pub fn get(&self) -> Modes {
        Modes {
            maintenance_mode: self.push_maintenance(),
            pop_maintenance_mode: self.pop_maintenance(),
        }
    }
}

/// Reads the modes once now (so a broker starts in the mode its peers are in), then
/// every `every`, until `stop` resolves.
pub fn start(
    db: Db,
    modes: std::sync::Arc<SharedModes>,
    every: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    tokio::spawn(async move {
        let run = async {
            loop {
                match read(&db).await {
                    Ok(m) => modes.set(m),
                    Err(e) => {
                        modes.failed_reads.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!("maintenance modes not read: {e}");
                    }
                }
                tokio::time::sleep(every).await;
            }
        };
        tokio::select! {
            _ = run => {}
            _ = stop => {}
        }
    });
}

async fn read(db: &Db) -> Result<Modes, crate::db::DbError> {
    db.conn().await?.system_state().await
}
