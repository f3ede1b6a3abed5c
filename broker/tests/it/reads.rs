//! Queen 2.x's reads of the log. Reads by offset (`POST /api/v1/fetch`): exactly the pushed
//! records from an offset, with the partition's high watermark and log start, bounded by
//! byte budgets, and the SDK's error codes; no lease, no cursor, nothing written.
//! Partition discovery (`POST /api/v1/partitions/changed`): the partitions written since a
//! time, paged, and a safeTime that no concurrent commit can slip under (driven by a
//! transaction held open).

use crate::common;

use common::{admin, snapshot, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn fetch(b: &Broker, entries: Value, max_bytes: i64) -> Vec<Value> {
    let (s, v) = b
        .post(
            "/api/v1/fetch",
            &json!({"entries": entries, "maxBytes": max_bytes}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["entries"].as_array().unwrap().clone()
}

fn entry(q: &str, p: &str, offset: i64, max_bytes: i64) -> Value {
    json!({"queue": q, "partition": p, "offset": offset, "maxBytes": max_bytes})
}

fn txns(e: &Value) -> Vec<String> {
    e["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["transactionId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_fetch_returns_exactly_the_pushed_records_and_writes_nothing() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let q = unique("fetch");
    // Two pushes (two segments); a 30-digit integer survives as written.
    b.push(
        json!([{"queue": q, "partition": "p", "transactionId": "a", "payload": {"i": 0}},
                  {"queue": q, "partition": "p", "transactionId": "b", "payload": {"i": 1}}]),
    )
    .await;
    let raw = format!(
        r#"{{"items":[{{"queue":"{q}","partition":"p","transactionId":"c","payload":{{"n":123456789012345678901234567890}}}}]}}"#
    );
    let r = b
        .http
        .post(format!("{}/api/v1/push", b.base))
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let before = snapshot(&db).await;
    let r = b
        .http
        .post(format!("{}/api/v1/fetch", b.base))
        .json(&json!({"entries": [entry(&q, "p", 0, 1 << 20)], "maxBytes": 1 << 20}))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    // The value as pushed, digit for digit (jsonb spaces it: `{"n": ...}`).
    assert!(
        text.contains(r#""n": 123456789012345678901234567890}"#),
        "{text}"
    );
    let all: Value = serde_json::from_str(&text).unwrap();
    let e = &all["entries"][0];
    assert_eq!(txns(e), ["a", "b", "c"]);
    let offsets: Vec<i64> = e["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, [0, 1, 2]);
    assert_eq!(e["records"][1]["payload"], json!({"i": 1}));
    assert!(e["records"][0]["ts"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        (e["highWatermark"].clone(), e["logStartOffset"].clone()),
        (json!(3), json!(0))
    );
    assert_eq!(e["nextOffset"], 3);
    assert!(e.get("error").is_none(), "{e}");
    assert_eq!(
        snapshot(&db).await,
        before,
        "a fetch takes no lease and moves no cursor"
    );
    // A consumer still gets everything: the fetch was invisible to it.
    let pop = b.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pop["messages"].as_array().unwrap().len(), 3);
    // From the middle; at the end (no records, no error); past it; unknown names.
    let es = fetch(
        &b,
        json!([
            entry(&q, "p", 1, 1 << 20),
            entry(&q, "p", 3, 1 << 20),
            entry(&q, "p", 4, 1 << 20),
            entry(&q, "nope", 0, 1 << 20),
            entry("nobody-has-this-queue", "p", 0, 1 << 20)
        ]),
        1 << 20,
    )
    .await;
    assert_eq!(txns(&es[0]), ["b", "c"]);
    assert_eq!((txns(&es[1]).len(), es[1].get("error")), (0, None));
    assert_eq!(es[2]["error"], "OFFSET_OUT_OF_RANGE");
    assert_eq!(es[2]["highWatermark"], 3);
    for e in &es[3..] {
        assert_eq!(e["error"], "UNKNOWN_TOPIC_OR_PARTITION", "{e}");
        assert_eq!(e["records"], json!([]));
    }
}

#[tokio::test]
async fn budgets_bound_a_read_and_the_first_record_always_comes() {
    common::exclusive().await;
    let b = start().await;
    let q = unique("fetch-budget");
    let items: Vec<Value> = (0..10)
        .map(|i| json!({"queue": q, "partition": "p", "transactionId": format!("t{i}"), "payload": "x".repeat(98)}))
        .collect();
    b.push(json!(items)).await;
    b.push(json!([{"queue": q, "partition": "big", "transactionId": "huge", "payload": "y".repeat(5000)}]))
        .await;
    // Each payload is 100 bytes of JSON text: 350 bytes buy three records.
    let es = fetch(&b, json!([entry(&q, "p", 0, 350)]), 1 << 20).await;
    assert_eq!(txns(&es[0]), ["t0", "t1", "t2"]);
    assert_eq!(es[0]["nextOffset"], 3);
    // The call's budget is shared in order: the second entry is starved, not refused.
    let es = fetch(
        &b,
        json!([entry(&q, "p", 0, 1000), entry(&q, "p", 5, 1000)]),
        450,
    )
    .await;
    assert_eq!(txns(&es[0]).len(), 4);
    assert_eq!((txns(&es[1]).len(), es[1].get("error")), (0, None));
    // A record larger than every budget is read alone, as the first of its call.
    let es = fetch(&b, json!([entry(&q, "big", 0, 10)]), 10).await;
    assert_eq!(txns(&es[0]), ["huge"]);
}

#[tokio::test]
async fn an_offset_retention_deleted_is_out_of_range_and_the_log_start_says_where_to_go() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let q = unique("fetch-ret");
    b.configure(&q, json!({"retentionSeconds": 3600})).await;
    for t in ["old", "new"] {
        b.push(json!([{"queue": q, "transactionId": t, "payload": t}]))
            .await;
    }
    // The first segment is aged past the window; retention deletes it.
    let pid: uuid::Uuid = db
        .query_one(
            "SELECT p.id FROM queen.partition_names p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0);
    db.execute(
        "UPDATE queen.log_segments SET created_at = now() - interval '2 hours'
          WHERE partition_id = $1 AND base_offset = 0",
        &[&pid],
    )
    .await
    .unwrap();
    db.batch_execute("CALL queen.run_maintenance(10000, 1000)")
        .await
        .unwrap();
    let es = fetch(&b, json!([entry(&q, "Default", 0, 1 << 20)]), 1 << 20).await;
    assert_eq!(es[0]["error"], "OFFSET_OUT_OF_RANGE", "{}", es[0]);
    assert_eq!(
        (
            es[0]["logStartOffset"].clone(),
            es[0]["highWatermark"].clone()
        ),
        (json!(1), json!(2))
    );
    let es = fetch(&b, json!([entry(&q, "Default", 1, 1 << 20)]), 1 << 20).await;
    assert_eq!(txns(&es[0]), ["new"]);
}

#[tokio::test]
async fn bad_fetches_are_400_naming_what() {
    let b = start().await;
    let q = unique("fetch-bad");
    let many: Vec<Value> = (0..1025).map(|_| entry(&q, "p", 0, 1)).collect();
    for (body, says) in [
        (json!({"entries": [entry(&q, "p", -1, 1)]}), "offset"),
        (json!({"entries": [entry(&q, "p", 0, 0)]}), "maxBytes"),
        (json!({"entries": [entry(&q, "p", 0, 9 << 20)]}), "maxBytes"),
        (json!({"entries": [], "maxBytes": 0}), "maxBytes"),
        (json!({"entries": many}), "at most 1024"),
        (
            json!({"entries": [{"queue": q, "partition": "p", "from": 3}]}),
            "from",
        ),
        (
            json!({"entries": [entry(&"q".repeat(300), "p", 0, 1)]}),
            "255",
        ),
        (
            json!({"entries": [entry(&q, "p", 0, 1)], "isolation": "x"}),
            "isolation",
        ),
    ] {
        let (s, v) = b.post("/api/v1/fetch", &body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(v["error"].as_str().unwrap().contains(says), "{says}: {v}");
    }
}

async fn changed(b: &Broker, entry: Value) -> (Value, String) {
    let (s, v) = b
        .post("/api/v1/partitions/changed", &json!({"entries": [entry]}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let safe = v["safeTime"].as_str().expect("a safeTime").to_string();
    (v["entries"][0].clone(), safe)
}

fn names(e: &Value) -> Vec<String> {
    e["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn discovery_lists_what_changed_since_in_creation_order_and_pages() {
    common::exclusive().await;
    let b = start().await;
    let q = unique("changed");
    for p in ["p1", "p2", "p3"] {
        b.push(json!([{"queue": q, "partition": p, "payload": 1}]))
            .await;
    }
    let (all, safe) = changed(&b, json!({"queue": q})).await;
    // configure is not called: the three pushed partitions only (no "Default").
    assert_eq!(names(&all), ["p1", "p2", "p3"], "{all}");
    let p1 = &all["partitions"][0];
    assert_eq!(
        (p1["lastOffset"].clone(), p1["logStart"].clone()),
        (json!(0), json!(0))
    );
    assert!(p1["id"].is_string() && p1["lastWriteAt"].as_str().unwrap().ends_with('Z'));
    assert!(all["next"].is_null());
    // Since that answer's safeTime: only what was written after it.
    b.push(json!([{"queue": q, "partition": "p2", "payload": 2}]))
        .await;
    let (since, _) = changed(&b, json!({"queue": q, "since": safe})).await;
    assert_eq!(names(&since), ["p2"], "{since}");
    // Pages of two, following `next`.
    let (first, _) = changed(&b, json!({"queue": q, "limit": 2})).await;
    assert_eq!(names(&first), ["p1", "p2"]);
    let next = first["next"].as_str().expect("a cursor").to_string();
    let (rest, _) = changed(&b, json!({"queue": q, "limit": 2, "after": next})).await;
    assert_eq!(names(&rest), ["p3"]);
    assert!(rest["next"].is_null());
    let (none, _) = changed(&b, json!({"queue": unique("nobody")})).await;
    assert_eq!(none["error"], "UNKNOWN_TOPIC_OR_PARTITION");
    for (body, says) in [
        (json!({"entries": [{"queue": q, "limit": 0}]}), "limit"),
        (
            json!({"entries": [{"queue": q, "since": "yesterday-ish"}]}),
            "partitions_changed",
        ),
        (json!({"entries": [{"queue": q, "after": "x"}]}), "cursor"),
        (json!({"entries": [{"queue": q, "from": 1}]}), "from"),
    ] {
        let (s, v) = b.post("/api/v1/partitions/changed", &body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert!(v["error"].as_str().unwrap().contains(says), "{says}: {v}");
    }
}

/// A push whose transaction is still open when discovery answers: its write is not in
/// the answer, and the answer's safeTime is no later than that transaction's start, so
/// the next call (since that safeTime) lists the partition once the push commits.
#[tokio::test]
async fn a_write_committed_after_an_answer_is_not_missed_by_the_next() {
    common::exclusive().await;
    let b = start().await;
    let q = unique("changed-race");
    b.push(json!([{"queue": q, "partition": "early", "payload": 1}]))
        .await;
    let (_, t0) = changed(&b, json!({"queue": q})).await;
    let pusher = admin().await;
    pusher.batch_execute("BEGIN").await.unwrap();
    pusher
        .query("SELECT queen.push($1, '[1]'::jsonb, NULL, 'late')", &[&q])
        .await
        .unwrap();
    let (during, safe) = changed(&b, json!({"queue": q, "since": t0})).await;
    assert!(
        !names(&during).contains(&"late".to_string()),
        "uncommitted: {during}"
    );
    pusher.batch_execute("COMMIT").await.unwrap();
    let (after, _) = changed(&b, json!({"queue": q, "since": safe})).await;
    assert!(
        names(&after).contains(&"late".to_string()),
        "missed across the commit: {after} (safeTime {safe})"
    );
}
