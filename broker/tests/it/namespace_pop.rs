//! Pops across a namespace or task (`GET /api/v1/pop?namespace=&task=`, Queen 2.x): the
//! queue pop over every queue of the caller whose namespace and task match, each request
//! starting at the next queue in turn, long-polling on all of them.

use crate::common;

use common::{acks_for, start, unique};
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_namespace_pop_takes_turns_over_its_queues_and_filters_by_task() {
    let b = start().await;
    let ns = unique("ns");
    let (qa, qb, other) = (format!("{ns}.a"), format!("{ns}.b"), unique("elsewhere"));
    for q in [&qa, &qb, &other] {
        let items: Vec<_> = (0..4)
            .map(|i| json!({"queue": q, "transactionId": format!("t{i}"), "payload": {"q": q, "i": i}}))
            .collect();
        b.push(json!(items)).await;
    }
    let mut served = Vec::new();
    for _ in 0..4 {
        let (s, v) = b.get(&format!("/api/v1/pop?namespace={ns}&batch=1")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["messages"].as_array().unwrap().len(), 1);
        served.push(v["queue"].as_str().unwrap().to_string());
        let (_, acked) = b.ack_batch(acks_for(&v, "completed", None)).await;
        assert_eq!(acked[0]["success"], true, "{acked}");
    }
    assert_eq!(
        served.iter().filter(|q| **q == qa).count(),
        2,
        "turns alternate between the namespace's two queues: {served:?}"
    );
    assert!(!served.contains(&other), "{served:?}");
    // namespace and task together name one queue; task alone serves only task-b queues
    // (the shared test database may hold other runs' "*.b" queues too).
    let (s, v) = b
        .get(&format!("/api/v1/pop?namespace={ns}&task=b&batch=10"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["queue"], qb.as_str(), "{v}");
    let (s, v) = b.get("/api/v1/pop?task=a&batch=10&autoAck=true").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["queue"].as_str().unwrap().ends_with(".a"), "{v}");
    // A namespace nobody has: 204; neither namespace nor task: 400 naming it.
    let (s, _) = b
        .get(&format!("/api/v1/pop?namespace={}", unique("none")))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, v) = b.get("/api/v1/pop?batch=1").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["parameter"], "namespace", "{v}");
}

#[tokio::test]
async fn a_namespace_long_poll_wakes_for_a_push_into_any_of_its_queues() {
    let b = start().await;
    let ns = unique("nsw");
    // Two empty queues of the namespace exist before the poll starts.
    for q in ["x", "y"] {
        b.configure(&format!("{ns}.{q}"), json!({})).await;
    }
    let url = format!(
        "{}/api/v1/pop?namespace={ns}&wait=true&timeout=20000",
        b.base
    );
    let http = b.http.clone();
    let poll = tokio::spawn(async move { http.get(url).send().await.unwrap() });
    b.push(json!([{"queue": format!("{ns}.y"), "transactionId": "w", "payload": 1}]))
        .await;
    let r = poll.await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["queue"], format!("{ns}.y"));
    assert_eq!(v["messages"][0]["transactionId"], "w");
}
