//! Queen 2.x's timers (docs/decisions.md, "Timers"): scheduled messages, one pending per
//! (queue, key), delivered into the queue not before `deliverAt` by the sweeper
//! (crate::ops::timers).
//!
//! - `POST /api/v1/timers` `{operations: [{op: schedule|reschedule|cancel, queue,
//!   timerKey, payload (base64), delayMs, txn?, partition?, payloadZstd?}]}` →
//!   `{results: [{ok, status, queue, timerKey, txn, messageId, deliverAt}]}`,
//!   index-aligned, in one transaction;
//! - `DELETE /api/v1/timers/{queue}/{*key}?txn=` → one result (`cancelled` or `absent`);
//! - `GET /api/v1/timers/{queue}/{*key}` → the timer with its stored payload, or
//!   `{found: false}`;
//! - `GET /api/v1/timers/{queue}?after=&limit=` → `{queue, rows, truncated, nextAfter}`.
//!
//! A refusal answers the SDK's envelope `{"error": "timers_bad_request", "reason",
//! "detail"}` (400), nothing written.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::timers::{list_limit, OpKind, TimerOp, TimerResult};
use serde_json::{json, Value};

use crate::engine::items::{seal_timer_ops, timers_scheduled};
use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{parse_json, OperationsBody};
use crate::http::timer_ops::read_ops;
use crate::state::AppState;

/// A refusal in the SDK's timer envelope; any other error answers as everywhere.
fn refusal(e: ApiError) -> Response {
    if e.status() != StatusCode::BAD_REQUEST {
        return e.into_response();
    }
    let reason = if e.to_string().contains("owned by the server") {
        "server_owned_field"
    } else {
        "invalid_request"
    };
    let mut body =
        json!({"error": "timers_bad_request", "reason": reason, "detail": e.to_string()});
    if let Some(f) = e.field_name() {
        body["field"] = json!(f);
    }
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

pub async fn batch(State(state): State<AppState>, Tenant(tenant): Tenant, body: Bytes) -> Response {
    match apply(&state, tenant, &body).await {
        Ok(results) => Json(json!({ "results": results })).into_response(),
        Err(e) => refusal(e),
    }
}

async fn apply(state: &AppState, tenant: uuid::Uuid, body: &[u8]) -> ApiResult<Vec<TimerResult>> {
    let b: OperationsBody<'_> = parse_json(body)?;
    let mut ops = read_ops(b.operations, "operations", state.config.body_limit_bytes())?;
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    run(state, tenant, &mut ops).await
}

/// Seal, apply in one transaction, wake the sweeper.
async fn run(
    state: &AppState,
    tenant: uuid::Uuid,
    ops: &mut [TimerOp],
) -> ApiResult<Vec<TimerResult>> {
    let e = state.engine();
    seal_timer_ops(&e, tenant, ops).await?;
    let results = state.db.conn().await?.timers_apply(ops, tenant).await?;
    timers_scheduled(&e, ops);
    Ok(results)
}

pub async fn cancel(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((queue, key)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let mut ops = [TimerOp {
        op: OpKind::Cancel,
        queue,
        timer_key: key,
        partition: None,
        txn: q.get("txn").filter(|t| !t.is_empty()).cloned(),
        payload: None,
        encrypted: false,
        delay_ms: None,
    }];
    let checked = queen_log::timers::check_ops(&ops).map_err(ApiError::bad);
    let r = match checked {
        Ok(()) => run(&state, tenant, &mut ops).await,
        Err(e) => Err(e),
    };
    match r.map(|mut v| v.pop()) {
        Ok(Some(one)) => Json(one).into_response(),
        Ok(None) => ApiError::Internal("timers_apply_v1 answered no result".into()).into_response(),
        Err(e) => refusal(e),
    }
}

pub async fn peek(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((queue, key)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let conn = state.db.conn().await?;
    Ok(Json(conn.timer_get(&queue, &key, tenant).await?))
}

pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(queue): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    // The SDK's rule: a limit is clamped, never refused; a limit that is no integer is.
    let limit = match q.get("limit").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => match v.parse::<i64>() {
            Ok(n) => Some(list_limit(Some(n)) as i32),
            Err(_) => {
                return refusal(ApiError::BadParameter {
                    name: "limit".into(),
                    message: format!("limit must be an integer, got {v:?}"),
                })
            }
        },
    };
    let after = q.get("after").filter(|a| !a.is_empty());
    let r = async {
        let conn = state.db.conn().await?;
        conn.timers_list(&queue, after.map(String::as_str), limit, tenant)
            .await
            .map_err(ApiError::from)
    };
    match r.await {
        Ok(v) => Json(v).into_response(),
        Err(e) => refusal(e),
    }
}
