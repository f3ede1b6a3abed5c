//! The maintenance modes every broker of a database shares (docs/availability.md): held
//! here as two flags the push and pop routes read for free, refreshed from
//! `queen.system_state_v1` every `QUEEN_SHARED_STATE_MS`, so a mode switched through one
//! broker reaches the others within that interval (Queen's server polls its
//! `system_state` table the same way, and broadcasts besides). While the database cannot
//! be read, the last modes read stay in force.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
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
    /// Switches written through this broker so far. A read of the database that began
    /// before one of them saw the modes before it: taken, it would undo the switch here
    /// until the next read (found by the spool suite: a push answered `queued` right
    /// after push maintenance was switched on). Held while a mode is taken, so the check
    /// and the change are one step.
    writes: Mutex<u64>,
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

    /// What a read of the database starts after: give it back to [`SharedModes::set_read`].
    pub fn generation(&self) -> u64 {
        *self.writes.lock().expect("modes poisoned")
    }

    /// Takes the modes just written through this broker.
    pub fn set_written(&self, m: Modes) {
        let mut w = self.writes.lock().expect("modes poisoned");
        *w += 1;
        self.set(m);
    }

    /// Takes the modes a read that began at `generation` found, unless this broker
    /// switched a mode since (its switch is newer than what the read saw). Whether they
    /// were taken.
    pub fn set_read(&self, m: Modes, generation: u64) -> bool {
        let w = self.writes.lock().expect("modes poisoned");
        if *w != generation {
            return false;
        }
        self.set(m);
        true
    }

    /// Takes `m`, logging a change.
    fn set(&self, m: Modes) {
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
                let generation = modes.generation();
                match read(&db).await {
                    Ok(m) => {
                        modes.set_read(m, generation);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn modes(push: bool) -> Modes {
        Modes {
            maintenance_mode: push,
            pop_maintenance_mode: false,
        }
    }

    #[test]
    fn a_read_that_began_before_a_switch_does_not_undo_it() {
        let s = SharedModes::default();
        let before = s.generation();
        // The switch lands while the read is in flight; the read saw the old modes.
        s.set_written(modes(true));
        assert!(!s.set_read(modes(false), before));
        assert!(s.push_maintenance(), "the switch stands");
        // The next read, begun after the switch, is taken.
        let after = s.generation();
        assert!(s.set_read(modes(false), after));
        assert!(!s.push_maintenance());
    }
}
