//! Tenancy (broker.md §1, §2 step 3, §5): with QUEEN_JWT_SECRET set, every /api/v1
//! request needs an HS256 bearer token with a `tenant` claim, and whatever belongs to
//! another tenant behaves EXACTLY like something that does not exist (same status, same
//! body). Run against a real database (see tests/it/common.rs).

use crate::common;

use common::{start_with, unique, Broker};
use queen_broker::http::auth::sign;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const SECRET: &str = "tenancy-test-secret";

fn token_for(tenant: Uuid) -> String {
    sign(
        SECRET.as_bytes(),
        &json!({"tenant": tenant, "sub": "test", "role": "admin"}),
    )
}

/// A broker with tenancy on, and clients for two fresh tenants A and B.
async fn setup() -> (Broker, Broker, Broker) {
    let b = start_with(|c| c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET))).await;
    let a = b.with_token(&token_for(Uuid::new_v4()));
    let other = b.with_token(&token_for(Uuid::new_v4()));
    (b, a, other)
}

/// Tenant A pushes one message to `q` and pops it under a lease: (pop response,
/// partitionId, leaseId).
async fn leased(a: &Broker, q: &str, txn: &str) -> (Value, String, String) {
    a.push(json!([{"queue": q, "payload": {"owner": "a"}, "transactionId": txn}]))
        .await;
    let pop = a.pop(q, "").await.expect("A pops its own message");
    let pid = pop["partitionId"].as_str().unwrap().to_string();
    let lease = pop["leaseId"].as_str().unwrap().to_string();
    (pop, pid, lease)
}

#[tokio::test]
async fn missing_or_bad_tokens_are_401_and_no_tenant_is_403() {
    let (b, _, _) = setup().await;
    let q = unique("auth");
    let body = json!({"items": [{"queue": q, "payload": 1}]});
    // No header at all.
    let (s, v) = b.post("/api/v1/push", &body).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    assert!(v["error"].as_str().unwrap().contains("Bearer"), "{v}");
    let (s, v) = b.get(&format!("/api/v1/pop/queue/{q}")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    // Garbage, wrong secret, expired, wrong scheme.
    let tenant = Uuid::new_v4();
    let bad = [
        "not-a-jwt".to_string(),
        sign(b"some other secret", &json!({"tenant": tenant})),
        sign(
            SECRET.as_bytes(),
            &json!({"tenant": tenant, "exp": 1_000_000}),
        ),
    ];
    for t in &bad {
        let (s, v) = b.with_token(t).post("/api/v1/push", &body).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{t}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    let r = b
        .http
        .post(format!("{}/api/v1/push", b.base))
        .header("authorization", format!("Basic {}", token_for(tenant)))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    // A valid token whose exp lies ahead is fine.
    let future = chrono::Utc::now().timestamp() + 3600;
    let ok = sign(
        SECRET.as_bytes(),
        &json!({"tenant": tenant, "exp": future, "role": "read-write"}),
    );
    let (s, v) = b.with_token(&ok).post("/api/v1/push", &body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    // Valid signature, no (usable) tenant claim → 403.
    for claims in [
        json!({"sub": "x", "role": "admin"}),
        json!({"tenant": "not-a-uuid", "role": "admin"}),
    ] {
        let t = sign(SECRET.as_bytes(), &claims);
        let (s, v) = b.with_token(&t).get("/api/v1/dlq").await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{claims}: {v}");
        assert!(v["error"].as_str().unwrap().contains("tenant"), "{v}");
    }
    // Nothing was written by the refused requests: only the one accepted push.
    let pop = b.with_token(&ok).pop(&q, "batch=10").await.unwrap();
    assert_eq!(pop["messages"].as_array().unwrap().len(), 1);
    // /health and /metrics need no token.
    assert_eq!(b.get("/health").await.0, StatusCode::OK);
    let r = b
        .http
        .get(format!("{}/metrics", b.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test]
async fn queues_are_per_tenant_and_foreign_pop_is_like_nonexistent() {
    let (_, a, other) = setup().await;
    let q = unique("tpop");
    a.configure(&q, json!({"leaseTime": 30})).await;
    a.push(json!([{"queue": q, "payload": "a1", "transactionId": "t1"}]))
        .await;
    let missing = unique("nothing");
    for path in [
        "/api/v1/pop/queue/{q}?batch=10",
        "/api/v1/pop/queue/{q}/partition/Default?batch=10",
        "/api/v1/pop/queue/{q}?batch=10&consumerGroup=g",
    ] {
        let foreign = other.get(&path.replace("{q}", &q)).await;
        let absent = other.get(&path.replace("{q}", &missing)).await;
        assert_eq!(foreign, absent, "{path}");
        assert_eq!(foreign.0, StatusCode::NO_CONTENT);
    }
    // The other tenant's queue of the same name is its own: same transactionId, not a
    // duplicate of A's, and each tenant pops only its own message.
    let r = other
        .push(json!([{"queue": q, "payload": "b1", "transactionId": "t1"}]))
        .await;
    assert_eq!(r[0]["status"], "queued", "{r:?}");
    let pb = other.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pb["messages"].as_array().unwrap().len(), 1);
    assert_eq!(pb["messages"][0]["data"], "b1");
    let pa = a.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pa["messages"].as_array().unwrap().len(), 1);
    assert_eq!(pa["messages"][0]["data"], "a1");
    assert_ne!(pa["partitionId"], pb["partitionId"]);
    // The owner's partition-level pop and long-poll work under tenancy.
    a.push(json!([{"queue": q, "payload": "a2", "partition": "p2"}]))
        .await;
    let (s, v) = a
        .get(&format!(
            "/api/v1/pop/queue/{q}/partition/p2?wait=true&timeout=2000"
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["messages"][0]["data"], "a2");
    let (s, _) = other
        .get(&format!("/api/v1/pop/queue/{q}/partition/p2"))
        .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn foreign_ack_is_like_nonexistent_partition_and_changes_nothing() {
    let (_, a, other) = setup().await;
    let q = unique("tack");
    let (pop, pid, lease) = leased(&a, &q, "m1").await;
    let random = Uuid::new_v4().to_string();
    for status in ["completed", "failed", "dlq"] {
        let ack = |p: &str| {
            json!({"acknowledgments": [{"transactionId": "m1", "partitionId": p,
                    "leaseId": lease, "status": status}]})
        };
        let foreign = other.ack_batch(ack(&pid)).await;
        let absent = other.ack_batch(ack(&random)).await;
        assert_eq!(foreign, absent, "{status}");
        assert_eq!(foreign.0, StatusCode::OK);
        assert_eq!(foreign.1[0]["success"], false, "{}", foreign.1);
        // Single ack endpoint too.
        let one = |p: &str| json!({"transactionId": "m1", "partitionId": p, "leaseId": lease, "status": status});
        let foreign = other.post("/api/v1/ack", &one(&pid)).await;
        let absent = other.post("/api/v1/ack", &one(&random)).await;
        assert_eq!(foreign, absent, "{status}");
    }
    // A lease-less foreign ack (which SQL would accept for the owner) is refused too.
    let leaseless = |p: &str| json!({"transactionId": "m1", "partitionId": p});
    assert_eq!(
        other.post("/api/v1/ack", &leaseless(&pid)).await,
        other.post("/api/v1/ack", &leaseless(&random)).await
    );
    // A's lease and registry entry are intact: still leased (no redelivery), and A's
    // own ack succeeds on the fast path.
    assert!(a.pop(&q, "").await.is_none(), "lease must still hold");
    let fast_before = fast_acks(&a).await;
    let (s, v) = a.ack_batch(common::acks_for(&pop, "completed", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["success"], true, "{v}");
    assert_eq!(v[0]["leaseReleased"], true, "{v}");
    assert!(
        fast_acks(&a).await > fast_before,
        "owner's ack took the fast path"
    );
}

/// Ack items answered by the registry fast path so far.
async fn fast_acks(b: &Broker) -> u64 {
    b.state
        .metrics
        .acks_fast
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn foreign_lease_extend_is_like_unknown_lease() {
    let (_, a, other) = setup().await;
    let q = unique("tlease");
    let (_, _, lease) = leased(&a, &q, "m1").await;
    let admin = common::admin().await;
    let expiry = || async {
        admin
            .query_one(
                "SELECT lease_expires_at::text FROM queen.log_leases WHERE worker_id = $1",
                &[&lease],
            )
            .await
            .unwrap()
            .get::<_, String>(0)
    };
    let before = expiry().await;
    let unknown = Uuid::now_v7().to_string();
    let body = json!({"seconds": 600});
    let (fs, mut fv) = other
        .post(&format!("/api/v1/lease/{lease}/extend"), &body)
        .await;
    let (us, mut uv) = other
        .post(&format!("/api/v1/lease/{unknown}/extend"), &body)
        .await;
    assert_eq!(fv["leaseId"], lease.as_str());
    assert_eq!(uv["leaseId"], unknown.as_str());
    fv["leaseId"] = Value::Null;
    uv["leaseId"] = Value::Null;
    assert_eq!((fs, &fv), (us, &uv));
    assert_eq!(fs, StatusCode::OK);
    assert_eq!(fv["renewed"], 0);
    assert_eq!(fv["success"], false);
    assert_eq!(expiry().await, before, "a foreign extend must not renew");
    // The owner renews.
    let (s, v) = a
        .post(&format!("/api/v1/lease/{lease}/extend"), &body)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["renewed"], 1, "{v}");
    assert_ne!(expiry().await, before);
}

/// The failure body with the per-request parts (transactionId, the partition id named in
/// the error) blanked, so two refusals can be compared.
fn normalized(mut v: Value, pid: &str) -> Value {
    v["transactionId"] = Value::Null;
    if let Some(e) = v["error"].as_str() {
        v["error"] = json!(e.replace(pid, "<pid>"));
    }
    v
}

#[tokio::test]
async fn foreign_transaction_ack_is_like_nonexistent_and_writes_nothing() {
    let (_, a, other) = setup().await;
    let q = unique("ttxn");
    let (pop, pid, lease) = leased(&a, &q, "m1").await;
    let out = unique("ttxn-out");
    let random = Uuid::new_v4().to_string();
    let txn = |p: &str, with_lease: bool| {
        let mut ack = json!({"type": "ack", "transactionId": "m1", "partitionId": p});
        if with_lease {
            ack["leaseId"] = json!(lease);
        }
        json!({"operations": [
            {"type": "push", "items": [{"queue": out, "payload": 1, "transactionId": "x"}]},
            ack,
        ], "requiredLeases": [lease]})
    };
    for with_lease in [true, false] {
        let (fs, fv) = other
            .post("/api/v1/transaction", &txn(&pid, with_lease))
            .await;
        let (us, uv) = other
            .post("/api/v1/transaction", &txn(&random, with_lease))
            .await;
        assert_eq!(fs, us);
        assert_eq!(fv["success"], false, "{fv}");
        assert_eq!(normalized(fv, &pid), normalized(uv, &random));
    }
    // Nothing was written: no push landed for either tenant, A's lease still holds and
    // A's own transaction acks it.
    assert!(other.pop(&out, "").await.is_none());
    assert!(a.pop(&out, "").await.is_none());
    assert!(a.pop(&q, "").await.is_none(), "lease must still hold");
    let (s, v) = a
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "ack", "transactionId": "m1",
                "partitionId": pid, "leaseId": pop["leaseId"]}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["success"], true, "{v}");
}

#[tokio::test]
async fn dlq_listing_configure_and_delete_are_per_tenant() {
    let (_, a, other) = setup().await;
    let q = unique("tdlq");
    a.configure(&q, json!({"retryLimit": 0})).await;
    let (pop, _, _) = leased(&a, &q, "poison").await;
    let (_, v) = a
        .ack_batch(common::acks_for(&pop, "failed", Some("bad")))
        .await;
    assert_eq!(v[0]["dlq"], true, "{v}");
    let (_, mine) = a.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(mine["pagination"]["total"], 1, "{mine}");
    let missing = unique("nothing");
    let foreign = other.get(&format!("/api/v1/dlq?queue={q}")).await;
    let absent = other.get(&format!("/api/v1/dlq?queue={missing}")).await;
    assert_eq!(foreign, absent);
    assert_eq!(foreign.1["pagination"]["total"], 0);
    // The unfiltered listing holds none of A's rows.
    let (_, all) = other.get("/api/v1/dlq").await;
    assert_eq!(all["pagination"]["total"], 0, "{all}");
    // Configure and delete touch only the caller's queue.
    let (_, cfg) = other
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"leaseTime": 5}}),
        )
        .await;
    assert_eq!(cfg["configured"], true);
    let (_, own) = a.post("/api/v1/configure", &json!({"queue": q})).await;
    assert_ne!(cfg["queueId"], own["queueId"]);
    let foreign = other.delete(&format!("/api/v1/resources/queues/{q}")).await;
    assert_eq!(
        foreign.1,
        json!({"deleted": true, "queue": q, "existed": true}),
        "the other tenant's own queue"
    );
    let again = other.delete(&format!("/api/v1/resources/queues/{q}")).await;
    let absent = other
        .delete(&format!("/api/v1/resources/queues/{missing}"))
        .await;
    assert_eq!(again.1["existed"], false);
    assert_eq!(absent.1["existed"], false);
    // A's queue and DLQ survived the other tenant's delete.
    let (_, mine) = a.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(mine["pagination"]["total"], 1, "{mine}");
    let (_, v) = a.post("/api/v1/configure", &json!({"queue": q})).await;
    assert_eq!(v["queueId"], own["queueId"]);
}

/// The route templates registered in broker/src/http/mod.rs, read from the source, so
/// a route added without a case below fails the test that enumerates them.
fn routes_in_source() -> Vec<String> {
    let src = include_str!("../../src/http/mod.rs");
    let mut out: Vec<String> = src
        .match_indices(".route(")
        .filter_map(|(i, _)| {
            let rest = &src[i..];
            let start = rest.find('"')? + 1;
            let end = start + rest[start..].find('"')?;
            Some(rest[start..end].to_string())
        })
        .collect();
    out.sort();
    out
}

/// Every row of tenant `t`'s data, digested: queues, partitions, segments, sidecar,
/// cursors, leases, DLQ rows and subscription records.
async fn tenant_digest(db: &tokio_postgres::Client, t: Uuid) -> String {
    db.query_one(
        "WITH qs AS (SELECT id FROM queen.queues WHERE tenant_id = $1),
              ps AS (SELECT p.id FROM queen.log_partitions p JOIN qs ON qs.id = p.queue_id)
         SELECT md5(COALESCE(string_agg(x, '|' ORDER BY x), '')) FROM (
           SELECT 'q' || q::text AS x FROM queen.queues q WHERE q.tenant_id = $1
           UNION ALL SELECT 'p' || p::text FROM queen.log_partitions p WHERE p.id IN (SELECT id FROM ps)
           UNION ALL SELECT 's' || concat_ws(',', s.partition_id, s.base_offset, s.end_offset, md5(s.blob))
                       FROM queen.log_segments s WHERE s.partition_id IN (SELECT id FROM ps)
           UNION ALL SELECT 't' || concat_ws(',', t.partition_id, t.base_offset, md5(t.hashes))
                       FROM queen.log_txns t WHERE t.partition_id IN (SELECT id FROM ps)
           UNION ALL SELECT 'c' || c::text FROM queen.log_consumers c WHERE c.partition_id IN (SELECT id FROM ps)
           UNION ALL SELECT 'l' || l::text FROM queen.log_leases l WHERE l.partition_id IN (SELECT id FROM ps)
           UNION ALL SELECT 'd' || d::text FROM queen.log_dlq d WHERE d.partition_id IN (SELECT id FROM ps)
           UNION ALL SELECT 'm' || m::text FROM queen.consumer_groups_metadata m WHERE m.tenant_id = $1
           UNION ALL SELECT 'x' || concat_ws(',', x.queue_id, x.timer_key, x.txn, x.deliver_at, md5(x.payload))
                       FROM queen.timers x WHERE x.queue_id IN (SELECT id FROM qs)
           UNION ALL SELECT 'k' || concat_ws(',', k.ns, k.key, k.version, md5(k.value::text))
                       FROM queen.kv k WHERE k.tenant_id = $1) r",
        &[&t],
    )
    .await
    .unwrap()
    .get(0)
}

/// Issue 12 item 13: no HTTP request of one tenant reaches another tenant's data through
/// ANY endpoint. Tenant A holds queues with messages (a secret payload), a live lease, a
/// named group's cursor and a DLQ row; tenant B sends every route of the router at A's
/// names and ids (and a transaction that claims A's tenant in `_tenant`). Every answer B
/// gets is free of A's payloads and ids of A's data, and every row of A's data is the
/// same afterwards; A's own lease still acks.
#[tokio::test]
async fn no_route_reaches_another_tenants_data() {
    // QUEEN_METRICS_QUEUE_SERIES=0: the queue gauges of /metrics would show every
    // tenant's queue names (documented in docs/security.md).
    let b = start_with(|c| {
        c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET));
        c.metrics_queue_series = 0;
    })
    .await;
    let (ta, tb) = (Uuid::new_v4(), Uuid::new_v4());
    let a = b.with_token(&token_for(ta));
    let other = b.with_token(&token_for(tb));
    let secret = "secret-of-A";
    let q = unique("tall");
    let a_cfg = a
        .configure(&q, json!({"leaseTime": 60, "retryLimit": 0}))
        .await;
    a.push(json!([
        {"queue": q, "transactionId": "m1", "payload": {"s": secret, "n": 1}},
        {"queue": q, "transactionId": "m2", "payload": {"s": secret, "n": 2}},
        {"queue": q, "partition": "p2", "transactionId": "m3", "payload": {"s": secret}},
    ]))
    .await;
    let pop = a.pop(&q, "batch=1").await.expect("A pops");
    let (pid, lease) = (
        pop["partitionId"].as_str().unwrap().to_string(),
        pop["leaseId"].as_str().unwrap().to_string(),
    );
    let gpop = a
        .pop(&q, "consumerGroup=g&batch=1")
        .await
        .expect("A's group");
    let mut nack = common::acks_for(&gpop, "failed", Some("poison"));
    nack["consumerGroup"] = json!("g");
    let (_, v) = a.ack_batch(nack).await;
    assert_eq!(v[0]["dlq"], true, "A has a DLQ row: {v}");
    let (_, listing) = a.get(&format!("/api/v1/dlq?queue={q}")).await;
    let dlq_id = listing["messages"][0]["dlqId"]
        .as_str()
        .expect("A's DLQ row id")
        .to_string();
    let timer = |queue: &str, key: &str| {
        json!({"operations": [{"op": "schedule", "queue": queue, "timerKey": key,
                               "payload": "eyJzIjoic2VjcmV0LW9mLUEifQ==", "delayMs": 3_600_000,
                               "txn": "timer-of-A"}]})
    };
    let (s, v) = a.post("/api/v1/timers", &timer(&q, "ta")).await;
    assert_eq!(
        (s, v["results"][0]["status"].clone()),
        (StatusCode::OK, json!("scheduled"))
    );
    let (s, v) = a
        .post(
            "/api/v1/kv",
            &json!({"operations": [
            {"op": "put", "ns": "shared", "key": "k:secret", "value": {"s": "secret-of-A"},
             "ttlSeconds": 3600}]}),
        )
        .await;
    assert_eq!(
        (s, v["results"][0]["applied"].clone()),
        (StatusCode::OK, json!(true))
    );
    let (s, v) = a
        .post(
            "/api/v1/locks",
            &json!({"operations": [
            {"op": "acquire", "name": "lock-of-A", "ttlSeconds": 3600, "owner": "owner-of-A"}]}),
        )
        .await;
    assert_eq!(
        (s, v["results"][0]["acquired"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    let a_token = v["results"][0]["token"].clone();
    // A's queue in the sampled history, as the status and analytics routes read it.
    queen_broker::ops::history::snapshot(&b.state.db, true)
        .await
        .expect("queue snapshot");
    let db = common::admin().await;
    let before = tenant_digest(&db, ta).await;

    // Every route, enumerated from the router's source.
    let covered = [
        "/api/v1/ack",
        "/api/v1/ack/batch",
        // Broker-wide (admin: a tenant's token gets 403) or the tenant's queues only.
        "/api/v1/analytics/postgres-stats",
        "/api/v1/analytics/queue-lag",
        "/api/v1/analytics/queue-ops",
        "/api/v1/analytics/queue-parked-replicas",
        "/api/v1/analytics/retention",
        "/api/v1/analytics/system-metrics",
        "/api/v1/analytics/worker-metrics",
        "/api/v1/configure",
        "/api/v1/consumer-groups",
        "/api/v1/consumer-groups/lagging",
        "/api/v1/consumer-groups/{group}",
        "/api/v1/consumer-groups/{group}/queues/{queue}",
        "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
        "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
        "/api/v1/consumer-groups/{group}/subscription",
        "/api/v1/dlq",
        "/api/v1/dlq/redrive",
        "/api/v1/dlq/{id}",
        "/api/v1/dlq/{id}/replay",
        // Memory, not the database: an_ephemeral_queue_of_another_tenant_does_not_exist.
        "/api/v1/ephemeral/ack",
        "/api/v1/ephemeral/configure",
        "/api/v1/ephemeral/pop",
        "/api/v1/ephemeral/push",
        "/api/v1/ephemeral/queue/{queue}",
        "/api/v1/ephemeral/queues",
        "/api/v1/ephemeral/queues/{queue}/depth",
        "/api/v1/ephemeral/reset",
        "/api/v1/fetch",
        "/api/v1/kv",
        "/api/v1/lease/{lease_id}/extend",
        "/api/v1/locks",
        "/api/v1/messages",
        "/api/v1/messages/{partition_id}/{transaction_id}",
        "/api/v1/messages/{partition_id}/{transaction_id}/retry",
        "/api/v1/partitions/changed",
        "/api/v1/pop",
        "/api/v1/pop/queue/{queue}",
        "/api/v1/pop/queue/{queue}/partition/{partition}",
        "/api/v1/push",
        "/api/v1/resources/namespaces",
        "/api/v1/resources/overview",
        "/api/v1/resources/partitions",
        "/api/v1/resources/queues",
        "/api/v1/resources/queues/{queue}",
        "/api/v1/resources/queues/{queue}/depth",
        "/api/v1/resources/tasks",
        "/api/v1/stats/refresh",
        "/api/v1/status",
        "/api/v1/status/analytics",
        "/api/v1/status/buffers",
        "/api/v1/status/queues",
        "/api/v1/status/queues/{queue}",
        "/api/v1/status/queues/{queue}/messages",
        // The broker's own state (docs/availability.md): the maintenance modes (admin)
        // and the spool's counts carry no tenant's data.
        "/api/v1/system/maintenance",
        "/api/v1/system/maintenance/pop",
        "/api/v1/system/shared-state",
        "/api/v1/timers",
        "/api/v1/timers/{queue}",
        "/api/v1/timers/{queue}/{*key}",
        "/api/v1/traces",
        "/api/v1/traces/by-name/{name}",
        "/api/v1/traces/names",
        "/api/v1/traces/{partition_id}/{transaction_id}",
        "/api/v1/transaction",
        "/health",
        "/metrics",
        "/metrics/prometheus",
        // a_stream_of_another_tenant_is_out_of_reach.
        "/streams/v1/cycle",
        "/streams/v1/queries",
        "/streams/v1/queries/{name}",
        "/streams/v1/state/get",
    ];
    assert_eq!(
        routes_in_source(),
        covered,
        "a route was added or renamed: give it a cross-tenant case here"
    );
    let ack_a = json!({"transactionId": "m1", "partitionId": pid, "leaseId": lease});
    let mut answers: Vec<(String, StatusCode, Value)> = Vec::new();
    let mut note = |what: &str, (s, v): (StatusCode, Value)| answers.push((what.into(), s, v));
    // Reads.
    for path in [
        format!("/api/v1/pop/queue/{q}?batch=10"),
        format!("/api/v1/pop/queue/{q}?batch=10&consumerGroup=g"),
        format!("/api/v1/pop/queue/{q}/partition/Default?batch=10"),
        format!("/api/v1/pop/queue/{q}/partition/p2?batch=10&autoAck=true"),
        format!("/api/v1/pop/queue/{q}?batch=10&wait=true&timeout=200"),
        format!("/api/v1/dlq?queue={q}"),
        "/api/v1/dlq".to_string(),
        "/api/v1/dlq?consumerGroup=g".to_string(),
    ] {
        let r = other.get(&path).await;
        assert!(
            r.0 == StatusCode::NO_CONTENT || r.0 == StatusCode::OK,
            "{path}: {r:?}"
        );
        note(&path, r);
    }
    // The admin views: lists must not show A's queue; a view of A's queue or group by
    // name answers like one of a name nobody has.
    for path in [
        "/api/v1/resources/queues",
        "/api/v1/resources/partitions",
        "/api/v1/resources/overview",
        "/api/v1/resources/namespaces",
        "/api/v1/resources/tasks",
        "/api/v1/status/queues",
        "/api/v1/consumer-groups",
        "/api/v1/consumer-groups/lagging",
        "/api/v1/messages",
        "/api/v1/messages?status=pending&from=2000-01-01T00:00:00Z",
        "/api/v1/status",
        "/api/v1/status/analytics?interval=minute",
        "/api/v1/analytics/queue-ops",
        "/api/v1/analytics/queue-lag",
        "/api/v1/analytics/queue-parked-replicas",
        "/api/v1/analytics/system-metrics",
        "/api/v1/analytics/worker-metrics",
        "/api/v1/analytics/retention",
        "/api/v1/analytics/postgres-stats",
    ] {
        let r = other.get(path).await;
        assert!(!r.0.is_server_error(), "{path}: {r:?}");
        assert!(
            !r.1.to_string().contains(&q),
            "{path} lists A's queue: {}",
            r.1
        );
        note(path, r);
    }
    let missing = unique("nobody");
    for path in [
        "/api/v1/resources/queues/{q}",
        "/api/v1/resources/queues/{q}/depth",
        "/api/v1/status/queues/{q}",
        "/api/v1/status/queues/{q}/messages",
        "/api/v1/consumer-groups/{g}",
    ] {
        let foreign = other
            .get(&path.replace("{q}", &q).replace("{g}", "g"))
            .await;
        let absent = other
            .get(&path.replace("{q}", &missing).replace("{g}", &missing))
            .await;
        assert_eq!(foreign.0, absent.0, "{path}: {foreign:?} vs {absent:?}");
        note(&format!("named {path}"), foreign);
    }
    // A's traces: A records one; B can neither read nor add to them.
    let tname = unique("tname");
    // The message A popped (which partition a queue pop serves first is not fixed).
    let popped = pop["messages"][0]["transactionId"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, _) = a
        .post(
            "/api/v1/traces",
            &json!({"transactionId": popped, "partitionId": pid,
                    "traceNames": [tname], "data": {"s": secret}}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "A traces its message");
    for path in [
        format!("/api/v1/traces/{pid}/{popped}"),
        format!("/api/v1/traces/by-name/{tname}"),
        "/api/v1/traces/names?limit=1000".to_string(),
    ] {
        let r = other.get(&path).await;
        assert!(
            !r.1.to_string().contains(secret) && !r.1.to_string().contains(&tname),
            "{path}: {r:?}"
        );
        note(&path, r);
    }
    let r = other
        .post(
            "/api/v1/traces",
            &json!({"transactionId": popped, "partitionId": pid, "data": {}}),
        )
        .await;
    assert_eq!(r.0, StatusCode::NOT_FOUND, "{r:?}");
    note("trace of A's message", r);
    // A's message by its address answers like an address nobody has.
    let foreign = other.get(&format!("/api/v1/messages/{pid}/m1")).await;
    let absent = other
        .get(&format!("/api/v1/messages/{}/m1", Uuid::new_v4()))
        .await;
    assert_eq!(foreign, absent, "a message of A by address");
    note("named message", foreign);
    // A's partition read by offset answers like a partition nobody has.
    let ask = |queue: &str| {
        json!({"entries": [{"queue": queue, "partition": "Default", "offset": 0,
                            "maxBytes": 1_048_576}]})
    };
    let foreign = other.post("/api/v1/fetch", &ask(&q)).await;
    let absent = other.post("/api/v1/fetch", &ask(&missing)).await;
    assert_eq!(foreign.0, StatusCode::OK, "{foreign:?}");
    let shape = |v: &Value| {
        (
            v["entries"][0]["error"].clone(),
            v["entries"][0]["records"].clone(),
        )
    };
    assert_eq!(
        shape(&foreign.1),
        shape(&absent.1),
        "a fetch of A's partition"
    );
    note("fetch", foreign);
    // A's queue in partition discovery answers like a queue nobody has.
    let ask = |queue: &str| json!({"entries": [{"queue": queue}]});
    let foreign = other.post("/api/v1/partitions/changed", &ask(&q)).await;
    let absent = other
        .post("/api/v1/partitions/changed", &ask(&missing))
        .await;
    assert_eq!(foreign.0, StatusCode::OK, "{foreign:?}");
    let shape = |v: &Value| {
        (
            v["entries"][0]["error"].clone(),
            v["entries"][0]["partitions"].clone(),
        )
    };
    assert_eq!(
        shape(&foreign.1),
        shape(&absent.1),
        "discovery of A's queue"
    );
    note("partitions changed", foreign);
    // A's timer: a peek, a list and a cancel answer like a queue nobody has (and A's
    // digest, timers included, is unchanged).
    for (foreign, absent) in [
        (
            other.get(&format!("/api/v1/timers/{q}/ta")).await,
            other.get(&format!("/api/v1/timers/{missing}/ta")).await,
        ),
        (
            other.get(&format!("/api/v1/timers/{q}")).await,
            other.get(&format!("/api/v1/timers/{missing}")).await,
        ),
    ] {
        assert_eq!(foreign.0, StatusCode::OK, "{foreign:?}");
        assert_eq!(
            foreign.1["found"], absent.1["found"],
            "a timer read of A's queue"
        );
        assert_eq!(
            foreign.1["rows"], absent.1["rows"],
            "a timer list of A's queue"
        );
        note("timer read", foreign);
    }
    let r = other.delete(&format!("/api/v1/timers/{q}/ta")).await;
    assert_eq!(r.1["status"], "absent", "{r:?}");
    note("timer cancel", r);
    // A's key: B reads nothing under the same namespace and key, and B's writes there
    // are B's own rows (A's digest, kv included, is unchanged).
    let r = other
        .post(
            "/api/v1/kv",
            &json!({"operations": [
            {"op": "get", "ns": "shared", "key": "k:secret"},
            {"op": "getPrefix", "ns": "shared", "prefix": "k:"},
            {"op": "check", "ns": "shared", "key": "k:secret", "expect": 0},
            {"op": "delete", "ns": "shared", "key": "k:secret"}]}),
        )
        .await;
    assert_eq!(r.1["results"][0]["found"], false, "{r:?}");
    assert_eq!(r.1["results"][1]["rows"], json!([]), "{r:?}");
    assert_eq!(r.1["results"][2]["applied"], true, "{r:?}");
    assert_eq!(r.1["results"][3]["reason"], "absent", "{r:?}");
    note("kv", r);
    // A's lock: B sees no holder, and B's release with A's token releases nothing.
    let r = other
        .post(
            "/api/v1/locks",
            &json!({"operations": [
            {"op": "get", "name": "lock-of-A"},
            {"op": "release", "name": "lock-of-A", "token": a_token}]}),
        )
        .await;
    assert_eq!(r.1["results"][0]["held"], false, "{r:?}");
    assert_eq!(r.1["results"][1]["released"], false, "{r:?}");
    note("locks", r);
    // A pop across A's namespace (the queue's own name, which has no dot) finds nothing.
    let r = other
        .get(&format!("/api/v1/pop?namespace={q}&batch=10"))
        .await;
    assert_eq!(r.0, StatusCode::NO_CONTENT, "{r:?}");
    note("pop across A's namespace", r);
    // Writes aimed at A's lease, partition and names.
    note("ack", other.post("/api/v1/ack", &ack_a).await);
    for status in ["completed", "failed", "dlq"] {
        let mut one = ack_a.clone();
        one["status"] = json!(status);
        note(
            "ack/batch",
            other.ack_batch(json!({"acknowledgments": [one]})).await,
        );
    }
    note(
        "ack/batch group",
        other
            .ack_batch(json!({"consumerGroup": "g", "acknowledgments": [
                {"transactionId": "m1", "partitionId": pid}]}))
            .await,
    );
    note(
        "extend",
        other
            .post(
                &format!("/api/v1/lease/{lease}/extend"),
                &json!({"seconds": 600}),
            )
            .await,
    );
    note(
        "transaction",
        other
            .post(
                "/api/v1/transaction",
                &json!({"operations": [
                    {"type": "push", "items": [{"queue": q, "transactionId": "m2", "payload": "b"}]},
                    {"type": "ack", "transactionId": "m1", "partitionId": pid, "leaseId": lease}],
                    "_tenant": ta}),
            )
            .await,
    );
    note(
        "transaction claiming A's tenant",
        other
            .post(
                "/api/v1/transaction",
                &json!({"operations": [{"type": "push", "items": [
                    {"queue": q, "transactionId": "m1", "payload": "b"}]}], "_tenant": ta}),
            )
            .await,
    );
    // DLQ and message administration aimed at A's rows.
    for (method, path, body) in [
        ("DELETE", format!("/api/v1/messages/{pid}/m2"), Value::Null),
        (
            "POST",
            format!("/api/v1/messages/{pid}/m1/retry"),
            json!({}),
        ),
        ("POST", format!("/api/v1/dlq/{dlq_id}/replay"), json!({})),
        ("DELETE", format!("/api/v1/dlq/{dlq_id}"), Value::Null),
        (
            "POST",
            "/api/v1/dlq/redrive".to_string(),
            json!({"ids": [dlq_id]}),
        ),
        (
            "POST",
            "/api/v1/dlq/redrive".to_string(),
            json!({"queue": q}),
        ),
        ("DELETE", format!("/api/v1/dlq?queue={q}"), Value::Null),
        (
            "DELETE",
            "/api/v1/consumer-groups/g".to_string(),
            Value::Null,
        ),
        (
            "DELETE",
            format!("/api/v1/consumer-groups/g/queues/{q}"),
            Value::Null,
        ),
        (
            "DELETE",
            format!("/api/v1/dlq?queue={q}&consumerGroup=g"),
            Value::Null,
        ),
        (
            "POST",
            format!("/api/v1/consumer-groups/g/queues/{q}/seek"),
            json!({"toEnd": true}),
        ),
        (
            "POST",
            format!("/api/v1/consumer-groups/g/queues/{q}/partitions/Default/seek"),
            json!({}),
        ),
        (
            "POST",
            "/api/v1/consumer-groups/g/subscription".to_string(),
            json!({"subscriptionTimestamp": "2000-01-01T00:00:00Z"}),
        ),
    ] {
        let r = if method == "POST" {
            other.post(&path, &body).await
        } else {
            other.delete(&path).await
        };
        assert!(!r.0.is_server_error(), "{method} {path}: {r:?}");
        note(&format!("admin {method} {path}"), r);
    }
    note(
        "push",
        other
            .post(
                "/api/v1/push",
                &json!({"items": [
        {"queue": q, "transactionId": "m1", "payload": "b"},
        {"queue": q, "partition": "p2", "transactionId": "m3", "payload": "b"}]}),
            )
            .await,
    );
    let cfg = other
        .post(
            "/api/v1/configure",
            &json!({"queue": q, "options": {"leaseTime": 1, "retryLimit": 9}}),
        )
        .await;
    assert_ne!(
        cfg.1["queueId"], a_cfg["queueId"],
        "B configured a queue of its own"
    );
    note("configure", cfg);
    note(
        "pop after B's pushes",
        other.get(&format!("/api/v1/pop/queue/{q}?batch=10")).await,
    );
    // B's writes went to B's own queue of that name.
    let empty = tenant_digest(&db, Uuid::new_v4()).await;
    assert_ne!(tenant_digest(&db, tb).await, empty, "B wrote its own rows");
    note(
        "delete",
        other.delete(&format!("/api/v1/resources/queues/{q}")).await,
    );
    // Unauthenticated, process-wide: no names, ids or payloads of anyone.
    for path in ["/health", "/metrics", "/metrics/prometheus"] {
        let r = b
            .http
            .get(format!("{}{path}", b.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        note(
            path,
            (StatusCode::OK, Value::String(r.text().await.unwrap())),
        );
    }

    for (what, s, v) in &answers {
        let text = v.to_string();
        for leaked in [secret, pid.as_str(), lease.as_str()] {
            // B's ack answers echo the ids B itself sent; nothing else may carry them.
            let echoed = what.starts_with("ack")
                || what == "extend"
                || what.starts_with("transaction")
                || what.starts_with("admin");
            if leaked == secret || !echoed {
                assert!(
                    !text.contains(leaked),
                    "{what} ({s}) leaks {leaked}: {text}"
                );
            }
        }
        if what.starts_with("ack") {
            assert!(
                v.as_array().unwrap().iter().all(|i| i["success"] == false),
                "{what}: {v}"
            );
        }
    }
    for (what, _, v) in answers
        .iter()
        .filter(|(w, _, _)| w.starts_with("/metrics") || w == "/health")
    {
        assert!(!v.as_str().unwrap().contains(&q), "{what} names a queue");
    }
    assert_eq!(before, tenant_digest(&db, ta).await, "B changed A's data");
    // A's lease is intact and A's own ack takes it.
    let (s, v) = a.ack_batch(common::acks_for(&pop, "completed", None)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v[0]["success"], true, "{v}");
}

#[tokio::test]
async fn an_ephemeral_queue_of_another_tenant_does_not_exist() {
    let (_, a, other) = setup().await;
    let q = unique("eph-tenant");
    let (s, v) = a
        .post(
            "/api/v1/ephemeral/configure",
            &json!({"queue": q, "options": {"maxLength": 5}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = a
        .post(
            "/api/v1/ephemeral/push",
            &json!({"queue": q, "messages": [{"payload": "a's"}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, popped) = a.get(&format!("/api/v1/ephemeral/pop?queue={q}")).await;
    assert_eq!(s, StatusCode::OK);
    let id = popped["messages"][0]["id"].clone();
    // B sees no such queue: the same 404 as a name nobody used, and an empty pop.
    let (s, v) = other
        .get(&format!("/api/v1/ephemeral/queues/{q}/depth"))
        .await;
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::NOT_FOUND, json!("ephemeral_queue_not_found"))
    );
    let (_, v) = other.get("/api/v1/ephemeral/queues").await;
    assert!(
        !v["queues"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["queue"] == q),
        "{v}"
    );
    let (_, v) = other
        .post(
            "/api/v1/ephemeral/ack",
            &json!({"queue": q, "acks": [{"id": id}]}),
        )
        .await;
    assert_eq!(
        v["results"][0]["outcome"], "stale",
        "B's ack settles nothing of A's: {v}"
    );
    let (_, v) = other
        .post("/api/v1/ephemeral/reset", &json!({"queue": q}))
        .await;
    assert_eq!(v["dropped"], 0);
    let (_, v) = other.delete(&format!("/api/v1/ephemeral/queue/{q}")).await;
    assert_eq!(v["deleted"], false);
    // A's queue is untouched: its lease still acks.
    let (_, v) = a
        .post(
            "/api/v1/ephemeral/ack",
            &json!({"queue": q, "acks": [{"id": id}]}),
        )
        .await;
    assert_eq!(v["results"][0]["outcome"], "acked", "{v}");
    let (s, v) = a.get(&format!("/api/v1/ephemeral/queues/{q}/depth")).await;
    assert_eq!(
        (s, v["options"]["maxLength"].clone()),
        (StatusCode::OK, json!(5)),
        "{v}"
    );
}

#[tokio::test]
async fn a_stream_of_another_tenant_is_out_of_reach() {
    let (_b, a, other) = setup().await;
    let (src, name) = (unique("tst-src"), unique("tst-q"));
    a.push(json!([{"queue": src, "transactionId": "m1", "payload": {"s": "secret-of-A"}}]))
        .await;
    let reg = json!({"name": name, "source_queue": src, "config_hash": "h"});
    let (_, v) = a.post("/streams/v1/queries", &reg).await;
    let qid = v["query_id"].clone();
    let pop = a
        .pop(&src, "consumerGroup=streams.a&batch=10")
        .await
        .expect("A's batch");
    let pid = pop["messages"][0]["partitionId"].clone();
    let cycle = |query: &Value, lease: &Value| {
        json!({"query_id": query, "partition_id": pid, "consumer_group": "streams.a",
               "state_ops": [{"type": "upsert", "key": "k", "value": {"s": "secret-of-A"}}],
               "ack": {"transactionId": "m1", "leaseId": lease}})
    };
    // B reads A's state, commits against A's query and partition, deletes A's query:
    // each answers as for ids and names nobody has.
    let get = json!({"query_id": qid, "partition_id": pid});
    let (s, v) = other.post("/streams/v1/state/get", &get).await;
    assert_eq!((s, v["rows"].clone()), (StatusCode::OK, json!([])));
    let (_, v) = other
        .post("/streams/v1/cycle", &cycle(&qid, &pop["leaseId"]))
        .await;
    assert_eq!(v["success"], false, "{v}");
    assert!(v["error"].as_str().unwrap().contains("not found"), "{v}");
    let (_, v) = other.delete(&format!("/streams/v1/queries/{name}")).await;
    assert_eq!(v["deleted"], false);
    // The same name is B's own query; its cycle on A's partition is refused too.
    let (_, v) = other.post("/streams/v1/queries", &reg).await;
    assert_eq!(v["fresh"], true, "{v}");
    assert_ne!(v["query_id"], qid);
    let (_, v) = other
        .post("/streams/v1/cycle", &cycle(&v["query_id"], &pop["leaseId"]))
        .await;
    assert_eq!(v["success"], false, "{v}");
    // A's own cycle still commits, and A alone reads its state.
    let (_, v) = a
        .post("/streams/v1/cycle", &cycle(&qid, &pop["leaseId"]))
        .await;
    assert_eq!(v["success"], true, "{v}");
    let (_, v) = a.post("/streams/v1/state/get", &get).await;
    assert_eq!(v["rows"][0]["value"]["s"], "secret-of-A");
    let (_, v) = other.post("/streams/v1/state/get", &get).await;
    assert_eq!(v["rows"], json!([]));
}
