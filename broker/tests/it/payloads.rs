//! One payload rule for every reader (queen_log::payload): a payload pushed through psql
//! and through HTTP reads back identically through psql (`queen.pop`) and over HTTP.
//! Payloads are compared as JSON text, not parsed values, so a 30-digit integer that one
//! reader rounded would show.

use crate::common;

use common::{admin, push_raw, start, unique};
use serde_json::value::RawValue;
use serde_json::Value;

/// Every message of an HTTP pop of the partition as (transactionId, `data` as JSON text,
/// whitespace removed). Auto-ack under a group of its own: psql reads them too.
async fn over_http(b: &common::Broker, queue: &str, partition: &str) -> Vec<(String, String)> {
    let url = format!(
        "{}/api/v1/pop/queue/{queue}/partition/{partition}?batch=10&autoAck=true&consumerGroup=http",
        b.base
    );
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    #[derive(serde::Deserialize)]
    struct Pop<'a> {
        #[serde(borrow)]
        messages: Vec<Msg<'a>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Msg<'a> {
        transaction_id: String,
        #[serde(borrow)]
        data: &'a RawValue,
    }
    let pop: Pop<'_> = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    pop.messages
        .into_iter()
        .map(|m| (m.transaction_id, compact(m.data.get())))
        .collect()
}

/// The same messages through psql's `queen.pop`: `r_payload` as jsonb text.
async fn over_psql(
    db: &tokio_postgres::Client,
    queue: &str,
    partition: &str,
) -> Vec<(String, String)> {
    db.query(
        "SELECT r_transaction_id, r_payload::text FROM queen.pop($1, $2, p_group => 'psql',
                    p_batch => 10, p_auto_ack => true) ORDER BY r_offset",
        &[&queue, &partition],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), compact(&r.get::<_, String>(1))))
    .collect()
}

/// JSON text without insignificant whitespace (jsonb prints `{"n": 1}`, HTTP `{"n":1}`).
fn compact(text: &str) -> String {
    let mut out = String::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn a_payload_reads_back_the_same_through_psql_and_http_whoever_pushed_it() {
    let b = start().await;
    let db = admin().await;
    let q = unique("payloads");
    // Through psql: text that is not JSON, bytes that are not UTF-8, JSON with a
    // 30-digit integer, an empty payload.
    push_raw(&db, &q, "sql", "text", b"not json").await;
    push_raw(&db, &q, "sql", "bytes", &[0xff, 0x00, 0x10]).await;
    push_raw(
        &db,
        &q,
        "sql",
        "big",
        br#"{"n": 123456789012345678901234567890}"#,
    )
    .await;
    push_raw(&db, &q, "sql", "empty", b"").await;
    // Through HTTP: what JSON can carry of the same.
    let body = format!(
        r#"{{"items": [
            {{"queue": "{q}", "partition": "http", "transactionId": "text", "payload": "not json"}},
            {{"queue": "{q}", "partition": "http", "transactionId": "big", "payload": {{"n": 123456789012345678901234567890}}}},
            {{"queue": "{q}", "partition": "http", "transactionId": "null", "payload": null}}]}}"#
    );
    let (status, pushed) = b
        .post_raw("/api/v1/push", Box::leak(body.into_boxed_str()))
        .await;
    assert!(status.is_success(), "{pushed}");
    let want_sql = [
        ("text", r#""not json""#),
        ("bytes", r#""/wAQ""#),
        ("big", r#"{"n":123456789012345678901234567890}"#),
        ("empty", "null"),
    ];
    let want_http = [
        ("text", r#""not json""#),
        ("big", r#"{"n":123456789012345678901234567890}"#),
        ("null", "null"),
    ];
    for (partition, want) in [("sql", &want_sql[..]), ("http", &want_http[..])] {
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(t, d)| (t.to_string(), d.to_string()))
            .collect();
        assert_eq!(
            over_http(&b, &q, partition).await,
            want,
            "HTTP, pushed through {partition}"
        );
        assert_eq!(
            over_psql(&db, &q, partition).await,
            want,
            "psql, pushed through {partition}"
        );
    }
    let _: Value = pushed;
}

#[tokio::test]
async fn a_transaction_push_stores_its_payload_as_written() {
    // The transaction wire read its items into a `Value` tree and wrote that back: a
    // 30-digit integer came out as 1.2345678901234568e29.
    let b = start().await;
    let q = unique("txn-payload");
    let body = format!(
        r#"{{"operations": [{{"type": "push", "items": [
            {{"queue": "{q}", "transactionId": "t", "payload": {{"n": 123456789012345678901234567890, "f": 1.50}}}}]}}]}}"#
    );
    let (status, r) = b
        .post_raw("/api/v1/transaction", Box::leak(body.into_boxed_str()))
        .await;
    assert!(status.is_success() && r["success"] == true, "{r}");
    assert_eq!(
        over_http(&b, &q, "Default").await,
        vec![(
            "t".to_string(),
            r#"{"n":123456789012345678901234567890,"f":1.50}"#.to_string()
        )]
    );
}

#[test]
fn compact_keeps_strings() {
    assert_eq!(
        compact(r#"{"a b": "c \" d", "e": [1, 2]}"#),
        r#"{"a b":"c \" d","e":[1,2]}"#
    );
}

#[tokio::test]
async fn a_dead_lettered_payload_lists_as_written() {
    // The DLQ listing read each row's data into a `Value`: the same rounding.
    let b = start().await;
    let db = admin().await;
    let q = unique("dlq-payload");
    b.configure(
        &q,
        serde_json::json!({"retryLimit": 0, "deadLetterQueue": true}),
    )
    .await;
    push_raw(
        &db,
        &q,
        "Default",
        "p",
        br#"{"n": 123456789012345678901234567890}"#,
    )
    .await;
    let pop = b.pop(&q, "consumerGroup=g").await.expect("one message");
    let acks = common::acks_for(&pop, "failed", Some("poison"));
    let (status, v) = b
        .ack_batch(
            serde_json::json!({"consumerGroup": "g", "acknowledgments": acks["acknowledgments"]}),
        )
        .await;
    assert!(status.is_success() && v[0]["dlq"] == true, "{v}");
    let url = format!("{}/api/v1/dlq?queue={q}", b.base);
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    #[derive(serde::Deserialize)]
    struct Listing<'a> {
        #[serde(borrow)]
        messages: Vec<Listed<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Listed<'a> {
        #[serde(borrow)]
        data: &'a RawValue,
    }
    let listing: Listing<'_> =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let data: Vec<String> = listing
        .messages
        .iter()
        .map(|m| compact(m.data.get()))
        .collect();
    assert_eq!(
        data,
        vec![r#"{"n":123456789012345678901234567890}"#.to_string()]
    );
}
