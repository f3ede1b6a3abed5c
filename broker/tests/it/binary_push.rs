//! The SDK's binary bodies over real HTTP (docs/http-api.md, "Binary bodies"): a `QPB1`
//! push lands exactly the records a JSON push of the same items lands, a framed group is
//! stored as the client compressed it (the broker compresses nothing), duplicates answer
//! as in JSON, a malformed body is a 400 that writes nothing, a queue that encrypts still
//! seals, and a `QTB1` transaction commits its head and its framed pushes together.

use crate::common;
use common::text16;

use common::{admin, start, start_with, unique, Broker};
use queen_broker::config::EncryptionKey;
use queen_log::encryption::parse_key;
use queen_log::frame::Frame;
use queen_log::segment::encode_segment;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const FLAG_ZSTD: u8 = 1;
const FLAG_COUNTS: u8 = 2;
const FLAG_TXN: u8 = 4;
const FLAG_FRAMES: u8 = 8;

/// One plain group: (queue, partition, [(transactionId, payload JSON)]).
type PlainGroup<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>);

/// A `QPB1` body of plain groups.
fn plain(flags: u8, groups: &[PlainGroup<'_>]) -> Vec<u8> {
    let mut body = (groups.len() as u32).to_le_bytes().to_vec();
    for (q, p, items) in groups {
        text16(&mut body, q);
        text16(&mut body, p);
        body.extend((items.len() as u32).to_le_bytes());
        for (txn, payload) in items {
            if flags & FLAG_TXN != 0 {
                text16(&mut body, txn);
            }
            body.extend((payload.len() as u32).to_le_bytes());
            body.extend(payload.as_bytes());
        }
    }
    let mut out = b"QPB1".to_vec();
    out.push(flags);
    if flags & FLAG_ZSTD != 0 {
        out.extend((body.len() as u32).to_le_bytes());
        out.extend(zstd::bulk::compress(&body, 1).unwrap());
    } else {
        out.extend(body);
    }
    out
}

fn frame(txn: &str, payload: &str) -> Frame {
    Frame {
        message_id: *Uuid::now_v7().as_bytes(),
        trace_id: None,
        transaction_id: txn.into(),
        producer_sub: None,
        encrypted: false,
        payload: payload.as_bytes().to_vec(),
    }
}

/// Framed groups as the SDK's `push_compression` writes them; returns each group's blob.
fn framed_groups(groups: &[(&str, &str, &[Frame])]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut out = (groups.len() as u32).to_le_bytes().to_vec();
    let mut blobs = Vec::new();
    for (q, p, frames) in groups {
        text16(&mut out, q);
        text16(&mut out, p);
        out.extend((frames.len() as u32).to_le_bytes());
        let z = encode_segment(frames).unwrap();
        out.extend((z.len() as u32).to_le_bytes());
        out.extend(&z);
        blobs.push(z);
    }
    (out, blobs)
}

fn framed(flags: u8, groups: &[(&str, &str, &[Frame])]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let (body, blobs) = framed_groups(groups);
    let mut out = b"QPB1".to_vec();
    out.push(FLAG_FRAMES | flags);
    out.extend(body);
    (out, blobs)
}

async fn send(b: &Broker, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let r = b
        .http
        .post(format!("{}{path}", b.base))
        .header("content-type", "application/x-queen-push")
        .body(body)
        .send()
        .await
        .expect("request");
    let s = r.status();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// The stored segment blobs of a queue's partition, oldest first.
async fn blobs_of(q: &str, p: &str) -> Vec<Vec<u8>> {
    admin()
        .await
        .query(
            "SELECT s.blob FROM queen.log_segments s
               JOIN queen.log_partitions p ON p.id = s.partition_id
               JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1 AND p.name = $2 ORDER BY s.base_offset",
            &[&q, &p],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn queue_exists(q: &str) -> bool {
    admin()
        .await
        .query_opt("SELECT 1 FROM queen.queues WHERE name = $1", &[&q])
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_binary_push_lands_what_the_json_push_lands() {
    let b = start().await;
    let (qb, qj) = (unique("bin"), unique("bin-json"));
    let big = r#"{"n":123456789012345678901234567890,"s":"é"}"#;
    let body = plain(
        FLAG_TXN,
        &[
            (&qb, "p1", vec![("t1", big), ("", "[1,2]")]),
            (&qb, "", vec![("t3", "null")]),
        ],
    );
    let (s, v) = send(&b, "/api/v1/push", body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 3);
    let j = b
        .push(json!([{"queue": qj, "partition": "p1", "payload": 1, "transactionId": "t1"}]))
        .await;
    let keys = |o: &Value| {
        let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(&items[0]),
        keys(&j[0]),
        "the same answer keys as a JSON push"
    );
    assert_eq!(items[0]["transaction_id"], "t1");
    assert_eq!(items[0]["status"], "queued");
    assert_eq!(
        items[1]["transaction_id"], items[1]["message_id"],
        "minted from the id"
    );
    assert_eq!(items[2]["index"], 2);

    let pop = b.pop(&qb, "batch=10&partitions=2").await.unwrap();
    let m = pop["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{pop}");
    let p1: Vec<&Value> = m.iter().filter(|m| m["partition"] == "p1").collect();
    assert_eq!(p1[0]["transactionId"], "t1");
    assert_eq!(p1[0]["id"], items[0]["message_id"]);
    let stored = queen_log::segment::decode_segment(&blobs_of(&qb, "p1").await[0]).unwrap();
    assert_eq!(
        stored[0].payload,
        big.as_bytes(),
        "the payload as sent, digits and all"
    );
    assert_eq!(p1[1]["data"], json!([1, 2]));
    let d: Vec<&Value> = m.iter().filter(|m| m["partition"] == "Default").collect();
    assert_eq!(d[0]["transactionId"], "t3");
    assert_eq!(d[0]["data"], Value::Null);
}

#[tokio::test]
async fn a_compressed_plain_body_and_the_counts_answer() {
    let b = start().await;
    let q = unique("bin-z");
    let items = vec![("a", "1"), ("b", "2"), ("a", "3")];
    let body = plain(FLAG_TXN | FLAG_ZSTD | FLAG_COUNTS, &[(&q, "p", items)]);
    let (s, v) = send(&b, "/api/v1/push", body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        v,
        json!({"count": 3, "queued": 2, "duplicate": 1, "error": 0})
    );
    let pop = b.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pop["messages"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_framed_group_is_stored_as_the_client_compressed_it() {
    let b = start().await;
    let q = unique("bin-f");
    let frames = [frame("f1", r#"{"k":1}"#), frame("f2", "2")];
    let (body, sent) = framed(0, &[(&q, "p", &frames)]);
    let (s, v) = send(&b, "/api/v1/push", body.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        v[0]["message_id"],
        Uuid::from_bytes(frames[0].message_id).to_string(),
        "the client's message id"
    );
    assert_eq!(v[1]["offset"], 1);
    assert_eq!(blobs_of(&q, "p").await, sent, "stored byte for byte");

    // The same body again: every message a duplicate of its original, nothing stored.
    let (s, v) = send(&b, "/api/v1/push", body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|i| i["status"] == "duplicate"),
        "{v}"
    );
    assert_eq!(blobs_of(&q, "p").await.len(), 1);

    // One old transactionId among new ones: the rest is encoded again and stored.
    let again = [frame("f2", "2"), frame("f3", "3")];
    let (body, sent) = framed(0, &[(&q, "p", &again)]);
    let (_, v) = send(&b, "/api/v1/push", body).await;
    assert_eq!(v[0]["status"], "duplicate", "{v}");
    assert_eq!(v[1]["status"], "queued", "{v}");
    assert_eq!(v[1]["offset"], 2);
    let stored = blobs_of(&q, "p").await;
    assert_eq!(stored.len(), 2);
    assert_ne!(
        stored[1], sent[0],
        "a changed group is not the client's bytes"
    );
    let pop = b.pop(&q, "batch=10").await.unwrap();
    let txns: Vec<&str> = pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["transactionId"].as_str().unwrap())
        .collect();
    assert_eq!(txns, ["f1", "f2", "f3"]);
}

#[tokio::test]
async fn a_malformed_binary_body_is_a_400_that_writes_nothing() {
    let b = start().await;
    let q = unique("bin-bad");
    let good = plain(0, &[(&q, "p", vec![("", "1")])]);
    let mut encrypted = frame("e", "1");
    encrypted.encrypted = true;
    let mut v4 = frame("v", "1");
    v4.message_id = *Uuid::new_v4().as_bytes();
    let mut trailing = good.clone();
    trailing.push(0);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() - 1].to_vec()),
        ("after the last group", trailing),
        ("not one JSON", plain(0, &[(&q, "p", vec![("", "{nope")])])),
        ("encrypted", framed(0, &[(&q, "p", &[encrypted])]).0),
        ("version-7", framed(0, &[(&q, "p", &[v4])]).0),
        ("unknown flags", {
            let mut f = good.clone();
            f[4] = 0x80;
            f
        }),
        ("zstd", {
            let mut z = plain(FLAG_ZSTD, &[(&q, "p", vec![("", "1")])]);
            z[9] ^= 0xff; // the zstd frame's magic
            z
        }),
    ];
    for (says, body) in cases {
        let (s, v) = send(&b, "/api/v1/push", body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{says}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(says), "{says}: {e}");
    }
    assert!(!queue_exists(&q).await, "a refused body creates nothing");
}

#[tokio::test]
async fn a_queue_that_encrypts_seals_a_framed_push() {
    let key = "8f3c1d2e4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
    let key = parse_key(key).unwrap();
    let b = start_with(|c| c.encryption_key = Some(EncryptionKey(key))).await;
    let q = unique("bin-enc");
    b.configure(&q, json!({"encryptionEnabled": true})).await;
    let (body, sent) = framed(0, &[(&q, "Default", &[frame("s1", r#"{"secret":1}"#)])]);
    let (s, v) = send(&b, "/api/v1/push", body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let stored = blobs_of(&q, "Default").await;
    assert_ne!(stored[0], sent[0], "sealed, so not the client's bytes");
    let frames = queen_log::segment::decode_segment(&stored[0]).unwrap();
    assert!(frames[0].encrypted);
    let pop = b.pop(&q, "").await.unwrap();
    assert_eq!(pop["messages"][0]["data"], json!({"secret": 1}));
}

/// Only the broker seals (docs/security.md): a broker without the key refuses a binary
/// push into a queue that encrypts, plain or framed, with 503 `encryption_key_missing`
/// (never a 500), and writes nothing; a frame flagged encrypted by the client is a 400
/// (a_malformed_binary_body_is_a_400_that_writes_nothing).
#[tokio::test]
async fn a_broker_without_the_key_refuses_a_binary_push_into_a_queue_that_encrypts() {
    let key = "8f3c1d2e4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
    let key = parse_key(key).unwrap();
    let keyed = start_with(|c| c.encryption_key = Some(EncryptionKey(key))).await;
    let keyless = start().await;
    let q = unique("bin-nokey");
    keyed
        .configure(&q, json!({"encryptionEnabled": true}))
        .await;
    let bodies = [
        (
            "plain",
            plain(FLAG_TXN, &[(&q, "Default", vec![("t1", "1")])]),
        ),
        (
            "framed",
            framed(0, &[(&q, "Default", &[frame("t2", r#"{"s":2}"#)])]).0,
        ),
    ];
    for (name, body) in bodies {
        let (s, v) = send(&keyless, "/api/v1/push", body).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{name}: {v}");
        assert_eq!(v["code"], "encryption_key_missing", "{name}: {v}");
    }
    assert!(blobs_of(&q, "Default").await.is_empty(), "nothing written");
}

/// `QTB1`: the JSON head (here an ack) and the framed pushes, one transaction.
fn txn_body(flags: u8, head: &Value, groups: &[(&str, &str, &[Frame])]) -> Vec<u8> {
    let head = serde_json::to_vec(head).unwrap();
    let mut out = b"QTB1".to_vec();
    out.push(flags);
    out.extend((head.len() as u32).to_le_bytes());
    out.extend(&head);
    out.extend(framed_groups(groups).0);
    out
}

#[tokio::test]
async fn a_binary_transaction_commits_its_head_and_its_pushes_together() {
    let b = start().await;
    let (src, dst) = (unique("btx-src"), unique("btx-dst"));
    b.push(json!([{"queue": src, "payload": 1, "transactionId": "in-1"}]))
        .await;
    let pop = b.pop(&src, "").await.unwrap();
    let m = &pop["messages"][0];
    let head = json!({"operations": [
        {"type": "ack", "transactionId": "in-1", "partitionId": m["partitionId"],
         "leaseId": pop["leaseId"]}]});
    let out = [frame("o1", r#"{"out":1}"#), frame("o2", r#"{"out":2}"#)];
    let (s, v) = send(
        &b,
        "/api/v1/transaction",
        txn_body(0, &head, &[(&dst, "Default", &out)]),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["success"], true, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r[0]["type"], "ack", "the head's operations come first");
    assert_eq!(r[1]["type"], "push");
    assert_eq!(r[1]["index"], 1);
    assert_eq!(r[2]["transactionId"], "o2");
    assert!(b.pop(&src, "").await.is_none(), "acked in the transaction");
    let got = b.pop(&dst, "batch=10").await.unwrap();
    assert_eq!(got["messages"][1]["data"], json!({"out": 2}));

    // Flag 2: counted. A refused head (an ack of a lease that is gone) writes nothing.
    let more = [frame("o3", "3")];
    let (s, v) = send(
        &b,
        "/api/v1/transaction",
        txn_body(
            FLAG_COUNTS,
            &json!({"operations": []}),
            &[(&dst, "Default", &more)],
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["pushed"].clone(), v["acked"].clone()),
        (json!(1), json!(0)),
        "{v}"
    );
    let gone = [frame("o4", "4")];
    let (_, v) = send(
        &b,
        "/api/v1/transaction",
        txn_body(0, &head, &[(&dst, "Default", &gone)]),
    )
    .await;
    assert_eq!(v["success"], false, "{v}");
    let stored = blobs_of(&dst, "Default").await;
    assert_eq!(stored.len(), 2, "o1+o2, then o3; o4 rolled back");
    let (s, v) = send(
        &b,
        "/api/v1/transaction",
        b"QTB1\x00\x05\x00\x00\x00{".to_vec(),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
}

/// Producer identity (docs/security.md, "Producer identity"): with authentication on, a
/// framed group is not stored as the client compressed it but encoded again with the
/// token's `sub` on every frame, as a JSON push is stamped.
#[tokio::test]
async fn with_authentication_framed_groups_carry_the_tokens_subject() {
    const SECRET: &str = "binary-psub-secret";
    let b = start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await;
    let claims = json!({"tenant": Uuid::new_v4(), "role": "admin", "sub": "bin-producer"});
    let alice = b.with_token(&queen_broker::http::auth::sign(SECRET.as_bytes(), &claims));
    let q = unique("bin-psub");
    let frames = [frame("a", r#"{"n":1}"#), frame("b", r#"{"n":2}"#)];
    let (body, sent) = framed(0, &[(&q, "Default", &frames)]);
    let (s, v) = send(&alice, "/api/v1/push", body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let blobs = blobs_of(&q, "Default").await;
    assert_eq!(blobs.len(), 1);
    assert_ne!(blobs[0], sent[0], "encoded again, with the subject");
    let stored = queen_log::segment::decode_segment(&blobs[0]).unwrap();
    assert_eq!(
        stored
            .iter()
            .map(|f| (f.transaction_id.as_str(), f.producer_sub.as_deref()))
            .collect::<Vec<_>>(),
        vec![("a", Some("bin-producer")), ("b", Some("bin-producer"))]
    );
}
