//! Moving a consumer group over HTTP (Queen's `POST /api/v1/consumer-groups/{group}/
//! queues/{queue}/seek`, `.../partitions/{partition}/seek` and `.../subscription`): both
//! directions, what a move passes over counted, a lease the move voids refused on the
//! registry fast path, through ack fusion and through another broker, and every bad or
//! unknown argument a 4xx that changes nothing.

use crate::common;

use common::{acks_for, admin, start, start_with, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

const EXPIRED: &str = "invalid or expired lease";

/// `n` messages into partition `p` of `q`, transactionIds `{q}-{p}-i`.
async fn push_into(b: &Broker, q: &str, p: &str, n: usize) {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"queue": q, "partition": p, "payload": i, "transactionId": format!("{q}-{p}-{i}")}))
        .collect();
    b.push(json!(items)).await;
}

/// Every message the group can pop now (auto-acked).
async fn drain(b: &Broker, q: &str, group: &str) -> usize {
    let mut n = 0;
    while let Some(p) = b
        .pop(q, &format!("consumerGroup={group}&batch=100&autoAck=true"))
        .await
    {
        n += p["messages"].as_array().unwrap().len();
    }
    n
}

/// The group's acks for a whole pop.
fn group_acks(pop: &Value, group: &str) -> Value {
    let mut body = acks_for(pop, "completed", None);
    body["consumerGroup"] = json!(group);
    body
}

/// The group's committed offsets on the queue, by partition name.
async fn committed(q: &str, group: &str) -> Vec<(String, i64)> {
    admin()
        .await
        .query(
            "SELECT p.name, c.committed FROM queen.log_consumers c
               JOIN queen.log_partitions p ON p.id = c.partition_id
               JOIN queen.queues qu ON qu.id = p.queue_id
              WHERE qu.name = $1 AND c.consumer_group = $2 ORDER BY p.name",
            &[&q, &group],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn a_queue_seek_to_the_end_skips_and_back_to_a_time_replays_with_queens_answer() {
    let b = start().await;
    let q = unique("seek");
    push_into(&b, &q, "p1", 3).await;
    push_into(&b, &q, "p2", 2).await;
    b.pop(&q, "consumerGroup=g&batch=1&autoAck=true")
        .await
        .expect("the group reads one");
    let (s, v) = b
        .post(
            &format!("/api/v1/consumer-groups/g/queues/{q}/seek"),
            &json!({"toEnd": true}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"success": true, "consumerGroup": "g", "queueName": q, "seekToEnd": true,
               "targetTimestamp": null, "partitionsUpdated": 2, "skipped": 4, "replayed": 0})
    );
    assert!(b.pop(&q, "consumerGroup=g&batch=10").await.is_none());
    assert_eq!(
        committed(&q, "g").await,
        [("p1".into(), 2), ("p2".into(), 1)]
    );
    // Never silent: the group's statistics carry what it skipped; `members` is Queen's
    // count of the group's partition cursors.
    let (_, groups) = b.get("/api/v1/consumer-groups").await;
    let mine = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "g" && e["queueName"] == q.as_str())
        .expect("the group is listed")
        .clone();
    assert_eq!(
        (
            mine["skipped"].clone(),
            mine["members"].clone(),
            mine["activeWorkers"].clone()
        ),
        (json!(4), json!(2), json!(0)),
        "{mine}"
    );
    // Back to before everything: clamped to the log start, all five again.
    let (s, v) = b
        .post(
            &format!("/api/v1/consumer-groups/g/queues/{q}/seek"),
            &json!({"timestamp": "2000-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["targetTimestamp"].clone(), v["replayed"].clone()),
        (json!("2000-01-01T00:00:00.000Z"), json!(5)),
        "{v}"
    );
    assert_eq!(drain(&b, &q, "g").await, 5);
    // A later push, then a seek to a time between: only what came after it.
    let mid = admin()
        .await
        .query_one("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')", &[])
        .await
        .unwrap()
        .get::<_, String>(0);
    push_into(&b, &q, "p1-late", 2).await;
    let (s, v) = b
        .post(
            &format!("/api/v1/consumer-groups/g/queues/{q}/seek"),
            &json!({"timestamp": mid}),
        )
        .await;
    assert_eq!(
        (s, v["partitionsUpdated"].clone()),
        (StatusCode::OK, json!(3)),
        "{v}"
    );
    assert_eq!(
        drain(&b, &q, "g").await,
        2,
        "the two pushed after the instant"
    );
}

#[tokio::test]
async fn an_ack_of_a_lease_a_seek_voided_is_refused_on_the_fast_path_and_through_fusion() {
    for fusion in [false, true] {
        let b = start_with(|c| c.ack_fusion = fusion).await;
        let q = unique("seekack");
        b.configure(&q, json!({"leaseTime": 300})).await;
        push_into(&b, &q, "Default", 3).await;
        let pop = b
            .pop(&q, "consumerGroup=g&batch=10")
            .await
            .expect("three leased");
        assert!(!b.state.registry.is_empty(), "the pop is in the registry");
        let (s, v) = b
            .post(
                &format!("/api/v1/consumer-groups/g/queues/{q}/partitions/Default/seek"),
                &json!({"timestamp": "2000-01-01T00:00:00Z"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(
            (v["offset"].clone(), v["replayed"].clone()),
            (json!(-1), json!(0)),
            "{v}"
        );
        let (s, v) = b.ack_batch(group_acks(&pop, "g")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        for a in v.as_array().unwrap() {
            assert_eq!(
                (a["success"].clone(), a["error"].clone()),
                (json!(false), json!(EXPIRED)),
                "fusion {fusion}: {v}"
            );
        }
        assert_eq!(
            committed(&q, "g").await,
            [("Default".into(), -1)],
            "fusion {fusion}: the ack moved nothing"
        );
        assert_eq!(
            drain(&b, &q, "g").await,
            3,
            "fusion {fusion}: the batch redelivers"
        );
    }
}

#[tokio::test]
async fn a_seek_through_one_broker_voids_the_lease_the_other_broker_registered() {
    let (a, b) = (start().await, start().await);
    let q = unique("seek2b");
    a.configure(&q, json!({"leaseTime": 300})).await;
    push_into(&a, &q, "Default", 2).await;
    let pop = a.pop(&q, "consumerGroup=g&batch=10").await.expect("leased");
    let (s, v) = b
        .post(
            &format!("/api/v1/consumer-groups/g/queues/{q}/partitions/Default/seek"),
            &json!({}),
        )
        .await;
    assert_eq!((s, v["skipped"].clone()), (StatusCode::OK, json!(2)), "{v}");
    let (_, v) = a.ack_batch(group_acks(&pop, "g")).await;
    assert!(
        v.as_array().unwrap().iter().all(|x| x["error"] == EXPIRED),
        "{v}"
    );
    assert_eq!(committed(&q, "g").await, [("Default".into(), 1)]);
}

#[tokio::test]
async fn a_partition_seek_without_a_body_goes_to_the_end_as_queen_does() {
    let b = start().await;
    let q = unique("seekp");
    push_into(&b, &q, "Default", 2).await;
    push_into(&b, &q, "other", 2).await;
    assert_eq!(drain(&b, &q, "g").await, 4);
    b.push(json!([{"queue": q, "payload": "late", "transactionId": format!("{q}-late")}]))
        .await;
    let r = b
        .http
        .post(format!(
            "{}/api/v1/consumer-groups/g/queues/{q}/partitions/Default/seek",
            b.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (
            v["partitionName"].clone(),
            v["updated"].clone(),
            v["offset"].clone(),
            v["skipped"].clone()
        ),
        (json!("Default"), json!(true), json!(2), json!(1)),
        "{v}"
    );
    assert!(v["cursorMovedTo"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(b.pop(&q, "consumerGroup=g&batch=10").await.is_none());
}

#[tokio::test]
async fn a_bad_or_unknown_seek_is_a_4xx_that_changes_nothing() {
    let b = start().await;
    let q = unique("seekbad");
    push_into(&b, &q, "Default", 2).await;
    b.pop(&q, "consumerGroup=g&batch=1&autoAck=true")
        .await
        .expect("one read");
    let before = committed(&q, "g").await;
    let seek = format!("/api/v1/consumer-groups/g/queues/{q}/seek");
    let nobody = unique("nobody");
    for (path, body, want) in [
        (seek.clone(), json!({}), StatusCode::BAD_REQUEST),
        (
            seek.clone(),
            json!({"toEnd": false}),
            StatusCode::BAD_REQUEST,
        ),
        (
            seek.clone(),
            json!({"toEnd": true, "timestamp": "2000-01-01"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            seek.clone(),
            json!({"timestamp": "last tuesday"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            seek.clone(),
            json!({"timestamp": "2999-01-01T00:00:00Z"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            seek.clone(),
            json!({"timestamp": 1700000000000_i64}),
            StatusCode::BAD_REQUEST,
        ),
        (
            seek.clone(),
            json!({"toEnd": true, "partition": "x"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("/api/v1/consumer-groups/{nobody}/queues/{q}/seek"),
            json!({"toEnd": true}),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/api/v1/consumer-groups/g/queues/{nobody}/seek"),
            json!({"toEnd": true}),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("/api/v1/consumer-groups/g/queues/{q}/partitions/{nobody}/seek"),
            json!({}),
            StatusCode::NOT_FOUND,
        ),
        (
            format!(
                "/api/v1/consumer-groups/{}/queues/{q}/seek",
                "x".repeat(256)
            ),
            json!({"toEnd": true}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (s, v) = b.post(&path, &body).await;
        assert_eq!(s, want, "{path} {body}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{path} {body}: {v}"
        );
    }
    let (s, v) = b.post_raw(&seek, "").await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "an empty body: {v}");
    let (_, v) = b
        .post(&seek, &json!({"toEnd": true, "partition": "x"}))
        .await;
    assert_eq!(v["field"], "partition", "{v}");
    assert_eq!(committed(&q, "g").await, before, "nothing moved");
    assert!(
        committed(&q, &nobody).await.is_empty(),
        "no group was created"
    );
}

#[tokio::test]
async fn a_subscription_update_answers_as_queen_and_refuses_what_it_cannot_apply() {
    let b = start().await;
    let (q, g) = (unique("seeksub"), unique("subg"));
    push_into(&b, &q, "Default", 1).await;
    assert_eq!(drain(&b, &q, &g).await, 1);
    let path = format!("/api/v1/consumer-groups/{g}/subscription");
    let (s, v) = b
        .post(
            &path,
            &json!({"subscriptionTimestamp": "2026-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"success": true, "consumerGroup": g, "newTimestamp": "2026-01-01T00:00:00.000Z", "rowsUpdated": 1})
    );
    // The consumer-group view shows the record.
    let (_, groups) = b.get("/api/v1/consumer-groups").await;
    let mine = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == g.as_str())
        .expect("the group is listed")
        .clone();
    assert_eq!(
        (
            mine["subscriptionMode"].clone(),
            mine["subscriptionTimestamp"].clone()
        ),
        (json!("timestamp"), json!("2026-01-01T00:00:00.000Z")),
        "{mine}"
    );
    assert!(mine["subscriptionCreatedAt"].is_string(), "{mine}");
    // A partition the group first meets now starts at the instant: everything there is
    // newer, so it reads it; the cursor on Default did not move.
    push_into(&b, &q, "fresh", 2).await;
    assert_eq!(drain(&b, &q, &g).await, 2);
    for (body, want) in [
        (json!({}), StatusCode::BAD_REQUEST),
        (
            json!({"subscriptionTimestamp": "soon"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"subscriptionTimestamp": "2999-01-01T00:00:00Z"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"subscriptionTimestamp": "2026-01-01", "mode": "all"}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (s, v) = b.post(&path, &body).await;
        assert_eq!(s, want, "{body}: {v}");
    }
    let (s, v) = b
        .post(
            &format!("/api/v1/consumer-groups/{}/subscription", unique("nobody")),
            &json!({"subscriptionTimestamp": "2026-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
}
