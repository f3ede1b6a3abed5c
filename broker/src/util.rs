//! Small shared helpers: body parsing, constants of the contract, timestamp rendering.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};

/// The queue-mode consumer group (contract conventions).
pub const QUEUE_MODE: &str = "__QUEUE_MODE__";

/// The default tenant (contract conventions); this broker has no tenancy yet.
pub const DEFAULT_TENANT: uuid::Uuid = uuid::Uuid::from_u128(1);

/// Parses a JSON body into `T` (which may borrow from it); any syntax or shape problem is
/// a 400 naming it.
pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad("request body is empty; expected JSON"));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("invalid JSON body: {e}")))
}

/// UTC with milliseconds, the timestamp form of every HTTP answer.
pub fn iso_ms(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// A SQL result's timestamp (UTC with microseconds) in the HTTP form (milliseconds);
/// passed through unchanged if it does not parse.
pub fn micros_to_ms(text: &str) -> String {
    DateTime::parse_from_rfc3339(text)
        .map(|t| iso_ms(t.with_timezone(&Utc)))
        .unwrap_or_else(|_| text.to_string())
}

/// Parses a uuid, naming the field on failure.
pub fn parse_uuid(s: &str, what: &str) -> ApiResult<uuid::Uuid> {
    uuid::Uuid::parse_str(s).map_err(|_| ApiError::bad(format!("invalid {what} {s:?}: not a UUID")))
}

/// The group name stored in the database for an optional client group.
pub fn group_or_queue_mode(g: Option<&str>) -> &str {
    match g {
        Some(g) if !g.is_empty() => g,
        _ => QUEUE_MODE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_timestamps_render_with_milliseconds() {
        assert_eq!(
            micros_to_ms("2026-01-02T03:04:05.678901Z"),
            "2026-01-02T03:04:05.678Z"
        );
        assert_eq!(micros_to_ms("not a time"), "not a time");
    }

    #[test]
    fn default_tenant_literal() {
        assert_eq!(
            DEFAULT_TENANT.to_string(),
            "00000000-0000-0000-0000-000000000001"
        );
    }
}
