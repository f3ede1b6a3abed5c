//! `POST /api/v1/transaction`: pushes and acks all or nothing.

use crate::common;

use common::{start, start_with, unique};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[tokio::test]
async fn ack_and_push_commit_together() {
    let b = start().await;
    let (src, dst) = (unique("tx-src"), unique("tx-dst"));
    b.push(json!([{"queue": src, "payload": 1, "transactionId": "in-1"}]))
        .await;
    let pop = b.pop(&src, "").await.unwrap();
    let m = &pop["messages"][0];
    let (s, v) = b
        .post("/api/v1/transaction", &json!({"operations": [
            {"type": "ack", "transactionId": "in-1", "partitionId": m["partitionId"],
             "leaseId": pop["leaseId"]},
            {"type": "push", "items": [{"queue": dst, "payload": {"out": 1}, "transactionId": "out-1"},
                                       {"queue": dst, "payload": {"out": 2}, "transactionId": "out-1"}]},
        ]}))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["success"], true, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r[0]["type"], "ack");
    assert_eq!(r[0]["dlq"], false);
    assert_eq!(r[1]["type"], "push");
    assert_eq!(r[1]["queueName"], dst.as_str());
    assert_eq!(r[2]["duplicate"], true);
    assert_eq!(r[2]["messageId"], r[1]["messageId"]);
    assert!(
        b.pop(&src, "").await.is_none(),
        "acked inside the transaction"
    );
    let out = b.pop(&dst, "batch=10").await.unwrap();
    assert_eq!(out["messages"].as_array().unwrap().len(), 1);
    assert_eq!(out["messages"][0]["id"], r[1]["messageId"]);
}

#[tokio::test]
async fn duplicate_push_rolls_back_everything() {
    // Registry off so the ack goes in hash form.
    let b = start_with(|c| c.ack_registry = false).await;
    let (src, dst) = (unique("txd-src"), unique("txd-dst"));
    b.push(json!([{"queue": src, "payload": 1, "transactionId": "a"},
                  {"queue": dst, "payload": 0, "transactionId": "seen"}]))
        .await;
    let pop = b.pop(&src, "").await.unwrap();
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [
                {"type": "ack", "transactionId": "a", "partitionId": pop["partitionId"],
                 "leaseId": pop["leaseId"]},
                {"type": "push", "items": [{"queue": dst, "payload": 1, "transactionId": "seen"}]},
            ]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["reason"], "duplicate");
    assert_eq!(v["results"], json!([]));
    assert!(v["error"].as_str().unwrap().contains("duplicate"), "{v}");
    // The ack was rolled back with the push: the lease still holds, then acks fine.
    let (_, a) = b
        .ack_batch(json!({"acknowledgments": [{"transactionId": "a",
            "partitionId": pop["partitionId"], "leaseId": pop["leaseId"]}]}))
        .await;
    assert_eq!(a[0]["success"], true, "{a}");
    assert_eq!(a[0]["leaseReleased"], true);
}

#[tokio::test]
async fn unknown_transaction_id_is_ack_rejected_and_bad_shapes_are_400() {
    let b = start().await;
    let q = unique("txr");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "a"}]))
        .await;
    let pop = b.pop(&q, "").await.unwrap();
    let (_, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [
            {"type": "ack", "transactionId": "nope", "partitionId": pop["partitionId"],
             "leaseId": pop["leaseId"]}]}),
        )
        .await;
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(v["reason"], "ack_rejected");
    let (s, v) = b
        .post("/api/v1/transaction", &json!({"operations": [
            {"type": "ack", "transactionId": "a", "partitionId": pop["partitionId"], "status": "bogus"}]}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["reason"], "bad_request");
    assert_eq!(v["success"], false);
    assert!(v["transactionId"].is_string());
    let (s, v) = b.post_raw("/api/v1/transaction", "{").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["reason"], "bad_request");
    let _: Value = v;
}

/// A transaction's acks take the one fast-path decision /ack takes
/// (crate::engine::ack::fast_path_end): with the registry off by configuration the
/// registry is not consulted at all and the acks go by hash; with it on, a whole popped
/// batch goes positional and consumes the entry.
#[tokio::test]
async fn transaction_acks_take_the_ack_routes_fast_path_decision() {
    for registry in [false, true] {
        let b = start_with(|c| c.ack_registry = registry).await;
        assert_eq!(b.state.registry.enabled(), registry);
        let q = unique("tx-fast");
        b.push(json!([{"queue": q, "payload": 1, "transactionId": "f-1"},
                      {"queue": q, "payload": 2, "transactionId": "f-2"}]))
            .await;
        let pop = b.pop(&q, "batch=10").await.unwrap();
        let ops: Vec<Value> = pop["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                json!({"type": "ack", "transactionId": m["transactionId"],
                       "partitionId": m["partitionId"], "leaseId": pop["leaseId"]})
            })
            .collect();
        assert_eq!(ops.len(), 2);
        let (s, v) = b
            .post("/api/v1/transaction", &json!({"operations": ops}))
            .await;
        assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
        let stats = b.state.registry.stats();
        if registry {
            assert_eq!((stats.hits, stats.misses), (1, 0), "positional: {stats:?}");
        } else {
            assert_eq!(
                (stats.hits, stats.misses, stats.recorded),
                (0, 0, 0),
                "registry off: never consulted: {stats:?}"
            );
        }
        assert!(
            b.pop(&q, "").await.is_none(),
            "both acked (registry {registry})"
        );
    }
}
