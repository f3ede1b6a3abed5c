//! Reading Queen 2.x's key/value ops (queen_log::kv's rules) for `POST /api/v1/kv` and
//! the transaction's `kv` rider, and the SDK's refusal envelope for a bad one:
//! 400 `{"error": "kv_bad_request", "reason", "detail", "field"}`, nothing written.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::kv::{read_ops, KvOp, RawOp};
use serde_json::json;
use serde_json::value::RawValue;

use crate::error::ApiError;
use crate::http::input::unknown_field;

/// A refused op: its path (`operations[2]`, `kv[0]`), the SDK's `reason`, and prose.
pub struct KvRefusal {
    pub field: String,
    pub reason: String,
    pub detail: String,
}

impl KvRefusal {
    pub fn response(&self) -> Response {
        let body = json!({"error": "kv_bad_request", "reason": self.reason,
                          "detail": self.detail, "field": self.field});
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    }

    /// The same refusal as the transaction route's 400 (a field named, nothing written).
    pub fn api_error(&self) -> ApiError {
        ApiError::field(
            self.field.clone(),
            format!("kv_bad_request ({}): {}", self.reason, self.detail),
        )
    }
}

/// The ops of `v` (a JSON array at `at`), each read and checked.
pub fn read(
    v: &RawValue,
    at: &str,
    in_transaction: bool,
) -> Result<(Vec<RawOp>, Vec<KvOp>), KvRefusal> {
    let items: Vec<&RawValue> = serde_json::from_str(v.get()).map_err(|_| KvRefusal {
        field: at.to_string(),
        reason: "kv_ops_invalid".into(),
        detail: format!("{at} must be an array of ops"),
    })?;
    let raw = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_str::<RawOp>(item.get()).map_err(|e| {
                let field = match unknown_field(&e) {
                    Some(f) => format!("{at}[{i}].{f}"),
                    None => format!("{at}[{i}]"),
                };
                KvRefusal {
                    field,
                    reason: "kv_op_invalid".into(),
                    detail: format!("{at}[{i}]: {e}"),
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ops = read_ops(&raw, in_transaction).map_err(|(i, e)| KvRefusal {
        field: format!("{at}[{i}]"),
        reason: e.reason.into(),
        detail: format!("{at}[{i}]: {}", e.detail),
    })?;
    Ok((raw, ops))
}
