//! Section 14: queen-broker against Queen MQ's own C++ server (uWebSockets + libpq), the
//! server a Queen user runs today. Both on the same PostgreSQL cluster (Queen in a database
//! of its own, `queen_server_bench`, created fresh by the section), one server running and
//! loaded at a time, driven by the same load generator through the same HTTP API: 16
//! keep-alive connections over 100 partitions. Cells: push, consume (queue-level pop +
//! `/ack/batch` completed), pop with `autoAck=true` (Queen's own benchmark), end to end (8
//! producers + 8 consumers on a fresh queue), each at batch 1, 10 and 100; the servers
//! alternate round by round (Queen, broker, Queen, broker) and the table shows medians.
//! Queen's binary is built by bench/queen-server.sh; without it the section is one line.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use tokio_postgres::Client;

use crate::broker_proc::{http_client, stop_child, wait_healthy, Broker};
use crate::common::{
    connect, fmt_ms, fmt_num, fmt_ratio, progress, to_s, workspace_root, BResult, Ctx, Summary,
};
use crate::cpu::{Account, Spent};
use crate::report::Section;
use crate::wire::{AckBatch, AckItem, Acked, Pushed, VsPopped};

const CONNECTIONS: usize = 16;
const PARTITIONS: usize = 100;
const BATCHES: [usize; 3] = [1, 10, 100];
const ROUNDS: usize = 2;
/// Queen's database on the broker's cluster.
const QUEEN_DB: &str = "queen_server_bench";
/// The payload of every message (about 60 bytes of JSON).
const PAYLOAD: &str = r#"{"kind":"bench","body":"versus Queen's server, same payload"}"#;

/// Where bench/queen-server.sh puts Queen's binary.
pub fn queen_bin() -> PathBuf {
    workspace_root().join("target/queen-server/queen-server-ab23212/server/bin/queen-server")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Push,
    Consume,
    AutoAck,
    EndToEnd,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Push, Kind::Consume, Kind::AutoAck, Kind::EndToEnd];
    fn label(self) -> &'static str {
        match self {
            Kind::Push => "push",
            Kind::Consume => "consume (pop + ack/batch)",
            Kind::AutoAck => "pop autoAck=true",
            Kind::EndToEnd => "end to end (consumed)",
        }
    }
}

/// A server under load: its base URL and pid, whichever it is.
struct Target {
    base: String,
    pid: u32,
    http: reqwest::Client,
    /// The cluster's postmaster, whose processes are PostgreSQL's share of the CPU.
    postmaster: Option<u32>,
}

/// Queen's server as a child process, started from its `server/` folder (it installs its
/// schema from ../lib/schema on start).
struct QueenServer {
    child: Child,
    target: Target,
}

fn free_port() -> BResult<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(to_s)?;
    Ok(l.local_addr().map_err(to_s)?.port())
}

impl QueenServer {
    async fn start(
        bin: &Path,
        cfg: &tokio_postgres::Config,
        log: &Path,
        postmaster: Option<u32>,
    ) -> BResult<Self> {
        let host = match cfg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        let pg_port = cfg.get_ports().first().copied().unwrap_or(5432);
        let password = cfg
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let (port, udp) = (free_port()?, free_port()?);
        let buffer_dir = log.with_extension("filebuffer");
        std::fs::create_dir_all(&buffer_dir).map_err(to_s)?;
        let logf = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let server_dir = bin
            .parent()
            .and_then(Path::parent)
            .ok_or("queen bin path")?;
        let child = Command::new(bin)
            .current_dir(server_dir)
            .env("PG_HOST", host)
            .env("PG_PORT", pg_port.to_string())
            .env("PG_DB", QUEEN_DB)
            .env("PG_USER", cfg.get_user().unwrap_or("postgres"))
            .env("PG_PASSWORD", password)
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .env("QUEEN_UDP_NOTIFY_PORT", udp.to_string())
            .env("NUM_WORKERS", "2")
            .env("DB_POOL_SIZE", "20")
            .env("SIDECAR_POOL_SIZE", "20")
            .env("FILE_BUFFER_DIR", &buffer_dir)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().map_err(to_s)?)
            .stderr(logf)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        let pid = child.id().ok_or("queen-server exited at once")?;
        let s = QueenServer {
            child,
            target: Target {
                base: format!("http://127.0.0.1:{port}"),
                pid,
                http: http_client()?,
                postmaster,
            },
        };
        wait_healthy(&s.target.http, &s.target.base, 120, log).await?;
        Ok(s)
    }

    async fn stop(self) {
        stop_child(self.child, self.target.pid).await;
    }
}

/// Counters every task of a cell shares, per partition: messages the queue was given and
/// messages pops handed out, both counted when the answer arrives.
struct Shared {
    pushed: Vec<AtomicU64>,
    delivered: Vec<AtomicU64>,
}

impl Shared {
    fn new() -> Arc<Self> {
        let zeros = || (0..PARTITIONS).map(|_| AtomicU64::new(0)).collect();
        Arc::new(Shared {
            pushed: zeros(),
            delivered: zeros(),
        })
    }

    fn total(v: &[AtomicU64]) -> u64 {
        v.iter().map(|x| x.load(Ordering::Relaxed)).sum()
    }

    /// Partitions holding messages no pop has handed out yet.
    fn ready_partitions(&self) -> usize {
        self.pushed
            .iter()
            .zip(&self.delivered)
            .filter(|(p, d)| p.load(Ordering::Relaxed) > d.load(Ordering::Relaxed))
            .count()
    }
}

/// The index of a bench partition `p<i>`.
fn partition_index(name: Option<&str>) -> Option<usize> {
    name?
        .strip_prefix('p')?
        .parse()
        .ok()
        .filter(|i| *i < PARTITIONS)
}

/// What one connection did in a cell.
#[derive(Default)]
struct TaskOut {
    msgs: u64,
    pops: u64,
    /// Pops answering no message while, by the counters, ready messages remained that no
    /// other pop in flight could have taken (see [`popper`]).
    empty_ready: u64,
    lat_ms: Vec<f64>,
    errors: Vec<String>,
    finished: Duration,
}

impl TaskOut {
    fn err(&mut self, e: String) {
        if self.errors.len() < 5 {
            self.errors.push(e);
        }
    }
}

/// One JSON POST and its typed answer; an error names `what`, the status and the body.
async fn post_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
    body: &impl serde::Serialize,
    what: &str,
) -> BResult<T> {
    let body = serde_json::to_vec(body).expect("a request body serializes");
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("{what}: {}", to_s(&e)))?;
    let status = r.status();
    let b = r
        .bytes()
        .await
        .map_err(|e| format!("{what}: {}", to_s(&e)))?;
    if !status.is_success() {
        return Err(format!(
            "{what}: HTTP {status}: {}",
            String::from_utf8_lossy(&b)
        ));
    }
    serde_json::from_slice(&b)
        .map_err(|_| format!("{what}: unexpected body {}", String::from_utf8_lossy(&b)))
}

/// Pushes batches of `batch` round-robin over the partitions (connection k starts at
/// partition k, steps by `stride`) until the deadline or until `limit` messages went out.
#[allow(clippy::too_many_arguments)]
async fn pusher(
    http: reqwest::Client,
    base: String,
    queue: String,
    k: usize,
    stride: usize,
    batch: usize,
    deadline: Instant,
    limit: Option<u64>,
    shared: Arc<Shared>,
) -> TaskOut {
    let mut out = TaskOut::default();
    let url = format!("{base}/api/v1/push");
    let payload: &serde_json::value::RawValue =
        serde_json::from_str(PAYLOAD).expect("the payload is JSON");
    let mut part = k;
    let mut sent = 0u64;
    while Instant::now() < deadline && out.errors.len() < 5 && limit.is_none_or(|l| sent < l) {
        let index = part % PARTITIONS;
        let partition = format!("p{index}");
        part += stride;
        let items = (0..batch)
            .map(|_| crate::wire::PushItem {
                queue: &queue,
                partition: &partition,
                payload,
            })
            .collect();
        sent += batch as u64;
        let t = Instant::now();
        let r =
            post_json::<Vec<Pushed>>(&http, &url, &crate::wire::PushBody { items }, "push").await;
        out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        match r {
            Ok(items) => {
                let queued = items.iter().filter(|i| i.status == "queued").count() as u64;
                if queued < batch as u64 {
                    out.err(format!("push: {queued} of {batch} queued"));
                }
                out.msgs += queued;
                shared.pushed[index].fetch_add(queued, Ordering::Relaxed);
            }
            Err(e) => out.err(e),
        }
    }
    out.finished = deadline.elapsed();
    out
}

/// Pops batches from the queue (queue-level pop: the server picks the partition) and, when
/// `ack`, acks each in full with one `/ack/batch`, until the deadline or, with `drain`,
/// until every pushed message was delivered. Both servers hand a partition to one pop at
/// a time, so an empty answer counts as an empty pop "while ready" when the counters say
/// at least `consumers` partitions held undelivered messages: every other consumer's pop
/// in flight holds one at most, so one was free. A lower bound.
#[allow(clippy::too_many_arguments)]
async fn popper(
    http: reqwest::Client,
    base: String,
    queue: String,
    batch: usize,
    ack: bool,
    wait: bool,
    consumers: usize,
    start: Instant,
    deadline: Instant,
    drain: bool,
    shared: Arc<Shared>,
) -> TaskOut {
    let mut out = TaskOut::default();
    let url = format!(
        "{base}/api/v1/pop/queue/{queue}?batch={batch}&wait={wait}&timeout=500&autoAck={}",
        !ack
    );
    let ack_url = format!("{base}/api/v1/ack/batch");
    while Instant::now() < deadline && out.errors.len() < 5 {
        let t = Instant::now();
        let r = match http.get(&url).send().await {
            Ok(r) => r,
            Err(e) => {
                out.err(format!("pop: {}", to_s(&e)));
                continue;
            }
        };
        let status = r.status();
        let body = r.bytes().await.map_err(to_s);
        out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        out.pops += 1;
        let popped = match body {
            Ok(_) if status.as_u16() == 204 => VsPopped::default(),
            Ok(b) if status.is_success() => match serde_json::from_slice::<VsPopped>(&b) {
                Ok(p) => p,
                Err(e) => {
                    out.err(format!("pop body: {e}: {}", String::from_utf8_lossy(&b)));
                    continue;
                }
            },
            Ok(b) => {
                out.err(format!(
                    "pop: HTTP {status}: {}",
                    String::from_utf8_lossy(&b)
                ));
                continue;
            }
            Err(e) => {
                out.err(format!("pop: {e}"));
                continue;
            }
        };
        let n = popped.messages.len() as u64;
        let drained = || Shared::total(&shared.delivered) >= Shared::total(&shared.pushed);
        if n == 0 {
            if shared.ready_partitions() >= consumers {
                out.empty_ready += 1;
            }
            if drain && drained() {
                break;
            }
            continue;
        }
        let Some(index) = partition_index(popped.partition.as_deref()) else {
            out.err(format!(
                "pop: no bench partition named: {:?}",
                popped.partition
            ));
            continue;
        };
        shared.delivered[index].fetch_add(n, Ordering::Relaxed);
        if !ack {
            out.msgs += n;
        } else {
            // Queen names the partition once per answer, the broker on every message too.
            let lease = popped.lease_id.as_deref().filter(|l| !l.is_empty());
            let acks = popped
                .messages
                .iter()
                .map(|m| AckItem {
                    transaction_id: &m.transaction_id,
                    partition_id: m
                        .partition_id
                        .as_deref()
                        .or(popped.partition_id.as_deref())
                        .unwrap_or_default(),
                    lease_id: lease,
                    status: "completed",
                })
                .collect();
            let t = Instant::now();
            let body = AckBatch {
                acknowledgments: acks,
            };
            let r = post_json::<Vec<Acked>>(&http, &ack_url, &body, "ack").await;
            out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            match r {
                Ok(items) => {
                    let ok = items.iter().filter(|i| i.success).count() as u64;
                    if ok < n {
                        out.err(format!("ack: {ok} of {n} succeeded"));
                    }
                    out.msgs += ok;
                }
                Err(e) => out.err(e),
            }
        }
        if drain && drained() {
            break;
        }
    }
    out.finished = start.elapsed();
    out
}

/// One cell's result.
struct CellOut {
    rate: f64,
    lat: Summary,
    pops: u64,
    empty_ready: u64,
    cpu: Spent,
    msgs: u64,
    /// A consume cell whose queue ran dry before the deadline (rate over the time it took).
    drained: bool,
    errors: Vec<String>,
}

/// Messages per second a consume cell of this batch size is filled for when no earlier
/// round measured it (then [`FILL`] × the last rate): a cell that runs dry measures over the
/// time it took, a generous fill costs only fill time.
/// How many cell-lengths of the expected rate a consume cell is filled with: enough that
/// the cell ends before the queue runs dry, whose last messages sit in fewer partitions
/// than there are consumers (pops must then come back empty).
const FILL: f64 = 2.0;

fn first_guess(batch: usize) -> f64 {
    match batch {
        1 => 3_000.0,
        10 => 15_000.0,
        _ => 40_000.0,
    }
}

async fn join(tasks: Vec<tokio::task::JoinHandle<TaskOut>>) -> BResult<Vec<TaskOut>> {
    let mut v = Vec::new();
    for t in tasks {
        v.push(t.await.map_err(to_s)?);
    }
    Ok(v)
}

/// Fills a fresh queue with `n` messages through the server's own push (batch 100 over
/// every partition, 16 connections; not timed).
async fn fill(t: &Target, queue: &str, n: u64, shared: &Arc<Shared>) -> BResult<()> {
    let per = n.div_ceil(CONNECTIONS as u64);
    let far = Instant::now() + Duration::from_secs(600);
    let tasks = (0..CONNECTIONS)
        .map(|k| {
            tokio::spawn(pusher(
                t.http.clone(),
                t.base.clone(),
                queue.into(),
                k,
                CONNECTIONS,
                100,
                far,
                Some(per),
                shared.clone(),
            ))
        })
        .collect();
    let outs = join(tasks).await?;
    if let Some(e) = outs.iter().flat_map(|o| &o.errors).next() {
        return Err(format!("fill {queue}: {e}"));
    }
    Ok(())
}

async fn cell(
    t: &Target,
    kind: Kind,
    batch: usize,
    secs: f64,
    queue: &str,
    guess: f64,
) -> BResult<CellOut> {
    let shared = Shared::new();
    if matches!(kind, Kind::Consume | Kind::AutoAck) {
        fill(t, queue, (guess * secs * FILL) as u64, &shared).await?;
    }
    let account = Account::start_in(t.pid, t.postmaster);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let pusher_task = |k: usize, stride: usize| {
        tokio::spawn(pusher(
            t.http.clone(),
            t.base.clone(),
            queue.into(),
            k,
            stride,
            batch,
            deadline,
            None,
            shared.clone(),
        ))
    };
    let popper_task = |ack: bool, wait: bool, n: usize, drain: bool| {
        tokio::spawn(popper(
            t.http.clone(),
            t.base.clone(),
            queue.into(),
            batch,
            ack,
            wait,
            n,
            start,
            deadline,
            drain,
            shared.clone(),
        ))
    };
    let (pushers, poppers): (Vec<_>, Vec<_>) = match kind {
        Kind::Push => (
            (0..CONNECTIONS)
                .map(|k| pusher_task(k, CONNECTIONS))
                .collect(),
            vec![],
        ),
        Kind::Consume | Kind::AutoAck => (
            vec![],
            (0..CONNECTIONS)
                .map(|_| popper_task(kind == Kind::Consume, false, CONNECTIONS, true))
                .collect(),
        ),
        Kind::EndToEnd => {
            let half = CONNECTIONS / 2;
            (
                (0..half).map(|k| pusher_task(k, half)).collect(),
                (0..half)
                    .map(|_| popper_task(true, true, half, false))
                    .collect(),
            )
        }
    };
    let pushed = join(pushers).await?;
    let popped = join(poppers).await?;
    let cpu = account.finish();
    let counted = if kind == Kind::Push { &pushed } else { &popped };
    let msgs: u64 = counted.iter().map(|o| o.msgs).sum();
    let until = popped
        .iter()
        .map(|o| o.finished.as_secs_f64())
        .fold(0.0, f64::max);
    let drained = matches!(kind, Kind::Consume | Kind::AutoAck) && until < secs;
    let window = if drained { until } else { secs };
    let lat: Vec<f64> = pushed
        .iter()
        .chain(&popped)
        .flat_map(|o| o.lat_ms.iter().copied())
        .collect();
    Ok(CellOut {
        rate: msgs as f64 / window.max(1e-9),
        lat: Summary::of(&lat),
        pops: popped.iter().map(|o| o.pops).sum(),
        empty_ready: popped.iter().map(|o| o.empty_ready).sum(),
        cpu,
        msgs,
        drained,
        errors: pushed
            .into_iter()
            .chain(popped)
            .flat_map(|o| o.errors)
            .collect(),
    })
}

/// (server, kind, batch) → the cell's runs, in round order.
type Runs = Vec<((usize, Kind, usize), CellOut)>;

async fn all_cells(
    ctx: &Ctx,
    t: &Target,
    server: usize,
    round: usize,
    secs: f64,
    runs: &mut Runs,
) -> BResult<()> {
    let name = SERVERS[server];
    for kind in Kind::ALL {
        for batch in BATCHES {
            if !chosen(kind, batch) {
                continue;
            }
            let queue = format!(
                "bench_vs_{}_{round}_{batch}",
                format!("{kind:?}").to_lowercase()
            );
            let guess = runs
                .iter()
                .rev()
                .find(|(k, _)| *k == (server, kind, batch))
                .map_or(first_guess(batch), |(_, c)| c.rate.max(100.0));
            let c = cell(t, kind, batch, secs, &queue, guess).await?;
            progress(
                ctx,
                "versus",
                format!(
                    "round {round} {name} {} B={batch}: {} msgs/s{}, p50 {} ms p99 {} ms, empty pops {}/{}{}",
                    kind.label(),
                    fmt_num(c.rate),
                    if c.drained { " (drained)" } else { "" },
                    fmt_ms(c.lat.median),
                    fmt_ms(c.lat.p99),
                    c.empty_ready,
                    c.pops,
                    c.errors.first().map_or(String::new(), |e| format!(", {} errors (first: {e})", c.errors.len()))
                ),
            );
            runs.push(((server, kind, batch), c));
        }
    }
    Ok(())
}

const SERVERS: [&str; 2] = ["Queen's server", "queen-broker"];

/// A profiling aid, not for the figures: `QUEEN_VS_CELLS=consume:1,push:1` runs only those
/// cells (kinds push, consume, autoack, endtoend), `QUEEN_VS_SERVERS=broker` (or `queen`)
/// only that server (bench/README.md).
fn chosen(kind: Kind, batch: usize) -> bool {
    std::env::var("QUEEN_VS_CELLS").map_or(true, |cells| {
        let me = format!("{}:{batch}", format!("{kind:?}").to_lowercase());
        cells.split(',').any(|c| c.trim() == me)
    })
}

fn server_chosen(server: usize) -> bool {
    std::env::var("QUEEN_VS_SERVERS").map_or(true, |s| {
        s.split(',')
            .any(|n| n.trim() == ["queen", "broker"][server])
    })
}

/// Drops and creates Queen's database on the broker's cluster.
async fn fresh_queen_db(db: &Client) -> BResult<()> {
    // Two statements: DROP DATABASE refuses the implicit transaction of a multi-statement query.
    for sql in [
        format!("DROP DATABASE IF EXISTS {QUEEN_DB} WITH (FORCE)"),
        format!("CREATE DATABASE {QUEEN_DB}"),
    ] {
        db.batch_execute(&sql)
            .await
            .map_err(|e| format!("creating {QUEEN_DB}: {}", to_s(&e)))?;
    }
    Ok(())
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("14. Versus Queen's server");
    let bin = queen_bin();
    if !bin.exists() {
        progress(
            ctx,
            "versus",
            "skipped: Queen's server is not built (bench/queen-server.sh)",
        );
        sec.para(format!(
            "Skipped: `{}` is absent; `bench/queen-server.sh` builds it from ../shared/vendor.",
            bin.display()
        ));
        return Ok(sec);
    }
    let cfg: tokio_postgres::Config = ctx.database_url.parse().map_err(to_s)?;
    fresh_queen_db(db).await?;
    let postmaster = crate::cpu::postmaster_of(db).await;
    let secs = ctx.pick(2.0, 8.0);
    let mut runs: Runs = Vec::new();
    let mut result = Ok(());
    for round in 0..ROUNDS {
        let r = async {
            if server_chosen(0) {
                let log = ctx.logs.join(format!("queen-server-{round}.log"));
                let q = QueenServer::start(&bin, &cfg, &log, postmaster).await?;
                let r = all_cells(ctx, &q.target, 0, round, secs, &mut runs).await;
                q.stop().await;
                r?;
            }
            if !server_chosen(1) {
                return Ok(());
            }
            let log = ctx.logs.join(format!("broker-versus-{round}.log"));
            let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &[], &log).await?;
            let t = Target {
                base: b.base.clone(),
                pid: b.pid,
                http: b.http.clone(),
                postmaster,
            };
            let r = all_cells(ctx, &t, 1, round, secs, &mut runs).await;
            b.stop().await;
            r
        }
        .await;
        if let Err(e) = r {
            result = Err(e);
            break;
        }
    }
    let _ = crate::common::drop_queues(db, "bench\\_vs\\_%").await;
    if let Ok(admin) = connect(&ctx.database_url).await {
        let _ = admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {QUEEN_DB} WITH (FORCE)"))
            .await;
    }
    result?;
    let rows = table_rows(&runs);
    sec.para(format!(
        "Queen MQ's own server (C++, uWebSockets + libpq, {}; built by `bench/queen-server.sh`; \
         NUM_WORKERS=2, DB_POOL_SIZE=20, SIDECAR_POOL_SIZE=20, its database `{QUEEN_DB}` on this \
         cluster) against queen-broker (release binary, its defaults), one server running at a \
         time, {ROUNDS} rounds alternating Queen, broker, …; each row the median of the rounds. \
         One load generator for both: {CONNECTIONS} keep-alive HTTP connections, {PARTITIONS} \
         partitions, typed JSON, {secs} s per cell, payload {} bytes. **push**: each connection \
         pushes batches of B to one partition at a time, round-robin. **consume**: a fresh \
         queue filled through the server's own push (batch 100, not timed), then queue-level \
         pops `GET /api/v1/pop/queue/Q?batch=B&wait=false` and one `POST /api/v1/ack/batch` \
         (completed) per batch; **autoAck**: the same pops with `autoAck=true` and no ack \
         (Queen's own benchmark). A cell whose queue ran dry before the end (marked *) counts \
         over the time it took. **end to end**: {h} producers push batches of B while {h} \
         consumers long-poll pop (`wait=true`, 500 ms) and ack, on a fresh queue; consumed/s. \
         Latency: every request of the cell (push, pop and ack alike), client-side. CPU: \
         utime + stime from /proc of the server process, of the cluster (its postmaster, \
         the children it reaped and its live children) and of the bench process, per \
         message counted. Empty pops: pops answering no message while at least as many partitions held undelivered messages as there \
         are consumers (each pop holds one partition, so one was free; a lower bound), of \
         all pops.",
        "source github.com/queen-mq/queen ab23212",
        PAYLOAD.len(),
        h = CONNECTIONS / 2,
    ));
    sec.table(
        &[
            "cell",
            "B",
            "Queen msgs/s",
            "broker msgs/s",
            "broker / Queen",
            "p50 ms Q / b",
            "p99 ms Q / b",
            "CPU µs/msg server Q / b",
            "CPU µs/msg PostgreSQL Q / b",
            "CPU µs/msg generator Q / b",
            "empty pops Q / b",
            "errors",
        ],
        &rows,
    );
    Ok(sec)
}

/// One row per (kind, batch): the median over rounds of each figure, per server.
fn table_rows(runs: &Runs) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for kind in Kind::ALL {
        for batch in BATCHES {
            let of = |s: usize| -> Vec<&CellOut> {
                runs.iter()
                    .filter(|(k, _)| *k == (s, kind, batch))
                    .map(|(_, c)| c)
                    .collect()
            };
            let (q, b) = (of(0), of(1));
            if q.is_empty() || b.is_empty() {
                continue;
            }
            let med = |cs: &[&CellOut], f: &dyn Fn(&CellOut) -> f64| {
                Summary::of(&cs.iter().map(|c| f(c)).collect::<Vec<_>>()).median
            };
            let pair = |f: &dyn Fn(&CellOut) -> f64, fmt: fn(f64) -> String| {
                format!("{} / {}", fmt(med(&q, f)), fmt(med(&b, f)))
            };
            let us = |part: fn(&Spent) -> f64| {
                move |c: &CellOut| part(&c.cpu) * 1e6 / (c.msgs.max(1) as f64)
            };
            let rate = |cs: &[&CellOut]| {
                format!(
                    "{}{}",
                    fmt_num(med(cs, &|c| c.rate)),
                    if cs.iter().any(|c| c.drained) {
                        "*"
                    } else {
                        ""
                    }
                )
            };
            let empty = |cs: &[&CellOut]| {
                let (e, p): (u64, u64) = cs
                    .iter()
                    .fold((0, 0), |a, c| (a.0 + c.empty_ready, a.1 + c.pops));
                if p == 0 {
                    "–".to_string()
                } else {
                    format!("{e} ({:.1} %)", e as f64 * 100.0 / p as f64)
                }
            };
            let errors: Vec<&String> = q.iter().chain(&b).flat_map(|c| &c.errors).collect();
            let int = |x: f64| format!("{x:.0}");
            rows.push(vec![
                kind.label().to_string(),
                batch.to_string(),
                rate(&q),
                rate(&b),
                fmt_ratio(med(&b, &|c| c.rate), med(&q, &|c| c.rate)),
                pair(&|c| c.lat.median, fmt_ms),
                pair(&|c| c.lat.p99, fmt_ms),
                pair(&us(|s| s.broker), int),
                pair(&us(|s| s.postgres), int),
                pair(&us(|s| s.generator), int),
                format!("{} / {}", empty(&q), empty(&b)),
                errors
                    .first()
                    .map_or("0".into(), |e| format!("{}: {e}", errors.len())),
            ]);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(rate: f64, empty: u64, pops: u64, drained: bool) -> CellOut {
        CellOut {
            rate,
            lat: Summary::of(&[1.0, 2.0, 3.0]),
            pops,
            empty_ready: empty,
            cpu: Spent {
                generator: 0.1,
                broker: 0.2,
                postgres: 0.4,
                wall: 1.0,
            },
            msgs: 1000,
            drained,
            errors: vec![],
        }
    }

    #[test]
    fn rows_take_medians_per_server_and_mark_drained_cells() {
        let runs: Runs = vec![
            ((0, Kind::Consume, 10), out(1000.0, 1, 100, false)),
            ((1, Kind::Consume, 10), out(3000.0, 0, 100, true)),
            ((0, Kind::Consume, 10), out(2000.0, 1, 100, false)),
            ((1, Kind::Consume, 10), out(5000.0, 0, 100, false)),
        ];
        let rows = table_rows(&runs);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r[0], "consume (pop + ack/batch)");
        assert_eq!((r[2].as_str(), r[3].as_str()), ("1,500", "4,000*"));
        assert_eq!(r[4], "2.67×");
        assert_eq!(r[7], "200 / 200"); // server µs per message
        assert_eq!(r[10], "2 (1.0 %) / 0 (0.0 %)");
    }

    #[test]
    fn both_pop_answers_read_through_one_type() {
        // Queen: the partition once per answer, leaseId "" under autoAck.
        let q: VsPopped = serde_json::from_str(
            r#"{"success":true,"queue":"q","partition":"p1","partitionId":"pid","leaseId":"",
                "consumerGroup":"__QUEUE_MODE__","messages":[{"id":"m","transactionId":"t",
                "traceId":null,"data":{"a":1},"producerSub":null,"createdAt":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(q.partition_id.as_deref(), Some("pid"));
        assert_eq!(partition_index(q.partition.as_deref()), Some(1));
        assert_eq!(q.messages[0].partition_id, None);
        // Queen's empty pop as BUILD.md saw it.
        let e: VsPopped = serde_json::from_str(
            r#"{"error":"no_available_partition","messages":[],"success":false}"#,
        )
        .unwrap();
        assert!(e.messages.is_empty());
        assert_eq!(partition_index(Some("p100")), None);
    }
}
