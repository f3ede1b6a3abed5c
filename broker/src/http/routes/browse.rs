//! Finding and inspecting messages, with Queen's paths, parameters and answers:
//!
//! - `GET /api/v1/messages?queue=&partition=&ns=&task=&status=&from=&to=&limit=&offset=`
//! - `GET /api/v1/messages/{partitionId}/{transactionId}`
//!
//! Through `queen.list_messages_v1` and `queen.get_message_v1` (docs/sql-api.md). A
//! listing is newest first and reads only the segments of the page it returns; `status`
//! over several consumer groups means "completed by every group"
//! (docs/decisions.md, "Browsing messages"). An unknown address, a malformed partition
//! id and another tenant's message are Queen's 404 `{"error": "Message not found"}`.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::browse::MAX_PAGE;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::{int_query, Param, OFFSET};
use crate::state::AppState;

/// A listing's `limit`: Queen's default 200; at most the extension's page bound.
const LIMIT: Param<'static> = Param::new("limit", 0, MAX_PAGE);

/// Queen's query parameters and the filter keys they become (`ns` is `namespace`).
const TEXT_FILTERS: [(&str, &str); 7] = [
    ("queue", "queue"),
    ("partition", "partition"),
    ("ns", "namespace"),
    ("task", "task"),
    ("status", "status"),
    ("from", "from"),
    ("to", "to"),
];

/// `GET /api/v1/messages`: a page of the tenant's messages, newest first.
pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let mut f = Map::new();
    for (param, key) in TEXT_FILTERS {
        if let Some(v) = q.get(param).filter(|v| !v.is_empty()) {
            f.insert(key.into(), json!(v));
        }
    }
    f.insert("limit".into(), json!(int_query(&q, &LIMIT)?.unwrap_or(200)));
    f.insert("offset".into(), json!(int_query(&q, &OFFSET)?.unwrap_or(0)));
    let page = state
        .db
        .conn()
        .await?
        .list_messages::<Value>(&Value::Object(f), tenant)
        .await?;
    Ok(Json(page))
}

/// `GET /api/v1/messages/{partitionId}/{transactionId}`: one message, its payload and its
/// status per consumer group.
pub async fn get_one(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((pid, txn)): Path<(String, String)>,
) -> ApiResult<Response> {
    let Ok(pid) = Uuid::parse_str(&pid) else {
        return Ok(not_found());
    };
    let mut m = state
        .db
        .conn()
        .await?
        .get_message(pid, &txn, tenant)
        .await?;
    // A sealed payload is opened for the reader (crate::engine::sealing).
    if m.is_encrypted {
        state.sealer.open_value(&mut m.payload);
    }
    Ok(Json(m).into_response())
}

/// Queen's 404 for a message address nobody has.
fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "Message not found"})),
    )
        .into_response()
}
