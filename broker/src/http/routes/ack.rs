//! `POST /api/v1/ack` and `POST /api/v1/ack/batch` (docs/broker-contract.md §2).
//!
//! Items are grouped by (partitionId, consumer group, leaseId). A group whose items are
//! all completed and exactly match what this process delivered under that lease takes
//! the registry fast path (one positional `log_ack_at_v1`); everything else, and any
//! fast-path row the database refuses, goes through the authority `log_ack_by_hash_v2`
//! (which also files a dlq verdict in the same statement).

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use queen_log::ack::Status;
use queen_log::hash::{hash_hex, TxnHash};
use queen_log::wire::{HashAck, Reply};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::db::ack::ByHash;
use crate::engine::fusion::{Parked, Verdict};
use crate::error::{ApiError, ApiResult};
use crate::http::auth::{owned_partitions, Tenant};
use crate::http::input::parse_json;
use crate::http::items::{read_ack_item, AckAt, AckItem};
use crate::ops::metrics::Metrics;
use crate::state::AppState;

const UNRESOLVED: &str = "unresolvable: transaction not in the ack window (hash purged or never \
                          pushed); if leased, the message redelivers";
const STALE: &str = "already committed: the cursor moved past this message before this ack";
const DLQ_REJECTED: &str = "dlq rejected";
const FLUSH_FAILED: &str = "ack flush failed; lease will expire and redeliver";
/// What the by-hash ack (`log_ack_by_hash_v2`) answers for a partition without a cursor
/// row: also the answer for a partition of another tenant (docs/broker-contract.md §2
/// step 3), so the two cannot be told apart.
const NOT_FOUND: &str = "consumer not found";

/// Each acknowledgment stays raw JSON until crate::http::items reads it: no `Value` tree.
/// Any other top-level key is refused naming it (docs/http-api.md, "Strict bodies").
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BatchIn<'a> {
    consumer_group: Option<String>,
    #[serde(borrow)]
    acknowledgments: Vec<&'a RawValue>,
}

type Item = AckItem;

/// The per-item answer.
#[derive(Clone, Default)]
struct Out {
    success: bool,
    error: Option<String>,
    lease_released: bool,
    dlq: bool,
    noop: bool,
    redelivered: bool,
    redeliver_at: Option<String>,
}

impl Out {
    fn ok(lease_released: bool) -> Self {
        Out {
            success: true,
            lease_released,
            ..Out::default()
        }
    }

    /// A failure; the error is never empty (the Go client reads only `error`).
    fn fail(error: impl Into<String>) -> Self {
        let e = error.into();
        Out {
            error: Some(if e.is_empty() { "ack failed".into() } else { e }),
            ..Out::default()
        }
    }
}

pub async fn ack_one(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Vec<Answer>>> {
    let v: &RawValue = parse_json(&body)?;
    let items = vec![read_ack_item(0, v, None, AckAt::Body)?];
    Ok(Json(process(&state, tenant, items).await?))
}

pub async fn ack_batch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Vec<Answer>>> {
    let b: BatchIn<'_> = parse_json(&body)?;
    let items = b
        .acknowledgments
        .iter()
        .enumerate()
        .map(|(i, v)| read_ack_item(i, v, b.consumer_group.as_deref(), AckAt::Batch))
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(process(&state, tenant, items).await?))
}

/// Groups, runs each group, renders in request order. With tenancy on, a group on a
/// partition of another tenant fails before the registry or the database sees it, with
/// the answer a nonexistent partition gets.
///
/// Each group is its own statement, so a batch is not one transaction: when a group
/// fails (statement timeout on a locked cursor row, lost connection) after another one
/// was applied, the answer is 200 with the failed group's items `success: false` and
/// the reason, never a 5xx that would claim nothing was written. Only
/// when every group failed is the answer the first group's error.
async fn process(state: &AppState, tenant: Uuid, items: Vec<Item>) -> ApiResult<Vec<Answer>> {
    let mut outs = vec![Out::default(); items.len()];
    let owned = owned_partitions(state, tenant, items.iter().map(|it| it.pid)).await?;
    let mut first_error = None;
    let mut applied_groups = 0;
    for g in groups(&items) {
        let members: Vec<&Item> = g.iter().map(|&i| &items[i]).collect();
        let foreign = owned.as_ref().is_some_and(|o| !o.contains(&members[0].pid));
        let results = if foreign {
            Metrics::add(&state.metrics.acks_sql, members.len() as u64);
            vec![Out::fail(NOT_FOUND); members.len()]
        } else {
            match ack_group(state, &members).await {
                Ok(results) => {
                    applied_groups += 1;
                    results
                }
                Err(e) => {
                    let out = Out::fail(not_applied(&e));
                    first_error.get_or_insert(e);
                    vec![out; members.len()]
                }
            }
        };
        for (&i, o) in g.iter().zip(results) {
            outs[i] = o;
        }
    }
    if let Some(e) = first_error.filter(|_| applied_groups == 0) {
        return Err(e);
    }
    Ok(items
        .into_iter()
        .zip(outs)
        .enumerate()
        .map(|(index, (it, o))| Answer {
            index,
            transaction_id: it.txn,
            success: o.success,
            error: o.error,
            lease_released: o.lease_released,
            dlq: o.dlq,
            noop: o.noop,
            redelivered: o.redelivered,
            redeliver_at: o.redeliver_at,
        })
        .collect())
}

/// The per-item error of a group whose statement failed while others were applied.
fn not_applied(e: &ApiError) -> String {
    format!("not applied ({e}); retry this item")
}

/// One item of an ack answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    index: usize,
    transaction_id: String,
    success: bool,
    error: Option<String>,
    lease_released: bool,
    dlq: bool,
    noop: bool,
    /// The message is delivered again: this ack released the lease with it above the
    /// cursor (a nack, or anything above the batch's head signal). Only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    redelivered: bool,
    /// A nack's delay held the redelivery back until then (only when it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    redeliver_at: Option<String>,
}

/// Item indexes per (partition, group, lease), in order of first appearance.
fn groups(items: &[Item]) -> Vec<Vec<usize>> {
    let mut index: HashMap<(Uuid, &str, Option<&str>), usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let key = (it.pid, it.group.as_str(), it.lease.as_deref());
        let gi = *index.entry(key).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[gi].push(i);
    }
    out
}

/// How the fast path ended.
enum Fast {
    Done(Vec<Out>),
    /// Not applicable, or the database refused the row: the SQL path decides.
    Miss,
    /// The fusion flush failed as a whole: the SQL path decides, if it can.
    FlushFailed,
}

async fn ack_group(state: &AppState, g: &[&Item]) -> ApiResult<Vec<Out>> {
    let n = g.len() as u64;
    match fast_path(state, g).await? {
        Fast::Done(outs) => {
            Metrics::add(&state.metrics.acks_fast, n);
            Ok(outs)
        }
        Fast::Miss => {
            Metrics::add(&state.metrics.acks_sql, n);
            sql_path(state, g).await
        }
        Fast::FlushFailed => {
            Metrics::add(&state.metrics.acks_sql, n);
            Ok(sql_path(state, g)
                .await
                .unwrap_or_else(|_| vec![Out::fail(FLUSH_FAILED); g.len()]))
        }
    }
}

/// docs/broker-contract.md §2 step 4: every item completed, the acked set equals the delivered set,
/// same worker → one positional advance to batch_end, through fusion when it is on,
/// else one synchronous `log_ack_at_v1`.
async fn fast_path(state: &AppState, g: &[&Item]) -> ApiResult<Fast> {
    let first = g[0];
    let Some(lease) = first.lease.as_deref() else {
        return Ok(Fast::Miss);
    };
    if !state.registry.enabled() || g.iter().any(|it| it.status != Status::Completed) {
        return Ok(Fast::Miss);
    }
    let set: HashSet<TxnHash> = g.iter().map(|it| it.hash).collect();
    let Some(end) = state
        .registry
        .take_if_match(first.pid, &first.group, lease, &set)
    else {
        return Ok(Fast::Miss);
    };
    let parked = Parked {
        pid: first.pid,
        group: first.group.clone(),
        worker: lease.to_string(),
        batch_end: end,
        count: set.len() as i32,
    };
    let committed = match &state.fusion {
        Some(f) => match f.ack(parked).await {
            Verdict::Committed => true,
            Verdict::Rejected(_) => false,
            Verdict::FlushFailed(e) => {
                tracing::warn!("ack fusion flush failed, using the SQL path: {e}");
                return Ok(Fast::FlushFailed);
            }
        },
        None => ack_at(state, &parked).await?,
    };
    Ok(if committed {
        Fast::Done(vec![Out::ok(true); g.len()])
    } else {
        Fast::Miss
    })
}

/// The unfused fast path: one `log_ack_at_v1`; true when the database accepted it.
async fn ack_at(state: &AppState, parked: &Parked) -> ApiResult<bool> {
    let db = state.db.conn().await?;
    Ok(db.log_ack_at(&parked.row()).await?.done().is_some())
}

/// docs/broker-contract.md §2 step 5: the authority, with its lists mapped back to the items.
async fn sql_path(state: &AppState, g: &[&Item]) -> ApiResult<Vec<Out>> {
    let first = g[0];
    let lease = first.lease.as_deref();
    if let Some(l) = lease {
        state.registry.evict_if_worker(first.pid, &first.group, l);
    }
    // One statement: the nack delay (the longest any item asked for) rides along, and a
    // dlq verdict is filed inside it, its error text built by the extension from the
    // items' errors (queen_log::dlq::error_text, one owner).
    let args = ByHash {
        pid: first.pid,
        group: &first.group,
        worker: lease,
        hashes: g.iter().map(|it| it.hash.as_slice()).collect(),
        statuses: g.iter().map(|it| it.status.as_str()).collect(),
        errors: g.iter().map(|it| it.error.as_deref()).collect(),
        delay: g.iter().filter_map(|it| it.delay).max().unwrap_or(0),
    };
    let r = state.db.conn().await?.log_ack_by_hash(&args).await?;
    let r = match r {
        Reply::Done(r) => r,
        Reply::Refused(e) => return Ok(vec![Out::fail(e); g.len()]),
    };
    let mut outs = map_lists(&r, g);
    if let Some(at) = &r.redeliver_at {
        let at = crate::util::micros_to_ms(at);
        outs.iter_mut()
            .filter(|o| o.success)
            .for_each(|o| o.redeliver_at = Some(at.clone()));
    }
    if r.dlq {
        mark_dlq(state, g, &r, &mut outs);
    }
    Ok(outs)
}

/// Precedence unresolved > stale > noop. Membership depends only on the hash and on
/// whether the status is a signal, so a set lookup per item is exact.
fn map_lists(r: &HashAck, g: &[&Item]) -> Vec<Out> {
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
                Out::fail(UNRESOLVED)
            } else if it.status.is_signal() && stale.contains(&hex) {
                Out {
                    lease_released: released,
                    ..Out::fail(STALE)
                }
            } else if !it.status.is_signal() && noop.contains(&hex) {
                Out {
                    noop: true,
                    ..Out::ok(released)
                }
            } else {
                Out {
                    redelivered: redelivered.contains(&hex),
                    ..Out::ok(released)
                }
            }
        })
        .collect()
}

/// What the dlq verdict did to each item, as the extension filed it: the items of the
/// filed message (the head signal's transaction) say `dlq`, the rest of the batch above
/// it `redelivered` (map_lists marked them), the lease is released for all. A filing the
/// extension refused (the frame retained away) files nothing: every item `dlq rejected`.
fn mark_dlq(state: &AppState, g: &[&Item], r: &HashAck, outs: &mut [Out]) {
    if r.dlq_id.is_none() {
        outs.fill(Out::fail(DLQ_REJECTED));
        return;
    }
    Metrics::add(&state.metrics.dlq_filed, 1);
    let filed = r.head_index.and_then(|h| g.get(h)).map(|it| it.hash);
    for (it, o) in g.iter().zip(outs.iter_mut()) {
        o.dlq = Some(it.hash) == filed;
        o.lease_released = true;
    }
}
