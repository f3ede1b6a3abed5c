//! Measures what the broker's two memory caps really bound: the
//! resident memory of the real `queen-broker` process with the cache (or registry) on at
//! a given cap, minus the same workload with it off, against the cap; and the push time
//! of the dedup cache against no cache when the partitions pushed to do not fit in it.
//!
//!     cargo build --release -p queen_broker --bin queen-broker --example memory_caps
//!     target/release/examples/memory_caps --database-url postgres://queen_broker_test@127.0.0.1:5751/queen_test [--quick]
//!         [--broker-bin target/release/queen-broker] [--only dedup|registry]
//!
//! Each run starts its own broker (a child process) with the cap under test, drives it
//! over HTTP and reads VmRSS / VmHWM from /proc/<pid>/status; queues it creates are named
//! `memcaps-*` and deleted at the end. Prints Markdown tables on stdout.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

type Res<T> = Result<T, String>;

struct Args {
    db: String,
    bin: PathBuf,
    quick: bool,
    only: Option<String>,
}

fn args() -> Res<Args> {
    let mut a = Args {
        db: String::new(),
        bin: PathBuf::from("target/release/queen-broker"),
        quick: false,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        match k.as_str() {
            "--database-url" => a.db = it.next().ok_or("--database-url needs a value")?,
            "--broker-bin" => a.bin = it.next().ok_or("--broker-bin needs a value")?.into(),
            "--only" => a.only = Some(it.next().ok_or("--only needs a value")?),
            "--quick" => a.quick = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.db.is_empty() {
        return Err("--database-url is required".into());
    }
    Ok(a)
}

/// A broker child process on a free port.
struct Broker {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Broker {
    async fn start(a: &Args, env: &[(&str, String)]) -> Res<Broker> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let mut cmd = Command::new(&a.bin);
        cmd.env("QUEEN_DATABASE_URL", &a.db)
            .env("QUEEN_LISTEN", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", a.bin.display()))?;
        let b = Broker {
            child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        for _ in 0..100 {
            if let Ok(r) = b.http.get(format!("{}/health", b.base)).send().await {
                if r.status().is_success() {
                    return Ok(b);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("broker did not become healthy".into())
    }

    async fn post(&self, path: &str, body: &Value) -> Res<Value> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(format!("POST {path}: {status} {v}"));
        }
        Ok(v)
    }

    async fn get(&self, path: &str) -> Res<(u16, String)> {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let s = r.status().as_u16();
        Ok((s, r.text().await.unwrap_or_default()))
    }

    /// (VmRSS, VmHWM) in bytes.
    fn rss(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    async fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics").await.unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / MIB)
}

/// Resident memory once allocations settled: mimalloc returns freed pages to the OS
/// (purges) about a second after they were freed, on its next allocation activity, which
/// a live broker always has; a few requests after the delay provide it here.
async fn settled_rss(b: &Broker) -> (u64, u64) {
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let _ = b.get("/health").await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.rss()
}

/// One dedup run: `ids` transactionIds pushed round-robin over `parts` partitions in
/// requests of `per` items, with the cache at `cap_mb` (0 = off). The same pushes go
/// first to a queue without a dedup window (never cached): every code path, buffer and
/// thread of the push is warm when the baseline RSS is read, so the growth over it
/// during the measured pushes (window 3600 s) is what the cache holds, plus noise that
/// the cache-off run shows.
struct DedupRun {
    secs: f64,
    base: u64,
    rss: u64,
    accounted: f64,
    loads: f64,
    skipped: f64,
}

/// Pushes of `per` items each, every push spread over all `parts` partitions (item i to
/// partition i mod parts), as a producer fanning out over partitions does.
async fn push_all(b: &Broker, q: &str, ids: usize, parts: usize, per: usize) -> Res<f64> {
    let t0 = Instant::now();
    let mut next = 0usize;
    while next < ids {
        let items: Vec<Value> = (next..(next + per).min(ids))
            .map(|i| json!({"queue": q, "partition": format!("p{}", i % parts), "transactionId": format!("id-{i}"), "payload": i}))
            .collect();
        next += items.len();
        b.post("/api/v1/push", &json!({ "items": items })).await?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

async fn delete_queue(b: &Broker, q: &str) {
    let _ = b
        .http
        .delete(format!("{}/api/v1/resources/queues/{q}", b.base))
        .send()
        .await;
}

async fn dedup_run(a: &Args, cap_mb: usize, ids: usize, parts: usize, per: usize) -> Res<DedupRun> {
    let b = Broker::start(a, &[("QUEEN_DEDUP_CACHE_MB", cap_mb.to_string())]).await?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (warm, q) = (
        format!("memcaps-warm-{tag}"),
        format!("memcaps-dedup-{tag}"),
    );
    for (queue, window) in [(&warm, 0), (&q, 3600)] {
        b.post(
            "/api/v1/configure",
            &json!({"queue": queue, "options": {"dedupWindowSeconds": window}}),
        )
        .await?;
    }
    push_all(&b, &warm, ids, parts, per).await?;
    let (base, _) = settled_rss(&b).await;
    let secs = push_all(&b, &q, ids, parts, per).await?;
    let (rss, _) = settled_rss(&b).await;
    let run = DedupRun {
        secs,
        base,
        rss,
        accounted: b.metric("queen_dedup_cache_bytes").await,
        loads: b.metric("queen_dedup_cache_loads_total").await,
        skipped: b.metric("queen_dedup_cache_skipped_total").await,
    };
    delete_queue(&b, &warm).await;
    delete_queue(&b, &q).await;
    b.stop();
    Ok(run)
}

async fn dedup(a: &Args) -> Res<()> {
    // The case: 1M ids over 10 partitions with a 16 MiB cache (100k ids, about
    // 3-6 MiB of table, per partition: they do not fit together). --quick scales it down.
    let (cap, ids, parts, per) = if a.quick {
        (4, 250_000, 10, 1000)
    } else {
        (16, 1_000_000, 10, 1000)
    };
    println!("\n### Push dedup cache: {ids} ids over {parts} partitions, {per} per push (each push spread over all partitions), window 3600 s\n");
    println!("| QUEEN_DEDUP_CACHE_MB | push time s | RSS after warm-up MiB | RSS after pushes MiB | growth MiB | growth ÷ cap | accounted MiB | loads | skipped loads |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let off = dedup_run(a, 0, ids, parts, per).await?;
    let on = dedup_run(a, cap, ids, parts, per).await?;
    for (c, r) in [(0, &off), (cap, &on)] {
        let growth = r.rss.saturating_sub(r.base);
        println!(
            "| {c} | {:.1} | {} | {} | {} | {} | {:.1} | {} | {} |",
            r.secs,
            mib(r.base),
            mib(r.rss),
            mib(growth),
            if c == 0 {
                "—".into()
            } else {
                format!("{:.2}", growth as f64 / (c as f64 * MIB))
            },
            if c == 0 { 0.0 } else { r.accounted / MIB },
            r.loads,
            r.skipped
        );
    }
    println!(
        "\ncache on / cache off push time: {:.2}×",
        on.secs / off.secs
    );
    // A case that fits: one partition whose window is a quarter of the cache.
    let fit_ids = if a.quick { 20_000 } else { 80_000 };
    let off1 = dedup_run(a, 0, fit_ids, 1, per).await?;
    let on1 = dedup_run(a, cap, fit_ids, 1, per).await?;
    println!(
        "\nfits (one partition, {fit_ids} ids): push time cache on {:.1} s vs off {:.1} s ({:.2}×)",
        on1.secs,
        off1.secs,
        on1.secs / off1.secs
    );
    Ok(())
}

/// One registry run: leasing pops by `pops` distinct consumer groups whose names are
/// `name_len` bytes, each leaving a registry entry of `batch` hashes. The same number of
/// autoAck pops by other groups of the same name length (no registry entry) warm every
/// code path first; the growth over that baseline is what the registry holds.
async fn registry_run(
    a: &Args,
    cap_mb: usize,
    name_len: usize,
    pops: usize,
    batch: usize,
) -> Res<(u64, u64, f64, f64)> {
    let env = if cap_mb == 0 {
        vec![("QUEEN_ACK_REGISTRY", "0".to_string())]
    } else {
        vec![("QUEEN_ACK_REGISTRY_MB", cap_mb.to_string())]
    };
    let b = Arc::new(Broker::start(a, &env).await?);
    let q = format!("memcaps-reg-{}", uuid::Uuid::new_v4().simple());
    b.post(
        "/api/v1/configure",
        &json!({"queue": q, "options": {"leaseTime": 600}}),
    )
    .await?;
    let items: Vec<Value> = (0..batch)
        .map(|i| json!({"queue": q, "transactionId": format!("m-{i}"), "payload": i}))
        .collect();
    b.post("/api/v1/push", &json!({ "items": items })).await?;
    let mut base = 0;
    for (prefix, mode) in [("w", "autoAck=true"), ("l", "leaseSeconds=600")] {
        let workers = 8;
        let mut tasks = Vec::new();
        for w in 0..workers {
            let (b, q) = (b.clone(), q.clone());
            tasks.push(tokio::spawn(async move {
                for i in (w..pops).step_by(workers) {
                    let tag = format!("{prefix}{i}-");
                    let group = format!("{tag}{}", "g".repeat(name_len.saturating_sub(tag.len())));
                    let path =
                        format!("/api/v1/pop/queue/{q}?batch={batch}&{mode}&consumerGroup={group}");
                    let (s, _) = b.get(&path).await?;
                    if s != 200 {
                        return Err(format!("pop answered {s}"));
                    }
                }
                Ok::<_, String>(())
            }));
        }
        for t in tasks {
            t.await.map_err(|e| e.to_string())??;
        }
        if prefix == "w" {
            base = settled_rss(&b).await.0;
        }
    }
    let (rss, _) = settled_rss(&b).await;
    let accounted = b.metric("queen_ack_registry_bytes").await;
    let entries = b.metric("queen_ack_registry_entries").await;
    delete_queue(&b, &q).await;
    Arc::try_unwrap(b)
        .map_err(|_| "broker still shared")?
        .stop();
    Ok((base, rss, accounted, entries))
}

async fn registry(a: &Args) -> Res<()> {
    let cap = if a.quick { 4 } else { 16 };
    println!(
        "\n### Ack registry: leasing pops by distinct consumer groups (batch 10), cap {cap} MiB\n"
    );
    println!("| group name bytes | QUEEN_ACK_REGISTRY_MB | pops | RSS after warm-up MiB | RSS after pops MiB | growth MiB | growth ÷ cap | accounted MiB | entries |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for name_len in [255usize, 8] {
        // Enough pops to reach the cap with room to spare (entries of about 0.6-1 KiB).
        let pops = cap * 1024 * if name_len > 100 { 3 } else { 5 } / 2;
        for c in [0, cap] {
            let (base, rss, accounted, entries) = registry_run(a, c, name_len, pops, 10).await?;
            let growth = rss.saturating_sub(base);
            println!(
                "| {name_len} | {} | {pops} | {} | {} | {} | {} | {:.1} | {entries} |",
                if c == 0 {
                    "off".to_string()
                } else {
                    c.to_string()
                },
                mib(base),
                mib(rss),
                mib(growth),
                if c == 0 {
                    "—".into()
                } else {
                    format!("{:.2}", growth as f64 / (c as f64 * MIB))
                },
                if c == 0 { 0.0 } else { accounted / MIB },
            );
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("memory_caps: {e}");
            std::process::exit(2);
        }
    };
    let run = async {
        if a.only.as_deref() != Some("registry") {
            dedup(&a).await?;
        }
        if a.only.as_deref() != Some("dedup") {
            registry(&a).await?;
        }
        Ok::<_, String>(())
    };
    if let Err(e) = run.await {
        eprintln!("memory_caps: {e}");
        std::process::exit(1);
    }
}
