//! Limits: pool exhaustion (503 + Retry-After), body limit (413 JSON), statement timeout,
//! batch caps and numeric query parameters, and the least-privilege connection of the
//! harness. Run against a real database (see tests/it/common.rs).

use crate::common;

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
    let held = b.state.db.pool().get().await.expect("the only connection");
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
    let db = b.state.db.pool().get().await.unwrap();
    let row = db
        .query_one(
            "SELECT current_user::text, has_table_privilege('queen.queues', 'INSERT'),
                    has_table_privilege('queen.log_consumers', 'UPDATE'),
                    pg_has_role('queen_broker', 'MEMBER'),
                    (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                      WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'p')
                        AND has_table_privilege(c.oid, 'SELECT'))",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "queen_broker_test");
    assert!(!row.get::<_, bool>(1));
    assert!(!row.get::<_, bool>(2));
    assert!(row.get::<_, bool>(3));
    assert_eq!(
        row.get::<_, i64>(4),
        0,
        "the broker calls functions only: it reads no table"
    );
    assert_eq!(
        common::with_user("postgres://postgres:pw@h:5/db?x=1", "r"),
        "postgres://r@h:5/db?x=1"
    );
    assert_eq!(
        common::with_user("postgres://h/db", "r"),
        "postgres://r@h/db"
    );
}

/// Issue 12 item 9: slow clients. Reads `s` until the broker closes it (EOF or reset)
/// or `limit` passes; meanwhile `drip` writes one byte of `bytes` per second, as a slow
/// client would. Returns what was read and whether (and when) the broker closed.
async fn drip_until_closed(
    s: &mut tokio::net::TcpStream,
    bytes: &[u8],
    limit: Duration,
) -> (Vec<u8>, Option<Duration>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut next = 0;
    let mut buf = [0u8; 4096];
    while t0.elapsed() < limit {
        if next < bytes.len() && s.write_all(&bytes[next..next + 1]).await.is_err() {
            return (got, Some(t0.elapsed()));
        }
        next += 1;
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            let left = deadline - Instant::now();
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Err(_) => break,
                Ok(Ok(0)) | Ok(Err(_)) => return (got, Some(t0.elapsed())),
                Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            }
        }
    }
    (got, None)
}

fn addr(b: &Broker) -> String {
    b.base.trim_start_matches("http://").to_string()
}

#[tokio::test]
async fn header_sent_one_byte_per_second_is_closed_within_the_header_timeout() {
    let b = start_with(|c| c.header_read_timeout_ms = 2000).await;
    let mut s = tokio::net::TcpStream::connect(addr(&b)).await.unwrap();
    // 60+ bytes at one per second: completing it would take over a minute.
    let header = format!(
        "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: {}\r\n\r\n",
        "a".repeat(40)
    );
    let (got, closed) = drip_until_closed(&mut s, header.as_bytes(), Duration::from_secs(20)).await;
    let closed = closed.expect("the broker must close a connection whose header trickles in");
    assert!(closed < Duration::from_secs(10), "closed after {closed:?}");
    assert!(
        !String::from_utf8_lossy(&got).contains("200 OK"),
        "never served"
    );
    // A prompt client on a new connection is served as usual.
    assert_eq!(b.get("/health").await.0, StatusCode::OK);
}

#[tokio::test]
async fn body_sent_one_byte_per_second_gets_408_and_is_closed_within_the_body_timeout() {
    let b = start_with(|c| c.body_read_timeout_ms = 2000).await;
    let q = unique("slowbody");
    let body = json!({"items": [{"queue": q, "payload": "x".repeat(100)}]}).to_string();
    let head = format!(
        "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr(&b)).await.unwrap();
    use tokio::io::AsyncWriteExt;
    s.write_all(head.as_bytes()).await.unwrap();
    let (got, closed) = drip_until_closed(&mut s, body.as_bytes(), Duration::from_secs(20)).await;
    let text = String::from_utf8_lossy(&got).to_string();
    let closed = closed.expect("the broker must close a connection whose body trickles in");
    assert!(
        closed < Duration::from_secs(10),
        "closed after {closed:?}: {text}"
    );
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("QUEEN_BODY_READ_TIMEOUT_MS"), "{text}");
    // Nothing was pushed.
    let db = common::admin().await;
    let n: i64 = db
        .query_one("SELECT count(*) FROM queen.queues WHERE name = $1", &[&q])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    assert!(
        b.state
            .metrics
            .body_timeouts
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
}

/// One request on an open connection, keep-alive: the raw answer head and body.
async fn roundtrip(s: &mut tokio::net::TcpStream, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("answered")
            .unwrap_or(0);
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        let complete = text.split_once("\r\n\r\n").is_some_and(|(h, body)| {
            h.lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .is_some_and(|len| body.len() >= len)
        });
        if n == 0 || complete {
            return text;
        }
    }
}

#[tokio::test]
async fn connections_over_the_cap_get_503_and_a_freed_slot_is_served() {
    let b = start_with(|c| c.max_connections = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(addr(&b)).await.unwrap();
        assert!(roundtrip(&mut s, "/health")
            .await
            .starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let mut over = tokio::net::TcpStream::connect(addr(&b)).await.unwrap();
    let text = roundtrip(&mut over, "/health").await;
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let v: Value = serde_json::from_str(body).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_MAX_CONNECTIONS"),
        "{v}"
    );
    assert!(
        b.state
            .metrics
            .connections_rejected
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    // The held connections are still served; closing one frees its slot.
    assert!(roundtrip(&mut held[0], "/health")
        .await
        .starts_with("HTTP/1.1 200"));
    drop(held.pop());
    let t0 = Instant::now();
    loop {
        let mut s = tokio::net::TcpStream::connect(addr(&b)).await.unwrap();
        if roundtrip(&mut s, "/health")
            .await
            .starts_with("HTTP/1.1 200")
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "slot never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 12 item 12: QUEEN_MAX_LEASE_SECONDS bounds every lease a request can ask for:
/// pop leaseSeconds, lease extend seconds and configure leaseTime; above it → 400
/// naming the variable, nothing changed; at it → accepted.
#[tokio::test]
async fn max_lease_bounds_pop_extend_and_configure() {
    let b = start_with(|c| c.max_lease_seconds = 100).await;
    let q = unique("maxlease");
    let (s, v) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"leaseTime": 101}}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_MAX_LEASE_SECONDS"),
        "{v}"
    );
    b.configure(&q, json!({"leaseTime": 100})).await;
    b.push(json!([{"queue": q, "payload": 1}])).await;
    let (s, v) = b
        .get(&format!("/api/v1/pop/queue/{q}?leaseSeconds=101"))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].as_str().unwrap().contains("leaseSeconds"), "{v}");
    let pop = b.pop(&q, "leaseSeconds=100").await.expect("pop at the cap");
    let lease = pop["leaseId"].as_str().unwrap();
    let admin = common::admin().await;
    let expiry = || async {
        admin
            .query_one(
                "SELECT extract(epoch FROM lease_expires_at - lease_acquired_at)::float8,
                        lease_expires_at::text
                   FROM queen.log_leases WHERE worker_id = $1",
                &[&lease],
            )
            .await
            .unwrap()
    };
    let row = expiry().await;
    assert!((row.get::<_, f64>(0) - 100.0).abs() < 1.0);
    let before: String = row.get(1);
    let path = format!("/api/v1/lease/{lease}/extend");
    let (s, v) = b.post(&path, &json!({"seconds": 101})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_MAX_LEASE_SECONDS"),
        "{v}"
    );
    assert_eq!(expiry().await.get::<_, String>(1), before, "not renewed");
    let (s, v) = b.post(&path, &json!({"seconds": 100})).await;
    assert_eq!((s, v["renewed"].clone()), (StatusCode::OK, json!(1)), "{v}");
}
