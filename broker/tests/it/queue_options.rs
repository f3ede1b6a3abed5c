//! Queen's queue options over HTTP (docs/decisions.md, "Queue options"): the bodies
//! Queen's SDKs send are accepted and answered as Queen answers them, and each option is
//! enforced. Time is moved by ageing rows through the admin connection, never by sleeping
//! (retryDelay's few hundred milliseconds aside).

use crate::common;
use common::{items, txns};

use common::{acks_for, admin, start, unique};
use reqwest::StatusCode;
use serde_json::json;

/// Ages a queue's segments (`created_at`) and partitions (`last_write_at`) to `secs`
/// ago (they were all written a moment before). The times are constants of the
/// statement, computed once: Citus refuses a STABLE expression over a column in an
/// UPDATE of a distributed table.
async fn age(queue: &str, secs: i32) {
    let db = admin().await;
    let shift = format!("{secs} seconds");
    db.execute(
        "UPDATE queen.log_segments s SET created_at = now() - $2::text::interval
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = s.partition_id AND q.name = $1",
        &[&queue, &shift],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE queen.log_partitions p SET last_write_at = now() - $2::text::interval
           FROM queen.queues q WHERE q.id = p.queue_id AND q.name = $1",
        &[&queue, &shift],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn queen_sdk_configure_bodies_are_accepted_and_answered_with_every_option() {
    let b = start().await;
    // Queen's Go SDK TestConfigureQueue (clients/client-go/tests/queue_test.go).
    let q = unique("opt-go");
    let go = json!({"queue": q, "options": {"leaseTime": 60, "maxSize": 1000, "priority": 10,
                                           "retryLimit": 5}});
    let (s, v) = b.post("/api/v1/configure", &go).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["configured"], true, "{v}");
    // Queen's Python test_configure_queue (clients/client-py/tests/test_queue.py) reads
    // these four back.
    let q = unique("opt-py");
    let py = json!({"queue": q, "namespace": null, "task": null, "options": {
        "leaseTime": 60, "retryLimit": 5, "priority": 7, "maxSize": 5000,
        "dlqAfterMaxRetries": true}});
    let (s, v) = b.post("/api/v1/configure", &py).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let o = &v["options"];
    assert_eq!(
        (
            &o["leaseTime"],
            &o["retryLimit"],
            &o["priority"],
            &o["maxSize"]
        ),
        (&json!(60), &json!(5), &json!(7), &json!(5000)),
        "{v}"
    );
    // Every key of Queen's answer, with the effective values: no ttl unless asked for.
    for k in [
        "retryDelay",
        "ttl",
        "deadLetterQueue",
        "delayedProcessing",
        "windowBuffer",
        "retentionSeconds",
        "completedRetentionSeconds",
        "retentionEnabled",
        "encryptionEnabled",
        "maxWaitTimeSeconds",
    ] {
        assert!(!o[k].is_null(), "{k} missing: {v}");
    }
    assert_eq!(o["ttl"], 0, "{v}");
}

#[tokio::test]
async fn max_size_refuses_a_push_past_the_cap_with_429_and_writes_nothing() {
    let b = start().await;
    let q = unique("opt-cap");
    b.configure(&q, json!({"maxSize": 2})).await;
    b.push(items(&q, &["c1", "c2"])).await;
    let (s, v) = b
        .post("/api/v1/push", &json!({"items": items(&q, &["c3"])}))
        .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["code"], "queue_full", "{v}");
    assert!(v["error"].as_str().unwrap().contains("maxSize 2"), "{v}");
    // Nothing of it was written; consuming makes room.
    let pop = b.pop(&q, "batch=10").await.expect("the two messages");
    assert_eq!(txns(&pop), ["c1", "c2"]);
    let (_, acked) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(acked[0]["success"], true, "{acked}");
    b.push(items(&q, &["c3", "c4"])).await;
}

#[tokio::test]
async fn priority_orders_a_namespace_pop_higher_first() {
    let b = start().await;
    let ns = unique("optns");
    // The higher priority on the name that sorts last, so name order cannot pass for it.
    let (low, high) = (format!("{ns}.a-low"), format!("{ns}.z-high"));
    b.configure(&low, json!({"priority": 1})).await;
    b.configure(&high, json!({"priority": 9})).await;
    b.push(items(&low, &["l1", "l2"])).await;
    b.push(items(&high, &["h1", "h2"])).await;
    let mut served = Vec::new();
    for _ in 0..4 {
        let (s, v) = b
            .get(&format!("/api/v1/pop?namespace={ns}&batch=1&autoAck=true"))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        served.extend(txns(&v));
    }
    assert_eq!(
        served,
        ["h1", "h2", "l1", "l2"],
        "every turn starts at the higher priority"
    );
}

#[tokio::test]
async fn retry_delay_holds_a_failed_message_back() {
    let b = start().await;
    let q = unique("opt-rd");
    b.configure(&q, json!({"retryDelay": 800})).await;
    b.push(items(&q, &["r1"])).await;
    let pop = b.pop(&q, "batch=1").await.unwrap();
    let (s, acked) = b.ack_batch(acks_for(&pop, "failed", Some("boom"))).await;
    assert_eq!(s, StatusCode::OK, "{acked}");
    assert!(b.pop(&q, "batch=1").await.is_none(), "held for retryDelay");
    tokio::time::sleep(std::time::Duration::from_millis(900)).await;
    let again = b
        .pop(&q, "batch=1")
        .await
        .expect("redelivered after the delay");
    assert_eq!(txns(&again), ["r1"]);
}

#[tokio::test]
async fn window_buffer_serves_a_partition_only_once_it_is_quiet() {
    let b = start().await;
    let q = unique("opt-win");
    b.configure(&q, json!({"windowBuffer": 30})).await;
    b.push(items(&q, &["w1", "w2"])).await;
    assert!(b.pop(&q, "batch=10").await.is_none(), "pushed just now");
    age(&q, 31).await;
    let pop = b.pop(&q, "batch=10").await.expect("quiet for 31 s");
    assert_eq!(txns(&pop), ["w1", "w2"]);
}

#[tokio::test]
async fn ttl_retires_old_messages_unserved_and_counts_them() {
    let b = start().await;
    let q = unique("opt-ttl");
    b.configure(&q, json!({"ttl": 60})).await;
    b.push(items(&q, &["t1", "t2"])).await;
    age(&q, 61).await;
    b.push(items(&q, &["t3"])).await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    assert_eq!(txns(&pop), ["t3"], "expired messages are never delivered");
    let evicted: i64 = admin()
        .await
        .query_one(
            "SELECT evicted FROM queen.consumer_lag WHERE queue = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(evicted, 2, "and counted");
}

#[tokio::test]
async fn max_wait_time_is_enforced_by_maintenance_and_counted() {
    let b = start().await;
    let q = unique("opt-wait");
    b.configure(&q, json!({"maxWaitTimeSeconds": 60})).await;
    b.push(items(&q, &["m1", "m2"])).await;
    // The queue-mode cursor exists once a pop looked (a group registered without one
    // counts too: tests/pg_regress/sql/queue_options.sql).
    let first = b.pop(&q, "batch=1").await.unwrap();
    let (_, acked) = b.ack_batch(acks_for(&first, "completed", None)).await;
    assert_eq!(acked[0]["success"], true, "{acked}");
    age(&q, 61).await;
    b.push(items(&q, &["m3"])).await;
    let db = admin().await;
    // Another runner (a broker's maintenance loop) may hold the lock for a moment.
    for _ in 0..50 {
        let report: serde_json::Value = db
            .query_one("CALL queen.run_maintenance(10000, 1000, NULL)", &[])
            .await
            .unwrap()
            .get(0);
        if report["ran"] == true {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let pop = b.pop(&q, "batch=10").await.unwrap();
    assert_eq!(txns(&pop), ["m3"], "m2 waited too long");
    let evicted: i64 = db
        .query_one(
            "SELECT evicted FROM queen.consumer_lag WHERE queue = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(evicted, 1);
}
