//! Queen's streams over real HTTP (docs/decisions.md, "Streams"): a cycle commits its
//! state ops, sink pushes and source ack together or not at all; a retried cycle is
//! applied once; two runners of one query cannot both commit the same messages; an idle
//! flush (a cycle without an ack) cannot commit over state that changed since it read it; a
//! registration with another config hash is a 409 until `reset`; bad input is a 400
//! naming its field and writes nothing.

use crate::common;

use common::{admin, metric, metrics, start, unique, Broker};
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A registered query over a fresh source queue holding `n` messages `{"n": i}`.
struct Stream {
    source: String,
    sink: String,
    query_id: String,
    group: String,
}

async fn stream(b: &Broker, n: usize) -> Stream {
    let source = unique("st-src");
    let sink = unique("st-sink");
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"queue": source, "transactionId": format!("m{i}"), "payload": {"n": i}}))
        .collect();
    b.push(json!(items)).await;
    let (s, v) = b
        .post(
            "/streams/v1/queries",
            &json!({"name": unique("q"), "source_queue": source, "sink_queue": sink,
                    "config_hash": "h1"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["fresh"], true);
    let query_id = v["query_id"].as_str().unwrap().to_string();
    Stream {
        group: format!("streams.{query_id}"),
        source,
        sink,
        query_id,
    }
}

impl Stream {
    async fn pop(&self, b: &Broker, extra: &str) -> Option<Value> {
        b.pop(
            &self.source,
            &format!("batch=100&wait=false&consumerGroup={}{extra}", self.group),
        )
        .await
    }

    /// A cycle as the SDK writes one: the sum of the batch upserted under `key`, one sink
    /// item, the ack through the batch's last message.
    fn cycle(&self, pop: &Value, key: &str) -> Value {
        let msgs = pop["messages"].as_array().unwrap();
        let sum: i64 = msgs.iter().map(|m| m["data"]["n"].as_i64().unwrap()).sum();
        let last = msgs.last().unwrap();
        json!({"query_id": self.query_id, "partition_id": last["partitionId"],
               "consumer_group": self.group,
               "state_ops": [{"type": "upsert", "key": key, "value": {"acc": sum}}],
               "push_items": [{"queue": self.sink, "partition": "Default", "payload": {"sum": sum}}],
               "ack": {"transactionId": last["transactionId"], "leaseId": pop["leaseId"],
                       "status": "completed", "count": msgs.len()},
               "release_lease": true})
    }

    async fn state(&self, b: &Broker, pid: &Value) -> Vec<Value> {
        let (s, v) = b
            .post(
                "/streams/v1/state/get",
                &json!({"query_id": self.query_id, "partition_id": pid, "keys": []}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["rows"].as_array().unwrap().clone()
    }

    async fn sink_count(&self) -> i64 {
        admin()
            .await
            .query_one(
                "SELECT COALESCE(sum(p.last_offset + 1), 0)::bigint FROM queen.log_partitions p
                   JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
                &[&self.sink],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn committed(&self) -> i64 {
        admin()
            .await
            .query_opt(
                "SELECT c.committed FROM queen.log_consumers c
                   JOIN queen.log_partitions p ON p.id = c.partition_id
                   JOIN queen.queues q ON q.id = p.queue_id
                  WHERE q.name = $1 AND c.consumer_group = $2",
                &[&self.source, &self.group],
            )
            .await
            .unwrap()
            .map_or(-1, |r| r.get(0))
    }
}

async fn cycle(b: &Broker, body: &Value) -> Value {
    let (s, v) = b.post("/streams/v1/cycle", body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

#[tokio::test]
async fn a_cycle_commits_state_sink_and_source_ack_together() {
    let b = start().await;
    let st = stream(&b, 3).await;
    let pop = st.pop(&b, "").await.expect("the batch");
    let v = cycle(&b, &st.cycle(&pop, "w")).await;
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(v["queueName"], st.source.as_str());
    assert_eq!(v["state_ops_applied"], 1);
    assert_eq!(v["push_results"][0]["status"], "queued");
    assert_eq!(v["push_results"][0]["queueName"], st.sink.as_str());
    assert_eq!(
        v["ack_result"],
        json!({"success": true, "count": 3, "lease_released": true, "dlq": false})
    );
    let rows = st.state(&b, &pop["messages"][0]["partitionId"]).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["key"], "w");
    assert_eq!(rows[0]["value"], json!({"acc": 3}));
    assert_eq!(
        st.committed().await,
        2,
        "the cursor is past the batch's last message"
    );
    assert!(st.pop(&b, "").await.is_none(), "nothing is delivered again");
    let sunk = b.pop(&st.sink, "wait=false").await.expect("the sink item");
    assert_eq!(sunk["messages"][0]["data"], json!({"sum": 3}));
    let m = metrics(&b).await;
    assert_eq!(
        metric(&m, "queen_stream_cycles_total{result=\"committed\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_refused_cycle_writes_nothing() {
    let b = start().await;
    let st = stream(&b, 2).await;
    let pop = st.pop(&b, "").await.expect("the batch");
    let mut body = st.cycle(&pop, "w");
    // The state op and the sink push run before the ack, whose lease is wrong: the
    // whole cycle rolls back.
    body["ack"]["leaseId"] = json!("not-the-lease");
    let v = cycle(&b, &body).await;
    assert_eq!(v["success"], false, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("invalid or expired lease"),
        "{v}"
    );
    assert_eq!(v["state_ops_applied"], 0);
    let pid = pop["messages"][0]["partitionId"].clone();
    assert!(st.state(&b, &pid).await.is_empty(), "no state");
    assert_eq!(st.sink_count().await, 0, "no sink message");
    assert_eq!(st.committed().await, -1, "the cursor did not move");
    // The right lease still commits it.
    let v = cycle(&b, &st.cycle(&pop, "w")).await;
    assert_eq!(v["success"], true, "{v}");
    let m = metrics(&b).await;
    assert_eq!(
        metric(&m, "queen_stream_cycles_total{result=\"refused\"}"),
        1.0
    );
}

#[tokio::test]
async fn a_retried_cycle_is_applied_once() {
    let b = start().await;
    let st = stream(&b, 4).await;
    let pop = st.pop(&b, "").await.expect("the batch");
    let body = st.cycle(&pop, "w");
    let first = cycle(&b, &body).await;
    assert_eq!(first["success"], true, "{first}");
    // The answer was lost and the SDK sends the same bytes again.
    let again = cycle(&b, &body).await;
    assert_eq!(again["success"], true, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(st.sink_count().await, 1, "the sink item once");
    assert_eq!(st.committed().await, 3);
    let m = metrics(&b).await;
    assert_eq!(
        metric(&m, "queen_stream_cycles_total{result=\"replayed\"}"),
        1.0
    );
}

#[tokio::test]
async fn two_runners_cannot_both_commit_the_same_messages() {
    let b = start().await;
    let st = stream(&b, 3).await;
    // Runner A's lease runs out (waited for on the clock of the database, not guessed).
    let a = st.pop(&b, "&leaseSeconds=1").await.expect("A's batch");
    let db = admin().await;
    loop {
        let live: bool = db
            .query_one(
                "SELECT bool_or(l.lease_expires_at > clock_timestamp()) FROM queen.log_leases l
                  WHERE l.consumer_group = $1",
                &[&st.group],
            )
            .await
            .unwrap()
            .get::<_, Option<bool>>(0)
            .unwrap_or(false);
        if !live {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Runner B is given the same messages and commits them.
    let bb = st.pop(&b, "").await.expect("B's batch");
    let txns = |p: &Value| -> Vec<Value> {
        p["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["transactionId"].clone())
            .collect()
    };
    assert_eq!(txns(&a), txns(&bb), "the same messages");
    let vb = cycle(&b, &st.cycle(&bb, "by-b")).await;
    assert_eq!(vb["success"], true, "{vb}");
    // A's late cycle for the same messages is refused and writes nothing.
    let va = cycle(&b, &st.cycle(&a, "by-a")).await;
    assert_eq!(va["success"], false, "{va}");
    let keys: Vec<Value> = st
        .state(&b, &a["messages"][0]["partitionId"])
        .await
        .iter()
        .map(|r| r["key"].clone())
        .collect();
    assert_eq!(keys, vec![json!("by-b")]);
    assert_eq!(st.sink_count().await, 1);
}

#[tokio::test]
async fn a_changed_config_hash_is_a_409_until_reset() {
    let b = start().await;
    let st = stream(&b, 1).await;
    let pop = st.pop(&b, "").await.expect("the batch");
    cycle(&b, &st.cycle(&pop, "w")).await;
    let name = admin()
        .await
        .query_one(
            "SELECT name FROM queen.stream_queries WHERE id = $1::text::uuid",
            &[&st.query_id],
        )
        .await
        .unwrap()
        .get::<_, String>(0);
    let reg = |hash: &str, reset: bool| json!({"name": name, "source_queue": st.source, "config_hash": hash, "reset": reset});
    let (s, v) = b.post("/streams/v1/queries", &reg("h2", false)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["success"], false);
    assert_eq!(v["query_id"], st.query_id.as_str());
    assert!(v["error"]
        .as_str()
        .unwrap()
        .starts_with("config_hash mismatch"));
    let pid = pop["messages"][0]["partitionId"].clone();
    assert_eq!(
        st.state(&b, &pid).await.len(),
        1,
        "a conflict keeps the state"
    );
    let (s, v) = b.post("/streams/v1/queries", &reg("h2", true)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["fresh"].clone(), v["reset"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(v["query_id"], st.query_id.as_str(), "the id is kept");
    assert!(st.state(&b, &pid).await.is_empty(), "reset wiped the state");
    // Deleting the query (ours) takes it away; a second delete finds nothing.
    let (s, v) = b.delete(&format!("/streams/v1/queries/{name}")).await;
    assert_eq!((s, v["deleted"].clone()), (StatusCode::OK, json!(true)));
    let (_, v) = b.delete(&format!("/streams/v1/queries/{name}")).await;
    assert_eq!(v["deleted"], false);
}

#[tokio::test]
async fn bad_input_is_a_400_naming_the_field_and_writes_nothing() {
    let b = start().await;
    let st = stream(&b, 1).await;
    let pop = st.pop(&b, "").await.expect("the batch");
    let pid = pop["messages"][0]["partitionId"].clone();
    let cases = [
        (json!({"partition_id": pid}), "query_id is required"),
        (
            json!({"query_id": st.query_id, "partition_id": "x"}),
            "not a uuid",
        ),
        (
            json!({"query_id": st.query_id, "partition_id": pid,
                   "state_ops": [{"type": "merge", "key": "k"}]}),
            "state_ops[0].type: Unknown state_op type: merge",
        ),
        (
            json!({"query_id": st.query_id, "partition_id": pid,
                   "push_items": [{"payload": {}}]}),
            "push_items[0].queue",
        ),
        (
            json!({"query_id": st.query_id, "partition_id": pid, "ack": {"count": 1}}),
            "ack.transactionId is required",
        ),
        (
            json!({"query_id": st.query_id, "partition_id": pid, "colour": "red"}),
            "colour",
        ),
    ];
    for (body, text) in cases {
        let (s, v) = b.post("/streams/v1/cycle", &body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert!(v["error"].as_str().unwrap().contains(text), "{body}: {v}");
    }
    let (s, v) = b
        .post(
            "/streams/v1/queries",
            &json!({"name": "x", "config_hash": "h"}),
        )
        .await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("source_queue is required"))
    );
    let (s, _) = b
        .post("/streams/v1/state/get", &json!({"query_id": st.query_id}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // An unknown query is the cycle's refusal (Queen's 200 with success false).
    let v = cycle(
        &b,
        &json!({"query_id": uuid::Uuid::new_v4(), "partition_id": pid}),
    )
    .await;
    assert_eq!(v["success"], false);
    assert!(v["error"].as_str().unwrap().contains("not found"), "{v}");
    assert_eq!(st.committed().await, -1);
}

#[tokio::test]
async fn a_gate_cycle_keeps_the_lease_and_a_failed_ack_files_the_dlq() {
    let b = start().await;
    let st = stream(&b, 3).await;
    let pop = st.pop(&b, "").await.expect("the batch");
    let msgs = pop["messages"].as_array().unwrap();
    let pid = msgs[0]["partitionId"].clone();
    // The allowed prefix (m0) is acked, the lease kept: the rest is not delivered to
    // anyone else while it lasts.
    let v = cycle(
        &b,
        &json!({"query_id": st.query_id, "partition_id": pid, "consumer_group": st.group,
                "release_lease": false,
                "ack": {"transactionId": msgs[0]["transactionId"], "leaseId": pop["leaseId"]}}),
    )
    .await;
    assert_eq!(v["ack_result"]["lease_released"], false, "{v}");
    assert_eq!(st.committed().await, 0);
    assert!(st.pop(&b, "").await.is_none(), "still leased");
    // m2 failed: m1 is committed, m2 goes to the DLQ with the error.
    let v = cycle(
        &b,
        &json!({"query_id": st.query_id, "partition_id": pid, "consumer_group": st.group,
                "ack": {"transactionId": msgs[2]["transactionId"], "leaseId": pop["leaseId"],
                        "status": "failed", "error": "bad input"}}),
    )
    .await;
    assert_eq!(v["ack_result"]["dlq"], true, "{v}");
    assert_eq!(st.committed().await, 2);
    let row = admin()
        .await
        .query_one(
            "SELECT transaction_id, error FROM queen.log_dlq WHERE consumer_group = $1",
            &[&st.group],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "m2");
    assert_eq!(row.get::<_, String>(1), "bad input");
}

#[tokio::test]
async fn a_cycle_ack_is_not_applied_again_by_the_fast_path() {
    let b = start().await;
    let st = stream(&b, 3).await;
    // This broker served the pop, so the ack registry holds the batch.
    let pop = st.pop(&b, "").await.expect("the batch");
    let msgs = pop["messages"].as_array().unwrap().clone();
    let v = cycle(
        &b,
        &json!({"query_id": st.query_id, "partition_id": msgs[0]["partitionId"],
                "consumer_group": st.group, "release_lease": false,
                "ack": {"transactionId": msgs[0]["transactionId"], "leaseId": pop["leaseId"]}}),
    )
    .await;
    assert_eq!(v["ack_result"]["count"], 1, "{v}");
    // The whole batch acked afterwards under the same lease: the cycle's message is not
    // counted twice, the rest is acked once.
    let mut acks = common::acks_for(&pop, "completed", None);
    acks["consumerGroup"] = json!(st.group);
    let (s, v) = b.ack_batch(acks).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v.as_array().unwrap().iter().all(|r| r["success"] == true),
        "{v}"
    );
    let consumed: i64 = admin()
        .await
        .query_one(
            "SELECT c.total_consumed FROM queen.log_consumers c
               JOIN queen.log_partitions p ON p.id = c.partition_id
               JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1 AND c.consumer_group = $2",
            &[&st.source, &st.group],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!((st.committed().await, consumed), (2, 3));
    let m = metrics(&b).await;
    assert_eq!(
        metric(&m, "queen_acks_total{path=\"fast\"}"),
        0.0,
        "the registry's entry went with the cycle"
    );
}

/// The SDK's windowed aggregate as HTTP calls (Queen's JS runtime: `Runner.js`): a
/// tumbling window's state row `tumb:2␟<window>␟<key>` holds `{acc, windowStart,
/// windowEnd}`; a cycle closes a window by deleting its row and pushing its value; the
/// idle flush reads the ripe rows (`key_prefix` + `ripe_at_or_before`) and commits a
/// cycle without an ack that deletes and pushes them.
mod window {
    use super::*;

    pub const PREFIX: &str = "tumb:2\u{1f}";

    pub fn key(w: i64) -> String {
        format!("{PREFIX}{w}\u{1f}cust-C")
    }

    /// The stored accumulator of window `w` (2 s wide, starting at `w` ms).
    pub fn row(w: i64, sum: i64, count: i64) -> Value {
        json!({"acc": {"sum": sum, "count": count}, "windowStart": w, "windowEnd": w + 2000})
    }

    /// One message popped alone (the SDK pops batches; one message keeps the steps plain).
    pub async fn pop_one(b: &Broker, st: &Stream) -> Value {
        b.pop(
            &st.source,
            &format!("batch=1&wait=false&consumerGroup={}", st.group),
        )
        .await
        .expect("a message")
    }

    /// An acked cycle of the popped message: `ops` and the closed windows' values pushed.
    pub fn acked(st: &Stream, pop: &Value, ops: Value, emits: &[Value]) -> Value {
        let m = &pop["messages"][0];
        json!({"query_id": st.query_id, "partition_id": m["partitionId"],
               "consumer_group": st.group, "state_ops": ops,
               "push_items": emits.iter().map(|e| json!({"queue": st.sink, "partition": "cust-C",
                                                          "payload": e})).collect::<Vec<_>>(),
               "ack": {"transactionId": m["transactionId"], "leaseId": pop["leaseId"],
                       "status": "completed", "count": 1},
               "release_lease": true})
    }

    /// The idle flush's read: the ripe rows of the window operator.
    pub async fn ripe(b: &Broker, st: &Stream, pid: &Value, at: i64) -> Vec<Value> {
        let (s, v) = b
            .post(
                "/streams/v1/state/get",
                &json!({"query_id": st.query_id, "partition_id": pid, "keys": [],
                        "key_prefix": PREFIX, "ripe_at_or_before": at}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["rows"].as_array().unwrap().clone()
    }

    /// The idle flush's cycle over the rows it read: each deleted, its `acc` pushed, no ack.
    pub fn flush(st: &Stream, pid: &Value, rows: &[Value]) -> Value {
        json!({"query_id": st.query_id, "partition_id": pid, "consumer_group": st.group,
               "state_ops": rows.iter().map(|r| json!({"type": "delete", "key": r["key"]}))
                                .collect::<Vec<_>>(),
               "push_items": rows.iter().map(|r| json!({"queue": st.sink, "partition": "cust-C",
                                                         "payload": r["value"]["acc"]}))
                                 .collect::<Vec<_>>(),
               "ack": null, "release_lease": true})
    }

    /// Every window value the sink holds, in order.
    pub async fn emitted(b: &Broker, st: &Stream) -> Vec<Value> {
        let mut out = Vec::new();
        let g = unique("drain");
        while let Some(p) = b
            .pop(
                &st.sink,
                &format!("batch=100&wait=false&consumerGroup={g}&autoAck=true"),
            )
            .await
        {
            out.extend(
                p["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m["data"].clone()),
            );
        }
        out
    }
}

/// Queen's `tumblingPerPartitionIsolation` counted a message twice: the idle flush read a
/// ripe window, a cycle then closed the same window (deleted its row, pushed its value),
/// and the flush's cycle — no ack, so no lease to fence it — pushed the value again. The
/// flush is fenced by the state it read: the row it deletes is gone, so it writes nothing
/// (answered `success: true, fenced`: the SDK counts a `success: false` as an error); the
/// window is in the sink once.
#[tokio::test]
async fn an_idle_flush_cannot_emit_a_window_a_cycle_already_closed() {
    let b = start().await;
    let st = stream(&b, 2).await;
    let p0 = window::pop_one(&b, &st).await;
    let pid = p0["messages"][0]["partitionId"].clone();
    let open = json!([{"type": "upsert", "key": window::key(0), "value": window::row(0, 300, 1)}]);
    let v = cycle(&b, &window::acked(&st, &p0, open, &[])).await;
    assert_eq!(v["success"], true, "{v}");
    // The flush timer fires: window 0 is ripe.
    let rows = window::ripe(&b, &st, &pid, 2000).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    // Before its cycle is sent, the runner's next message (window 1) closes window 0.
    let p1 = window::pop_one(&b, &st).await;
    let close = json!([{"type": "delete", "key": window::key(0)},
                       {"type": "upsert", "key": window::key(2000), "value": window::row(2000, 301, 1)}]);
    let v = cycle(
        &b,
        &window::acked(&st, &p1, close, &[json!({"sum": 300, "count": 1})]),
    )
    .await;
    assert_eq!(v["success"], true, "{v}");
    // The flush's cycle arrives: the row it read is gone.
    let v = cycle(&b, &window::flush(&st, &pid, &rows)).await;
    assert!(
        v["fenced"]
            .as_str()
            .unwrap_or_default()
            .contains("no longer exists"),
        "a flush of a closed window is fenced out: {v}"
    );
    assert_eq!(
        (
            v["success"].clone(),
            v["state_ops_applied"].clone(),
            v["push_results"].clone()
        ),
        (json!(true), json!(0), json!([])),
        "not the SDK's error, nothing applied: {v}"
    );
    let m = metrics(&b).await;
    assert_eq!(
        metric(&m, "queen_stream_cycles_total{result=\"fenced\"}"),
        1.0
    );
    assert_eq!(
        window::emitted(&b, &st).await,
        vec![json!({"sum": 300, "count": 1})],
        "window 0 is in the sink once"
    );
    let keys: Vec<Value> = st
        .state(&b, &pid)
        .await
        .iter()
        .map(|r| r["key"].clone())
        .collect();
    assert_eq!(
        keys,
        vec![json!(window::key(2000))],
        "window 1 is still open"
    );
}

/// The other order of the same race, driven by a row lock: the flush's cycle is held on
/// the shard while the runner pops a late message of the same window and reads the
/// window's row. Unfenced, the flush deleted and emitted the window, and the runner's
/// cycle wrote it back with the late message added — the first message counted twice.
/// Fenced, the flush finds the source partition leased when it commits and writes nothing;
/// the runner's cycle commits, and the next flush emits the window once with both.
#[tokio::test]
async fn an_idle_flush_yields_to_the_cycle_holding_the_source_lease() {
    common::exclusive_on_citus().await;
    let b = start().await;
    let st = stream(&b, 2).await;
    let p0 = window::pop_one(&b, &st).await;
    let pid = p0["messages"][0]["partitionId"].clone();
    let open = json!([{"type": "upsert", "key": window::key(0), "value": window::row(0, 300, 1)}]);
    let v = cycle(&b, &window::acked(&st, &p0, open, &[])).await;
    assert_eq!(v["success"], true, "{v}");
    let rows = window::ripe(&b, &st, &pid, 2000).await;
    assert_eq!(rows.len(), 1, "{rows:?}");

    // Hold the shard row: the flush's cycle waits on it.
    let db = admin().await;
    let holder: i32 = db
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // (The shard's partition named: on Citus a row lock must name its shard's key.)
    db.batch_execute(&format!(
        "BEGIN; SELECT 1 FROM queen.stream_shards
          WHERE query_id = '{}' AND partition_id = '{}' FOR UPDATE",
        st.query_id,
        pid.as_str().unwrap()
    ))
    .await
    .unwrap();
    let flush = {
        let (http, url) = (b.http.clone(), format!("{}/streams/v1/cycle", b.base));
        let body = window::flush(&st, &pid, &rows);
        tokio::spawn(async move {
            let r = http.post(url).json(&body).send().await.expect("request");
            (r.status(), r.json::<Value>().await.expect("json"))
        })
    };
    while common::waiters_of(&db, "SELECT queen.streams_cycle_request_v1", holder)
        .await
        .is_empty()
    {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The runner pops a late message of window 0 and reads the window as it stands.
    let p1 = window::pop_one(&b, &st).await;
    let read = st.state(&b, &pid).await;
    assert_eq!(read[0]["value"], window::row(0, 300, 1));
    db.batch_execute("COMMIT").await.unwrap();
    let (s, v) = flush.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["fenced"].as_str().unwrap_or_default().contains("lease"),
        "the flush yields to the lease: {v}"
    );
    assert_eq!(
        (v["success"].clone(), v["state_ops_applied"].clone()),
        (json!(true), json!(0))
    );
    // The runner's cycle adds the late message to the window it read.
    let add = json!([{"type": "upsert", "key": window::key(0), "value": window::row(0, 605, 2)}]);
    let v = cycle(&b, &window::acked(&st, &p1, add, &[])).await;
    assert_eq!(v["success"], true, "{v}");
    // The next tick's flush (no lease now) closes the window once, with both messages.
    let rows = window::ripe(&b, &st, &pid, 2000).await;
    let v = cycle(&b, &window::flush(&st, &pid, &rows)).await;
    assert_eq!(v["success"], true, "{v}");
    assert_eq!(
        window::emitted(&b, &st).await,
        vec![json!({"sum": 605, "count": 2})],
        "each message is counted once"
    );
}
