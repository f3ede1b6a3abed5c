//! Ack fusion (broker.md §4): fast-path acks are parked on a shard (chosen by a hash of
//! the partition id, so one partition's acks share a shard) and flushed together as one
//! `log_ack_multi_v1` call.
//!
//! Each shard is one task with at most one flush in flight: an arrival at an idle shard
//! flushes at once (a lone ack costs one round trip), arrivals during a flush ride the
//! next one, so the batch size emerges from load. Entries with the same (partition,
//! group, worker) fold to max(batch_end) and share that row's verdict; different workers
//! never fold. A reply is sent only after the flush committed, so a 200 means durable.
//! The flush task, not the waiting handler, holds the pooled connection.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

/// Period of the coalesce summary log line.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// One parked fast-path ack: a whole delivered batch, acked positionally.
pub struct Parked {
    pub pid: Uuid,
    pub group: String,
    pub worker: String,
    pub batch_end: i64,
    pub count: i32,
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

struct Job {
    parked: Parked,
    reply: oneshot::Sender<Verdict>,
}

/// The shards; see the module docs.
pub struct Fusion {
    shards: Vec<mpsc::UnboundedSender<Job>>,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    rows: AtomicU64,
    acks: AtomicU64,
    last_log: Mutex<Option<Instant>>,
}

impl Fusion {
    /// Starts `shards` flush tasks on the current tokio runtime (so this must be called
    /// from inside one).
    pub fn start(pool: Pool, shards: usize) -> Self {
        let stats = Arc::new(Stats::default());
        let shards = (0..shards.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(shard_loop(rx, pool.clone(), stats.clone()));
                tx
            })
            .collect();
        Fusion { shards }
    }

    /// Parks one ack and waits for its flush. Never holds a connection while waiting.
    pub async fn ack(&self, parked: Parked) -> Verdict {
        let shard = shard_of(parked.pid, self.shards.len());
        let (reply, rx) = oneshot::channel();
        if self.shards[shard].send(Job { parked, reply }).is_err() {
            return Verdict::FlushFailed("ack fusion shard stopped".into());
        }
        rx.await
            .unwrap_or_else(|_| Verdict::FlushFailed("ack fusion shard dropped the ack".into()))
    }
}

fn shard_of(pid: Uuid, n: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    pid.hash(&mut h);
    (h.finish() % n as u64) as usize
}

/// One shard: wait for an arrival, take everything queued behind it, flush, repeat.
/// Every arrival wakes the task through the channel, so no wake-up can be lost and the
/// reference design's backstop tick (`QUEEN_ACK_FUSION_HOLD_MS`) is not needed here.
async fn shard_loop(mut rx: mpsc::UnboundedReceiver<Job>, pool: Pool, stats: Arc<Stats>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(j) = rx.try_recv() {
            batch.push(j);
        }
        flush(&pool, batch, &stats).await;
    }
}

/// Folds the batch into rows, runs one multi call, answers every parked ack.
async fn flush(pool: &Pool, batch: Vec<Job>, stats: &Stats) {
    let mut rows: Vec<(Uuid, String, String, i64, i32)> = Vec::new();
    let mut index: HashMap<(Uuid, String, String), usize> = HashMap::new();
    let mut row_of: Vec<usize> = Vec::with_capacity(batch.len());
    for j in &batch {
        let p = &j.parked;
        let key = (p.pid, p.group.clone(), p.worker.clone());
        let r = *index.entry(key).or_insert_with(|| {
            rows.push((p.pid, p.group.clone(), p.worker.clone(), p.batch_end, 0));
            rows.len() - 1
        });
        rows[r].3 = rows[r].3.max(p.batch_end);
        rows[r].4 = rows[r].4.saturating_add(p.count);
        row_of.push(r);
    }
    let verdicts = match run_multi(pool, &rows).await {
        Ok(v) => v,
        Err(e) => vec![Verdict::FlushFailed(e); rows.len()],
    };
    stats.commits.fetch_add(1, Ordering::Relaxed);
    stats.rows.fetch_add(rows.len() as u64, Ordering::Relaxed);
    stats.acks.fetch_add(batch.len() as u64, Ordering::Relaxed);
    maybe_log(stats);
    for (j, r) in batch.into_iter().zip(row_of) {
        let _ = j.reply.send(verdicts[r].clone());
    }
}

async fn run_multi(
    pool: &Pool,
    rows: &[(Uuid, String, String, i64, i32)],
) -> Result<Vec<Verdict>, String> {
    let db = pool.get().await.map_err(|e| e.to_string())?;
    let pids: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
    let groups: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    let workers: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    let ends: Vec<i64> = rows.iter().map(|r| r.3).collect();
    let counts: Vec<i32> = rows.iter().map(|r| r.4).collect();
    let row = db
        .query_one(
            "SELECT queen.log_ack_multi_v1($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[])",
            &[&pids, &groups, &ends, &workers, &counts],
        )
        .await
        .map_err(|e| e.to_string())?;
    let v: Value = row.get(0);
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .filter(|a| a.len() == rows.len())
        .ok_or_else(|| format!("unexpected log_ack_multi_v1 result: {v}"))?;
    Ok(results
        .iter()
        .map(|r| match r.get("ok").and_then(Value::as_bool) {
            Some(true) => Verdict::Committed,
            _ => Verdict::Rejected(
                r.get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("rejected")
                    .to_string(),
            ),
        })
        .collect())
}

/// The coalesce summary, about every 10 s: cross-check log_ack_multi_v1 calls in
/// pg_stat_statements against the number of acks.
fn maybe_log(stats: &Stats) {
    let now = Instant::now();
    let mut last = stats.last_log.lock().expect("fusion stats poisoned");
    if last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
        return;
    }
    *last = Some(now);
    let commits = stats.commits.load(Ordering::Relaxed);
    let rows = stats.rows.load(Ordering::Relaxed);
    tracing::info!(
        commits,
        rows,
        acks = stats.acks.load(Ordering::Relaxed),
        rows_per_commit = format!("{:.2}", rows as f64 / commits.max(1) as f64),
        "ack fusion coalesce summary"
    );
}
