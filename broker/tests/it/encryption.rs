//! `encryptionEnabled` (docs/decisions.md, "Payload encryption"): payloads sealed at rest
//! with `QUEEN_ENCRYPTION_KEY` in Queen's envelope, opened for this broker's readers (pop,
//! DLQ, message by address), refused where they cannot be honoured (configure without a
//! key, a push through a broker without one, a plaintext frame from psql), and served as
//! the envelope, counted, where they cannot be opened. Only the broker seals: no request
//! can say its payload is sealed already, and a broker without the key refuses every write
//! into an encrypting queue with 503 `encryption_key_missing` (docs/security.md).

use crate::common;

use base64::Engine;
use common::{
    acks_for, admin, leased_stream, metric, metrics, snapshot, start, start_with, unique, Broker,
};
use queen_broker::config::EncryptionKey;
use queen_log::encryption::{is_envelope, parse_key, Cipher, Envelope};
use queen_log::segment::decode_segment;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const KEY: &str = "8f3c1d2e4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
const OTHER_KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

async fn with_key(hex: &str) -> Broker {
    let key = parse_key(hex).unwrap();
    start_with(|c| c.encryption_key = Some(EncryptionKey(key))).await
}

/// The payloads of `queue` as the database holds them (its segments decoded here), oldest
/// first: (payload JSON text, whether the frame is flagged encrypted). Plain reads by
/// partition id, so the same on a Citus cluster.
async fn stored(queue: &str) -> Vec<(String, bool)> {
    let db = admin().await;
    let pids: Vec<Uuid> = db
        .query(
            "SELECT p.id FROM queen.partition_names p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1 ORDER BY p.name",
            &[&queue],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = Vec::new();
    for pid in pids {
        for r in db
            .query(
                "SELECT blob FROM queen.log_segments WHERE partition_id = $1 ORDER BY base_offset",
                &[&pid],
            )
            .await
            .unwrap()
        {
            for f in decode_segment(r.get(0)).unwrap() {
                let text = String::from_utf8(f.payload).unwrap();
                out.push((
                    if text.is_empty() { "null".into() } else { text },
                    f.encrypted,
                ));
            }
        }
    }
    out
}

#[tokio::test]
async fn an_encrypted_queue_stores_queens_envelope_and_pops_plaintext() {
    common::exclusive().await;
    let b = with_key(KEY).await;
    let q = unique("enc");
    let (s, v) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"encryptionEnabled": true}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, info) = b.get(&format!("/api/v1/resources/queues/{q}")).await;
    assert_eq!(
        info["options"]["encryptionEnabled"], true,
        "GET says what is in force: {info}"
    );
    // A 30-digit integer survives: the plaintext is the JSON text as written.
    let raw = r#"{"items": [{"queue":"QQ","transactionId":"a","payload":{"n":123456789012345678901234567890,"s":"é"}},
                  {"queue":"QQ","transactionId":"b"}]}"#
        .replace("QQ", &q);
    let r = b
        .http
        .post(format!("{}/api/v1/push", b.base))
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().await.unwrap()
    );
    let at_rest = stored(&q).await;
    assert_eq!(at_rest.len(), 2, "{at_rest:?}");
    for (text, flagged) in &at_rest {
        assert!(flagged, "frame flag 4 is set");
        assert!(
            is_envelope(text.as_bytes()),
            "stored as Queen's envelope: {text}"
        );
        assert!(
            !text.contains("123456789012345678901234567890"),
            "no plaintext at rest"
        );
    }
    // The stored envelope is what Queen's server reads: AES-256-GCM, 16-byte IV, this key.
    let opened = Cipher::new(&parse_key(KEY).unwrap())
        .open(at_rest[0].0.as_bytes())
        .unwrap();
    assert_eq!(opened, r#"{"n":123456789012345678901234567890,"s":"é"}"#);
    // The broker's pop opens it, byte for byte.
    let r = b
        .http
        .get(format!("{}/api/v1/pop/queue/{q}?batch=10", b.base))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(
        text.contains(r#""data":{"n":123456789012345678901234567890,"s":"é"}"#),
        "{text}"
    );
    let pop: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        pop["messages"][1]["data"],
        Value::Null,
        "an absent payload is null"
    );
    let ms = metrics(&b).await;
    assert!(metric(&ms, "queen_payloads_sealed_total") >= 2.0);
    assert!(metric(&ms, "queen_payloads_opened_total") >= 2.0);
}

#[tokio::test]
async fn configure_without_a_key_is_refused_and_changes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let q = unique("enc-nokey");
    let before = snapshot(&db).await;
    let (s, v) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"encryptionEnabled": true, "leaseTime": 5}}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["field"], "options.encryptionEnabled", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_ENCRYPTION_KEY"),
        "{v}"
    );
    assert_eq!(snapshot(&db).await, before, "nothing was written");
    // false is a plain queue, with or without a key.
    let (s, _) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"encryptionEnabled": false}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
}

#[tokio::test]
async fn a_broker_without_the_key_neither_writes_plaintext_nor_serves_garbage() {
    common::exclusive().await;
    let keyed = with_key(KEY).await;
    let keyless = start().await;
    let other = with_key(OTHER_KEY).await;
    let db = admin().await;
    let q = unique("enc-2");
    keyed
        .configure(&q, json!({"encryptionEnabled": true}))
        .await;
    keyed
        .push(json!([{"queue": q, "transactionId": "x", "payload": {"secret": 1}}]))
        .await;
    // Push through a broker that cannot seal: refused before the database, nothing written.
    let before = snapshot(&db).await;
    let (s, v) = keyless
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": q, "transactionId": "y", "payload": 2}]}),
        )
        .await;
    assert_eq!(
        s,
        StatusCode::SERVICE_UNAVAILABLE,
        "a refusal, not a failure: {v}"
    );
    assert_eq!(v["code"], "encryption_key_missing", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_ENCRYPTION_KEY"),
        "{v}"
    );
    assert_eq!(snapshot(&db).await, before);
    // A broker that cannot open it serves the envelope (which says what it is), counted.
    for (reader, name) in [(&keyless, "no key"), (&other, "another key")] {
        let pop = reader
            .pop(&q, "batch=1&consumerGroup=peek&autoAck=true")
            .await
            .expect("delivered");
        let data = serde_json::to_string(&pop["messages"][0]["data"]).unwrap();
        assert!(is_envelope(data.as_bytes()), "{name}: {data}");
        let ms = metrics(reader).await;
        assert!(
            metric(&ms, "queen_payloads_unopened_total") >= 1.0,
            "{name}"
        );
        // Back, so the other reader sees it too.
        reader
            .post(
                &format!("/api/v1/consumer-groups/peek/queues/{q}/seek"),
                &json!({"timestamp": "2000-01-01T00:00:00Z"}),
            )
            .await;
    }
    let pop = keyed.pop(&q, "batch=1").await.unwrap();
    assert_eq!(pop["messages"][0]["data"], json!({"secret": 1}));
}

#[tokio::test]
async fn psql_cannot_push_plaintext_into_an_encrypted_queue_and_sees_the_envelope() {
    common::exclusive().await;
    let b = with_key(KEY).await;
    let db = admin().await;
    let q = unique("enc-sql");
    b.configure(&q, json!({"encryptionEnabled": true})).await;
    b.push(json!([{"queue": q, "transactionId": "s1", "payload": {"k": "v"}}]))
        .await;
    let before = snapshot(&db).await;
    let e = db
        .query("SELECT queen.push($1, '[{\"k\": 2}]'::jsonb)", &[&q])
        .await
        .unwrap_err();
    let dbe = e.as_db_error().unwrap();
    assert_eq!(dbe.code().code(), "55000", "{dbe}");
    assert!(dbe.message().contains("encrypts payloads"), "{dbe}");
    assert_eq!(snapshot(&db).await, before, "nothing was written");
    // queen.pop in psql: the payload is the envelope, never a decoded-looking value.
    let row = db
        .query_one(
            "SELECT r_payload FROM queen.pop($1, NULL, 'psql', 1, 30, true)",
            &[&q],
        )
        .await
        .unwrap();
    let payload: Value = row.get(0);
    let env: Envelope = serde_json::from_value(payload).expect("the envelope");
    assert!(!env.encrypted.is_empty());
}

#[tokio::test]
async fn transactions_dlq_and_browsing_read_plaintext_too() {
    common::exclusive().await;
    let b = with_key(KEY).await;
    let q = unique("enc-tx");
    b.configure(&q, json!({"encryptionEnabled": true, "retryLimit": 0}))
        .await;
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [
                {"queue": q, "transactionId": "t1", "payload": {"via": "txn"}}]}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(stored(&q)
        .await
        .iter()
        .all(|(t, f)| *f && is_envelope(t.as_bytes())));
    let pop = b.pop(&q, "batch=1").await.unwrap();
    assert_eq!(pop["messages"][0]["data"], json!({"via": "txn"}));
    let pid = pop["partitionId"].as_str().unwrap().to_string();
    let (_, v) = b.ack_batch(acks_for(&pop, "failed", Some("poison"))).await;
    assert_eq!(v[0]["dlq"], true, "{v}");
    let (_, dlq) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(dlq["messages"][0]["data"], json!({"via": "txn"}), "{dlq}");
    let (s, m) = b.get(&format!("/api/v1/messages/{pid}/t1")).await;
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!(m["isEncrypted"], true);
    assert_eq!(m["payload"], json!({"via": "txn"}), "{m}");
}

#[tokio::test]
async fn turning_encryption_off_keeps_old_messages_readable_and_new_ones_plain() {
    common::exclusive().await;
    let b = with_key(KEY).await;
    let q = unique("enc-off");
    b.configure(&q, json!({"encryptionEnabled": true})).await;
    b.push(json!([{"queue": q, "transactionId": "old", "payload": "sealed"}]))
        .await;
    b.configure(&q, json!({"encryptionEnabled": false})).await;
    b.push(json!([{"queue": q, "transactionId": "new", "payload": "clear"}]))
        .await;
    let at_rest = stored(&q).await;
    assert!(at_rest[0].1 && is_envelope(at_rest[0].0.as_bytes()));
    assert_eq!(at_rest[1], ("\"clear\"".to_string(), false));
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let data: Vec<&Value> = pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["data"])
        .collect();
    assert_eq!(data, [&json!("sealed"), &json!("clear")]);
}

/// A broker remembers its push lookups for a while (engine/lookups.rs): a queue another
/// broker turned encrypting meanwhile refuses the plaintext frame (nothing written),
/// and the push looks up afresh, seals and is answered 201, sealed at rest.
#[tokio::test]
async fn a_queue_turned_encrypting_by_another_broker_gets_sealed_frames() {
    common::exclusive().await;
    let (e, e2) = (with_key(KEY).await, with_key(KEY).await);
    let q = unique("enc-elsewhere");
    e.configure(&q, json!({})).await;
    e.push(json!([{"queue": q, "transactionId": "t1", "payload": "clear"}]))
        .await;
    e.push(json!([{"queue": q, "transactionId": "t2", "payload": "clear too"}]))
        .await; // the lookup remembered: plaintext
    e2.configure(&q, json!({"encryptionEnabled": true})).await;
    let hits = metric(&metrics(&e).await, "queen_push_lookup_cache_hits_total");
    let r = e
        .push(json!([{"queue": q, "transactionId": "t3", "payload": "sealed"}]))
        .await;
    assert_eq!(r[0]["status"], "queued", "{r:?}");
    assert!(metric(&metrics(&e).await, "queen_push_lookup_cache_hits_total") > hits);
    let at_rest = stored(&q).await;
    assert_eq!(at_rest.len(), 3);
    assert!(!at_rest[1].1 && at_rest[2].1 && is_envelope(at_rest[2].0.as_bytes()));
    let pop = e.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pop["messages"][2]["data"], json!("sealed"));
}

/// A cycle body over a fresh leased stream, with `items` as its sink pushes.
async fn one_cycle(b: &Broker) -> impl Fn(Value) -> Value {
    let st = leased_stream(b, "enc").await;
    move |items: Value| st.cycle(json!({ "push_items": items }))
}

/// The forgery of a sealed payload by a stream sink: `is_encrypted` is the broker's word
/// to the extension; a client that sends it is refused naming it, on a keyed broker and
/// on one without the key, and nothing is written. An envelope-shaped payload without
/// the flag is the client's data: sealed like any other and read back as sent.
#[tokio::test]
async fn a_client_cannot_say_its_payload_is_sealed() {
    common::exclusive().await;
    let keyed = with_key(KEY).await;
    let keyless = start().await;
    let db = admin().await;
    let q = unique("enc-forge");
    keyed
        .configure(&q, json!({"encryptionEnabled": true}))
        .await;
    let clear = base64::engine::general_purpose::STANDARD.encode(r#"{"clear":"text"}"#);
    let fake = json!({"encrypted": clear, "iv": "AAAAAAAAAAAAAAAA", "authTag": "AAAAAAAAAAAAAAAAAAAAAA=="});
    for (b, name) in [(&keyed, "keyed"), (&keyless, "keyless")] {
        let body = one_cycle(&keyed).await;
        for flag in [json!(true), json!(false)] {
            let before = snapshot(&db).await;
            let forged = body(json!([{"queue": q, "payload": fake, "is_encrypted": flag}]));
            let (s, v) = b.post("/streams/v1/cycle", &forged).await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{name} {flag}: {v}");
            assert_eq!(v["field"], "push_items[0].is_encrypted", "{name}: {v}");
            assert_eq!(snapshot(&db).await, before, "{name}: nothing written");
        }
    }
    // Without the flag the same payload is the client's data, sealed by the broker.
    let body = one_cycle(&keyed).await;
    let (s, v) = keyed
        .post(
            "/streams/v1/cycle",
            &body(json!([{"queue": q, "payload": fake}])),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["success"], true, "{v}");
    let at_rest = stored(&q).await;
    assert_eq!(at_rest.len(), 1);
    let (text, flagged) = &at_rest[0];
    assert!(*flagged);
    let opened = Cipher::new(&parse_key(KEY).unwrap())
        .open(text.as_bytes())
        .expect("sealed with this broker's key");
    assert_eq!(serde_json::from_str::<Value>(&opened).unwrap(), fake);
    let pop = keyed.pop(&q, "batch=1").await.unwrap();
    assert_eq!(pop["messages"][0]["data"], fake, "read back as sent");
}

/// A broker without the key refuses every path that writes into a queue that encrypts:
/// push, transaction, stream sink, timers; 503 `encryption_key_missing` with
/// `Retry-After` (a broker that holds the key takes the same request), never a 500, and
/// nothing written. (The binary push: tests/binary_push.rs.)
#[tokio::test]
async fn a_broker_without_the_key_refuses_every_write_path_with_a_503() {
    common::exclusive().await;
    let keyed = with_key(KEY).await;
    let keyless = start().await;
    let db = admin().await;
    let q = unique("enc-nokey");
    keyed
        .configure(&q, json!({"encryptionEnabled": true}))
        .await;
    let cycle = one_cycle(&keyed).await;
    let b64 = base64::engine::general_purpose::STANDARD.encode(r#"{"t":1}"#);
    let paths: Vec<(&str, &str, Value)> = vec![
        (
            "push",
            "/api/v1/push",
            json!({"items": [{"queue": q, "transactionId": "p", "payload": 1}]}),
        ),
        (
            "transaction",
            "/api/v1/transaction",
            json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": 2}]}]}),
        ),
        (
            "stream sink",
            "/streams/v1/cycle",
            cycle(json!([{"queue": q, "payload": 3}])),
        ),
        (
            "timers",
            "/api/v1/timers",
            json!({"operations": [{"op": "schedule", "queue": q, "timerKey": "k",
                                   "payload": b64, "delayMs": 0}]}),
        ),
    ];
    for (name, path, body) in paths {
        let before = snapshot(&db).await;
        let r = keyless
            .http
            .post(format!("{}{path}", keyless.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let s = r.status();
        assert!(r.headers().contains_key("retry-after"), "{name}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{name}: {v}");
        assert_eq!(v["code"], "encryption_key_missing", "{name}: {v}");
        assert!(v["error"].as_str().unwrap().contains(&q), "{name}: {v}");
        assert_eq!(snapshot(&db).await, before, "{name}: nothing written");
        // The same request through the broker with the key is sealed and stored.
        let (s, v) = keyed.post(path, &body).await;
        assert!(s.is_success(), "{name} keyed: {v}");
    }
    assert!(stored(&q)
        .await
        .iter()
        .all(|(t, f)| *f && is_envelope(t.as_bytes())));
}
