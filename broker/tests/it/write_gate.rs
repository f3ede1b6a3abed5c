//! One gate for every write that appends messages (docs/availability.md, "One gate for
//! every write"), over real HTTP and a real PostgreSQL: while push maintenance is on, or
//! while a partition has spooled pushes not yet replayed, a transaction that pushes, a
//! stream cycle with sink items and a DLQ redrive answer 503 with `Retry-After` and
//! write nothing; the timer sweep waits (the timer stays due) and delivers after the
//! spooled records. Each partition ends in the order the broker accepted: the spooled
//! push first.
//!
//! The modes are database-wide: the tests of this file run one at a time and switch them
//! off before and after (as broker/tests/it/spool.rs does).

use crate::common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::{acks_for, admin, modes_off, spool_dir, start_with, timers_pending, unique, Broker};
use queen_broker::engine::spool::{Record, Spool};
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

const TENANT: &str = "00000000-0000-0000-0000-000000000001";

/// A broker with a spool, its timer sweeper every 100 ms.
async fn spooling_broker(dir: &std::path::Path) -> Broker {
    let dir = dir.to_path_buf();
    start_with(move |c| {
        c.spool_dir = Some(dir);
        c.shared_state_ms = 100;
        c.pool_timeout_ms = 1_000;
        c.timer_sweep_ms = 100;
    })
    .await
}

async fn maintenance(b: &Broker, enabled: bool) {
    let (s, v) = b
        .post("/api/v1/system/maintenance", &json!({ "enabled": enabled }))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["maintenanceMode"], enabled, "{v}");
}

/// Push maintenance on, then `{"n": 0}` pushed to `q` answered `buffered`.
async fn spool_first_push(b: &Broker, q: &str) {
    maintenance(b, true).await;
    let res = b
        .push(json!([{"queue": q, "transactionId": "spooled", "payload": {"n": 0}}]))
        .await;
    assert_eq!(res[0]["status"], "buffered", "{res:?}");
}

/// Push maintenance off, then waits (bounded) until the spool holds nothing.
async fn off_and_drained(b: &Broker) {
    maintenance(b, false).await;
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, v) = b.get("/api/v1/status/buffers").await;
        if v["pending"] == 0 {
            return;
        }
        assert!(Instant::now() < until, "the spool did not drain: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// POST answering status, `Retry-After` and body.
async fn post_full(b: &Broker, path: &str, body: &Value) -> (StatusCode, Option<String>, Value) {
    let r = b
        .http
        .post(format!("{}{path}", b.base))
        .json(body)
        .send()
        .await
        .expect("request");
    let status = r.status();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|h| h.to_str().unwrap().to_string());
    let v: Value = r.json().await.unwrap_or(Value::Null);
    (status, retry, v)
}

/// A refusal of the gate: 503, `Retry-After`, the broker's JSON error body.
fn assert_refused(what: &str, (s, retry, v): &(StatusCode, Option<String>, Value)) {
    assert_eq!(*s, StatusCode::SERVICE_UNAVAILABLE, "{what}: {v}");
    assert!(retry.is_some(), "{what}: no Retry-After");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("nothing was written")),
        "{what}: {v}"
    );
}

/// Messages stored in `q`, in offset order: each one's `n` (payload) or its txn.
async fn stored(q: &str) -> Vec<String> {
    admin()
        .await
        .query(
            "SELECT COALESCE(f.payload->>'n', f.payload->>'sum', f.transaction_id)
               FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id,
                    LATERAL (SELECT s.blob, s.base_offset FROM queen.log_segments s
                              WHERE s.partition_id = p.id) s,
                    LATERAL queen.decode_segment_v1(s.blob) f
              WHERE qu.name = $1 ORDER BY s.base_offset, f.frame_index",
            &[&q],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

fn push_txn(q: &str) -> Value {
    json!({"operations": [
        {"type": "push", "items": [{"queue": q, "transactionId": "txn-b", "payload": {"n": 1}}]}
    ]})
}

/// write_gate::a_transaction_in_push_maintenance_is_refused_and_writes_nothing
#[tokio::test]
async fn a_transaction_in_push_maintenance_is_refused_and_writes_nothing() {
    common::exclusive().await;
    modes_off().await;
    let b = spooling_broker(&spool_dir()).await;
    let q = unique("gate-txn");
    spool_first_push(&b, &q).await;
    let r = post_full(&b, "/api/v1/transaction", &push_txn(&q)).await;
    assert_refused("transaction", &r);
    assert!(
        stored(&q).await.is_empty(),
        "nothing written during maintenance"
    );
    // A transaction without pushes (acks only, kv) is not an append: served.
    let (s, v) = b
        .post("/api/v1/transaction", &json!({"operations": []}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    off_and_drained(&b).await;
    let (s, v) = b.post("/api/v1/transaction", &push_txn(&q)).await;
    assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(stored(&q).await, ["0", "1"], "the spooled push first");
    modes_off().await;
}

/// write_gate::a_transaction_behind_spooled_records_waits_for_them_or_is_refused: push
/// maintenance off, but the partition has spooled records the replay cannot pass (its
/// partition row locked by a session): the transaction is a 503 that wrote nothing;
/// released, the replay drains and the transaction lands behind.
#[tokio::test]
async fn a_transaction_behind_spooled_records_waits_for_them_or_is_refused() {
    common::exclusive().await;
    modes_off().await;
    let q = unique("gate-held");
    let first = common::start().await;
    first
        .push(json!([{"queue": q, "transactionId": "first", "payload": {"n": 0}}]))
        .await;
    let dir = spool_dir();
    {
        let s = Spool::open(&dir, 1 << 30).unwrap();
        s.append(vec![Record {
            seq: 0,
            tenant: Uuid::parse_str(TENANT).unwrap(),
            queue: q.clone(),
            partition: "Default".into(),
            txn: "spooled".into(),
            message_id: Uuid::now_v7(),
            trace: None,
            encrypted: false,
            maybe_written: false,
            spooled_at_ms: 0,
            payload: br#"{"n":5}"#.to_vec(),
            producer_sub: None,
        }])
        .await
        .unwrap();
    }
    let mut db = admin().await;
    // The partition's id first: on Citus a row lock must name its shard's key.
    let pid: Uuid = db
        .query_one(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues qu ON qu.id = p.queue_id
              WHERE qu.name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0);
    let tx = db.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM queen.log_partitions WHERE id = $1 FOR UPDATE",
        &[&pid],
    )
    .await
    .unwrap();
    let b = spooling_broker(&dir).await;
    let r = post_full(&b, "/api/v1/transaction", &push_txn(&q)).await;
    assert_refused("transaction behind spooled records", &r);
    let (_, v) = b.get("/api/v1/status/buffers").await;
    assert_eq!(v["pending"], 1, "the replay is held: {v}");
    tx.rollback().await.unwrap();
    off_and_drained(&b).await;
    let (s, v) = b.post("/api/v1/transaction", &push_txn(&q)).await;
    assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(stored(&q).await, ["0", "5", "1"]);
    modes_off().await;
}

/// write_gate::a_stream_cycle_with_sinks_in_push_maintenance_is_refused_whole
#[tokio::test]
async fn a_stream_cycle_with_sinks_in_push_maintenance_is_refused_whole() {
    common::exclusive().await;
    modes_off().await;
    let b = spooling_broker(&spool_dir()).await;
    let (source, sink) = (unique("gate-src"), unique("gate-sink"));
    b.push(json!([{"queue": source, "transactionId": "m", "payload": {"n": 7}}]))
        .await;
    let (s, v) = b
        .post(
            "/streams/v1/queries",
            &json!({"name": unique("gq"), "source_queue": source, "sink_queue": sink,
                    "config_hash": "h1"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let query = v["query_id"].as_str().unwrap().to_string();
    let group = format!("streams.{query}");
    let pop = b
        .pop(
            &source,
            &format!("batch=10&wait=false&leaseTime=300&consumerGroup={group}"),
        )
        .await
        .expect("the source message");
    let last = &pop["messages"][0];
    let body = json!({"query_id": query, "partition_id": last["partitionId"],
        "consumer_group": group,
        "state_ops": [{"type": "upsert", "key": "w", "value": {"acc": 7}}],
        "push_items": [{"queue": sink, "partition": "Default", "payload": {"sum": 7}}],
        "ack": {"transactionId": last["transactionId"], "leaseId": pop["leaseId"],
                "status": "completed", "count": 1},
        "release_lease": true});
    spool_first_push(&b, &sink).await;
    let r = post_full(&b, "/streams/v1/cycle", &body).await;
    assert_refused("stream cycle", &r);
    assert!(stored(&sink).await.is_empty());
    let (_, st) = b
        .post(
            "/streams/v1/state/get",
            &json!({"query_id": query, "partition_id": last["partitionId"], "keys": []}),
        )
        .await;
    assert_eq!(st["rows"], json!([]), "no state written: {st}");
    off_and_drained(&b).await;
    let (s, v) = b.post("/streams/v1/cycle", &body).await;
    assert_eq!((s, &v["success"]), (StatusCode::OK, &json!(true)), "{v}");
    assert_eq!(stored(&sink).await, ["0", "7"], "the spooled push first");
    modes_off().await;
}

/// write_gate::a_due_timer_waits_out_push_maintenance_and_lands_after_the_spool
#[tokio::test]
async fn a_due_timer_waits_out_push_maintenance_and_lands_after_the_spool() {
    common::exclusive().await;
    modes_off().await;
    let b = spooling_broker(&spool_dir()).await;
    let q = unique("gate-timer");
    spool_first_push(&b, &q).await;
    let payload = base64::engine::general_purpose::STANDARD.encode(r#"{"n":2}"#);
    let (s, v) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [{"op": "schedule", "queue": q, "timerKey": "due",
                                    "payload": payload, "delayMs": 0}]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "scheduling is no append: {v}");
    // Fifteen sweep intervals: a sweeper that ignored the gate would have delivered it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(timers_pending(&q).await, 1, "the due timer waits, not lost");
    assert!(
        stored(&q).await.is_empty(),
        "nothing delivered during maintenance"
    );
    off_and_drained(&b).await;
    let until = Instant::now() + Duration::from_secs(15);
    while timers_pending(&q).await > 0 {
        assert!(Instant::now() < until, "the timer was never delivered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stored(&q).await, ["0", "2"], "the spooled push first");
    modes_off().await;
}

/// write_gate::a_dlq_redrive_in_push_maintenance_is_refused_and_moves_nothing: by ids, by
/// queue and by Queen's message address, each a 503; afterwards it lands behind the
/// spooled push.
#[tokio::test]
async fn a_dlq_redrive_in_push_maintenance_is_refused_and_moves_nothing() {
    common::exclusive().await;
    modes_off().await;
    let b = spooling_broker(&spool_dir()).await;
    let q = unique("gate-dlq");
    b.configure(&q, json!({"retryLimit": 0})).await;
    b.push(json!([{"queue": q, "transactionId": "poison", "payload": {"n": 9}}]))
        .await;
    let pop = b.pop(&q, "batch=1").await.expect("the message");
    let pid = pop["partitionId"].as_str().unwrap().to_string();
    let (_, v) = b.ack_batch(acks_for(&pop, "failed", Some("boom"))).await;
    assert_eq!(v[0]["dlq"], true, "{v}");
    let (_, v) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    let id = v["messages"][0]["dlqId"].as_str().unwrap().to_string();
    spool_first_push(&b, &q).await;
    for (what, path, body) in [
        (
            "by ids",
            "/api/v1/dlq/redrive".to_string(),
            json!({"ids": [id]}),
        ),
        (
            "by queue",
            "/api/v1/dlq/redrive".to_string(),
            json!({"queue": q}),
        ),
        ("replay", format!("/api/v1/dlq/{id}/replay"), json!({})),
        (
            "retry",
            format!("/api/v1/messages/{pid}/poison/retry"),
            json!({}),
        ),
    ] {
        let r = post_full(&b, &path, &body).await;
        assert_refused(what, &r);
    }
    assert_eq!(
        stored(&q).await,
        ["9"],
        "nothing redriven during maintenance"
    );
    let (_, v) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(
        v["messages"].as_array().unwrap().len(),
        1,
        "the row stays: {v}"
    );
    off_and_drained(&b).await;
    let (s, v) = b.post("/api/v1/dlq/redrive", &json!({"ids": [id]})).await;
    assert_eq!((s, &v["moved"]), (StatusCode::OK, &json!(1)), "{v}");
    assert_eq!(stored(&q).await, ["9", "0", "9"], "the spooled push first");
    modes_off().await;
}
