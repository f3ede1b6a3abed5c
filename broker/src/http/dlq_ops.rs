//! The DLQ operations more than one route runs (Queen's message-address routes in
//! http/routes/messages.rs, ours in http/routes/dlq_admin.rs): redrive, delete, and the replay
//! answer of one redriven row.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::wire::{DlqDeleted, RedriveResult, RedriveRow, Redriven};
use serde_json::json;
use uuid::Uuid;

use crate::engine::write_gate::Targets;
use crate::error::ApiResult;
use crate::ops::metrics::Metrics;
use crate::state::AppState;

/// `queen.dlq_redrive_v1` for the tenant's rows `ids`; wakes the long-polls of every
/// partition a message went back into. A redrive appends and cannot be spooled: the
/// write gate admits it (any partition of the tenant: the rows name them) or it is a 503
/// that moved nothing (crate::engine::write_gate).
pub async fn redrive(state: &AppState, tenant: Uuid, ids: &[Uuid]) -> ApiResult<Redriven> {
    state
        .gate
        .admit("a DLQ redrive", Targets::Tenant(tenant))
        .await?;
    let r = state.db.conn().await?.dlq_redrive(ids, tenant).await?;
    redriven(state, tenant, &r);
    Ok(r)
}

/// After a redrive: count it, and wake the long-polls of every partition a message went
/// back into (as a push would).
pub fn redriven(state: &AppState, tenant: Uuid, r: &Redriven) {
    Metrics::add(&state.metrics.dlq_redriven, r.moved as u64);
    for m in r
        .results
        .iter()
        .filter(|m| m.result == RedriveResult::Moved)
    {
        if let (Some(q), Some(p)) = (&m.queue, &m.partition) {
            state.wake(tenant, q, p);
        }
    }
}

/// `queen.dlq_delete_v1` for the tenant's rows `ids`.
pub async fn delete(state: &AppState, tenant: Uuid, ids: &[Uuid]) -> ApiResult<DlqDeleted> {
    let d = state.db.conn().await?.dlq_delete(ids, tenant).await?;
    Metrics::add(&state.metrics.dlq_deleted, d.deleted as u64);
    Ok(d)
}

/// Queen's answer to one replayed DLQ row (`replayedAs` describes the new message);
/// `removed` counts every row that left the DLQ with it. A row that could not go back is
/// a 409 (Queen's answer to a refused push); one that is gone is `None` (the caller's 404).
pub fn replay_answer(row: &RedriveRow, removed: i64) -> Option<Response> {
    let moved = row.result == RedriveResult::Moved;
    let status = match row.result {
        RedriveResult::Gone => return None,
        RedriveResult::Refused => {
            let body = json!({
                "success": false, "result": "refused", "dlqId": row.dlq_id,
                "error": row.error, "reason": row.error, "dlqRowRemoved": false,
            });
            return Some((StatusCode::CONFLICT, Json(body)).into_response());
        }
        RedriveResult::Moved => "queued",
        RedriveResult::Duplicate => "duplicate",
    };
    let body = json!({
        "success": true,
        "result": if moved { "moved" } else { "duplicate" },
        "queue": row.queue,
        "partition": row.partition,
        "partitionId": row.partition_id,
        "consumerGroup": row.consumer_group,
        "dlqId": row.dlq_id,
        "originalTransactionId": row.original_transaction_id,
        "replayedAs": {
            "index": 0,
            "message_id": row.message_id.unwrap_or(Uuid::nil()),
            "transaction_id": row.transaction_id,
            "queueName": row.queue,
            "status": status,
            "offset": row.offset,
        },
        "dlqRowRemoved": moved,
        "dlqRowsRemoved": removed,
    });
    Some(Json(body).into_response())
}
