//! Queen 2.x's key/value over real HTTP (docs/decisions.md, "Key/value"): the batch
//! route answers index-aligned, `putIfAbsent` has exactly one winner among concurrent
//! callers, a bad op is the SDK's `kv_bad_request` and writes nothing, a lost `required`
//! precondition rolls the call back, and the transaction's `kv` rider commits with its
//! pushes and acks or not at all (`kv_precondition`, its `failedIndex` in the flat space).

use crate::common;

use common::{admin, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

async fn kv(b: &Broker, ops: Value) -> (StatusCode, Value) {
    b.post("/api/v1/kv", &json!({ "operations": ops })).await
}

async fn rows_of(ns: &str) -> i64 {
    admin()
        .await
        .query_one("SELECT count(*) FROM queen.kv WHERE ns = $1", &[&ns])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_batch_is_index_aligned_and_versions_fence() {
    let b = start().await;
    let ns = unique("kv-batch");
    let (s, v) = kv(
        &b,
        json!([
            {"op": "put", "ns": ns, "key": "a", "value": {"n": 1}, "ttlSeconds": 60},
            {"op": "get", "ns": ns, "key": "absent"},
            {"op": "incr", "ns": ns, "key": "c", "delta": 2, "ttlSeconds": 60},
            {"op": "get", "ns": ns, "key": "a"},
        ]),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let r = v["results"].as_array().unwrap();
    let idx: Vec<i64> = r.iter().map(|x| x["index"].as_i64().unwrap()).collect();
    assert_eq!(idx, [0, 1, 2, 3]);
    assert_eq!(r[0]["applied"], true);
    assert_eq!(r[1]["found"], false);
    assert_eq!(r[2]["value"], 2);
    assert_eq!(r[3]["value"], json!({"n": 1}));
    assert_eq!(r[3]["version"], r[0]["version"]);
    let v1 = r[0]["version"].as_i64().unwrap();

    let (_, v) = kv(
        &b,
        json!([{"op": "put", "ns": ns, "key": "a", "value": 2, "ttlSeconds": 60, "expect": v1}]),
    )
    .await;
    let second = &v["results"][0];
    assert_eq!(second["applied"], true, "{v}");
    assert!(second["version"].as_i64().unwrap() > v1);
    let (_, v) = kv(
        &b,
        json!([{"op": "put", "ns": ns, "key": "a", "value": 3, "ttlSeconds": 60, "expect": v1}]),
    )
    .await;
    let stale = &v["results"][0];
    assert_eq!(
        (stale["applied"].clone(), stale["reason"].clone()),
        (json!(false), json!("version"))
    );
    assert_eq!(
        stale["version"], second["version"],
        "the loser sees the current version"
    );
    assert_eq!(stale["value"], 2);
}

#[tokio::test]
async fn put_if_absent_has_exactly_one_winner() {
    let b = start().await;
    let ns = unique("kv-race");
    let calls = (0..8).map(|i| {
        let b = &b;
        let ns = ns.clone();
        async move {
            kv(
                b,
                json!([{"op": "putIfAbsent", "ns": ns, "key": "claim", "value": {"by": i},
                        "ttlSeconds": 60}]),
            )
            .await
            .1["results"][0]
                .clone()
        }
    });
    let results = futures_util::future::join_all(calls).await;
    let winners: Vec<&Value> = results.iter().filter(|r| r["applied"] == true).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for loser in results.iter().filter(|r| r["applied"] == false) {
        assert_eq!(loser["reason"], "exists");
        assert_eq!(
            loser["value"], winners[0]["value"],
            "the winner's value, no second call"
        );
    }
    assert_eq!(rows_of(&ns).await, 1);
}

#[tokio::test]
async fn a_bad_op_is_the_sdks_refusal_and_writes_nothing() {
    let b = start().await;
    let ns = unique("kv-bad");
    for (ops, reason, field) in [
        (
            json!([{"op": "put", "ns": "NOT A NAMESPACE", "key": "k", "value": 1, "ttlSeconds": 1}]),
            "kv_namespace_invalid",
            "operations[0]",
        ),
        (
            json!([{"op": "put", "ns": ns, "key": "k", "value": 1, "ttlSeconds": 60},
                {"op": "put", "ns": ns, "key": "k", "value": 1}]),
            "kv_expiry_not_specified",
            "operations[1]",
        ),
        (
            json!([{"op": "get", "ns": ns, "key": "k", "ttl": 5}]),
            "kv_op_invalid",
            "operations[0].ttl",
        ),
        (
            json!([{"op": "check", "ns": ns, "key": "k"}]),
            "kv_expect_required",
            "operations[0]",
        ),
        (
            json!([{"op": "lock", "ns": ns, "key": "k"}]),
            "kv_op_unknown",
            "operations[0]",
        ),
    ] {
        let (s, v) = kv(&b, ops).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(
            (v["error"].clone(), v["reason"].clone(), v["field"].clone()),
            (json!("kv_bad_request"), json!(reason), json!(field)),
            "{v}"
        );
    }
    assert_eq!(
        rows_of(&ns).await,
        0,
        "a refused batch writes nothing, not even its good ops"
    );
}

#[tokio::test]
async fn a_lost_required_op_rolls_the_batch_back() {
    let b = start().await;
    let ns = unique("kv-req");
    let (s, v) = kv(
        &b,
        json!([
            {"op": "put", "ns": ns, "key": "step", "value": 1, "ttlSeconds": 60},
            {"op": "check", "ns": ns, "key": "lock", "expect": 7, "required": true},
        ]),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (
            v["success"].clone(),
            v["reason"].clone(),
            v["failedIndex"].clone(),
            v["kvReason"].clone()
        ),
        (
            json!(false),
            json!("kv_precondition"),
            json!(1),
            json!("absent")
        )
    );
    assert_eq!(v["results"][0]["reason"], "rolled_back");
    assert_eq!(v["results"][1]["reason"], "absent");
    assert_eq!(rows_of(&ns).await, 0);
}

#[tokio::test]
async fn the_kv_rider_shares_the_transactions_fate() {
    let b = start().await;
    let (q, ns) = (unique("kv-tx"), unique("kv-tx-ns"));
    let bundle = |attempt: i64| {
        json!({"operations": [{"type": "push", "items": [{"queue": q, "payload": {"attempt": attempt}}]}],
               "kv": [{"op": "putIfAbsent", "ns": ns, "key": "gate:evt-1", "value": true,
                       "ttlSeconds": 300, "required": true}]})
    };
    let (s, first) = b.post("/api/v1/transaction", &bundle(1)).await;
    assert_eq!(
        (s, first["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{first}"
    );
    let r = first["results"].as_array().unwrap();
    assert_eq!(
        (
            r[1]["type"].clone(),
            r[1]["index"].clone(),
            r[1]["success"].clone()
        ),
        (json!("kv"), json!(1), json!(true)),
        "{first}"
    );

    let (s, second) = b.post("/api/v1/transaction", &bundle(2)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (
            second["success"].clone(),
            second["reason"].clone(),
            second["kvReason"].clone(),
            second["failedIndex"].clone()
        ),
        (
            json!(false),
            json!("kv_precondition"),
            json!("exists"),
            json!(1)
        ),
        "{second}"
    );
    let got = b.pop(&q, "batch=10").await.unwrap();
    let msgs = got["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "the losing bundle pushed nothing");
    assert_eq!(msgs[0]["data"], json!({"attempt": 1}));

    // A refused ack takes its kv write down with it.
    let (_, v) = b
        .post("/api/v1/transaction", &json!({
            "operations": [{"type": "ack", "transactionId": "nobody", "partitionId": msgs[0]["partitionId"],
                            "leaseId": got["leaseId"]}],
            "kv": [{"op": "put", "ns": ns, "key": "fate", "value": 1, "ttlSeconds": 300}]}))
        .await;
    assert_eq!(v["success"], false, "{v}");
    let (_, v) = kv(&b, json!([{"op": "get", "ns": ns, "key": "fate"}])).await;
    assert_eq!(v["results"][0]["found"], false);

    // A kv-only bundle commits; getPrefix is not a transaction op.
    let (_, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [],
            "kv": [{"op": "put", "ns": ns, "key": "solo", "value": {"b": 2}, "ttlSeconds": 300}]}),
        )
        .await;
    assert_eq!(v["success"], true, "{v}");
    let (s, v) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [],
            "kv": [{"op": "getPrefix", "ns": ns, "prefix": "s"}]}),
        )
        .await;
    assert_eq!(
        (s, v["field"].clone()),
        (StatusCode::BAD_REQUEST, json!("kv[0]")),
        "{v}"
    );
}

#[tokio::test]
async fn the_queue_list_counts_the_kv_and_timer_stores() {
    let b = start().await;
    let ns = unique("kv-sizes");
    kv(
        &b,
        json!([{"op": "put", "ns": ns, "key": "a", "value": "x", "ttlSeconds": 60}]),
    )
    .await;
    let (s, v) = b.get("/api/v1/resources/queues").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let rows: i64 = admin()
        .await
        .query_one(
            "SELECT count(*) FROM queen.kv WHERE tenant_id = '00000000-0000-0000-0000-000000000001'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(v["kvRows"].as_i64().unwrap() >= 1, "{v}");
    assert!(
        v["kvRows"].as_i64().unwrap() <= rows + 8,
        "the tenant's rows, about now: {v}"
    );
    assert!(v["kvBytes"].as_i64().unwrap() > 0, "{v}");
    assert!(v["timerRows"].is_i64() && v["queues"].is_array(), "{v}");
}
