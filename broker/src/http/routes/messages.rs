//! Queen's message-address admin routes, for dead-lettered messages (Queen's SDK
//! `admin.retry_message` / `admin.delete_message`):
//!
//! - `POST /api/v1/messages/{partitionId}/{transactionId}/retry`: redrive the DLQ rows of
//!   that address (one per group that dead-lettered it) as ONE new message into its
//!   partition, removing them in the same transaction;
//! - `DELETE /api/v1/messages/{partitionId}/{transactionId}`: delete those DLQ rows.
//!
//! Only dead-lettered messages have rows. Deleting a live message (immutable in its
//! segment) is a 409 saying why; retrying one, an unknown address, a malformed partition
//! id and another tenant's message answer Queen's 404. The shared redrive and delete
//! calls live here too, for routes/dlq_admin.rs.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::dlq_ops::{delete, redrive, replay_answer};
use crate::http::input::parse_json;
use crate::state::AppState;

/// Queen's 404 for an address without DLQ rows; `what` finishes its sentence.
fn not_found(pid: &str, txn: &str, what: &str) -> Response {
    let body = json!({
        "success": false, "partitionId": pid, "transactionId": txn,
        "error": "Message not found",
        "message": format!("No dead-letter row for this address. {what}"),
    });
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// The tenant's DLQ rows at (partition id, transactionId), newest failure first; none
/// for a partition id that is not a UUID.
async fn rows_at(state: &AppState, tenant: Uuid, pid: &str, txn: &str) -> ApiResult<Vec<Uuid>> {
    let Ok(pid) = Uuid::parse_str(pid) else {
        return Ok(Vec::new());
    };
    Ok(state.db.conn().await?.dlq_ids_at(pid, txn, tenant).await?)
}

/// `POST /api/v1/messages/{partitionId}/{transactionId}/retry`. The body takes no key (the
/// SDKs send `{}`; empty and `null` are the same): any key is refused naming it.
pub async fn retry(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((pid, txn)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Response> {
    no_keys(&body)?;
    let gone = || not_found(&pid, &txn, "Only dead-lettered messages can be replayed");
    let ids = rows_at(&state, tenant, &pid, &txn).await?;
    if ids.is_empty() {
        return Ok(gone());
    }
    let r = redrive(&state, tenant, &ids).await?;
    let newest = &r.results[0];
    Ok(replay_answer(newest, r.moved).unwrap_or_else(gone))
}

/// An empty body, `null` or `{}`; a key is a 400 naming it.
fn no_keys(body: &[u8]) -> ApiResult<()> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    parse_json::<Option<NoKeys>>(body).map(|_| ())
}

/// A body with no fields, `deny_unknown_fields` so a key is refused naming it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoKeys {}

/// `DELETE /api/v1/messages/{partitionId}/{transactionId}`: every DLQ row of the
/// address, across groups.
pub async fn delete_message(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((pid, txn)): Path<(String, String)>,
) -> ApiResult<Response> {
    let ids = rows_at(&state, tenant, &pid, &txn).await?;
    let d = if ids.is_empty() {
        None
    } else {
        Some(delete(&state, tenant, &ids).await?).filter(|d| d.deleted > 0)
    };
    let Some(d) = d else {
        if live_exists(&state, tenant, &pid, &txn).await? {
            return Ok(live_refusal(&pid, &txn));
        }
        return Ok(not_found(&pid, &txn, "Nor is there a live message at it"));
    };
    let body: Value = json!({
        "success": true, "partitionId": pid, "transactionId": txn,
        "deleted": d.deleted, "message": "Message deleted successfully",
    });
    Ok(Json(body).into_response())
}

/// Whether the tenant has a live message at the address (`queen.get_message_v1`).
async fn live_exists(state: &AppState, tenant: Uuid, pid: &str, txn: &str) -> ApiResult<bool> {
    let Ok(pid) = Uuid::parse_str(pid) else {
        return Ok(false);
    };
    match state.db.conn().await?.get_message(pid, txn, tenant).await {
        Ok(_) => Ok(true),
        Err(e) => match ApiError::from(e) {
            ApiError::NotFound(_) => Ok(false),
            other => Err(other),
        },
    }
}

/// 409 for a live message: it shares an immutable segment with its neighbours, and every
/// group's cursor is an offset into that log (docs/decisions.md, "Browsing messages").
fn live_refusal(pid: &str, txn: &str) -> Response {
    let body = json!({
        "success": false, "partitionId": pid, "transactionId": txn,
        "error": "Message is live",
        "message": "A live message is stored in an immutable segment with its neighbours and \
                    cannot be deleted alone; move the consumer group past it (seek) or let \
                    retention remove it",
    });
    (StatusCode::CONFLICT, Json(body)).into_response()
}
