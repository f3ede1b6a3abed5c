//! Acks (docs/broker-contract.md §2): the fast-path decision, written once and used by
//! `/ack`, `/ack/batch` and the transaction's acks, and the ack routes' whole path.
//!
//! Items are grouped by (partitionId, consumer group, leaseId). A group whose items are
//! all completed and exactly match what this process delivered under that lease takes
//! the registry fast path (one positional `log_ack_at_v1`, fused when ack fusion is on);
//! everything else, and any fast-path row the database refuses, goes through the
//! authority `log_ack_by_hash_v2` (which also files a dlq verdict in the same statement).

use std::collections::HashSet;

use queen_log::ack::Status;
use queen_log::hash::{hash_hex, TxnHash};
use queen_log::wire::{HashAck, Reply};
use uuid::Uuid;

use crate::db::ack::ByHash;
use crate::engine::fusion::{Parked, Verdict};
use crate::engine::items::{ack_groups, AckItem, AckKey};
use crate::engine::registry::Registry;
use crate::engine::{Counter, Engine};
use crate::error::{ApiError, ApiResult};

const UNRESOLVED: &str = "unresolvable: transaction not in the ack window (hash purged or never \
                          pushed); if leased, the message redelivers";
const STALE: &str = "already committed: the cursor moved past this message before this ack";
const DLQ_REJECTED: &str = "dlq rejected";
const FLUSH_FAILED: &str = "ack flush failed; lease will expire and redeliver";
/// What the by-hash ack (`log_ack_by_hash_v2`) answers for a partition without a cursor
/// row: also the answer for a partition of another tenant (docs/broker-contract.md §2
/// step 3), so the two cannot be told apart.
const NOT_FOUND: &str = "consumer not found";

/// The fast-path decision (docs/broker-contract.md §2 step 4, §3), the one place it is
/// made: a group of acks of one (partition, group) by `worker` may be one positional
/// advance when the registry is on, every item is completed, and the acked hash set is
/// exactly what this process delivered to that worker; the registry entry is then
/// consumed and its batch_end returned. Otherwise the group goes by hash, and the
/// worker's entry dies (it can no longer be right). Without a worker there is nothing
/// to match.
pub fn fast_path_end(registry: &Registry, group: &[&AckItem], worker: Option<&str>) -> Option<i64> {
    let worker = worker?;
    let first = group.first()?;
    if registry.enabled() && group.iter().all(|it| it.status == Status::Completed) {
        let set: HashSet<TxnHash> = group.iter().map(|it| it.hash).collect();
        if let Some(end) = registry.take_if_match(first.pid, &first.group, worker, &set) {
            return Some(end);
        }
    }
    registry.evict_if_worker(first.pid, &first.group, worker);
    None
}

/// What an ack did, per item.
#[derive(Clone, Default)]
pub struct AckOutcome {
    pub success: bool,
    /// Never empty on a failure (the Go client reads only `error`).
    pub error: Option<String>,
    pub lease_released: bool,
    pub dlq: bool,
    pub noop: bool,
    /// The message is delivered again: this ack released the lease with it above the
    /// cursor (a nack, or anything above the batch's head signal).
    pub redelivered: bool,
    /// A nack's delay held the redelivery back until then (only when it did).
    pub redeliver_at: Option<String>,
}

impl AckOutcome {
    fn ok(lease_released: bool) -> Self {
        AckOutcome {
            success: true,
            lease_released,
            ..AckOutcome::default()
        }
    }

    fn fail(error: impl Into<String>) -> Self {
        let e = error.into();
        AckOutcome {
            error: Some(if e.is_empty() { "ack failed".into() } else { e }),
            ..AckOutcome::default()
        }
    }
}

/// Acks `items` (of `/ack` or `/ack/batch`): groups them, runs each group, and answers
/// per item in request order. With tenancy on, a group on a partition of another tenant
/// fails before the registry or the database sees it, with the answer a nonexistent
/// partition gets.
///
/// Each group is its own statement, so a batch is not one transaction: when a group
/// fails (statement timeout on a locked cursor row, lost connection) after another one
/// was applied, the answer is Ok with the failed group's items failed and the reason,
/// never an error that would claim nothing was written. Only when every group failed is
/// the answer the first group's error.
pub async fn acknowledge(
    e: &Engine<'_>,
    tenant: Uuid,
    items: &[AckItem],
) -> ApiResult<Vec<AckOutcome>> {
    let mut outs = vec![AckOutcome::default(); items.len()];
    let owned = e
        .owned_partitions(tenant, items.iter().map(|it| it.pid))
        .await?;
    let mut first_error = None;
    let mut applied_groups = 0;
    for g in ack_groups(items, AckKey::PerLease) {
        let members: Vec<&AckItem> = g.iter().map(|&i| &items[i]).collect();
        let foreign = owned.as_ref().is_some_and(|o| !o.contains(&members[0].pid));
        let results = if foreign {
            e.signals.count(Counter::AcksSql, members.len() as u64);
            vec![AckOutcome::fail(NOT_FOUND); members.len()]
        } else {
            match ack_group(e, &members).await {
                Ok(results) => {
                    applied_groups += 1;
                    results
                }
                Err(err) => {
                    let out = AckOutcome::fail(not_applied(&err));
                    first_error.get_or_insert(err);
                    vec![out; members.len()]
                }
            }
        };
        for (&i, o) in g.iter().zip(results) {
            outs[i] = o;
        }
    }
    match first_error.filter(|_| applied_groups == 0) {
        Some(err) => Err(err),
        None => Ok(outs),
    }
}

/// The per-item error of a group whose statement failed while others were applied.
fn not_applied(e: &ApiError) -> String {
    format!("not applied ({e}); retry this item")
}

/// How the fast path ended.
enum Fast {
    Done(Vec<AckOutcome>),
    /// Not applicable, or the database refused the row: the SQL path decides.
    Miss,
    /// The fusion flush failed as a whole: the SQL path decides, if it can.
    FlushFailed,
}

async fn ack_group(e: &Engine<'_>, g: &[&AckItem]) -> ApiResult<Vec<AckOutcome>> {
    let n = g.len() as u64;
    match fast_path(e, g).await? {
        Fast::Done(outs) => {
            e.signals.count(Counter::AcksFast, n);
            Ok(outs)
        }
        Fast::Miss => {
            e.signals.count(Counter::AcksSql, n);
            sql_path(e, g).await
        }
        Fast::FlushFailed => {
            e.signals.count(Counter::AcksSql, n);
            Ok(sql_path(e, g)
                .await
                .unwrap_or_else(|_| vec![AckOutcome::fail(FLUSH_FAILED); g.len()]))
        }
    }
}

/// docs/broker-contract.md §2 step 4: when [`fast_path_end`] grants it, one positional
/// advance to batch_end, through fusion when it is on, else one synchronous
/// `log_ack_at_v1`.
async fn fast_path(e: &Engine<'_>, g: &[&AckItem]) -> ApiResult<Fast> {
    let first = g[0];
    let Some(end) = fast_path_end(e.registry, g, first.lease.as_deref()) else {
        return Ok(Fast::Miss);
    };
    let parked = Parked {
        pid: first.pid,
        group: first.group.clone(),
        worker: first.lease.clone().unwrap_or_default(),
        batch_end: end,
        count: g.iter().map(|it| it.hash).collect::<HashSet<_>>().len() as i32,
    };
    let committed = match e.fusion {
        Some(f) => match f.ack(parked).await {
            Verdict::Committed => true,
            Verdict::Rejected(_) => false,
            Verdict::FlushFailed(err) => {
                tracing::warn!("ack fusion flush failed, using the SQL path: {err}");
                return Ok(Fast::FlushFailed);
            }
        },
        None => ack_at(e, &parked).await?,
    };
    Ok(if committed {
        Fast::Done(vec![AckOutcome::ok(true); g.len()])
    } else {
        Fast::Miss
    })
}

/// The unfused fast path: one `log_ack_at_v1`; true when the database accepted it.
async fn ack_at(e: &Engine<'_>, parked: &Parked) -> ApiResult<bool> {
    let db = e.db.conn().await?;
    Ok(db.log_ack_at(&parked.row()).await?.done().is_some())
}

/// docs/broker-contract.md §2 step 5: the authority, with its lists mapped back to the
/// items.
async fn sql_path(e: &Engine<'_>, g: &[&AckItem]) -> ApiResult<Vec<AckOutcome>> {
    let first = g[0];
    // One statement: the nack delay (the longest any item asked for) rides along, and a
    // dlq verdict is filed inside it, its error text built by the extension from the
    // items' errors (queen_log::dlq::error_text, one owner).
    let args = ByHash {
        pid: first.pid,
        group: &first.group,
        worker: first.lease.as_deref(),
        hashes: g.iter().map(|it| it.hash.as_slice()).collect(),
        statuses: g.iter().map(|it| it.status.as_str()).collect(),
        errors: g.iter().map(|it| it.error.as_deref()).collect(),
        delay: g.iter().filter_map(|it| it.delay).max().unwrap_or(0),
    };
    let r = e.db.conn().await?.log_ack_by_hash(&args).await?;
    let r = match r {
        Reply::Done(r) => r,
        Reply::Refused(err) => return Ok(vec![AckOutcome::fail(err); g.len()]),
    };
    let mut outs = map_lists(&r, g);
    if let Some(at) = &r.redeliver_at {
        let at = crate::util::micros_to_ms(at);
        outs.iter_mut()
            .filter(|o| o.success)
            .for_each(|o| o.redeliver_at = Some(at.clone()));
    }
    if r.dlq {
        mark_dlq(e, g, &r, &mut outs);
    }
    Ok(outs)
}

/// Precedence unresolved > stale > noop. Membership depends only on the hash and on
/// whether the status is a signal, so a set lookup per item is exact.
fn map_lists(r: &HashAck, g: &[&AckItem]) -> Vec<AckOutcome> {
    let set = |v: &[String]| -> HashSet<String> { v.iter().cloned().collect() };
    let (unresolved, stale, noop) = (
        set(&r.unresolved_hashes),
        set(&r.stale_hashes),
        set(&r.noop_hashes),
    );
    let redelivered = set(&r.redelivered_hashes);
    let released = r.lease_released;
    g.iter()
        .map(|it| {
            let hex = hash_hex(&it.hash);
            if unresolved.contains(&hex) {
                AckOutcome::fail(UNRESOLVED)
            } else if it.status.is_signal() && stale.contains(&hex) {
                AckOutcome {
                    lease_released: released,
                    ..AckOutcome::fail(STALE)
                }
            } else if !it.status.is_signal() && noop.contains(&hex) {
                AckOutcome {
                    noop: true,
                    ..AckOutcome::ok(released)
                }
            } else {
                AckOutcome {
                    redelivered: redelivered.contains(&hex),
                    ..AckOutcome::ok(released)
                }
            }
        })
        .collect()
}

/// What the dlq verdict did to each item, as the extension filed it: the items of the
/// filed message (the head signal's transaction) say `dlq`, the rest of the batch above
/// it `redelivered` (map_lists marked them), the lease is released for all. A filing the
/// extension refused (the frame retained away) files nothing: every item `dlq rejected`.
fn mark_dlq(e: &Engine<'_>, g: &[&AckItem], r: &HashAck, outs: &mut [AckOutcome]) {
    if r.dlq_id.is_none() {
        outs.fill(AckOutcome::fail(DLQ_REJECTED));
        return;
    }
    e.signals.count(Counter::DlqFiled, 1);
    let filed = r.head_index.and_then(|h| g.get(h)).map(|it| it.hash);
    for (it, o) in g.iter().zip(outs.iter_mut()) {
        o.dlq = Some(it.hash) == filed;
        o.lease_released = true;
    }
}
