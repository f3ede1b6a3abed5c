//! Limits: pool exhaustion (503 + Retry-After), body limit (413 JSON), statement timeout,
//! batch caps and numeric query parameters, and the least-privilege connection of the
//! harness. Run against a real database (see tests/common).

mod common;

use std::time::{Duration, Instant};

use common::{start, start_with, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// GET returning the response itself (headers included).
async fn raw_get(b: &Broker, path: &str) -> reqwest::Response {
    b.http
        .get(format!("{}{path}", b.base))
        .header("content-type", "application/json")
        .send()
        .await
        .expect("request")
}

#[tokio::test]
async fn pool_exhaustion_is_503_with_retry_after() {
    let b = start_with(|c| {
        c.pool_size = 1;
        c.pool_timeout_ms = 200;
    })
    .await;
    let q = unique("pool");
    let held = b.state.pool.get().await.expect("the only connection");
    let t0 = Instant::now();
    let r = raw_get(&b, &format!("/api/v1/pop/queue/{q}")).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("pool exhausted"),
        "{v}"
    );
    assert!(t0.elapsed() < Duration::from_secs(3), "answered promptly");
    let (s, v) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "payload": 1}]}),
        )
        .await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    // Freed: the same requests work again.
    drop(held);
    assert_eq!(b.push(json!([{"queue": q, "payload": 1}])).await.len(), 1);
    assert!(b.pop(&q, "").await.is_some());
}

#[tokio::test]
async fn body_over_the_limit_is_413_json() {
    let b = start_with(|c| c.body_limit_mb = 1).await;
    let q = unique("big");
    let big = "x".repeat(1024 * 1024 + 10);
    let (s, v) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "payload": big}]}),
        )
        .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(v["error"].as_str().unwrap().contains("limit"), "{v}");
    // Just under the limit is fine.
    let small = "x".repeat(512 * 1024);
    assert_eq!(
        b.push(json!([{"queue": q, "payload": small}])).await.len(),
        1
    );
    // Other plain-text rejections are JSON too.
    let (s, v) = b.get("/api/v1/nope").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(v["error"].is_string(), "{v}");
    let (s, v) = b.get("/api/v1/push").await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert!(v["error"].is_string(), "{v}");
}

#[tokio::test]
async fn statement_timeout_is_honored() {
    let b = start_with(|c| c.statement_timeout_ms = 300).await;
    let q = unique("stmt");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "a"}]))
        .await;
    let pop = b.pop(&q, "").await.unwrap();
    let pid = pop["partitionId"].as_str().unwrap().to_string();
    // Another session holds the cursor row lock every ack takes.
    let admin = common::admin().await;
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM queen.log_leases WHERE partition_id = '{pid}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let t0 = Instant::now();
    let r = b
        .http
        .post(format!("{}/api/v1/ack", b.base))
        .json(&json!({"transactionId": "a", "partitionId": pid}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"].as_str().unwrap().contains("statement timeout"),
        "{v}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    admin.batch_execute("ROLLBACK").await.unwrap();
    // Nothing was acked: the lease still holds; the owner's ack now works.
    assert!(b.pop(&q, "").await.is_none());
    let (s, v) = b.ack_batch(common::acks_for(&pop, "completed", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["success"], true, "{v}");
}

#[tokio::test]
async fn batch_caps() {
    let b = start_with(|c| {
        c.max_batch = 50;
        c.max_push_items = 5;
    })
    .await;
    let q = unique("caps");
    let (s, v) = b.get(&format!("/api/v1/pop/queue/{q}?batch=51")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("QUEEN_MAX_BATCH"),
        "{v}"
    );
    let (s, v) = b.get(&format!("/api/v1/pop/queue/{q}?partitions=51")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(b.pop(&q, "batch=50&partitions=50").await.is_none());
    let items: Vec<Value> = (0..6).map(|i| json!({"queue": q, "payload": i})).collect();
    let (s, v) = b.post("/api/v1/push", &json!({ "items": items })).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_MAX_PUSH_ITEMS"),
        "{v}"
    );
    assert!(b.pop(&q, "batch=50").await.is_none(), "nothing was pushed");
    assert_eq!(b.push(Value::Array(items[..5].to_vec())).await.len(), 5);
    // A transaction's push operations count together.
    let ops: Vec<Value> = (0..2)
        .map(|k| json!({"type": "push", "items": items[k * 3..k * 3 + 3]}))
        .collect();
    let (s, v) = b
        .post("/api/v1/transaction", &json!({ "operations": ops }))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["success"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_MAX_PUSH_ITEMS"),
        "{v}"
    );
}

#[tokio::test]
async fn numeric_query_params_are_checked() {
    let b = start().await;
    let q = unique("params");
    let bad = [
        "batch=0",
        "batch=-1",
        "batch=99999999999",
        "batch=ten",
        "partitions=0",
        "partitions=-3",
        "timeout=-5",
        "timeout=99999999999",
        "wait=true&timeout=1.5",
        "leaseSeconds=99999999999",
        "leaseSeconds=soon",
    ];
    for p in bad {
        let (s, v) = b.get(&format!("/api/v1/pop/queue/{q}?{p}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{p}: {v}");
        let e = v["error"].as_str().unwrap();
        let name = p.rsplit('&').next().unwrap().split('=').next().unwrap();
        assert!(e.contains(name), "{p}: {e}");
    }
    for p in [
        "/api/v1/dlq?limit=0",
        "/api/v1/dlq?limit=-1",
        "/api/v1/dlq?limit=100000",
        "/api/v1/dlq?offset=-1",
        "/api/v1/dlq?offset=99999999999",
    ] {
        let (s, v) = b.get(p).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{p}: {v}");
    }
    let (s, _) = b.get("/api/v1/dlq?limit=1000&offset=0").await;
    assert_eq!(s, StatusCode::OK);
    // Never a 4xx on pop: leaseSeconds ≤ 0 means the queue's lease_time, an unknown
    // subscriptionMode means "all", timeout=0 is a single poll.
    b.configure(&q, json!({"leaseTime": 77})).await;
    let items: Vec<Value> = (0..3).map(|i| json!({"queue": q, "payload": i})).collect();
    b.push(Value::Array(items)).await;
    let admin = common::admin().await;
    for (k, p) in [
        "leaseSeconds=0",
        "leaseSeconds=-5&subscriptionMode=bogus&timeout=0",
    ]
    .iter()
    .enumerate()
    {
        let group = format!("g{k}");
        let pop = b
            .pop(&q, &format!("{p}&consumerGroup={group}"))
            .await
            .unwrap_or_else(|| panic!("{p}: expected messages"));
        assert_eq!(pop["messages"].as_array().unwrap().len(), 1, "{p}");
        let secs: f64 = admin
            .query_one(
                "SELECT extract(epoch FROM lease_expires_at - lease_acquired_at)::float8
                   FROM queen.log_leases WHERE worker_id = $1",
                &[&pop["leaseId"].as_str().unwrap()],
            )
            .await
            .unwrap()
            .get(0);
        assert!((76.0..=78.0).contains(&secs), "{p}: lease of {secs} s");
    }
}

/// The harness connects the broker as the least-privilege role unless told otherwise:
/// every other suite passing proves the broker needs no table writes.
#[tokio::test]
async fn broker_runs_as_least_privilege_role() {
    if std::env::var("QUEEN_TEST_BROKER_ROLE").is_ok() {
        return;
    }
    let b = start().await;
    let db = b.state.pool.get().await.unwrap();
    let row = db
        .query_one(
            "SELECT current_user::text, has_table_privilege('queen.queues', 'INSERT'),
                    has_table_privilege('queen.log_consumers', 'UPDATE'),
                    pg_has_role('queen_broker', 'MEMBER')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "queen_broker_test");
    assert!(!row.get::<_, bool>(1));
    assert!(!row.get::<_, bool>(2));
    assert!(row.get::<_, bool>(3));
    assert_eq!(
        common::with_user("postgres://postgres:pw@h:5/db?x=1", "r"),
        "postgres://r@h:5/db?x=1"
    );
    assert_eq!(
        common::with_user("postgres://h/db", "r"),
        "postgres://r@h/db"
    );
}
