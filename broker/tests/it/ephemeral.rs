//! Ephemeral queues over HTTP (Queen 2.x's `client.ephemeral`; docs/decisions.md,
//! "Ephemeral queues"): the declaration is in the database, the contents in the owning
//! broker's memory; every answer shape the 2.6.0 SDK reads, the bounds enforced, every
//! drop counted, ids of an earlier broker `stale`, and two brokers passing requests on
//! to the queue's owner.

use crate::common;

use std::time::Duration;

use common::{admin, listener, metrics, start, start_bound, start_with, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn push(b: &Broker, q: &str, payloads: &[Value]) -> (StatusCode, Value) {
    let messages: Vec<Value> = payloads.iter().map(|p| json!({"payload": p})).collect();
    b.post(
        "/api/v1/ephemeral/push",
        &json!({"queue": q, "messages": messages}),
    )
    .await
}

async fn pop(b: &Broker, q: &str, query: &str) -> Vec<Value> {
    let (s, v) = b
        .get(&format!("/api/v1/ephemeral/pop?queue={q}&{query}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["queue"], q, "{v}");
    v["messages"]
        .as_array()
        .expect("messages is a list")
        .clone()
}

async fn ack(b: &Broker, q: &str, group: Option<&str>, acks: Value) -> Vec<String> {
    let mut body = json!({"queue": q, "acks": acks});
    if let Some(g) = group {
        body["group"] = json!(g);
    }
    let (s, v) = b.post("/api/v1/ephemeral/ack", &body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap().to_string())
        .collect()
}

fn ids(msgs: &[Value]) -> Value {
    json!(msgs
        .iter()
        .map(|m| json!({"id": m["id"]}))
        .collect::<Vec<_>>())
}

async fn configure(b: &Broker, q: &str, options: Value) -> Value {
    let (s, v) = b
        .post(
            "/api/v1/ephemeral/configure",
            &json!({"queue": q, "options": options}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

async fn stored(q: &str) -> Option<Value> {
    admin()
        .await
        .query_opt(
            "SELECT options FROM queen.ephemeral_queues WHERE name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
}

#[tokio::test]
async fn configure_stores_the_effective_options_and_refuses_a_bad_knob_by_name() {
    let b = start().await;
    let q = unique("eph-conf");
    let v = configure(&b, &q, json!({"maxLength": 10, "policy": "drop_oldest"})).await;
    assert_eq!(v["created"], true, "{v}");
    assert_eq!(v["options"]["leaseSeconds"], 30, "defaults filled in: {v}");
    assert_eq!(stored(&q).await.unwrap()["maxLength"], 10);
    assert_eq!(configure(&b, &q, json!({})).await["created"], false);

    let bad = unique("eph-bad");
    for (options, field) in [
        (json!({"ttl_second": 5}), "options.ttl_second"),
        (json!({"maxBytes": 0}), "options.maxBytes"),
        (json!({"policy": "drop"}), "options.policy"),
        (
            json!({"windowBuffer": {"ms": 1, "size": 2}}),
            "options.windowBuffer.size",
        ),
    ] {
        let (s, v) = b
            .post(
                "/api/v1/ephemeral/configure",
                &json!({"queue": bad, "options": options}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["field"], field, "{v}");
    }
    assert_eq!(
        stored(&bad).await,
        None,
        "a refused configure stores nothing"
    );
    let (s, v) = b
        .post(
            "/api/v1/ephemeral/configure",
            &json!({"queue": bad, "opts": {}}),
        )
        .await;
    assert_eq!(
        (s, v["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("opts")),
        "{v}"
    );
}

#[tokio::test]
async fn push_pop_ack_round_trip_and_an_empty_pop_is_an_empty_list() {
    let b = start().await;
    let q = unique("eph-rt");
    let (s, v) = push(&b, &q, &[json!({"n": 1}), json!("two"), json!(null)]).await;
    assert_eq!((s, v["pushed"].clone()), (StatusCode::OK, json!(3)), "{v}");
    assert_eq!(v["partition"], "Default");
    let got = pop(&b, &q, "batch=10").await;
    let payloads: Vec<&Value> = got.iter().map(|m| &m["payload"]).collect();
    assert_eq!(payloads, [&json!({"n": 1}), &json!("two"), &json!(null)]);
    assert!(got
        .iter()
        .all(|m| m["attempts"] == 0 && m["partition"] == "Default"));
    assert_eq!(ack(&b, &q, None, ids(&got)).await, ["acked"; 3]);
    assert!(pop(&b, &q, "batch=10").await.is_empty());
    let (s, d) = b.get(&format!("/api/v1/ephemeral/queues/{q}/depth")).await;
    assert_eq!(
        (s, d["length"].clone(), d["bytes"].clone()),
        (StatusCode::OK, json!(0), json!(0)),
        "{d}"
    );
    assert_eq!(
        ack(&b, &q, None, ids(&got)).await,
        ["unknown"; 3],
        "acked once only"
    );
}

#[tokio::test]
async fn one_group_competes_other_groups_fan_out_and_no_group_is_queue_mode() {
    let b = start().await;
    let q = unique("eph-groups");
    push(&b, &q, &[json!(1), json!(2), json!(3), json!(4)]).await;
    let w1 = pop(&b, &q, "group=workers&batch=2").await;
    let w2 = pop(&b, &q, "group=workers&batch=10").await;
    assert_eq!((w1.len(), w2.len()), (2, 2));
    assert_eq!(
        w2[0]["payload"], 3,
        "the second worker takes what the first left"
    );
    assert_eq!(
        pop(&b, &q, "group=tail&batch=10").await.len(),
        4,
        "fan-out sees all"
    );
    assert_eq!(
        pop(&b, &q, "batch=10").await.len(),
        4,
        "queue mode is a group of its own"
    );
    assert_eq!(
        ack(&b, &q, None, ids(&w1)).await,
        ["unknown"; 2],
        "acks name their group"
    );
    assert_eq!(ack(&b, &q, Some("workers"), ids(&w1)).await, ["acked"; 2]);
}

#[tokio::test]
async fn an_expired_lease_redelivers_with_one_more_attempt_then_the_budget_drops_it() {
    let b = start().await;
    let q = unique("eph-lease");
    configure(&b, &q, json!({"leaseSeconds": 1, "retryLimit": 1})).await;
    push(&b, &q, &[json!("m")]).await;
    let first = pop(&b, &q, "").await;
    // Waiting out the lease is the behaviour under test (no wake-up to race with).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = pop(&b, &q, "").await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0]["attempts"], 1);
    assert_ne!(
        second[0]["id"], first[0]["id"],
        "each delivery has its own id"
    );
    assert_eq!(
        ack(&b, &q, None, ids(&first)).await,
        ["stale"],
        "superseded delivery"
    );
    let before = metrics(&b).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        pop(&b, &q, "").await.is_empty(),
        "past retryLimit it is dropped"
    );
    let after = metrics(&b).await;
    let key = "queen_ephemeral_messages_total{event=\"dropped_retry\"}";
    assert_eq!(after[key] - before.get(key).copied().unwrap_or(0.0), 1.0);
}

#[tokio::test]
async fn a_failed_ack_redelivers_and_one_past_the_budget_is_taken_and_dropped() {
    let b = start().await;
    let q = unique("eph-fail");
    configure(&b, &q, json!({"retryLimit": 1})).await;
    push(&b, &q, &[json!("m")]).await;
    let d = pop(&b, &q, "").await;
    assert_eq!(
        ack(&b, &q, None, json!([{"id": d[0]["id"], "status": "retry"}])).await,
        ["redelivered"]
    );
    let d = pop(&b, &q, "").await;
    assert_eq!(d[0]["attempts"], 1);
    let (s, v) = b
        .post(
            "/api/v1/ephemeral/ack",
            &json!({"queue": q, "acks": [{"id": d[0]["id"], "status": "failed", "error": "boom"}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["results"][0],
        json!({"id": d[0]["id"], "outcome": "acked", "dropped": true})
    );
    assert!(pop(&b, &q, "").await.is_empty());
}

#[tokio::test]
async fn reject_answers_429_with_nothing_pushed_and_drop_oldest_feeds() {
    let b = start().await;
    let q = unique("eph-full");
    configure(&b, &q, json!({"maxLength": 2})).await;
    push(&b, &q, &[json!(1)]).await;
    let (s, v) = push(&b, &q, &[json!(2), json!(3)]).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["code"], "ephemeral_queue_full");
    let (s, v) = push(&b, &q, &[json!(2), json!(3), json!(4)]).await;
    assert_eq!(
        (s, v["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("messages")),
        "{v}"
    );
    assert_eq!(
        pop(&b, &q, "batch=10").await.len(),
        1,
        "nothing of the refused pushes"
    );

    let feed = unique("eph-feed");
    configure(&b, &feed, json!({"maxLength": 2, "policy": "drop_oldest"})).await;
    for i in 0..5 {
        assert_eq!(push(&b, &feed, &[json!(i)]).await.0, StatusCode::OK);
    }
    let got = pop(&b, &feed, "batch=10").await;
    assert_eq!(
        got.iter().map(|m| m["payload"].clone()).collect::<Vec<_>>(),
        [json!(3), json!(4)]
    );
}

#[tokio::test]
async fn the_memory_budget_answers_503_with_retry_after_and_nothing_pushed() {
    let b = start_with(|c| c.ephemeral_max_bytes = 16).await;
    let q = unique("eph-mem");
    assert_eq!(push(&b, &q, &[json!("0123456789")]).await.0, StatusCode::OK);
    let r = b
        .http
        .post(format!("{}/api/v1/ephemeral/push", b.base))
        .json(&json!({"queue": q, "messages": [{"payload": "0123456789"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "ephemeral_memory_full", "{v}");
    assert_eq!(pop(&b, &q, "batch=10").await.len(), 1);
}

#[tokio::test]
async fn a_new_broker_keeps_the_declaration_and_answers_earlier_ids_stale() {
    let a = start().await;
    let q = unique("eph-restart");
    configure(&a, &q, json!({"maxLength": 7})).await;
    push(&a, &q, &[json!(1)]).await;
    let got = pop(&a, &q, "").await;
    let b = start().await;
    // The new broker reads the declarations as it starts serving.
    let mut depth = Value::Null;
    for _ in 0..50 {
        let (s, d) = b.get(&format!("/api/v1/ephemeral/queues/{q}/depth")).await;
        if s == StatusCode::OK {
            depth = d;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(depth["options"]["maxLength"], 7, "{depth}");
    assert_eq!(depth["length"], 0, "contents survive nothing: {depth}");
    assert_eq!(ack(&b, &q, None, ids(&got)).await, ["stale"]);
    assert_eq!(
        ack(&b, &q, None, json!([{"id": "not-an-id"}])).await,
        ["unknown"]
    );
}

#[tokio::test]
async fn reset_delete_and_the_one_404() {
    let b = start().await;
    let q = unique("eph-reset");
    configure(&b, &q, json!({})).await;
    push(&b, &q, &[json!(1), json!(2)]).await;
    let got = pop(&b, &q, "").await;
    let (s, v) = b
        .post("/api/v1/ephemeral/reset", &json!({"queue": q}))
        .await;
    assert_eq!((s, v["dropped"].clone()), (StatusCode::OK, json!(2)), "{v}");
    assert_eq!(
        ack(&b, &q, None, ids(&got)).await,
        ["stale"],
        "a reset fences earlier ids"
    );
    assert!(stored(&q).await.is_some(), "the declaration stays");
    let (s, v) = b.delete(&format!("/api/v1/ephemeral/queue/{q}")).await;
    assert_eq!(
        (s, v["deleted"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    assert_eq!(stored(&q).await, None);
    let (_, v) = b.delete(&format!("/api/v1/ephemeral/queue/{q}")).await;
    assert_eq!(v["deleted"], false);
    let (s, v) = b.get(&format!("/api/v1/ephemeral/queues/{q}/depth")).await;
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::NOT_FOUND, json!("ephemeral_queue_not_found")),
        "{v}"
    );
    let (s, v) = b
        .post("/api/v1/ephemeral/reset", &json!({"queue": q}))
        .await;
    assert_eq!((s, v["dropped"].clone()), (StatusCode::OK, json!(0)));
}

#[tokio::test]
async fn a_waiting_pop_is_woken_by_a_push() {
    let b = start().await;
    let q = unique("eph-wait");
    let waiter = {
        let b = Broker {
            base: b.base.clone(),
            http: b.http.clone(),
            state: b.state.clone(),
        };
        let q = q.clone();
        tokio::spawn(async move { pop(&b, &q, "wait=true&timeout=20000").await })
    };
    push(&b, &q, &[json!("hello")]).await;
    let got = waiter.await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["payload"], "hello");
    let started = std::time::Instant::now();
    assert!(pop(&b, &q, "wait=true&timeout=50").await.is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "the wait is honoured"
    );
}

#[tokio::test]
async fn bad_requests_are_400s_naming_what_is_wrong() {
    let b = start().await;
    let q = unique("eph-bad");
    let (s, v) = b.get("/api/v1/ephemeral/pop").await;
    assert_eq!(
        (s, v["parameter"].clone()),
        (StatusCode::BAD_REQUEST, json!("queue")),
        "{v}"
    );
    let (s, v) = b
        .get(&format!("/api/v1/ephemeral/pop?queue={q}&batch=0"))
        .await;
    assert_eq!(
        (s, v["parameter"].clone()),
        (StatusCode::BAD_REQUEST, json!("batch")),
        "{v}"
    );
    let (s, v) = b
        .post(
            "/api/v1/ephemeral/push",
            &json!({"queue": q, "messages": [{"payload": 1, "transactionId": "x"}]}),
        )
        .await;
    assert_eq!(
        (s, v["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("messages[0].transactionId")),
        "{v}"
    );
    let (s, v) = b
        .post(
            "/api/v1/ephemeral/ack",
            &json!({"queue": q, "acks": [{"id": "x", "status": "done"}]}),
        )
        .await;
    assert_eq!(
        (s, v["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("acks[0].status")),
        "{v}"
    );
    let (s, _) = b.get(&format!("/api/v1/ephemeral/queues/{q}/depth")).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "refused requests made no queue");
}

#[tokio::test]
async fn two_brokers_pass_requests_on_to_the_queues_owner() {
    let ((la, a_url), (lb, b_url)) = (listener().await, listener().await);
    let peers = vec![a_url.clone(), b_url.clone()];
    let (pa, pb) = (peers.clone(), peers.clone());
    let a = start_bound(la, |c| {
        c.ephemeral_peers = pa;
        c.ephemeral_self = Some(0);
    })
    .await;
    let b = start_bound(lb, |c| {
        c.ephemeral_peers = pb;
        c.ephemeral_self = Some(1);
    })
    .await;
    let tenant = queen_log::conventions::DEFAULT_TENANT;
    let q = (0..)
        .map(|i| format!("{}-{i}", unique("eph-owned")))
        .find(|q| queen_log::ephemeral::owner(&peers, tenant, q) == 1)
        .unwrap();
    assert_eq!(push(&a, &q, &[json!("via a")]).await.0, StatusCode::OK);
    assert_eq!(
        b.state.ephemeral.gauges().messages,
        1,
        "it lives on its owner"
    );
    assert_eq!(a.state.ephemeral.gauges().messages, 0);
    let got = pop(&a, &q, "").await;
    assert_eq!(got[0]["payload"], "via a");
    assert_eq!(
        ack(&b, &q, None, ids(&got)).await,
        ["acked"],
        "either broker acks it"
    );
    let (s, v) = a.get("/api/v1/ephemeral/queues").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["queue"] == q),
        "{v}"
    );
    assert_eq!(v["unreachable"], json!([]));
    let forwarded = metrics(&a).await["queen_ephemeral_forwarded_total"];
    assert_eq!(forwarded, 2.0, "the push and the pop");

    // A request claiming to be passed on is served only by the owner: never a copy.
    let r = a
        .http
        .post(format!("{a_url}/api/v1/ephemeral/push"))
        .header("x-queen-ephemeral-forwarded", "1")
        .json(&json!({"queue": q, "messages": [{"payload": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.json::<Value>().await.unwrap()["code"],
        "ephemeral_owner_mismatch"
    );
    assert_eq!(a.state.ephemeral.gauges().messages, 0);
}
