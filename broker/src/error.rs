//! The one error type of every handler, and how it becomes an HTTP response:
//! 400 `{"error":..}` for bad input, 503 when the database cannot be reached, 500 otherwise.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// The request itself is wrong; nothing was changed.
    BadRequest(String),
    /// The database is unreachable (connect failure, lost connection, pool exhausted).
    Unavailable(String),
    /// Anything else: a bug or an unexpected database answer.
    Internal(String),
}

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
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn message(&self) -> &str {
        match self {
            ApiError::BadRequest(m) | ApiError::Unavailable(m) | ApiError::Internal(m) => m,
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
        (status, Json(json!({ "error": self.message() }))).into_response()
    }
}

impl From<tokio_postgres::Error> for ApiError {
    fn from(e: tokio_postgres::Error) -> Self {
        let Some(db) = e.as_db_error() else {
            // No server error: the connection itself failed or closed.
            return ApiError::Unavailable(format!("database unreachable: {e}"));
        };
        let code = db.code().code();
        let msg = db.message().to_string();
        if code.starts_with("08") || code == "57P01" || code == "57P03" || code == "53300" {
            ApiError::Unavailable(format!("database unavailable: {msg}"))
        } else if code.starts_with("22") {
            // Input errors the extension caught that our own validation let through.
            ApiError::BadRequest(msg)
        } else {
            ApiError::Internal(format!("database error {code}: {msg}"))
        }
    }
}

impl From<deadpool_postgres::PoolError> for ApiError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(pg) => pg.into(),
            other => ApiError::Unavailable(format!("database unreachable: {other}")),
        }
    }
}

impl From<queen_log::frame::CodecError> for ApiError {
    fn from(e: queen_log::frame::CodecError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
