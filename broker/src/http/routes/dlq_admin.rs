//! DLQ redrive and deletion by row id or by queue/group (Queen's paths where Queen has
//! them; the listing is routes/dlq.rs):
//!
//! - `POST /api/v1/dlq/{id}/replay` (Queen's): one row back into its partition;
//! - `POST /api/v1/dlq/redrive` (ours) `{"ids":[...]}` or `{"queue", "consumerGroup"?,
//!   "limit"?}`: many rows, oldest failure first;
//! - `DELETE /api/v1/dlq?queue=&consumerGroup=&limit=` (Queen's bulk purge, plus a limit);
//! - `DELETE /api/v1/dlq/{id}` (ours): one row.
//!
//! Every call is scoped to the caller's tenant: another tenant's row is "gone" (404).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::wire::Redriven;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::engine::write_gate::Targets;
use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::dlq_ops::{delete, redrive, redriven, replay_answer};
use crate::http::input::{body_or_empty, int_query, parse_json, Param};
use crate::ops::metrics::Metrics;
use crate::state::AppState;

/// Most rows one redrive request moves (by ids or by queue); page with more requests.
pub const MAX_REDRIVE: usize = 1000;
/// Rows a redrive by queue moves when no limit is given.
const DEFAULT_REDRIVE: i64 = 100;

fn gone(id: &str) -> Response {
    let body =
        json!({"success": false, "result": "gone", "dlqId": id, "error": "Message not found"});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// Queen's replay body; any other key is refused naming it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReplayIn {
    queue: Option<String>,
    partition: Option<String>,
}

/// `POST /api/v1/dlq/{id}/replay`. Queen's optional target overrides are refused: a
/// redriven message goes back into its own partition only.
pub async fn replay(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let b: ReplayIn = body_or_empty(&body)?;
    if b.queue.is_some() || b.partition.is_some() {
        return Err(ApiError::bad(
            "replay into another queue or partition is not supported: a DLQ row goes back \
             into its own partition",
        ));
    }
    let Ok(uid) = Uuid::parse_str(&id) else {
        return Ok(gone(&id));
    };
    let r = redrive(&state, tenant, &[uid]).await?;
    Ok(replay_answer(&r.results[0], r.moved).unwrap_or_else(|| gone(&id)))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RedriveIn {
    ids: Option<Vec<Uuid>>,
    queue: Option<String>,
    consumer_group: Option<String>,
    limit: Option<i64>,
}

/// `POST /api/v1/dlq/redrive`: by ids, or by queue (and group) with a limit.
pub async fn redrive_many(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let b: RedriveIn = parse_json(&body)?;
    let r = match (&b.ids, &b.queue) {
        (Some(ids), None) if b.consumer_group.is_none() && b.limit.is_none() => {
            if ids.is_empty() || ids.len() > MAX_REDRIVE {
                return Err(ApiError::bad(format!(
                    "ids must hold 1 to {MAX_REDRIVE} DLQ row ids, got {}",
                    ids.len()
                )));
            }
            redrive(&state, tenant, ids).await?
        }
        (None, Some(queue)) => {
            let limit = b.limit.unwrap_or(DEFAULT_REDRIVE);
            if !(1..=MAX_REDRIVE as i64).contains(&limit) {
                return Err(ApiError::bad(format!(
                    "limit must be an integer from 1 to {MAX_REDRIVE}, got {limit}"
                )));
            }
            redrive_queue(&state, tenant, queue, b.consumer_group.as_deref(), limit).await?
        }
        _ => {
            return Err(ApiError::bad(
                "give either ids, or queue (with consumerGroup and limit optional)",
            ))
        }
    };
    Ok(Json(
        json!({"success": true, "moved": r.moved, "results": r.results}),
    ))
}

async fn redrive_queue(
    state: &AppState,
    tenant: Uuid,
    queue: &str,
    group: Option<&str>,
    limit: i64,
) -> ApiResult<Redriven> {
    // As crate::http::dlq_ops::redrive: the write gate first (any partition of the queue).
    state
        .gate
        .admit("a DLQ redrive", Targets::Queues(tenant, &[queue]))
        .await?;
    let r = state
        .db
        .conn()
        .await?
        .dlq_redrive_queue(queue, group, limit as i32, tenant)
        .await?;
    redriven(state, tenant, &r);
    Ok(r)
}

/// `DELETE /api/v1/dlq?queue=&consumerGroup=&limit=`: Queen's bulk purge (queue
/// required), oldest failure first, at most `limit` rows when given.
pub async fn purge(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(params): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let get = |k: &str| params.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let Some(queue) = get("queue") else {
        let body = json!({"success": false, "error": "queue is required",
                          "message": "Bulk DLQ purge requires an exact queue name"});
        return Ok((StatusCode::BAD_REQUEST, Json(body)).into_response());
    };
    // Absent: every matching row.
    let limit = Param::new("limit", 1, i32::MAX as i64);
    let limit = int_query(&params, &limit)?.map(|n| n as i32);
    let group = get("consumerGroup");
    let d = state
        .db
        .conn()
        .await?
        .dlq_delete_queue(queue, group, limit, tenant)
        .await?;
    Metrics::add(&state.metrics.dlq_deleted, d.deleted as u64);
    let body =
        json!({"success": true, "queue": queue, "consumerGroup": group, "deleted": d.deleted});
    Ok(Json(body).into_response())
}

/// `DELETE /api/v1/dlq/{id}`: one row.
pub async fn delete_one(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let Ok(uid) = Uuid::parse_str(&id) else {
        return Ok(gone(&id));
    };
    let d = delete(&state, tenant, &[uid]).await?;
    if d.deleted == 0 {
        return Ok(gone(&id));
    }
    Ok(Json(json!({"success": true, "dlqId": uid, "deleted": d.deleted})).into_response())
}
