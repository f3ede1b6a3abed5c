//! `POST /api/v1/lease/{leaseId}/extend`: best-effort renewal; always 200 unless the
//! database is unreachable (broker.md §5).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::routes::auth::Tenant;
use crate::state::AppState;

/// Renewal length when the body is missing, empty, unparsable or has no usable `seconds`.
const DEFAULT_SECONDS: i32 = 60;

pub async fn extend(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(lease_id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let seconds = requested_seconds(&body);
    // Leases are uuids minted by pops: anything else can hold no lease, so it gets the
    // unknown-lease answer without a database round trip.
    if uuid::Uuid::parse_str(&lease_id).is_err() {
        return Ok(Json(answer(&lease_id, 0, None)));
    }
    let db = state.db().await?;
    // With tenancy on, the ownership gate and the renewal are ONE statement (§5): a
    // foreign lease renews nothing and answers exactly like an unknown one.
    let row = if state.config.tenancy() {
        db.query_one(
            "SELECT queen.log_renew_lease_tenant_v1($1::text, $2::int, $3::uuid)",
            &[&lease_id, &seconds, &tenant],
        )
        .await?
    } else {
        db.query_one(
            "SELECT queen.log_renew_lease_v1($1::text, $2::int)",
            &[&lease_id, &seconds],
        )
        .await?
    };
    let r: Value = row.get(0);
    let renewed = r.get("renewed").and_then(Value::as_i64).unwrap_or(0);
    let expires = r
        .get("expiresAt")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Json(answer(&lease_id, renewed, expires)))
}

fn requested_seconds(body: &[u8]) -> i32 {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    v.as_ref()
        .and_then(|v| v.get("seconds"))
        .and_then(|s| s.as_i64().or_else(|| s.as_f64().map(|f| f as i64)))
        .filter(|s| *s > 0)
        .map_or(DEFAULT_SECONDS, |s| s.min(i64::from(i32::MAX)) as i32)
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
