//! delayedProcessing and nack with delay over HTTP. Real sleeps, short delays,
//! generous bounds: "not before" is checked by asking right away, "after" by waiting.

use crate::common;

use std::time::{Duration, Instant};

use common::{acks_for, admin, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Every pop flavour of the broker for `q`, as query strings on the queue or partition
/// path: queue level, partition, a consumer group, auto-ack.
fn pop_paths(q: &str, group: &str) -> Vec<String> {
    vec![
        format!("/api/v1/pop/queue/{q}?batch=10"),
        format!("/api/v1/pop/queue/{q}/partition/Default?batch=10&consumerGroup={group}-p"),
        format!("/api/v1/pop/queue/{q}?batch=10&consumerGroup={group}-q&partitions=3"),
        format!("/api/v1/pop/queue/{q}?batch=10&consumerGroup={group}-a&autoAck=true"),
    ]
}

async fn get(b: &Broker, path: &str) -> (StatusCode, Value) {
    b.get(path).await
}

#[tokio::test]
async fn a_delayed_message_is_not_delivered_early_by_any_pop_and_is_once_the_delay_passed() {
    let b = start().await;
    let q = unique("delayed");
    b.configure(&q, json!({"delayedProcessing": 2})).await;
    let pushed = Instant::now();
    b.push(json!([{"queue": q, "payload": {"n": 1}, "transactionId": "d-1"}]))
        .await;
    for path in pop_paths(&q, "g") {
        let (s, v) = get(&b, &path).await;
        assert_eq!(s, StatusCode::NO_CONTENT, "{path} delivered early: {v}");
    }
    assert!(
        pushed.elapsed() < Duration::from_secs(2),
        "the checks above ran early enough"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for path in pop_paths(&q, "g") {
        let (s, v) = get(&b, &path).await;
        assert_eq!(s, StatusCode::OK, "{path} after the delay: {v}");
        assert_eq!(v["messages"][0]["transactionId"], "d-1", "{v}");
    }
}

#[tokio::test]
async fn a_parked_long_poll_wakes_when_the_delay_elapses_without_any_push() {
    let b = start().await;
    let q = unique("delayed-lp");
    b.configure(&q, json!({"delayedProcessing": 2})).await;
    b.push(json!([{"queue": q, "payload": 1}])).await;
    let parked = Instant::now();
    let (s, v) = get(
        &b,
        &format!("/api/v1/pop/queue/{q}?wait=true&timeout=15000"),
    )
    .await;
    let waited = parked.elapsed();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        waited >= Duration::from_millis(1500),
        "delivered after {waited:?}, before the delay"
    );
    assert!(
        waited < Duration::from_secs(10),
        "the long-poll slept past the delay: {waited:?}"
    );
}

#[tokio::test]
async fn delayed_processing_must_be_a_non_negative_integer() {
    let b = start().await;
    let q = unique("delayed-bad");
    for bad in [json!(-1), json!("2"), json!(1.5)] {
        let (s, v) = b
            .post(
                "/api/v1/configure",
                &json!({"queue": q, "options": {"delayedProcessing": bad}}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert!(
            v["error"].as_str().unwrap().contains("delayedProcessing"),
            "{v}"
        );
    }
}

/// The (partition, group) cursor's spent retry budget, read by the superuser.
async fn retries(q: &str) -> i32 {
    admin()
        .await
        .query_one(
            "SELECT c.batch_retry_count FROM queen.log_consumers c
               JOIN queen.log_partitions p ON p.id = c.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0)
}

/// Nack every message of `pop` with `status` and `delaySeconds`.
fn delayed_nack(pop: &Value, status: &str, delay: i64) -> Value {
    let mut body = acks_for(pop, status, Some("later"));
    for a in body["acknowledgments"].as_array_mut().unwrap() {
        a["delaySeconds"] = json!(delay);
    }
    body
}

#[tokio::test]
async fn a_nack_with_delay_redelivers_after_not_before_and_only_failed_spends_the_budget() {
    let b = start().await;
    let q = unique("nack-delay");
    b.configure(&q, json!({"retryLimit": 5})).await;
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "n-1"},
                  {"queue": q, "payload": 2, "transactionId": "n-2"}]))
        .await;
    let first = b.pop(&q, "batch=10").await.unwrap();
    let nacked = Instant::now();
    let (s, v) = b.ack_batch(delayed_nack(&first, "failed", 2)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["success"], true, "{v}");
    assert!(
        v[0]["redeliverAt"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{v}"
    );
    assert_eq!(retries(&q).await, 1, "failed charges the budget");
    assert!(
        b.pop(&q, "batch=10").await.is_none(),
        "redelivered before the delay"
    );
    let (s, again) = get(
        &b,
        &format!("/api/v1/pop/queue/{q}?batch=10&wait=true&timeout=15000"),
    )
    .await;
    let waited = nacked.elapsed();
    assert_eq!(s, StatusCode::OK, "{again}");
    assert!(
        waited >= Duration::from_millis(1500),
        "redelivered after {waited:?}"
    );
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(
        again["messages"].as_array().unwrap().len(),
        2,
        "the whole batch"
    );
    assert_eq!(again["messages"][0]["deliveryAttempt"], 2);
    // retry with a delay: held too, but the budget is not touched.
    let (_, v) = b.ack_batch(delayed_nack(&again, "retry", 1)).await;
    assert_eq!(v[1]["success"], true, "{v}");
    assert_eq!(retries(&q).await, 1, "retry leaves the budget alone");
    assert!(b.pop(&q, "batch=10").await.is_none(), "held");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let third = b
        .pop(&q, "batch=10")
        .await
        .expect("redelivered after the retry delay");
    assert_eq!(third["messages"][0]["deliveryAttempt"], 3);
    let (_, v) = b.ack_batch(acks_for(&third, "completed", None)).await;
    assert_eq!(v[0]["success"], true, "{v}");
    assert!(v[0].get("redeliverAt").is_none(), "{v}");
}

#[tokio::test]
async fn a_nack_delay_holds_only_its_partition() {
    let b = start().await;
    let q = unique("nack-hol");
    b.push(json!([{"queue": q, "partition": "A", "payload": 1},
                  {"queue": q, "partition": "B", "payload": 2}]))
        .await;
    let a = b.pop(&q, "batch=10").await.unwrap();
    let held = a["partition"].as_str().unwrap().to_string();
    b.ack_batch(delayed_nack(&a, "failed", 600)).await;
    let other = b
        .pop(&q, "batch=10")
        .await
        .expect("the other partition is not held");
    assert_ne!(other["partition"].as_str().unwrap(), held);
    let (s, _) = get(
        &b,
        &format!("/api/v1/pop/queue/{q}/partition/{held}?batch=10"),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::NO_CONTENT,
        "the held partition waits (head of line)"
    );
    let (s, v) = get(
        &b,
        &format!("/api/v1/pop/queue/{q}/partition/{held}?consumerGroup=other"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "another group is not held: {v}");
}

#[tokio::test]
async fn a_bad_delay_seconds_is_400_and_changes_nothing() {
    let b = start().await;
    let q = unique("nack-bad");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "x"}]))
        .await;
    let pop = b.pop(&q, "").await.unwrap();
    for (status, delay) in [
        ("failed", json!(-1)),
        ("failed", json!(1.5)),
        ("failed", json!("2")),
        ("completed", json!(5)),
        ("dlq", json!(5)),
        ("retry", json!(1u64 << 32)),
    ] {
        let mut body = acks_for(&pop, status, None);
        body["acknowledgments"][0]["delaySeconds"] = delay.clone();
        let (s, v) = b.ack_batch(body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{status} {delay}: {v}");
    }
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "ack",
            "transactionId": "x", "partitionId": pop["partitionId"], "leaseId": pop["leaseId"],
            "status": "failed", "delaySeconds": 5}]}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].as_str().unwrap().contains("delaySeconds"), "{v}");
    // The lease is still held by the pop: nothing was acked or released.
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(v[0]["success"], true, "{v}");
}
