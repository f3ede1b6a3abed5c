//! Exact numbers on every route that carries user JSON (docs/decisions.md, "Payloads and
//! names"): whatever the SQL path keeps, the broker keeps. A payload with a 30-digit
//! integer, 1e400, -0.0 and a long decimal is sent through each write path and read back
//! through the broker; each number must come back as its text was sent, or as PostgreSQL's
//! jsonb (numeric) writes that same value (1e400 in full, -0.0 as 0.0: a route that
//! stores jsonb), never rounded through a binary float (`1.2345678901234568e+29`).

mod common;

use base64::Engine;
use common::{admin, start, start_with, unique, Broker};
use queen_log::frame::Frame;
use queen_log::segment::encode_segment;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The numbers, each as its own field so each is compared as text.
const PAYLOAD: &str = r#"{"big":123456789012345678901234567890,"huge":1e400,"negz":-0.0,"dec":0.1000000000000000055511151231257827,"neg":-98765432109876543210987654321.000001}"#;
const FIELDS: [&str; 5] = ["big", "huge", "negz", "dec", "neg"];

fn payload() -> Value {
    serde_json::from_str(PAYLOAD).unwrap()
}

/// Each field's text as sent, and as PostgreSQL's jsonb writes it.
async fn forms() -> Vec<(String, String)> {
    let sent = payload();
    let row = admin()
        .await
        .query_one("SELECT $1::text::jsonb::text", &[&PAYLOAD])
        .await
        .unwrap();
    let jsonb: Value = serde_json::from_str(row.get::<_, &str>(0)).unwrap();
    FIELDS
        .iter()
        .map(|f| (sent[f].to_string(), jsonb[f].to_string()))
        .collect()
}

/// `got` holds every number exactly: as sent, or in jsonb's own form of the same value.
async fn assert_kept(route: &str, got: &Value) {
    for (f, (sent, jsonb)) in FIELDS.iter().zip(forms().await) {
        let text = got[f].to_string();
        assert!(
            text == sent || text == jsonb,
            "{route}: {f} came back as {text}, sent {sent} (jsonb: {jsonb}); whole: {got}"
        );
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The data of the one message `queue` holds (a fresh group, so any earlier reads
/// do not matter), waiting up to `within` for it to arrive.
async fn data_of(b: &Broker, queue: &str, within: Duration) -> Value {
    let until = Instant::now() + within;
    let group = unique("g");
    loop {
        if let Some(v) = b
            .pop(queue, &format!("batch=1&wait=false&consumerGroup={group}"))
            .await
        {
            return v["messages"][0]["data"].clone();
        }
        assert!(Instant::now() < until, "{queue}: nothing arrived");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn text16(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u16).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A `QPB1` body of one plain group with one item (docs/http-api.md, "Binary bodies").
fn binary_plain(queue: &str, payload: &str) -> Vec<u8> {
    let mut out = b"QPB1".to_vec();
    out.push(0);
    out.extend(1u32.to_le_bytes());
    text16(&mut out, queue);
    text16(&mut out, "Default");
    out.extend(1u32.to_le_bytes());
    out.extend((payload.len() as u32).to_le_bytes());
    out.extend(payload.as_bytes());
    out
}

/// A `QPB1` body of one framed group (flag 8) holding one frame.
fn binary_framed(queue: &str, payload: &str) -> Vec<u8> {
    let frame = Frame {
        message_id: *Uuid::now_v7().as_bytes(),
        trace_id: None,
        transaction_id: "framed".into(),
        producer_sub: None,
        encrypted: false,
        payload: payload.as_bytes().to_vec(),
    };
    let blob = encode_segment(&[frame]).unwrap();
    let mut out = b"QPB1".to_vec();
    out.push(8);
    out.extend(1u32.to_le_bytes());
    text16(&mut out, queue);
    text16(&mut out, "Default");
    out.extend(1u32.to_le_bytes());
    out.extend((blob.len() as u32).to_le_bytes());
    out.extend(blob);
    out
}

async fn send_binary(b: &Broker, body: Vec<u8>) {
    let r = b
        .http
        .post(format!("{}/api/v1/push", b.base))
        .header("content-type", "application/x-queen-push")
        .body(body)
        .send()
        .await
        .unwrap();
    let s = r.status();
    assert_eq!(s, StatusCode::CREATED, "{}", r.text().await.unwrap());
}

/// The one value stored under (ns, key), read with the kv route.
async fn kv_get(b: &Broker, ns: &str, key: &str) -> Value {
    let (s, v) = b
        .post(
            "/api/v1/kv",
            &json!({"operations": [{"op": "get", "ns": ns, "key": key}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["results"][0]["found"], true, "{v}");
    v["results"][0]["value"].clone()
}

#[tokio::test]
async fn the_test_client_itself_keeps_numbers_as_written() {
    // Every comparison below reads answers with serde_json: it must not round either.
    let v = payload();
    assert_eq!(v.to_string(), PAYLOAD);
}

#[tokio::test]
async fn every_push_path_keeps_numbers_exactly() {
    let b = start().await;
    let fused = start_with(|c| c.push_fusion = true).await;
    let wait = Duration::from_secs(5);
    // JSON push, and the same through push fusion.
    for (b, route) in [(&b, "push"), (&fused, "push (fused)")] {
        let q = unique("num-push");
        // The body as text: the payload reaches the broker exactly as written here.
        let r = b
            .http
            .post(format!("{}/api/v1/push", b.base))
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"items":[{{"queue":"{q}","payload":{PAYLOAD}}}]}}"#
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_kept(route, &data_of(b, &q, wait).await).await;
    }
    // Binary bodies: plain items and framed groups.
    let q = unique("num-bin");
    send_binary(&b, binary_plain(&q, PAYLOAD)).await;
    assert_kept("binary push", &data_of(&b, &q, wait).await).await;
    let q = unique("num-frm");
    send_binary(&b, binary_framed(&q, PAYLOAD)).await;
    assert_kept("framed binary push", &data_of(&b, &q, wait).await).await;
    // An ephemeral queue (held in the broker's memory).
    let q = unique("num-eph");
    let (s, v) = b
        .post(
            "/api/v1/ephemeral/push",
            &json!({"queue": q, "messages": [{"payload": payload()}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = b
        .get(&format!("/api/v1/ephemeral/pop?queue={q}&batch=1"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_kept("ephemeral push", &v["messages"][0]["payload"]).await;
    // A transaction's push.
    let q = unique("num-txn");
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [
                {"queue": q, "transactionId": "t", "payload": payload()}]}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let pop = b.pop(&q, "batch=1").await.unwrap();
    assert_kept("transaction push", &pop["messages"][0]["data"]).await;
    // The message by its address (the extension's JSON answer, read by the broker).
    let pid = pop["messages"][0]["partitionId"].as_str().unwrap();
    let (s, m) = b.get(&format!("/api/v1/messages/{pid}/t")).await;
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_kept("message by address", &m["payload"]).await;
    // A trace of that message.
    let (s, v) = b
        .post(
            "/api/v1/traces",
            &json!({"transactionId": "t", "partitionId": pid, "consumerGroup": null,
                    "eventType": "info", "data": payload(), "traceNames": ["num"]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (_, v) = b.get(&format!("/api/v1/traces/{pid}/t")).await;
    assert_kept("trace", &v["traces"][0]["data"]).await;
}

#[tokio::test]
async fn kv_and_its_rider_keep_numbers_exactly() {
    let b = start().await;
    let ns = unique("num-kv");
    let (s, v) = b
        .post(
            "/api/v1/kv",
            &json!({"operations": [{"op": "put", "ns": ns, "key": "k", "value": payload(),
                                    "ttlSeconds": 300}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_kept("kv put", &kv_get(&b, &ns, "k").await).await;
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [],
                    "kv": [{"op": "put", "ns": ns, "key": "rider", "value": payload(),
                            "ttlSeconds": 300}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_kept("kv rider", &kv_get(&b, &ns, "rider").await).await;
}

#[tokio::test]
async fn timers_and_their_rider_keep_numbers_exactly() {
    let b = start().await;
    let q = unique("num-tmr");
    let schedule = |key: &str, delay: i64| json!({"op": "schedule", "queue": q, "timerKey": key, "payload": b64(PAYLOAD), "delayMs": delay});
    let (s, v) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [schedule("later", 3_600_000)]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [], "timers": [schedule("rider", 3_600_000)]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    for key in ["later", "rider"] {
        let (_, peek) = b.get(&format!("/api/v1/timers/{q}/{key}")).await;
        let text = base64::engine::general_purpose::STANDARD
            .decode(peek["payload"].as_str().unwrap())
            .unwrap();
        let stored: Value = serde_json::from_slice(&text).unwrap();
        assert_kept(&format!("timer {key} (peek)"), &stored).await;
    }
    // One that falls due now: the delivered message.
    let (s, v) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [schedule("now", 0)]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_kept(
        "timer delivery",
        &data_of(&b, &q, Duration::from_secs(10)).await,
    )
    .await;
}

#[tokio::test]
async fn stream_state_and_sinks_keep_numbers_exactly() {
    let b = start().await;
    let source = unique("num-src");
    let sink = unique("num-sink");
    b.push(json!([{"queue": source, "transactionId": "m0", "payload": 1}]))
        .await;
    let (s, v) = b
        .post(
            "/streams/v1/queries",
            &json!({"name": unique("num-q"), "source_queue": source, "sink_queue": sink,
                    "config_hash": "h"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let query_id = v["query_id"].as_str().unwrap().to_string();
    let group = format!("streams.{query_id}");
    let pop = b
        .pop(
            &source,
            &format!("batch=1&wait=false&consumerGroup={group}"),
        )
        .await
        .unwrap();
    let m = &pop["messages"][0];
    let (s, v) = b
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": query_id, "partition_id": m["partitionId"],
                    "consumer_group": group,
                    "state_ops": [{"type": "upsert", "key": "acc", "value": payload()}],
                    "push_items": [{"queue": sink, "payload": payload()}],
                    "ack": {"transactionId": m["transactionId"], "leaseId": pop["leaseId"],
                            "status": "completed", "count": 1}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["success"], true, "{v}");
    let (s, v) = b
        .post(
            "/streams/v1/state/get",
            &json!({"query_id": query_id, "partition_id": m["partitionId"], "keys": ["acc"]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_kept("stream state", &v["rows"][0]["value"]).await;
    assert_kept(
        "stream sink",
        &data_of(&b, &sink, Duration::from_secs(5)).await,
    )
    .await;
}
