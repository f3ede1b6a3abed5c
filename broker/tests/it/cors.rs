//! CORS over real HTTP (docs/http-api.md, "CORS"): Queen's headers on every answer, a
//! preflight of any path answered 204 before authentication, an origin list answered by
//! name, and `off` leaving it all to the router.

use crate::common;

use common::{start_with, Broker};
use queen_broker::config::Cors;
use reqwest::StatusCode;

async fn preflight(b: &Broker, path: &str, origin: &str) -> reqwest::Response {
    b.http
        .request(reqwest::Method::OPTIONS, format!("{}{path}", b.base))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn any_origin_by_default_and_the_preflight_needs_no_token() {
    // Authentication on: the preflight still answers, a request without a token is 401
    // with the headers, so the browser can read the refusal.
    let b = start_with(|c| {
        c.auth = Some(queen_broker::config::AuthConfig::hs256(
            "s3cret-s3cret-s3cret-s3cret-32b",
        ));
    })
    .await;
    let r = preflight(&b, "/api/v1/push", "https://ops.example").await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    assert_eq!(
        header(&r, "access-control-allow-methods"),
        Some("GET, POST, PUT, DELETE, OPTIONS")
    );
    assert_eq!(
        header(&r, "access-control-allow-headers"),
        Some("Content-Type, Authorization")
    );
    assert_eq!(header(&r, "access-control-max-age"), Some("86400"));
    let r = b
        .http
        .post(format!("{}/api/v1/push", b.base))
        .header("origin", "https://ops.example")
        .json(&serde_json::json!({"items": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    let r = b
        .http
        .get(format!("{}/health", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
    let r = b
        .http
        .get(format!("{}/nowhere", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(header(&r, "access-control-allow-origin"), Some("*"));
}

#[tokio::test]
async fn a_list_answers_its_origins_by_name_and_no_other() {
    let b = start_with(|c| c.cors = Cors::Only(vec!["https://ops.example".into()])).await;
    let r = preflight(&b, "/streams/v1/cycle", "https://ops.example").await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        Some("https://ops.example")
    );
    assert_eq!(header(&r, "vary"), Some("Origin"));
    let r = preflight(&b, "/streams/v1/cycle", "https://evil.example").await;
    assert_ne!(r.status(), StatusCode::NO_CONTENT, "no preflight for it");
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    let r = b
        .http
        .get(format!("{}/health", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&r, "access-control-allow-origin"),
        None,
        "no origin sent"
    );
}

#[tokio::test]
async fn off_sends_no_cors_headers() {
    let b = start_with(|c| c.cors = Cors::Off).await;
    let r = preflight(&b, "/api/v1/push", "https://ops.example").await;
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
}
