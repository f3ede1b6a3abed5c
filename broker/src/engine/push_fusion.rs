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
//!
//! The lookup every push request makes first (`partitions_lookup_v1`: its partitions'
//! ids, dedup windows and encryption switches) rides a second lane by the same rule: the
//! lookups parked meanwhile are one call per tenant, their arrays end to end, each
//! request getting back its own rows. A read, so fusing it changes no answer; at one
//! message per request it was two fifths of PostgreSQL's time for a push
//! (docs/benchmarks.md, "Versus Queen's server"). A failed fused lookup sends each
//! request back to look up alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use queen_log::wire::PushVerdict;

use uuid::Uuid;

use crate::db::{Db, PartitionFound, PushSegment as Segment};
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

/// One request's lookup: its (queue, partition) pairs, of one tenant.
pub struct Lookup {
    tenant: Uuid,
    queues: Vec<String>,
    partitions: Vec<String>,
}

/// What the lookup lane says about one request.
enum Looked {
    /// Its rows, indexed into its own arrays.
    Done(Vec<PartitionFound>),
    Failed(ApiError),
    /// The fused lookup failed as a whole: look up alone.
    Retry(Lookup),
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
    /// Fused lookups (parked requests' lookups, one call per tenant) and the requests
    /// they carried.
    pub lookup_flushes: u64,
    pub lookup_requests: u64,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    rounds: AtomicU64,
    inline: AtomicU64,
    failed_flushes: AtomicU64,
    lookup_flushes: AtomicU64,
    lookup_requests: AtomicU64,
}

/// The lanes; see the module docs.
pub struct PushFusion {
    db: Db,
    lane: Lanes<Vec<Segment>, Pushed>,
    lookups: Lanes<Lookup, Looked>,
    stats: Arc<Stats>,
}

impl PushFusion {
    /// Starts the lane tasks on the current tokio runtime.
    pub fn start(db: Db) -> Self {
        let stats = Arc::new(Stats::default());
        let (p, st) = (db.clone(), stats.clone());
        let lane = Lanes::start(1, 1, DEFAULT_HOLD, move |rounds| {
            flush(p.clone(), rounds, st.clone())
        });
        let (p, st) = (db.clone(), stats.clone());
        let lookups = Lanes::start(1, 1, DEFAULT_HOLD, move |requests| {
            flush_lookups(p.clone(), requests, st.clone())
        });
        PushFusion {
            db,
            lane,
            lookups,
            stats,
        }
    }

    /// `partitions_lookup_v1` of one request: alone when the lookup lane is idle, else
    /// fused with the lookups parked meanwhile. Rows as the request's own call returns.
    pub async fn lookup(
        &self,
        tenant: Uuid,
        queues: &[&str],
        partitions: &[&str],
    ) -> ApiResult<Vec<PartitionFound>> {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        let item = Lookup {
            tenant,
            queues: own(queues),
            partitions: own(partitions),
        };
        let inline = |l: Lookup| async move {
            match self.lookup_alone(&l).await {
                Ok(v) => Looked::Done(v),
                Err(e) => Looked::Failed(e),
            }
        };
        match self.lookups.run(0, item, inline).await {
            Ok(Looked::Done(v)) => Ok(v),
            Ok(Looked::Failed(e)) => Err(e),
            Ok(Looked::Retry(l)) | Err(Refused::Closed(l)) => self.lookup_alone(&l).await,
            Err(Refused::Dropped) => Err(ApiError::Internal(
                "push fusion dropped a lookup unanswered".into(),
            )),
        }
    }

    async fn lookup_alone(&self, l: &Lookup) -> ApiResult<Vec<PartitionFound>> {
        let db = self.db.conn().await?;
        Ok(lookup_on(&db, l.tenant, &[l])
            .await?
            .pop()
            .unwrap_or_default())
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

    /// Lookups parked or in flight now (tests wait on it).
    pub fn lookup_load(&self) -> usize {
        self.lookups.load(0)
    }

    pub fn stats(&self) -> PushFusionStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let s = &self.stats;
        PushFusionStats {
            commits: l(&s.commits),
            rounds: l(&s.rounds),
            inline: l(&s.inline),
            failed_flushes: l(&s.failed_flushes),
            lookup_flushes: l(&s.lookup_flushes),
            lookup_requests: l(&s.lookup_requests),
        }
    }

    /// Graceful shutdown: later rounds and lookups run alone, parked ones are flushed
    /// and answered.
    pub async fn shutdown(&self) {
        self.lookups.shutdown().await;
        self.lane.shutdown().await;
    }
}

/// One `partitions_lookup_v1` for `requests` of `tenant`, their arrays end to end; the
/// rows split back per request, indexed into its own arrays.
async fn lookup_on(
    db: &crate::db::Conn,
    tenant: Uuid,
    requests: &[&Lookup],
) -> Result<Vec<Vec<PartitionFound>>, crate::db::DbError> {
    let queues: Vec<&str> = requests
        .iter()
        .flat_map(|r| r.queues.iter())
        .map(String::as_str)
        .collect();
    let parts: Vec<&str> = requests
        .iter()
        .flat_map(|r| r.partitions.iter())
        .map(String::as_str)
        .collect();
    let found = db.partitions_lookup(tenant, &queues, &parts).await?;
    Ok(split_found(found, requests.iter().map(|r| r.queues.len())))
}

/// Rows of a lookup over arrays laid end to end, back to each request of `lens` pairs,
/// indexed into its own arrays.
fn split_found(
    found: Vec<PartitionFound>,
    lens: impl Iterator<Item = usize>,
) -> Vec<Vec<PartitionFound>> {
    let mut starts = Vec::new();
    let mut end = 0;
    for n in lens {
        starts.push(end);
        end += n;
    }
    let mut out: Vec<Vec<PartitionFound>> = starts.iter().map(|_| Vec::new()).collect();
    for mut f in found {
        let r = starts.partition_point(|&s| s <= f.index).saturating_sub(1);
        f.index -= starts[r];
        out[r].push(f);
    }
    out
}

/// The parked lookups, one call per tenant (in order of first appearance). A failed
/// call sends its requests back to look up alone (a single one just gets its error).
async fn flush_lookups(db: Db, requests: Vec<Lookup>, stats: Arc<Stats>) -> Vec<Looked> {
    let conn = match db.conn().await {
        Ok(c) => Some(c),
        Err(e) if requests.len() == 1 => return vec![Looked::Failed(e.into())],
        Err(_) => None,
    };
    let mut answers: Vec<Option<Looked>> = requests.iter().map(|_| None).collect();
    let mut tenants: Vec<Uuid> = Vec::new();
    for r in &requests {
        if !tenants.contains(&r.tenant) {
            tenants.push(r.tenant);
        }
    }
    for tenant in tenants {
        let mine: Vec<usize> = (0..requests.len())
            .filter(|&i| requests[i].tenant == tenant)
            .collect();
        let of: Vec<&Lookup> = mine.iter().map(|&i| &requests[i]).collect();
        let result = match &conn {
            Some(c) => lookup_on(c, tenant, &of).await,
            None => continue,
        };
        let rows = match result {
            Ok(rows) => rows,
            Err(e) if requests.len() == 1 => return vec![Looked::Failed(e.into())],
            Err(e) => {
                tracing::warn!(
                    requests = mine.len(),
                    "fused lookup failed, looking up alone: {e}"
                );
                continue;
            }
        };
        {
            stats.lookup_flushes.fetch_add(1, Ordering::Relaxed);
            stats
                .lookup_requests
                .fetch_add(mine.len() as u64, Ordering::Relaxed);
            for (&i, rows) in mine.iter().zip(rows) {
                answers[i] = Some(Looked::Done(rows));
            }
        }
    }
    drop(conn);
    requests
        .into_iter()
        .zip(answers)
        .map(|(r, a)| a.unwrap_or(Looked::Retry(r)))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn found(index: usize) -> PartitionFound {
        PartitionFound {
            index,
            partition_id: None,
            dedup_window: 0,
            encrypted: false,
        }
    }

    #[test]
    fn fused_lookup_rows_go_back_to_their_requests_reindexed() {
        // Requests of 2, 0 and 3 pairs; rows for pairs 0, 1, 3 and 4 (2 and 5 unknown).
        let rows = vec![found(0), found(1), found(3), found(4)];
        let out = split_found(rows, [2, 0, 3].into_iter());
        let idx = |v: &Vec<PartitionFound>| v.iter().map(|f| f.index).collect::<Vec<_>>();
        assert_eq!(
            out.iter().map(idx).collect::<Vec<_>>(),
            vec![vec![0, 1], vec![], vec![1, 2]]
        );
    }
}
