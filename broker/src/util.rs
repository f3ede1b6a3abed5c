//! Small shared helpers: body parsing, constants of the contract, timestamp rendering.

use chrono::{DateTime, Utc};
use queen_log::names::{self, NameKind};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};

/// The queue-mode consumer group and the default tenant (every request's tenant while
/// tenancy is off): the contract's conventions, defined once in queen_log.
pub use queen_log::conventions::{DEFAULT_TENANT, QUEUE_MODE};

/// Parses a JSON body into `T` (which may borrow from it); any syntax or shape problem is
/// a 400 naming it.
pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad("request body is empty; expected JSON"));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("invalid JSON body: {e}")))
}

/// A JSON integer, or an integral float (`30.0`: some clients send every number as a
/// float); anything else, including `1.5` and strings, is None.
pub fn json_integer(v: &serde_json::Value) -> Option<i64> {
    let n = v.as_number()?;
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i64)
    })
}

/// Heap bytes of a std `HashMap`/`HashSet` table whose `capacity()` is `capacity`, with
/// `slot` bytes per entry: hashbrown allocates a power-of-two number of buckets (7/8 of
/// them usable, all of them for tables under 8), one slot and one control byte each, plus
/// a 16-byte group of trailing control bytes. Memory caps charge this, not the entries.
pub fn table_bytes(capacity: usize, slot: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        capacity + 1
    } else {
        capacity / 7 * 8
    };
    buckets * (slot + 1) + 16
}

/// The `capacity()` of a std `HashMap::with_capacity(n)` (hashbrown: buckets are the next
/// power of two holding `n` at 7/8 load, at least 4), without allocating one.
pub fn capacity_for(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let buckets = if n < 4 {
        4
    } else if n < 8 {
        8
    } else {
        (n * 8 / 7).next_power_of_two()
    };
    if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }
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

/// A client's consumer group as a named group: `None` for queue mode, which a client
/// selects by omitting the group, sending "" or sending the reserved literal
/// `__QUEUE_MODE__` itself (clients echo it back in acks; see broker/README.md).
pub fn named_group(g: Option<&str>) -> Option<&str> {
    g.filter(|g| !g.is_empty() && *g != QUEUE_MODE)
}

/// The shared name rule (queen_log::names: at most 255 bytes; queue names non-empty)
/// as a 400 naming what is wrong.
pub fn check_name(kind: NameKind, name: &str) -> ApiResult<()> {
    names::check_name(kind, name).map_err(|e| ApiError::bad(e.to_string()))
}

/// Queue names are non-empty and at most 255 bytes (queen_log::names, the rule of every
/// name). "" is refused although Queen's server accepts it: such a queue could never be
/// pushed to, popped or deleted over HTTP (broker/README.md, Decisions).
pub fn check_queue_name(q: &str) -> ApiResult<()> {
    check_name(NameKind::Queue, q)
}

/// `QUEEN_MAX_LEASE_SECONDS` bounds every lease a request can ask for: pop
/// `leaseSeconds`, lease extend `seconds` and configure `leaseTime`. Above → 400 naming
/// the parameter (a clamp would hand out a shorter lease than asked for without saying).
pub fn check_lease_cap(name: &str, n: i64, max: i32) -> ApiResult<()> {
    if n > i64::from(max) {
        return Err(ApiError::bad(format!(
            "{name} must be at most {max} seconds (QUEEN_MAX_LEASE_SECONDS), got {n}"
        )));
    }
    Ok(())
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
    fn queue_mode_spellings() {
        for g in [None, Some(""), Some(QUEUE_MODE)] {
            assert_eq!(named_group(g), None, "{g:?}");
            assert_eq!(group_or_queue_mode(named_group(g)), QUEUE_MODE);
        }
        assert_eq!(named_group(Some("g")), Some("g"));
        assert_eq!(named_group(Some("__queue_mode__")), Some("__queue_mode__"));
    }

    #[test]
    fn table_bytes_follow_the_real_bucket_count() {
        assert_eq!(table_bytes(0, 24), 0);
        for n in [1usize, 3, 7, 8, 14, 15, 100, 1000, 100_000] {
            let m: std::collections::HashMap<u64, u64> = (0..n as u64).map(|i| (i, i)).collect();
            let bytes = table_bytes(m.capacity(), 16);
            let buckets = (bytes - 16) / 17;
            assert!(buckets.is_power_of_two(), "{n}: {buckets}");
            assert!(buckets >= n && buckets <= 4 * n.max(2), "{n}: {buckets}");
        }
    }

    #[test]
    fn capacity_for_matches_the_real_table() {
        for n in (0..5000).chain([28_672, 57_344, 100_000, 114_688, 114_689]) {
            let m: std::collections::HashMap<[u8; 16], i64> =
                std::collections::HashMap::with_capacity(n);
            assert_eq!(capacity_for(n), m.capacity(), "{n}");
        }
    }

    #[test]
    fn default_tenant_literal() {
        assert_eq!(
            DEFAULT_TENANT.to_string(),
            "00000000-0000-0000-0000-000000000001"
        );
    }
}
