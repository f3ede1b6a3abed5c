//! Queen's admin resource views, with Queen's paths and shapes so its SDKs' admin
//! helpers work (`admin.list_queues`, `get_queue`, `get_queue_depth`, `get_partitions`,
//! `get_overview`):
//!
//! - `GET /api/v1/resources/queues`
//! - `GET /api/v1/resources/queues/{queue}`
//! - `GET /api/v1/resources/queues/{queue}/depth?group=`
//! - `GET /api/v1/resources/partitions?queue=&limit=`
//! - `GET /api/v1/resources/overview`
//!
//! Every figure comes from `queen.queue_stats_v1` (crate::queue_stats) with Queen's
//! arithmetic (`queen_log::stats`); our per-group lag figures are added under
//! `consumerGroups`. Fields we cannot fill without scanning segments (`segments`,
//! `retainedBytes`) are null; see broker/README.md "Queue statistics".

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::stats::{median, Cursor, Figures, GroupTotals};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::queue_stats::{load, PartitionStats, QueueStats};
use crate::routes::auth::Tenant;
use crate::state::AppState;

/// `GET /api/v1/resources/partitions` default and largest `limit` (Queen's).
const PARTITIONS_DEFAULT: i64 = 610;
const PARTITIONS_MAX: i64 = 5000;

/// Queen's 404 for an unknown queue.
pub(crate) fn queue_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "Queue not found"})),
    )
        .into_response()
}

/// Queen's message figures on the wire. Typed, like every per-partition part of these
/// views: a queue of 10,000 partitions renders ~8 MB, and `json!` maps cost most of it.
#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FiguresOut {
    total: i64,
    pending: i64,
    processing: i64,
    completed: i64,
    /// Queen has `failed: null` in some views (no per-partition failure counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<Option<()>>,
    dead_letter: i64,
}

/// Queen's message figures; `net` subtracts the leased ones from pending (its resource
/// views do, its status views do not); `failed` is null where Queen has it null.
pub(crate) fn figures_out(f: &Figures, net: bool, with_failed: bool) -> FiguresOut {
    FiguresOut {
        total: f.total,
        pending: if net { f.ready() } else { f.pending },
        processing: f.processing,
        completed: f.completed,
        failed: with_failed.then_some(None),
        dead_letter: f.dead_letter,
    }
}

pub(crate) fn figures_json(f: &Figures, net: bool, with_failed: bool) -> Value {
    serde_json::to_value(figures_out(f, net, with_failed)).expect("figures serialise")
}

pub(crate) fn queue_figures(q: &QueueStats) -> Figures {
    let mut f = Figures::default();
    for p in &q.partitions {
        f.add(&p.stats.figures());
    }
    f
}

/// Our per-(partition, group) figures.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CursorOut<'a> {
    name: &'a str,
    committed: i64,
    lag: i64,
    oldest_unconsumed_at: Option<&'a str>,
    oldest_unconsumed_age_seconds: Option<f64>,
    leased: bool,
    leased_messages: i64,
    worker_id: Option<&'a str>,
    retries: i64,
    total_consumed: i64,
    evicted: i64,
    redeliver_at: Option<&'a str>,
    dead_letter: i64,
}

impl<'a> From<&'a Cursor> for CursorOut<'a> {
    fn from(c: &'a Cursor) -> Self {
        CursorOut {
            name: &c.group,
            committed: c.committed,
            lag: c.lag,
            oldest_unconsumed_at: c.oldest_unconsumed_at.as_deref(),
            oldest_unconsumed_age_seconds: c.oldest_unconsumed_age_s,
            leased: c.leased,
            leased_messages: c.leased_messages,
            worker_id: c.worker.as_deref(),
            retries: c.retries,
            total_consumed: c.total_consumed,
            evicted: c.evicted,
            redeliver_at: c.redeliver_at.as_deref(),
            dead_letter: c.dlq,
        }
    }
}

/// Our per-(queue, group) roll-up.
pub(crate) fn group_totals_json(name: &str, t: &GroupTotals) -> Value {
    json!({
        "name": name,
        "partitions": t.partitions,
        "partitionsWithLag": t.partitions_with_lag,
        "lag": t.lag,
        "maxTimeLagSeconds": t.max_age_s,
        "leasedPartitions": t.leased_partitions,
        "leasedMessages": t.leased_messages,
        "members": t.workers,
        "retries": t.retries,
        "totalConsumed": t.total_consumed,
        "evicted": t.evicted,
        "deadLetter": t.dlq,
        "state": t.state(),
    })
}

pub(crate) fn group_totals(q: &QueueStats, group: &str) -> GroupTotals {
    GroupTotals::of(
        q.cursors()
            .filter(|(_, c)| c.group == group)
            .map(|(_, c)| c),
    )
}

fn groups_json(q: &QueueStats) -> Vec<Value> {
    q.groups()
        .into_iter()
        .map(|g| group_totals_json(g, &group_totals(q, g)))
        .collect()
}

/// One partition as Queen's queue detail has it, plus our offsets and cursors.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PartitionOut<'a> {
    id: uuid::Uuid,
    name: &'a str,
    created_at: &'a str,
    messages: FiguresOut,
    stats: FiguresOut,
    cursor: CursorTotals,
    last_activity: Option<&'a str>,
    oldest_message: Option<&'a str>,
    newest_message: Option<&'a str>,
    /// Would need a scan of the partition's segments: not filled.
    retained_bytes: Option<()>,
    log_start: i64,
    last_offset: i64,
    consumer_groups: Vec<CursorOut<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CursorTotals {
    total_consumed: i64,
    batches_consumed: i64,
}

pub(crate) fn partition_out(p: &PartitionStats) -> PartitionOut<'_> {
    let f = figures_out(&p.stats.figures(), false, true);
    // The slowest reader's consumption (Queen's partition cursor).
    let slowest = p
        .stats
        .cursors
        .iter()
        .filter(|c| c.committed == p.stats.floor())
        .map(|c| c.total_consumed)
        .max()
        .unwrap_or(0);
    PartitionOut {
        id: p.id,
        name: &p.name,
        created_at: &p.created_at,
        messages: f,
        stats: f,
        cursor: CursorTotals {
            total_consumed: slowest,
            batches_consumed: 0,
        },
        last_activity: p.last_lease_at.as_deref(),
        oldest_message: p.stats.oldest_unconsumed().map(|(at, _)| at),
        newest_message: p.newest_message(),
        retained_bytes: None,
        log_start: p.stats.log_start,
        last_offset: p.stats.last_offset,
        consumer_groups: p.stats.cursors.iter().map(CursorOut::from).collect(),
    }
}

/// One queue of Queen's queue list.
fn queue_json(q: &QueueStats) -> Value {
    json!({
        "id": q.meta.id,
        "name": q.meta.name,
        "queue": q.meta.name,
        "namespace": q.meta.namespace,
        "task": q.meta.task,
        "storage": "segments",
        "partitions": q.partitions.len(),
        "segments": Value::Null,
        "messages": figures_json(&queue_figures(q), true, false),
        "retainedBytes": Value::Null,
        "options": q.meta.options,
        "createdAt": q.meta.created_at,
        "consumerGroups": groups_json(q),
    })
}

/// `GET /api/v1/resources/queues`: every queue of the caller's tenant, newest first.
pub async fn list_queues(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<Value>> {
    let queues = load(&state, Some(tenant), None).await?;
    Ok(Json(json!({
        "queues": queues.iter().map(queue_json).collect::<Vec<_>>(),
        // Queen's key-value and timer stores do not exist here.
        "kvRows": 0, "kvBytes": 0, "timerRows": 0, "timerBytes": 0,
    })))
}

/// One queue by name, or Queen's 404.
pub(crate) async fn one_queue(
    state: &AppState,
    tenant: uuid::Uuid,
    queue: &str,
) -> ApiResult<Option<QueueStats>> {
    Ok(load(state, Some(tenant), Some(queue))
        .await?
        .into_iter()
        .next())
}

/// Queen's queue detail.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueueDetail<'a> {
    id: uuid::Uuid,
    name: &'a str,
    namespace: Option<&'a str>,
    task: Option<&'a str>,
    created_at: Option<&'a str>,
    options: &'a Value,
    partitions: Vec<PartitionOut<'a>>,
    /// Would need a count of every segment: not filled.
    segments: Option<()>,
    totals: FiguresOut,
    retained_bytes: Option<()>,
    consumer_groups: Vec<Value>,
}

/// `GET /api/v1/resources/queues/{queue}`: Queen's queue detail.
pub async fn get_queue(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(queue): Path<String>,
) -> ApiResult<Response> {
    let Some(q) = one_queue(&state, tenant, &queue).await? else {
        return Ok(queue_not_found());
    };
    let detail = QueueDetail {
        id: q.meta.id,
        name: &q.meta.name,
        namespace: q.meta.namespace.as_deref(),
        task: q.meta.task.as_deref(),
        created_at: q.meta.created_at.as_deref(),
        options: &q.meta.options,
        partitions: q.partitions.iter().map(partition_out).collect(),
        segments: None,
        totals: figures_out(&queue_figures(&q), false, true),
        retained_bytes: None,
        consumer_groups: groups_json(&q),
    };
    Ok(Json(detail).into_response())
}

/// (pending, processing) of one partition: for a group, its own cursor (a partition it
/// has no cursor on yet is wholly pending); else the slowest reader's.
fn depth_of(p: &PartitionStats, group: Option<&str>) -> (i64, i64) {
    match group {
        None => {
            let f = p.stats.figures();
            (f.pending, f.processing)
        }
        Some(g) => match p.stats.cursors.iter().find(|c| c.group == g) {
            Some(c) => (c.lag, c.leased_messages.min(c.lag)),
            None => (p.stats.figures().total, 0),
        },
    }
}

/// `GET /api/v1/resources/queues/{queue}/depth?group=`: Queen's depth view.
pub async fn queue_depth(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(queue): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let Some(q) = one_queue(&state, tenant, &queue).await? else {
        return Ok(queue_not_found());
    };
    let group = params
        .get("group")
        .map(String::as_str)
        .filter(|g| !g.is_empty());
    let parts: Vec<(String, i64, i64)> = q
        .partitions
        .iter()
        .map(|p| {
            let (pending, processing) = depth_of(p, group);
            (p.name.clone(), pending, processing)
        })
        .collect();
    let pending: i64 = parts.iter().map(|p| p.1).sum();
    let processing: i64 = parts.iter().map(|p| p.2).sum();
    let ready = (pending - processing).max(0);
    Ok(Json(json!({
        "queue": q.meta.name,
        "group": group,
        "pending": pending,
        "processing": processing,
        "ready": ready,
        "partitionsPending": parts.iter().filter(|p| p.1 > 0).count(),
        "partitionsReady": parts.iter().filter(|p| p.1 > p.2).count(),
        "conflation": false,
        "effectivePending": pending,
        "effectiveReady": ready,
        "partitions": parts.iter().map(|(name, pe, pr)| json!({
            "partition": name, "pending": pe, "processing": pr, "ready": (pe - pr).max(0),
        })).collect::<Vec<_>>(),
    }))
    .into_response())
}

/// `GET /api/v1/resources/partitions?queue=&limit=`: the partitions holding the most
/// pending messages, most first.
pub async fn partitions(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let queue = params
        .get("queue")
        .map(String::as_str)
        .filter(|q| !q.is_empty());
    let limit = match params.get("limit").filter(|v| !v.is_empty()) {
        None => PARTITIONS_DEFAULT,
        Some(v) => v
            .parse::<i64>()
            .map_err(|_| ApiError::bad(format!("limit must be an integer, got {v:?}")))?
            .clamp(1, PARTITIONS_MAX),
    };
    let queues = load(&state, Some(tenant), queue).await?;
    if queue.is_some() && queues.is_empty() {
        return Ok(queue_not_found());
    }
    let mut rows: Vec<(i64, Value)> = queues
        .iter()
        .flat_map(|q| {
            q.partitions.iter().map(|p| {
                let f = p.stats.figures();
                let lag = p
                    .stats
                    .oldest_unconsumed()
                    .map(|(_, age)| age.round() as i64);
                let row = json!({
                    "queue": q.meta.name, "partition": p.name, "id": p.id,
                    "pending": f.pending, "processing": f.processing,
                    "lagSeconds": lag.filter(|_| f.pending > 0),
                });
                (f.pending, row)
            })
        })
        .collect();
    let walked = rows.len();
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    rows.truncate(limit as usize);
    Ok(Json(json!({
        "partitions": rows.into_iter().map(|r| r.1).collect::<Vec<_>>(),
        "walked": walked,
        "truncated": false,
    }))
    .into_response())
}

/// avg / median / min / max of some figures (zeros when there are none).
fn spread(v: Vec<f64>) -> Value {
    let n = v.len() as f64;
    let (min, max) = v
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    let avg = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / n
    };
    json!({
        "avg": avg.round() as i64,
        "median": median(v.clone()).round() as i64,
        "min": if v.is_empty() { 0 } else { min.round() as i64 },
        "max": max.round() as i64,
    })
}

/// `GET /api/v1/resources/overview`: Queen's system overview, walked live
/// (`statsAge` 0). `lag.time` is per queue the age of its oldest unconsumed message,
/// `lag.offset` its largest lag of one cursor, over the queues that lag.
pub async fn overview(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<Value>> {
    let queues = load(&state, Some(tenant), None).await?;
    let mut total = Figures::default();
    let (mut times, mut offsets) = (Vec::new(), Vec::new());
    for q in &queues {
        total.add(&queue_figures(q));
        let age = q
            .partitions
            .iter()
            .filter_map(|p| p.stats.oldest_unconsumed().map(|(_, a)| a))
            .fold(0.0f64, f64::max);
        let lag = q.cursors().map(|(_, c)| c.lag).max().unwrap_or(0);
        if lag > 0 {
            times.push(age);
            offsets.push(lag as f64);
        }
    }
    let distinct = |f: &dyn Fn(&QueueStats) -> Option<&String>| {
        let mut v: Vec<&String> = queues.iter().filter_map(f).collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    let mut messages = figures_json(&total, true, false);
    messages["failed"] = json!(0);
    Ok(Json(json!({
        "queues": queues.len(),
        "partitions": queues.iter().map(|q| q.partitions.len()).sum::<usize>(),
        "namespaces": distinct(&|q| q.meta.namespace.as_ref().filter(|n| !n.is_empty())),
        "tasks": distinct(&|q| q.meta.task.as_ref().filter(|t| !t.is_empty())),
        "messages": messages,
        "lag": {"time": spread(times), "offset": spread(offsets)},
        "timestamp": crate::util::iso_ms(chrono::Utc::now()),
        "statsAge": 0,
    })))
}
