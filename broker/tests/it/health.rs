//! `/health` reports both versions (the broker's and the extension's installed
//! `extversion`) and whether the database has the SQL this broker speaks; a database
//! failure that is not the client's fault answers 503 with `Retry-After`, never 500.
//! `/metrics` answers Queen's JSON to a client that asks for JSON and the Prometheus text
//! to a scraper; `/metrics/prometheus` is always the text.

use crate::common;

use common::{admin, start, start_with, unique, waiters_of};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn health_reports_the_broker_and_extension_versions() {
    let b = start().await;
    let (s, v) = b.get("/health").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let installed: String = admin()
        .await
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(v["status"], "healthy");
    assert_eq!(v["database"], "connected");
    assert_eq!(v["service"], "queen-broker");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["brokerVersion"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["extensionVersion"], installed.as_str());
    let expected = queen_broker::db::EXTENSION_VERSION;
    assert_eq!(v["expectedExtensionVersion"], expected);
    assert_eq!(v["sqlVersionMatches"], installed == expected, "{v}");
}

#[tokio::test]
async fn an_unreachable_database_is_503_on_health() {
    let b = start_with(|c| {
        c.database_url = "postgres://nobody@127.0.0.1:1/none".into();
        c.pool_timeout_ms = 500;
    })
    .await;
    let r = b
        .http
        .get(format!("{}/health", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "unhealthy");
    assert_eq!(v["brokerVersion"], env!("CARGO_PKG_VERSION"));
}

/// The broker's backend is terminated (57P01, `pg_terminate_backend`) while its
/// statement waits on a row lock: the request answers 503 with `Retry-After` (nothing was
/// written: the statement died with its session), and the next request is served on a
/// fresh connection.
#[tokio::test]
async fn a_terminated_backend_mid_request_is_503_with_retry_after() {
    common::exclusive_on_citus().await;
    let b = start_with(|c| c.pool_size = 1).await;
    let q = unique("terminated");
    b.configure(&q, json!({"leaseTime": 30})).await;
    let mut holder = admin().await;
    let me: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM queen.queues WHERE name = $1 FOR UPDATE",
        &[&q],
    )
    .await
    .unwrap();
    let url = format!("{}/api/v1/configure", b.base);
    let body = json!({"queue": q, "options": {"leaseTime": 99}});
    let req = tokio::spawn({
        let http = b.http.clone();
        async move { http.post(url).json(&body).send().await.unwrap() }
    });
    let watcher = admin().await;
    let blocked = loop {
        let w = waiters_of(&watcher, "SELECT queen.configure_queue_v1", me).await;
        if let Some(pid) = w.first() {
            break *pid;
        }
        tokio::task::yield_now().await;
    };
    let killed: bool = watcher
        .query_one("SELECT pg_terminate_backend($1::int)", &[&blocked])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
    let r = req.await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert!(v["error"].as_str().unwrap().contains("57P01"), "{v}");
    tx.rollback().await.unwrap();
    let lease: i32 = watcher
        .query_one("SELECT lease_time FROM queen.queues WHERE name = $1", &[&q])
        .await
        .unwrap()
        .get(0);
    assert_eq!(lease, 30, "the terminated configure wrote nothing");
    let (s, v) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"leaseTime": 99}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "served on a fresh connection: {v}");
}

#[tokio::test]
async fn metrics_are_json_for_the_sdk_and_text_for_a_scraper() {
    let b = start().await;
    let q = unique("mjson");
    b.push(json!([{"queue": q, "payload": 1}, {"queue": q, "payload": 2}]))
        .await;
    // As Queen's SDKs ask: a GET with a JSON content type.
    let (s, v) = b.get("/metrics").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    for key in [
        "uptime", "requests", "messages", "database", "memory", "cpu",
    ] {
        assert!(v.get(key).is_some(), "Queen's key {key}: {v}");
    }
    assert!(v["requests"]["total"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["messages"]["total"], 2, "{v}");
    assert!(v["database"]["poolSize"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["memory"]["rss"].as_u64().unwrap() > 0, "{v}");
    // As a Prometheus scraper asks, and at Queen's text path.
    let scrape = |path: &'static str| {
        b.http
            .get(format!("{}{path}", b.base))
            .header(
                "accept",
                "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
            )
            .send()
    };
    for path in ["/metrics", "/metrics/prometheus"] {
        let r = scrape(path).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        let text = r.text().await.unwrap();
        assert!(
            text.contains("queen_messages_pushed_total 2"),
            "{path}: {text}"
        );
    }
    let (_, text) = b.get("/metrics/prometheus").await;
    assert!(text
        .as_str()
        .unwrap()
        .contains("# TYPE queen_http_requests_total counter"));
}
