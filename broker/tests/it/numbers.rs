//! Exact numbers on every route that carries user JSON (docs/decisions.md, "Payloads and
//! names"): whatever the SQL path keeps, the broker keeps. A payload with a 30-digit
//! integer, 1e400, -0.0 and a long decimal is sent through each write path and read back
//! through the broker; each number must come back as its text was sent, or as PostgreSQL's
//! jsonb (numeric) writes that same value (1e400 in full, -0.0 as 0.0: a route that
//! stores jsonb), never rounded through a binary float (`1.2345678901234568e+29`).

use crate::common;
use common::text16;

use base64::Engine;
use common::{admin, leased_stream, start, start_with, unique, Broker};
use queen_log::frame::Frame;
use queen_log::segment::encode_segment;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The numbers, each as its own field so each is compared as text (the answers are read
/// as text too: a parsed serde_json Value writes `1e400` back as `1e+400`).
const PAYLOAD: &str = r#"{"big":123456789012345678901234567890,"huge":1e400,"negz":-0.0,"dec":0.1000000000000000055511151231257827,"neg":-98765432109876543210987654321.000001}"#;
const FIELDS: [&str; 5] = ["big", "huge", "negz", "dec", "neg"];

/// The number texts as sent.
const SENT: [&str; 5] = [
    "123456789012345678901234567890",
    "1e400",
    "-0.0",
    "0.1000000000000000055511151231257827",
    "-98765432109876543210987654321.000001",
];

/// A request body: `v` as JSON text with the placeholder string `"P"` replaced by
/// [`PAYLOAD`], as written (serializing a parsed Value would already rewrite `1e400` as
/// `1e+400`: the test sends and compares text, never a re-encoding).
fn body(v: Value) -> String {
    let text = v.to_string();
    assert!(text.contains(r#""P""#), "{text}");
    text.replace(r#""P""#, PAYLOAD)
}

/// Each field's text as PostgreSQL's jsonb writes it.
async fn jsonb_forms() -> Vec<String> {
    let row = admin()
        .await
        .query_one("SELECT $1::text::jsonb::text", &[&PAYLOAD])
        .await
        .unwrap();
    let text: String = row.get(0);
    FIELDS.iter().map(|f| number_after(&text, f)).collect()
}

/// The number token of the first `"field":` in `text` (any spacing).
fn number_after(text: &str, field: &str) -> String {
    let key = format!("\"{field}\"");
    let at = text
        .find(&key)
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    let rest = text[at + key.len()..].trim_start();
    let rest = rest.strip_prefix(':').expect("a colon").trim_start();
    rest.chars()
        .take_while(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
        .collect()
}

/// The answer `text` holds every number exactly: as its text was sent, or as jsonb
/// writes the same value.
async fn assert_kept(route: &str, text: &str) {
    for ((f, sent), jsonb) in FIELDS.iter().zip(SENT).zip(jsonb_forms().await) {
        let got = number_after(text, f);
        assert!(
            got == sent || got == jsonb,
            "{route}: {f} came back as {got}, sent {sent} (jsonb: {jsonb}); answer: {text}"
        );
    }
}

async fn raw(
    b: &Broker,
    method: reqwest::Method,
    path: &str,
    body: Option<String>,
) -> (StatusCode, String) {
    let mut r = b
        .http
        .request(method, format!("{}{path}", b.base))
        .header("content-type", "application/json");
    if let Some(body) = body {
        r = r.body(body);
    }
    let r = r.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn post(b: &Broker, path: &str, v: Value) -> (StatusCode, String) {
    raw(b, reqwest::Method::POST, path, Some(body(v))).await
}

async fn get(b: &Broker, path: &str) -> (StatusCode, String) {
    raw(b, reqwest::Method::GET, path, None).await
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The pop answer (text) of the one message `queue` holds (a fresh group, so earlier
/// reads do not matter), waiting up to `within` for it to arrive.
async fn data_of(b: &Broker, queue: &str, within: Duration) -> String {
    let until = Instant::now() + within;
    let group = unique("g");
    loop {
        let (s, text) = get(
            b,
            &format!("/api/v1/pop/queue/{queue}?batch=1&wait=false&consumerGroup={group}"),
        )
        .await;
        if s == StatusCode::OK {
            return text;
        }
        assert_eq!(s, StatusCode::NO_CONTENT, "{text}");
        assert!(Instant::now() < until, "{queue}: nothing arrived");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
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

/// The kv answer (text) of a get of (ns, key).
async fn kv_get(b: &Broker, ns: &str, key: &str) -> String {
    let (s, text) = raw(
        b,
        reqwest::Method::POST,
        "/api/v1/kv",
        Some(json!({"operations": [{"op": "get", "ns": ns, "key": key}]}).to_string()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert!(text.contains(r#""found":true"#), "{text}");
    text
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn every_push_path_keeps_numbers_exactly() {
    let b = start().await;
    let fused = start_with(|c| c.push_fusion = true).await;
    let wait = Duration::from_secs(5);
    // JSON push, and the same through push fusion.
    for (b, route) in [(&b, "push"), (&fused, "push (fused)")] {
        let q = unique("num-push");
        let (s, text) = post(
            b,
            "/api/v1/push",
            json!({"items": [{"queue": q, "payload": "P"}]}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{text}");
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
    let (s, text) = post(
        &b,
        "/api/v1/ephemeral/push",
        json!({"queue": q, "messages": [{"payload": "P"}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let (s, text) = get(&b, &format!("/api/v1/ephemeral/pop?queue={q}&batch=1")).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_kept("ephemeral push", &text).await;
    // A transaction's push.
    let q = unique("num-txn");
    let (s, text) = post(
        &b,
        "/api/v1/transaction",
        json!({"operations": [{"type": "push", "items": [
            {"queue": q, "transactionId": "t", "payload": "P"}]}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let text = data_of(&b, &q, wait).await;
    assert_kept("transaction push", &text).await;
    // The message by its address (the extension's JSON answer, read by the broker).
    let pop = parse(&text);
    let pid = pop["messages"][0]["partitionId"].as_str().unwrap();
    let (s, text) = get(&b, &format!("/api/v1/messages/{pid}/t")).await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_kept("message by address", &text).await;
    // A trace of that message.
    let (s, text) = post(
        &b,
        "/api/v1/traces",
        json!({"transactionId": "t", "partitionId": pid, "consumerGroup": null,
               "eventType": "info", "data": "P", "traceNames": ["num"]}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{text}");
    let (_, text) = get(&b, &format!("/api/v1/traces/{pid}/t")).await;
    assert_kept("trace", &text).await;
}

#[tokio::test]
async fn kv_and_its_rider_keep_numbers_exactly() {
    let b = start().await;
    let ns = unique("num-kv");
    let (s, text) = post(
        &b,
        "/api/v1/kv",
        json!({"operations": [{"op": "put", "ns": ns, "key": "k", "value": "P",
                               "ttlSeconds": 300}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_kept("kv put", &kv_get(&b, &ns, "k").await).await;
    let (s, text) = post(
        &b,
        "/api/v1/transaction",
        json!({"operations": [],
               "kv": [{"op": "put", "ns": ns, "key": "rider", "value": "P",
                       "ttlSeconds": 300}]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_kept("kv rider", &kv_get(&b, &ns, "rider").await).await;
}

#[tokio::test]
async fn timers_and_their_rider_keep_numbers_exactly() {
    let b = start().await;
    let q = unique("num-tmr");
    let schedule = |key: &str, delay: i64| {
        json!({"op": "schedule", "queue": q, "timerKey": key, "payload": b64(PAYLOAD),
               "delayMs": delay})
    };
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
        assert_kept(
            &format!("timer {key} (peek)"),
            std::str::from_utf8(&text).unwrap(),
        )
        .await;
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
    let sink = unique("num-sink");
    let st = leased_stream(&b, "num").await;
    let (s, text) = post(
        &b,
        "/streams/v1/cycle",
        st.cycle(
            json!({"state_ops": [{"type": "upsert", "key": "acc", "value": "P"}],
                        "push_items": [{"queue": sink, "payload": "P"}]}),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_eq!(parse(&text)["success"], true, "{text}");
    let (s, text) = raw(
        &b,
        reqwest::Method::POST,
        "/streams/v1/state/get",
        Some(
            json!({"query_id": st.query_id, "partition_id": st.partition_id(), "keys": ["acc"]})
                .to_string(),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    assert_kept("stream state", &text).await;
    assert_kept(
        "stream sink",
        &data_of(&b, &sink, Duration::from_secs(5)).await,
    )
    .await;
}
