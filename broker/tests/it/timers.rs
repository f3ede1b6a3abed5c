//! Queen 2.x's timers over real HTTP (docs/decisions.md, "Timers"): a timer arrives in
//! its queue once and never before its `deliverAt` (delivered by the broker's sweeper),
//! schedule/reschedule/cancel answer the SDK's statuses, a list is keyset paged, a bad
//! op is the SDK's `timers_bad_request` and writes nothing, and timers ride a
//! transaction: committed with it, or not at all.

use crate::common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::{admin, start, timers_pending, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

fn b64(v: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}

fn schedule(q: &str, key: &str, payload: Value, delay_ms: i64) -> Value {
    json!({"op": "schedule", "queue": q, "timerKey": key, "payload": b64(&payload),
           "delayMs": delay_ms})
}

async fn timers(b: &Broker, ops: Value) -> Vec<Value> {
    let (s, v) = b
        .post("/api/v1/timers", &json!({ "operations": ops }))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["results"].as_array().unwrap().clone()
}

/// Pops until a message arrives (the sweeper delivers it), at most `within`.
async fn pop_within(b: &Broker, q: &str, within: Duration) -> Option<(Value, Instant)> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(v) = b.pop(q, "batch=10&wait=false").await {
            return Some((v, Instant::now()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn messages_with_txn(q: &str, txn: &str) -> i64 {
    admin()
        .await
        .query_one(
            "SELECT count(*) FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id,
                    LATERAL (SELECT s.blob FROM queen.log_segments s WHERE s.partition_id = p.id) s,
                    LATERAL queen.decode_segment_v1(s.blob) f
              WHERE q.name = $1 AND f.transaction_id = $2",
            &[&q, &txn],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_timer_arrives_once_and_never_before_its_time() {
    let b = start().await;
    let q = unique("tfire");
    let mut op = schedule(&q, "fire:1", json!({"orderId": "9f1"}), 700);
    op["txn"] = json!("fire-txn-1");
    let asked = Instant::now();
    let r = timers(&b, json!([op])).await;
    assert_eq!(
        (r[0]["ok"].clone(), r[0]["status"].clone()),
        (json!(true), json!("scheduled"))
    );
    assert_eq!(r[0]["txn"], "fire-txn-1");
    assert!(
        r[0]["messageId"].is_string() && r[0]["deliverAt"].is_string(),
        "{r:?}"
    );
    assert!(b.pop(&q, "batch=10").await.is_none(), "delivered early");
    let (_, peek) = b.get(&format!("/api/v1/timers/{q}/fire:1")).await;
    assert_eq!(
        (peek["found"].clone(), peek["txn"].clone()),
        (json!(true), json!("fire-txn-1"))
    );
    assert_eq!(peek["payload"], b64(&json!({"orderId": "9f1"})));

    let (v, at) = pop_within(&b, &q, Duration::from_secs(10))
        .await
        .expect("the timer fired");
    assert!(
        at - asked >= Duration::from_millis(700),
        "arrived before deliverAt"
    );
    let m = &v["messages"][0];
    assert_eq!(m["data"], json!({"orderId": "9f1"}), "{v}");
    assert_eq!(m["transactionId"], "fire-txn-1");
    assert_eq!(m["id"], r[0]["messageId"], "the promised message id");
    assert_eq!(
        messages_with_txn(&q, "fire-txn-1").await,
        1,
        "delivered once"
    );
    let (_, peek) = b.get(&format!("/api/v1/timers/{q}/fire:1")).await;
    assert_eq!(peek, json!({"found": false}), "no tombstone");
    // Any broker of this binary may have delivered it (each runs a sweeper): this one's
    // sweeper has run, and its counters are exposed.
    let m = common::metrics(&b).await;
    assert!(common::metric(&m, r#"queen_timer_sweeps_total{result="ok"}"#) >= 1.0);
    assert!(m.contains_key("queen_timers_fired_total"), "{m:?}");
}

#[tokio::test]
async fn reschedule_moves_it_and_cancel_answers_cancelled_then_absent() {
    let b = start().await;
    let q = unique("tresched");
    let first = timers(&b, json!([schedule(&q, "k", json!({"v": 1}), 3_600_000)])).await;
    let mut again = schedule(&q, "k", json!({"v": 2}), 1_800_000);
    again["op"] = json!("reschedule");
    let second = timers(&b, json!([again])).await;
    assert_eq!(second[0]["status"], "rescheduled");
    assert!(second[0]["deliverAt"].as_str() < first[0]["deliverAt"].as_str());
    let txn = second[0]["txn"].as_str().unwrap().to_string();
    assert_ne!(
        txn,
        first[0]["txn"].as_str().unwrap(),
        "a new timer under an old name"
    );

    // A cancel naming the replaced timer's txn leaves the pending one alone.
    let old = first[0]["txn"].as_str().unwrap();
    let (s, r) = b.delete(&format!("/api/v1/timers/{q}/k?txn={old}")).await;
    assert_eq!(
        (s, r["status"].clone(), r["ok"].clone()),
        (StatusCode::OK, json!("absent"), json!(false))
    );
    assert_eq!(r["txn"], old, "absent echoes the txn asked");
    assert_eq!(timers_pending(&q).await, 1);

    let (_, r) = b.delete(&format!("/api/v1/timers/{q}/k?txn={txn}")).await;
    assert_eq!(
        (r["status"].clone(), r["ok"].clone(), r["txn"].clone()),
        (json!("cancelled"), json!(true), json!(txn))
    );
    let (_, r) = b.delete(&format!("/api/v1/timers/{q}/k")).await;
    assert_eq!(r["status"], "absent");
    assert_eq!(timers_pending(&q).await, 0);
}

#[tokio::test]
async fn a_list_is_keyset_paged_and_its_limit_clamped() {
    let b = start().await;
    let q = unique("tlist");
    let ops: Vec<Value> = (0..5)
        .map(|i| schedule(&q, &format!("list:{i}"), json!({"i": i}), 3_600_000))
        .collect();
    timers(&b, json!(ops)).await;
    let (_, page) = b.get(&format!("/api/v1/timers/{q}?limit=2")).await;
    assert_eq!(page["rows"].as_array().unwrap().len(), 2);
    assert_eq!(
        (page["truncated"].clone(), page["nextAfter"].clone()),
        (json!(true), json!("list:1"))
    );
    let (_, rest) = b
        .get(&format!("/api/v1/timers/{q}?after=list:1&limit=5"))
        .await;
    let keys: Vec<&str> = rest["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["timerKey"].as_str().unwrap())
        .collect();
    assert_eq!(
        (keys, rest["truncated"].clone()),
        (vec!["list:2", "list:3", "list:4"], json!(false))
    );
    let (s, one) = b.get(&format!("/api/v1/timers/{q}?limit=0")).await;
    assert_eq!(
        (s, one["rows"].as_array().unwrap().len()),
        (StatusCode::OK, 1),
        "clamped"
    );
    let (s, bad) = b.get(&format!("/api/v1/timers/{q}?limit=two")).await;
    assert_eq!(
        (s, bad["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("timers_bad_request"))
    );
    // Nothing left to fall due later: a delivery into the shared test database in the
    // middle of another suite would move the partition sums that suite watches (the
    // hostile-input digest did, when these were due two minutes out).
    for i in 0..5 {
        let (_, r) = b.delete(&format!("/api/v1/timers/{q}/list:{i}")).await;
        assert_eq!(r["status"], "cancelled", "{r}");
    }
    assert_eq!(timers_pending(&q).await, 0);
}

/// One call's ops apply one after another (Queen's rule; docs/decisions.md, "Timers"):
/// a key may appear several times and each op answers as if it ran alone, in order.
#[tokio::test]
async fn a_batch_applies_in_order_and_a_key_may_repeat() {
    let b = start().await;
    let q = unique("torder");
    let cancel = |key: &str| json!({"op": "cancel", "queue": q, "timerKey": key});
    let statuses = |r: &[Value]| {
        r.iter()
            .map(|x| (x["timerKey"].clone(), x["status"].clone(), x["ok"].clone()))
            .collect::<Vec<_>>()
    };
    let row = |k: &str, s: &str, ok: bool| (json!(k), json!(s), json!(ok));
    // schedule(k) then cancel(k): both answer, k is absent afterwards.
    let r = timers(
        &b,
        json!([schedule(&q, "k", json!(1), 60_000), cancel("k")]),
    )
    .await;
    assert_eq!(
        statuses(&r),
        vec![row("k", "scheduled", true), row("k", "cancelled", true)]
    );
    assert_eq!(
        r[0]["txn"], r[1]["txn"],
        "the cancel removed that very timer"
    );
    assert_eq!(timers_pending(&q).await, 0);
    // cancel(k) then schedule(k): absent, then scheduled and pending.
    let r = timers(
        &b,
        json!([cancel("k"), schedule(&q, "k", json!(2), 60_000)]),
    )
    .await;
    assert_eq!(
        statuses(&r),
        vec![row("k", "absent", false), row("k", "scheduled", true)]
    );
    assert_eq!(timers_pending(&q).await, 1);
    // schedule(j) twice around another key: the second wins.
    let r = timers(
        &b,
        json!([
            schedule(&q, "j", json!({"v": 1}), 60_000),
            schedule(&q, "a", json!(0), 60_000),
            schedule(&q, "j", json!({"v": 2}), 120_000)
        ]),
    )
    .await;
    assert_eq!(
        statuses(&r),
        vec![
            row("j", "scheduled", true),
            row("a", "scheduled", true),
            row("j", "rescheduled", true)
        ]
    );
    let (_, peek) = b.get(&format!("/api/v1/timers/{q}/j")).await;
    assert_eq!(peek["txn"], r[2]["txn"], "{peek}");
    assert_eq!(peek["deliverAt"], r[2]["deliverAt"], "{peek}");
    assert_eq!(timers_pending(&q).await, 3);
    // The same rule inside a transaction's rider.
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [], "timers": [
                schedule(&q, "saga", json!(1), 60_000), cancel("saga"), cancel("j")]}),
        )
        .await;
    assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    let st: Vec<&Value> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["status"])
        .collect();
    assert_eq!(st, vec!["scheduled", "cancelled", "cancelled"], "{v}");
    assert_eq!(timers_pending(&q).await, 2, "k and a are left");
    // Nothing left to fall due later (see above): another test's whole-database snapshot
    // would see the delivery.
    let r = timers(&b, json!([cancel("k"), cancel("a")])).await;
    assert_eq!(
        statuses(&r),
        vec![row("k", "cancelled", true), row("a", "cancelled", true)]
    );
    assert_eq!(timers_pending(&q).await, 0);
}

#[tokio::test]
async fn a_bad_op_is_the_sdks_refusal_and_writes_nothing() {
    let b = start().await;
    let q = unique("tbad");
    let good = schedule(&q, "a", json!(1), 1000);
    let mut owned = schedule(&q, "b", json!(1), 1000);
    owned["deliverAt"] = json!("2030-01-01T00:00:00Z");
    let mut not_json = schedule(&q, "c", json!(1), 1000);
    not_json["payload"] = json!(base64::engine::general_purpose::STANDARD.encode("not json"));
    let mut no_delay = schedule(&q, "d", json!(1), 1000);
    no_delay.as_object_mut().unwrap().remove("delayMs");
    let mut far = schedule(&q, "e", json!(1), 1000);
    far["delayMs"] = json!(400_i64 * 24 * 3600 * 1000);
    for (ops, says) in [
        (json!([good.clone(), owned]), "deliverAt"),
        (json!([good.clone(), not_json]), "JSON"),
        (json!([good.clone(), no_delay]), "delayMs"),
        (json!([good.clone(), far]), "year"),
    ] {
        let (s, v) = b
            .post("/api/v1/timers", &json!({ "operations": ops }))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"], "timers_bad_request", "{v}");
        assert!(v["detail"].as_str().unwrap().contains(says), "{v}");
    }
    assert_eq!(
        timers_pending(&q).await,
        0,
        "nothing of a refused call was written"
    );
}

#[tokio::test]
async fn a_timer_whose_txn_the_queue_already_holds_is_not_delivered_twice() {
    let b = start().await;
    let q = unique("tdup");
    b.push(json!([{"queue": q, "transactionId": "once", "payload": {"pushed": true}}]))
        .await;
    let mut op = schedule(&q, "k", json!({"timer": true}), -1000);
    op["txn"] = json!("once");
    timers(&b, json!([op])).await;
    let until = Instant::now() + Duration::from_secs(10);
    while timers_pending(&q).await > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(timers_pending(&q).await, 0, "the sweeper took it");
    assert_eq!(
        messages_with_txn(&q, "once").await,
        1,
        "the dedup window held it back"
    );
}

#[tokio::test]
async fn timers_ride_a_transaction_and_share_its_fate() {
    let b = start().await;
    let q = unique("ttxn");
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": {"p": 1}}]}],
                    "timers": [schedule(&q, "saga:1", json!({"saga": 1}), 3_600_000)]}),
        )
        .await;
    assert_eq!(
        (s, v["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    let res = v["results"].as_array().unwrap();
    assert_eq!(res.len(), 2, "{v}");
    assert_eq!(
        (
            res[1]["type"].clone(),
            res[1]["index"].clone(),
            res[1]["status"].clone()
        ),
        (json!("timer"), json!(1), json!("scheduled"))
    );
    assert_eq!(timers_pending(&q).await, 1);

    // A cancel rides too.
    let (_, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [], "timers": [{"op": "cancel", "queue": q, "timerKey": "saga:1"}]}),
        )
        .await;
    assert_eq!(
        (v["success"].clone(), v["results"][0]["status"].clone()),
        (json!(true), json!("cancelled")),
        "{v}"
    );
    assert_eq!(timers_pending(&q).await, 0);

    // A bogus ack rolls the bundle back, the timer with it.
    let popped = b.pop(&q, "batch=1").await.expect("the pushed message");
    let pid = popped["partitionId"].as_str().unwrap();
    let (_, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "ack", "transactionId": "no-such-message", "partitionId": pid,
                                    "status": "completed"}],
                    "timers": [schedule(&q, "saga:2", json!({"saga": 2}), 3_600_000)]}),
        )
        .await;
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(
        timers_pending(&q).await,
        0,
        "the failed bundle scheduled nothing"
    );

    // A bad rider op refuses the whole transaction before anything is written.
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": {"p": 2}}]}],
                    "timers": [{"op": "schedule", "queue": q, "timerKey": "x", "delayMs": 5}]}),
        )
        .await;
    assert_eq!(
        (s, v["success"].clone()),
        (StatusCode::BAD_REQUEST, json!(false)),
        "{v}"
    );
}
