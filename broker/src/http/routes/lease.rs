//! `POST /api/v1/lease/{leaseId}/extend`: best-effort renewal; always 200 unless the
//! database is unreachable (docs/broker-contract.md §5).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{check_lease_cap, json_integer, parse_json, part_error};
use crate::state::AppState;

/// Renewal length when the body is missing, empty, `null` or has no `seconds` key.
const DEFAULT_SECONDS: i32 = 60;

pub async fn extend(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(lease_id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let seconds = requested_seconds(&body, state.config.max_lease_seconds)?;
    // Leases are uuids minted by pops: anything else can hold no lease, so it gets the
    // unknown-lease answer without a database round trip.
    if uuid::Uuid::parse_str(&lease_id).is_err() {
        return Ok(Json(answer(&lease_id, 0, None)));
    }
    let db = state.db.conn().await?;
    // With tenancy on, the ownership gate and the renewal are ONE statement (§5): a
    // foreign lease renews nothing and answers exactly like an unknown one.
    let r = if state.config.tenancy() {
        db.log_renew_lease_tenant(&lease_id, seconds, tenant)
            .await?
    } else {
        db.log_renew_lease(&lease_id, seconds).await?
    };
    Ok(Json(answer(&lease_id, r.renewed, r.expires_at)))
}

/// The body: `{"seconds": n}` or `{}`; any other key is refused naming it, never dropped.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendBody {
    /// Present-but-null is kept apart from absent: absent means the default, null is refused.
    #[serde(default, deserialize_with = "present")]
    seconds: Option<Value>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The renewal length. No body, an empty one, `null` or `{}` means the default 60 s (the
/// SDKs send `{}`); any key but `seconds` is refused; a `seconds` that is present must
/// be an integer (an integral float like `30.0` counts) from 1 to the maximum lease.
/// Anything else — 0, negative, fractional, a string, null, a body that is not a JSON
/// object — is a 400: silently renewing for 60 s would hide the client's mistake.
fn requested_seconds(body: &[u8], max: i32) -> ApiResult<i32> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DEFAULT_SECONDS);
    }
    // Not straight into the struct: serde would also take `[30]` as a struct's fields.
    let v: Value = parse_json(body)?;
    let seconds = match &v {
        Value::Null => None,
        Value::Object(_) => {
            ExtendBody::deserialize(&v)
                .map_err(|e| part_error(e, "", ""))?
                .seconds
        }
        _ => {
            return Err(ApiError::bad(
                "body must be a JSON object like {\"seconds\": 60}",
            ))
        }
    };
    let Some(seconds) = seconds else {
        return Ok(DEFAULT_SECONDS);
    };
    let n = json_integer(&seconds).filter(|n| *n >= 1).ok_or_else(|| {
        ApiError::bad(format!(
            "seconds must be an integer from 1 to {max}, got {seconds}"
        ))
    })?;
    check_lease_cap("seconds", n, max)?;
    Ok(n as i32)
}

fn answer(lease_id: &str, renewed: i64, expires: Option<String>) -> Value {
    json!({
        "leaseId": lease_id,
        "success": renewed > 0,
        "renewed": renewed,
        "expiresAt": expires,
        "newExpiresAt": expires,
        "lease_expires_at": expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_seconds_mean_the_default() {
        for body in ["", "  ", "null", "{}"] {
            assert_eq!(
                requested_seconds(body.as_bytes(), 100).ok(),
                Some(60),
                "{body}"
            );
        }
    }

    #[test]
    fn present_seconds_must_be_an_integer_within_the_cap() {
        assert_eq!(
            requested_seconds(b"{\"seconds\": 100}", 100).ok(),
            Some(100)
        );
        assert_eq!(
            requested_seconds(b"{\"seconds\": 30.0}", 100).ok(),
            Some(30)
        );
        for body in [
            "{\"seconds\": 0}",
            "{\"seconds\": -1}",
            "{\"seconds\": 1.5}",
            "{\"seconds\": \"60\"}",
            "{\"seconds\": null}",
            "{\"seconds\": true}",
            "{\"seconds\": 101}",
            "{\"seconds\": 1e300}",
            "[1]",
            "not json",
            "{\"other\": 1}",
            "{\"seconds\": 30, \"leaseTime\": 30}",
        ] {
            assert!(requested_seconds(body.as_bytes(), 100).is_err(), "{body}");
        }
    }
}
