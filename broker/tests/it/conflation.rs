//! Conflation, Queen 2.x's last-value delivery (docs/decisions.md, "Conflation"), over
//! HTTP: `conflation=true` on a pop of a consumer group serves each partition's newest
//! message only, its ack retires everything behind it, the answer echoes the group's
//! policy (also when empty), and the policy stored at registration wins afterwards.

use crate::common;
use common::{items, txns};

use common::{acks_for, start, unique};
use reqwest::StatusCode;
use serde_json::json;

/// The ack of a group's pop (acks_for names no group).
fn acks(pop: &serde_json::Value, group: &str) -> serde_json::Value {
    let mut body = acks_for(pop, "completed", None);
    for a in body["acknowledgments"].as_array_mut().unwrap() {
        a["consumerGroup"] = json!(group);
    }
    body
}

#[tokio::test]
async fn a_conflating_group_gets_the_newest_and_its_ack_retires_the_rest() {
    let b = start().await;
    let q = unique("conf");
    b.push(items(&q, &["m1", "m2", "m3", "m4", "m5"])).await;
    for (group, path) in [
        (
            "g",
            format!("/api/v1/pop/queue/{q}?consumerGroup=g&batch=10&conflation=true"),
        ),
        (
            "g2",
            format!(
                "/api/v1/pop/queue/{q}/partition/Default?consumerGroup=g2&batch=10&conflation=true"
            ),
        ),
    ] {
        let (s, pop) = b.get(&path).await;
        assert_eq!(s, StatusCode::OK, "{path}: {pop}");
        assert_eq!(txns(&pop), ["m5"], "{pop}");
        assert_eq!(pop["conflation"], true, "the echo: {pop}");
        let (_, acked) = b.ack_batch(acks(&pop, group)).await;
        assert_eq!(acked[0]["success"], true, "{acked}");
        // Nothing left: an empty answer, with a body that still echoes the policy.
        let (s, empty) = b.get(&path).await;
        assert_eq!(s, StatusCode::OK, "{empty}");
        assert_eq!(empty["conflation"], true, "{empty}");
        assert_eq!(empty["messages"], json!([]), "{empty}");
    }
    // A group without it gets everything, and no echo key.
    let (s, all) = b
        .get(&format!("/api/v1/pop/queue/{q}?consumerGroup=h&batch=10"))
        .await;
    assert_eq!(s, StatusCode::OK, "{all}");
    assert_eq!(txns(&all), ["m1", "m2", "m3", "m4", "m5"]);
    assert!(all.get("conflation").is_none(), "{all}");
    // An empty pop that did not ask stays a 204.
    let (s, _) = b
        .get(&format!("/api/v1/pop/queue/{q}?consumerGroup=g"))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn the_stored_policy_wins_and_a_conflict_is_said() {
    let b = start().await;
    let q = unique("confwin");
    b.push(items(&q, &["a1", "a2"])).await;
    // g registers conflating; a later pop without the flag is conflated all the same.
    let (_, pop) = b
        .get(&format!(
            "/api/v1/pop/queue/{q}?consumerGroup=g&conflation=true"
        ))
        .await;
    assert_eq!(txns(&pop), ["a2"]);
    let (_, acked) = b.ack_batch(acks(&pop, "g")).await;
    assert_eq!(acked[0]["success"], true, "{acked}");
    b.push(items(&q, &["a3", "a4"])).await;
    let (_, pop) = b
        .get(&format!("/api/v1/pop/queue/{q}?consumerGroup=g&batch=10"))
        .await;
    assert_eq!(txns(&pop), ["a4"], "stored policy: {pop}");
    // h registers without it (a queue-level pop registers); asking for it later gets the
    // ordinary pop and the conflict key Queen's SDK warns on, never the echo.
    let (_, pop) = b
        .get(&format!("/api/v1/pop/queue/{q}?consumerGroup=h"))
        .await;
    assert_eq!(txns(&pop), ["a1"]);
    let (_, acked) = b.ack_batch(acks(&pop, "h")).await;
    assert_eq!(acked[0]["success"], true, "{acked}");
    let (s, pop) = b
        .get(&format!(
            "/api/v1/pop/queue/{q}?consumerGroup=h&batch=10&conflation=true"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{pop}");
    assert_eq!(txns(&pop), ["a2", "a3", "a4"], "{pop}");
    assert_eq!(pop["conflationConflict"], true, "{pop}");
    assert!(pop.get("conflation").is_none(), "{pop}");
}

/// Refused (400 naming it, nothing taken) without a consumer group and with autoAck.
#[tokio::test]
async fn conflation_is_refused_without_a_group_and_with_auto_ack() {
    let b = start().await;
    let q = unique("confno");
    b.push(json!([{"queue": q, "transactionId": "c1", "payload": 1}]))
        .await;
    for path in [
        format!("/api/v1/pop/queue/{q}?conflation=true"),
        format!("/api/v1/pop/queue/{q}/partition/Default?conflation=true"),
        format!("/api/v1/pop/queue/{q}?consumerGroup=g&autoAck=true&conflation=true"),
        format!("/api/v1/pop?namespace={q}&autoAck=true&consumerGroup=g&conflation=true"),
    ] {
        let (s, v) = b.get(&path).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(v["parameter"], "conflation", "{v}");
    }
    let (s, v) = b
        .get(&format!(
            "/api/v1/pop/queue/{q}?consumerGroup=g&conflation=false"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["messages"][0]["transactionId"], "c1", "nothing was taken");
}

/// The consumer-group views show the group's stored policy.
#[tokio::test]
async fn the_admin_views_show_the_policy() {
    let b = start().await;
    let q = unique("confadm");
    b.push(items(&q, &["x1", "x2"])).await;
    for (g, flag) in [("gc", "&conflation=true"), ("gp", "")] {
        let (s, _) = b
            .get(&format!("/api/v1/pop/queue/{q}?consumerGroup={g}{flag}"))
            .await;
        assert_eq!(s, StatusCode::OK);
    }
    let (_, all) = b.get("/api/v1/consumer-groups").await;
    let policy = |g: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|v| v["queueName"] == q && v["name"] == g)
            .map(|v| v["conflation"].clone())
    };
    assert_eq!(policy("gc"), Some(json!(true)), "{all}");
    assert_eq!(policy("gp"), Some(json!(false)), "{all}");
    let (_, one) = b.get("/api/v1/consumer-groups/gc").await;
    assert_eq!(one[&q]["conflation"], true, "{one}");
}
