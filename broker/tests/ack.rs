//! Ack semantics through HTTP: nacks, redelivery, DLQ, exact error texts, validation.

mod common;

use common::{acks_for, start, start_with, unique};
use reqwest::StatusCode;
use serde_json::{json, Value};

const UNRESOLVED: &str = "unresolvable: transaction not in the ack window (hash purged or never \
                          pushed); if leased, the message redelivers";

#[tokio::test]
async fn nack_failed_redelivers_with_attempt_2() {
    let b = start().await;
    let q = unique("nack");
    b.configure(&q, json!({"retryLimit": 3})).await;
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "x1"},
                  {"queue": q, "payload": 2, "transactionId": "x2"}]))
        .await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pop["messages"][0]["deliveryAttempt"], 1);
    let (s, v) = b.ack_batch(acks_for(&pop, "failed", Some("nope"))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["success"], true, "{v}");
    assert_eq!(v[0]["leaseReleased"], true);
    assert_eq!(v[0]["dlq"], false);
    let again = b.pop(&q, "batch=10").await.expect("redelivery");
    let msgs = again["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "the whole batch redelivers");
    assert_eq!(msgs[0]["deliveryAttempt"], 2);
    assert_ne!(again["leaseId"], pop["leaseId"]);
    let (_, v) = b.ack_batch(acks_for(&again, "completed", None)).await;
    assert!(
        v.as_array().unwrap().iter().all(|a| a["success"] == true),
        "{v}"
    );
    assert!(b.pop(&q, "").await.is_none());
}

#[tokio::test]
async fn nack_until_dlq_then_listed() {
    let b = start().await;
    let q = unique("dlq");
    b.configure(&q, json!({"retryLimit": 1, "deadLetterQueue": true}))
        .await;
    b.push(json!([{"queue": q, "payload": {"poison": true}, "transactionId": "p1"}]))
        .await;
    let pop = b.pop(&q, "consumerGroup=g1").await.unwrap();
    let (_, v) = b
        .ack_batch(json!({"consumerGroup": "g1",
        "acknowledgments": acks_for(&pop, "failed", Some("first failure"))["acknowledgments"]}))
        .await;
    assert_eq!(v[0]["dlq"], false, "{v}");
    let pop = b.pop(&q, "consumerGroup=g1").await.expect("retry");
    assert_eq!(pop["messages"][0]["deliveryAttempt"], 2);
    assert_eq!(pop["consumerGroup"], "g1");
    let (s, v) = b
        .ack_batch(json!({"consumerGroup": "g1",
        "acknowledgments": acks_for(&pop, "failed", Some("boom at attempt 2"))["acknowledgments"]}))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["dlq"], true, "{v}");
    assert_eq!(v[0]["success"], true);
    assert_eq!(v[0]["leaseReleased"], true);
    assert!(b.pop(&q, "consumerGroup=g1").await.is_none());
    let (s, list) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(s, StatusCode::OK);
    let m = &list["messages"][0];
    assert_eq!(list["pagination"]["total"], 1, "{list}");
    assert_eq!(m["errorMessage"], "boom at attempt 2");
    assert_eq!(m["transactionId"], "p1");
    assert_eq!(m["data"], json!({"poison": true}));
    assert_eq!(m["consumerGroup"], "g1");
    assert_eq!(m["queue"], q.as_str());
    assert_eq!(m["retryCount"], 1);
    assert_eq!(m["id"], pop["messages"][0]["id"]);
    assert!(m["failedAt"].as_str().unwrap().ends_with('Z'));
    let (_, other) = b
        .get(&format!("/api/v1/dlq?queue={q}&consumerGroup=other"))
        .await;
    assert_eq!(other["pagination"]["total"], 0);
}

#[tokio::test]
async fn unknown_status_is_400_and_changes_nothing() {
    let b = start().await;
    let q = unique("badstatus");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "a"},
                  {"queue": q, "payload": 2, "transactionId": "b"}]))
        .await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let mut body = acks_for(&pop, "completed", None);
    body["acknowledgments"][1]["status"] = json!("complete");
    let (s, v) = b.ack_batch(body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        v,
        json!({"error": "unknown status \"complete\" at index 1"})
    );
    // Nothing was acked: the lease still holds (no redelivery) and a proper ack works.
    assert!(b.pop(&q, "").await.is_none());
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(
        v.as_array().unwrap().iter().all(|a| a["success"] == true),
        "{v}"
    );
}

#[tokio::test]
async fn sql_path_maps_unresolved_and_noop() {
    // Registry off: every ack goes through log_ack_by_hash_v1.
    let b = start_with(|c| c.ack_registry = false).await;
    let q = unique("sqlpath");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "a"},
                  {"queue": q, "payload": 2, "transactionId": "b"}]))
        .await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let lease = pop["leaseId"].as_str().unwrap();
    let pid = pop["partitionId"].as_str().unwrap();
    let (_, v) = b
        .ack_batch(json!({"acknowledgments": [
            {"transactionId": "a", "partitionId": pid, "leaseId": lease},
            {"transactionId": "never-pushed", "partitionId": pid, "leaseId": lease},
        ]}))
        .await;
    assert_eq!(v[0]["success"], true, "{v}");
    assert_eq!(v[0]["leaseReleased"], false, "partial ack keeps the lease");
    assert_eq!(v[1]["success"], false);
    assert_eq!(v[1]["error"], UNRESOLVED);
    assert_eq!(v[1]["leaseReleased"], false);
    // Single-ack endpoint: b completes the batch; a again is a noop.
    let (s, v) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": "b", "partitionId": pid, "leaseId": lease,
                                     "status": "success", "error": null, "consumerGroup": null}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["success"], true, "{v}");
    assert_eq!(v[0]["leaseReleased"], true);
    let (_, v) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": "a", "partitionId": pid}),
        )
        .await;
    assert_eq!(v[0]["success"], true, "{v}");
    assert_eq!(v[0]["noop"], true);
    assert_eq!(
        b.state
            .metrics
            .acks_fast
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[tokio::test]
async fn stale_and_wrong_lease_errors() {
    let b = start().await;
    let q = unique("stale");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "a"}]))
        .await;
    let pop = b.pop(&q, "").await.unwrap();
    let pid = pop["partitionId"].as_str().unwrap();
    let (_, v) = b
        .ack_batch(json!({"acknowledgments": [
            {"transactionId": "a", "partitionId": pid, "leaseId": uuid::Uuid::now_v7()}]}))
        .await;
    assert_eq!(v[0]["success"], false);
    assert_eq!(v[0]["error"], "invalid or expired lease");
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(v[0]["success"], true, "{v}");
    let (_, v) = b
        .ack_batch(json!({"acknowledgments": [
            {"transactionId": "a", "partitionId": pid, "status": "failed", "error": "late"}]}))
        .await;
    assert_eq!(v[0]["success"], false);
    assert_eq!(
        v[0]["error"],
        "already committed: the cursor moved past this message before this ack"
    );
    let (_, v) = b
        .ack_batch(json!({"acknowledgments": [
            {"transactionId": "a", "partitionId": uuid::Uuid::now_v7()}]}))
        .await;
    assert_eq!(v[0]["success"], false);
    assert_eq!(v[0]["error"], "consumer not found");
    let _: Value = v;
}
