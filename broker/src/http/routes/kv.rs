//! Queen 2.x's key/value (docs/decisions.md, "Key/value"): `POST /api/v1/kv`
//! `{operations: [...]}` runs the ops in order in one transaction and answers
//! `{results: [...]}`, index-aligned. A `required` op that did not apply rolls the call
//! back: 200 `{success: false, reason: "kv_precondition", failedIndex, kvReason,
//! version, value, results}`, where the failed op shows its verdict and every other op
//! `{applied: false, reason: "rolled_back"}`. A bad op is the SDK's `kv_bad_request`.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::http::auth::Tenant;
use crate::http::input::{parse_json, OperationsBody};
use crate::http::kv_ops::read;
use crate::state::AppState;

pub async fn batch(State(state): State<AppState>, Tenant(tenant): Tenant, body: Bytes) -> Response {
    let b: OperationsBody<'_> = match parse_json(&body) {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let (raw, ops) = match read(b.operations, "operations", false) {
        Ok(r) => r,
        Err(r) => return r.response(),
    };
    if ops.is_empty() {
        return Json(json!({"results": []})).into_response();
    }
    let db = match state.db.conn().await {
        Ok(db) => db,
        Err(e) => return crate::error::ApiError::from(e).into_response(),
    };
    match db.kv_apply(&raw, tenant).await {
        Ok(results) => Json(json!({ "results": results })).into_response(),
        Err(e) => match e.kv_precondition() {
            Some(p) => {
                let results: Vec<Value> = (0..ops.len())
                    .map(|i| {
                        if i == p.failed_index {
                            json!({"index": i, "applied": false, "reason": p.kv_reason,
                                   "version": p.version, "value": p.value})
                        } else {
                            json!({"index": i, "applied": false, "reason": "rolled_back"})
                        }
                    })
                    .collect();
                Json(json!({"success": false, "reason": "kv_precondition",
                            "failedIndex": p.failed_index, "kvReason": p.kv_reason,
                            "version": p.version, "value": p.value, "results": results}))
                .into_response()
            }
            None => crate::error::ApiError::from(e).into_response(),
        },
    }
}
