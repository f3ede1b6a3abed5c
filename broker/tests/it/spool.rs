//! The push spool and maintenance mode (docs/availability.md), over real HTTP and a real
//! PostgreSQL: pushes answered `buffered` while push maintenance is on or the database
//! cannot be reached (a TCP proxy in front of the real server is cut, the network cut of
//! the brief), replayed exactly once and in order; a torn spool tail cut for real (the
//! file truncated mid-record); a full spool answering 503; a record the database refuses
//! filed in `refused.jsonl`; two brokers sharing the modes; a spool directory damaged
//! between two lives of a broker (each life a runtime of its own, dropped as the process
//! would stop), with pushes after the restart stored exactly once.
//!
//! The modes are database-wide: the tests of this file run one at a time and switch them
//! off before and after.

use crate::common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{admin, broker_url, modes_off, spool_dir, start_with, Broker};
use queen_broker::engine::spool::{Record, Spool};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

async fn spooling_broker(dir: &std::path::Path, url: Option<String>) -> Broker {
    let dir = dir.to_path_buf();
    start_with(move |c| {
        c.spool_dir = Some(dir);
        c.shared_state_ms = 100;
        c.pool_timeout_ms = 1_000;
        if let Some(u) = url {
            c.database_url = u;
        }
    })
    .await
}

fn queue() -> String {
    format!("spool-{}", Uuid::new_v4().simple())
}

async fn set_mode(b: &Broker, path: &str, enabled: bool) -> Value {
    let (s, v) = b.post(path, &json!({ "enabled": enabled })).await;
    assert_eq!(s, StatusCode::OK, "{path}: {v}");
    v
}

async fn buffers(b: &Broker) -> Value {
    let (s, v) = b.get("/api/v1/status/buffers").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

/// Waits (bounded) until the spool holds nothing.
async fn drained(b: &Broker) {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let v = buffers(b).await;
        if v["pending"] == 0 {
            return;
        }
        assert!(Instant::now() < until, "the spool did not drain: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every message of `queue` in order, popped and acked by a fresh group.
async fn all_messages(b: &Broker, queue: &str) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(p) = b
        .pop(queue, "batch=100&consumerGroup=check&subscriptionMode=all")
        .await
    {
        let msgs = p["messages"].as_array().unwrap().clone();
        let (s, v) = b.ack_batch(common::acks_for(&p, "completed", None)).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        out.extend(msgs);
    }
    out
}

fn payloads(msgs: &[Value]) -> Vec<i64> {
    msgs.iter()
        .map(|m| m["data"]["n"].as_i64().unwrap())
        .collect()
}

/// spool::maintenance_mode_buffers_then_replays_in_order_exactly_once
#[tokio::test]
async fn maintenance_mode_buffers_then_replays_in_order_exactly_once() {
    common::exclusive().await;
    modes_off().await;
    let dir = spool_dir();
    let b = spooling_broker(&dir, None).await;
    let q = queue();
    let on = set_mode(&b, "/api/v1/system/maintenance", true).await;
    assert_eq!(on["maintenanceMode"], true);
    let mut sent = Vec::new();
    for round in 0..3 {
        let items: Vec<Value> = (0..5)
            .map(|k| {
                let n = round * 5 + k;
                sent.push(n);
                // Every other item without a transactionId: the spool gives it one.
                if n % 2 == 0 {
                    json!({"queue": q, "payload": {"n": n}})
                } else {
                    json!({"queue": q, "payload": {"n": n}, "transactionId": format!("t-{n}")})
                }
            })
            .collect();
        let res = b.push(json!(items)).await;
        assert!(res.iter().all(|r| r["status"] == "buffered"), "{res:?}");
        assert!(res
            .iter()
            .all(|r| r["transaction_id"].as_str().is_some_and(|t| !t.is_empty())));
    }
    let v = buffers(&b).await;
    assert_eq!(v["pending"], 15, "{v}");
    assert_eq!(v["dbHealthy"], true);
    // Nothing reached the queue while the database is left alone.
    assert!(b.pop(&q, "batch=100&consumerGroup=peek").await.is_none());
    let (_, h) = b.get("/health").await;
    assert_eq!(h["maintenanceMode"], true, "{h}");
    assert_eq!(h["spool"]["pendingRecords"], 15, "{h}");

    let off = set_mode(&b, "/api/v1/system/maintenance", false).await;
    assert_eq!(off["maintenanceMode"], false);
    drained(&b).await;
    let got = all_messages(&b, &q).await;
    assert_eq!(payloads(&got), sent, "every buffered push once, in order");
    let m = common::metrics(&b).await;
    assert_eq!(m["queen_spool_records_total{event=\"replayed\"}"], 15.0);
    assert_eq!(m["queen_spool_pending_records"], 0.0);
    // Counted as pushed when the replay wrote them, never as duplicates.
    assert_eq!(m["queen_messages_pushed_total"], 15.0);
    assert_eq!(m["queen_messages_duplicate_total"], 0.0);
    // A push after the drain goes straight to the database.
    let res = b.push(json!([{"queue": q, "payload": {"n": 99}}])).await;
    assert_eq!(res[0]["status"], "queued");
    modes_off().await;
}

/// A TCP proxy in front of the real server whose link can be cut (a network cut): cut,
/// it closes every open connection and refuses new ones.
struct Proxy {
    addr: SocketAddr,
    open: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let open = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (o, ls) = (open.clone(), links.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = l.accept().await else {
                    continue;
                };
                if !o.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let h = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                ls.lock().unwrap().push(h.abort_handle());
            }
        });
        Proxy { addr, open, links }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for h in self.links.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// The broker's URL with its host and port replaced by the proxy's.
    fn url(&self) -> String {
        let u = broker_url();
        let at = u.find('@').unwrap();
        let slash = u[at..].find('/').unwrap() + at;
        format!("{}{}{}", &u[..=at], self.addr, &u[slash..])
    }
}

fn target() -> SocketAddr {
    let u = broker_url();
    let at = u.find('@').unwrap();
    let slash = u[at..].find('/').unwrap() + at;
    let hostport = &u[at + 1..slash];
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    };
    hostport.parse().unwrap()
}

/// spool::a_network_cut_is_buffered_and_replayed_before_later_pushes
#[tokio::test]
async fn a_network_cut_is_buffered_and_replayed_before_later_pushes() {
    common::exclusive().await;
    modes_off().await;
    let proxy = Proxy::start(target()).await;
    let dir = spool_dir();
    let b = spooling_broker(&dir, Some(proxy.url())).await;
    let q = queue();
    let first = b.push(json!([{"queue": q, "payload": {"n": 0}}])).await;
    assert_eq!(first[0]["status"], "queued");

    proxy.cut();
    let mut expect = vec![0];
    for n in 1..=6 {
        let res = b.push(json!([{"queue": q, "payload": {"n": n}}])).await;
        assert_eq!(res[0]["status"], "buffered", "push {n} while cut: {res:?}");
        expect.push(n);
    }
    let v = buffers(&b).await;
    assert_eq!(v["dbHealthy"], false, "{v}");
    assert_eq!(v["pending"], 6, "{v}");
    let (hs, h) = b.get("/health").await;
    assert_eq!(hs, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(h["spool"]["spooling"], true, "{h}");
    // Pops and acks cannot be served: 503, nothing taken.
    let (ps, _) = b.get(&format!("/api/v1/pop/queue/{q}?batch=1")).await;
    assert_eq!(ps, StatusCode::SERVICE_UNAVAILABLE);

    proxy.restore();
    // Pushed at once after the restore: behind the buffered ones of its partition.
    for n in 7..=9 {
        let res = b.push(json!([{"queue": q, "payload": {"n": n}}])).await;
        assert!(
            res[0]["status"] == "buffered" || res[0]["status"] == "queued",
            "{res:?}"
        );
        expect.push(n);
    }
    drained(&b).await;
    let got = all_messages(&b, &q).await;
    assert_eq!(payloads(&got), expect, "each once, in acceptance order");
    assert_eq!(buffers(&b).await["dbHealthy"], true);
}

/// spool::a_torn_tail_is_cut_not_replayed: records written by one spool, the file cut
/// mid-record (a torn write), opened again: the damaged record is cut and counted, the
/// others are replayed by a broker.
#[tokio::test]
async fn a_torn_tail_is_cut_not_replayed() {
    common::exclusive().await;
    modes_off().await;
    let dir = spool_dir();
    let q = queue();
    let tenant = Uuid::parse_str("00000000-0000-0000-0000-000000000001").unwrap();
    {
        let s = Spool::open(&dir, 1 << 30).unwrap();
        for n in 0..3 {
            let r = Record {
                seq: 0,
                tenant,
                queue: q.clone(),
                partition: "Default".into(),
                txn: format!("torn-{n}"),
                message_id: Uuid::now_v7(),
                trace: None,
                encrypted: false,
                maybe_written: false,
                spooled_at_ms: 0,
                payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
                producer_sub: None,
            };
            s.append(vec![r]).await.unwrap();
        }
        assert_eq!(s.stats().pending_records, 3);
    }
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .unwrap();
    let len = std::fs::metadata(&file).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.set_len(len - 5).unwrap();
    drop(f);

    let b = spooling_broker(&dir, None).await;
    drained(&b).await;
    let v = buffers(&b).await;
    assert_eq!(v["tornCuts"], 1, "{v}");
    let got = all_messages(&b, &q).await;
    assert_eq!(
        payloads(&got),
        vec![0, 1],
        "the torn record is not replayed"
    );
    assert!(std::fs::metadata(&file).map_or(true, |m| m.len() < len - 5));
}

/// spool::a_full_spool_answers_503_and_promises_nothing
#[tokio::test]
async fn a_full_spool_answers_503_and_promises_nothing() {
    common::exclusive().await;
    modes_off().await;
    let dir = spool_dir();
    let d = dir.clone();
    let b = start_with(move |c| {
        c.spool_dir = Some(d);
        c.spool_max_bytes = 1 << 20;
        c.shared_state_ms = 100;
    })
    .await;
    let q = queue();
    set_mode(&b, "/api/v1/system/maintenance", true).await;
    let big = "x".repeat(700 * 1024);
    let first = b.push(json!([{"queue": q, "payload": {"s": big}}])).await;
    assert_eq!(first[0]["status"], "buffered");
    let r = b
        .http
        .post(format!("{}/api/v1/push", b.base))
        .json(&json!({"items": [{"queue": q, "payload": {"s": big}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key("retry-after"));
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_SPOOL_MAX_BYTES"),
        "{body}"
    );
    assert_eq!(buffers(&b).await["pending"], 1);
    set_mode(&b, "/api/v1/system/maintenance", false).await;
    drained(&b).await;
    assert_eq!(all_messages(&b, &q).await.len(), 1);
    modes_off().await;
}

/// spool::a_refused_record_is_filed_and_never_blocks_the_rest: a broker without the
/// encryption key spools pushes to an encrypting queue; the replay cannot seal them, so
/// they go to refused.jsonl while the other queue's records are replayed.
#[tokio::test]
async fn a_refused_record_is_filed_and_never_blocks_the_rest() {
    common::exclusive().await;
    modes_off().await;
    let key = queen_log::encryption::parse_key(
        "8f3c1d2e4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0",
    )
    .unwrap();
    let keyed =
        start_with(move |c| c.encryption_key = Some(queen_broker::config::EncryptionKey(key)))
            .await;
    let sealed = queue();
    keyed
        .configure(&sealed, json!({"encryptionEnabled": true}))
        .await;
    let plain = queue();
    let dir = spool_dir();
    let b = spooling_broker(&dir, None).await;
    set_mode(&b, "/api/v1/system/maintenance", true).await;
    let res = b
        .push(json!([
            {"queue": plain, "payload": {"n": 1}},
            {"queue": sealed, "payload": {"n": 2}, "transactionId": "refused-1"},
            {"queue": plain, "payload": {"n": 3}},
        ]))
        .await;
    assert!(res.iter().all(|r| r["status"] == "buffered"), "{res:?}");
    set_mode(&b, "/api/v1/system/maintenance", false).await;
    drained(&b).await;
    assert_eq!(payloads(&all_messages(&b, &plain).await), vec![1, 3]);
    let v = buffers(&b).await;
    assert_eq!(v["refused"], 1, "{v}");
    let filed = std::fs::read_to_string(dir.join("refused.jsonl")).unwrap();
    let line: Value = serde_json::from_str(filed.lines().next().unwrap()).unwrap();
    assert_eq!(line["transactionId"], "refused-1");
    assert_eq!(line["queue"], sealed.as_str());
    assert!(
        line["error"]
            .as_str()
            .unwrap()
            .contains("QUEEN_ENCRYPTION_KEY"),
        "{line}"
    );
    modes_off().await;
}

/// spool::two_brokers_share_the_modes: switched through one broker, the other follows
/// within QUEEN_SHARED_STATE_MS; pop maintenance answers 204 on both.
#[tokio::test]
async fn two_brokers_share_the_modes() {
    common::exclusive().await;
    modes_off().await;
    let (da, db) = (spool_dir(), spool_dir());
    let a = spooling_broker(&da, None).await;
    let b = spooling_broker(&db, None).await;
    let q = queue();
    a.push(json!([{"queue": q, "payload": {"n": 1}}])).await;
    let v = set_mode(&a, "/api/v1/system/maintenance/pop", true).await;
    assert_eq!(v["popMaintenanceMode"], true);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, h) = b.get("/health").await;
        if h["popMaintenanceMode"] == true {
            break;
        }
        assert!(
            Instant::now() < until,
            "broker b never saw pop maintenance: {h}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for x in [&a, &b] {
        let (s, _) = x.get(&format!("/api/v1/pop/queue/{q}?batch=1")).await;
        assert_eq!(s, StatusCode::NO_CONTENT);
    }
    let (_, g) = b.get("/api/v1/system/maintenance/pop").await;
    assert_eq!(g["popMaintenanceMode"], true, "{g}");
    // Bad input is still refused, and changes nothing.
    let (s, e) = b
        .post("/api/v1/system/maintenance", &json!({"enabled": "yes"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
    set_mode(&b, "/api/v1/system/maintenance/pop", false).await;
    let until = Instant::now() + Duration::from_secs(5);
    while a.pop(&q, "batch=1").await.is_none() {
        assert!(Instant::now() < until, "broker a still paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    modes_off().await;
}

/// spool::a_push_that_may_have_been_written_is_found_and_holds_the_purge: a record
/// spooled after its connection ended under the statement (`maybe_written`) whose
/// original is in the queue: while the replay is held (the partition row locked by a
/// session), the sidecar purge hold is in the database; the replay finds the original
/// (deduplicated, stored once); once drained, the hold is released.
#[tokio::test]
async fn a_push_that_may_have_been_written_is_found_and_holds_the_purge() {
    common::exclusive().await;
    modes_off().await;
    let q = queue();
    let direct = common::start().await;
    direct
        .push(json!([{"queue": q, "transactionId": "mw-1", "payload": {"n": 1}}]))
        .await;
    let dir = spool_dir();
    let tenant = Uuid::parse_str("00000000-0000-0000-0000-000000000001").unwrap();
    {
        let s = Spool::open(&dir, 1 << 30).unwrap();
        let rec = |txn: &str, n: i64, maybe_written: bool| Record {
            seq: 0,
            tenant,
            queue: q.clone(),
            partition: "Default".into(),
            txn: txn.into(),
            message_id: Uuid::now_v7(),
            trace: None,
            encrypted: false,
            maybe_written,
            spooled_at_ms: 0,
            payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
            producer_sub: None,
        };
        s.append(vec![rec("mw-1", 1, true), rec("mw-2", 2, false)])
            .await
            .unwrap();
    }
    let id = std::fs::read_to_string(dir.join("spool.id")).unwrap();
    let key = format!("spool:{}", id.trim());
    let mut db = admin().await;
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
    let b = spooling_broker(&dir, None).await;
    let watcher = admin().await;
    let held = "SELECT COALESCE((SELECT value ? 'holdSince' FROM queen.maintenance_state
                                  WHERE key = $1), false)";
    let until = Instant::now() + Duration::from_secs(20);
    while !watcher
        .query_one(held, &[&key])
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(
            Instant::now() < until,
            "no purge hold while a maybe-written record waits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        buffers(&b).await["pending"],
        2,
        "the replay waits on the partition row"
    );
    tx.rollback().await.unwrap();
    drained(&b).await;
    let v = buffers(&b).await;
    assert_eq!(v["deduplicated"], 1, "{v}");
    assert_eq!(payloads(&all_messages(&b, &q).await), vec![1, 2]);
    let until = Instant::now() + Duration::from_secs(20);
    while watcher
        .query_one(held, &[&key])
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(Instant::now() < until, "the purge hold outlived the drain");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `f` in a runtime of its own: one life of the brokers it starts. When it returns,
/// the runtime and every task of those brokers are gone, the spool directory's lock with
/// them, as after the process stopped.
fn life<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(f);
    rt.shutdown_timeout(Duration::from_secs(10));
    out
}

/// A broker on `dir` behind a proxy: `direct` pushed (answered `queued`), the database
/// cut, `ns` pushed (each answered `buffered`), the database back, the spool drained.
/// Returns the broker and its buffers answer.
async fn cut_push_restore(
    dir: &std::path::Path,
    q: &str,
    direct: &[i64],
    ns: std::ops::RangeInclusive<i64>,
) -> (Broker, Value) {
    let proxy = Proxy::start(target()).await;
    let b = spooling_broker(dir, Some(proxy.url())).await;
    for n in direct {
        let res = b.push(json!([{"queue": q, "payload": {"n": n}}])).await;
        assert_eq!(res[0]["status"], "queued", "{res:?}");
    }
    proxy.cut();
    for n in ns {
        let res = b.push(json!([{"queue": q, "payload": {"n": n}}])).await;
        assert_eq!(res[0]["status"], "buffered", "push {n} while cut: {res:?}");
    }
    proxy.restore();
    drained(&b).await;
    let v = buffers(&b).await;
    (b, v)
}

fn spool_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// The reproduction of docs/availability.md "After damage": a first life spools 10
/// pushes during a cut and replays them (the database's mark moves past them); the
/// directory is damaged by `damage` while the broker is down; a second life spools 10
/// more during another cut. Every push is stored exactly once, in order: none of the
/// second life's records is numbered at or below the mark and skipped as replayed.
/// Returns the second life's buffers answer.
fn damaged_between_lives(damage: impl FnOnce(&std::path::Path)) -> (PathBuf, Value) {
    common::exclusive_blocking();
    let dir = spool_dir();
    let q = queue();
    let v = life(async {
        modes_off().await;
        cut_push_restore(&dir, &q, &[0], 1..=10).await.1
    });
    assert!(v["replayedThrough"].as_u64().unwrap() >= 10, "{v}");
    damage(&dir);
    let v = life(async {
        let (b, v) = cut_push_restore(&dir, &q, &[], 11..=20).await;
        let got = all_messages(&b, &q).await;
        assert_eq!(
            payloads(&got),
            (0..=20).collect::<Vec<i64>>(),
            "every push answered before and after the damage, once, in order"
        );
        v
    });
    (dir, v)
}

/// spool::damage_in_the_middle_loses_no_later_push
#[test]
fn damage_in_the_middle_loses_no_later_push() {
    let (dir, v) = damaged_between_lives(|dir| {
        let f = spool_files(dir).pop().unwrap();
        let mut b = std::fs::read(&f).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x5a;
        std::fs::write(&f, b).unwrap();
    });
    assert_eq!(v["damaged"], 1, "{v}");
    let filed = std::fs::read_to_string(dir.join("refused.jsonl")).unwrap();
    let line: Value = serde_json::from_str(filed.lines().next().unwrap()).unwrap();
    assert_eq!(line["kind"], "damaged", "{line}");
    assert!(
        line["bytes"].as_str().is_some_and(|s| !s.is_empty()),
        "{line}"
    );
}

/// spool::a_torn_tail_loses_no_later_push
#[test]
fn a_torn_tail_loses_no_later_push() {
    let (_, v) = damaged_between_lives(|dir| {
        let f = spool_files(dir).pop().unwrap();
        let len = std::fs::metadata(&f).unwrap().len();
        let h = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
        h.set_len(len - 5).unwrap();
    });
    assert_eq!(v["tornCuts"], 1, "{v}");
}

/// spool::an_empty_newest_file_loses_no_later_push: the state a crash leaves between a
/// rotation (the replayed file deleted, the next one created) and its first write.
#[test]
fn an_empty_newest_file_loses_no_later_push() {
    damaged_between_lives(|dir| {
        let f = spool_files(dir).pop().unwrap();
        let name = f.file_name().unwrap().to_str().unwrap();
        let first: u64 = name[6..name.len() - 4].parse().unwrap();
        std::fs::remove_file(&f).unwrap();
        std::fs::write(dir.join(format!("spool-{:020}.log", first + 10)), b"").unwrap();
    });
}

/// spool::a_missing_file_loses_no_later_push: the spool files and the `replayed` hint
/// gone: `highwater` alone carries the numbers (the spool keeps its id).
#[test]
fn a_missing_file_loses_no_later_push() {
    let mut id = String::new();
    let (_, v) = damaged_between_lives(|dir| {
        id = std::fs::read_to_string(dir.join("spool.id")).unwrap();
        for f in spool_files(dir) {
            std::fs::remove_file(f).unwrap();
        }
        std::fs::remove_file(dir.join("replayed")).unwrap();
    });
    assert_eq!(v["spoolId"], id.trim(), "{v}");
}

/// spool::a_directory_wiped_but_its_id_loses_no_later_push: only `spool.id` left (files,
/// `replayed` and `highwater` gone): the database's mark is the only trace of the numbers
/// given, and the spool continues under a new id.
#[test]
fn a_directory_wiped_but_its_id_loses_no_later_push() {
    let mut old = String::new();
    let (dir, v) = damaged_between_lives(|dir| {
        old = std::fs::read_to_string(dir.join("spool.id")).unwrap();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap() != "spool.id" {
                std::fs::remove_file(p).unwrap();
            }
        }
    });
    let now = std::fs::read_to_string(dir.join("spool.id")).unwrap();
    assert_ne!(now.trim(), old.trim(), "a new spool id");
    assert_eq!(v["spoolId"], now.trim(), "{v}");
}

/// spool::a_wiped_directory_loses_no_later_push: everything gone (a new spool id, a mark
/// of its own).
#[test]
fn a_wiped_directory_loses_no_later_push() {
    damaged_between_lives(|dir| {
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::create_dir_all(dir).unwrap();
    });
}

/// spool::a_damaged_record_costs_that_record_only: five records pending, the third one's
/// body damaged: the other four are replayed, the third's frame is filed in
/// refused.jsonl (its exact bytes), counted and not replayed.
#[tokio::test]
async fn a_damaged_record_costs_that_record_only() {
    use base64::Engine;
    common::exclusive().await;
    modes_off().await;
    let dir = spool_dir();
    let q = queue();
    let tenant = Uuid::parse_str("00000000-0000-0000-0000-000000000001").unwrap();
    {
        let s = Spool::open(&dir, 1 << 30).unwrap();
        for n in 0..5 {
            let r = Record {
                seq: 0,
                tenant,
                queue: q.clone(),
                partition: "Default".into(),
                txn: format!("dmg-{n}"),
                message_id: Uuid::now_v7(),
                trace: None,
                encrypted: false,
                maybe_written: false,
                spooled_at_ms: 0,
                payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
                producer_sub: None,
            };
            s.append(vec![r]).await.unwrap();
        }
    }
    let file = spool_files(&dir).pop().unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    // The frames: [length u32][checksum u64][body]; the third one's.
    let mut at = 0;
    for _ in 0..2 {
        at += 12 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    let frame_len = 12 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let frame = bytes[at..at + frame_len].to_vec();
    bytes[at + 12 + 40] ^= 1;
    let damaged_frame = bytes[at..at + frame_len].to_vec();
    assert_ne!(frame, damaged_frame);
    std::fs::write(&file, &bytes).unwrap();

    let b = spooling_broker(&dir, None).await;
    drained(&b).await;
    assert_eq!(payloads(&all_messages(&b, &q).await), vec![0, 1, 3, 4]);
    let v = buffers(&b).await;
    assert_eq!(v["damaged"], 1, "{v}");
    assert_eq!(v["tornCuts"], 0, "{v}");
    let m = common::metrics(&b).await;
    assert_eq!(m["queen_spool_records_total{event=\"damaged\"}"], 1.0);
    let filed = std::fs::read_to_string(dir.join("refused.jsonl")).unwrap();
    let line: Value = serde_json::from_str(filed.lines().next().unwrap()).unwrap();
    assert_eq!(line["kind"], "damaged", "{line}");
    assert_eq!(line["offset"], at, "{line}");
    let filed_bytes = base64::engine::general_purpose::STANDARD
        .decode(line["bytes"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        filed_bytes, damaged_frame,
        "exactly the damaged record's bytes"
    );
    assert!(
        line["error"].as_str().unwrap().contains("checksum"),
        "{line}"
    );
}

/// Producer identity (docs/security.md, "Producer identity"): a push spooled under a
/// token keeps the token's subject, and its replay stores it (the record's flag 8).
#[tokio::test]
async fn a_spooled_push_keeps_the_tokens_subject() {
    const SECRET: &str = "spool-psub-secret";
    common::exclusive().await;
    modes_off().await;
    let dir = spool_dir();
    let b = start_with(move |c| {
        c.spool_dir = Some(dir);
        c.shared_state_ms = 100;
        c.auth = Some(queen_broker::config::AuthConfig::hs256(SECRET));
    })
    .await;
    let claims = json!({"tenant": Uuid::new_v4(), "role": "admin", "sub": "spooled-producer"});
    let alice = b.with_token(&queen_broker::http::auth::sign(SECRET.as_bytes(), &claims));
    let q = queue();
    set_mode(&alice, "/api/v1/system/maintenance", true).await;
    let res = alice
        .push(json!([{"queue": q, "payload": {"n": 1}, "producerSub": "attacker"}]))
        .await;
    assert_eq!(res[0]["status"], "buffered", "{res:?}");
    set_mode(&alice, "/api/v1/system/maintenance", false).await;
    drained(&alice).await;
    let got = all_messages(&alice, &q).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["producerSub"], "spooled-producer", "{got:?}");
    modes_off().await;
}
