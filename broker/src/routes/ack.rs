//! `POST /api/v1/ack` and `POST /api/v1/ack/batch` (broker.md §2).
//!
//! Items are grouped by (partitionId, consumer group, leaseId). A group whose items are
//! all completed and exactly match what this process delivered under that lease takes
//! the registry fast path (one positional `log_ack_at_v1`); everything else, and any
//! fast-path row the database refuses, goes through the authority `log_ack_by_hash_v1`.

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use queen_log::hash::{hash_hex, txn_hash, TxnHash};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::fusion::{Parked, Verdict};
use crate::metrics::Metrics;
use crate::routes::auth::Tenant;
use crate::state::AppState;
use crate::util::{check_name, group_or_queue_mode, parse_json, parse_uuid};
use queen_log::names::NameKind;

const UNRESOLVED: &str = "unresolvable: transaction not in the ack window (hash purged or never \
                          pushed); if leased, the message redelivers";
const STALE: &str = "already committed: the cursor moved past this message before this ack";
const DLQ_REJECTED: &str = "dlq rejected";
const RETRIES_EXHAUSTED: &str = "Retries exhausted";
const FLUSH_FAILED: &str = "ack flush failed; lease will expire and redeliver";
/// What `log_ack_by_hash_v1` answers for a partition without a cursor row: also the
/// answer for a partition of another tenant (broker.md §2 step 3), so the two cannot be
/// told apart.
const NOT_FOUND: &str = "consumer not found";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AckIn {
    transaction_id: String,
    partition_id: String,
    status: Option<String>,
    error: Option<String>,
    consumer_group: Option<String>,
    lease_id: Option<String>,
    /// A nack's delay (our addition): the batch is redelivered no earlier than this many
    /// seconds from now. Only with status failed or retry.
    delay_seconds: Option<i64>,
}

/// Each acknowledgment stays raw JSON until it is read into an `AckIn`: no `Value` tree.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchIn<'a> {
    consumer_group: Option<String>,
    #[serde(borrow)]
    acknowledgments: Vec<&'a RawValue>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Completed,
    Failed,
    Retry,
    Dlq,
}

impl Status {
    fn parse(s: Option<&str>) -> Option<Status> {
        match s {
            None | Some("" | "completed" | "success" | "acked" | "ok") => Some(Status::Completed),
            Some("failed") => Some(Status::Failed),
            Some("retry") => Some(Status::Retry),
            Some("dlq") => Some(Status::Dlq),
            Some(_) => None,
        }
    }

    pub(crate) fn sql(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Retry => "retry",
            Status::Dlq => "dlq",
        }
    }

    fn is_signal(self) -> bool {
        self != Status::Completed
    }
}

/// One validated ack.
pub(crate) struct Item {
    pub(crate) txn: String,
    pub(crate) hash: TxnHash,
    pub(crate) pid: Uuid,
    pub(crate) status: Status,
    pub(crate) error: Option<String>,
    pub(crate) group: String,
    pub(crate) lease: Option<String>,
    /// `delaySeconds`, validated (failed or retry only, 0..=i32::MAX).
    pub(crate) delay: Option<i32>,
}

/// The per-item answer.
#[derive(Clone, Default)]
struct Out {
    success: bool,
    error: Option<String>,
    lease_released: bool,
    dlq: bool,
    noop: bool,
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
    let v: Value = parse_json(&body)?;
    let items = vec![item(0, v, None)?];
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
        .map(|(i, v)| {
            let a = serde_json::from_str(v.get()).map_err(|e| bad_item(i, e))?;
            checked_item(i, a, b.consumer_group.as_deref())
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Json(process(&state, tenant, items).await?))
}

/// Validates one ack; the top-level group (batch) overrides the item's own.
pub(crate) fn item(i: usize, v: Value, top_group: Option<&str>) -> ApiResult<Item> {
    let a = serde_json::from_value(v).map_err(|e| bad_item(i, e))?;
    checked_item(i, a, top_group)
}

fn bad_item(i: usize, e: serde_json::Error) -> ApiError {
    ApiError::bad(format!("acknowledgment at index {i}: {e}"))
}

fn checked_item(i: usize, a: AckIn, top_group: Option<&str>) -> ApiResult<Item> {
    let status = Status::parse(a.status.as_deref()).ok_or_else(|| {
        ApiError::bad(format!(
            "unknown status \"{}\" at index {i}",
            a.status.as_deref().unwrap_or_default()
        ))
    })?;
    let pid = parse_uuid(&a.partition_id, "partitionId")
        .map_err(|e| ApiError::bad(format!("{e} at index {i}")))?;
    let delay = match a.delay_seconds {
        None => None,
        Some(_) if !matches!(status, Status::Failed | Status::Retry) => {
            return Err(ApiError::bad(format!(
                "delaySeconds is only allowed with status failed or retry (index {i})"
            )))
        }
        Some(d) => Some(i32::try_from(d).ok().filter(|d| *d >= 0).ok_or_else(|| {
            ApiError::bad(format!(
                "delaySeconds must be an integer from 0 to {} (index {i}), got {d}",
                i32::MAX
            ))
        })?),
    };
    let group = group_or_queue_mode(top_group.or(a.consumer_group.as_deref())).to_string();
    check_name(NameKind::ConsumerGroup, &group)?;
    Ok(Item {
        hash: txn_hash(&a.transaction_id),
        txn: a.transaction_id,
        pid,
        status,
        error: a.error.filter(|e| !e.is_empty()),
        group,
        lease: a.lease_id.filter(|l| !l.is_empty()),
        delay,
    })
}

/// Partition ids of `pids` that belong to `tenant` (one round trip), or None when
/// tenancy is off and every partition is the caller's.
pub(crate) async fn owned_partitions(
    state: &AppState,
    tenant: Uuid,
    pids: impl Iterator<Item = Uuid>,
) -> ApiResult<Option<HashSet<Uuid>>> {
    if !state.config.tenancy() {
        return Ok(None);
    }
    let mut pids: Vec<Uuid> = pids.collect();
    pids.sort_unstable();
    pids.dedup();
    if pids.is_empty() {
        return Ok(Some(HashSet::new()));
    }
    let db = state.db().await?;
    let rows = db
        .query(
            &db.prepare_cached("SELECT queen.owned_partitions_v1($1::uuid[], $2::uuid)")
                .await?,
            &[&pids, &tenant],
        )
        .await?;
    Ok(Some(rows.iter().map(|r| r.get(0)).collect()))
}

/// Groups, runs each group, renders in request order. With tenancy on, a group on a
/// partition of another tenant fails before the registry or the database sees it, with
/// the answer a nonexistent partition gets.
async fn process(state: &AppState, tenant: Uuid, items: Vec<Item>) -> ApiResult<Vec<Answer>> {
    let mut outs = vec![Out::default(); items.len()];
    let owned = owned_partitions(state, tenant, items.iter().map(|it| it.pid)).await?;
    for g in groups(&items) {
        let members: Vec<&Item> = g.iter().map(|&i| &items[i]).collect();
        let foreign = owned.as_ref().is_some_and(|o| !o.contains(&members[0].pid));
        let results = if foreign {
            Metrics::add(&state.metrics.acks_sql, members.len() as u64);
            vec![Out::fail(NOT_FOUND); members.len()]
        } else {
            ack_group(state, &members).await?
        };
        for (&i, o) in g.iter().zip(results) {
            outs[i] = o;
        }
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
            redeliver_at: o.redeliver_at,
        })
        .collect())
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

/// broker.md §2 step 4: every item completed, the acked set equals the delivered set,
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
    let count = set.len() as i32;
    let committed = match &state.fusion {
        Some(f) => {
            let parked = Parked {
                pid: first.pid,
                group: first.group.clone(),
                worker: lease.to_string(),
                batch_end: end,
                count,
            };
            match f.ack(parked).await {
                Verdict::Committed => true,
                Verdict::Rejected(_) => false,
                Verdict::FlushFailed(e) => {
                    tracing::warn!("ack fusion flush failed, using the SQL path: {e}");
                    return Ok(Fast::FlushFailed);
                }
            }
        }
        None => ack_at(state, first, lease, end, count).await?,
    };
    Ok(if committed {
        Fast::Done(vec![Out::ok(true); g.len()])
    } else {
        Fast::Miss
    })
}

/// The unfused fast path: one `log_ack_at_v1`; true when the database accepted it.
async fn ack_at(
    state: &AppState,
    first: &Item,
    lease: &str,
    end: i64,
    count: i32,
) -> ApiResult<bool> {
    let db = state.db().await?;
    let row = db
        .query_one(
&db.prepare_cached("SELECT queen.log_ack_at_v1($1::uuid, $2::text, $3::text, $4::bigint, true, $5::int)").await?,
            &[&first.pid, &first.group, &lease, &end, &count],
        )
        .await?;
    let r: Value = row.get(0);
    Ok(r.get("ok").and_then(Value::as_bool) == Some(true))
}

/// broker.md §2 step 5: the authority, with its lists mapped back to the items.
async fn sql_path(state: &AppState, g: &[&Item]) -> ApiResult<Vec<Out>> {
    let first = g[0];
    let lease = first.lease.as_deref();
    if let Some(l) = lease {
        state.registry.evict_if_worker(first.pid, &first.group, l);
    }
    let hashes: Vec<&[u8]> = g.iter().map(|it| it.hash.as_slice()).collect();
    let statuses: Vec<&str> = g.iter().map(|it| it.status.sql()).collect();
    // The group's nack delay: the longest any of its nacks asked for.
    let delay = g.iter().filter_map(|it| it.delay).max().unwrap_or(0);
    let db = state.db().await?;
    let row = if delay > 0 {
        db.query_one(
            &db.prepare_cached("SELECT queen.log_ack_by_hash_delay_v1($1::uuid, $2::text, $3::text, $4::bytea[], $5::text[], $6::int)").await?,
            &[&first.pid, &first.group, &lease, &hashes, &statuses, &delay],
        )
        .await?
    } else {
        db.query_one(
            &db.prepare_cached("SELECT queen.log_ack_by_hash_v1($1::uuid, $2::text, $3::text, $4::bytea[], $5::text[])").await?,
            &[&first.pid, &first.group, &lease, &hashes, &statuses],
        )
        .await?
    };
    let r: Value = row.get(0);
    if r.get("ok").and_then(Value::as_bool) != Some(true) {
        let e = r
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("ack failed");
        return Ok(vec![Out::fail(e); g.len()]);
    }
    let mut outs = map_lists(&r, g);
    if let Some(at) = r.get("redeliverAt").and_then(Value::as_str) {
        let at = crate::util::micros_to_ms(at);
        outs.iter_mut()
            .filter(|o| o.success)
            .for_each(|o| o.redeliver_at = Some(at.clone()));
    }
    if r.get("dlq").and_then(Value::as_bool) == Some(true) {
        file_dlq(state, &db, g, &r, &mut outs).await?;
    }
    Ok(outs)
}

/// Precedence unresolved > stale > noop. Membership depends only on the hash and on
/// whether the status is a signal, so a set lookup per item is exact.
fn map_lists(r: &Value, g: &[&Item]) -> Vec<Out> {
    let list = |k: &str| -> HashSet<String> {
        r.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (unresolved, stale, noop) = (
        list("unresolvedHashes"),
        list("staleHashes"),
        list("noopHashes"),
    );
    let released = r
        .get("leaseReleased")
        .and_then(Value::as_bool)
        .unwrap_or(false);
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
                Out::ok(released)
            }
        })
        .collect()
}

/// Files the DLQ row (native extraction) for a dlq:true verdict and marks the items.
async fn file_dlq(
    state: &AppState,
    db: &deadpool_postgres::Object,
    g: &[&Item],
    r: &Value,
    outs: &mut [Out],
) -> ApiResult<()> {
    let first = g[0];
    let off = r
        .get("off")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::Internal(format!("dlq verdict without off: {r}")))?;
    let error = dlq_error_text(db, first.pid, off, g).await?;
    let row = db
        .query_one(
            &db.prepare_cached(
                "SELECT queen.log_dlq_head_v1($1::uuid, $2::text, $3::text, $4::bigint, \
             NULL::uuid, NULL::text, NULL::jsonb, $5::text)",
            )
            .await?,
            &[&first.pid, &first.group, &first.lease, &off, &error],
        )
        .await?;
    let filed: Value = row.get(0);
    if filed.get("ok").and_then(Value::as_bool) == Some(true) {
        Metrics::add(&state.metrics.dlq_filed, 1);
        for o in outs.iter_mut() {
            o.dlq = true;
            o.lease_released = true;
        }
    } else {
        outs.fill(Out::fail(DLQ_REJECTED));
    }
    Ok(())
}

/// The nack of the poison transaction (the frame at `off`), else the first nack with an
/// error, else "Retries exhausted".
async fn dlq_error_text(
    db: &deadpool_postgres::Object,
    pid: Uuid,
    off: i64,
    g: &[&Item],
) -> ApiResult<String> {
    let row = db
        .query_opt(
            &db.prepare_cached(
                "SELECT substring(hashes FROM (($2 - base_offset) * 16 + 1)::int FOR 16)
               FROM queen.log_txns
              WHERE partition_id = $1 AND base_offset <= $2 AND end_offset >= $2",
            )
            .await?,
            &[&pid, &off],
        )
        .await?;
    let poison: Option<Vec<u8>> = row.map(|r| r.get(0));
    let nacks = || {
        g.iter()
            .filter(|it| it.status.is_signal())
            .filter_map(|it| it.error.as_ref().map(|e| (it, e)))
    };
    let by_poison = poison.and_then(|p| {
        nacks()
            .find(|(it, _)| it.hash.as_slice() == p.as_slice())
            .map(|(_, e)| e.clone())
    });
    Ok(by_poison
        .or_else(|| nacks().next().map(|(_, e)| e.clone()))
        .unwrap_or_else(|| RETRIES_EXHAUSTED.to_string()))
}
