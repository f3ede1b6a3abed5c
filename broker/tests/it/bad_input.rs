//! Bad input on every writing endpoint (push, ack, ack batch, configure, transaction,
//! lease extend): a 4xx with a clear JSON `{"error": ...}` and NO state change. The state
//! is every row of every queen table (cursor rows included), read through a separate
//! superuser connection before and after each request.

use crate::common;

use common::{admin, fixture, snapshot, start, start_with, unique, Broker};
use serde_json::{json, Value};

async fn send(b: &Broker, path: &str, body: Vec<u8>) -> (u16, Value, String) {
    let r = b
        .http
        .post(format!("{}{path}", b.base))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v, ct)
}

/// Sends each case and checks: the expected 4xx, a JSON body whose `error` is a non-empty
/// string (containing `needle` when given), and an unchanged database.
async fn expect_rejected(
    b: &Broker,
    db: &tokio_postgres::Client,
    cases: &[(&str, Vec<u8>, u16, Option<&str>)],
) {
    for (path, body, status, needle) in cases {
        let before = snapshot(db).await;
        let (s, v, ct) = send(b, path, body.clone()).await;
        let shown = String::from_utf8_lossy(&body[..body.len().min(200)]).to_string();
        assert_eq!(s, *status, "{path} {shown}: {v}");
        assert!(ct.starts_with("application/json"), "{path} {shown}: {ct}");
        let err = v["error"].as_str().unwrap_or_default();
        assert!(!err.is_empty(), "{path} {shown}: no error text in {v}");
        if let Some(n) = needle {
            assert!(err.contains(n), "{path} {shown}: {err:?} lacks {n:?}");
        }
        assert_eq!(
            before,
            snapshot(db).await,
            "{path} {shown} changed the database"
        );
    }
}

fn j(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

fn raw(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

#[tokio::test]
async fn bad_push_changes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let q = f.queue.as_str();
    let p = "/api/v1/push";
    expect_rejected(
        &b,
        &db,
        &[
            (p, raw("{\"items\": [{\"queue\": \"x\""), 400, None),
            (p, raw("this is not json"), 400, None),
            (p, raw(""), 400, None),
            (p, j(json!({"items": "nope"})), 400, None),
            (p, j(json!({})), 400, None),
            (p, j(json!({"items": [{"payload": 1}]})), 400, None),
            (
                p,
                j(json!({"items": [{"queue": 7, "payload": 1}]})),
                400,
                None,
            ),
            (
                p,
                j(json!({"items": [{"queue": q, "payload": 1, "traceId": "not-a-uuid"}]})),
                400,
                None,
            ),
            // One bad item rejects the whole request: the good one is not pushed either.
            (
                p,
                j(
                    json!({"items": [{"queue": q, "transactionId": "good", "payload": 1},
                                   {"queue": q, "partition": 5, "payload": 2}]}),
                ),
                400,
                None,
            ),
        ],
    )
    .await;
    // The snapshot does see a change: the good item alone is pushed.
    let before = snapshot(&db).await;
    b.push(json!([{"queue": q, "transactionId": "good", "payload": 1}]))
        .await;
    assert_ne!(before, snapshot(&db).await);
}

#[tokio::test]
async fn bad_ack_changes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let (pid, lease, txn) = (f.pid.as_str(), f.lease.as_str(), f.txn.as_str());
    let p = "/api/v1/ack";
    expect_rejected(
        &b,
        &db,
        &[
            (
                p,
                raw("{\"transactionId\": \"t1\", \"partitionId\""),
                400,
                None,
            ),
            (p, raw("[1, 2"), 400, None),
            (p, raw(""), 400, None),
            (
                p,
                j(json!({"transactionId": 5, "partitionId": pid})),
                400,
                None,
            ),
            (
                p,
                j(json!({"transactionId": txn, "partitionId": pid, "leaseId": 9})),
                400,
                None,
            ),
            (
                p,
                j(json!({"transactionId": txn, "partitionId": pid, "status": true})),
                400,
                None,
            ),
            (
                p,
                j(json!({"partitionId": pid, "leaseId": lease})),
                400,
                Some("transactionId"),
            ),
            (
                p,
                j(json!({"transactionId": txn, "leaseId": lease})),
                400,
                Some("partitionId"),
            ),
            (
                p,
                j(json!({"transactionId": txn, "partitionId": "not-a-uuid", "leaseId": lease})),
                400,
                Some("partitionId"),
            ),
            (
                p,
                j(
                    json!({"transactionId": txn, "partitionId": pid, "leaseId": lease,
                         "status": "done"}),
                ),
                400,
                Some("unknown status \"done\" at index 0"),
            ),
        ],
    )
    .await;
    // The same ack, well-formed, still works: the lease survived the bad requests.
    let (s, v, _) = send(
        &b,
        p,
        j(json!({"transactionId": txn, "partitionId": pid, "leaseId": lease})),
    )
    .await;
    assert_eq!((s, v[0]["success"].clone()), (200, json!(true)), "{v}");
    let (committed, worker): (i64, Option<String>) = {
        let r = db
            .query_one(
                "SELECT c.committed, l.worker_id FROM queen.log_consumers c
                   JOIN queen.log_leases l USING (partition_id, consumer_group) WHERE partition_id = $1",
                &[&pid.parse::<uuid::Uuid>().unwrap()],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((committed, worker), (0, None));
}

#[tokio::test]
async fn bad_ack_batch_changes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let (pid, lease, txn) = (f.pid.as_str(), f.lease.as_str(), f.txn.as_str());
    let good = json!({"transactionId": txn, "partitionId": pid, "leaseId": lease});
    let p = "/api/v1/ack/batch";
    expect_rejected(
        &b,
        &db,
        &[
            (p, raw("{\"acknowledgments\": [{"), 400, None),
            (p, raw("{]"), 400, None),
            (p, j(json!({"acknowledgments": {"a": 1}})), 400, None),
            (p, j(json!({"acknowledgments": [good, 17]})), 400, Some("index 1")),
            (p, j(json!({"consumerGroup": 3, "acknowledgments": [good]})), 400, None),
            (p, j(json!({})), 400, Some("acknowledgments")),
            // A valid full-batch ack followed by a bad item: nothing is acked.
            (
                p,
                j(json!({"acknowledgments": [good,
                    {"transactionId": "t2", "partitionId": pid, "leaseId": lease, "status": "bogus"}]})),
                400,
                Some("unknown status \"bogus\" at index 1"),
            ),
            (
                p,
                j(json!({"acknowledgments": [good,
                    {"transactionId": "t2", "partitionId": "nope", "leaseId": lease}]})),
                400,
                Some("index 1"),
            ),
            (
                p,
                j(json!({"acknowledgments": [good, {"partitionId": pid, "leaseId": lease}]})),
                400,
                Some("index 1"),
            ),
        ],
    )
    .await;
    // The registry entry survived too: the well-formed ack is a fast-path hit.
    let (s, v, _) = send(&b, p, j(json!({"acknowledgments": [good]}))).await;
    assert_eq!((s, v[0]["success"].clone()), (200, json!(true)), "{v}");
    assert_eq!(b.state.registry.stats().hits, 1);
}

#[tokio::test]
async fn bad_configure_changes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let fresh = unique("never-configured");
    let p = "/api/v1/configure";
    expect_rejected(
        &b,
        &db,
        &[
            (p, raw("{\"queue\": \"x\", \"options\": {"), 400, None),
            (p, raw("queue=x"), 400, None),
            (p, raw(""), 400, None),
            (
                p,
                j(json!({"options": {"leaseTime": 10}})),
                400,
                Some("queue"),
            ),
            (p, j(json!({"queue": 42})), 400, None),
            (p, j(json!({"queue": fresh, "options": "fast"})), 400, None),
            (
                p,
                j(json!({"queue": f.queue, "options": [1, 2]})),
                400,
                None,
            ),
            (p, j(json!({"queue": f.queue, "namespace": 5})), 400, None),
        ],
    )
    .await;
}

#[tokio::test]
async fn bad_transaction_changes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let (q, pid, lease, txn) = (
        f.queue.as_str(),
        f.pid.as_str(),
        f.lease.as_str(),
        f.txn.as_str(),
    );
    let push =
        json!({"type": "push", "items": [{"queue": q, "transactionId": "tx-new", "payload": 1}]});
    let ack = json!({"type": "ack", "transactionId": txn, "partitionId": pid, "leaseId": lease});
    let p = "/api/v1/transaction";
    expect_rejected(
        &b,
        &db,
        &[
            (p, raw("{\"operations\": [{\"type\": \"push\""), 400, None),
            (p, raw("operations"), 400, None),
            (p, raw(""), 400, None),
            (p, j(json!({"operations": "all"})), 400, None),
            (p, j(json!({})), 400, None),
            (p, j(json!({"operations": [push, {"type": "teleport"}]})), 400, None),
            (p, j(json!({"operations": [push, {"type": "ack", "partitionId": pid}]})), 400, None),
            (
                p,
                j(json!({"operations": [push, ack,
                    {"type": "ack", "transactionId": "t2", "partitionId": "nope"}]})),
                400,
                None,
            ),
            (
                p,
                j(json!({"operations": [push, ack,
                    {"type": "ack", "transactionId": "t2", "partitionId": pid, "status": "bogus"}]})),
                400,
                None,
            ),
            (
                p,
                j(json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": 1,
                    "traceId": "zzz"}]}]})),
                400,
                None,
            ),
        ],
    )
    .await;
    // Shape errors carry the transaction body too.
    let (_, v, _) = send(&b, p, j(json!({"operations": "all"}))).await;
    assert_eq!(
        (v["success"].clone(), v["reason"].clone()),
        (json!(false), json!("bad_request")),
        "{v}"
    );
}

#[tokio::test]
async fn oversized_bodies_are_413_and_change_nothing() {
    common::exclusive().await;
    let b = start_with(|c| c.body_limit_mb = 1).await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let big = "x".repeat(1024 * 1024 + 1);
    let push = j(json!({"items": [{"queue": f.queue, "payload": big}]}));
    let ack = j(json!({"transactionId": big, "partitionId": f.pid, "leaseId": f.lease}));
    let batch = j(json!({"acknowledgments": [{"transactionId": big, "partitionId": f.pid}]}));
    let conf = j(json!({"queue": f.queue, "options": {"note": big}}));
    let tx =
        j(json!({"operations": [{"type": "push", "items": [{"queue": f.queue, "payload": big}]}]}));
    let extend = j(json!({"seconds": 5, "pad": big}));
    let ext_path = format!("/api/v1/lease/{}/extend", f.lease);
    expect_rejected(
        &b,
        &db,
        &[
            ("/api/v1/push", push, 413, None),
            ("/api/v1/ack", ack, 413, None),
            ("/api/v1/ack/batch", batch, 413, None),
            ("/api/v1/configure", conf, 413, None),
            ("/api/v1/transaction", tx, 413, None),
            (ext_path.as_str(), extend, 413, None),
        ],
    )
    .await;
    // Just under the limit is accepted.
    let ok = "y".repeat(512 * 1024);
    let r = b
        .push(json!([{"queue": f.queue, "transactionId": "big-ok", "payload": ok}]))
        .await;
    assert_eq!(r[0]["status"], "queued");
}

/// Issue 12 item 12: a `seconds` that is present must be an integer from 1 to
/// QUEEN_MAX_LEASE_SECONDS. 0, negative, fractional, a string, null, a boolean, a body
/// that is not a JSON object or not JSON at all are 400 and renew nothing, even the live
/// lease (they used to renew it for 60 s). A missing body, an empty one, `null` and `{}`
/// keep meaning the default 60 s (the Python SDK sends `{}`).
#[tokio::test]
async fn bad_extend_seconds_are_400_and_renew_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let live = format!("/api/v1/lease/{}/extend", f.lease);
    let unknown = format!("/api/v1/lease/{}/extend", uuid::Uuid::now_v7());
    let mut cases = Vec::new();
    for path in [
        live.as_str(),
        unknown.as_str(),
        "/api/v1/lease/not-a-uuid/extend",
    ] {
        for body in [
            j(json!({"seconds": 0})),
            j(json!({"seconds": -5})),
            j(json!({"seconds": 1.5})),
            j(json!({"seconds": "60"})),
            j(json!({"seconds": null})),
            j(json!({"seconds": true})),
            j(json!({"seconds": [60]})),
            j(json!({"seconds": 1_000_000_000_000i64})),
            j(json!([1, 2, 3])),
            raw("\"60\""),
            raw("not json"),
            raw("{\"seconds\": "),
        ] {
            cases.push((path, body, 400, None));
        }
    }
    expect_rejected(&b, &db, &cases).await;
    let (s, v, _) = send(&b, &live, j(json!({"seconds": 0}))).await;
    assert!(v["error"].as_str().unwrap().contains("seconds"), "{s} {v}");
    // The default: no body, empty, null, {} (and an integral float) renew the live lease.
    for body in [
        raw(""),
        raw("  "),
        raw("null"),
        j(json!({})),
        j(json!({"seconds": 30.0})),
    ] {
        let shown = String::from_utf8_lossy(&body).to_string();
        let (s, v, _) = send(&b, &live, body).await;
        assert_eq!((s, v["renewed"].clone()), (200, json!(1)), "{shown}: {v}");
    }
    // A valid body against a lease that cannot exist renews nothing, without a 4xx.
    let before = snapshot(&db).await;
    for path in [unknown.as_str(), "/api/v1/lease/not-a-uuid/extend"] {
        let (s, v, _) = send(&b, path, j(json!({"seconds": 10}))).await;
        assert_eq!((s, v["renewed"].clone()), (200, json!(0)), "{path}: {v}");
    }
    assert_eq!(before, snapshot(&db).await);
}

/// A request of any method; (status, JSON body, content type).
async fn request(b: &Broker, method: &str, path: &str, body: Vec<u8>) -> (u16, Value, String) {
    if method == "POST" {
        return send(b, path, body).await;
    }
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let r = b
        .http
        .request(m, format!("{}{path}", b.base))
        .header("content-type", "application/json")
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ct,
    )
}

/// `n` random hex characters.
fn incompressible(n: usize) -> String {
    let mut s = String::new();
    while s.len() < n {
        s.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    s.truncate(n);
    s
}

/// Issue 12 item 6: partition and consumer-group names longer than 255 bytes used to
/// reach PostgreSQL and fail there with a 500 (a btree index row over 2704 bytes from
/// about 2,700 bytes). Every route that takes a name answers 400 naming the rule, and
/// changes nothing; the same 255-byte limit holds for queue names, counted in bytes
/// (128 two-byte characters are 256 bytes).
#[tokio::test]
async fn names_over_255_bytes_are_400_and_change_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "bad").await;
    let q = f.queue.as_str();
    // Random hex: PostgreSQL cannot compress it below the btree row limit, as it can a
    // run of one letter (which is how long names slipped through before).
    let long: Vec<String> = vec![
        incompressible(256),
        incompressible(2800),
        incompressible(10_240),
        "é".repeat(128),
    ];
    for name in &long {
        let bytes = name.len().to_string();
        let push = |item: Value| j(json!({"items": [item]}));
        let ack = json!({"transactionId": f.txn, "partitionId": f.pid, "leaseId": f.lease,
                         "consumerGroup": name});
        let cases: Vec<(&str, String, Vec<u8>, &str)> = vec![
            (
                "POST",
                "/api/v1/push".into(),
                push(json!({"queue": q, "partition": name, "payload": 1})),
                "partition name",
            ),
            (
                "POST",
                "/api/v1/push".into(),
                push(json!({"queue": name, "payload": 1})),
                "queue name",
            ),
            (
                "POST",
                "/api/v1/configure".into(),
                j(json!({"queue": name})),
                "queue name",
            ),
            (
                "GET",
                format!("/api/v1/pop/queue/{q}/partition/{name}"),
                vec![],
                "partition name",
            ),
            (
                "GET",
                format!("/api/v1/pop/queue/{q}?consumerGroup={name}"),
                vec![],
                "consumer group name",
            ),
            (
                "GET",
                format!("/api/v1/pop/queue/{name}"),
                vec![],
                "queue name",
            ),
            (
                "POST",
                "/api/v1/ack".into(),
                j(ack.clone()),
                "consumer group name",
            ),
            (
                "POST",
                "/api/v1/ack/batch".into(),
                j(
                    json!({"consumerGroup": name, "acknowledgments": [{"transactionId": f.txn, "partitionId": f.pid}]}),
                ),
                "consumer group name",
            ),
            (
                "POST",
                "/api/v1/transaction".into(),
                j(
                    json!({"operations": [{"type": "push", "items": [{"queue": q, "partition": name, "payload": 1}]}]}),
                ),
                "partition name",
            ),
            (
                "POST",
                "/api/v1/transaction".into(),
                j(
                    json!({"operations": [{"type": "ack", "transactionId": f.txn, "partitionId": f.pid,
                                      "consumerGroup": name}]}),
                ),
                "consumer group name",
            ),
            (
                "GET",
                format!("/api/v1/dlq?consumerGroup={name}"),
                vec![],
                "consumer group name",
            ),
            (
                "GET",
                format!("/api/v1/dlq?queue={name}"),
                vec![],
                "queue name",
            ),
            (
                "DELETE",
                format!("/api/v1/resources/queues/{name}"),
                vec![],
                "queue name",
            ),
        ];
        for (method, path, body, needle) in cases {
            let before = snapshot(&db).await;
            let (s, v, ct) = request(&b, method, &path, body).await;
            let head: String = path.chars().take(60).collect();
            let shown = format!("{method} {head} ({bytes} bytes)");
            assert_eq!(s, 400, "{shown}: {v}");
            assert!(ct.starts_with("application/json"), "{shown}");
            let e = v["error"].as_str().unwrap_or_default();
            assert!(
                e.contains(needle) && e.contains("255 bytes") && e.contains(&bytes),
                "{shown}: {e}"
            );
            assert_eq!(before, snapshot(&db).await, "{shown} changed the database");
        }
    }
    // 255 bytes is within the limit for every kind.
    let (p, g) = ("p".repeat(255), "g".repeat(255));
    let r = b
        .push(json!([{"queue": q, "partition": p, "payload": 1}]))
        .await;
    assert_eq!(r[0]["status"], "queued", "{r:?}");
    let pop = b
        .pop(q, &format!("consumerGroup={g}&batch=1"))
        .await
        .expect("a 255-byte group pops");
    assert_eq!(pop["consumerGroup"], json!(g));
    let qname = "q".repeat(255);
    let (s, v) = b.post("/api/v1/configure", &json!({"queue": qname})).await;
    assert_eq!(s, 200, "{v}");
    b.delete(&format!("/api/v1/resources/queues/{qname}")).await;
}
