//! Strict bodies (docs/http-api.md, "Strict bodies"): every route with a JSON body refuses, with
//! a 400 that names the field, each key and value it does not implement — an unknown key
//! anywhere, a configure option asking for behaviour this broker lacks, a transaction
//! rider (`kv`; a `timers` op naming a field it does not take) or operation type other than push and ack — and changes nothing
//! (every row of every queen table is compared before and after). Queen's SDKs' default
//! bodies, copied from their source, still succeed.

use crate::common;

use common::{admin, fixture, snapshot, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// Posts `body` to `path`, asserts a 400 naming `field` (in `field` and in the error text)
/// and that no queen table changed.
async fn refused(b: &Broker, db: &tokio_postgres::Client, path: &str, body: Value, field: &str) {
    let before = snapshot(db).await;
    let (s, v) = b.post(path, &body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{path} {body}: {v}");
    assert_eq!(v["field"], field, "{path} {body}: {v}");
    let error = v["error"].as_str().unwrap_or_default();
    let last = field.rsplit('.').next().unwrap();
    assert!(error.contains(last), "{path}: the error names {last}: {v}");
    if path == "/api/v1/transaction" {
        // The transaction wire's refusal shape (docs/broker-contract.md §1).
        assert_eq!(v["success"], false, "{v}");
        assert_eq!(v["reason"], "bad_request", "{v}");
        assert_eq!(v["results"], json!([]), "{v}");
        assert!(v["transactionId"].is_string(), "{v}");
    }
    assert_eq!(
        before,
        snapshot(db).await,
        "{path} {body} changed the database"
    );
}

#[tokio::test]
async fn every_route_refuses_an_unknown_key_naming_it() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "strict").await;
    let (q, pid, lease, txn) = (&f.queue, &f.pid, &f.lease, &f.txn);
    let ack = json!({"transactionId": txn, "partitionId": pid, "leaseId": lease});
    let with = |v: &Value, k: &str, x: Value| {
        let mut v = v.clone();
        v[k] = x;
        v
    };
    let item = json!({"queue": q, "payload": 1, "transactionId": "new"});
    let extend = format!("/api/v1/lease/{lease}/extend");
    let replay = format!("/api/v1/dlq/{}/replay", uuid::Uuid::now_v7());
    let retry = format!("/api/v1/messages/{pid}/{txn}/retry");
    let cases: Vec<(&str, Value, &str)> = vec![
        // configure: top level and options.
        (
            "/api/v1/configure",
            json!({"queue": q, "options": {}, "retention": 1}),
            "retention",
        ),
        (
            "/api/v1/configure",
            json!({"queue": q, "options": {"leaseTim": 30}}),
            "options.leaseTim",
        ),
        (
            "/api/v1/configure",
            json!({"queue": q, "options": {"namespace": "n"}}),
            "options.namespace",
        ),
        // push: top level and items (`messageId` included; Queen's `producerSub` is
        // accepted and ignored, broker/tests/it/producer_sub.rs, but not a spelling of it
        // that no Queen client sends).
        (
            "/api/v1/push",
            json!({"items": [item], "buffer": true}),
            "buffer",
        ),
        (
            "/api/v1/push",
            json!({"items": [with(&item, "producer_sub", json!("me"))]}),
            "items[0].producer_sub",
        ),
        (
            "/api/v1/push",
            json!({"items": [item, with(&item, "messageId", json!("m"))]}),
            "items[1].messageId",
        ),
        (
            "/api/v1/push",
            json!({"items": [with(&item, "priority", json!(1))]}),
            "items[0].priority",
        ),
        // ack and ack batch: the body, the batch's top level, its items; `type` outside a
        // transaction.
        ("/api/v1/ack", with(&ack, "retry", json!(true)), "retry"),
        ("/api/v1/ack", with(&ack, "type", json!("ack")), "type"),
        (
            "/api/v1/ack/batch",
            json!({"acknowledgments": [ack], "group": "g"}),
            "group",
        ),
        (
            "/api/v1/ack/batch",
            json!({"acknowledgments": [ack, with(&ack, "x", json!(1))]}),
            "acknowledgments[1].x",
        ),
        // transaction: top level, each operation's keys, a push's items.
        (
            "/api/v1/transaction",
            json!({"operations": [], "atomic": true}),
            "atomic",
        ),
        (
            "/api/v1/transaction",
            json!({"operations": [{"type": "push", "items": [item], "queue": q}]}),
            "operations[0].queue",
        ),
        (
            "/api/v1/transaction",
            json!({"operations": [{"type": "push", "items": [item], "transactionId": "x"}]}),
            "operations[0].transactionId",
        ),
        (
            "/api/v1/transaction",
            json!({"operations": [{"type": "push", "items": [with(&item, "ttl", json!(5))]}]}),
            "operations[0].items[0].ttl",
        ),
        (
            "/api/v1/transaction",
            json!({"operations": [{"type": "push", "items": [item]},
                               with(&with(&ack, "type", json!("ack")), "required", json!(true))]}),
            "operations[1].required",
        ),
        (
            "/api/v1/transaction",
            json!({"operations": [with(&with(&ack, "type", json!("ack")), "items", json!([]))]}),
            "operations[0].items",
        ),
        // lease extend, DLQ replay and redrive, message retry.
        (
            &extend,
            json!({"seconds": 30, "leaseTime": 30}),
            "leaseTime",
        ),
        (&replay, json!({"target": "x"}), "target"),
        (
            "/api/v1/dlq/redrive",
            json!({"queue": q, "group": "g"}),
            "group",
        ),
        (&retry, json!({"force": true}), "force"),
    ];
    for (path, body, field) in cases {
        refused(&b, &db, path, body, field).await;
    }
    // The lease is still live and the message still pending: nothing above touched them.
    let (s, v) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": txn, "partitionId": pid, "leaseId": lease}),
        )
        .await;
    assert_eq!(
        (s, v[0]["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
}

#[tokio::test]
async fn options_that_cannot_be_enforced_are_refused_naming_them() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let existing = unique("strict-cfg");
    b.configure(&existing, json!({"leaseTime": 30})).await;
    let fresh = unique("strict-new");
    let asks = [
        // Needs QUEEN_ENCRYPTION_KEY, which this broker lacks.
        ("encryptionEnabled", json!(true)),
        // Queen's options are enforced (docs/decisions.md, "Queue options"); only a value
        // no rule can apply is refused.
        ("maxSize", json!(-10)),
        ("maxWaitTimeSeconds", json!(1.5)),
        ("windowBuffer", json!("5")),
        ("retryDelay", json!(-1)),
        ("ttl", json!(true)),
        ("priority", json!(-5)),
    ];
    for queue in [&existing, &fresh] {
        for (k, v) in &asks {
            // Beside implemented options, which are not applied either.
            let options = json!({"leaseTime": 99, "retryLimit": 9, k.to_string(): v});
            let body = json!({"queue": queue, "options": options});
            refused(&b, &db, "/api/v1/configure", body, &format!("options.{k}")).await;
        }
        // retentionEnabled: false would keep everything, but a retention window applies.
        let body = json!({"queue": queue, "options": {"retentionEnabled": false,
                                                      "retentionSeconds": 3600}});
        refused(
            &b,
            &db,
            "/api/v1/configure",
            body,
            "options.retentionEnabled",
        )
        .await;
        let body = json!({"queue": queue, "options": {"retentionEnabled": false}});
        refused(
            &b,
            &db,
            "/api/v1/configure",
            body,
            "options.retentionEnabled",
        )
        .await;
    }
    let (s, _) = b.get(&format!("/api/v1/resources/queues/{fresh}")).await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "a refused configure created no queue"
    );
}

#[tokio::test]
async fn bad_riders_and_other_op_types_are_refused_and_nothing_commits() {
    common::exclusive().await;
    let b = start().await;
    let db = admin().await;
    let f = fixture(&b, "strict").await;
    let push = json!({"type": "push", "items": [{"queue": f.queue, "payload": {"n": 9},
                                                "transactionId": "rider-push"}]});
    let ack = json!({"type": "ack", "transactionId": f.txn, "partitionId": f.pid,
                     "status": "completed", "leaseId": f.lease});
    let ops = json!([push, ack]);
    // The kv rider is served (tests/kv.rs); an op it does not know, a field an op does
    // not take, a getPrefix (not a transaction op) or a rider that is not an array refuse
    // the whole bundle naming it.
    let riders = [
        (
            json!([{"op": "incr", "ns": "c", "key": "k", "by": 1, "forever": true}]),
            "kv[0].by",
        ),
        (json!([{"op": "lock", "ns": "c", "key": "k"}]), "kv[0]"),
        (
            json!([{"op": "getPrefix", "ns": "c", "prefix": "k"}]),
            "kv[0]",
        ),
        (
            json!([{"op": "put", "ns": "c", "key": "k", "value": 1}]),
            "kv[0]",
        ),
        (json!({"op": "put"}), "kv"),
    ];
    for (rider, field) in riders {
        let body = json!({"operations": ops, "requiredLeases": [f.lease], "kv": rider});
        refused(&b, &db, "/api/v1/transaction", body, field).await;
    }
    // The timer rider is served (tests/timers.rs); a field it does not take, or one the
    // server owns, refuses the whole bundle naming it.
    let timer = |extra: (&str, Value)| {
        let mut op = json!({"op": "schedule", "queue": f.queue, "timerKey": "t-1",
                            "payload": "eyJuIjoxfQ==", "delayMs": 1000});
        op[extra.0] = extra.1;
        json!([op])
    };
    for (extra, field) in [
        (("producerSub", json!("me")), "timers[0].producerSub"),
        (("ttl", json!(5)), "timers[0].ttl"),
    ] {
        let body = json!({"operations": ops, "requiredLeases": [f.lease], "timers": timer(extra)});
        refused(&b, &db, "/api/v1/transaction", body, field).await;
    }
    for kind in ["kv", "check", "guard", "timer", "schedule", "once", "PUSH"] {
        let other = json!({"type": kind, "ns": "n", "key": "k"});
        let body = json!({"operations": [push, other]});
        refused(&b, &db, "/api/v1/transaction", body, "operations[1].type").await;
    }
    let body = json!({"operations": [push, {"transactionId": "x"}]});
    refused(&b, &db, "/api/v1/transaction", body, "operations[1].type").await;
    let body = json!({"operations": [{"type": "ack", "transactionId": f.txn, "partitionId": f.pid,
                                      "status": "retry", "delaySeconds": 5}]});
    refused(
        &b,
        &db,
        "/api/v1/transaction",
        body,
        "operations[0].delaySeconds",
    )
    .await;
    // Empty riders ask for nothing: the same bundle commits.
    let body = json!({"operations": ops, "requiredLeases": [f.lease], "kv": [], "timers": null});
    let (s, v) = b.post("/api/v1/transaction", &body).await;
    assert_eq!(
        (s, v["success"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    assert_eq!(v["results"].as_array().unwrap().len(), 2, "{v}");
}

/// The option values Queen's SDKs send by default, and the neutral value of every option,
/// are accepted; the answer echoes every option's effective value (Queen's
/// 012_configure.sql answer).
#[tokio::test]
async fn sdk_default_configure_bodies_succeed_and_are_echoed() {
    common::exclusive().await;
    let q = unique("strict-sdk");
    let b = start().await;
    // queen-mq 2.6.0 (Python): queen/builders/queue_builder.py `create()` sends
    // {queue, namespace, task, options: QUEEN_DEFAULTS camelCased}, with
    // queen/utils/defaults.py QUEUE_DEFAULTS; the JS client-v2 (utils/defaults.js) sends
    // the same nine keys; the Go client (types.go QueueConfig) omits zero values.
    let sdk = json!({"queue": q, "namespace": null, "task": null, "options": {
        "leaseTime": 300, "retryLimit": 3, "priority": 0, "delayedProcessing": 0,
        "windowBuffer": 0, "maxSize": 0, "retentionSeconds": 0,
        "completedRetentionSeconds": 0, "encryptionEnabled": false}});
    let (s, v) = b.post("/api/v1/configure", &sdk).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["configured"], true);
    for (k, sent) in sdk["options"].as_object().unwrap() {
        assert_eq!(&v["options"][k], sent, "{k} echoed: {v}");
    }
    assert_eq!(v["options"]["ttl"], 0, "no ttl unless asked for: {v}");
    // Every neutral value, nulls, and retentionEnabled with the windows it implies.
    let neutral = json!({"maxWaitTimeSeconds": 0, "retryDelay": 0, "ttl": 0, "priority": null,
        "windowBuffer": 0.0, "encryptionEnabled": null, "retentionEnabled": false,
        "retentionSeconds": 0, "completedRetentionSeconds": 0, "dedupWindowSeconds": 600,
        "deadLetterQueue": true, "dlqAfterMaxRetries": true});
    let v = b.configure(&q, neutral.clone()).await;
    for (k, sent) in neutral.as_object().unwrap() {
        let want = match sent {
            Value::Null => &sdk["options"][k],
            Value::Number(n) if n.as_f64() == Some(0.0) => &json!(0),
            _ => sent,
        };
        assert_eq!(&v["options"][k], want, "{k}: {v}");
    }
    let v = b
        .configure(
            &q,
            json!({"retentionEnabled": true, "retentionSeconds": 3600}),
        )
        .await;
    assert_eq!(v["options"]["retentionEnabled"], true);
}

/// Where an answer's `success` is: the body's, or its first item's (ack answers are arrays).
enum Answer {
    Body,
    Item,
}

/// Posts and asserts a 200 whose `success` is true.
async fn succeeds(b: &Broker, path: &str, body: &Value, answer: Answer) {
    let (s, v) = b.post(path, body).await;
    let success = match answer {
        Answer::Body => &v["success"],
        Answer::Item => &v[0]["success"],
    };
    assert_eq!((s, success), (StatusCode::OK, &json!(true)), "{path}: {v}");
}

/// Push, pop, ack, ack batch, transaction, lease extend and message retry with the bodies
/// the 2.6.0 Python SDK sends (keys copied from its source, named per body).
#[tokio::test]
async fn sdk_default_bodies_of_every_route_succeed() {
    common::exclusive().await;
    let b = start().await;
    let q = unique("strict-sdkb");
    b.configure(&q, json!({"leaseTime": 60})).await;
    // queen/builders/queue_builder.py push(): queue, partition (None unless set),
    // payload, transactionId, traceId when valid.
    let trace = uuid::Uuid::now_v7().to_string();
    let (s, v) = b
        .post(
            "/api/v1/push",
            &json!({"items": [
            {"queue": q, "partition": null, "payload": {"n": 1}, "transactionId": "s1"},
            {"queue": q, "partition": null, "payload": {"n": 2}, "transactionId": "s2",
             "traceId": trace},
            {"queue": q, "partition": null, "payload": {"n": 3}, "transactionId": "s3"}]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let pop = b.pop(&q, "batch=1").await.expect("pop");
    let (pid, lease) = (pop["partitionId"].clone(), pop["leaseId"].clone());
    // queen/client.py renew(): `{}`.
    let extend = format!("/api/v1/lease/{}/extend", lease.as_str().unwrap());
    succeeds(&b, &extend, &json!({}), Answer::Body).await;
    // queen/client.py ack() of one message: transactionId, partitionId, status, error,
    // consumerGroup, leaseId.
    succeeds(
        &b,
        "/api/v1/ack",
        &json!({"transactionId": "s1", "partitionId": pid,
            "status": "completed", "error": null, "consumerGroup": null, "leaseId": lease}),
        Answer::Item,
    )
    .await;
    // queen/client.py ack() of a list: {acknowledgments: [{transactionId, partitionId,
    // status, error, leaseId}], consumerGroup}.
    let pop = b.pop(&q, "batch=1").await.expect("pop");
    succeeds(
        &b,
        "/api/v1/ack/batch",
        &json!({"acknowledgments": [
            {"transactionId": "s2", "partitionId": pid, "status": "completed", "error": null,
             "leaseId": pop["leaseId"]}], "consumerGroup": null}),
        Answer::Item,
    )
    .await;
    // queen/builders/transaction_builder.py commit(): {operations, requiredLeases}; an ack
    // op {type, transactionId, partitionId, status, leaseId}, a push op {type, items:
    // [{queue, payload, transactionId, partition?}]}; no kv/timers keys when unused.
    let pop = b.pop(&q, "batch=1").await.expect("pop");
    succeeds(
        &b,
        "/api/v1/transaction",
        &json!({"operations": [
            {"type": "ack", "transactionId": "s3", "partitionId": pid, "status": "completed",
             "leaseId": pop["leaseId"]},
            {"type": "push", "items": [{"queue": q, "payload": {"n": 4},
                                        "transactionId": "s4", "partition": "p2"}]}],
            "requiredLeases": [pop["leaseId"]]}),
        Answer::Body,
    )
    .await;
    // queen/admin/admin.py retry_message(): `{}` (no DLQ row here: Queen's 404, not a 400).
    let (s, v) = b
        .post(
            &format!("/api/v1/messages/{}/s3/retry", pid.as_str().unwrap()),
            &json!({}),
        )
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
}
