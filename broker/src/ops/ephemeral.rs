//! Running the ephemeral rings (docs/decisions.md, "Ephemeral queues"): at start the
//! declarations are read from the database (`queen.ephemeral_declared_v1`, retried every
//! second until the database answers, so a broker started before its database still
//! comes up with its queues' bounds), then a sweep every second ages out messages past
//! their ttl, expires leases (a pop or an ack expires them on its own ring too) and
//! forgets idle groups and idle empty rings.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use queen_log::ephemeral::Options;

use crate::db::Db;
use crate::engine::ephemeral::Store;

/// The sweep's period.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Starts the loader and the sweeper; both end when `stopping` resolves.
pub fn start(db: Db, store: Arc<Store>, stopping: impl Future<Output = ()> + Send + 'static) {
    tokio::spawn(async move {
        tokio::select! {
            _ = run(db, store) => {}
            _ = stopping => {}
        }
    });
}

async fn run(db: Db, store: Arc<Store>) {
    load(&db, &store).await;
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    loop {
        tick.tick().await;
        store.sweep();
    }
}

async fn load(db: &Db, store: &Store) {
    loop {
        let declared = match db.conn().await {
            Ok(c) => c.ephemeral_declared().await,
            Err(e) => Err(e),
        };
        match declared {
            Ok(rows) => {
                for d in rows {
                    match Options::from_wire(&d.options) {
                        Ok(o) => store.declare(d.tenant, &d.queue, o),
                        Err(e) => tracing::warn!(queue = d.queue, error = %e,
                            "stored ephemeral options unreadable; the queue keeps the defaults"),
                    }
                }
                return;
            }
            Err(e) => {
                tracing::info!(error = %e, "ephemeral declarations not loaded yet; retrying");
                tokio::time::sleep(SWEEP_EVERY).await;
            }
        }
    }
}
