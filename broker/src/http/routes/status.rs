//! Queen's status and consumer-group views, with Queen's paths and shapes
//! (`admin.get_queue_stats`, `get_queue_detail`, `list_consumer_groups`,
//! `get_consumer_group`, `get_lagging_consumers`):
//!
//! - `GET /api/v1/status/queues?queue=&namespace=&task=&limit=&offset=`
//! - `GET /api/v1/status/queues/{queue}`
//! - `GET /api/v1/status/queues/{queue}/messages?limit=&offset=` (`get_queue_messages_v1`)
//! - `GET /api/v1/consumer-groups`
//! - `GET /api/v1/consumer-groups/lagging?minLagSeconds=`
//! - `GET /api/v1/consumer-groups/{group}`
//!
//! Rendered from the same statistics as routes/resources.rs. The queue-mode cursor is
//! the group `__QUEUE_MODE__`, as in Queen.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::wire::{ListedMessage, MessagePage};
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::{int_query, seconds_query, Param, OFFSET};
use crate::http::known_queue::KnownQueue;
use crate::ops::queue_stats::{load, QueueStats};
use crate::ops::queue_views::{
    figures_json, group_totals, group_totals_json, partition_out, queue_figures, PartitionOut,
};
use crate::state::AppState;

/// `/status/queues` page size: Queen's default 100; at most 1000 a page (ours, as the
/// DLQ listing's).
const STATUS_LIMIT_DEFAULT: i64 = 100;
const STATUS_LIMIT: Param<'static> = Param::new("limit", 1, 1000);
/// `/status/queues/{queue}/messages` page size: Queen's default 50.
const QUEUE_MESSAGES_DEFAULT: i64 = 50;
const QUEUE_MESSAGES_LIMIT: Param<'static> = Param::new("limit", 0, queen_log::browse::MAX_PAGE);

/// `/consumer-groups/lagging` threshold default (Queen's server default), seconds, and
/// its range.
const LAGGING_DEFAULT_S: f64 = 3600.0;
const MIN_LAG: Param<'static> = Param::new("minLagSeconds", 0, i32::MAX as i64);

/// `GET /api/v1/status/queues`: queues newest first, filtered by name, namespace and
/// task, one page. `pending` is not net of processing here (as in Queen).
pub async fn queues(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let limit = int_query(&params, &STATUS_LIMIT)?.unwrap_or(STATUS_LIMIT_DEFAULT);
    let offset = int_query(&params, &OFFSET)?.unwrap_or(0);
    let get = |k: &str| params.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let queues = load(&state.db, Some(tenant), get("queue")).await?;
    let page: Vec<Value> = queues
        .iter()
        .filter(|q| get("namespace").is_none_or(|n| q.meta.namespace.as_deref() == Some(n)))
        .filter(|q| get("task").is_none_or(|t| q.meta.task.as_deref() == Some(t)))
        .skip(offset as usize)
        .take(limit as usize)
        .map(|q| {
            json!({
                "id": q.meta.id, "name": q.meta.name, "namespace": q.meta.namespace,
                "task": q.meta.task, "createdAt": q.meta.created_at,
                "partitions": q.partitions.len(),
                "messages": figures_json(&queue_figures(q), false, false),
            })
        })
        .collect();
    Ok(Json(json!({
        "queues": page,
        "pagination": {"limit": limit, "offset": offset},
    })))
}

/// A queue's configuration as Queen's status detail has it: the stored options, with
/// the settings this engine applies written over them.
fn config_json(q: &QueueStats) -> Value {
    let mut c = match &q.meta.options {
        Value::Object(o) => Value::Object(o.clone()),
        _ => json!({}),
    };
    c["leaseTime"] = json!(q.meta.lease_time);
    c["retryLimit"] = json!(q.meta.retry_limit);
    c["deadLetterQueue"] = json!(q.meta.dead_letter_queue);
    c["delayedProcessing"] = json!(q.meta.delayed_processing);
    c["retentionSeconds"] = json!(q.meta.retention_seconds);
    c
}

/// `GET /api/v1/status/queues/{queue}`: Queen's status detail.
pub async fn queue_detail(KnownQueue(q): KnownQueue) -> Response {
    let priority = queen_log::options::priority(&q.meta.options);
    let detail = StatusDetail {
        queue: json!({
            "id": q.meta.id, "name": q.meta.name, "namespace": q.meta.namespace,
            "task": q.meta.task, "priority": priority, "createdAt": q.meta.created_at,
            "config": config_json(&q),
        }),
        partitions: q.partitions.iter().map(partition_out).collect(),
        totals: json!({"messages": figures_json(&queue_figures(&q), false, true)}),
    };
    Json(detail).into_response()
}

/// `GET /api/v1/status/queues/{queue}/messages`: a page of the queue's messages, newest
/// first, in Queen's keys; `status` is the queue-mode status (Queen reads the
/// `__QUEUE_MODE__` cursor here), `dead_letter` when filed. A queue nobody has is an
/// empty page, as in Queen.
pub async fn queue_messages(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(queue): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<QueueMessage>>> {
    let limit = int_query(&params, &QUEUE_MESSAGES_LIMIT)?.unwrap_or(QUEUE_MESSAGES_DEFAULT);
    let offset = int_query(&params, &OFFSET)?.unwrap_or(0);
    let filters = json!({"queue": queue, "limit": limit, "offset": offset});
    let page = state
        .db
        .conn()
        .await?
        .list_messages::<MessagePage>(&filters, tenant)
        .await?;
    Ok(Json(page.messages.into_iter().map(queue_message).collect()))
}

/// One listed message in `get_queue_messages_v1`'s keys.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueMessage {
    id: Option<String>,
    transaction_id: Option<String>,
    partition_id: Option<String>,
    queue_path: Option<String>,
    queue: Option<String>,
    partition: Option<String>,
    status: Option<String>,
    created_at: Option<String>,
}

/// The queue-mode status, except a filed message's `dead_letter`.
fn queue_message(m: ListedMessage) -> QueueMessage {
    let status = if m.status.as_deref() == Some("dead_letter") {
        m.status
    } else {
        m.queue_status
    };
    QueueMessage {
        id: m.id,
        transaction_id: m.transaction_id,
        partition_id: m.partition_id,
        queue_path: m.queue_path,
        queue: m.queue,
        partition: m.partition,
        status,
        created_at: m.created_at,
    }
}

/// Queen's status detail (the partitions typed, as in the resource detail).
#[derive(serde::Serialize)]
struct StatusDetail<'a> {
    queue: Value,
    partitions: Vec<PartitionOut<'a>>,
    totals: Value,
}

/// `GET /api/v1/consumer-groups`: one element per (group, queue), with the group's
/// subscription record for that queue (null fields for queue mode, which has none).
pub async fn groups(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<Vec<Value>>> {
    let queues = load(&state.db, Some(tenant), None).await?;
    let subs = state.db.conn().await?.subscriptions(tenant).await?;
    let mut out = Vec::new();
    for q in &queues {
        for g in q.groups() {
            let t = group_totals(q, g);
            let mut v = group_totals_json(g, &t);
            let sub = subs.get(&(q.meta.name.clone(), g.to_string()));
            let extra = json!({
                "topics": [q.meta.name], "queueName": q.meta.name,
                "members": t.partitions, "partitionCursors": t.partitions,
                "activeWorkers": t.workers,
                "partitionsWithLag": t.partitions_with_lag, "totalLag": t.lag,
                "maxTimeLag": t.max_age_s.map_or(0, |a| a.round() as i64),
                "storage": "segments", "kind": "queen",
                "subscriptionMode": sub.map(|s| s.mode.as_str()),
                "subscriptionTimestamp": sub.and_then(|s| s.timestamp.as_deref()),
                "subscriptionCreatedAt": sub.and_then(|s| s.created_at.as_deref()),
                // The group's stored policy (docs/decisions.md, "Conflation").
                "conflation": sub.is_some_and(|s| s.conflation),
            });
            for (k, x) in extra.as_object().expect("object") {
                v[k] = x.clone();
            }
            out.push(v);
        }
    }
    Ok(Json(out))
}

/// `GET /api/v1/consumer-groups/{group}`: the group's cursors per queue, or Queen's 404.
pub async fn group(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(group): Path<String>,
) -> ApiResult<Response> {
    let queues = load(&state.db, Some(tenant), None).await?;
    let subs = state.db.conn().await?.subscriptions(tenant).await?;
    let mut out = serde_json::Map::new();
    for q in &queues {
        let parts: Vec<Value> = q
            .cursors()
            .filter(|(_, c)| c.group == group)
            .map(|(p, c)| {
                json!({
                    "partition": p.name, "partitionId": p.id,
                    "workerId": c.worker, "lastConsumedAt": Value::Null,
                    "totalConsumed": c.total_consumed, "offsetLag": c.lag,
                    "timeLagSeconds": c.oldest_unconsumed_age_s.map_or(0, |a| a.round() as i64),
                    "leaseActive": c.leased, "committed": c.committed,
                    "leasedMessages": c.leased_messages, "retries": c.retries,
                    "deadLetter": c.dlq, "redeliverAt": c.redeliver_at,
                })
            })
            .collect();
        if !parts.is_empty() {
            let conflation = subs
                .get(&(q.meta.name.clone(), group.clone()))
                .is_some_and(|s| s.conflation);
            out.insert(
                q.meta.name.clone(),
                json!({"conflation": conflation, "kind": "queen", "partitions": parts}),
            );
        }
    }
    if out.is_empty() {
        return Ok((
            StatusCode::NOT_FOUND,
            Json(json!({"error": "Consumer group not found"})),
        )
            .into_response());
    }
    Ok(Json(Value::Object(out)).into_response())
}

/// `GET /api/v1/consumer-groups/lagging?minLagSeconds=`: cursors whose oldest
/// unconsumed message is at least that old, oldest first.
pub async fn lagging(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<Value>>> {
    let min = seconds_query(&params, &MIN_LAG)?.unwrap_or(LAGGING_DEFAULT_S);
    let queues = load(&state.db, Some(tenant), None).await?;
    let mut rows: Vec<(f64, Value)> = queues
        .iter()
        .flat_map(|q| q.cursors().map(move |(p, c)| (q, p, c)))
        .filter_map(|(q, p, c)| {
            let age = c
                .oldest_unconsumed_age_s
                .filter(|a| *a >= min && c.lag > 0)?;
            Some((
                age,
                json!({
                    "consumer_group": c.group, "queue_name": q.meta.name,
                    "partition_name": p.name, "partition_id": p.id, "worker_id": c.worker,
                    "kind": "queen", "offset_lag": c.lag,
                    "time_lag_seconds": age.round() as i64,
                    "lag_hours": (age / 3600.0 * 100.0).round() / 100.0,
                    "oldest_unconsumed_at": c.oldest_unconsumed_at,
                    "last_consumed_at": Value::Null,
                }),
            ))
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    Ok(Json(rows.into_iter().map(|r| r.1).collect()))
}
