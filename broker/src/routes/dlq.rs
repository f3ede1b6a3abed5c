//! `GET /api/v1/dlq?queue=&consumerGroup=&limit=&offset=`: dead-lettered messages,
//! newest failure first, through `queen.dlq_list_v1` (scoped to the caller's tenant).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::routes::auth::Tenant;
use crate::state::AppState;
use crate::util::{check_name, QUEUE_MODE};
use queen_log::names::NameKind;

/// Largest page; a larger `limit` is a 400 (page through with `offset`).
pub const MAX_LIMIT: i32 = 1000;

pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let limit = bounded(get("limit"), "limit", 100, 1, MAX_LIMIT)?;
    let offset = bounded(get("offset"), "offset", 0, 0, i32::MAX)?;
    let queue = get("queue");
    let group = get("consumerGroup");
    for (kind, name) in [(NameKind::Queue, queue), (NameKind::ConsumerGroup, group)] {
        name.map_or(Ok(()), |n| check_name(kind, n))?;
    }
    let db = state.db().await?;
    let row = db
        .query_one(
            "SELECT queen.dlq_list_v1($1::text, $2::text, $3::int, $4::int, $5::uuid)",
            &[&queue, &group, &limit, &offset, &tenant],
        )
        .await?;
    let r: Value = row.get(0);
    let total = r.get("total").and_then(Value::as_i64).unwrap_or(0);
    let messages: Vec<Value> = r
        .get("messages")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(render).collect())
        .unwrap_or_default();
    Ok(Json(json!({
        "messages": messages,
        "pagination": {"limit": limit, "offset": offset, "total": total},
    })))
}

/// An integer query parameter within `[min, max]`; anything else is a 400 naming it.
fn bounded(v: Option<&str>, name: &str, default: i32, min: i32, max: i32) -> ApiResult<i32> {
    match v {
        None => Ok(default),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (i64::from(min)..=i64::from(max)).contains(n))
            .map(|n| n as i32)
            .ok_or_else(|| {
                ApiError::bad(format!(
                    "{name} must be an integer from {min} to {max}, got {v:?}"
                ))
            }),
    }
}

/// The wire shape of broker.md §1 from a `dlq_list_v1` element; the queue-mode group
/// is rendered as null. The frame's producer subject is not kept by the DLQ row: null.
fn render(m: &Value) -> Value {
    let field = |k: &str| m.get(k).cloned().unwrap_or(Value::Null);
    let group = match m.get("consumerGroup").and_then(Value::as_str) {
        Some(g) if g != QUEUE_MODE => Value::String(g.to_string()),
        _ => Value::Null,
    };
    json!({
        "id": field("id"),
        // The DLQ row's own id: what replay and delete by id take.
        "dlqId": field("dlqId"),
        "transactionId": field("transactionId"),
        "partitionId": field("partitionId"),
        "queue": field("queue"),
        "partition": field("partition"),
        "consumerGroup": group,
        "errorMessage": field("errorMessage"),
        "retryCount": field("retryCount"),
        "data": field("data"),
        "producerSub": Value::Null,
        "createdAt": field("createdAt"),
        "failedAt": field("failedAt"),
    })
}
