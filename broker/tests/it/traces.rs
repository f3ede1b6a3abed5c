//! Traces over HTTP, with the bodies Queen's SDKs send (`msg.trace()` inside `consume`,
//! the admin client's reads): recorded against a popped message, read per message, by
//! name and as names, bounded per message, refused for a message nobody has, and gone
//! with their message when retention removes it.

use crate::common;

use common::{admin, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// One popped message of a fresh queue: (queue, partitionId, transactionId).
async fn popped(b: &Broker, prefix: &str) -> (String, String, String) {
    let q = unique(prefix);
    b.push(json!([{"queue": q, "payload": {"n": 1}, "transactionId": format!("{q}-m")}]))
        .await;
    let pop = b.pop(&q, "batch=1").await.expect("one message");
    let m = &pop["messages"][0];
    (
        q,
        m["partitionId"].as_str().unwrap().to_string(),
        m["transactionId"].as_str().unwrap().to_string(),
    )
}

/// The body `msg.trace({traceName, eventType, data})` of Queen's JS SDK posts.
fn sdk_trace(pid: &str, txn: &str, names: Value, data: Value) -> Value {
    json!({"transactionId": txn, "partitionId": pid, "consumerGroup": null,
           "traceNames": names, "eventType": "info", "data": data})
}

#[tokio::test]
async fn a_trace_is_recorded_as_the_sdk_sends_it_and_read_three_ways() {
    let b = start().await;
    let (_, pid, txn) = popped(&b, "trace").await;
    let name = unique("tenant-acme");
    let (s, v) = b
        .post(
            "/api/v1/traces",
            &sdk_trace(
                &pid,
                &txn,
                json!([name, "room-1"]),
                json!({"text": "started"}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["success"], true, "{v}");
    assert!(v["traceId"].as_str().is_some(), "{v}");
    let (s, _) = b
        .post("/api/v1/traces", &json!({"transactionId": txn, "partitionId": pid, "consumerGroup": "g",
                                        "eventType": "step", "data": {"text": "done"}, "traceNames": name}))
        .await;
    assert_eq!(s, StatusCode::CREATED);

    let (_, v) = b.get(&format!("/api/v1/traces/{pid}/{txn}")).await;
    let traces = v["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2, "{v}");
    assert_eq!(traces[0]["data"], json!({"text": "started"}));
    assert_eq!(traces[0]["consumer_group"], "__QUEUE_MODE__");
    assert_eq!(
        traces[0]["trace_names"],
        json!(["room-1", name]),
        "sorted, as Queen lists them"
    );
    assert_eq!(
        (
            traces[1]["event_type"].clone(),
            traces[1]["consumer_group"].clone()
        ),
        (json!("step"), json!("g"))
    );
    for k in [
        "id",
        "event_type",
        "data",
        "consumer_group",
        "worker_id",
        "created_at",
        "trace_names",
    ] {
        assert!(traces[0].get(k).is_some(), "{k}: {v}");
    }
    let (_, v) = b
        .get(&format!("/api/v1/traces/by-name/{name}?limit=1"))
        .await;
    assert_eq!(
        (v["total"].clone(), v["pagination"].clone()),
        (json!(2), json!({"limit": 1, "offset": 0})),
        "{v}"
    );
    assert_eq!(v["traces"][0]["transaction_id"], txn.as_str(), "{v}");
    assert!(v["traces"][0]["queue_name"].is_string(), "{v}");
    let (_, v) = b.get("/api/v1/traces/names?limit=1000").await;
    let mine = v["trace_names"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["trace_name"] == name.as_str())
        .expect("the name is listed")
        .clone();
    assert_eq!(
        (mine["trace_count"].clone(), mine["message_count"].clone()),
        (json!(2), json!(1)),
        "{mine}"
    );
}

#[tokio::test]
async fn a_trace_of_a_message_nobody_has_or_a_bad_body_changes_nothing() {
    let b = start().await;
    let (_, pid, txn) = popped(&b, "tracebad").await;
    let count = || async {
        admin()
            .await
            .query_one(
                "SELECT count(*) FROM queen.log_traces WHERE transaction_id = $1",
                &[&txn],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    for (body, want) in [
        (
            sdk_trace(&pid, "nobody", json!(null), json!({})),
            StatusCode::NOT_FOUND,
        ),
        (
            sdk_trace(
                &uuid::Uuid::new_v4().to_string(),
                &txn,
                json!(null),
                json!({}),
            ),
            StatusCode::NOT_FOUND,
        ),
        (
            sdk_trace("not-a-uuid", &txn, json!(null), json!({})),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"partitionId": pid, "data": {}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"partitionId": pid, "transactionId": txn}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"partitionId": pid, "transactionId": txn, "data": {}, "colour": 1}),
            StatusCode::BAD_REQUEST,
        ),
        (
            sdk_trace(&pid, &txn, json!([1, 2]), json!({})),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (s, v) = b.post("/api/v1/traces", &body).await;
        assert_eq!(s, want, "{body}: {v}");
    }
    assert_eq!(count().await, 0, "nothing was recorded");
    for path in [
        "/api/v1/traces/names?limit=0",
        "/api/v1/traces/names?offset=-1",
        "/api/v1/traces/by-name/x?limit=1001",
    ] {
        let (s, v) = b.get(path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
    }
    let (s, v) = b.get(&format!("/api/v1/traces/not-a-uuid/{txn}")).await;
    assert_eq!((s, v), (StatusCode::OK, json!({"traces": []})));
}

#[tokio::test]
async fn a_message_keeps_at_most_100_traces() {
    let b = start().await;
    let (_, pid, txn) = popped(&b, "tracecap").await;
    for i in 0..100 {
        let (s, v) = b
            .post(
                "/api/v1/traces",
                &sdk_trace(&pid, &txn, json!(null), json!({"i": i})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{i}: {v}");
    }
    let (s, v) = b
        .post(
            "/api/v1/traces",
            &sdk_trace(&pid, &txn, json!(null), json!({"i": 100})),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v["error"].as_str().unwrap().contains("100 traces"), "{v}");
}

#[tokio::test]
async fn retention_removes_a_messages_traces_with_it_and_counts_them() {
    let b = start().await;
    let (q, pid, txn) = popped(&b, "traceret").await;
    b.post(
        "/api/v1/traces",
        &sdk_trace(&pid, &txn, json!("gone-soon"), json!({})),
    )
    .await;
    let db = admin().await;
    // Retention rule 1 over the whole queue: a cutoff in the future is clamped to the
    // queue's window, so give the queue a one-second window and age the segment.
    b.configure(&q, json!({"retentionSeconds": 1})).await;
    db.execute(
        "UPDATE queen.log_segments SET created_at = now() - interval '1 hour' WHERE partition_id = $1::text::uuid",
        &[&pid],
    )
    .await
    .unwrap();
    let step: Value = db
        .query_one(
            "SELECT queen.log_retention_step_v1($1::text::uuid, now(), NULL, 100)",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        (step["messages"].clone(), step["traces"].clone()),
        (json!(1), json!(1)),
        "{step}"
    );
    let (_, v) = b.get(&format!("/api/v1/traces/{pid}/{txn}")).await;
    assert_eq!(v, json!({"traces": []}));
    let (s, _) = b
        .post(
            "/api/v1/traces",
            &sdk_trace(&pid, &txn, json!(null), json!({})),
        )
        .await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "the message is gone, so is tracing it"
    );
}
