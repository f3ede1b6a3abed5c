//! Two brokers on one database (N brokers in front of one Citus cluster, or one
//! node): each keeps its accelerators (ack registry, ack fusion, dedup watermark cache)
//! in its own process, so whatever one broker leased or pushed the other must see through
//! the database. Run against the Citus coordinator by scripts/test.sh too.

use crate::common;

use common::{acks_for, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn push3(b: &Broker, q: &str, prefix: &str) -> Vec<Value> {
    let items: Vec<Value> = (0..3)
        .map(|i| json!({"queue": q, "transactionId": format!("{prefix}{i}"), "payload": i}))
        .collect();
    b.push(json!(items)).await
}

#[tokio::test]
async fn popped_through_one_broker_acked_through_the_other() {
    let (a, b) = (start().await, start().await);
    let q = unique("two-ack");
    a.configure(&q, json!({"leaseTime": 300})).await;
    push3(&a, &q, "m").await;
    let pop = a.pop(&q, "batch=10").await.expect("three messages");
    assert_eq!(pop["messages"].as_array().unwrap().len(), 3, "{pop}");
    let (s, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let acks = v.as_array().unwrap();
    assert!(acks.iter().all(|x| x["success"] == true), "{v}");
    assert_eq!(acks[2]["leaseReleased"], true, "{v}");
    // The first broker still remembers its lease: acking again through it writes
    // nothing new, and nothing redelivers through either broker.
    let (s, v) = a.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(a.pop(&q, "batch=10").await.is_none());
    assert!(b.pop(&q, "batch=10").await.is_none());
}

#[tokio::test]
async fn nacked_through_the_other_broker_redelivers_through_the_first() {
    let (a, b) = (start().await, start().await);
    let q = unique("two-nack");
    a.configure(&q, json!({"retryLimit": 3})).await;
    push3(&a, &q, "n").await;
    let pop = a.pop(&q, "batch=10").await.expect("three messages");
    let (_, v) = b.ack_batch(acks_for(&pop, "failed", Some("later"))).await;
    assert_eq!(v[0]["success"], true, "{v}");
    let again = a.pop(&q, "batch=10").await.expect("redelivery");
    assert_eq!(again["messages"].as_array().unwrap().len(), 3, "{again}");
    assert_eq!(again["messages"][0]["deliveryAttempt"], 2);
    assert_ne!(again["leaseId"], pop["leaseId"]);
    let (_, v) = b.ack_batch(acks_for(&again, "completed", None)).await;
    assert!(
        v.as_array().unwrap().iter().all(|x| x["success"] == true),
        "{v}"
    );
    assert!(a.pop(&q, "batch=10").await.is_none());
}

#[tokio::test]
async fn a_duplicate_pushed_through_the_other_broker_is_detected() {
    let (a, b) = (start().await, start().await);
    let q = unique("two-dedup");
    a.configure(&q, json!({})).await;
    // Both brokers' dedup caches warm on the same partition, each then misses the
    // other's latest segment.
    let first = push3(&a, &q, "d").await;
    let from_b = push3(&b, &q, "e").await;
    assert!(from_b.iter().all(|x| x["status"] == "queued"), "{from_b:?}");
    let again = b
        .push(json!([{"queue": q, "transactionId": "d1", "payload": 0}]))
        .await;
    assert_eq!(again[0]["status"], "duplicate", "{again:?}");
    assert_eq!(again[0]["message_id"], first[1]["message_id"]);
    let again = a
        .push(json!([{"queue": q, "transactionId": "e2", "payload": 0}]))
        .await;
    assert_eq!(again[0]["status"], "duplicate", "{again:?}");
    assert_eq!(again[0]["message_id"], from_b[2]["message_id"]);
}

/// `tx.once` across brokers: the same gated bundle sent through both (a retry that
/// landed on the other broker) commits once; the second answers `kv_precondition` and
/// pushes nothing. A lock held through one broker is held for the other too.
#[tokio::test]
async fn a_once_gate_applies_once_across_two_brokers() {
    let (a, b) = (start().await, start().await);
    let (q, ns) = (unique("two-once"), unique("two-once-ns"));
    let bundle = json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": 1}]}],
                        "kv": [{"op": "putIfAbsent", "ns": ns, "key": "evt", "value": true,
                                "ttlSeconds": 300, "required": true}]});
    let (ra, rb) = tokio::join!(
        a.post("/api/v1/transaction", &bundle),
        b.post("/api/v1/transaction", &bundle)
    );
    let wins = [&ra.1, &rb.1]
        .iter()
        .filter(|v| v["success"] == true)
        .count();
    assert_eq!(wins, 1, "{ra:?} {rb:?}");
    let lost = if ra.1["success"] == true {
        &rb.1
    } else {
        &ra.1
    };
    assert_eq!(lost["reason"], "kv_precondition", "{lost}");
    let got = a.pop(&q, "batch=10").await.unwrap();
    assert_eq!(
        got["messages"].as_array().unwrap().len(),
        1,
        "one message, not two"
    );

    let name = unique("two-lock");
    let acquire = |owner: &str| json!({"operations": [{"op": "acquire", "name": name, "ttlSeconds": 30, "owner": owner}]});
    let (_, v) = a.post("/api/v1/locks", &acquire("via-a")).await;
    assert_eq!(v["results"][0]["acquired"], true, "{v}");
    let (_, v) = b.post("/api/v1/locks", &acquire("via-b")).await;
    assert_eq!(v["results"][0]["acquired"], false, "{v}");
    assert_eq!(v["results"][0]["holders"][0]["owner"], "via-a", "{v}");
}
