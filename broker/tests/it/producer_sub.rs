//! Producer identity (docs/security.md, "Producer identity"; Queen's
//! `server/src/routes/push.cpp`): a push item's `producerSub` is accepted and ignored,
//! and the subject stored with a message is the verified token's `sub` when the broker
//! runs with authentication, on every route that pushes: `/push`, a transaction's push
//! operations and a stream cycle's sink items. Run against a real database (see
//! tests/it/common.rs).

use crate::common;

use common::{admin, leased_stream, start, start_with, unique, Broker};
use queen_broker::http::auth::sign;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const SECRET: &str = "producer-sub-test-secret";

fn token(sub: Option<&str>, tenant: Uuid) -> String {
    let mut claims = json!({"tenant": tenant, "role": "admin"});
    if let Some(s) = sub {
        claims["sub"] = json!(s);
    }
    sign(SECRET.as_bytes(), &claims)
}

async fn authenticating() -> Broker {
    start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await
}

/// The `producerSub` of every message of `q`, as a pop answers it, by payload `n`.
async fn popped(b: &Broker, q: &str) -> Vec<(i64, Value)> {
    let p = b.pop(q, "batch=100").await.expect("messages");
    let mut out: Vec<(i64, Value)> = p["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["data"]["n"].as_i64().unwrap(), m["producerSub"].clone()))
        .collect();
    out.sort_by_key(|(n, _)| *n);
    out
}

/// The subject of every frame stored for queue `q` (any tenant), as the extension
/// decodes the segments.
async fn stored(q: &str) -> Vec<Option<String>> {
    admin()
        .await
        .query(
            "SELECT d.producer_sub FROM queen.log_segments s
               JOIN queen.log_partitions p ON p.id = s.partition_id
               JOIN queen.queues q ON q.id = p.queue_id,
                    queen.decode_segment_v1(s.blob) d
              WHERE q.name = $1 ORDER BY s.base_offset, d.frame_index",
            &[&q],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The bodies Queen's Go and JS auth suites send (`TestProducerSubBodyIgnoredWithoutAuth`):
/// accepted, and without authentication nothing is stored as a subject.
#[tokio::test]
async fn without_authentication_a_body_producer_sub_is_accepted_and_never_stored() {
    let b = start().await;
    let q = unique("psub-noauth");
    let (s, v) = b
        .post(
            "/api/v1/push",
            &json!({"items": [
                {"queue": q, "payload": {"n": 1}, "producerSub": "attacker-no-jwt"},
                {"queue": q, "payload": {"n": 2}, "producerSub": null},
                {"queue": q, "payload": {"n": 3}, "producerSub": {"not": "even a string"}}]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [
                {"queue": q, "payload": {"n": 4}, "producerSub": "attacker"}]}]}),
        )
        .await;
    assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(
        popped(&b, &q).await,
        (1..=4).map(|n| (n, Value::Null)).collect::<Vec<_>>()
    );
    assert_eq!(stored(&q).await, vec![None; 4]);
}

/// Strict bodies still refuse what neither Queen nor this broker knows, nothing written.
#[tokio::test]
async fn keys_nobody_sends_are_still_refused_naming_them() {
    let b = start().await;
    let q = unique("psub-strict");
    for (body, field) in [
        (
            json!({"items": [{"queue": q, "producer_sub": "x"}]}),
            "items[0].producer_sub",
        ),
        (
            json!({"items": [{"queue": q, "producerSub": "x", "messageId": "m"}]}),
            "items[0].messageId",
        ),
    ] {
        let (s, v) = b.post("/api/v1/push", &body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["field"], field, "{v}");
    }
    assert!(stored(&q).await.is_empty(), "nothing written");
}

/// Queen's `TestProducerSubStampedFromJwt` and `TestProducerSubSpoofingIgnoredWithJwt`:
/// the stored subject is the token's, whatever the body claims, on `/push` and on a
/// transaction's push operations; a token without a `sub` stamps nothing.
#[tokio::test]
async fn with_authentication_the_stored_subject_is_the_tokens_sub() {
    let b = authenticating().await;
    let tenant = Uuid::new_v4();
    let alice = b.with_token(&token(Some("alice-producer"), tenant));
    let q = unique("psub-jwt");
    let (s, v) = alice
        .post(
            "/api/v1/push",
            &json!({"items": [
                {"queue": q, "payload": {"n": 1}, "producerSub": "attacker"},
                {"queue": q, "payload": {"n": 2}}]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = alice
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [
                {"queue": q, "payload": {"n": 3}, "producerSub": "attacker"}]}]}),
        )
        .await;
    assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    let anonymous = b.with_token(&token(None, tenant));
    let (s, v) = anonymous
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "payload": {"n": 4}, "producerSub": "attacker"}]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let alice_sub = json!("alice-producer");
    assert_eq!(
        popped(&alice, &q).await,
        vec![
            (1, alice_sub.clone()),
            (2, alice_sub.clone()),
            (3, alice_sub),
            (4, Value::Null)
        ]
    );
    let a = Some("alice-producer".to_string());
    assert_eq!(stored(&q).await, vec![a.clone(), a.clone(), a, None]);
}

/// A stream cycle's sink items are pushes too: the token's subject is stamped, the
/// body's `producerSub` ignored, and the extension's own `producer_sub` field is the
/// broker's word only (refused from a client, nothing written).
#[tokio::test]
async fn a_cycle_sink_item_carries_the_tokens_subject() {
    let b = authenticating().await;
    let alice = b.with_token(&token(Some("alice-stream"), Uuid::new_v4()));
    let s = leased_stream(&alice, "psub-cycle").await;
    let sink = unique("psub-sink");
    let forged = s.cycle(json!({"push_items": [
        {"queue": sink, "payload": {"n": 1}, "producer_sub": "attacker"}]}));
    let (st, v) = alice.post("/streams/v1/cycle", &forged).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "push_items[0].producer_sub", "{v}");
    assert!(stored(&sink).await.is_empty(), "nothing written");
    let body = s.cycle(json!({"push_items": [
        {"queue": sink, "payload": {"n": 1}, "producerSub": "attacker"}]}));
    let (st, v) = alice.post("/streams/v1/cycle", &body).await;
    assert_eq!((st, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(
        popped(&alice, &sink).await,
        vec![(1, json!("alice-stream"))]
    );
    assert_eq!(stored(&sink).await, vec![Some("alice-stream".to_string())]);
}
