//! Push fusion: the push rounds of concurrent requests (crate::engine::push) committed
//! together as one `log_push_multi_v1` transaction, on one crate::engine::lanes lane.
//!
//! Fire-on-idle, the rule ack fusion uses: a round that finds the lane idle runs its own
//! `log_push_multi_v1` at once, in its handler, exactly what `QUEEN_PUSH_FUSION=0` runs
//! (at low load a push commits in one round trip, no added wait); rounds arriving while
//! one is in flight park, and the next flush takes everything that arrived, in arrival
//! order. What stays true, and why:
//! - A 201 means committed: a round is answered after its statement returned.
//! - A request's per-partition order: its segments stay in its order inside the fused
//!   arrays, and the extension pushes in input order (docs/contract.md §4).
//! - Duplicate verdicts per item: the extension pushes each element as log_push_one_v1
//!   does, and a later element sees what an earlier one of the same transaction wrote, so
//!   a transactionId pushed by two fused requests is queued for the first and a duplicate
//!   (of the first's offset and id) for the second, as if they ran one after the other.
//!   The dedup watermarks stay valid: the extension probes above a watermark, which
//!   covers whatever an earlier element of the same flush wrote.
//! - No deadlock between fused flushes and other writers: the extension creates missing
//!   partitions sorted and locks partitions in ascending id, whatever the input order.
//! - One failing request does not fail the others: when a fused flush fails (it rolled
//!   back, nothing was written), every round in it runs again alone, so only the bad one
//!   answers its error.
//!
//! One lane and one flush in flight: a push's cost is its transaction, not CPU per row,
//! so the fewest, largest transactions win; a round runs alone only when the lane is idle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use queen_log::wire::PushVerdict;

use crate::db::{Db, PushSegment as Segment};
use crate::engine::fusion::DEFAULT_HOLD;
use crate::engine::lanes::{Lanes, Refused};
use crate::error::{ApiError, ApiResult};

/// What the lane says about one round.
enum Pushed {
    /// Its verdicts, one per segment, in order: committed.
    Done(Vec<PushVerdict>),
    /// Its own statement failed.
    Failed(ApiError),
    /// The fused flush it rode failed as a whole (nothing written): run it alone.
    Retry(Vec<Segment>),
}

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushFusionStats {
    /// Fused flushes (one `log_push_multi_v1` for parked rounds) that committed, and
    /// the rounds they carried.
    pub commits: u64,
    pub rounds: u64,
    /// Rounds that found the lane idle and ran alone.
    pub inline: u64,
    /// Fused flushes that failed as a whole (their rounds ran again alone).
    pub failed_flushes: u64,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    rounds: AtomicU64,
    inline: AtomicU64,
    failed_flushes: AtomicU64,
}

/// The lane; see the module docs.
pub struct PushFusion {
    db: Db,
    lane: Lanes<Vec<Segment>, Pushed>,
    stats: Arc<Stats>,
}

impl PushFusion {
    /// Starts the lane task on the current tokio runtime.
    pub fn start(db: Db) -> Self {
        let stats = Arc::new(Stats::default());
        let (p, st) = (db.clone(), stats.clone());
        let lane = Lanes::start(1, 1, DEFAULT_HOLD, move |rounds| {
            flush(p.clone(), rounds, st.clone())
        });
        PushFusion { db, lane, stats }
    }

    /// Pushes one round's segments: alone when the lane is idle, else in the next fused
    /// flush. One verdict per segment, in order; returns only after the commit.
    pub async fn push(&self, segs: Vec<Segment>) -> ApiResult<Vec<PushVerdict>> {
        let inline = |segs: Vec<Segment>| async move {
            self.stats.inline.fetch_add(1, Ordering::Relaxed);
            match self.alone(&segs).await {
                Ok(v) => Pushed::Done(v),
                Err(e) => Pushed::Failed(e),
            }
        };
        match self.lane.run(0, segs, inline).await {
            Ok(Pushed::Done(v)) => Ok(v),
            Ok(Pushed::Failed(e)) => Err(e),
            Ok(Pushed::Retry(segs)) | Err(Refused::Closed(segs)) => self.alone(&segs).await,
            Err(Refused::Dropped) => Err(ApiError::Internal(
                "push fusion dropped the push unanswered".into(),
            )),
        }
    }

    async fn alone(&self, segs: &[Segment]) -> ApiResult<Vec<PushVerdict>> {
        let db = self.db.conn().await?;
        Ok(db.log_push_multi(&segs.iter().collect::<Vec<_>>()).await?)
    }

    /// Rounds parked or in flight now (tests wait on it).
    pub fn load(&self) -> usize {
        self.lane.load(0)
    }

    pub fn stats(&self) -> PushFusionStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let s = &self.stats;
        PushFusionStats {
            commits: l(&s.commits),
            rounds: l(&s.rounds),
            inline: l(&s.inline),
            failed_flushes: l(&s.failed_flushes),
        }
    }

    /// Graceful shutdown: later rounds run alone, parked ones are flushed and answered.
    pub async fn shutdown(&self) {
        self.lane.shutdown().await;
    }
}

/// One `log_push_multi_v1` for every parked round, in arrival order; each round gets its
/// slice of the verdicts. A failed flush sends every round back to run alone (a single
/// round just gets its error: running it again would repeat the same statement).
async fn flush(db: Db, rounds: Vec<Vec<Segment>>, stats: Arc<Stats>) -> Vec<Pushed> {
    let all: Vec<&Segment> = rounds.iter().flatten().collect();
    let result: ApiResult<Vec<PushVerdict>> = match db.conn().await {
        Ok(conn) => conn.log_push_multi(&all).await.map_err(ApiError::from),
        Err(e) => Err(e.into()),
    };
    drop(all);
    match result {
        Ok(verdicts) => {
            stats.commits.fetch_add(1, Ordering::Relaxed);
            stats
                .rounds
                .fetch_add(rounds.len() as u64, Ordering::Relaxed);
            let mut verdicts = verdicts.into_iter();
            rounds
                .iter()
                .map(|r| Pushed::Done(verdicts.by_ref().take(r.len()).collect()))
                .collect()
        }
        Err(e) if rounds.len() == 1 => vec![Pushed::Failed(e)],
        Err(e) => {
            stats.failed_flushes.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                rounds = rounds.len(),
                "fused push flush failed, pushing its rounds one by one: {e}"
            );
            rounds.into_iter().map(Pushed::Retry).collect()
        }
    }
}
