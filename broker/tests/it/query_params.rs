//! One policy for every numeric query parameter of every route (docs/broker-contract.md
//! §1): a value out of its range (0 where 1 is the least, negative, above the maximum)
//! or one that is not a number answers 400 `{"error": ..., "parameter": <name>}`, never
//! a silent clamp, and an in-range value is served. One case per route parameter.

use crate::common;

use common::{start_with, unique, Broker};
use reqwest::StatusCode;
use serde_json::json;

/// `path` (which has a `?` or not) with `name=value` appended.
fn with(path: &str, name: &str, value: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{name}={value}")
}

async fn call(b: &Broker, delete: bool, path: &str) -> (StatusCode, serde_json::Value) {
    if delete {
        b.delete(path).await
    } else {
        b.get(path).await
    }
}

/// Every bad value of `name` on `path` is a 400 naming it; `good` is served (2xx).
async fn check(b: &Broker, delete: bool, path: &str, name: &str, bad: &[&str], good: &str) {
    for v in bad {
        let url = with(path, name, v);
        let (s, body) = call(b, delete, &url).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{url}: {body}");
        assert_eq!(body["parameter"], name, "{url}: {body}");
        let e = body["error"].as_str().unwrap();
        assert!(e.contains(name) && e.contains("from"), "{url}: {e}");
    }
    let url = with(path, name, good);
    let (s, body) = call(b, delete, &url).await;
    assert!(s.is_success(), "{url}: {s} {body}");
}

#[tokio::test]
async fn every_numeric_query_parameter_refuses_out_of_range_values() {
    let b = start_with(|c| {
        c.max_batch = 50;
        c.max_lease_seconds = 600;
    })
    .await;
    let q = unique("params");
    b.configure(&q, json!({})).await;
    let not_numbers = ["ten", "1.5", "1e3"];
    let pop = format!("/api/v1/pop/queue/{q}");
    let part = format!("/api/v1/pop/queue/{q}/partition/Default");
    for path in [&pop, &part] {
        for (name, bad) in [
            ("batch", vec!["0", "-5", "51", "999999999999"]),
            ("partitions", vec!["0", "-5", "51"]),
            ("timeout", vec!["-5", "3600001", "99999999999"]),
            ("leaseSeconds", vec!["601", "99999999999"]),
        ] {
            let bad: Vec<&str> = bad.into_iter().chain(not_numbers).collect();
            check(&b, false, path, name, &bad, "1").await;
        }
    }
    let (s, _) = b
        .get(&format!("{pop}?batch=50&partitions=50&timeout=0"))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT, "the maxima are in range");
    for (path, name, bad, good) in [
        ("/api/v1/dlq", "limit", vec!["0", "-5", "1001"], "1000"),
        ("/api/v1/dlq", "offset", vec!["-1", "2147483648"], "0"),
        (
            "/api/v1/resources/partitions",
            "limit",
            vec!["0", "-5", "5001", "999999"],
            "5000",
        ),
        (
            "/api/v1/status/queues",
            "limit",
            vec!["0", "-5", "1001"],
            "1000",
        ),
        (
            "/api/v1/status/queues",
            "offset",
            vec!["-1", "2147483648"],
            "0",
        ),
        (
            "/api/v1/consumer-groups/lagging",
            "minLagSeconds",
            vec!["-1", "2147483648", "NaN", "inf"],
            "0.5",
        ),
    ] {
        let bad: Vec<&str> = bad.into_iter().chain(["ten"]).collect();
        check(&b, false, path, name, &bad, good).await;
    }
    // The bulk DLQ purge: a queue without DLQ rows, so the served call deletes nothing.
    let purge = format!("/api/v1/dlq?queue={q}");
    check(
        &b,
        true,
        &purge,
        "limit",
        &["0", "-5", "2147483648", "ten"],
        "5",
    )
    .await;
}

#[tokio::test]
async fn a_refused_parameter_changes_nothing() {
    let b = start_with(|_| {}).await;
    let q = unique("params-nochange");
    b.push(json!([{"queue": q, "payload": 1}])).await;
    let (s, _) = b.get(&format!("/api/v1/pop/queue/{q}?batch=0")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let pop = b
        .pop(&q, "batch=1")
        .await
        .expect("the message was not delivered");
    assert_eq!(pop["messages"].as_array().unwrap().len(), 1);
}
