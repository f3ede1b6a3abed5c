//! Queen 2.x's locks and semaphores (docs/decisions.md, "Locks"): `POST /api/v1/locks`
//! `{operations: [{op: acquire|renew|release|get, name, ...}]}` → `{results: [...]}`,
//! index-aligned, each op's verdict its own (a lock somebody else holds is a 200 with
//! `acquired: false`). A bad op is 400 `{"error": "locks_bad_request", "reason",
//! "detail", "field"}`, nothing written.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::locks::{read_ops, RawLockOp};
use serde::Deserialize;
use serde_json::json;

use crate::error::ApiError;
use crate::http::auth::Tenant;
use crate::http::input::{parse_json, unknown_field};
use crate::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    operations: Vec<serde_json::Value>,
}

fn refusal(field: String, reason: &str, detail: String) -> Response {
    let body = json!({"error": "locks_bad_request", "reason": reason, "detail": detail,
                      "field": field});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

pub async fn batch(State(state): State<AppState>, Tenant(tenant): Tenant, body: Bytes) -> Response {
    let b: Body = match parse_json(&body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let mut raw = Vec::with_capacity(b.operations.len());
    for (i, v) in b.operations.into_iter().enumerate() {
        match serde_json::from_value::<RawLockOp>(v) {
            Ok(r) => raw.push(r),
            Err(e) => {
                let field = unknown_field(&e).map_or(format!("operations[{i}]"), |f| {
                    format!("operations[{i}].{f}")
                });
                return refusal(field, "lock_op_invalid", format!("operations[{i}]: {e}"));
            }
        }
    }
    if let Err((i, e)) = read_ops(&raw) {
        return refusal(
            format!("operations[{i}]"),
            e.reason,
            format!("operations[{i}]: {}", e.detail),
        );
    }
    if raw.is_empty() {
        return Json(json!({"results": []})).into_response();
    }
    let answer = async {
        let db = state.db.conn().await?;
        Ok::<_, ApiError>(db.locks_apply(&raw, tenant).await?)
    };
    match answer.await {
        Ok(results) => Json(json!({ "results": results })).into_response(),
        Err(e) => e.into_response(),
    }
}
