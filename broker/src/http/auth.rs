//! Authentication (docs/security.md, "Tenancy and JWT"; docs/decisions.md, "Tokens and
//! roles"): when it is on (`QUEEN_JWT_SECRET`, or Queen's `JWT_ENABLED`), every `/api/v1` request carries `Authorization: Bearer
//! <JWT>`, verified with the configured keys (HS256 secret, RS256 / EdDSA PEM key or
//! JWKS: crate::keys), whose role must reach the route's level (Queen's rules:
//! crate::http::access) and whose `tenant` claim scopes everything the request touches.
//!
//! Refusals: no, malformed, badly signed, expired or not-yet-valid token, wrong issuer
//! or audience → 401; a valid token whose role does not reach the route, or without a
//! usable `tenant` claim where one is required → 403. The token's header must name an
//! algorithm the configuration accepts and has a key for, so `none` or an RSA/HMAC
//! confusion is refused. With authentication off every request runs as the default
//! tenant and the header is ignored.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{decode, decode_header, Algorithm, Validation};
use serde_json::Value;
use sha2::Sha256;
use uuid::Uuid;

use crate::config::AuthConfig;
use crate::error::{ApiError, ApiResult};
use crate::http::access::{allows, level_of, roles_of};
use crate::keys::Keys;
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

/// The verified token's `sub` claim, set by [`authenticate`] on every `/api/v1` request:
/// the producer subject a push stamps on its messages (Queen's rule, its
/// `server/src/routes/push.cpp`; docs/security.md, "Producer identity"). None with
/// authentication off, or for a token without a non-empty string `sub`: a body's
/// `producerSub` never takes its place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject(pub Option<Arc<str>>);

impl<S: Send + Sync> FromRequestParts<S> for Subject {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Subject>()
            .cloned()
            .ok_or_else(|| ApiError::Internal("route without the authentication layer".into()))
    }
}

/// Middleware of every `/api/v1` route: resolves the tenant (and the producer subject)
/// or answers 401/403.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let (tenant, subject) = match (&state.config.auth, &state.keys) {
        (Some(cfg), Some(keys)) => match admit(cfg, keys, Asked::of(&req)).await {
            Ok(t) => t,
            Err(e) => return e.into_response(),
        },
        _ => (Tenant(DEFAULT_TENANT), Subject(None)),
    };
    req.extensions_mut().insert(tenant);
    req.extensions_mut().insert(subject);
    next.run(req).await
}

/// What authentication reads of a request (owned: a request is not `Sync`, and the
/// check awaits a JWKS fetch).
struct Asked {
    authorization: Option<String>,
    method: Method,
    path: String,
}

impl Asked {
    fn of(req: &Request) -> Asked {
        Asked {
            authorization: req
                .headers()
                .get(AUTHORIZATION)
                .map(|h| h.to_str().unwrap_or("").to_string()),
            method: req.method().clone(),
            path: req.uri().path().to_string(),
        }
    }
}

/// The token verified, its role checked against the route's level, its tenant and
/// subject.
async fn admit(cfg: &AuthConfig, keys: &Keys, req: Asked) -> Result<(Tenant, Subject), ApiError> {
    let claims = verify(cfg, keys, bearer(req.authorization.as_deref())?).await?;
    let level = level_of(&req.method, &req.path);
    let roles = roles_of(&claims, cfg);
    if !allows(&roles, level, cfg) {
        return Err(ApiError::Forbidden(format!(
            "Insufficient permissions: {} {} needs the {} role (or higher); the token's roles \
             ({}, {}): {roles:?}",
            req.method,
            req.path,
            level.as_str(),
            cfg.role_claim,
            cfg.roles_array_claim
        )));
    }
    Ok((tenant_of(&claims, cfg)?, subject_of(&claims)?))
}

/// The claims that say who calls: each kept as the token has it (a value of another
/// type is judged by the reader below, never a failed parse).
#[derive(serde::Deserialize, Default)]
struct IdClaims {
    #[serde(default)]
    sub: Option<Value>,
    #[serde(default)]
    tenant: Option<Value>,
}

impl IdClaims {
    fn of(claims: &Value) -> IdClaims {
        match claims {
            Value::Object(_) => {
                <IdClaims as serde::Deserialize>::deserialize(claims).unwrap_or_default()
            }
            _ => IdClaims::default(),
        }
    }
}

/// The `sub` claim as a producer subject: a non-empty string (Queen stamps only those);
/// any other value stamps nothing. One longer than a stored frame can hold (65,535
/// bytes) is refused rather than cut: a subject is an identity.
fn subject_of(claims: &Value) -> Result<Subject, ApiError> {
    match IdClaims::of(claims).sub {
        Some(Value::String(s)) if s.len() > usize::from(u16::MAX) => Err(unauthorized(
            "token sub claim longer than 65535 bytes (a producer subject must fit a stored frame)",
        )),
        Some(Value::String(s)) if !s.is_empty() => Ok(Subject(Some(Arc::from(s.as_str())))),
        _ => Ok(Subject(None)),
    }
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

/// The claims of a token that verifies with one of the configured keys for the
/// algorithm its header names, with `exp` / `nbf` (leeway `JWT_CLOCK_SKEW`), and `iss` /
/// `aud` when configured.
pub async fn verify(cfg: &AuthConfig, keys: &Keys, token: &str) -> Result<Value, ApiError> {
    let header = decode_header(token).map_err(|_| unauthorized("malformed token"))?;
    if !matches!(
        header.alg,
        Algorithm::HS256 | Algorithm::RS256 | Algorithm::EdDSA
    ) {
        return Err(unauthorized(&format!(
            "unsupported token algorithm {:?} (HS256, RS256, EdDSA)",
            header.alg
        )));
    }
    let candidates = keys.for_token(header.alg, header.kid.as_deref()).await;
    if candidates.is_empty() {
        return Err(unauthorized(&format!(
            "no key for a {:?} token{} (JWT_ALGORITHM and the configured keys decide)",
            header.alg,
            header
                .kid
                .map(|k| format!(" with kid {k}"))
                .unwrap_or_default()
        )));
    }
    let mut v = Validation::new(header.alg);
    v.leeway = cfg.clock_skew_s;
    v.validate_nbf = true;
    v.set_required_spec_claims::<&str>(&[]);
    match &cfg.audience {
        Some(a) => v.set_audience(&[a]),
        None => v.validate_aud = false,
    }
    if let Some(i) = &cfg.issuer {
        v.set_issuer(&[i]);
    }
    let mut last = None;
    for k in candidates {
        match decode::<Value>(token, &k.key, &v) {
            Ok(d) => return Ok(d.claims),
            Err(e) => last = Some(e),
        }
    }
    Err(unauthorized(match last.as_ref().map(|e| e.kind()) {
        Some(ErrorKind::ExpiredSignature) => "token expired",
        Some(ErrorKind::ImmatureSignature) => "token not yet valid",
        Some(ErrorKind::InvalidIssuer) => "token issuer is not JWT_ISSUER",
        Some(ErrorKind::InvalidAudience) => "token audience is not JWT_AUDIENCE",
        Some(ErrorKind::InvalidSignature) => "invalid token signature",
        _ => "malformed token",
    }))
}

/// The `tenant` claim (a uuid); absent: 403 when tenancy requires it, else the default
/// tenant (a Queen token, which knows no tenants).
fn tenant_of(claims: &Value, cfg: &AuthConfig) -> Result<Tenant, ApiError> {
    match IdClaims::of(claims).tenant {
        None | Some(Value::Null) if cfg.tenant_required => {
            Err(ApiError::Forbidden("token has no tenant claim".into()))
        }
        None | Some(Value::Null) => Ok(Tenant(DEFAULT_TENANT)),
        Some(Value::String(s)) => Uuid::parse_str(&s)
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
    state.engine().owned_partitions(tenant, pids).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{encode, EncodingKey, Header};
    use serde_json::json;

    const T: &str = "6f1c2a52-8a55-4b8e-9a53-0c2b1d7f4e10";

    fn cfg_of(vars: &[(&str, &str)]) -> AuthConfig {
        let c = crate::config::Config::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap();
        c.auth.expect("authentication on")
    }

    async fn check(cfg: &AuthConfig, token: &str) -> &'static str {
        let keys = Keys::new(cfg).unwrap();
        match verify(cfg, &keys, token)
            .await
            .and_then(|c| tenant_of(&c, cfg))
        {
            Ok(_) => "ok",
            Err(ApiError::Unauthorized(_)) => "401",
            Err(ApiError::Forbidden(_)) => "403",
            Err(_) => "other",
        }
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    #[tokio::test]
    async fn hs256_tokens() {
        let cfg = AuthConfig::hs256("k");
        let ok = sign(
            b"k",
            &json!({"tenant": T, "role": "admin", "exp": now() + 60}),
        );
        assert_eq!(check(&cfg, &ok).await, "ok");
        assert_eq!(
            check(&cfg, &sign(b"other", &json!({"tenant": T}))).await,
            "401"
        );
        for bad in ["a.b", "a.b.c.d", ""] {
            assert_eq!(check(&cfg, bad).await, "401", "{bad}");
        }
        // Expired beyond the 30 s clock skew; not valid before nbf beyond it.
        let expired = sign(b"k", &json!({"tenant": T, "exp": now() - 31}));
        assert_eq!(check(&cfg, &expired).await, "401");
        let skewed = sign(b"k", &json!({"tenant": T, "exp": now() - 5}));
        assert_eq!(check(&cfg, &skewed).await, "ok", "inside JWT_CLOCK_SKEW");
        let early = sign(b"k", &json!({"tenant": T, "nbf": now() + 120}));
        assert_eq!(check(&cfg, &early).await, "401");
        // QUEEN_JWT_SECRET requires the tenant claim, as a UUID.
        for claims in [
            json!({"sub": "x"}),
            json!({"tenant": "x"}),
            json!({"tenant": 5}),
        ] {
            assert_eq!(check(&cfg, &sign(b"k", &claims)).await, "403", "{claims}");
        }
        // alg none: the unsigned form of a good payload; a tampered payload.
        let p = ok.split('.').nth(1).unwrap();
        let none = format!("{}.{p}.", B64URL.encode(br#"{"alg":"none"}"#));
        assert_eq!(check(&cfg, &none).await, "401");
        let mut parts: Vec<&str> = ok.split('.').collect();
        let other = B64URL.encode(json!({"tenant": DEFAULT_TENANT}).to_string());
        parts[1] = &other;
        assert_eq!(check(&cfg, &parts.join(".")).await, "401");
        assert!(bearer(None).is_err());
        assert!(bearer(Some("Basic abc")).is_err());
        assert!(bearer(Some("Bearer ")).is_err());
        assert_eq!(bearer(Some("bearer abc")).unwrap(), "abc");
    }

    /// A token minted by an independent implementation (Python's hmac, secret "secret").
    #[tokio::test]
    async fn known_vector() {
        let tok = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
                   eyJ0ZW5hbnQiOiI2ZjFjMmE1Mi04YTU1LTRiOGUtOWE1My0wYzJiMWQ3ZjRlMTAifQ.\
                   ZwlMkp-SdANg8414ysEMKwU_9BIUHybfcy9PQLS_6SA";
        let cfg = AuthConfig::hs256("secret");
        let claims = verify(&cfg, &Keys::new(&cfg).unwrap(), tok).await.unwrap();
        assert_eq!(tenant_of(&claims, &cfg).unwrap().0.to_string(), T);
        assert_eq!(sign(b"secret", &json!({"tenant": T})), tok);
    }

    const RSA_PRIVATE: &str = include_str!("../../tests/keys/rsa_private.pem");
    const RSA_PUBLIC: &str = include_str!("../../tests/keys/rsa_public.pem");
    const ED_PRIVATE: &str = include_str!("../../tests/keys/ed25519_private.pem");
    const ED_PUBLIC: &str = include_str!("../../tests/keys/ed25519_public.pem");

    fn rs256(claims: &Value) -> String {
        let k = EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap();
        encode(&Header::new(Algorithm::RS256), claims, &k).unwrap()
    }

    fn eddsa(claims: &Value) -> String {
        let k = EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap();
        encode(&Header::new(Algorithm::EdDSA), claims, &k).unwrap()
    }

    #[tokio::test]
    async fn rs256_and_eddsa_with_pem_keys_issuer_and_audience() {
        let claims = json!({"role": "read-only", "iss": "https://idp/", "aud": "queen-api"});
        let rsa = cfg_of(&[
            ("JWT_ENABLED", "true"),
            ("JWT_ALGORITHM", "RS256"),
            ("JWT_PUBLIC_KEY", RSA_PUBLIC),
            ("JWT_ISSUER", "https://idp/"),
            ("JWT_AUDIENCE", "queen-api"),
        ]);
        assert!(
            !rsa.tenant_required,
            "Queen's variables alone: no tenant claim needed"
        );
        assert_eq!(check(&rsa, &rs256(&claims)).await, "ok");
        assert_eq!(
            check(&rsa, &eddsa(&claims)).await,
            "401",
            "EdDSA not accepted"
        );
        let mut other_aud = claims.clone();
        other_aud["aud"] = json!("someone-else");
        assert_eq!(check(&rsa, &rs256(&other_aud)).await, "401");
        let mut other_iss = claims.clone();
        other_iss["iss"] = json!("https://evil/");
        assert_eq!(check(&rsa, &rs256(&other_iss)).await, "401");
        // An HS256 token signed with the public key's bytes (the classic confusion).
        assert_eq!(
            check(&rsa, &sign(RSA_PUBLIC.as_bytes(), &claims)).await,
            "401"
        );
        let ed = cfg_of(&[
            ("JWT_ENABLED", "true"),
            ("JWT_ALGORITHM", "EdDSA"),
            ("JWT_PUBLIC_KEY", ED_PUBLIC),
        ]);
        assert_eq!(check(&ed, &eddsa(&claims)).await, "ok");
        assert_eq!(check(&ed, &rs256(&claims)).await, "401");
        let auto = cfg_of(&[
            ("JWT_ENABLED", "1"),
            ("JWT_ALGORITHM", "auto"),
            ("JWT_SECRET", "s"),
            ("JWT_PUBLIC_KEY", ED_PUBLIC),
        ]);
        assert_eq!(check(&auto, &eddsa(&claims)).await, "ok");
        assert_eq!(check(&auto, &sign(b"s", &claims)).await, "ok");
        assert_eq!(
            check(&auto, &rs256(&claims)).await,
            "401",
            "no RSA key configured"
        );
    }

    #[test]
    fn configurations_that_cannot_verify_are_refused_at_startup() {
        let err = |vars: &[(&str, &str)]| {
            crate::config::Config::from_lookup(|k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
            .unwrap_err()
        };
        assert!(err(&[("JWT_ENABLED", "true")]).contains("JWT_SECRET"));
        assert!(
            err(&[("JWT_ENABLED", "true"), ("JWT_ALGORITHM", "RS256")]).contains("JWT_PUBLIC_KEY")
        );
        assert!(err(&[
            ("JWT_ENABLED", "true"),
            ("JWT_ALGORITHM", "PS512"),
            ("JWT_SECRET", "s")
        ])
        .contains("JWT_ALGORITHM"));
        assert!(err(&[
            ("JWT_ENABLED", "true"),
            ("JWT_SECRET", "s"),
            ("JWT_SKIP_PATHS", "/api/v1/push")
        ])
        .contains("JWT_SKIP_PATHS"));
        assert!(err(&[("QUEEN_JWT_SECRET", "a"), ("JWT_SECRET", "b")]).contains("different"));
        let ok = crate::config::Config::from_lookup(|k| {
            [
                ("JWT_ENABLED", "true"),
                ("JWT_SECRET", "s"),
                ("JWT_SKIP_PATHS", "/health,/metrics/prometheus,/metrics,/"),
            ]
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
        });
        assert!(ok.unwrap().tenancy());
        // A PEM key of the other algorithm is refused too (checked when the keys are built).
        let mismatched = cfg_of(&[
            ("JWT_ENABLED", "true"),
            ("JWT_ALGORITHM", "RS256"),
            ("JWT_PUBLIC_KEY", ED_PUBLIC),
        ]);
        assert!(Keys::new(&mismatched).is_err());
    }
}
