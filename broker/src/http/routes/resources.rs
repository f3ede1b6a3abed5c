//! Queen's admin resource views, with Queen's paths and shapes so its SDKs' admin
//! helpers work (`admin.list_queues`, `get_queue`, `get_queue_depth`, `get_partitions`,
//! `get_overview`):
//!
//! - `GET /api/v1/resources/queues`
//! - `GET /api/v1/resources/queues/{queue}`
//! - `GET /api/v1/resources/queues/{queue}/depth?group=`
//! - `GET /api/v1/resources/partitions?queue=&limit=`
//! - `GET /api/v1/resources/overview`
//! - `GET /api/v1/resources/namespaces`, `GET /api/v1/resources/tasks`
//!
//! Every figure comes from `queen.queue_stats_v1` (crate::ops::queue_stats) with Queen's
//! arithmetic (`queen_log::stats`); our per-group lag figures are added under
//! `consumerGroups`. Fields we cannot fill without scanning segments (`segments`,
//! `retainedBytes`) are null (docs/decisions.md, "Statistics").

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::stats::{median, Figures};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::{int_query, Param};
use crate::http::known_queue::{queue_not_found, KnownQueue};
use crate::ops::queue_stats::{load, PartitionStats, QueueStats};
use crate::ops::queue_views::{
    figures_json, figures_out, group_totals, group_totals_json, partition_out, queue_figures,
    FiguresOut, PartitionOut,
};
use crate::state::AppState;

/// `GET /api/v1/resources/partitions` `limit`: Queen's default 610 and largest 5000.
const PARTITIONS_DEFAULT: i64 = 610;
const PARTITIONS_LIMIT: Param<'static> = Param::new("limit", 1, 5000);

fn groups_json(q: &QueueStats) -> Vec<Value> {
    q.groups()
        .into_iter()
        .map(|g| group_totals_json(g, &group_totals(q, g)))
        .collect()
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
    let queues = load(&state.db, Some(tenant), None).await?;
    let mut out = state.db.conn().await?.store_sizes(tenant).await?;
    out["queues"] = json!(queues.iter().map(queue_json).collect::<Vec<_>>());
    Ok(Json(out))
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
pub async fn get_queue(KnownQueue(q): KnownQueue) -> Response {
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
    Json(detail).into_response()
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
    KnownQueue(q): KnownQueue,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
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
    Json(json!({
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
    .into_response()
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
    let limit = int_query(&params, &PARTITIONS_LIMIT)?.unwrap_or(PARTITIONS_DEFAULT);
    let queues = load(&state.db, Some(tenant), queue).await?;
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
    let queues = load(&state.db, Some(tenant), None).await?;
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

/// Queen's namespace (task) list: one entry per non-empty name among the caller's queues,
/// by name, with its queues, partitions and messages `{total, pending}` (pending net of
/// what is leased, as in Queen's lists).
fn grouped_by(
    queues: &[QueueStats],
    label: &str,
    key: fn(&QueueStats) -> Option<&str>,
) -> Vec<Value> {
    let mut by: BTreeMap<&str, (usize, usize, Figures)> = BTreeMap::new();
    for q in queues {
        let Some(name) = key(q).filter(|n| !n.is_empty()) else {
            continue;
        };
        let e = by.entry(name).or_default();
        e.0 += 1;
        e.1 += q.partitions.len();
        e.2.add(&queue_figures(q));
    }
    by.into_iter()
        .map(|(name, (queues, partitions, f))| {
            json!({
                label: name,
                "queues": queues,
                "partitions": partitions,
                "messages": {"total": f.total, "pending": f.ready()},
            })
        })
        .collect()
}

/// `GET /api/v1/resources/namespaces`: Queen's `get_namespaces` answer.
pub async fn namespaces(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<Value>> {
    let queues = load(&state.db, Some(tenant), None).await?;
    Ok(Json(json!({
        "namespaces": grouped_by(&queues, "namespace", |q| q.meta.namespace.as_deref()),
    })))
}

/// `GET /api/v1/resources/tasks`: Queen's `get_tasks` answer.
pub async fn tasks(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<Value>> {
    let queues = load(&state.db, Some(tenant), None).await?;
    Ok(Json(json!({
        "tasks": grouped_by(&queues, "task", |q| q.meta.task.as_deref()),
    })))
}
