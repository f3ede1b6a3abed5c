//! The one error type of every handler and of the rooms under them, and the status each
//! kind answers with (the response itself: http/response.rs):
//! 400 `{"error":..}` for bad input, 401/403 for authentication, 503 (with `Retry-After`)
//! when the database cannot be reached, is saturated or timed out, a status and a `code`
//! for the coded refusals of the ephemeral routes, 500 otherwise. Which
//! database failure is which: crate::db::error, the one SQLSTATE rule.

use axum::http::StatusCode;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// The request itself is wrong; nothing was changed.
    BadRequest(String),
    /// A query parameter out of its range or unparsable (400 naming it in `parameter`).
    BadParameter { name: String, message: String },
    /// A body field this broker does not implement, or a value of it that asks for
    /// behaviour it does not implement (400 naming it in `field`, as a path like
    /// `options.maxSize` or `items[2].producerSub`; docs/broker-contract.md §1).
    BadField { field: String, message: String },
    /// Missing, malformed, badly signed or expired bearer token (401).
    Unauthorized(String),
    /// A valid token that does not grant access, e.g. no `tenant` claim (403).
    Forbidden(String),
    /// What the request names (a queue, partition or consumer group) does not exist for
    /// this tenant (404); nothing was changed.
    NotFound(String),
    /// The database is busy for now (statement timeout, a lost serialization or deadlock
    /// race): 503 with `Retry-After`. The statement rolled back.
    Unavailable(String),
    /// The database cannot be reached or refuses all work (no connection, the connection
    /// lost, the server shutting down, in recovery or read-only, the pool exhausted): 503
    /// with `Retry-After`, and what a push spool takes over (docs/availability.md).
    /// `maybe_written`: the statement was sent and the connection ended before its answer,
    /// so it may have committed (a replay must deduplicate it).
    Unreachable {
        message: String,
        maybe_written: bool,
    },
    /// A refusal with a stable machine-readable code beside its text (`{"error": text,
    /// "code": code}`), as Queen 2.x's ephemeral routes answer: 404
    /// `ephemeral_queue_not_found`, 429 `ephemeral_queue_full`, 503
    /// `ephemeral_memory_full`. Nothing was changed.
    Coded {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
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

    /// A 400 naming the body field `field` (a path such as `options.ttl`).
    pub fn field(field: impl Into<String>, msg: impl Into<String>) -> Self {
        ApiError::BadField {
            field: field.into(),
            message: msg.into(),
        }
    }

    /// The body field a 400 names, if any.
    pub fn field_name(&self) -> Option<&str> {
        match self {
            ApiError::BadField { field, .. } => Some(field),
            _ => None,
        }
    }

    /// This error with its field path (and message) under `prefix`, e.g. a push item's
    /// `producerSub` becomes `operations[0].items[1].producerSub` inside a transaction.
    pub fn within(self, prefix: &str) -> Self {
        match self {
            ApiError::BadField { field, message } => ApiError::BadField {
                field: format!("{prefix}.{field}"),
                message: format!("{prefix}: {message}"),
            },
            ApiError::BadRequest(m) => ApiError::BadRequest(format!("{prefix}: {m}")),
            other => other,
        }
    }

    /// A database that cannot be reached, nothing sent to it.
    pub fn unreachable(msg: impl Into<String>) -> Self {
        ApiError::Unreachable {
            message: msg.into(),
            maybe_written: false,
        }
    }

    /// The HTTP status this error answers with (http/response.rs writes the body).
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::BadParameter { .. } | ApiError::BadField { .. } => {
                StatusCode::BAD_REQUEST
            }
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Unavailable(_) | ApiError::Unreachable { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Coded { status, .. } => *status,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The text of the `{"error": ...}` body.
    pub fn message(&self) -> &str {
        match self {
            ApiError::BadRequest(m)
            | ApiError::BadParameter { message: m, .. }
            | ApiError::BadField { message: m, .. }
            | ApiError::Unauthorized(m)
            | ApiError::Forbidden(m)
            | ApiError::NotFound(m)
            | ApiError::Unavailable(m)
            | ApiError::Unreachable { message: m, .. }
            | ApiError::Coded { message: m, .. }
            | ApiError::Internal(m) => m,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// A queue that encrypts, and this broker without the key (crate::engine::sealing): 503
/// `encryption_key_missing`, nothing written. Not a 4xx: the request is right and a broker
/// that holds the key takes it; not a 500: nothing failed, this broker refuses by design
/// (docs/security.md, "Only the broker seals").
impl From<crate::engine::sealing::NoKey> for ApiError {
    fn from(e: crate::engine::sealing::NoKey) -> Self {
        ApiError::Coded {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "encryption_key_missing",
            message: format!(
                "queue {} encrypts payloads (encryptionEnabled) but this broker has no \
                 QUEEN_ENCRYPTION_KEY, and only a broker that holds it may seal them; \
                 nothing was written (send it through a broker with the key)",
                e.queue
            ),
        }
    }
}

impl From<queen_log::frame::CodecError> for ApiError {
    fn from(e: queen_log::frame::CodecError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
