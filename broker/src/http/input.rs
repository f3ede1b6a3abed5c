//! Reading a request: JSON bodies, names, ids and lease lengths, each refused with a
//! 400 naming what is wrong (nothing is changed by a refused request).

use queen_log::names::{self, NameKind};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};

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

/// Parses a uuid, naming the field on failure.
pub fn parse_uuid(s: &str, what: &str) -> ApiResult<uuid::Uuid> {
    uuid::Uuid::parse_str(s).map_err(|_| ApiError::bad(format!("invalid {what} {s:?}: not a UUID")))
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
