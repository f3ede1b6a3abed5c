//! Traces, with Queen's paths, bodies and answers (what `msg.trace()` of Queen's SDKs and
//! its admin client call):
//!
//! - `POST /api/v1/traces` `{transactionId, partitionId, consumerGroup, eventType, data,
//!   traceNames}` → 201 `{success: true, traceId}`
//! - `GET /api/v1/traces/{partitionId}/{transactionId}` → `{traces}`
//! - `GET /api/v1/traces/by-name/{name}?limit=&offset=` → `{traces, total, pagination}`
//! - `GET /api/v1/traces/names?limit=&offset=` → `{trace_names, total, pagination}`
//!
//! Through `queen.record_trace_v1` and the trace reads (docs/sql-api.md). A trace of a
//! message the tenant does not have is a 404; a trace lives as long as its message
//! (docs/decisions.md, "Traces").

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{int_query, parse_json, Param, OFFSET};
use crate::state::AppState;

/// Queen's trace body; any other key is refused naming it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TraceIn {
    transaction_id: Option<String>,
    partition_id: Option<String>,
    consumer_group: Option<String>,
    event_type: Option<String>,
    data: Option<Value>,
    trace_names: Option<Value>,
}

/// `POST /api/v1/traces`.
pub async fn record(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let b: TraceIn = parse_json(&body)?;
    let (Some(txn), Some(pid)) = (b.transaction_id, b.partition_id) else {
        return Err(ApiError::bad("transactionId and partitionId are required"));
    };
    let Some(data) = b.data.filter(|d| !d.is_null()) else {
        return Err(ApiError::bad("data is required"));
    };
    if Uuid::parse_str(&pid).is_err() {
        return Err(ApiError::NotFound("Message not found".into()));
    }
    let trace = json!({
        "transactionId": txn, "partitionId": pid, "consumerGroup": b.consumer_group,
        "eventType": b.event_type, "data": data, "traceNames": b.trace_names,
    });
    let r = state.db.conn().await?.record_trace(&trace, tenant).await?;
    Ok((StatusCode::CREATED, Json(r)))
}

/// `GET /api/v1/traces/{partitionId}/{transactionId}`: none for an address nobody has.
pub async fn of_message(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((pid, txn)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let Ok(pid) = Uuid::parse_str(&pid) else {
        return Ok(Json(json!({"traces": []})));
    };
    let r = state
        .db
        .conn()
        .await?
        .message_traces(pid, &txn, tenant)
        .await?;
    Ok(Json(r))
}

/// A page of a trace read: Queen's default limit, at most 1,000.
fn page(q: &HashMap<String, String>, default: i64) -> ApiResult<(i32, i32)> {
    let limit = int_query(q, &Param::new("limit", 1, 1000))?.unwrap_or(default);
    let offset = int_query(q, &OFFSET)?.unwrap_or(0);
    Ok((limit as i32, offset as i32))
}

/// `GET /api/v1/traces/by-name/{name}`: Queen's default page 100.
pub async fn by_name(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let (limit, offset) = page(&q, 100)?;
    let r = state
        .db
        .conn()
        .await?
        .traces_by_name(&name, limit, offset, tenant)
        .await?;
    Ok(Json(r))
}

/// `GET /api/v1/traces/names`: Queen's default page 50.
pub async fn names(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let (limit, offset) = page(&q, 50)?;
    let r = state
        .db
        .conn()
        .await?
        .trace_names(limit, offset, tenant)
        .await?;
    Ok(Json(r))
}
