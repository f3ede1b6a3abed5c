//! `GET /api/v1/dlq?queue=&consumerGroup=&limit=&offset=`: dead-lettered messages,
//! newest failure first.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::util::{iso_ms, DEFAULT_TENANT, QUEUE_MODE};

const MAX_LIMIT: i64 = 1000;

/// DLQ rows outlive their partition (no FK), hence the LEFT JOINs. The message's
/// createdAt is its segment's, when the segment is still there.
const LIST: &str = "
SELECT COALESCE(d.message_id, d.id), d.transaction_id, d.partition_id, q.name::text, p.name,
       d.consumer_group, d.error, d.retry_count, d.payload, s.created_at, d.failed_at
  FROM queen.log_dlq d
  LEFT JOIN queen.log_partitions p ON p.id = d.partition_id
  LEFT JOIN queen.queues q ON q.id = p.queue_id
  LEFT JOIN LATERAL (SELECT g.created_at FROM queen.log_segments g
                      WHERE g.partition_id = d.partition_id AND g.base_offset <= d.\"offset\"
                        AND g.end_offset >= d.\"offset\"
                      ORDER BY g.base_offset DESC LIMIT 1) s ON true
 WHERE ($1::text IS NULL OR (q.name = $1 AND q.tenant_id = $5))
   AND ($2::text IS NULL OR d.consumer_group = $2)
 ORDER BY d.failed_at DESC, d.id
 LIMIT $3 OFFSET $4";

const COUNT: &str = "
SELECT count(*) FROM queen.log_dlq d
  LEFT JOIN queen.log_partitions p ON p.id = d.partition_id
  LEFT JOIN queen.queues q ON q.id = p.queue_id
 WHERE ($1::text IS NULL OR (q.name = $1 AND q.tenant_id = $3))
   AND ($2::text IS NULL OR d.consumer_group = $2)";

pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let limit = non_negative(get("limit"), "limit", 100)?.clamp(1, MAX_LIMIT);
    let offset = non_negative(get("offset"), "offset", 0)?;
    let queue = get("queue");
    let group = get("consumerGroup");
    let db = state.db().await?;
    let rows = db
        .query(LIST, &[&queue, &group, &limit, &offset, &DEFAULT_TENANT])
        .await?;
    let total: i64 = db
        .query_one(COUNT, &[&queue, &group, &DEFAULT_TENANT])
        .await?
        .get(0);
    let messages: Vec<Value> = rows.iter().map(render).collect();
    Ok(Json(json!({
        "messages": messages,
        "pagination": {"limit": limit, "offset": offset, "total": total},
    })))
}

fn non_negative(v: Option<&str>, name: &str, default: i64) -> ApiResult<i64> {
    match v {
        None => Ok(default),
        Some(v) => v.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::bad(format!("{name} must be a non-negative integer, got {v:?}"))
        }),
    }
}

fn render(r: &tokio_postgres::Row) -> Value {
    let group: String = r.get(5);
    let created: Option<DateTime<Utc>> = r.get(9);
    let failed: DateTime<Utc> = r.get(10);
    json!({
        "id": r.get::<_, uuid::Uuid>(0),
        "transactionId": r.get::<_, Option<String>>(1),
        "partitionId": r.get::<_, uuid::Uuid>(2),
        "queue": r.get::<_, Option<String>>(3),
        "partition": r.get::<_, Option<String>>(4),
        "consumerGroup": if group == QUEUE_MODE { None } else { Some(group) },
        "errorMessage": r.get::<_, Option<String>>(6),
        "retryCount": r.get::<_, Option<i32>>(7),
        "data": r.get::<_, Option<Value>>(8),
        "producerSub": Value::Null,
        "createdAt": created.map(iso_ms),
        "failedAt": iso_ms(failed),
    })
}
