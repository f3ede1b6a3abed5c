//! What an error from the extension (or PostgreSQL around it) means to a caller, by
//! SQLSTATE class: one table for every caller of the SQL API.

/// How a caller must treat a failed statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The database cannot be reached or refuses work for now (connection exceptions,
    /// shutdown, too many connections, out of resources): nothing was written, retry
    /// later.
    Unavailable,
    /// The statement was cancelled (statement timeout) or lost a serialization or
    /// deadlock race: its transaction rolled back, so a retry is safe.
    Retryable,
    /// A unique key said no: the transaction wire's duplicate verdict (QDUP, 23505).
    Duplicate,
    /// The input was wrong (class 22: invalid parameter, NULL not allowed, ...).
    BadInput,
    /// What the input names does not exist (P0002, no_data_found: an unknown queue,
    /// partition or consumer group of an admin function).
    NotFound,
    /// Anything else: a bug or a broken invariant on our side.
    Internal,
}

/// The class of a SQLSTATE (five characters, e.g. "57014").
pub fn classify(sqlstate: &str) -> ErrorClass {
    match sqlstate {
        // 55000: the database's extension SQL is older than the library (run ALTER
        // EXTENSION queen_ack UPDATE); 58P01/58030: the server cannot read its own files
        // (e.g. the extension's library is being reinstalled); 25006: the server is
        // read-only (a standby, or the old primary after a failover); nothing was written.
        s if s.starts_with("08")
            || s.starts_with("53")
            || s.starts_with("57P")
            || matches!(s, "55000" | "58P01" | "58030" | "25006") =>
        {
            ErrorClass::Unavailable
        }
        "57014" => ErrorClass::Retryable,
        s if s.starts_with("40") => ErrorClass::Retryable,
        "23505" => ErrorClass::Duplicate,
        s if s.starts_with("22") => ErrorClass::BadInput,
        "P0002" => ErrorClass::NotFound,
        _ => ErrorClass::Internal,
    }
}

/// Whether the connection itself is gone: no server error at all (`None`), a connection
/// exception, or the server terminating the session. The session's state is unknown, so
/// a statement on it may or may not have committed. A read-only server (25006) counts:
/// the session is useless for writes, and a new connection (libpq's
/// `target_session_attrs=read-write`) finds the primary.
pub fn connection_lost(sqlstate: Option<&str>) -> bool {
    sqlstate.is_none_or(|s| s.starts_with("08") || s.starts_with("57P") || s == "25006")
}

/// Message prefixes of the transaction wire's refusals (docs/contract.md §9).
pub const QDUP: &str = "QDUP";
pub const QTXN_ACK: &str = "QTXN ack";
pub const QTXN_RESOLVED: &str = "QTXN resolved";

/// Why the transaction wire refused, as the HTTP `reason` of docs/broker-contract.md §1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireRefusal {
    Duplicate,
    AckRejected,
    BadRequest,
    DbError,
}

impl WireRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            WireRefusal::Duplicate => "duplicate",
            WireRefusal::AckRejected => "ack_rejected",
            WireRefusal::BadRequest => "bad_request",
            WireRefusal::DbError => "db_error",
        }
    }
}

/// The reason of a wire refusal, or None when the failure is not the wire's verdict but
/// the database's state (unavailable or retryable: the caller answers 503).
pub fn wire_refusal(sqlstate: &str, message: &str) -> Option<WireRefusal> {
    match classify(sqlstate) {
        ErrorClass::Unavailable | ErrorClass::Retryable => None,
        _ if sqlstate == "23505" || message.starts_with(QDUP) => Some(WireRefusal::Duplicate),
        _ if message.starts_with(QTXN_ACK) => Some(WireRefusal::AckRejected),
        ErrorClass::BadInput => Some(WireRefusal::BadRequest),
        _ if message.starts_with(QTXN_RESOLVED) => Some(WireRefusal::BadRequest),
        _ => Some(WireRefusal::DbError),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        for s in [
            "08006", "08001", "57P01", "57P03", "53300", "53200", "55000", "58P01", "58030",
            "25006",
        ] {
            assert_eq!(classify(s), ErrorClass::Unavailable, "{s}");
        }
        for s in ["57014", "40001", "40P01"] {
            assert_eq!(classify(s), ErrorClass::Retryable, "{s}");
        }
        assert_eq!(classify("23505"), ErrorClass::Duplicate);
        assert_eq!(classify("22023"), ErrorClass::BadInput);
        assert_eq!(classify("22004"), ErrorClass::BadInput);
        assert_eq!(classify("P0001"), ErrorClass::Internal);
        assert_eq!(classify("XX000"), ErrorClass::Internal);
    }

    #[test]
    fn lost_connections() {
        assert!(connection_lost(None));
        assert!(connection_lost(Some("08006")));
        assert!(connection_lost(Some("57P01")));
        assert!(connection_lost(Some("25006")));
        assert!(!connection_lost(Some("57014")));
        assert!(!connection_lost(Some("22023")));
    }

    #[test]
    fn wire_refusals() {
        use WireRefusal::*;
        assert_eq!(
            wire_refusal("23505", "QDUP duplicate messages"),
            Some(Duplicate)
        );
        assert_eq!(
            wire_refusal("P0001", "QTXN ack failed for"),
            Some(AckRejected)
        );
        assert_eq!(
            wire_refusal("P0001", "QTXN ack references unknown"),
            Some(AckRejected)
        );
        assert_eq!(
            wire_refusal("P0001", "QTXN resolved 0 of 1 pushes"),
            Some(BadRequest)
        );
        assert_eq!(
            wire_refusal("22023", "transaction wire: ..."),
            Some(BadRequest)
        );
        assert_eq!(wire_refusal("P0001", "QPUSH bad segment"), Some(DbError));
        assert_eq!(wire_refusal("57014", "canceling statement"), None);
        assert_eq!(wire_refusal("08006", "gone"), None);
    }
}
