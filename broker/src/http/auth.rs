//! Tenancy (docs/broker-contract.md §1, §2 step 3, §5): when `QUEEN_JWT_SECRET` is set, every
//! `/api/v1` request carries `Authorization: Bearer <JWT>`, HS256-signed with that secret,
//! whose `tenant` claim (a uuid) scopes everything the request touches.
//!
//! The verification is deliberately small: HS256 only (the header's `alg` must say so,
//! so `none` or an RSA/HMAC confusion is refused), a constant-time HMAC comparison, and
//! the standard `exp` / `nbf` claims honored when present (no leeway). Bad token → 401;
//! a valid token without a usable `tenant` claim → 403. With tenancy off every request
//! runs as the default tenant and the header is ignored.

use std::collections::HashSet;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::util::DEFAULT_TENANT;

/// The caller's tenant, set by [`authenticate`] on every `/api/v1` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenant(pub Uuid);

/// JWT segments are base64url; padding is tolerated although the standard omits it.
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Tenant>()
            .copied()
            .ok_or_else(|| ApiError::Internal("route without the authentication layer".into()))
    }
}

/// Middleware of every `/api/v1` route: resolves the tenant or answers 401/403.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let tenant = match &state.config.jwt_secret {
        None => Tenant(DEFAULT_TENANT),
        Some(secret) => {
            let header = req
                .headers()
                .get(AUTHORIZATION)
                .map(|h| h.to_str().unwrap_or(""));
            let verdict = bearer(header).and_then(|t| verify(secret.as_bytes(), t, now()));
            match verdict {
                Ok(t) => t,
                Err(e) => return e.into_response(),
            }
        }
    };
    req.extensions_mut().insert(tenant);
    next.run(req).await
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn unauthorized(m: &str) -> ApiError {
    ApiError::Unauthorized(m.to_string())
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
fn bearer(header: Option<&str>) -> Result<&str, ApiError> {
    let h = header.ok_or_else(|| unauthorized("missing Authorization: Bearer token"))?;
    match h.trim().split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(unauthorized(
            "Authorization header must be \"Bearer <token>\"",
        )),
    }
}

/// Verifies an HS256 JWT at unix time `now` and returns its tenant.
pub fn verify(secret: &[u8], token: &str, now: i64) -> Result<Tenant, ApiError> {
    let malformed = || unauthorized("malformed token");
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let header: Value = B64URL
        .decode(h)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(malformed)?;
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return Err(unauthorized("unsupported token algorithm (HS256 only)"));
    }
    let sig = B64URL.decode(sig).map_err(|_| malformed())?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(h.as_bytes());
    mac.update(b".");
    mac.update(p.as_bytes());
    mac.verify_slice(&sig)
        .map_err(|_| unauthorized("invalid token signature"))?;
    let claims: Value = B64URL
        .decode(p)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(Value::is_object)
        .ok_or_else(malformed)?;
    let time = |k: &str| -> Result<Option<f64>, ApiError> {
        match claims.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| unauthorized(&format!("token claim {k} must be a number"))),
        }
    };
    if matches!(time("exp")?, Some(exp) if (now as f64) >= exp) {
        return Err(unauthorized("token expired"));
    }
    if matches!(time("nbf")?, Some(nbf) if (now as f64) < nbf) {
        return Err(unauthorized("token not yet valid"));
    }
    match claims.get("tenant") {
        None | Some(Value::Null) => Err(ApiError::Forbidden("token has no tenant claim".into())),
        Some(Value::String(s)) => Uuid::parse_str(s)
            .map(Tenant)
            .map_err(|_| ApiError::Forbidden("token tenant claim is not a UUID".into())),
        Some(_) => Err(ApiError::Forbidden(
            "token tenant claim is not a UUID".into(),
        )),
    }
}

/// Signs `claims` as an HS256 JWT: for tests and tooling (`queen-broker` never mints).
pub fn sign(secret: &[u8], claims: &Value) -> String {
    let h = B64URL.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let p = B64URL.encode(claims.to_string());
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(h.as_bytes());
    mac.update(b".");
    mac.update(p.as_bytes());
    let sig = B64URL.encode(mac.finalize().into_bytes());
    format!("{h}.{p}.{sig}")
}

/// Partition ids of `pids` that belong to `tenant` (one round trip), or None when
/// tenancy is off and every partition is the caller's.
pub async fn owned_partitions(
    state: &AppState,
    tenant: Uuid,
    pids: impl Iterator<Item = Uuid>,
) -> ApiResult<Option<HashSet<Uuid>>> {
    if !state.config.tenancy() {
        return Ok(None);
    }
    let mut pids: Vec<Uuid> = pids.collect();
    pids.sort_unstable();
    pids.dedup();
    if pids.is_empty() {
        return Ok(Some(HashSet::new()));
    }
    let owned = state
        .db
        .conn()
        .await?
        .owned_partitions(&pids, tenant)
        .await?;
    Ok(Some(owned.into_iter().collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = "6f1c2a52-8a55-4b8e-9a53-0c2b1d7f4e10";

    fn status(r: Result<Tenant, ApiError>) -> &'static str {
        match r {
            Ok(_) => "ok",
            Err(ApiError::Unauthorized(_)) => "401",
            Err(ApiError::Forbidden(_)) => "403",
            Err(_) => "other",
        }
    }

    #[test]
    fn accepts_a_signed_token() {
        let tok = sign(b"k", &json!({"tenant": T, "exp": 2_000}));
        assert_eq!(
            verify(b"k", &tok, 1_000).unwrap(),
            Tenant(Uuid::parse_str(T).unwrap())
        );
    }

    /// A token minted by an independent implementation (Python's hmac, secret "secret").
    #[test]
    fn known_vector() {
        let tok = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
                   eyJ0ZW5hbnQiOiI2ZjFjMmE1Mi04YTU1LTRiOGUtOWE1My0wYzJiMWQ3ZjRlMTAifQ.\
                   ZwlMkp-SdANg8414ysEMKwU_9BIUHybfcy9PQLS_6SA";
        assert_eq!(verify(b"secret", tok, 0).unwrap().0.to_string(), T);
        assert_eq!(sign(b"secret", &json!({"tenant": T})), tok);
    }

    #[test]
    fn rejections() {
        let good = sign(b"k", &json!({"tenant": T}));
        assert_eq!(status(verify(b"other", &good, 0)), "401");
        assert_eq!(status(verify(b"k", "a.b", 0)), "401");
        assert_eq!(status(verify(b"k", "a.b.c.d", 0)), "401");
        assert_eq!(status(verify(b"k", "", 0)), "401");
        let expired = sign(b"k", &json!({"tenant": T, "exp": 10}));
        assert_eq!(status(verify(b"k", &expired, 10)), "401");
        let early = sign(b"k", &json!({"tenant": T, "nbf": 10}));
        assert_eq!(status(verify(b"k", &early, 9)), "401");
        assert_eq!(status(verify(b"k", &early, 10)), "ok");
        assert_eq!(
            status(verify(b"k", &sign(b"k", &json!({"sub": "x"})), 0)),
            "403"
        );
        assert_eq!(
            status(verify(b"k", &sign(b"k", &json!({"tenant": "x"})), 0)),
            "403"
        );
        assert_eq!(
            status(verify(b"k", &sign(b"k", &json!({"tenant": 5})), 0)),
            "403"
        );
        // alg none: the unsigned form of a good payload.
        let p = good.split('.').nth(1).unwrap();
        let none = format!("{}.{p}.", B64URL.encode(br#"{"alg":"none"}"#));
        assert_eq!(status(verify(b"k", &none, 0)), "401");
        // Tampered payload with the original signature.
        let mut parts: Vec<&str> = good.split('.').collect();
        let other = B64URL.encode(json!({"tenant": DEFAULT_TENANT}).to_string());
        parts[1] = &other;
        assert_eq!(status(verify(b"k", &parts.join("."), 0)), "401");
        assert!(bearer(None).is_err());
        assert!(bearer(Some("Basic abc")).is_err());
        assert!(bearer(Some("Bearer ")).is_err());
        assert_eq!(bearer(Some("bearer abc")).unwrap(), "abc");
    }
}
