//! Reading a request: JSON bodies, names, ids and lease lengths, each refused with a
//! 400 naming what is wrong (nothing is changed by a refused request).

use std::collections::HashMap;

use queen_log::names::{self, NameKind};
pub use queen_log::options::json_integer;
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};

/// Parses a JSON body into `T` (which may borrow from it); any syntax or shape problem is
/// a 400 naming it.
pub fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad("request body is empty; expected JSON"));
    }
    serde_json::from_slice(body).map_err(|e| match unknown_field(&e) {
        Some(f) => ApiError::field(f, refused(&e)),
        None => ApiError::bad(format!("invalid JSON body: {e}")),
    })
}

/// The body of a batch of operations (`POST /api/v1/kv`, `POST /api/v1/timers`):
/// `{operations}` and no other key, the list kept raw for the verb's own reader.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationsBody<'a> {
    #[serde(borrow)]
    pub operations: &'a serde_json::value::RawValue,
}

/// An optional body: empty means `T::default()` (`{}`), anything else as [`parse_json`].
pub fn body_or_empty<'a, T: Deserialize<'a> + Default>(body: &'a [u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(T::default())
    } else {
        parse_json(body)
    }
}

/// The field a `deny_unknown_fields` struct refused (serde's "unknown field `x`, expected
/// ..."), if that is what `e` is. Bodies are strict (docs/broker-contract.md §1): a key this
/// broker does not implement is refused, never dropped, so a client is told at once that
/// a behaviour it asked for would not happen.
pub fn unknown_field(e: &serde_json::Error) -> Option<String> {
    let m = e.to_string();
    let rest = m.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// The text of a refused unknown field.
fn refused(e: &serde_json::Error) -> String {
    format!("{e}: not implemented by this broker, refused (nothing was changed)")
}

/// A serde error of the part of a body at `at` (e.g. `items[3]`, `acknowledgments[0]`;
/// "" for the top level): an unknown field is a 400 naming `at.field`, anything else a
/// 400 prefixed with `what`.
pub fn part_error(e: serde_json::Error, at: &str, what: &str) -> ApiError {
    match unknown_field(&e) {
        Some(f) if at.is_empty() => ApiError::field(f, refused(&e)),
        Some(f) => ApiError::field(format!("{at}.{f}"), format!("{what}{}", refused(&e))),
        None => ApiError::bad(format!("{what}{e}")),
    }
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

/// A boolean query parameter: true/1/yes or false/0/no (any case); absent is `default`;
/// anything else is a 400 naming it.
pub fn bool_param(v: Option<&str>, name: &str, default: bool) -> ApiResult<bool> {
    match v.map(str::to_ascii_lowercase).as_deref() {
        None => Ok(default),
        Some("false" | "0" | "no") => Ok(false),
        Some("true" | "1" | "yes") => Ok(true),
        Some(other) => Err(ApiError::bad(format!(
            "{name} must be true or false, got {other:?}"
        ))),
    }
}

/// Queue names are non-empty and at most 255 bytes (queen_log::names, the rule of every
/// name). "" is refused although Queen's server accepts it: such a queue could never be
/// pushed to, popped or deleted over HTTP (docs/decisions.md, "Payloads and names").
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

/// The rule of one numeric query parameter: its name and inclusive range, and what sets
/// the maximum (a knob or the contract; named in the error, may be empty).
pub struct Param<'a> {
    pub name: &'a str,
    pub min: i64,
    pub max: i64,
    pub max_is: &'a str,
}

impl<'a> Param<'a> {
    /// `name` takes an integer from `min` to `max`.
    pub const fn new(name: &'a str, min: i64, max: i64) -> Self {
        Param {
            name,
            min,
            max,
            max_is: "",
        }
    }

    /// The same, naming what sets the maximum in the error.
    pub const fn max_is(self, max_is: &'a str) -> Self {
        Param { max_is, ..self }
    }

    fn refuse(&self, v: &str, what: &str) -> ApiError {
        let why = if self.max_is.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.max_is)
        };
        ApiError::BadParameter {
            name: self.name.to_string(),
            message: format!(
                "{} must be {what} from {} to {}{why}, got {v:?}",
                self.name, self.min, self.max
            ),
        }
    }

    fn raw<'q>(&self, q: &'q HashMap<String, String>) -> Option<&'q str> {
        q.get(self.name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// `offset` of every paged listing: rows to skip, default 0.
pub const OFFSET: Param<'static> = Param::new("offset", 0, i32::MAX as i64);

/// The one parser of integer query parameters (`limit`, `offset`, `batch`, `timeout`,
/// ...): absent or empty → None (the caller's default); otherwise an integer within the
/// range, else a 400 naming the parameter and its range. Never a clamp: a silently
/// shortened page or batch would hide the client's mistake.
pub fn int_query(q: &HashMap<String, String>, p: &Param<'_>) -> ApiResult<Option<i64>> {
    let Some(v) = p.raw(q) else {
        return Ok(None);
    };
    v.parse::<i64>()
        .ok()
        .filter(|n| (p.min..=p.max).contains(n))
        .map(Some)
        .ok_or_else(|| p.refuse(v, "an integer"))
}

/// The same for a number of seconds that may have a fraction (`minLagSeconds`).
pub fn seconds_query(q: &HashMap<String, String>, p: &Param<'_>) -> ApiResult<Option<f64>> {
    let Some(v) = p.raw(q) else {
        return Ok(None);
    };
    v.parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= p.min as f64 && *n <= p.max as f64)
        .map(Some)
        .ok_or_else(|| p.refuse(v, "a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(k: &str, v: &str) -> HashMap<String, String> {
        HashMap::from([(k.to_string(), v.to_string())])
    }

    const LIMIT: Param<'static> = Param::new("limit", 1, 1000);

    #[test]
    fn in_range_absent_and_empty() {
        assert_eq!(int_query(&q("limit", "1"), &LIMIT).unwrap(), Some(1));
        assert_eq!(int_query(&q("limit", "1000"), &LIMIT).unwrap(), Some(1000));
        assert_eq!(int_query(&q("limit", ""), &LIMIT).unwrap(), None);
        assert_eq!(int_query(&HashMap::new(), &LIMIT).unwrap(), None);
    }

    #[test]
    fn out_of_range_or_unparsable_is_a_400_naming_the_parameter() {
        for v in [
            "0",
            "-5",
            "1001",
            "999999999999999999999",
            "ten",
            "1.5",
            " 3",
        ] {
            match int_query(&q("limit", v), &LIMIT) {
                Err(ApiError::BadParameter { name, message }) => {
                    assert_eq!(name, "limit");
                    assert!(message.contains("from 1 to 1000"), "{message}");
                }
                other => panic!("{v}: {other:?}"),
            }
        }
        for v in ["-1", "NaN", "inf", "1001", "x"] {
            assert!(seconds_query(&q("limit", v), &LIMIT).is_err(), "{v}");
        }
        assert_eq!(
            seconds_query(&q("limit", "2.5"), &LIMIT).unwrap(),
            Some(2.5)
        );
    }
}
