//! What PostgreSQL cannot hold never gets in, and what an older version let in still
//! leaves (docs/decisions.md, "Payloads and names"; docs/http-api.md, "Payloads
//! PostgreSQL cannot hold"). A `\u0000` in a JSON string, a lone surrogate escape or a
//! number outside `numeric` is a 400 on every write path (push, transaction, binary push,
//! timers, kv, stream sinks) and writes nothing; a binary payload that is not UTF-8 is
//! refused like the JSON push refuses it. A segment already holding such a frame reads
//! message by message (that one as a JSON string of its text) and the message can be
//! failed into the DLQ: it is not redelivered forever.

use crate::common;

use common::{admin, start, unique, Broker};
use queen_log::frame::Frame;
use queen_log::segment::{decode_segment, encode_segment};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Payload JSON texts PostgreSQL's jsonb refuses.
const POISON: &[&str] = &[
    r#"{"payload":"a\u0000b"}"#,
    r#"{"k\u0000":1}"#,
    r#"[{"a":["x","\u0000"]}]"#,
    r#""\ud800""#,
    r#"{"n":1e200000}"#,
];

/// Messages stored in the queue's partitions (segments' frames counted by offsets).
async fn stored(q: &str) -> i64 {
    admin()
        .await
        .query_one(
            "SELECT COALESCE(sum(s.end_offset - s.base_offset + 1), 0)::bigint
               FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0)
}

async fn post_text(b: &Broker, path: &str, body: String) -> (StatusCode, Value) {
    b.post_raw(path, Box::leak(body.into_boxed_str())).await
}

async fn post_bytes(b: &Broker, path: &str, body: Vec<u8>) -> (StatusCode, String) {
    let r = b
        .http
        .post(format!("{}{path}", b.base))
        .header("content-type", "application/x-queen-push")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

#[tokio::test]
async fn json_writes_of_what_postgres_cannot_hold_are_400_and_write_nothing() {
    let b = start().await;
    let q = unique("unstorable");
    for p in POISON {
        let (s, v) = post_text(
            &b,
            "/api/v1/push",
            format!(
                r#"{{"items":[{{"queue":"{q}","payload":1}},{{"queue":"{q}","payload":{p}}}]}}"#
            ),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "push {p}: {v}");
        assert!(v.to_string().contains("items[1]"), "push {p}: {v}");
        let (s, v) = post_text(
            &b,
            "/api/v1/transaction",
            format!(
                r#"{{"operations":[{{"type":"push","items":[{{"queue":"{q}","payload":{p}}}]}}]}}"#
            ),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "transaction {p}: {v}");
    }
    // A transactionId PostgreSQL text cannot hold.
    let (s, v) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "transactionId": "t\u{0}", "payload": 1}]}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(stored(&q).await, 0, "nothing of a refused push is stored");

    // Timers: the payload travels as base64 of its JSON text.
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    for p in POISON {
        let (s, v) = b
            .post(
                "/api/v1/timers",
                &json!({"operations": [{"op": "schedule", "queue": q, "timerKey": "k",
                                         "payload": b64(p), "delayMs": 0}]}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "timer {p}: {v}");
    }
    let timers: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM queen.timers t JOIN queen.queues q ON q.id = t.queue_id
              WHERE q.name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(timers, 0);

    // kv: the value is jsonb.
    let ns = unique("unstorable-kv");
    let (s, v) = b
        .post(
            "/api/v1/kv",
            &json!({"operations": [{"op": "put", "ns": ns, "key": "a", "value": {"s": "a\u{0}b"}}]}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "kv: {v}");
    let rows: i64 = admin()
        .await
        .query_one("SELECT count(*) FROM queen.kv WHERE ns = $1", &[&ns])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);

    // A stream cycle's sink item.
    let source = unique("unstorable-src");
    let sink = unique("unstorable-sink");
    b.push(json!([{"queue": source, "transactionId": "m", "payload": 1}]))
        .await;
    let (s, v) = b
        .post(
            "/streams/v1/queries",
            &json!({"name": unique("q"), "source_queue": source, "sink_queue": sink,
                    "config_hash": "h1"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let query_id = v["query_id"].as_str().unwrap().to_string();
    let group = format!("streams.{query_id}");
    let pop = b
        .pop(
            &source,
            &format!("batch=10&wait=false&consumerGroup={group}"),
        )
        .await
        .unwrap();
    let (s, v) = b
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": query_id, "partition_id": pop["partitionId"],
                    "consumer_group": group, "state_ops": [],
                    "push_items": [{"queue": sink, "partition": "Default", "payload": {"s": "a\u{0}b"}}],
                    "ack": {"transactionId": "m", "leaseId": pop["leaseId"],
                            "status": "completed", "count": 1},
                    "release_lease": true}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "cycle: {v}");
    assert!(v.to_string().contains("push_items[0]"), "{v}");
    // A state value: the same.
    let (s, v) = b
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": query_id, "partition_id": pop["partitionId"],
                    "consumer_group": group,
                    "state_ops": [{"type": "upsert", "key": "k", "value": {"s": "a\u{0}b"}}],
                    "ack": {"transactionId": "m", "leaseId": pop["leaseId"],
                            "status": "completed", "count": 1},
                    "release_lease": true}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "cycle: {v}");
    assert!(v.to_string().contains("state_ops[0].value"), "{v}");
    assert_eq!(stored(&sink).await, 0, "no sink message");
}

/// `QPB1` with flag 4 (each item carries its transactionId): one group of one item.
fn plain_body(q: &str, txn: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = b"QPB1".to_vec();
    out.push(4);
    out.extend(1u32.to_le_bytes());
    for s in [q, "Default"] {
        out.extend((s.len() as u16).to_le_bytes());
        out.extend(s.as_bytes());
    }
    out.extend(1u32.to_le_bytes());
    out.extend((txn.len() as u16).to_le_bytes());
    out.extend(txn.as_bytes());
    out.extend((payload.len() as u32).to_le_bytes());
    out.extend(payload);
    out
}

/// `QPB1` with flag 8: one group of frames as the database stores them.
fn framed_body(q: &str, frames: &[Frame]) -> Vec<u8> {
    let mut out = b"QPB1".to_vec();
    out.push(8);
    out.extend(1u32.to_le_bytes());
    for s in [q, "Default"] {
        out.extend((s.len() as u16).to_le_bytes());
        out.extend(s.as_bytes());
    }
    out.extend((frames.len() as u32).to_le_bytes());
    let z = encode_segment(frames).unwrap();
    out.extend((z.len() as u32).to_le_bytes());
    out.extend(z);
    out
}

#[tokio::test]
async fn a_binary_push_refuses_what_the_json_push_refuses() {
    let b = start().await;
    let q = unique("unstorable-bin");
    // Bytes ff fe inside quotes: not UTF-8; they used to be stored and read back as the
    // base64 string "Iv/+Ig==".
    let (s, v) = post_bytes(&b, "/api/v1/push", plain_body(&q, "t", b"\"\xff\xfe\"")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.contains("UTF-8"), "{v}");
    let (s, v) = post_bytes(&b, "/api/v1/push", plain_body(&q, "t", b"\xff\xfe")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    for p in POISON {
        let (s, v) = post_bytes(&b, "/api/v1/push", plain_body(&q, "t", p.as_bytes())).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "plain {p}: {v}");
        let (s, v) = post_bytes(
            &b,
            "/api/v1/push",
            framed_body(
                &q,
                &[
                    common::plain_frame("a", b"1"),
                    common::plain_frame("b", p.as_bytes()),
                ],
            ),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "framed {p}: {v}");
    }
    let (s, v) = post_bytes(&b, "/api/v1/push", plain_body(&q, "t\0", b"1")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = post_bytes(
        &b,
        "/api/v1/push",
        framed_body(&q, &[common::plain_frame("t\0", b"1")]),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(stored(&q).await, 0);
    // What does round-trip is still stored.
    let (s, v) = post_bytes(
        &b,
        "/api/v1/push",
        plain_body(&q, "t", "\"\u{e9}\"".as_bytes()),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let pop = b.pop(&q, "batch=1&wait=false").await.unwrap();
    assert_eq!(pop["messages"][0]["data"], "\u{e9}");
}

#[tokio::test]
async fn the_sql_push_refuses_a_frame_postgres_cannot_hold() {
    let db = admin().await;
    let q = unique("unstorable-sql");
    for (p, code) in [
        (POISON[0], "22P05"),
        (POISON[3], "22P05"),
        (POISON[4], "22003"),
    ] {
        let blob = encode_segment(&[common::plain_frame("t", p.as_bytes())]).unwrap();
        let e = db
            .execute(
                "SELECT queen.log_push_one_v1($1, 'Default', 1, queen.xxh3_128('t'), -1, $2)",
                &[&q, &blob],
            )
            .await
            .unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some(code), "{p}: {e:?}");
    }
    assert_eq!(stored(&q).await, 0);
}

/// A segment written before the check: the middle frame's payload is replaced, as the
/// superuser, by a payload jsonb cannot hold.
async fn poison_the_middle(db: &tokio_postgres::Client, pid: &str, payload: &str) {
    let blob: Vec<u8> = db
        .query_one(
            "SELECT blob FROM queen.log_segments WHERE partition_id = $1::text::uuid",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    let mut frames = decode_segment(&blob).unwrap();
    assert_eq!(frames.len(), 3);
    frames[1].payload = payload.as_bytes().to_vec();
    let blob = encode_segment(&frames).unwrap();
    db.execute(
        "UPDATE queen.log_segments SET blob = $2 WHERE partition_id = $1::text::uuid",
        &[&pid, &blob],
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn an_old_poison_message_reads_degraded_and_is_dead_lettered() {
    let b = start().await;
    let db = admin().await;
    let q = unique("old-poison");
    b.configure(&q, json!({"retryLimit": 0, "deadLetterQueue": true}))
        .await;
    let pushed = b
        .push(
            json!([{"queue": q, "transactionId": "a", "payload": {"n": 1}},
                     {"queue": q, "transactionId": "p", "payload": {"n": 2}},
                     {"queue": q, "transactionId": "c", "payload": {"n": 3}}]),
        )
        .await;
    let pid = pushed[0]["partition_id"].as_str().unwrap().to_string();
    let poison = POISON[0];
    poison_the_middle(&db, &pid, poison).await;

    // Reads by offset: every message of the range, the poison one as a JSON string of
    // what it holds.
    let (s, v) = b
        .post(
            "/api/v1/fetch",
            &json!({"entries": [{"queue": q, "partition": "Default", "offset": 0}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "fetch: {v}");
    let records = v["entries"][0]["records"].as_array().unwrap();
    let payloads: Vec<&Value> = records.iter().map(|r| &r["payload"]).collect();
    assert_eq!(
        payloads,
        [&json!({"n": 1}), &json!(poison), &json!({"n": 3})],
        "{v}"
    );
    // One message.
    let (s, v) = b.get(&format!("/api/v1/messages/{pid}/p")).await;
    assert_eq!(s, StatusCode::OK, "message: {v}");
    assert_eq!(v["payload"], json!(poison), "{v}");
    // psql's decode.
    let rows = db
        .query(
            "SELECT d.payload::text FROM queen.log_segments s, queen.decode_segment_v1(s.blob) d
              WHERE s.partition_id = $1::text::uuid ORDER BY d.frame_index",
            &[&pid],
        )
        .await
        .unwrap();
    let decoded: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(decoded[1], json!(poison).to_string());

    // Consumed one at a time: the poison message pops, fails and is dead-lettered.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let pop = b.pop(&q, "batch=1&wait=false").await.expect("a message");
        let m = &pop["messages"][0];
        seen.push((m["transactionId"].clone(), m["data"].clone()));
        let status = if m["transactionId"] == "p" {
            "failed"
        } else {
            "completed"
        };
        let (s, v) = b
            .ack_batch(common::acks_for(&pop, status, Some("poison")))
            .await;
        assert_eq!(s, StatusCode::OK, "ack {status}: {v}");
        assert_eq!(v[0]["success"], true, "{v}");
    }
    assert_eq!(
        seen,
        [
            (json!("a"), json!({"n": 1})),
            (json!("p"), json!(poison)),
            (json!("c"), json!({"n": 3}))
        ]
    );
    assert!(
        b.pop(&q, "batch=1&wait=false").await.is_none(),
        "never redelivered"
    );
    let (_, list) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(list["pagination"]["total"], 1, "{list}");
    assert_eq!(list["messages"][0]["transactionId"], "p");
    assert_eq!(list["messages"][0]["data"], json!(poison), "{list}");
}
