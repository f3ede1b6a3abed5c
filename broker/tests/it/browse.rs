//! Finding and inspecting messages over HTTP (Queen's `GET /api/v1/messages` and
//! `GET /api/v1/messages/{partitionId}/{transactionId}`): newest first with Queen's keys,
//! statuses from the cursors for one group and for several, the filters and the page, and
//! every bad parameter a 400 naming it.

use crate::common;
use common::txns;

use common::{acks_for, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Three messages into p1 and two into p2 of `q`, pushed in that order.
async fn fill(b: &Broker, q: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (p, n) in [("p1", 3), ("p2", 2)] {
        let items: Vec<Value> = (0..n)
            .map(|i| json!({"queue": q, "partition": p, "payload": {"p": p, "i": i}, "transactionId": format!("{p}-{i}")}))
            .collect();
        out.extend(b.push(json!(items)).await);
    }
    out
}

#[tokio::test]
async fn a_listing_is_newest_first_with_queens_keys_and_cursor_statuses() {
    let b = start().await;
    let q = unique("browse");
    fill(&b, &q).await;
    // Group g reads two of p1 and holds the third under a lease.
    let p1 = format!("{q}/partition/p1");
    b.pop(&p1, "consumerGroup=g&batch=2&autoAck=true").await;
    b.pop(&p1, "consumerGroup=g&batch=1")
        .await
        .expect("p1-2 leased");
    let (s, page) = b.get(&format!("/api/v1/messages?queue={q}")).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(
        txns(&page),
        ["p2-1", "p2-0", "p1-2", "p1-1", "p1-0"],
        "{page}"
    );
    let m = &page["messages"][4];
    for k in [
        "id",
        "transactionId",
        "partitionId",
        "queuePath",
        "queue",
        "partition",
        "namespace",
        "task",
        "status",
        "queueStatus",
        "busStatus",
        "traceId",
        "producerSub",
        "queuePriority",
        "createdAt",
        "leaseExpiresAt",
    ] {
        assert!(m.get(k).is_some(), "{k} missing: {m}");
    }
    assert_eq!(m["queuePath"], format!("{q}/p1"));
    assert_eq!(m["status"], "completed", "{m}");
    assert_eq!(m["busStatus"], json!({"consumedBy": 1, "totalGroups": 1}));
    assert_eq!(page["messages"][2]["status"], "processing", "{page}");
    assert!(page["messages"][2]["leaseExpiresAt"].is_string(), "{page}");
    assert_eq!(
        page["messages"][0]["status"], "pending",
        "p2 has no reader yet"
    );
    assert_eq!(
        page["mode"],
        json!({"hasQueueMode": false, "busGroupsCount": 1, "type": "bus"})
    );
    // Filters and the page.
    let (_, done) = b
        .get(&format!("/api/v1/messages?queue={q}&status=completed"))
        .await;
    assert_eq!(txns(&done), ["p1-1", "p1-0"]);
    let (_, pending) = b
        .get(&format!(
            "/api/v1/messages?queue={q}&status=pending&limit=1&offset=1"
        ))
        .await;
    assert_eq!(txns(&pending), ["p2-0"]);
    let (_, p2) = b
        .get(&format!("/api/v1/messages?queue={q}&partition=p2"))
        .await;
    assert_eq!(txns(&p2), ["p2-1", "p2-0"]);
    let (_, page) = b
        .get(&format!("/api/v1/messages?queue={q}&limit=2&offset=1"))
        .await;
    assert_eq!(txns(&page), ["p2-0", "p1-2"]);
    let (_, none) = b
        .get(&format!(
            "/api/v1/messages?queue={q}&from=2000-01-01T00:00:00Z&to=2000-01-02T00:00:00Z"
        ))
        .await;
    assert_eq!(txns(&none), Vec::<String>::new());
    // A second group: completed needs both; h's lease on p1-0 makes it processing.
    b.pop(&p1, "consumerGroup=h&batch=1")
        .await
        .expect("h leases p1-0");
    let (_, page) = b
        .get(&format!("/api/v1/messages?queue={q}&partition=p1"))
        .await;
    let st: Vec<&str> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["status"].as_str().unwrap())
        .collect();
    assert_eq!(st, ["processing", "pending", "processing"], "{page}");
}

#[tokio::test]
async fn a_message_by_address_has_its_payload_offset_and_status_per_group() {
    let b = start().await;
    let q = unique("browse1");
    b.configure(&q, json!({"retryLimit": 0})).await;
    fill(&b, &q).await;
    let p1 = format!("{q}/partition/p1");
    let pop = b.pop(&p1, "consumerGroup=g&batch=1").await.expect("p1-0");
    let pid = pop["partitionId"].as_str().unwrap().to_string();
    let mut nack = acks_for(&pop, "failed", Some("boom"));
    nack["consumerGroup"] = json!("g");
    let (_, v) = b.ack_batch(nack).await;
    assert_eq!(v[0]["dlq"], true, "{v}");
    b.pop(&p1, "consumerGroup=g&batch=1")
        .await
        .expect("p1-1 leased");

    let (s, m) = b.get(&format!("/api/v1/messages/{pid}/p1-0")).await;
    assert_eq!(s, StatusCode::OK, "{m}");
    assert_eq!(
        (m["payload"].clone(), m["offset"].clone()),
        (json!({"p": "p1", "i": 0}), json!(0)),
        "{m}"
    );
    assert_eq!(
        (m["status"].clone(), m["errorMessage"].clone()),
        (json!("dead_letter"), json!("boom")),
        "{m}"
    );
    assert_eq!(m["consumerGroups"][0]["status"], "dead_letter", "{m}");
    let (_, m) = b.get(&format!("/api/v1/messages/{pid}/p1-1")).await;
    assert_eq!(m["status"], "processing", "{m}");
    assert!(m["leaseExpiresAt"].as_str().is_some(), "{m}");
    assert_eq!(
        m["consumerGroups"],
        json!([{"name": "g", "consumed": false, "status": "processing",
                                            "leaseExpiresAt": m["leaseExpiresAt"]}])
    );
    assert_eq!(m["queueConfig"]["retryLimit"], 0, "{m}");
    let (_, m) = b.get(&format!("/api/v1/messages/{pid}/p1-2")).await;
    assert_eq!(m["status"], "pending", "{m}");
    for path in [
        format!("/api/v1/messages/{pid}/nobody"),
        "/api/v1/messages/not-a-uuid/p1-0".to_string(),
        format!("/api/v1/messages/{}/p1-0", uuid::Uuid::new_v4()),
    ] {
        let (s, v) = b.get(&path).await;
        assert_eq!(
            (s, v),
            (StatusCode::NOT_FOUND, json!({"error": "Message not found"})),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_bad_listing_parameter_is_a_400_naming_it() {
    let b = start().await;
    for (query, named) in [
        ("limit=-1", Some("limit")),
        ("limit=1001", Some("limit")),
        ("limit=ten", Some("limit")),
        ("offset=-5", Some("offset")),
        ("status=done", None),
        ("from=yesterday-ish", None),
    ] {
        let (s, v) = b.get(&format!("/api/v1/messages?{query}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{query}: {v}");
        if let Some(p) = named {
            assert_eq!(v["parameter"], p, "{query}: {v}");
        }
    }
}
