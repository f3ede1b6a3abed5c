//! What a failed database call means to the client: the one SQLSTATE → [`ApiError`] rule
//! of the broker (by queen_log::sqlstate's classes).
//!
//! | the failure                                                     | answer            |
//! |-----------------------------------------------------------------|-------------------|
//! | no connection (refused, closed, lost), pool wait timed out      | 503 + Retry-After |
//! | class 08 (connection), 53 (resources), 57P01/02/03 (shutdown), 58P01/58030 (the server's files), 55000 (extension SQL older than its library), 25006 (a read-only server: a standby, or a primary demoted by a failover) | 503 + Retry-After |
//! | 57014 (statement timeout, cancel), 40001/40P01 (lost race)       | 503 + Retry-After |
//! | class 22 (input the extension refused)                          | 400               |
//! | P0002 (an admin function's unknown queue, partition or group)   | 404               |
//! | anything else (23505 outside the wire, P0001, XX000, an unreadable answer) | 500    |
//!
//! A 503 means the statement rolled back (nothing was written, retrying is safe), except
//! when the connection ended under the statement (`ApiError::Unreachable` with
//! `maybe_written`): it may have committed, and a retry is deduplicated by its
//! transactionIds. The unreachable cases are what the push spool takes over
//! (docs/availability.md).

use axum::http::StatusCode;
use queen_log::sqlstate::{classify, connection_lost, wire_refusal, ErrorClass, WireRefusal};

use crate::error::ApiError;

/// Why a database call failed.
#[derive(Debug)]
pub enum DbError {
    /// The statement (or the connection under it) failed.
    Pg(tokio_postgres::Error),
    /// No pooled connection could be had.
    Pool(deadpool_postgres::PoolError),
    /// Opening a new connection failed (refused, no primary among the hosts, the server
    /// starting up or shutting down): nothing was sent.
    Connect(tokio_postgres::Error),
    /// The extension answered something this broker cannot read: a bug (500).
    Unreadable(String),
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError::Pg(e)
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(pg) => DbError::Connect(pg),
            other => DbError::Pool(other),
        }
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Pg(e) | DbError::Connect(e) => e.fmt(f),
            DbError::Pool(e) => e.fmt(f),
            DbError::Unreadable(m) => write!(f, "unreadable database answer: {m}"),
        }
    }
}

impl DbError {
    /// The server's error, when the server sent one.
    pub(super) fn server(&self) -> Option<&tokio_postgres::error::DbError> {
        match self {
            DbError::Pg(e) => e.as_db_error(),
            _ => None,
        }
    }

    /// Whether the connection itself is gone (queen_log::sqlstate's rule): it must not
    /// go back to the pool.
    pub fn connection_lost(&self) -> bool {
        match self {
            DbError::Pg(_) => connection_lost(self.server().map(|d| d.code().code())),
            _ => false,
        }
    }

    /// Whether the statement lost a deadlock or serialization race (40P01, 40001): it
    /// rolled back whole.
    pub fn lost_race(&self) -> bool {
        self.server()
            .is_some_and(|d| matches!(d.code().code(), "40P01" | "40001"))
    }

    /// The transaction wire's refusal (`reason`, message with its detail), or None when
    /// the failure is the database's state (the caller answers it as an [`ApiError`]).
    pub fn wire_refusal(&self) -> Option<(WireRefusal, String)> {
        let db = self.server()?;
        let msg = match db.detail() {
            Some(d) => format!("{} ({d})", db.message()),
            None => db.message().to_string(),
        };
        wire_refusal(db.code().code(), db.message()).map(|r| (r, msg))
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        let pg = match e {
            DbError::Pg(pg) => pg,
            DbError::Pool(deadpool_postgres::PoolError::Timeout(
                deadpool_postgres::TimeoutType::Wait,
            )) => {
                return ApiError::unreachable(
                    "database pool exhausted: no connection became free within \
                     QUEEN_POOL_TIMEOUT_MS; retry later",
                )
            }
            DbError::Pool(other) => {
                return ApiError::unreachable(format!("database unreachable: {other}"))
            }
            DbError::Connect(pg) => {
                let why = match pg.as_db_error() {
                    Some(d) => format!("{} ({})", d.message(), d.code().code()),
                    None => pg.to_string(),
                };
                return ApiError::unreachable(format!("database unreachable: {why}"));
            }
            DbError::Unreadable(m) => return ApiError::Internal(m),
        };
        let Some(db) = pg.as_db_error() else {
            // No server error: the connection failed or closed under the statement,
            // which may have committed before it did.
            return ApiError::Unreachable {
                message: format!("database unreachable: {pg}"),
                maybe_written: true,
            };
        };
        of_sqlstate(db.code().code(), db.message())
    }
}

/// The code of the 503 a plaintext push into an encrypting queue gets (see of_sqlstate).
pub const ENCRYPTION_REQUIRED: &str = "encryption_required";

/// The answer to a server error with this SQLSTATE and message.
fn of_sqlstate(code: &str, msg: &str) -> ApiError {
    // A plaintext frame into an encrypting queue (55000 QENC): the queue began encrypting
    // after this broker looked it up. A refusal, not a failure (docs/security.md): 503
    // `encryption_required`, so a client retries and is sealed on the retry; coded, so a
    // spool replay takes it as this record's refusal and pushes it alone, looked up again,
    // rather than waiting on it as on a database that is down.
    if code == "55000" && msg.starts_with("QENC") {
        return ApiError::Coded {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: ENCRYPTION_REQUIRED,
            message: format!("database refused ({code}): {msg}"),
        };
    }
    // A push past its queue's maxSize (54000 QFULL, docs/decisions.md, "Queue options"):
    // refused and rolled back, the producer's to retry once consumers caught up; never
    // spooled (a replay would only be refused again).
    if code == "54000" && msg.starts_with("QFULL") {
        return ApiError::Coded {
            status: axum::http::StatusCode::TOO_MANY_REQUESTS,
            code: "queue_full",
            message: msg.to_string(),
        };
    }
    match classify(code) {
        // The session terminated under the statement (57P01 admin shutdown, 57P02 crash
        // shutdown) may have committed it first; any other such answer refused it.
        ErrorClass::Unavailable => ApiError::Unreachable {
            message: format!("database unavailable ({code}): {msg}"),
            maybe_written: matches!(code, "57P01" | "57P02"),
        },
        // A statement timeout (QUEEN_STATEMENT_TIMEOUT_MS), a cancel, a lost
        // serialization or deadlock race: the transaction rolled back, retry is safe.
        ErrorClass::Retryable => {
            ApiError::Unavailable(format!("database retry later ({code}): {msg}"))
        }
        // Input errors the extension caught that our own validation let through.
        ErrorClass::BadInput => ApiError::BadRequest(msg.to_string()),
        // An admin function's unknown queue, partition or group (P0002).
        ErrorClass::NotFound => ApiError::NotFound(msg.to_string()),
        ErrorClass::Duplicate | ErrorClass::Internal => {
            ApiError::Internal(format!("database error {code}: {msg}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: &str) -> u16 {
        match of_sqlstate(code, "m") {
            ApiError::BadRequest(_) => 400,
            ApiError::Unavailable(_) | ApiError::Unreachable { .. } => 503,
            ApiError::Internal(_) => 500,
            ApiError::NotFound(_) => 404,
            _ => 0,
        }
    }

    /// The table of the module docs, row by row: every failure that is not the
    /// client's fault and that a retry can cure is a 503.
    #[test]
    fn the_sqlstate_table() {
        for code in [
            "08000", "08001", "08003", "08006", "08P01", "53000", "53100", "53200", "53300",
            "53400", "57P01", "57P02", "57P03", "58P01", "58030", "55000", "57014", "40001",
            "40P01", "25006",
        ] {
            assert_eq!(status(code), 503, "{code}");
        }
        for code in ["22023", "22004", "22P02"] {
            assert_eq!(status(code), 400, "{code}");
        }
        assert_eq!(status("P0002"), 404);
        for code in ["23505", "P0001", "XX000", "42883", "42501"] {
            assert_eq!(status(code), 500, "{code}");
        }
    }

    /// What the push spool may take over, and whether the statement may have committed.
    #[test]
    fn unreachable_and_maybe_written() {
        let unreachable = |code: &str| match of_sqlstate(code, "m") {
            ApiError::Unreachable { maybe_written, .. } => Some(maybe_written),
            _ => None,
        };
        for code in ["08006", "53300", "57P03", "25006", "55000"] {
            assert_eq!(unreachable(code), Some(false), "{code}");
        }
        for code in ["57P01", "57P02"] {
            assert_eq!(unreachable(code), Some(true), "{code}");
        }
        for code in ["57014", "40001", "40P01", "22023"] {
            assert_eq!(unreachable(code), None, "{code}");
        }
        // A refusal of this request, not a failure, and not a database that is down.
        let qenc = of_sqlstate("55000", "QENC plaintext frame into an encrypting queue");
        assert_eq!(qenc.status().as_u16(), 503);
        assert!(matches!(
            qenc,
            ApiError::Coded {
                code: "encryption_required",
                ..
            }
        ));
    }

    #[test]
    fn unreadable_answers_are_internal() {
        let e: ApiError = DbError::Unreadable("column 0".into()).into();
        assert!(matches!(e, ApiError::Internal(_)));
        assert!(!DbError::Unreadable(String::new()).connection_lost());
    }
}
