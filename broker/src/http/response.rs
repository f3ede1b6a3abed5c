//! How an [`ApiError`] answers: `{"error": <text>}` with its status (and `"parameter"`
//! naming a bad query parameter, `"field"` a refused body field, `"code"` a coded
//! refusal), `Retry-After` on every 503 and 429 (nothing was written; retry), `WWW-Authenticate` on a 401. Server errors are
//! logged.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::ApiError;

/// `Retry-After` of every 503: a saturated pool or a restarting database is usually
/// better a second later.
pub const RETRY_AFTER_SECS: &str = "1";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::warn!(
                status = status.as_u16(),
                error = self.message(),
                "request failed"
            );
        }
        let body = match &self {
            ApiError::BadParameter { name, message } => {
                json!({ "error": message, "parameter": name })
            }
            ApiError::BadField { field, message } => json!({ "error": message, "field": field }),
            ApiError::Coded { code, message, .. } => json!({ "error": message, "code": code }),
            _ => json!({ "error": self.message() }),
        };
        let mut resp = (status, Json(body)).into_response();
        match status {
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from_static(RETRY_AFTER_SECS),
                );
            }
            StatusCode::UNAUTHORIZED => {
                resp.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        resp
    }
}
