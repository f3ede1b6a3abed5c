//! Push fusion against real PostgreSQL over real HTTP: a lone push runs alone, concurrent
//! pushes fold into fewer commits (counted at /metrics), a request's order is kept, a
//! transactionId pushed by two fused requests is answered as if they ran one after the
//! other, a failing request inside a fused flush fails alone, parked pushes complete on a
//! one-connection pool. The lane is kept busy deterministically: a superuser transaction
//! holds a partition row lock, so the push that needs it blocks inside PostgreSQL.

use crate::common;

use std::time::{Duration, Instant};

use common::{admin, metric, metrics, start_with, unique, waiters_of, Broker};
use serde_json::{json, Value};
use uuid::Uuid;

/// A broker with push fusion on (it is off by default).
async fn fused() -> Broker {
    start_with(|c| c.push_fusion = true).await
}

const COMMITS: &str = "queen_push_fusion_commits_total";
const ROUNDS: &str = "queen_push_fusion_rounds_total";
const INLINE: &str = "queen_push_fusion_inline_total";
const FAILED: &str = "queen_push_fusion_failed_flushes_total";

fn items(q: &str, partition: &str, txns: &[&str]) -> Value {
    json!(txns
        .iter()
        .map(|t| json!({"queue": q, "partition": partition, "transactionId": t, "payload": t}))
        .collect::<Vec<_>>())
}

fn spawn_push(b: &Broker, items: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    let http = b.http.clone();
    let url = format!("{}/api/v1/push", b.base);
    tokio::spawn(async move {
        let r = http
            .post(url)
            .json(&json!({ "items": items }))
            .send()
            .await
            .unwrap();
        let s = r.status().as_u16();
        (s, r.json::<Value>().await.unwrap())
    })
}

async fn answer(h: tokio::task::JoinHandle<(u16, Value)>) -> (u16, Value) {
    tokio::time::timeout(Duration::from_secs(30), h)
        .await
        .expect("push answered")
        .unwrap()
}

/// The id of partition `partition` of `q` (it exists: pushed before).
async fn pid(db: &tokio_postgres::Client, q: &str, partition: &str) -> Uuid {
    db.query_one(
        "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE q.name = $1 AND p.name = $2",
        &[&q, &partition],
    )
    .await
    .unwrap()
    .get(0)
}

/// The backend of a transaction (whose locks the waiters wait on).
async fn backend_pid(tx: &tokio_postgres::Transaction<'_>) -> i32 {
    tx.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Waits until `n` rounds are parked or in flight on the push lane.
async fn wait_for_load(b: &Broker, n: usize) {
    let f = b.state.push_fusion.as_ref().expect("push fusion on");
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.load() < n {
        assert!(
            Instant::now() < deadline,
            "{} of {n} rounds on the lane",
            f.load()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `n` pushes wait, directly or in the lock queue behind another waiter, on
/// the partition lock held by backend `holder`.
async fn wait_for_blocked_push(db: &tokio_postgres::Client, holder: i32, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = waiters_of(db, "SELECT queen.log_push_multi_v1", holder)
            .await
            .len();
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{got} of {n} pushes blocked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A busy lane: partition `x` of `q` locked by the returned transaction, one push to it
/// running alone (blocked) and one parked push flushed (blocked behind the same lock).
/// Rounds arriving now park behind that flush.
struct Busy<'a> {
    tx: tokio_postgres::Transaction<'a>,
    alone: tokio::task::JoinHandle<(u16, Value)>,
    flushed: tokio::task::JoinHandle<(u16, Value)>,
}

async fn busy_lane<'a>(b: &Broker, db: &'a mut tokio_postgres::Client, q: &str) -> Busy<'a> {
    b.push(items(q, "x", &["x0"])).await;
    let x = pid(db, q, "x").await;
    let tx = db.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM queen.log_partitions WHERE id = $1 FOR UPDATE",
        &[&x],
    )
    .await
    .unwrap();
    let holder = backend_pid(&tx).await;
    let probe = admin().await;
    let alone = spawn_push(b, items(q, "x", &["x1"]));
    wait_for_blocked_push(&probe, holder, 1).await;
    let flushed = spawn_push(b, items(q, "x", &["x2"]));
    wait_for_blocked_push(&probe, holder, 2).await;
    Busy { tx, alone, flushed }
}

impl Busy<'_> {
    /// Releases the lock; both blocked pushes answer 201.
    async fn release(self) {
        self.tx.commit().await.unwrap();
        for h in [self.alone, self.flushed] {
            let (s, v) = answer(h).await;
            assert_eq!(s, 201, "{v}");
            assert_eq!(v[0]["status"], "queued", "{v}");
        }
    }
}

/// (status, offset, messageId) of each answer item.
fn verdicts(v: &Value) -> Vec<(String, i64, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["status"].as_str().unwrap().to_string(),
                i["offset"].as_i64().unwrap(),
                i["message_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every transactionId of partition `partition` in log order, popped in one batch.
async fn log_order(b: &Broker, q: &str, partition: &str) -> Vec<String> {
    let (s, v) = b
        .get(&format!(
            "/api/v1/pop/queue/{q}/partition/{partition}?batch=100&wait=false&autoAck=true"
        ))
        .await;
    assert_eq!(s, 200, "{v}");
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["transactionId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_lone_push_runs_alone_in_one_statement() {
    let b = fused().await;
    let q = unique("pf-lone");
    let v = b.push(items(&q, "p", &["a", "b"])).await;
    assert!(v.iter().all(|i| i["status"] == "queued"), "{v:?}");
    let ms = metrics(&b).await;
    assert_eq!(metric(&ms, "queen_push_fusion_enabled"), 1.0);
    assert_eq!(
        (metric(&ms, INLINE), metric(&ms, COMMITS)),
        (1.0, 0.0),
        "one push, one round, run alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_fold_into_one_commit_and_keep_each_requests_order() {
    common::exclusive_on_citus().await;
    let b = fused().await;
    let mut db = admin().await;
    let q = unique("pf-fold");
    let busy = busy_lane(&b, &mut db, &q).await;
    // Three requests park behind the blocked flush; two of them share partition y.
    // c parks first (arrival order at the lane is the fused order).
    let c = spawn_push(&b, items(&q, "y", &["c1", "c2", "c3"]));
    wait_for_load(&b, 3).await;
    let d = spawn_push(&b, items(&q, "z", &["d1", "d2"]));
    let e = spawn_push(&b, items(&q, "y", &["e1", "e2"]));
    wait_for_load(&b, 5).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!c.is_finished() && !d.is_finished() && !e.is_finished());
    let before = metrics(&b).await;
    busy.release().await;
    let mut offsets = Vec::new();
    for h in [c, d, e] {
        let (s, v) = answer(h).await;
        assert_eq!(s, 201, "{v}");
        let vs = verdicts(&v);
        assert!(vs.iter().all(|(s, _, _)| s == "queued"), "{v}");
        // A request's items are consecutive offsets, in request order.
        let first = vs[0].1;
        assert!(
            vs.iter().enumerate().all(|(k, x)| x.1 == first + k as i64),
            "{v}"
        );
        offsets.push(first);
    }
    let ms = metrics(&b).await;
    assert_eq!(
        metric(&before, COMMITS),
        0.0,
        "nothing committed while x was locked"
    );
    // x2's flush of one round, then c, d and e in one.
    assert_eq!(metric(&ms, COMMITS), 2.0, "{ms:?}");
    assert_eq!(metric(&ms, ROUNDS), 4.0);
    assert_eq!(metric(&ms, INLINE), 2.0, "x0 and x1 ran alone");
    // Fused in arrival order: c before e on y.
    assert!(offsets[0] < offsets[2]);
    assert_eq!(log_order(&b, &q, "y").await, ["c1", "c2", "c3", "e1", "e2"]);
    assert_eq!(log_order(&b, &q, "z").await, ["d1", "d2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_id_pushed_by_two_fused_requests_is_a_duplicate_for_the_second() {
    common::exclusive_on_citus().await;
    let b = fused().await;
    let mut db = admin().await;
    let q = unique("pf-dup");
    let y0 = b.push(items(&q, "y", &["y0"])).await[0]["offset"]
        .as_i64()
        .unwrap();
    let busy = busy_lane(&b, &mut db, &q).await;
    let c = spawn_push(&b, items(&q, "y", &["t1", "t2"]));
    wait_for_load(&b, 3).await;
    let d = spawn_push(&b, items(&q, "y", &["t2", "t3", "y0"]));
    wait_for_load(&b, 4).await;
    busy.release().await;
    let (sc, vc) = answer(c).await;
    let (sd, vd) = answer(d).await;
    assert_eq!((sc, sd), (201, 201), "{vc} {vd}");
    let c = verdicts(&vc);
    let d = verdicts(&vd);
    assert_eq!(c[0].0, "queued");
    assert_eq!(c[1].0, "queued");
    // As if sequential: t2 is the first request's message (its offset and id), y0 the
    // earlier push's; t3 is new.
    assert_eq!(
        d[0],
        ("duplicate".to_string(), c[1].1, c[1].2.clone()),
        "{vd}"
    );
    assert_eq!(d[1].0, "queued");
    assert_eq!(d[1].1, c[1].1 + 1, "t3 follows t2 in the log");
    assert_eq!(d[2].0, "duplicate");
    assert_eq!(d[2].1, y0, "y0 is the earlier push's message");
    assert_eq!(log_order(&b, &q, "y").await, ["y0", "t1", "t2", "t3"]);
}

/// Citus refuses to create or drop triggers on a distributed table unless this session
/// says they are safe (the test's one only raises).
async fn allow_triggers(db: &tokio_postgres::Client) {
    db.batch_execute(
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
           SET citus.enable_unsafe_triggers TO on; END IF; END $$",
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_request_in_a_fused_flush_fails_alone() {
    common::exclusive_on_citus().await;
    let b = fused().await;
    let mut db = admin().await;
    let q = unique("pf-fail");
    b.push(items(&q, "bad", &["b0"])).await;
    let bad = pid(&db, &q, "bad").await;
    // Sabotage: any further segment of partition `bad` is refused by PostgreSQL.
    let trigger = format!("pf_fail_{}", bad.simple());
    allow_triggers(&db).await;
    // One statement per call: Citus runs each on the workers as a prepared statement.
    db.batch_execute(&format!(
        "CREATE FUNCTION public.{trigger}() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'sabotaged partition'; END $$"
    ))
    .await
    .unwrap();
    db.batch_execute(&format!(
        "CREATE TRIGGER {trigger} BEFORE INSERT ON queen.log_segments FOR EACH ROW
           WHEN (NEW.partition_id = '{bad}') EXECUTE FUNCTION public.{trigger}()"
    ))
    .await
    .unwrap();
    let busy = busy_lane(&b, &mut db, &q).await;
    let good = spawn_push(&b, items(&q, "good", &["g1", "g2"]));
    let failing = spawn_push(&b, items(&q, "bad", &["b1"]));
    wait_for_load(&b, 4).await;
    let before = metrics(&b).await;
    busy.release().await;
    let (sg, vg) = answer(good).await;
    let (sb, vb) = answer(failing).await;
    let db = admin().await;
    allow_triggers(&db).await;
    db.batch_execute(&format!("DROP TRIGGER {trigger} ON queen.log_segments"))
        .await
        .unwrap();
    db.batch_execute(&format!("DROP FUNCTION public.{trigger}()"))
        .await
        .unwrap();
    assert_eq!(sg, 201, "{vg}");
    assert!(verdicts(&vg).iter().all(|(s, _, _)| s == "queued"), "{vg}");
    assert!(sb >= 500, "the sabotaged push fails: {sb} {vb}");
    let ms = metrics(&b).await;
    assert_eq!(metric(&ms, FAILED) - metric(&before, FAILED), 1.0);
    assert_eq!(log_order(&b, &q, "good").await, ["g1", "g2"]);
    assert_eq!(
        log_order(&b, &q, "bad").await,
        ["b0"],
        "nothing of b1 written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_pushes_complete_with_a_single_pooled_connection() {
    let b = start_with(|c| {
        c.push_fusion = true;
        c.pool_size = 1;
    })
    .await;
    let q = unique("pf-pool");
    let n = 20;
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let t = format!("t{i}");
            spawn_push(&b, items(&q, &format!("p{}", i % 4), &[t.as_str()]))
        })
        .collect();
    for h in hs {
        let (s, v) = answer(h).await;
        assert_eq!(s, 201, "{v}");
        assert_eq!(v[0]["status"], "queued", "{v}");
    }
    let ms = metrics(&b).await;
    assert_eq!(
        metric(&ms, ROUNDS) + metric(&ms, INLINE),
        n as f64,
        "every round ran once"
    );
    assert_eq!(metric(&ms, FAILED), 0.0);
    let mut all = Vec::new();
    for p in 0..4 {
        all.extend(log_order(&b, &q, &format!("p{p}")).await);
    }
    assert_eq!(all.len(), n);
}

#[tokio::test]
async fn push_fusion_is_on_by_default_and_off_pushes_on_the_requests_connection() {
    let on = start_with(|_| {}).await;
    let q = unique("pf-default");
    let v = on.push(items(&q, "p", &["a", "a", "b"])).await;
    let statuses: Vec<&str> = v.iter().map(|i| i["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["queued", "duplicate", "queued"]);
    let ms = metrics(&on).await;
    assert_eq!(metric(&ms, "queen_push_fusion_enabled"), 1.0);
    assert!(
        metric(&ms, INLINE) >= 1.0,
        "a lone push finds the lane idle and runs inline"
    );

    let off = start_with(|c| c.push_fusion = false).await;
    let q = unique("pf-off");
    let v = off.push(items(&q, "p", &["a", "a", "b"])).await;
    let statuses: Vec<&str> = v.iter().map(|i| i["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["queued", "duplicate", "queued"]);
    let ms = metrics(&off).await;
    assert_eq!(metric(&ms, "queen_push_fusion_enabled"), 0.0);
    assert_eq!(metric(&ms, INLINE), 0.0);
}

/// Waits until `n` push lookups wait on the lock held by backend `holder`.
async fn wait_for_blocked_lookups(db: &tokio_postgres::Client, holder: i32, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = waiters_of(db, "SELECT r_index", holder).await.len();
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{got} of {n} lookups blocked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_push_lookups_fold_into_one_call_and_each_request_gets_its_own_rows() {
    // The partition registry is locked for the whole database: no other test may push.
    common::exclusive().await;
    let b = fused().await;
    let mut db = admin().await;
    let (q1, q2) = (unique("pf-look1"), unique("pf-look2"));
    // q1 has partitions a and b; q2 does not exist yet.
    b.push(items(&q1, "a", &["a0"])).await;
    b.push(items(&q1, "b", &["b0"])).await;
    let before = metrics(&b).await;
    let tx = db.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE queen.partition_names IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let holder = backend_pid(&tx).await;
    let probe = admin().await;
    // One lookup runs alone and one is flushed (both blocked); three more park and are
    // then looked up in one call: an existing partition, a new one of a known queue, a
    // new queue, in an order unlike their partitions'.
    let alone = spawn_push(&b, items(&q1, "a", &["a1"]));
    wait_for_blocked_lookups(&probe, holder, 1).await;
    let flushed = spawn_push(&b, items(&q1, "a", &["a2"]));
    wait_for_blocked_lookups(&probe, holder, 2).await;
    let parked = [
        spawn_push(&b, items(&q2, "n", &["n1"])),
        spawn_push(&b, items(&q1, "c", &["c1"])),
        spawn_push(&b, items(&q1, "b", &["b1", "b2"])),
    ];
    let f = b.state.push_fusion.as_ref().expect("push fusion on");
    let deadline = Instant::now() + Duration::from_secs(10);
    while f.lookup_load() < 5 {
        assert!(
            Instant::now() < deadline,
            "{} lookups on the lane",
            f.lookup_load()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.commit().await.unwrap();
    let mut answers = Vec::new();
    for h in [alone, flushed].into_iter().chain(parked) {
        let (s, v) = answer(h).await;
        assert_eq!(s, 201, "{v}");
        answers.push(v);
    }
    // Each answer names its own partition (the fused rows went back to the right request).
    for (v, (q, p)) in
        answers
            .iter()
            .zip([(&q1, "a"), (&q1, "a"), (&q2, "n"), (&q1, "c"), (&q1, "b")])
    {
        let want = pid(&db, q, p).await.to_string();
        for item in v.as_array().unwrap() {
            assert_eq!(item["status"], "queued", "{v}");
            assert_eq!(item["partition_id"], want.as_str(), "{q}/{p}: {v}");
        }
    }
    assert_eq!(log_order(&b, &q1, "b").await, ["b0", "b1", "b2"]);
    let after = metrics(&b).await;
    let delta = |name: &str| metric(&after, name) - metric(&before, name);
    assert_eq!(
        (
            delta("queen_push_fusion_lookup_flushes_total"),
            delta("queen_push_fusion_lookup_requests_total")
        ),
        (2.0, 4.0),
        "the flushed lookup alone, then the three parked ones in one call"
    );
}
