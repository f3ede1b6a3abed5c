//! Shared harness: an in-process broker on 127.0.0.1:0 against the database named by
//! QUEEN_TEST_DATABASE_URL. Tests never silently pass without a database.
//!
//! The broker connects as a least-privilege member of `queen_broker` (EXECUTE on the
//! queen functions, SELECT on the tables, no table writes): the user of
//! QUEEN_TEST_DATABASE_URL is replaced by QUEEN_TEST_BROKER_ROLE (default
//! `queen_broker_test`, which tests/cluster.sh creates; set it empty to connect as the URL's
//! own user). The URL as given (a superuser) stays available to tests through
//! [`admin_url`] / [`admin`] for inspection and fault injection.

use std::cell::RefCell;

use queen_broker::{serve, AppState, Config};
use reqwest::StatusCode;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The database is shared by every test of this binary, and they run concurrently. Most
/// tests only touch queues of their own ([`unique`] names) and hold the gate shared:
/// [`start`] (every broker) and [`admin`] take it, so no test can forget. A test that
/// needs the database to itself (a whole-database [`snapshot`], a database-wide count such
/// as pg_stat_statements, a maintenance mode, a lock graph it cannot trace to its own
/// holder) calls [`exclusive`] first: it then runs alone.
static GATE: RwLock<()> = RwLock::const_new(());

enum Held {
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

thread_local! {
    /// The gate as the test on this thread holds it, until the test ends: libtest runs
    /// each test on a thread of its own, which exits (dropping this) when the test does,
    /// panicking or not. A test body runs on that thread under `#[tokio::test]` in either
    /// flavor (its tasks may not: they never take the gate themselves, see [`shared`]).
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// The database to this test alone, from now until the test ends: waits for every
/// running test to end, and no other test starts meanwhile. Call it first thing (a
/// shared hold taken before is let go, then the exclusive one is waited for).
pub async fn exclusive() {
    if held_exclusive() {
        return;
    }
    HELD.with(|h| h.borrow_mut().take());
    let g = GATE.write().await;
    HELD.with(|h| *h.borrow_mut() = Some(Held::Exclusive(g)));
    quiesce().await;
}

/// [`exclusive`] for a test without a runtime of its own (a plain `#[test]`).
pub fn exclusive_blocking() {
    if held_exclusive() {
        return;
    }
    HELD.with(|h| h.borrow_mut().take());
    let g = GATE.blocking_write();
    HELD.with(|h| *h.borrow_mut() = Some(Held::Exclusive(g)));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(quiesce());
}

/// Waits until no other client is connected to the test database. The tests before
/// have ended, but not necessarily their statements: a backend runs what its client
/// sent before it hung up (a push that waited on a lock of a closed session commits
/// after it), so an exclusive test waits for every such backend to exit. Citus's own
/// connections (application_name `citus_...`) are not a test's.
async fn quiesce() {
    let (db, conn) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let others: Vec<String> = db
            .query(
                "SELECT format('pid %s %s: %s', pid, state, left(query, 200))
                   FROM pg_stat_activity
                  WHERE datname = current_database() AND pid <> pg_backend_pid()
                    AND backend_type = 'client backend'
                    AND application_name NOT LIKE 'citus%'",
                &[],
            )
            .await
            .expect("pg_stat_activity")
            .iter()
            .map(|r| r.get(0))
            .collect();
        if others.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the tests before ended, their backends did not: {others:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Nor may a test leave a timer that falls due during the run: any broker's sweeper
    // would deliver it into this test's database (a test cancels what it scheduled, or
    // schedules it an hour out).
    let soon: Vec<String> = db
        .query(
            "SELECT format('%s %s due %s', q.name, t.timer_key, t.deliver_at)
               FROM queen.timers t JOIN queen.queues q ON q.id = t.queue_id
              WHERE t.deliver_at < now() + interval '10 minutes'",
            &[],
        )
        .await
        .expect("timers")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        soon.is_empty(),
        "timers left by the tests before fall due soon: {soon:?}"
    );
}

/// [`exclusive`] on Citus only. The tests that wait for a call to block on a row lock
/// they hold find it by the holder's pid ([`waiters_of`]); on Citus a waiter may wait on
/// a worker and cannot be traced, so every lock waiter of the database counts there,
/// another test's too.
pub async fn exclusive_on_citus() {
    if is_citus(&admin().await).await {
        exclusive().await;
    }
}

fn held_exclusive() -> bool {
    HELD.with(|h| matches!(*h.borrow(), Some(Held::Exclusive(_))))
}

/// The gate held shared by this test (a no-op when it holds it already). A task the
/// test spawned runs on a runtime worker thread and takes nothing: its test holds the
/// gate (taking it again there could wait behind a queued exclusive test that waits for
/// this one).
async fn shared() {
    let on_worker = std::thread::current().name() == Some("tokio-runtime-worker");
    if on_worker || HELD.with(|h| h.borrow().is_some()) {
        return;
    }
    let g = GATE.read().await;
    HELD.with(|h| *h.borrow_mut() = Some(Held::Shared(g)));
}

pub struct Broker {
    pub base: String,
    pub http: reqwest::Client,
    pub state: AppState,
}

/// Starts a broker. Panics with a clear message when the database is not configured.
pub async fn start() -> Broker {
    start_with(|_| {}).await
}

/// Starts a broker after letting the test adjust its configuration.
pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Broker {
    let (listener, _) = listener().await;
    start_bound(listener, adjust).await
}

/// A listener bound ahead of its broker, for tests that must name every broker's
/// address in each one's configuration (the ephemeral peers).
pub async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, base)
}

/// Starts a broker on `listener` with the test defaults, adjusted.
pub async fn start_bound(listener: TcpListener, adjust: impl FnOnce(&mut Config)) -> Broker {
    shared().await;
    let mut cfg = Config::for_database(&broker_url());
    cfg.pool_size = 4;
    // Maintenance deletes what retention says, database-wide: only the tests of it turn
    // the loop on, so no other test sees rows vanish under it.
    cfg.maintenance_interval_ms = 0;
    // The sampled history is database-wide too (its queue snapshot reads every queue):
    // only the tests of it sample.
    cfg.history_sample_ms = 0;
    adjust(&mut cfg);
    start_on(listener, cfg)
}

fn start_on(listener: TcpListener, cfg: Config) -> Broker {
    let state = AppState::new(cfg).expect("broker state");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(serve(listener, state.clone(), std::future::pending()));
    Broker {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
        state,
    }
}

/// The database URL as given (superuser): for inspection queries, never for the broker.
pub fn admin_url() -> String {
    std::env::var("QUEEN_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "QUEEN_TEST_DATABASE_URL is not set: the broker integration tests need PostgreSQL \
             with the queen_ack extension (bash scripts/run.sh, then \
             QUEEN_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5499/queen)"
        )
    })
}

/// The URL the broker connects with: the admin URL with its user replaced by the
/// least-privilege role.
pub fn broker_url() -> String {
    let role =
        std::env::var("QUEEN_TEST_BROKER_ROLE").unwrap_or_else(|_| "queen_broker_test".into());
    with_user(&admin_url(), &role)
}

/// `scheme://[user[:password]@]rest` with the user part replaced (password dropped);
/// an empty role or a non-URL connection string leaves it unchanged.
pub fn with_user(url: &str, role: &str) -> String {
    let Some(i) = url.find("://") else {
        return url.to_string();
    };
    if role.is_empty() {
        return url.to_string();
    }
    let (scheme, rest) = url.split_at(i + 3);
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    format!("{scheme}{role}@{rest}")
}

/// A superuser connection for inspection queries (its driver task is spawned).
pub async fn admin() -> tokio_postgres::Client {
    shared().await;
    let (client, conn) = tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    client
}

/// A fresh push spool directory under target/ (broker/tests/it/spool.rs, write_gate.rs).
pub fn spool_dir() -> std::path::PathBuf {
    let d = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("spool-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Both maintenance modes off (they are database-wide: the suites that switch them run
/// their tests one at a time and call this before and after).
pub async fn modes_off() {
    let db = admin().await;
    for mode in ["push", "pop"] {
        db.execute("SELECT queen.system_state_set_v1($1, false)", &[&mode])
            .await
            .unwrap();
    }
}

/// Timers of queue `q` not yet delivered (or cancelled).
pub async fn timers_pending(q: &str) -> i64 {
    admin()
        .await
        .query_one(
            "SELECT count(*) FROM queen.timers t JOIN queen.queues q ON q.id = t.queue_id
              WHERE q.name = $1",
            &[&q],
        )
        .await
        .unwrap()
        .get(0)
}

/// Pids (on the node `db` is connected to) of the backends running a statement that
/// starts with `prefix` and waits on a lock. On a Citus coordinator a delegated or
/// multi-shard call waits on a worker while its coordinator backend waits for the answer,
/// so Citus's cluster-wide lock graph counts too.
pub async fn lock_waiters(db: &tokio_postgres::Client, prefix: &str) -> Vec<i32> {
    let like = format!("{prefix}%");
    let sql = if is_citus(db).await {
        "SELECT pid FROM pg_stat_activity WHERE query LIKE $1 AND wait_event_type = 'Lock'
         UNION
         SELECT a.pid FROM citus_stat_activity a
          WHERE a.query LIKE $1 AND a.nodeid = (SELECT nodeid FROM pg_dist_node WHERE groupid = 0)
            AND a.global_pid IN (SELECT waiting_gpid FROM citus_lock_waits)"
    } else {
        "SELECT pid FROM pg_stat_activity WHERE query LIKE $1 AND wait_event_type = 'Lock'"
    };
    db.query(sql, &[&like])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn is_citus(db: &tokio_postgres::Client) -> bool {
    db.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Like [`lock_waiters`], but only the backends waiting on a lock of backend `holder`,
/// directly or queued behind another waiter of it (the second waiter of a row lock waits
/// on the first waiter's tuple lock), so tests running in parallel do not see each
/// other's waiters. On Citus a waiter may wait on a worker, so there every waiter of
/// [`lock_waiters`] counts.
pub async fn waiters_of(db: &tokio_postgres::Client, prefix: &str, holder: i32) -> Vec<i32> {
    if is_citus(db).await {
        return lock_waiters(db, prefix).await;
    }
    db.query(
        "WITH RECURSIVE w(pid) AS (
             SELECT $2::int
             UNION
             SELECT a.pid FROM pg_stat_activity a, w WHERE w.pid = ANY(pg_blocking_pids(a.pid)))
         SELECT a.pid FROM pg_stat_activity a JOIN w USING (pid)
          WHERE a.query LIKE $1 AND a.pid <> $2",
        &[&format!("{prefix}%"), &holder],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Prometheus text as `name{labels}` → value (comments and blank lines skipped).
/// The broker's `/metrics` as name{labels} → value.
/// A plaintext frame with a fresh message id, this transactionId and payload.
pub fn plain_frame(txn: &str, payload: &[u8]) -> queen_log::frame::Frame {
    queen_log::frame::Frame {
        message_id: *uuid::Uuid::now_v7().as_bytes(),
        trace_id: None,
        transaction_id: txn.into(),
        producer_sub: None,
        encrypted: false,
        payload: payload.to_vec(),
    }
}

/// A one-frame segment blob (`queen_log`'s codec) of [`plain_frame`].
pub fn one_frame_blob(txn: &str, payload: &[u8]) -> Vec<u8> {
    queen_log::segment::encode_segment(&[plain_frame(txn, payload)]).unwrap()
}

/// A one-frame segment holding these payload bytes, pushed the way a producer other than
/// our broker would (log_push_one_v1 with its own blob; it creates what is missing).
pub async fn push_raw(
    db: &tokio_postgres::Client,
    queue: &str,
    partition: &str,
    txn: &str,
    payload: &[u8],
) {
    let blob = one_frame_blob(txn, payload);
    db.execute(
        "SELECT queen.log_push_one_v1($1, $2, 1, queen.xxh3_128($3), -1, $4)",
        &[&queue, &partition, &txn, &blob],
    )
    .await
    .unwrap();
}

pub async fn metrics(b: &Broker) -> std::collections::HashMap<String, f64> {
    let r = b
        .http
        .get(format!("{}/metrics", b.base))
        .send()
        .await
        .expect("metrics");
    assert!(r.status().is_success(), "/metrics answered {}", r.status());
    parse_metrics(&r.text().await.expect("metrics body"))
}

pub fn parse_metrics(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// One metric's value; panics naming it when it is missing.
pub fn metric(ms: &std::collections::HashMap<String, f64>, key: &str) -> f64 {
    *ms.get(key)
        .unwrap_or_else(|| panic!("metric {key} missing: {ms:?}"))
}

/// Per queen base table: its row count and a digest of all its rows.
pub async fn snapshot(db: &tokio_postgres::Client) -> Vec<(String, i64, String)> {
    let tables: Vec<String> = db
        .query(
            "SELECT table_name::text FROM information_schema.tables
              WHERE table_schema = 'queen' AND table_type = 'BASE TABLE' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.iter().any(|t| t == "log_consumers"), "{tables:?}");
    let mut out = Vec::new();
    for t in tables {
        let r = db
            .query_one(
                &format!(
                    "SELECT count(*), md5(COALESCE(string_agg(x::text, '|' ORDER BY x::text), ''))
                       FROM queen.{t} x"
                ),
                &[],
            )
            .await
            .unwrap();
        out.push((t, r.get(0), r.get(1)));
    }
    out
}

/// A queue with two messages, the first popped (a live lease and a cursor row).
pub struct Fixture {
    pub queue: String,
    pub pid: String,
    pub lease: String,
    pub txn: String,
}

pub async fn fixture(b: &Broker, prefix: &str) -> Fixture {
    let queue = unique(prefix);
    b.configure(&queue, serde_json::json!({"leaseTime": 60}))
        .await;
    b.push(
        serde_json::json!([{"queue": queue, "transactionId": "t1", "payload": 1},
                  {"queue": queue, "transactionId": "t2", "payload": 2}]),
    )
    .await;
    let pop = b.pop(&queue, "batch=1").await.expect("pop");
    Fixture {
        pid: pop["partitionId"].as_str().unwrap().to_string(),
        lease: pop["leaseId"].as_str().unwrap().to_string(),
        txn: pop["messages"][0]["transactionId"]
            .as_str()
            .unwrap()
            .to_string(),
        queue,
    }
}

/// A queue name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

impl Broker {
    /// The same broker, every request carrying `Authorization: Bearer <token>`.
    pub fn with_token(&self, token: &str) -> Broker {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().expect("header value"),
        );
        Broker {
            base: self.base.clone(),
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .expect("client"),
            state: self.state.clone(),
        }
    }

    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .expect("request");
        read(r).await
    }

    pub async fn post_raw(&self, path: &str, body: &'static str) -> (StatusCode, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        read(r).await
    }

    /// GET the way the SDKs do it: a JSON content type and no body.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .send()
            .await
            .expect("request");
        read(r).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .delete(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .send()
            .await
            .expect("request");
        read(r).await
    }

    pub async fn configure(&self, queue: &str, options: Value) -> Value {
        let (s, v) = self
            .post(
                "/api/v1/configure",
                &serde_json::json!({"queue": queue, "options": options}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "configure: {v}");
        v
    }

    /// Pushes (queue, txn, payload) items; returns the per-item results.
    pub async fn push(&self, items: Value) -> Vec<Value> {
        let (s, v) = self
            .post("/api/v1/push", &serde_json::json!({ "items": items }))
            .await;
        assert_eq!(s, StatusCode::CREATED, "push: {v}");
        v.as_array().expect("push array").clone()
    }

    /// A non-waiting pop; None on 204.
    pub async fn pop(&self, queue: &str, query: &str) -> Option<Value> {
        let (s, v) = self
            .get(&format!("/api/v1/pop/queue/{queue}?{query}"))
            .await;
        match s {
            StatusCode::NO_CONTENT => None,
            StatusCode::OK => Some(v),
            other => panic!("pop: unexpected {other}: {v}"),
        }
    }

    pub async fn ack_batch(&self, body: Value) -> (StatusCode, Value) {
        self.post("/api/v1/ack/batch", &body).await
    }
}

async fn read(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.expect("body");
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, v)
}

/// The ack body for every message of a pop, with one status for all.
pub fn acks_for(pop: &Value, status: &str, error: Option<&str>) -> Value {
    let lease = pop["leaseId"].as_str().unwrap();
    let acks: Vec<Value> = pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            serde_json::json!({
                "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                "leaseId": lease, "status": status, "error": error,
            })
        })
        .collect();
    serde_json::json!({ "acknowledgments": acks })
}

/// A registered stream query (docs/decisions.md, "Streams") over a fresh source queue
/// holding one message, that message leased by the query's group.
pub struct LeasedStream {
    pub query_id: String,
    pub group: String,
    pub pop: Value,
}

pub async fn leased_stream(b: &Broker, prefix: &str) -> LeasedStream {
    let source = unique(&format!("{prefix}-src"));
    b.push(serde_json::json!([{"queue": source, "transactionId": "m0", "payload": 0}]))
        .await;
    let (s, v) = b
        .post(
            "/streams/v1/queries",
            &serde_json::json!({"name": unique(prefix), "source_queue": source,
                                "config_hash": "h"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let query_id = v["query_id"].as_str().unwrap().to_string();
    let group = format!("streams.{query_id}");
    let pop = b
        .pop(
            &source,
            &format!("batch=1&wait=false&consumerGroup={group}"),
        )
        .await
        .expect("the source message");
    LeasedStream {
        query_id,
        group,
        pop,
    }
}

impl LeasedStream {
    /// A cycle body that acks the leased message, with `fields` (`state_ops`,
    /// `push_items`) added.
    pub fn cycle(&self, fields: Value) -> Value {
        let m = &self.pop["messages"][0];
        let mut body = serde_json::json!({
            "query_id": self.query_id, "partition_id": m["partitionId"],
            "consumer_group": self.group,
            "ack": {"transactionId": m["transactionId"], "leaseId": self.pop["leaseId"],
                    "status": "completed", "count": 1}});
        for (k, v) in fields.as_object().expect("an object of fields") {
            body[k] = v.clone();
        }
        body
    }

    pub fn partition_id(&self) -> &Value {
        &self.pop["messages"][0]["partitionId"]
    }
}

/// Push items of `queue`, one per transaction id, each with payload `{"t": id}`.
pub fn items(queue: &str, txns: &[&str]) -> Value {
    serde_json::json!(txns
        .iter()
        .map(|t| serde_json::json!({"queue": queue, "transactionId": t, "payload": {"t": t}}))
        .collect::<Vec<_>>())
}

/// The transaction ids of a pop's (or a listing page's) messages, in order.
pub fn txns(pop: &Value) -> Vec<String> {
    pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["transactionId"].as_str().unwrap().to_string())
        .collect()
}

/// A binary body's string: its length (u16, little-endian), then its bytes
/// (docs/http-api.md, "Binary bodies").
pub fn text16(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u16).to_le_bytes());
    out.extend(s.as_bytes());
}
