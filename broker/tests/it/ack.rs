//! Ack semantics through HTTP: nacks, redelivery, DLQ, exact error texts, validation.

use crate::common;

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

/// retryLimit 0, four messages of one partition nacked in one batch: the contract's
/// per-batch head rule files the head (a1) in the ack's own statement; a2..a4 go back to
/// the partition, and each item says which of the two happened to it.
#[tokio::test]
async fn exhausted_batch_answers_per_item_what_happened() {
    let b = start().await;
    let q = unique("dlq-truth");
    b.configure(&q, json!({"retryLimit": 0, "deadLetterQueue": true}))
        .await;
    let items: Vec<Value> = (1..=4)
        .map(|i| json!({"queue": q, "payload": i, "transactionId": format!("a{i}")}))
        .collect();
    b.push(Value::Array(items)).await;
    let pop = b.pop(&q, "batch=4").await.unwrap();
    assert_eq!(pop["messages"].as_array().unwrap().len(), 4);
    let (s, v) = b.ack_batch(acks_for(&pop, "failed", Some("boom"))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v[0],
        json!({"index": 0, "transactionId": "a1", "success": true, "error": null,
               "leaseReleased": true, "dlq": true, "noop": false}),
        "{v}"
    );
    for (i, a) in v.as_array().unwrap().iter().enumerate().skip(1) {
        assert_eq!(
            a,
            &json!({"index": i, "transactionId": format!("a{}", i + 1), "success": true,
                    "error": null, "leaseReleased": true, "dlq": false, "noop": false,
                    "redelivered": true}),
            "{v}"
        );
    }
    // Listed as soon as the ack was answered: exactly the one row the answer names.
    let (_, list) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(list["pagination"]["total"], 1, "{list}");
    assert_eq!(list["messages"][0]["transactionId"], "a1");
    assert_eq!(list["messages"][0]["errorMessage"], "boom");
    let again = b.pop(&q, "batch=10").await.expect("a2..a4 redeliver");
    let txns: Vec<&str> = again["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["transactionId"].as_str().unwrap())
        .collect();
    assert_eq!(txns, ["a2", "a3", "a4"]);
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
    // Registry off: every ack goes through log_ack_by_hash_v2.
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

/// Pops one partition of `q` and returns the pop.
async fn pop_partition(b: &common::Broker, q: &str, partition: &str) -> Value {
    let (s, v) = b
        .get(&format!(
            "/api/v1/pop/queue/{q}/partition/{partition}?consumerGroup=g"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

/// Another session holds the lease row of the pop's partition, as a competing ack would:
/// an ack of it waits and hits the statement timeout.
async fn hold_lease_row(pop: &Value) -> tokio_postgres::Client {
    let admin = common::admin().await;
    let pid = pop["partitionId"].as_str().unwrap();
    admin
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM queen.log_leases WHERE partition_id = '{pid}' FOR UPDATE"
        ))
        .await
        .unwrap();
    admin
}

fn acks_of(pops: &[&Value]) -> Value {
    let all: Vec<Value> = pops
        .iter()
        .flat_map(|p| {
            acks_for(p, "completed", None)["acknowledgments"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    json!({"consumerGroup": "g", "acknowledgments": all})
}

/// A broker whose statements time out after 300 ms, with ack fusion on or off.
async fn impatient(fusion: bool) -> common::Broker {
    start_with(|c| {
        c.statement_timeout_ms = 300;
        c.ack_fusion = fusion;
    })
    .await
}

/// What a failed group's items say: with fusion, broker.md §2 step 4's text (the flush
/// and its SQL-path retry both failed); without, the statement's own error.
fn assert_not_applied(answer: &Value, fusion: bool) {
    assert_eq!(answer["success"], false, "{answer}");
    let err = answer["error"].as_str().unwrap();
    if fusion {
        assert_eq!(err, "ack flush failed; lease will expire and redeliver");
    } else {
        assert!(
            err.starts_with("not applied") && err.contains("statement timeout"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn batch_over_two_partitions_answers_per_item_when_one_fails_after_the_other_applied() {
    // Issue 12 item 4: the batch answered 503 "safe to retry" although the first
    // partition's ack was committed; its retry then failed as "invalid or expired lease".
    for fusion in [false, true] {
        let b = impatient(fusion).await;
        let q = unique("ack-split");
        b.push(
            json!([{"queue": q, "partition": "a", "payload": 1, "transactionId": "a1"},
                      {"queue": q, "partition": "b", "payload": 2, "transactionId": "b1"}]),
        )
        .await;
        let (pa, pb) = (
            pop_partition(&b, &q, "a").await,
            pop_partition(&b, &q, "b").await,
        );
        let holder = hold_lease_row(&pb).await;
        let (s, v) = b.ack_batch(acks_of(&[&pa, &pb])).await;
        assert_eq!(s, StatusCode::OK, "one group was applied: not a 5xx: {v}");
        assert_eq!(v[0]["success"], true, "{v}");
        assert_not_applied(&v[1], fusion);
        holder.batch_execute("ROLLBACK").await.unwrap();
        // The failed item was really not applied: its lease still holds, its retry works.
        let (s, again) = b.ack_batch(acks_of(&[&pb])).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(again[0]["success"], true, "{again}");
        let (s, _) = b
            .get(&format!("/api/v1/pop/queue/{q}?consumerGroup=g"))
            .await;
        assert_eq!(s, StatusCode::NO_CONTENT, "both messages are acked");
    }
}

#[tokio::test]
async fn batch_whose_every_partition_fails_writes_nothing() {
    // Without fusion nothing was applied, so the answer may be a 503 ("safe to retry");
    // with fusion broker.md §2 fixes the per-item answer. Either way nothing is written.
    for fusion in [false, true] {
        let b = impatient(fusion).await;
        let q = unique("ack-none");
        b.push(
            json!([{"queue": q, "partition": "a", "payload": 1, "transactionId": "a1"},
                      {"queue": q, "partition": "b", "payload": 2, "transactionId": "b1"}]),
        )
        .await;
        let (pa, pb) = (
            pop_partition(&b, &q, "a").await,
            pop_partition(&b, &q, "b").await,
        );
        let holders = [hold_lease_row(&pa).await, hold_lease_row(&pb).await];
        let (s, v) = b.ack_batch(acks_of(&[&pa, &pb])).await;
        if fusion {
            assert_eq!(s, StatusCode::OK, "{v}");
            assert_not_applied(&v[0], true);
            assert_not_applied(&v[1], true);
        } else {
            assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        }
        for h in &holders {
            h.batch_execute("ROLLBACK").await.unwrap();
        }
        // Both leases still hold and both acks now apply.
        let (s, v) = b.ack_batch(acks_of(&[&pa, &pb])).await;
        assert_eq!(s, StatusCode::OK);
        assert!(
            v.as_array().unwrap().iter().all(|a| a["success"] == true),
            "{v}"
        );
    }
}
