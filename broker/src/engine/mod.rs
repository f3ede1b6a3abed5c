//! The engine: what a write decides between the routes (which only translate HTTP) and
//! the database client, and the process-local accelerators it uses. None of it is
//! durable but the push spool; each accelerator falls back to the authority (the
//! extension) when it cannot help (docs/broker-contract.md §3, §4).
//!
//! - `items.rs`: the items a write carries and the rules the writes share (in-request
//!   duplicates, grouping per partition and per ack key, sealing);
//! - `push.rs`: a push, from its items to each item's outcome (spool, rounds, dedup);
//! - `ack.rs`: an ack, and the fast-path decision (registry match, else evict) that the
//!   transaction's acks use too;
//! - `transaction.rs`: a transaction's composition: its pushes, its acks, its kv and
//!   timer riders, in one `log_transaction_wire_v1`;
//! - `ephemeral.rs`: the rings of ephemeral queues (Queen 2.x), in memory only;
//! - `registry.rs`: what this process delivered on each leasing pop (the ack fast path);
//! - `fusion.rs`: fast-path acks of concurrent requests flushed as one
//!   `log_ack_multi_v1`, on `lanes.rs`;
//! - `lanes.rs`: fire-on-idle batching lanes with a bounded number of flushes in flight;
//! - `push_fusion.rs`: push rounds of concurrent requests in one `log_push_multi_v1`;
//! - `dedup.rs`: per-partition dedup watermarks, so a push probes only what it must;
//! - `hints.rs`: the partitions pushed to lately, which queue pops try first;
//! - `sealing.rs`: payload encryption with `QUEEN_ENCRYPTION_KEY`, which only the broker
//!   holds (the extension refuses plaintext into an encrypting queue);
//! - `spool.rs`: the push spool, local durable files for pushes the database cannot take
//!   now (docs/availability.md), replayed by crate::http::spool_replay;
//! - `write_gate.rs`: the one rule every append obeys (push maintenance, spooled records
//!   of a partition first), asked by every path that appends messages.

pub mod ack;
pub mod dedup;
pub mod ephemeral;
pub mod fusion;
pub mod hints;
pub mod items;
pub mod lanes;
pub mod lookups;
pub mod push;
pub mod push_fusion;
pub mod registry;
pub mod sealing;
pub mod spool;
pub mod transaction;
pub mod write_gate;

use std::collections::HashSet;

use uuid::Uuid;

use crate::db::Db;
use crate::error::ApiResult;

/// What the engine's writes use, borrowed from the broker's state for one request
/// (crate::state::AppState::engine builds it).
pub struct Engine<'a> {
    pub db: &'a Db,
    pub registry: &'a registry::Registry,
    /// Ack fusion, when on (`QUEEN_ACK_FUSION`).
    pub fusion: Option<&'a fusion::Fusion>,
    /// Push fusion, when on (`QUEEN_PUSH_FUSION`).
    pub push_fusion: Option<&'a push_fusion::PushFusion>,
    pub dedup: &'a dedup::DedupCache,
    /// The push's lookup, remembered (`QUEEN_LOOKUP_CACHE_MS`).
    pub lookups: &'a lookups::LookupCache,
    pub sealer: &'a sealing::Sealer,
    /// The push spool, when configured (`QUEEN_SPOOL_DIR`).
    pub spool: Option<&'a spool::Spool>,
    pub gate: &'a write_gate::WriteGate,
    /// Tenancy is on: a partition of another tenant is answered as a nonexistent one.
    pub tenancy: bool,
    /// What a write tells the rest of the process.
    pub signals: &'a (dyn Signals + Sync),
}

/// What the engine's writes tell the rest of the process (implemented by the broker's
/// state): long-poll wake-ups, the timer sweeper's wake-up, and the counters.
pub trait Signals {
    /// Messages were appended to `queue` of `tenant` (to `partition`, or to partitions
    /// not tracked): wake the long-polls they can serve.
    fn appended(&self, tenant: Uuid, queue: &str, partition: Option<&str>);
    /// [`Signals::appended`] to a partition whose id is known: a pop hint too
    /// (crate::engine::hints).
    fn pushed(&self, tenant: Uuid, queue: &str, partition: &str, pid: Uuid);
    /// A timer was scheduled through this broker, due in `delay_ms`.
    fn timer_scheduled(&self, delay_ms: i64);
    /// Add `n` to a counter.
    fn count(&self, counter: Counter, n: u64);
}

/// The counters the engine's writes move (crate::ops::metrics owns them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Ack items answered by the registry fast path.
    AcksFast,
    /// Ack items answered by the by-hash SQL path.
    AcksSql,
    /// Dead letters filed by an ack.
    DlqFiled,
    MessagesPushed,
    MessagesDuplicate,
}

impl Engine<'_> {
    /// With tenancy on, which of `pids` belong to `tenant` (one `owned_partitions_v1`);
    /// None when tenancy is off (everything is the default tenant's).
    pub async fn owned_partitions(
        &self,
        tenant: Uuid,
        pids: impl Iterator<Item = Uuid>,
    ) -> ApiResult<Option<HashSet<Uuid>>> {
        if !self.tenancy {
            return Ok(None);
        }
        let mut pids: Vec<Uuid> = pids.collect();
        pids.sort_unstable();
        pids.dedup();
        if pids.is_empty() {
            return Ok(Some(HashSet::new()));
        }
        let owned = self
            .db
            .conn()
            .await?
            .owned_partitions(&pids, tenant)
            .await?;
        Ok(Some(owned.into_iter().collect()))
    }
}
