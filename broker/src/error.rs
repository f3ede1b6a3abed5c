//! The one error type of every handler, and how it becomes an HTTP response:
//! 400 `{"error":..}` for bad input, 401/403 for authentication, 503 (with `Retry-After`)
//! when the database cannot be reached, is saturated or timed out, 500 otherwise. Which
//! database failure is which: crate::db::error, the one SQLSTATE rule.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// The request itself is wrong; nothing was changed.
    BadRequest(String),
    /// Missing, malformed, badly signed or expired bearer token (401).
    Unauthorized(String),
    /// A valid token that does not grant access, e.g. no `tenant` claim (403).
    Forbidden(String),
    /// The database is unreachable or saturated (connect failure, lost connection, pool
    /// exhausted, statement timeout): 503 with `Retry-After`.
    Unavailable(String),
    /// Anything else: a bug or an unexpected database answer.
    Internal(String),
}

/// `Retry-After` of every 503: a saturated pool or a restarting database is usually
/// better a second later.
pub const RETRY_AFTER_SECS: &str = "1";

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A 400 with the given message.
    pub fn bad(msg: impl Into<String>) -> Self {
        ApiError::BadRequest(msg.into())
    }

    fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn message(&self) -> &str {
        match self {
            ApiError::BadRequest(m)
            | ApiError::Unauthorized(m)
            | ApiError::Forbidden(m)
            | ApiError::Unavailable(m)
            | ApiError::Internal(m) => m,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

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
        let mut resp = (status, Json(json!({ "error": self.message() }))).into_response();
        match status {
            StatusCode::SERVICE_UNAVAILABLE => {
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

impl From<queen_log::frame::CodecError> for ApiError {
    fn from(e: queen_log::frame::CodecError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
