//! Registry and fusion behaviour against real PostgreSQL over real HTTP (broker.md §2–§4):
//! each fast-path condition failing on its own takes the SQL path (proved by /metrics and
//! by the cursor rows), a stale registry hit is refused by PostgreSQL and answered as the
//! SQL path answers, folding, pool starvation, shutdown, DLQ hand-off, per-item errors.
//! The broker is the harness's; inspection and sabotage go through a separate superuser
//! connection (QUEEN_TEST_DATABASE_URL).

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{acks_for, admin, metric, metrics, start, start_with, unique, waiters_of, Broker};
use queen_broker::engine::fusion::{Parked, Verdict};
use queen_broker::engine::registry::Delivered;
use queen_broker::{serve, AppState, Config};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use uuid::Uuid;

const UNRESOLVED: &str = "unresolvable: transaction not in the ack window (hash purged or never \
                          pushed); if leased, the message redelivers";
const STALE: &str = "already committed: the cursor moved past this message before this ack";
const EXPIRED: &str = "invalid or expired lease";

// ---------------------------------------------------------------- helpers

const FAST: &str = "queen_acks_total{path=\"fast\"}";
const SQL: &str = "queen_acks_total{path=\"sql\"}";
const HITS: &str = "queen_ack_registry_hits_total";
const MISSES: &str = "queen_ack_registry_misses_total";
const ENTRIES: &str = "queen_ack_registry_entries";

fn evicted(cause: &str) -> String {
    format!("queen_ack_registry_evictions_total{{cause=\"{cause}\"}}")
}

/// The cursor row: (committed, batch_end, worker_id, batch_retry_count).
async fn cursor(
    db: &tokio_postgres::Client,
    pid: &str,
    group: &str,
) -> (i64, Option<i64>, Option<String>, i32) {
    let pid: Uuid = pid.parse().unwrap();
    let r = db
        .query_one(
            "SELECT c.committed, l.batch_end, l.worker_id, c.batch_retry_count
               FROM queen.log_consumers c
               JOIN queen.log_leases l USING (partition_id, consumer_group)
              WHERE partition_id = $1 AND consumer_group = $2",
            &[&pid, &group],
        )
        .await
        .expect("cursor row");
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

const QM: &str = "__QUEUE_MODE__";

/// Pushes `txns` (payload = index) to one partition of `q`, pops them in one batch.
async fn pushed_and_popped(b: &Broker, q: &str, partition: &str, txns: &[&str]) -> Value {
    let items: Vec<Value> = txns
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"queue": q, "partition": partition, "transactionId": t, "payload": i}))
        .collect();
    b.push(json!(items)).await;
    let pop = b
        .pop(q, &format!("batch={}", txns.len().max(1) * 2))
        .await
        .expect("pop");
    assert_eq!(
        pop["messages"].as_array().unwrap().len(),
        txns.len(),
        "{pop}"
    );
    pop
}

fn pid_of(pop: &Value) -> String {
    pop["partitionId"].as_str().unwrap().to_string()
}

fn last_offset(pop: &Value) -> i64 {
    pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].as_i64().unwrap())
        .max()
        .unwrap()
}

/// Waits until `n` calls of `func` (`log_ack_multi_v1`: a fusion flush, `log_ack_at_v1`:
/// an inline ack) are blocked by the backend `holder` (tests run in parallel).
async fn wait_for_blocked(db: &tokio_postgres::Client, func: &str, n: i64, holder: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = blocked(db, func, holder).await;
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{got} of {n} {func} blocked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many calls of `func` wait on a lock of `holder` now.
async fn blocked(db: &tokio_postgres::Client, func: &str, holder: i32) -> i64 {
    waiters_of(db, &format!("SELECT queen.{func}"), holder)
        .await
        .len() as i64
}

const MULTI: &str = "log_ack_multi_v1";
const AT: &str = "log_ack_at_v1";

/// Holds the cursor rows of `pids` locked until the returned transaction ends; also
/// returns the backend pid holding them.
async fn lock_cursors<'a>(
    db: &'a mut tokio_postgres::Client,
    pids: &[String],
) -> (tokio_postgres::Transaction<'a>, i32) {
    let pids: Vec<Uuid> = pids.iter().map(|p| p.parse().unwrap()).collect();
    let tx = db.transaction().await.unwrap();
    // One partition at a time: Citus locks rows of a distributed table only by an
    // equality filter on its distribution column.
    for pid in &pids {
        tx.execute(
            "SELECT 1 FROM queen.log_leases WHERE partition_id = $1 FOR UPDATE",
            &[pid],
        )
        .await
        .unwrap();
    }
    let holder = tx
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    (tx, holder)
}

async fn lock_cursor<'a>(
    db: &'a mut tokio_postgres::Client,
    pid: &str,
) -> (tokio_postgres::Transaction<'a>, i32) {
    lock_cursors(db, &[pid.to_string()]).await
}

type AckHandle = tokio::task::JoinHandle<(u16, Value)>;

/// Makes the shard of `x` and `y` (the same one) busy: with their cursor rows locked (by
/// the caller), `x`'s ack finds the shard idle and runs inline, blocked; `y`'s ack parks
/// and its flush blocks. Later acks on that shard park behind that flush.
async fn busy_shard(b: &Broker, x: &Value, y: &Value, holder: i32) -> (AckHandle, AckHandle) {
    let probe = admin().await;
    let hx = spawn_ack(b, acks_for(x, "completed", None));
    wait_for_blocked(&probe, AT, 1, holder).await;
    let hy = spawn_ack(b, acks_for(y, "completed", None));
    wait_for_blocked(&probe, MULTI, 1, holder).await;
    (hx, hy)
}

fn spawn_ack(b: &Broker, body: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    let http = b.http.clone();
    let url = format!("{}/api/v1/ack/batch", b.base);
    tokio::spawn(async move {
        let r = http.post(url).json(&body).send().await.unwrap();
        let s = r.status().as_u16();
        (s, r.json::<Value>().await.unwrap())
    })
}

fn all_ok_released(v: &Value) -> bool {
    v.as_array().is_some_and(|a| {
        !a.is_empty()
            && a.iter()
                .all(|x| x["success"] == true && x["leaseReleased"] == true && x["error"].is_null())
    })
}

// ---------------------------------------------- each fast-path condition on its own

#[tokio::test]
async fn partial_ack_alone_takes_the_sql_path() {
    let b = start().await;
    let db = admin().await;
    let q = unique("cond-partial");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b", "c"]).await;
    let (pid, lease) = (pid_of(&pop), pop["leaseId"].as_str().unwrap().to_string());
    let mut body = acks_for(&pop, "completed", None);
    body["acknowledgments"].as_array_mut().unwrap().truncate(2);
    let (s, v) = b.ack_batch(body).await;
    assert_eq!(s, 200);
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|x| x["success"] == true && x["leaseReleased"] == false),
        "{v}"
    );
    let ms = metrics(&b).await;
    assert_eq!((metric(&ms, FAST), metric(&ms, SQL)), (0.0, 2.0));
    assert_eq!((metric(&ms, HITS), metric(&ms, MISSES)), (0.0, 1.0));
    assert_eq!(
        metric(&ms, &evicted("sql")),
        1.0,
        "the SQL outcome evicts the entry"
    );
    assert_eq!(metric(&ms, ENTRIES), 0.0);
    // Partial ack: the cursor advanced over a and b, the lease is kept.
    let off_b = pop["messages"][1]["offset"].as_i64().unwrap();
    let (committed, end, worker, _) = cursor(&db, &pid, QM).await;
    assert_eq!(committed, off_b);
    assert_eq!(end, Some(last_offset(&pop)));
    assert_eq!(worker.as_deref(), Some(lease.as_str()));
}

#[tokio::test]
async fn one_non_completed_status_alone_takes_the_sql_path() {
    let b = start().await;
    let db = admin().await;
    let q = unique("cond-status");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let pid = pid_of(&pop);
    let mut body = acks_for(&pop, "completed", None);
    body["acknowledgments"][1]["status"] = json!("failed");
    body["acknowledgments"][1]["error"] = json!("boom");
    let (s, v) = b.ack_batch(body).await;
    assert_eq!(s, 200);
    assert!(
        v.as_array().unwrap().iter().all(|x| x["success"] == true),
        "{v}"
    );
    let ms = metrics(&b).await;
    assert_eq!((metric(&ms, FAST), metric(&ms, SQL)), (0.0, 2.0));
    // The registry is not even consulted; the SQL outcome kills the entry.
    assert_eq!((metric(&ms, HITS), metric(&ms, MISSES)), (0.0, 0.0));
    assert_eq!(metric(&ms, &evicted("sql")), 1.0);
    // failed under budget: cursor stops before b, lease released, one retry spent.
    let off_a = pop["messages"][0]["offset"].as_i64().unwrap();
    assert_eq!(cursor(&db, &pid, QM).await, (off_a, None, None, 1));
    let again = b.pop(&q, "batch=10").await.expect("b redelivers");
    assert_eq!(again["messages"][0]["transactionId"], "b");
}

#[tokio::test]
async fn wrong_lease_alone_takes_the_sql_path_and_keeps_the_entry() {
    let b = start().await;
    let db = admin().await;
    let q = unique("cond-lease");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let (pid, lease) = (pid_of(&pop), pop["leaseId"].as_str().unwrap().to_string());
    let mut body = acks_for(&pop, "completed", None);
    for a in body["acknowledgments"].as_array_mut().unwrap() {
        a["leaseId"] = json!(Uuid::now_v7().to_string());
    }
    // Each item with its own foreign lease would be two groups; use one foreign lease.
    let foreign = body["acknowledgments"][0]["leaseId"].clone();
    body["acknowledgments"][1]["leaseId"] = foreign;
    let (s, v) = b.ack_batch(body).await;
    assert_eq!(s, 200);
    for x in v.as_array().unwrap() {
        assert_eq!(
            (x["success"].clone(), x["error"].clone()),
            (json!(false), json!(EXPIRED)),
            "{v}"
        );
        assert_eq!(x["leaseReleased"], false);
    }
    let ms = metrics(&b).await;
    assert_eq!(
        (metric(&ms, FAST), metric(&ms, SQL), metric(&ms, MISSES)),
        (0.0, 2.0, 1.0)
    );
    // Another worker's SQL outcome does not evict the lease holder's entry.
    assert_eq!(
        (metric(&ms, ENTRIES), metric(&ms, &evicted("sql"))),
        (1.0, 0.0)
    );
    assert_eq!(
        cursor(&db, &pid, QM).await,
        (-1, Some(last_offset(&pop)), Some(lease.clone()), 0)
    );
    // The lease holder then takes the fast path.
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(all_ok_released(&v), "{v}");
    let ms = metrics(&b).await;
    assert_eq!(
        (metric(&ms, FAST), metric(&ms, HITS), metric(&ms, ENTRIES)),
        (2.0, 1.0, 0.0)
    );
    assert_eq!(
        cursor(&db, &pid, QM).await,
        (last_offset(&pop), None, None, 0)
    );
}

#[tokio::test]
async fn expired_registry_entry_alone_takes_the_sql_path() {
    let b = start().await;
    let db = admin().await;
    let q = unique("cond-ttl");
    b.push(json!([{"queue": q, "transactionId": "a", "payload": 1},
                  {"queue": q, "transactionId": "b", "payload": 2}]))
        .await;
    // Registry TTL = lease (1 s) + 10 s; the database lease is extended past that.
    let pop = b.pop(&q, "batch=10&leaseSeconds=1").await.unwrap();
    let (pid, lease) = (pid_of(&pop), pop["leaseId"].as_str().unwrap().to_string());
    let (s, v) = b
        .post(
            &format!("/api/v1/lease/{lease}/extend"),
            &json!({"seconds": 120}),
        )
        .await;
    assert_eq!(
        (s.as_u16(), v["success"].clone()),
        (200, json!(true)),
        "{v}"
    );
    tokio::time::sleep(Duration::from_millis(11_300)).await;
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(all_ok_released(&v), "{v}");
    let ms = metrics(&b).await;
    assert_eq!((metric(&ms, FAST), metric(&ms, SQL)), (0.0, 2.0));
    assert_eq!((metric(&ms, HITS), metric(&ms, MISSES)), (0.0, 1.0));
    assert_eq!(
        (metric(&ms, &evicted("ttl")), metric(&ms, ENTRIES)),
        (1.0, 0.0)
    );
    assert_eq!(
        cursor(&db, &pid, QM).await,
        (last_offset(&pop), None, None, 0)
    );
}

#[tokio::test]
async fn lru_evicted_entry_alone_takes_the_sql_path() {
    let b = start_with(|c| c.ack_registry_mb = 1).await;
    let db = admin().await;
    let q = unique("cond-lru");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let pid = pid_of(&pop);
    // Later leasing pops (recorded as the pop handler records them) overflow the 1 MiB cap.
    for i in 0..200 {
        b.state.registry.record(vec![Delivered {
            partition_id: Uuid::now_v7(),
            group: QM.into(),
            worker: Uuid::now_v7().to_string(),
            batch_end: 400,
            lease_seconds: Some(60),
            txns: (0..400).map(|k| format!("filler-{i}-{k}")).collect(),
        }]);
    }
    let ms = metrics(&b).await;
    assert!(metric(&ms, &evicted("lru")) >= 1.0);
    assert!(metric(&ms, "queen_ack_registry_bytes") <= 1024.0 * 1024.0);
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(all_ok_released(&v), "{v}");
    let ms = metrics(&b).await;
    assert_eq!((metric(&ms, FAST), metric(&ms, SQL)), (0.0, 2.0));
    assert_eq!((metric(&ms, HITS), metric(&ms, MISSES)), (0.0, 1.0));
    assert_eq!(
        cursor(&db, &pid, QM).await,
        (last_offset(&pop), None, None, 0)
    );
}

// ------------------------------------------------------------- stale registry hit

/// The lease expires in the database behind the registry's back; the registry still
/// grants the fast path, PostgreSQL refuses it and the by-hash path answers.
async fn stale_hit_answer(adjust: impl FnOnce(&mut Config)) -> (Value, HashMap<String, f64>) {
    let b = start_with(adjust).await;
    let db = admin().await;
    let q = unique("stale-hit");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let pid: Uuid = pid_of(&pop).parse().unwrap();
    db.execute(
        "UPDATE queen.log_leases SET lease_expires_at = now() - interval '1s'
          WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .unwrap();
    let (s, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert_eq!(s, 200);
    let (committed, _, _, _) = cursor(&db, &pid.to_string(), QM).await;
    assert_eq!(committed, -1, "nothing may be acked under an expired lease");
    (v, metrics(&b).await)
}

#[tokio::test]
async fn stale_registry_hit_is_refused_and_answered_like_the_sql_path() {
    let (fused, fm) = stale_hit_answer(|_| {}).await;
    let (unfused, um) = stale_hit_answer(|c| c.ack_fusion = false).await;
    let (sql_only, sm) = stale_hit_answer(|c| c.ack_registry = false).await;
    let expected = json!([
        {"index": 0, "transactionId": "a", "success": false, "error": EXPIRED,
         "leaseReleased": false, "dlq": false, "noop": false},
        {"index": 1, "transactionId": "b", "success": false, "error": EXPIRED,
         "leaseReleased": false, "dlq": false, "noop": false},
    ]);
    assert_eq!(sql_only, expected);
    assert_eq!(fused, sql_only);
    assert_eq!(unfused, sql_only);
    // The fast path was granted (hit) and refused by PostgreSQL (rejected row), the
    // answer came from the SQL path.
    assert_eq!(
        (metric(&fm, HITS), metric(&fm, FAST), metric(&fm, SQL)),
        (1.0, 0.0, 2.0)
    );
    // A lone ack runs inline: its refusal is a rejected row of no multi flush.
    assert_eq!(metric(&fm, "queen_ack_fusion_rejected_rows_total"), 1.0);
    assert_eq!(metric(&fm, "queen_ack_fusion_inline_total"), 1.0);
    assert_eq!(metric(&fm, "queen_ack_fusion_commits_total"), 0.0);
    assert_eq!(
        (metric(&um, HITS), metric(&um, FAST), metric(&um, SQL)),
        (1.0, 0.0, 2.0)
    );
    assert_eq!(
        (metric(&sm, HITS), metric(&sm, FAST), metric(&sm, SQL)),
        (0.0, 0.0, 2.0)
    );
    assert_eq!(metric(&sm, "queen_ack_registry_enabled"), 0.0);
}

// ------------------------------------------------------------------------ fusion

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_worker_acks_fold_into_one_row_and_share_its_verdict() {
    common::exclusive_on_citus().await;
    let b = start_with(|c| c.ack_fusion_shards = 1).await;
    let mut db = admin().await;
    let q = unique("fold");
    let x = pushed_and_popped(&b, &q, "x", &["x1"]).await;
    let y = pushed_and_popped(&b, &q, "y", &["y1"]).await;
    let p = pushed_and_popped(&b, &q, "p", &["p1", "p2"]).await;
    let fusion = b.state.fusion.as_ref().expect("fusion on");
    let before = fusion.stats();
    // Keep the only shard busy: X's inline ack and Y's flush block on their cursor rows.
    let (tx, holder) = lock_cursors(&mut db, &[pid_of(&x), pid_of(&y)]).await;
    let (hx, hy) = busy_shard(&b, &x, &y, holder).await;
    // Two fast-path acks of the same (partition, group, worker) park behind it. The
    // second one finds the entry because the pop's delivery is recorded again.
    let h1 = spawn_ack(&b, acks_for(&p, "completed", None));
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.state.registry.stats().hits < 3 {
        assert!(Instant::now() < deadline, "first ack of p never hit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.state.registry.record(vec![Delivered {
        partition_id: pid_of(&p).parse().unwrap(),
        group: QM.into(),
        worker: p["leaseId"].as_str().unwrap().into(),
        batch_end: last_offset(&p),
        lease_seconds: Some(60),
        txns: vec!["p1".into(), "p2".into()],
    }]);
    let h2 = spawn_ack(&b, acks_for(&p, "completed", None));
    while b.state.registry.stats().hits < 4 {
        assert!(Instant::now() < deadline, "second ack of p never hit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Nothing may be answered before its flush commits.
    assert!(!hx.is_finished() && !hy.is_finished());
    assert!(!h1.is_finished() && !h2.is_finished());
    // Connection discipline: two parked acks hold none; out are the inline ack's and
    // the blocked flush's.
    assert_eq!(metric(&metrics(&b).await, "queen_db_pool_in_use"), 2.0);
    tx.commit().await.unwrap();
    for h in [hx, hy, h1, h2] {
        let (s, v) = tokio::time::timeout(Duration::from_secs(20), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s, 200);
        assert!(all_ok_released(&v), "{v}");
    }
    let after = fusion.stats();
    assert_eq!(after.inline - before.inline, 1, "x found the shard idle");
    assert_eq!(after.commits - before.commits, 2, "{after:?}");
    assert_eq!(
        after.rows - before.rows,
        2,
        "y's row, then p's two acks as one row"
    );
    assert_eq!(after.acks - before.acks, 3);
    for pop in [&x, &y, &p] {
        assert_eq!(
            cursor(&db, &pid_of(pop), QM).await,
            (last_offset(pop), None, None, 0)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_workers_on_one_partition_never_fold() {
    common::exclusive_on_citus().await;
    let b = start_with(|c| c.ack_fusion_shards = 1).await;
    let mut db = admin().await;
    let q = unique("nofold");
    let x = pushed_and_popped(&b, &q, "x", &["x1"]).await;
    let y = pushed_and_popped(&b, &q, "y", &["y1"]).await;
    let p = pushed_and_popped(&b, &q, "p", &["p1", "p2"]).await;
    let fusion = b.state.fusion.as_ref().expect("fusion on");
    let before = fusion.stats();
    let (tx, holder) = lock_cursors(&mut db, &[pid_of(&x), pid_of(&y)]).await;
    let (hx, hy) = busy_shard(&b, &x, &y, holder).await;
    let parked = |worker: String| {
        let st: AppState = b.state.clone();
        let pid: Uuid = pid_of(&p).parse().unwrap();
        let end = last_offset(&p);
        tokio::spawn(async move {
            let f = st.fusion.as_ref().unwrap();
            f.ack(Parked {
                pid,
                group: QM.into(),
                worker,
                batch_end: end,
                count: 2,
            })
            .await
        })
    };
    // The impostor parks first, so its row has the lower input ordinal.
    let impostor = parked(Uuid::now_v7().to_string());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let holder = parked(p["leaseId"].as_str().unwrap().to_string());
    tokio::time::sleep(Duration::from_millis(150)).await;
    tx.commit().await.unwrap();
    for h in [hx, hy] {
        let (_, v) = h.await.unwrap();
        assert!(all_ok_released(&v), "{v}");
    }
    assert_eq!(impostor.await.unwrap(), Verdict::Rejected(EXPIRED.into()));
    assert_eq!(holder.await.unwrap(), Verdict::Committed);
    let after = fusion.stats();
    assert_eq!(after.commits - before.commits, 2, "{after:?}");
    assert_eq!(
        after.rows - before.rows,
        3,
        "y, then two workers as two rows"
    );
    assert_eq!(after.rejected_rows - before.rejected_rows, 1);
    assert_eq!(
        cursor(&db, &pid_of(&p), QM).await,
        (last_offset(&p), None, None, 0)
    );
}

/// Kills the backend of the `func` call blocked by `holder` (exactly one).
async fn kill_blocked(probe: &tokio_postgres::Client, func: &str, holder: i32) {
    let waiting = waiters_of(probe, &format!("SELECT queen.{func}"), holder).await;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let killed: bool = probe
        .query_one("SELECT pg_terminate_backend($1::int)", &[&waiting[0]])
        .await
        .unwrap()
        .get(0);
    assert!(killed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_that_fails_as_a_whole_answers_through_the_sql_path() {
    common::exclusive_on_citus().await;
    let b = start_with(|c| c.ack_fusion_shards = 1).await;
    let mut db = admin().await;
    let q = unique("flush-fail");
    let x = pushed_and_popped(&b, &q, "x", &["x1"]).await;
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let (tx, holder) = lock_cursors(&mut db, &[pid_of(&x), pid_of(&pop)]).await;
    let (hx, h) = busy_shard(&b, &x, &pop, holder).await;
    // The flush's connection dies mid-statement.
    let probe = admin().await;
    kill_blocked(&probe, MULTI, holder).await;
    // The by-hash fallback queues on the same row lock; release it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    tx.commit().await.unwrap();
    for h in [hx, h] {
        let (s, v) = tokio::time::timeout(Duration::from_secs(20), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s, 200);
        assert!(all_ok_released(&v), "{v}");
    }
    let ms = metrics(&b).await;
    assert_eq!(metric(&ms, "queen_ack_fusion_failed_flushes_total"), 1.0);
    assert_eq!(metric(&ms, "queen_ack_fusion_commits_total"), 0.0);
    assert_eq!(metric(&ms, "queen_ack_fusion_inline_total"), 1.0);
    assert_eq!(
        (metric(&ms, FAST), metric(&ms, SQL), metric(&ms, HITS)),
        (1.0, 2.0, 2.0)
    );
    assert_eq!(
        cursor(&db, &pid_of(&pop), QM).await,
        (last_offset(&pop), None, None, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_ack_that_fails_answers_through_the_sql_path() {
    common::exclusive_on_citus().await;
    let b = start().await;
    let mut db = admin().await;
    let q = unique("inline-fail");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let (tx, holder) = lock_cursor(&mut db, &pid_of(&pop)).await;
    let h = spawn_ack(&b, acks_for(&pop, "completed", None));
    let probe = admin().await;
    wait_for_blocked(&probe, AT, 1, holder).await;
    kill_blocked(&probe, AT, holder).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    tx.commit().await.unwrap();
    let (s, v) = tokio::time::timeout(Duration::from_secs(20), h)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s, 200);
    assert!(all_ok_released(&v), "{v}");
    let ms = metrics(&b).await;
    assert_eq!(metric(&ms, "queen_ack_fusion_failed_flushes_total"), 1.0);
    assert_eq!(metric(&ms, "queen_ack_fusion_inline_total"), 0.0);
    assert_eq!(
        (metric(&ms, FAST), metric(&ms, SQL), metric(&ms, HITS)),
        (0.0, 2.0, 1.0)
    );
    assert_eq!(
        cursor(&db, &pid_of(&pop), QM).await,
        (last_offset(&pop), None, None, 0)
    );
}

#[tokio::test]
async fn a_lone_ack_runs_inline_and_is_not_held_for_the_backstop_tick() {
    let b = start_with(|c| c.ack_fusion_hold_ms = 5_000).await;
    let q = unique("lone");
    let pop = pushed_and_popped(&b, &q, "Default", &["a"]).await;
    let t = Instant::now();
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(all_ok_released(&v), "{v}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    // One log_ack_at_v1 in the handler, as with fusion off; no multi flush.
    let ms = metrics(&b).await;
    assert_eq!(
        (
            metric(&ms, FAST),
            metric(&ms, "queen_ack_fusion_inline_total"),
            metric(&ms, "queen_ack_fusion_commits_total")
        ),
        (1.0, 1.0, 0.0)
    );
}

/// Pops of one-message partitions until two shards of `n` hold two each: [[a1, a2], [b1, b2]].
async fn two_partitions_on_each_of_two_shards(b: &Broker, q: &str, n: usize) -> Vec<Vec<Value>> {
    let mut by_shard: HashMap<usize, Vec<Value>> = HashMap::new();
    for i in 0..64 {
        let pop = pushed_and_popped(b, q, &format!("p{i}"), &["t"]).await;
        let shard = queen_broker::engine::fusion::shard_of(pid_of(&pop).parse().unwrap(), n);
        by_shard.entry(shard).or_default().push(pop);
        let full: Vec<Vec<Value>> = by_shard
            .values()
            .filter(|v| v.len() >= 2)
            .map(|v| v[..2].to_vec())
            .collect();
        if full.len() >= 2 {
            return full[..2].to_vec();
        }
    }
    panic!("64 partitions never put two on each of two shards");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_of_all_shards_share_the_in_flight_cap() {
    common::exclusive_on_citus().await;
    let b = start_with(|c| {
        c.ack_fusion_shards = 8;
        c.ack_fusion_max_inflight = 1;
    })
    .await;
    let mut db = admin().await;
    let q = unique("cap");
    let shards = two_partitions_on_each_of_two_shards(&b, &q, 8).await;
    let pops: Vec<&Value> = shards.iter().flatten().collect();
    let fusion = b.state.fusion.as_ref().expect("fusion on");
    let before = fusion.stats();
    let probe = admin().await;
    let (tx, holder) =
        lock_cursors(&mut db, &pops.iter().map(|p| pid_of(p)).collect::<Vec<_>>()).await;
    // The first ack of each shard runs inline (no flush slot), blocked.
    let mut hs = vec![
        spawn_ack(&b, acks_for(&shards[0][0], "completed", None)),
        spawn_ack(&b, acks_for(&shards[1][0], "completed", None)),
    ];
    wait_for_blocked(&probe, AT, 2, holder).await;
    // The second of each parks; the first flush takes the only slot and blocks, the other
    // shard's flush must wait for the slot.
    hs.push(spawn_ack(&b, acks_for(&shards[0][1], "completed", None)));
    hs.push(spawn_ack(&b, acks_for(&shards[1][1], "completed", None)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.state.registry.stats().hits < 4 {
        assert!(Instant::now() < deadline, "the acks never hit the registry");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_for_blocked(&probe, MULTI, 1, holder).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        blocked(&probe, MULTI, holder).await,
        1,
        "a flush ran past the cap"
    );
    assert!(hs.iter().all(|h| !h.is_finished()));
    assert_eq!(fusion.stats().commits, before.commits);
    tx.commit().await.unwrap();
    for h in hs {
        let (s, v) = tokio::time::timeout(Duration::from_secs(20), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s, 200);
        assert!(all_ok_released(&v), "{v}");
    }
    let after = fusion.stats();
    assert_eq!(after.inline - before.inline, 2);
    assert_eq!(after.commits - before.commits, 2, "{after:?}");
    assert_eq!(after.acks - before.acks, 2);
    for o in pops {
        assert_eq!(
            cursor(&db, &pid_of(o), QM).await,
            (last_offset(o), None, None, 0)
        );
    }
}

/// `n` concurrent full-batch acks over `n` partitions through a pool of `pool`
/// connections: parked handlers hold no connection, so the flushes always get one.
async fn parked_acks_complete(pool: usize, n: usize) {
    let b = start_with(|c| c.pool_size = pool).await;
    let db = admin().await;
    let q = unique("starve");
    let items: Vec<Value> = (0..n)
        .flat_map(|i| (0..2).map(move |k| (i, k)))
        .map(|(i, k)| json!({"queue": q, "partition": format!("p{i}"), "payload": k}))
        .collect();
    b.push(json!(items)).await;
    let mut pops = Vec::new();
    while let Some(p) = b.pop(&q, "batch=10").await {
        pops.push(p);
    }
    assert_eq!(pops.len(), n);
    let handles: Vec<_> = pops
        .iter()
        .map(|p| spawn_ack(&b, acks_for(p, "completed", None)))
        .collect();
    let all = async {
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    };
    let answers = tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("parked acks deadlocked on the pool");
    for (s, v) in &answers {
        assert_eq!(*s, 200, "{v}");
        assert!(all_ok_released(v), "{v}");
    }
    let ms = metrics(&b).await;
    assert_eq!(metric(&ms, FAST), 2.0 * n as f64);
    assert_eq!(metric(&ms, "queen_db_pool_max"), pool as f64);
    assert_eq!(metric(&ms, "queen_ack_fusion_failed_flushes_total"), 0.0);
    for p in &pops {
        assert_eq!(
            cursor(&db, &pid_of(p), QM).await,
            (last_offset(p), None, None, 0)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_parked_acks_than_pooled_connections_complete() {
    parked_acks_complete(2, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_acks_complete_with_a_single_pooled_connection() {
    parked_acks_complete(1, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_the_flush_and_answers_the_parked_ack() {
    common::exclusive_on_citus().await;
    // The harness's broker configuration, with a shutdown trigger of our own.
    let mut cfg = Config::for_database(&common::broker_url());
    cfg.pool_size = 4;
    cfg.ack_fusion_shards = 1;
    let state = AppState::new(cfg).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, state.clone(), async {
        let _ = stopped.await;
    }));
    let b = Broker {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        state,
    };
    let mut db = admin().await;
    let q = unique("shutdown");
    let x = pushed_and_popped(&b, &q, "x", &["x1"]).await;
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let (tx, holder) = lock_cursors(&mut db, &[pid_of(&x), pid_of(&pop)]).await;
    // x's inline ack and pop's parked ack (its flush) both block.
    let (hx, h) = busy_shard(&b, &x, &pop, holder).await;
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !server.is_finished(),
        "shutdown must wait for the inline and the parked ack"
    );
    tx.commit().await.unwrap();
    for h in [hx, h] {
        let (s, v) = tokio::time::timeout(Duration::from_secs(20), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s, 200);
        assert!(all_ok_released(&v), "{v}");
    }
    tokio::time::timeout(Duration::from_secs(20), server)
        .await
        .expect("server drained")
        .unwrap()
        .unwrap();
    assert_eq!(
        cursor(&db, &pid_of(&pop), QM).await,
        (last_offset(&pop), None, None, 0)
    );
    // After shutdown the fusion refuses new work (its callers use the SQL path).
    let f = b.state.fusion.as_ref().unwrap();
    let v = f
        .ack(Parked {
            pid: Uuid::now_v7(),
            group: QM.into(),
            worker: "w".into(),
            batch_end: 0,
            count: 1,
        })
        .await;
    assert!(matches!(v, Verdict::FlushFailed(_)), "{v:?}");
}

// -------------------------------------------------------------- registry lifecycle

#[tokio::test]
async fn repeated_transaction_ids_in_a_batch_are_never_registered() {
    let b = start().await;
    let db = admin().await;
    let q = unique("dup-txn");
    // Without a dedup window a repeated transactionId is a second message.
    b.configure(&q, json!({"dedupWindowSeconds": 0})).await;
    b.push(json!([{"queue": q, "transactionId": "a", "payload": 1},
                  {"queue": q, "transactionId": "b", "payload": 2}]))
        .await;
    let again = b
        .push(json!([{"queue": q, "transactionId": "a", "payload": 3}]))
        .await;
    assert_eq!(again[0]["status"], "queued", "{again:?}");
    let pop = b.pop(&q, "batch=10").await.unwrap();
    assert_eq!(pop["messages"].as_array().unwrap().len(), 3, "{pop}");
    let ms = metrics(&b).await;
    assert_eq!(
        (
            metric(&ms, ENTRIES),
            metric(&ms, "queen_ack_registry_skipped_total")
        ),
        (0.0, 1.0)
    );
    // Acking all three takes the SQL path, which resolves "a" to its first frame: a
    // partial ack that keeps the lease (a positional advance would have acked both).
    let (_, v) = b.ack_batch(acks_for(&pop, "completed", None)).await;
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|x| x["success"] == true && x["leaseReleased"] == false),
        "{v}"
    );
    let ms = metrics(&b).await;
    assert_eq!(
        (metric(&ms, FAST), metric(&ms, SQL), metric(&ms, HITS)),
        (0.0, 3.0, 0.0)
    );
    let off_b = pop["messages"][1]["offset"].as_i64().unwrap();
    let (committed, end, worker, _) = cursor(&db, &pid_of(&pop), QM).await;
    assert_eq!((committed, end), (off_b, Some(last_offset(&pop))));
    assert_eq!(worker.as_deref(), pop["leaseId"].as_str());
}

#[tokio::test]
async fn redelivery_overwrites_the_entry_of_the_expired_lease() {
    let b = start().await;
    let db = admin().await;
    let q = unique("overwrite");
    let first = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let pid: Uuid = pid_of(&first).parse().unwrap();
    db.execute(
        "UPDATE queen.log_leases SET lease_expires_at = now() - interval '1s'
          WHERE partition_id = $1",
        &[&pid],
    )
    .await
    .unwrap();
    let second = b.pop(&q, "batch=10").await.expect("redelivery");
    assert_ne!(second["leaseId"], first["leaseId"]);
    let ms = metrics(&b).await;
    assert_eq!(
        (metric(&ms, &evicted("overwrite")), metric(&ms, ENTRIES)),
        (1.0, 1.0)
    );
    // The old worker's full ack misses and is refused; the new worker's is fast.
    let (_, v) = b.ack_batch(acks_for(&first, "completed", None)).await;
    assert_eq!(v[0]["error"], EXPIRED, "{v}");
    let (_, v) = b.ack_batch(acks_for(&second, "completed", None)).await;
    assert!(all_ok_released(&v), "{v}");
    let ms = metrics(&b).await;
    assert_eq!(
        (metric(&ms, FAST), metric(&ms, SQL), metric(&ms, HITS)),
        (2.0, 2.0, 1.0)
    );
    assert_eq!(
        cursor(&db, &pid.to_string(), QM).await,
        (last_offset(&second), None, None, 0)
    );
}

// ----------------------------------------------------------- per-item SQL answers

#[tokio::test]
async fn unresolvable_and_stale_acks_are_reported_per_item() {
    let b = start().await;
    let q = unique("per-item");
    let pop = pushed_and_popped(&b, &q, "Default", &["a", "b"]).await;
    let pid = pid_of(&pop);
    let lease = pop["leaseId"].clone();
    let ack = |txn: &str, status: &str| json!({"transactionId": txn, "partitionId": pid, "leaseId": lease, "status": status});
    let (s, v) = b
        .ack_batch(
            json!({"acknowledgments": [ack("a", "completed"), ack("never-pushed", "completed")]}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        v,
        json!([
            {"index": 0, "transactionId": "a", "success": true, "error": null,
             "leaseReleased": false, "dlq": false, "noop": false},
            {"index": 1, "transactionId": "never-pushed", "success": false, "error": UNRESOLVED,
             "leaseReleased": false, "dlq": false, "noop": false},
        ])
    );
    // a is now below the cursor: a nack of it is stale, a completed ack of it a noop.
    let (_, v) = b
        .ack_batch(json!({"acknowledgments": [ack("a", "failed"), ack("a", "completed"), ack("b", "completed")]}))
        .await;
    let arr = v.as_array().unwrap();
    assert_eq!(
        (arr[0]["success"].clone(), arr[0]["error"].clone()),
        (json!(false), json!(STALE)),
        "{v}"
    );
    assert_eq!(
        (arr[1]["success"].clone(), arr[1]["noop"].clone()),
        (json!(true), json!(true)),
        "{v}"
    );
    assert!(arr[1]["error"].is_null());
    assert_eq!(
        (arr[2]["success"].clone(), arr[2]["noop"].clone()),
        (json!(true), json!(false)),
        "{v}"
    );
    let ms = metrics(&b).await;
    assert_eq!((metric(&ms, FAST), metric(&ms, SQL)), (0.0, 5.0));
}

#[tokio::test]
async fn dlq_hand_off_end_to_end_with_the_payload_snapshot() {
    let b = start().await;
    let db = admin().await;
    let q = unique("dlq-e2e");
    b.configure(
        &q,
        json!({"retryLimit": 1, "deadLetterQueue": true, "dlqAfterMaxRetries": true, "leaseTime": 30}),
    )
    .await;
    let payload = json!({"order": 42, "items": ["x", "y"]});
    b.push(json!([{"queue": q, "transactionId": "poison", "payload": payload}]))
        .await;
    // retryLimit 1 = two deliveries; the second nack files the DLQ row.
    let first = b.pop(&q, "batch=10").await.unwrap();
    let (_, v) = b
        .ack_batch(acks_for(&first, "failed", Some("boom on attempt 1")))
        .await;
    assert_eq!(
        (v[0]["success"].clone(), v[0]["dlq"].clone()),
        (json!(true), json!(false)),
        "{v}"
    );
    let second = b.pop(&q, "batch=10").await.expect("retry");
    assert_eq!(second["messages"][0]["deliveryAttempt"], 2);
    let (_, v) = b
        .ack_batch(acks_for(&second, "failed", Some("boom on attempt 2")))
        .await;
    assert_eq!(
        v,
        json!([{"index": 0, "transactionId": "poison", "success": true, "error": null,
                "leaseReleased": true, "dlq": true, "noop": false}])
    );
    assert!(
        b.pop(&q, "batch=10").await.is_none(),
        "the poison frame is past the cursor"
    );
    let ms = metrics(&b).await;
    assert_eq!(metric(&ms, "queen_dlq_filed_total"), 1.0);
    // The DLQ row carries its own copy of the payload: it survives the segment.
    let pid: Uuid = pid_of(&second).parse().unwrap();
    let snap: Option<Value> = db
        .query_one(
            "SELECT payload FROM queen.log_dlq WHERE partition_id = $1",
            &[&pid],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(snap, Some(payload.clone()));
    let (s, list) = b.get(&format!("/api/v1/dlq?queue={q}")).await;
    assert_eq!(s, 200, "{list}");
    let msgs = list["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{list}");
    assert_eq!(msgs[0]["data"], payload);
    assert_eq!(msgs[0]["errorMessage"], "boom on attempt 2");
    assert_eq!(msgs[0]["transactionId"], "poison");
    assert_eq!(list["pagination"]["total"], 1);
}
