//! The registry fast path: fused and unfused, concurrency, and fallback to the SQL path
//! when the database refuses the positional advance.

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{acks_for, start, start_with, unique};
use serde_json::json;

#[tokio::test]
async fn unfused_fast_path_round_trip() {
    let b = start_with(|c| c.ack_fusion = false).await;
    assert!(b.state.fusion.is_none());
    let q = unique("unfused");
    b.push(json!([{"queue": q, "payload": 1}, {"queue": q, "payload": 2}]))
        .await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|a| a["success"] == true && a["leaseReleased"] == true),
        "{v}"
    );
    assert_eq!(b.state.metrics.acks_fast.load(Ordering::Relaxed), 2);
    assert!(b.pop(&q, "").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fused_acks_all_commit() {
    let b = start().await;
    let q = unique("fused");
    let items: Vec<_> = (0..12)
        .map(|i| json!({"queue": q, "partition": format!("p{i}"), "payload": i}))
        .collect();
    b.push(json!(items)).await;
    let mut pops = Vec::new();
    while let Some(p) = b.pop(&q, "batch=10").await {
        pops.push(p);
    }
    assert_eq!(pops.len(), 12);
    let acks = pops.iter().map(|p| {
        let body = acks_for(p, "completed", None);
        let http = b.http.clone();
        let url = format!("{}/api/v1/ack/batch", b.base);
        tokio::spawn(async move {
            http.post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        })
    });
    for h in acks.collect::<Vec<_>>() {
        let v = h.await.unwrap();
        assert_eq!(v[0]["success"], true, "{v}");
    }
    assert_eq!(b.state.metrics.acks_fast.load(Ordering::Relaxed), 12);
    assert!(b.pop(&q, "").await.is_none());
}

#[tokio::test]
async fn refused_fast_path_falls_back_to_sql() {
    let b = start().await;
    let q = unique("expired");
    b.push(json!([{"queue": q, "payload": 1}])).await;
    let pop = b.pop(&q, "leaseSeconds=1").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(v[0]["success"], false, "{v}");
    assert_eq!(v[0]["error"], "invalid or expired lease");
    assert_eq!(b.state.metrics.acks_fast.load(Ordering::Relaxed), 0);
    assert_eq!(b.state.metrics.acks_sql.load(Ordering::Relaxed), 1);
    // The expired lease redelivers, as attempt 2.
    let again = b.pop(&q, "").await.expect("redelivery");
    assert_eq!(again["messages"][0]["deliveryAttempt"], 2);
}

#[tokio::test]
async fn partial_ack_is_not_fast() {
    let b = start().await;
    let q = unique("partial");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "a"},
                  {"queue": q, "payload": 2, "transactionId": "b"}]))
        .await;
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let mut body = acks_for(&pop, "completed", None);
    body["acknowledgments"].as_array_mut().unwrap().truncate(1);
    let (_, v) = b.ack_batch(body).await;
    assert_eq!(v[0]["success"], true, "{v}");
    assert_eq!(v[0]["leaseReleased"], false);
    assert_eq!(b.state.metrics.acks_fast.load(Ordering::Relaxed), 0);
    // The SQL outcome evicted the entry: acking the rest also takes the SQL path.
    let mut body = acks_for(&pop, "completed", None);
    body["acknowledgments"].as_array_mut().unwrap().remove(0);
    let (_, v) = b.ack_batch(body).await;
    assert_eq!(v[0]["leaseReleased"], true, "{v}");
    assert!(b.state.registry.is_empty());
}
