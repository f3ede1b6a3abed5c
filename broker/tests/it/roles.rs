//! Who may do what (docs/http-api.md, "Access levels"): every route of the router, read
//! from broker/src/http/mod.rs, is called with a read-only, a read-write, an admin and a
//! role-less token; a token below the route's level gets 403 and changes nothing, one at
//! or above it is let through. The levels below are Queen's (its auth_middleware.cpp),
//! written out here independently of the broker's own table. Then the other ways to
//! trust a token: RS256 and EdDSA from a JWKS served by a local HTTP server, with the
//! key rotated under the broker.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::routing::get;
use axum::{Json, Router};
use common::{admin, snapshot, start_with, unique, Broker};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use queen_broker::config::{AuthConfig, Config};
use queen_broker::http::auth::sign;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const SECRET: &str = "roles-test-secret-of-some-length!!";

/// (method, route template) of every route in the router's source.
fn routes_in_source() -> Vec<(String, String)> {
    let src = include_str!("../../src/http/mod.rs");
    let mut out = Vec::new();
    for (i, _) in src.match_indices(".route(") {
        let rest = &src[i + ".route(".len()..];
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map(|(j, _)| j)
            .unwrap();
        let call = &rest[..end];
        let start = call.find('"').unwrap() + 1;
        let len = call[start..].find('"').unwrap();
        let path = &call[start..start + len];
        let after = &call.as_bytes()[start + len..];
        for m in ["get", "post", "delete", "put", "patch"] {
            let pat = format!("{m}(");
            let called = String::from_utf8_lossy(after)
                .match_indices(&pat)
                .any(|(k, _)| {
                    k == 0
                        || !(after[k - 1].is_ascii_alphanumeric() || b"_:".contains(&after[k - 1]))
                });
            if called {
                out.push((m.to_uppercase(), path.to_string()));
            }
        }
    }
    out.retain(|(_, p)| p.starts_with("/api/v1/"));
    out.sort();
    out.dedup();
    out
}

/// Queen's level of each route: 0 read-only, 1 read-write, 2 admin.
fn queen_level(method: &str, path: &str) -> u8 {
    let admin = path.starts_with("/api/v1/system/")
        || path == "/api/v1/stats/refresh"
        // Ours: broker-wide figures cross tenants (docs/decisions.md, "Status and analytics").
        || [
            "/api/v1/analytics/system-metrics",
            "/api/v1/analytics/worker-metrics",
            "/api/v1/analytics/retention",
            "/api/v1/analytics/postgres-stats",
        ]
        .contains(&path)
        || (method == "DELETE"
            && (path.starts_with("/api/v1/consumer-groups/")
                || path.starts_with("/api/v1/resources/queues/")));
    let readable = method == "GET"
        && [
            "/api/v1/status",
            "/api/v1/analytics",
            "/api/v1/resources",
            "/api/v1/messages",
            "/api/v1/consumer-groups",
            "/api/v1/dlq",
            "/api/v1/traces",
            // Ours for Queen 2.x's timers (docs/decisions.md, "Timers").
            "/api/v1/timers",
            // Ours for Queen 2.x's ephemeral list and depths (docs/decisions.md).
            "/api/v1/ephemeral/queues",
        ]
        .iter()
        .any(|p| path.starts_with(p));
    match (admin, readable) {
        (true, _) => 2,
        (_, true) => 0,
        _ => 1,
    }
}

/// A concrete path for a template (parameters filled with names nobody uses).
fn concrete(template: &str, q: &str) -> String {
    let id = Uuid::new_v4().to_string();
    template
        .replace("{queue}", q)
        .replace("{partition}", "p")
        .replace("{group}", "roles-g")
        .replace("{lease_id}", &id)
        .replace("{partition_id}", &id)
        .replace("{transaction_id}", "t")
        .replace("{id}", &id)
        .replace("{name}", "n")
        .replace("{*key}", "k")
        + if template.starts_with("/api/v1/pop") {
            "?wait=false"
        } else {
            ""
        }
}

fn token(role: Option<&str>) -> String {
    let mut claims = json!({"tenant": Uuid::new_v4(), "sub": "roles"});
    if let Some(r) = role {
        claims["role"] = json!(r);
    }
    sign(SECRET.as_bytes(), &claims)
}

async fn call(b: &Broker, method: &str, path: &str) -> (StatusCode, Value) {
    let m: Method = method.parse().unwrap();
    let mut req = b.http.request(m.clone(), format!("{}{path}", b.base));
    if m != Method::GET && m != Method::DELETE {
        req = req.header("content-type", "application/json").body("{}");
    }
    let r = req.send().await.unwrap();
    let s = r.status();
    let text = r.text().await.unwrap();
    (
        s,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn every_route_needs_queens_level() {
    common::exclusive().await;
    let routes = routes_in_source();
    assert!(routes.len() >= 39, "{routes:?}");
    assert!(routes.contains(&("DELETE".into(), "/api/v1/resources/queues/{queue}".into())));
    let b = start_with(|c| {
        c.auth = Some(AuthConfig::hs256(SECRET));
        c.metrics_queue_series = 0;
    })
    .await;
    let db = admin().await;
    for public in ["/health", "/metrics", "/metrics/prometheus"] {
        assert_eq!(
            b.get(public).await.0,
            StatusCode::OK,
            "{public} needs no token"
        );
    }
    let q = unique("roles");
    let roles = [
        (Some("read-only"), 0u8),
        (Some("read-write"), 1),
        (Some("admin"), 2),
        (None, 0),
    ];
    for (role, reach) in roles {
        let caller = b.with_token(&token(role));
        for (method, template) in &routes {
            let path = concrete(template, &q);
            let need = queen_level(method, template);
            let refused = role.is_none() || reach < need;
            let before = if refused {
                snapshot(&db).await
            } else {
                Vec::new()
            };
            let (s, v) = call(&caller, method, &path).await;
            let what = format!("{role:?} {method} {template}: {s} {v}");
            if refused {
                assert_eq!(s, StatusCode::FORBIDDEN, "{what}");
                assert!(
                    v["error"]
                        .as_str()
                        .unwrap()
                        .contains("Insufficient permissions"),
                    "{what}"
                );
                assert_eq!(
                    snapshot(&db).await,
                    before,
                    "a refused call writes nothing: {what}"
                );
            } else {
                assert!(
                    s != StatusCode::FORBIDDEN && s != StatusCode::UNAUTHORIZED,
                    "let through: {what}"
                );
            }
        }
    }
}

const RSA_PRIVATE: &str = include_str!("../keys/rsa_private.pem");
const ED_PRIVATE: &str = include_str!("../keys/ed25519_private.pem");

/// The public JWK of the test RSA key (its modulus, base64url, in keys/rsa_n.b64url).
fn rsa_jwk(kid: &str) -> Value {
    json!({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
           "n": include_str!("../keys/rsa_n.b64url").trim(), "e": "AQAB"})
}

fn ed_jwk(kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
           "x": include_str!("../keys/ed25519_x.b64url").trim()})
}

/// A local JWKS endpoint whose key set the test can change; counts the fetches.
async fn jwks_server(keys: Arc<Mutex<Value>>, hits: Arc<Mutex<u32>>) -> String {
    let app = Router::new().route(
        "/jwks.json",
        get(move || {
            let keys = keys.clone();
            let hits = hits.clone();
            async move {
                *hits.lock().unwrap() += 1;
                Json(keys.lock().unwrap().clone())
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    format!("http://{addr}/jwks.json")
}

fn signed(alg: Algorithm, kid: &str, claims: &Value) -> String {
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(RSA_PRIVATE.as_bytes()).unwrap(),
        _ => EncodingKey::from_ed_pem(ED_PRIVATE.as_bytes()).unwrap(),
    };
    let mut h = Header::new(alg);
    h.kid = Some(kid.to_string());
    encode(&h, claims, &key).unwrap()
}

#[tokio::test]
async fn rs256_and_eddsa_tokens_verify_against_a_jwks_that_rotates() {
    let keys = Arc::new(Mutex::new(json!({"keys": [rsa_jwk("rsa-1")]})));
    let hits = Arc::new(Mutex::new(0));
    let url = jwks_server(keys.clone(), hits.clone()).await;
    let vars = [
        ("JWT_ENABLED", "true".to_string()),
        ("JWT_ALGORITHM", "auto".to_string()),
        ("JWT_JWKS_URL", url),
        ("JWT_ISSUER", "https://idp.test/".to_string()),
        ("JWT_AUDIENCE", "queen-api".to_string()),
    ];
    let cfg = Config::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
        .unwrap();
    let b = start_with(|c| c.auth = cfg.auth.clone()).await;
    let q = unique("jwks");
    let claims = json!({"role": "read-write", "iss": "https://idp.test/", "aud": "queen-api"});
    let rs = b.with_token(&signed(Algorithm::RS256, "rsa-1", &claims));
    // A Queen token knows no tenant: with Queen's variables alone it is the default one.
    let (s, v) = rs
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "payload": 1}]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // The provider rotates to an Ed25519 key: a token with the new kid makes the broker
    // fetch again, once, and verifies.
    *keys.lock().unwrap() = json!({"keys": [ed_jwk("ed-2")]});
    let fetched = *hits.lock().unwrap();
    let ed = b.with_token(&signed(Algorithm::EdDSA, "ed-2", &claims));
    tokio::time::sleep(queen_broker::keys::REFETCH_AFTER).await;
    let (s, v) = ed.get(&format!("/api/v1/resources/queues/{q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        *hits.lock().unwrap(),
        fetched + 1,
        "one fetch for the new kid"
    );
    // A kid nobody published: 401, and no second fetch inside REFETCH_AFTER.
    let forged = b.with_token(&signed(Algorithm::EdDSA, "nobody", &claims));
    for _ in 0..3 {
        let (s, _) = forged.get("/api/v1/resources/queues").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(
        *hits.lock().unwrap(),
        fetched + 1,
        "no further fetch inside REFETCH_AFTER of the last"
    );
    // A read-only token of the new key cannot push; a wrong audience is 401.
    let ro = json!({"role": "read-only", "iss": "https://idp.test/", "aud": "queen-api"});
    let (s, _) = b
        .with_token(&signed(Algorithm::EdDSA, "ed-2", &ro))
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "payload": 2}]}),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let aud = json!({"role": "admin", "iss": "https://idp.test/", "aud": "other"});
    let (s, _) = b
        .with_token(&signed(Algorithm::EdDSA, "ed-2", &aud))
        .get("/api/v1/resources/queues")
        .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}
