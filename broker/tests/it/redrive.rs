//! DLQ redrive and deletion over HTTP: Queen's address routes
//! (`/api/v1/messages/{partitionId}/{transactionId}[/retry]`), replay by DLQ id, bulk
//! redrive and purge by queue, tenancy.

use crate::common;

use std::time::Duration;

use common::{acks_for, start, start_with, unique, Broker};
use queen_broker::http::auth::sign;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

/// Push `txns` to `q` (retryLimit 0) and nack each once: every one is dead-lettered.
/// Returns the partition id.
async fn dead_lettered(b: &Broker, q: &str, txns: &[&str]) -> String {
    b.configure(q, json!({"retryLimit": 0})).await;
    let items: Vec<Value> = txns
        .iter()
        .map(|t| json!({"queue": q, "payload": {"txn": t}, "transactionId": t}))
        .collect();
    b.push(json!(items)).await;
    let mut pid = String::new();
    for _ in txns {
        let pop = b.pop(q, "batch=1").await.expect("a message to dead-letter");
        pid = pop["partitionId"].as_str().unwrap().to_string();
        let (_, v) = b.ack_batch(acks_for(&pop, "failed", Some("poison"))).await;
        assert_eq!(v[0]["dlq"], true, "{v}");
    }
    pid
}

async fn dlq_rows(b: &Broker, q: &str) -> Vec<Value> {
    let (s, v) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn retry_by_address_redrives_the_message_exactly_once_and_removes_its_row() {
    let b = start().await;
    let q = unique("redrive");
    let pid = dead_lettered(&b, &q, &["order-1"]).await;
    let dlq_id = {
        let db = common::admin().await;
        let row = db
            .query_one(
                "SELECT id FROM queen.log_dlq WHERE partition_id = $1::text::uuid",
                &[&pid],
            )
            .await
            .unwrap();
        row.get::<_, Uuid>(0)
    };
    assert!(
        b.pop(&q, "batch=10").await.is_none(),
        "dead-lettered: not delivered"
    );
    let (s, v) = b
        .post(&format!("/api/v1/messages/{pid}/order-1/retry"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let txn = format!("dlq:{dlq_id}:order-1");
    assert_eq!(
        (
            v["success"].as_bool(),
            v["result"].as_str(),
            v["dlqRowRemoved"].as_bool()
        ),
        (Some(true), Some("moved"), Some(true)),
        "{v}"
    );
    assert_eq!(v["replayedAs"]["transaction_id"], txn.as_str(), "{v}");
    assert_eq!(
        (
            v["queue"].as_str(),
            v["originalTransactionId"].as_str(),
            v["dlqId"].as_str()
        ),
        (
            Some(q.as_str()),
            Some("order-1"),
            Some(dlq_id.to_string().as_str())
        ),
        "{v}"
    );
    assert_eq!(v["replayedAs"]["status"], "queued");
    assert!(dlq_rows(&b, &q).await.is_empty(), "removed from the DLQ");
    // Deliverable again, once: same payload, the redrive transactionId.
    let pop = b.pop(&q, "batch=10").await.expect("redriven message");
    let msgs = pop["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{pop}");
    assert_eq!(
        (msgs[0]["transactionId"].as_str(), &msgs[0]["data"]),
        (Some(txn.as_str()), &json!({"txn": "order-1"}))
    );
    assert_eq!(msgs[0]["id"], v["replayedAs"]["message_id"]);
    let (_, a) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(a[0]["success"], true, "{a}");
    let (s, again) = b
        .post(&format!("/api/v1/messages/{pid}/order-1/retry"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{again}");
    assert_eq!(
        (again["success"].as_bool(), again["error"].as_str()),
        (Some(false), Some("Message not found"))
    );
    assert!(b.pop(&q, "batch=10").await.is_none(), "exactly once");
}

#[tokio::test]
async fn only_dead_lettered_messages_can_be_retried_or_deleted_by_address() {
    let b = start().await;
    let q = unique("redrive-live");
    b.push(json!([{"queue": q, "payload": 1, "transactionId": "live"}]))
        .await;
    let pop = b.pop(&q, "").await.unwrap();
    let pid = pop["partitionId"].as_str().unwrap();
    for path in [
        format!("/api/v1/messages/{pid}/live/retry"),
        "/api/v1/messages/not-a-uuid/live/retry".into(),
    ] {
        let (s, v) = b.post(&path, &json!({})).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains("Only dead-lettered"),
            "{v}"
        );
    }
    // Deleting a live message is refused saying why; an address nobody has is 404.
    let (s, v) = b.delete(&format!("/api/v1/messages/{pid}/live")).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("immutable segment"),
        "{v}"
    );
    let (s, v) = b.delete(&format!("/api/v1/messages/{pid}/nobody")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (_, a) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(a[0]["success"], true, "the live message was untouched: {a}");
}

#[tokio::test]
async fn replay_by_id_and_bulk_redrive_by_queue_take_the_oldest_failures_first() {
    let b = start().await;
    let q = unique("redrive-bulk");
    dead_lettered(&b, &q, &["a", "b", "c"]).await;
    // The listing is newest failure first; its dlqId is what replay and delete take.
    let mut ids: Vec<String> = dlq_rows(&b, &q)
        .await
        .iter()
        .map(|r| r["dlqId"].as_str().unwrap().to_string())
        .collect();
    ids.reverse();
    assert_eq!(ids.len(), 3);
    let (s, v) = b
        .post(&format!("/api/v1/dlq/{}/replay", ids[2]), &json!({}))
        .await;
    assert_eq!(
        (s, v["result"].as_str()),
        (StatusCode::OK, Some("moved")),
        "{v}"
    );
    let (s, v) = b
        .post(&format!("/api/v1/dlq/{}/replay", ids[2]), &json!({}))
        .await;
    assert_eq!(
        (s, v["result"].as_str()),
        (StatusCode::NOT_FOUND, Some("gone")),
        "{v}"
    );
    let (s, v) = b
        .post(
            &format!("/api/v1/dlq/{}/replay", ids[1]),
            &json!({"queue": "elsewhere"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = b
        .post("/api/v1/dlq/redrive", &json!({"queue": q, "limit": 1}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["moved"].as_i64(), v["results"][0]["dlqId"].as_str()),
        (Some(1), Some(ids[0].as_str())),
        "{v}"
    );
    assert_eq!(
        v["results"][0]["transactionId"],
        format!("dlq:{}:a", ids[0]).as_str()
    );
    let (_, v) = b
        .post(
            "/api/v1/dlq/redrive",
            &json!({"ids": [ids[1], Uuid::new_v4()]}),
        )
        .await;
    assert_eq!(
        (v["moved"].as_i64(), v["results"][1]["result"].as_str()),
        (Some(1), Some("gone")),
        "{v}"
    );
    assert!(dlq_rows(&b, &q).await.is_empty());
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let got: Vec<&str> = pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"]["txn"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["c", "a", "b"], "in the order they went back");
    for bad in [
        json!({}),
        json!({"ids": []}),
        json!({"queue": q, "limit": 0}),
        json!({"queue": q, "limit": 1001}),
        json!({"ids": [Uuid::new_v4()], "queue": q}),
        json!({"queue": q, "bogus": 1}),
    ] {
        let (s, v) = b.post("/api/v1/dlq/redrive", &bad).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{bad}: {v}");
    }
}

#[tokio::test]
async fn dlq_rows_are_deleted_by_address_by_id_and_by_queue() {
    let b = start().await;
    let q = unique("dlq-delete");
    let pid = dead_lettered(&b, &q, &["a", "b", "c", "d"]).await;
    let (s, v) = b.delete(&format!("/api/v1/messages/{pid}/a")).await;
    assert_eq!((s, v["deleted"].as_i64()), (StatusCode::OK, Some(1)), "{v}");
    let id: Uuid = common::admin().await
        .query_one("SELECT id FROM queen.log_dlq WHERE partition_id = $1::text::uuid AND transaction_id = 'b'", &[&pid])
        .await.unwrap().get(0);
    let (s, v) = b.delete(&format!("/api/v1/dlq/{id}")).await;
    assert_eq!((s, v["deleted"].as_i64()), (StatusCode::OK, Some(1)), "{v}");
    let (s, v) = b.delete(&format!("/api/v1/dlq/{id}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = b.delete(&format!("/api/v1/dlq?queue={q}&limit=1")).await;
    assert_eq!((s, v["deleted"].as_i64()), (StatusCode::OK, Some(1)), "{v}");
    assert_eq!(dlq_rows(&b, &q).await.len(), 1);
    let (s, v) = b.delete(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(
        (s, v["deleted"].as_i64(), v["success"].as_bool()),
        (StatusCode::OK, Some(1), Some(true)),
        "{v}"
    );
    let (s, v) = b.delete("/api/v1/dlq").await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("queue is required")),
        "{v}"
    );
    assert!(
        b.pop(&q, "batch=10").await.is_none(),
        "deleting DLQ rows redelivers nothing"
    );
}

#[tokio::test]
async fn a_redrive_wakes_a_parked_long_poll() {
    let b = start().await;
    let q = unique("redrive-wake");
    let pid = dead_lettered(&b, &q, &["w"]).await;
    let parked = {
        let b2 = Broker {
            base: b.base.clone(),
            http: b.http.clone(),
            state: b.state.clone(),
        };
        let q = q.clone();
        tokio::spawn(async move {
            let t = std::time::Instant::now();
            let r = b2
                .get(&format!("/api/v1/pop/queue/{q}?wait=true&timeout=20000"))
                .await;
            (r, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (s, v) = b
        .post(&format!("/api/v1/messages/{pid}/w/retry"), &json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ((s, v), waited) = parked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(waited < Duration::from_secs(15), "{waited:?}");
}

const SECRET: &str = "redrive-tenancy-secret";

#[tokio::test]
async fn another_tenants_dlq_rows_cannot_be_redriven_or_deleted() {
    let base = start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await;
    let token = |t: Uuid| sign(SECRET.as_bytes(), &json!({"tenant": t, "role": "admin"}));
    let a = base.with_token(&token(Uuid::new_v4()));
    let other = base.with_token(&token(Uuid::new_v4()));
    let q = unique("redrive-tenant");
    let pid = dead_lettered(&a, &q, &["mine"]).await;
    let id: Uuid = common::admin()
        .await
        .query_one(
            "SELECT id FROM queen.log_dlq WHERE partition_id = $1::text::uuid",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    for (s, v) in [
        other
            .post(&format!("/api/v1/messages/{pid}/mine/retry"), &json!({}))
            .await,
        other.delete(&format!("/api/v1/messages/{pid}/mine")).await,
        other
            .post(&format!("/api/v1/dlq/{id}/replay"), &json!({}))
            .await,
        other.delete(&format!("/api/v1/dlq/{id}")).await,
    ] {
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    }
    let (_, v) = other
        .post("/api/v1/dlq/redrive", &json!({"ids": [id]}))
        .await;
    assert_eq!(v["results"][0]["result"], "gone", "{v}");
    let (_, v) = other.delete(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(v["deleted"], 0, "{v}");
    assert_eq!(
        dlq_rows(&a, &q).await.len(),
        1,
        "the owner's row is untouched"
    );
    let (s, v) = a
        .post(&format!("/api/v1/messages/{pid}/mine/retry"), &json!({}))
        .await;
    assert_eq!(
        (s, v["result"].as_str()),
        (StatusCode::OK, Some("moved")),
        "{v}"
    );
}
