//! The push spool's replay (docs/availability.md): while the spool holds records and push
//! maintenance mode is off, a task reads them oldest first, `QUEEN_SPOOL_REPLAY_BATCH` at
//! a time, and pushes each batch through the push route's own path
//! (crate::engine::push::push_spooled) in one transaction that also moves the
//! spool's replay mark in the database (`queen.spool_mark_set_v1`). A replay cut off
//! anywhere (the broker killed, the database gone) therefore resumes exactly after what
//! committed: nothing is written twice, whatever the queues' dedup windows.
//!
//! A batch the database refuses for good (not a 503: a bad payload, an encrypting queue
//! and no key) is pushed again record by record; a record refused alone goes to the
//! spool's `refused.jsonl` and the mark moves past it, so it never blocks the rest.
//! Records that may have been written before they were spooled (the connection ended
//! under their push) are pushed with a dedup window that reaches back to their spooling,
//! and until the spool drains it holds the sidecar purge back to them
//! (`queen.spool_hold_v1`), so the rows that search needs are still there.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::engine::items::PushItem;
use crate::engine::push::push_spooled;
use crate::engine::spool::{Batch, Record, Spool};
use crate::error::ApiError;
use crate::ops::metrics::Metrics;
use crate::state::AppState;

/// Payload bytes per replay batch at most (with the record cap).
const BATCH_BYTES: usize = 8 * 1024 * 1024;
/// The wait between two attempts while the database cannot be reached.
const RETRY_MIN: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How often an idle replay looks again (appends wake it at once).
const IDLE: Duration = Duration::from_millis(500);
/// Margin of a widened dedup window over the age of the records it covers.
const WINDOW_MARGIN_SECS: u64 = 60;

/// Starts the replay when the broker has a spool; it ends with the server.
pub fn start(state: AppState) {
    let Some(spool) = state.spool.clone() else {
        return;
    };
    tokio::spawn(async move {
        let stop = state.clone();
        tokio::select! {
            _ = run(state, spool) => {}
            _ = stop.stopping() => {}
        }
    });
}

/// What the database holds of this spool as far as the replay knows.
#[derive(Default)]
struct Known {
    /// The mark was read since the last failure.
    mark_read: bool,
    /// The purge hold written (`Some(None)`: none), None: unknown (a hold may be left
    /// from an earlier life of this broker).
    hold: Option<Option<u64>>,
}

async fn run(state: AppState, spool: Arc<Spool>) {
    let mut known = Known::default();
    let mut wait = RETRY_MIN;
    loop {
        if !spool.has_pending() && known.hold != Some(None) {
            // Drained: release the purge hold (or one left from before a restart).
            if sync_hold(&state, &spool, &mut known).await.is_err() {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
                continue;
            }
        }
        if state.modes.push_maintenance() || !spool.has_pending() {
            if spool.db_down() && !state.modes.push_maintenance() {
                // Marked down by a push whose spooling failed, nothing to replay: a
                // probe brings pushes back to the database when it answers.
                if state.db.conn().await.is_ok() {
                    spool.mark_db_up();
                }
            }
            tokio::select! {
                _ = spool.appended.notified() => {}
                _ = tokio::time::sleep(IDLE) => {}
            }
            continue;
        }
        match step(&state, &spool, &mut known).await {
            Ok(()) => wait = RETRY_MIN,
            Err(e) => {
                tracing::warn!(
                    pending = spool.stats().pending_records,
                    "push spool replay waits: {e}"
                );
                known = Known::default();
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_MAX);
            }
        }
    }
}

/// One batch: read, push, mark, commit; or, refused, record by record.
async fn step(state: &AppState, spool: &Arc<Spool>, known: &mut Known) -> Result<(), ApiError> {
    if !known.mark_read {
        // What a replay before this one committed (another life of this broker, or a
        // batch whose commit answer was lost).
        let db = state.db.conn().await?;
        let mark = db.spool_mark(spool.id()).await?;
        let s = spool.clone();
        let left = tokio::task::spawn_blocking(move || s.adopt_mark(mark))
            .await
            .map_err(|e| ApiError::Internal(format!("spool task: {e}")))?
            .map_err(ApiError::Internal)?;
        if let Some(old) = left {
            // The spool took a new id (its directory lost its history): the old id's
            // purge hold has no records left to protect.
            if let Err(e) = db.spool_hold(old, None).await {
                tracing::warn!(spool = %old, "push spool: cannot release the old id's purge hold: {e}");
            }
            known.hold = None;
        }
        known.mark_read = true;
    }
    // Before pushing a record that may be a duplicate, the purge is held back to it.
    sync_hold(state, spool, known).await?;
    let batch = read(spool, state.config.spool_replay_batch).await?;
    if batch.records.is_empty() {
        if spool.has_pending() {
            let s = spool.stats();
            tracing::warn!(
                pending = s.pending_records,
                replayed_through = s.replayed_through,
                "push spool: records counted pending but none to read; counting again"
            );
            spool.resync().map_err(ApiError::Internal)?;
        }
        spool.mark_db_up();
        return Ok(());
    }
    match commit(state, spool, &batch).await {
        Ok(queued) => {
            done(state, spool, &batch, queued);
            Ok(())
        }
        Err(e) if is_refusal(&e) => one_by_one(state, spool, &batch).await,
        Err(e) => Err(e),
    }
}

/// Writes the purge hold the spool needs now (docs/availability.md): back to the oldest
/// pending record that may have been written before it was spooled, less the dedup
/// window's margin, or none.
async fn sync_hold(state: &AppState, spool: &Spool, known: &mut Known) -> Result<(), ApiError> {
    let want = spool
        .maybe_written_since()
        .map(|ms| ms.saturating_sub(WINDOW_MARGIN_SECS * 1000));
    if known.hold != Some(want) {
        state.db.conn().await?.spool_hold(spool.id(), want).await?;
        known.hold = Some(want);
    }
    Ok(())
}

/// The spool's next batch (file reads, off the async workers).
async fn read(spool: &Arc<Spool>, max: usize) -> Result<Batch, ApiError> {
    let spool = spool.clone();
    tokio::task::spawn_blocking(move || spool.read_batch(max, BATCH_BYTES))
        .await
        .map_err(|e| ApiError::Internal(format!("spool read task: {e}")))?
        .map_err(ApiError::Internal)
}

/// Whether a failed replay is the database refusing the records (not its state).
fn is_refusal(e: &ApiError) -> bool {
    !matches!(e, ApiError::Unavailable(_) | ApiError::Unreachable { .. })
}

/// Pushes `batch` and moves the mark to its last record, in one transaction. Returns the
/// messages queued (the rest were duplicates).
async fn commit(state: &AppState, spool: &Spool, batch: &Batch) -> Result<usize, ApiError> {
    let Some(last) = batch.records.last() else {
        return Ok(0);
    };
    let db = state.db.conn().await?;
    db.begin().await?;
    let window = widened_window(&batch.records);
    let mut queued = 0;
    for (tenant, items) in by_tenant(&batch.records) {
        queued += push_spooled(&state.engine(), &db, tenant, items, window).await?;
    }
    db.spool_mark_set(spool.id(), last.seq).await?;
    db.commit().await?;
    Ok(queued)
}

/// After a commit: the spool forgets the batch, the partitions' long-polls wake, the
/// counters move.
fn done(state: &AppState, spool: &Spool, batch: &Batch, queued: usize) {
    spool.advance(batch);
    spool.mark_db_up();
    if let Some(last) = batch.records.last() {
        tracing::debug!(
            through = last.seq,
            records = batch.records.len(),
            "spool replayed"
        );
        if !spool.has_pending() {
            tracing::info!(through = last.seq, "push spool drained");
        }
    }
    let c = &spool.counters;
    let n = batch.records.len() as u64;
    c.replayed_records.fetch_add(n, Ordering::Relaxed);
    c.replayed_bytes.fetch_add(
        batch.records.iter().map(|r| r.payload.len() as u64).sum(),
        Ordering::Relaxed,
    );
    c.deduplicated_records
        .fetch_add(n.saturating_sub(queued as u64), Ordering::Relaxed);
    Metrics::add(&state.metrics.messages_pushed, queued as u64);
    let woken: HashSet<(Uuid, &str, &str)> = batch
        .records
        .iter()
        .map(|r| (r.tenant, r.queue.as_str(), r.partition.as_str()))
        .collect();
    for (t, q, p) in woken {
        state.wake(t, q, p);
    }
}

/// A refused batch, record by record: each commits alone, or is refused alone.
async fn one_by_one(state: &AppState, spool: &Spool, batch: &Batch) -> Result<(), ApiError> {
    for rec in &batch.records {
        let single = batch.only(|r| r.seq == rec.seq);
        match commit(state, spool, &single).await {
            Ok(queued) => done(state, spool, &single, queued),
            Err(e) if is_refusal(&e) => {
                spool.refuse(rec, e.message());
                let db = state.db.conn().await?;
                db.spool_mark_set(spool.id(), rec.seq).await?;
                spool.advance(&single);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The records of each tenant as push items, in spool order.
fn by_tenant(records: &[Record]) -> Vec<(Uuid, Vec<PushItem>)> {
    let mut out: Vec<(Uuid, Vec<PushItem>)> = Vec::new();
    for r in records {
        let item = PushItem {
            queue: r.queue.clone(),
            partition: r.partition.clone(),
            txn: r.txn.clone(),
            trace: r.trace,
            payload: r.payload.clone(),
            message_id: r.message_id,
            dup_of: None,
            encrypted: r.encrypted,
            producer_sub: r.producer_sub.as_deref().map(Arc::from),
        };
        match out.iter_mut().find(|(t, _)| *t == r.tenant) {
            Some((_, items)) => items.push(item),
            None => out.push((r.tenant, vec![item])),
        }
    }
    out
}

/// For a batch holding records that may have been written before they were spooled: a
/// dedup window back to the oldest of them, and a margin.
fn widened_window(records: &[Record]) -> Option<i32> {
    let oldest = records
        .iter()
        .filter(|r| r.maybe_written)
        .map(|r| r.spooled_at_ms)
        .min()?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let secs = now.saturating_sub(oldest) / 1000 + WINDOW_MARGIN_SECS;
    Some(i32::try_from(secs).unwrap_or(i32::MAX))
}
