//! The write gate: the one owner of the rule every write that appends messages obeys
//! (docs/availability.md, "One gate for every write"). While push maintenance mode is on
//! the database sees no append; and a partition's spooled records (not yet replayed) go
//! into it before anything else written after them.
//!
//! Each append path asks the gate before it writes:
//! - a push ([`WriteGate::push`]) can be spooled: it goes to the spool, or to the database;
//! - a write that cannot be spooled ([`WriteGate::admit`]: a transaction, a stream
//!   cycle's sinks, a DLQ redrive) either may write now or is refused with 503 and
//!   `Retry-After`, having written nothing;
//! - a background append ([`WriteGate::open_for`]: the timer sweep) waits while the gate
//!   is closed; what it would deliver stays where it is (a due timer stays due), so it is
//!   neither lost nor reordered.
//!
//! The spool's replay (crate::http::spool_replay) is the one writer the spool order
//! does not hold back: it is that order. It pauses in push maintenance itself.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::engine::spool::{PartitionKey, Spool};
use crate::error::{ApiError, ApiResult};
use crate::ops::shared_state::SharedModes;

/// How long a write behind spooled records waits for the replay to pass them: a push is
/// then spooled behind them, a write that cannot be spooled is refused (503).
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(2);

/// What a write appends to, as far as it is known before the write.
#[derive(Clone, Copy)]
pub enum Targets<'a> {
    /// These partitions: (tenant, queue, partition).
    Partitions(&'a [(Uuid, &'a str, &'a str)]),
    /// Any partition of these queues of the tenant (a redrive by queue: the DLQ rows name
    /// the partitions).
    Queues(Uuid, &'a [&'a str]),
    /// Any partition of the tenant (a redrive by DLQ row ids).
    Tenant(Uuid),
    /// Any partition of any tenant (the timer sweep delivers for everyone).
    Any,
}

impl Targets<'_> {
    fn is_empty(&self) -> bool {
        match self {
            Targets::Partitions(k) => k.is_empty(),
            Targets::Queues(_, q) => q.is_empty(),
            Targets::Tenant(_) | Targets::Any => false,
        }
    }

    fn covers(&self, (t, q, p): &PartitionKey) -> bool {
        match self {
            Targets::Partitions(keys) => keys
                .iter()
                .any(|(kt, kq, kp)| kt == t && *kq == q.as_str() && *kp == p.as_str()),
            Targets::Queues(tenant, queues) => tenant == t && queues.contains(&q.as_str()),
            Targets::Tenant(tenant) => tenant == t,
            Targets::Any => true,
        }
    }
}

/// Where a push goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushRoute {
    Database,
    Spool,
}

/// See the module docs. One per broker (crate::state::AppState).
pub struct WriteGate {
    modes: Arc<SharedModes>,
    spool: Option<Arc<Spool>>,
}

impl WriteGate {
    pub fn new(modes: Arc<SharedModes>, spool: Option<Arc<Spool>>) -> Self {
        WriteGate { modes, spool }
    }

    /// A push: to the spool when push maintenance is on, the database is known down, or
    /// one of its partitions has spooled records still to be replayed (they go first).
    /// Behind records of its partitions only (the database is up), it first waits up to
    /// [`CATCH_UP_WAIT`] for the replay to pass them, then goes to the database: that is
    /// how a partition under steady load leaves the spool again. A broker without a
    /// spool pushes to the database (docs/availability.md, "Maintenance mode").
    pub async fn push(&self, keys: &[(Uuid, &str, &str)]) -> PushRoute {
        let Some(spool) = &self.spool else {
            return PushRoute::Database;
        };
        if self.modes.push_maintenance() || spool.db_down() {
            return PushRoute::Spool;
        }
        if spool.must_take(keys.iter().copied()) && !spool.wait_clear(keys, CATCH_UP_WAIT).await {
            return PushRoute::Spool;
        }
        PushRoute::Database
    }

    /// A write that cannot be spooled (`what` names it in the refusal): Ok to write now,
    /// or 503 with `Retry-After` while push maintenance is on, or while a partition it
    /// appends to has spooled records the replay has not passed within
    /// [`CATCH_UP_WAIT`]. Nothing has been written either way.
    pub async fn admit(&self, what: &str, targets: Targets<'_>) -> ApiResult<()> {
        if targets.is_empty() {
            return Ok(());
        }
        if self.modes.push_maintenance() {
            return Err(ApiError::Unavailable(format!(
                "push maintenance mode is on: {what} is not written until it is switched \
                 off (it cannot be buffered); nothing was written, retry later"
            )));
        }
        let Some(spool) = &self.spool else {
            return Ok(());
        };
        let covers = |k: &PartitionKey| targets.covers(k);
        if spool.pending_where(covers) && !spool.wait_clear_of(covers, CATCH_UP_WAIT).await {
            return Err(ApiError::Unavailable(format!(
                "a partition {what} writes to has buffered pushes not yet replayed, which go \
                 first; nothing was written, retry later"
            )));
        }
        Ok(())
    }

    /// A background append (the timer sweep): whether it may write now. Closed while
    /// push maintenance is on or a partition it may write to has spooled records pending;
    /// the caller tries again later.
    pub fn open_for(&self, targets: Targets<'_>) -> bool {
        if self.modes.push_maintenance() {
            return false;
        }
        match &self.spool {
            Some(spool) => !spool.pending_where(|k| targets.covers(k)),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_cover_what_they_name() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let k = (a, "q".to_string(), "p".to_string());
        assert!(Targets::Partitions(&[(a, "q", "p")]).covers(&k));
        assert!(!Targets::Partitions(&[(a, "q", "x")]).covers(&k));
        assert!(!Targets::Partitions(&[(b, "q", "p")]).covers(&k));
        assert!(Targets::Queues(a, &["z", "q"]).covers(&k));
        assert!(!Targets::Queues(b, &["q"]).covers(&k));
        assert!(Targets::Tenant(a).covers(&k));
        assert!(!Targets::Tenant(b).covers(&k));
        assert!(Targets::Any.covers(&k));
        assert!(Targets::Partitions(&[]).is_empty());
    }
}
