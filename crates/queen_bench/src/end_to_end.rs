//! Section 3: end to end through the broker (registry + ack fusion, the defaults). Producers
//! push batches of B through `POST /api/v1/push` while consumers long-poll pop batches of
//! B from their own partition and ack them in full. Client-side timing; the broker's RSS
//! is sampled from /proc every 50 ms (peak) and its high-water mark read at the end.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::broker_proc::{Broker, RssSampler};
use crate::broker_throughput::{consume, AckMode};
use crate::common::{drop_queues, fmt_ms, fmt_num, progress, to_s, BResult, Ctx, Summary};
use crate::report::Section;
use crate::wire::{BenchPayload, PushBody, PushItem, Pushed};

const PARTITIONS: usize = 8;
const PRODUCERS: usize = 4;
const QUEUE: &str = "bench_e2e";

#[derive(Default)]
struct ProducerOut {
    pushed: u64,
    requests: u64,
    lat_ms: Vec<f64>,
    errors: Vec<String>,
}

async fn produce(
    http: reqwest::Client,
    base: String,
    k: usize,
    batch: usize,
    deadline: Instant,
) -> ProducerOut {
    let mut out = ProducerOut::default();
    let url = format!("{base}/api/v1/push");
    let mut part = k;
    let mut n = 0u64;
    while Instant::now() < deadline && out.errors.len() < 5 {
        let partition = format!("p{}", part % PARTITIONS);
        let items: Vec<PushItem<'_>> = (0..batch)
            .map(|i| PushItem {
                queue: QUEUE,
                partition: &partition,
                payload: BenchPayload {
                    producer: k,
                    n: n + i as u64,
                    body: "end-to-end bench payload",
                },
            })
            .collect();
        let body = serde_json::to_vec(&PushBody { items }).expect("a push body serializes");
        n += batch as u64;
        part += PRODUCERS;
        let t = Instant::now();
        match http
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => {
                out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                out.requests += 1;
                let answer = r.bytes().await.map_err(to_s).and_then(|b| {
                    serde_json::from_slice::<Vec<Pushed>>(&b)
                        .map_err(|_| format!("unexpected body {}", String::from_utf8_lossy(&b)))
                });
                match answer {
                    Ok(a) => out.pushed += a.iter().filter(|x| x.status == "queued").count() as u64,
                    Err(e) => out.errors.push(format!("push: {e}")),
                }
            }
            Ok(r) => out.errors.push(format!("push: HTTP {}", r.status())),
            Err(e) => out.errors.push(format!("push: {}", to_s(&e))),
        }
    }
    out
}

/// Runs per batch size; the table shows the median one.
const REPEATS: usize = 3;

/// What one timed run at one batch size measured.
pub(crate) struct RunOut {
    pub(crate) pushed: f64,
    pub(crate) consumed: f64,
    push_lat: Summary,
    ack_lat: Summary,
    peak_kb: u64,
    wall: f64,
    /// Push rounds per push commit (push fusion: rounds carried by fused flushes plus
    /// rounds run alone, over fused flushes plus rounds run alone), from /metrics.
    rounds_per_commit: Option<f64>,
    /// CPU spent by the load generators, the broker and PostgreSQL during the run.
    cpu: crate::cpu::Spent,
    pub(crate) errors: Vec<String>,
}

/// Push rounds and push commits so far, from the broker's push fusion counters.
async fn push_commits(broker: &Broker) -> Option<(f64, f64)> {
    let m = broker.metrics().await.ok()?;
    let get = |k: &str| m.get(k).copied();
    let inline = get("queen_push_fusion_inline_total")?;
    Some((
        get("queen_push_fusion_rounds_total")? + inline,
        get("queen_push_fusion_commits_total")? + inline,
    ))
}

/// Re-provisions the queue, then runs producers and consumers for `secs`.
pub(crate) async fn one_run(
    ctx: &Ctx,
    db: &Client,
    broker: &Broker,
    batch: usize,
    secs: f64,
) -> BResult<RunOut> {
    drop_queues(db, QUEUE).await?;
    // Provision the queue and its partitions up front (one message each, consumed at
    // once with an auto-ack pop), so the timed run measures steady state, not creation.
    let warm = async {
        db.execute(
            "SELECT count(queen.push($1, '[{\"warm-up\": true}]'::jsonb, NULL, 'p' || i))
               FROM generate_series(0, $2::int - 1) i",
            &[&QUEUE, &(PARTITIONS as i32)],
        )
        .await?;
        db.execute(
            "SELECT count(*) FROM generate_series(0, $2::int - 1) i,
                    LATERAL queen.log_pop_v1($1, 'p' || i, '__QUEUE_MODE__', 10, 60, 'warm-up', true)",
            &[&QUEUE, &(PARTITIONS as i32)],
        )
        .await
    };
    warm.await
        .map_err(|e| format!("provisioning {QUEUE}: {}", to_s(&e)))?;
    let before = push_commits(broker).await;
    let sampler = RssSampler::start(broker.pid);
    let account = crate::cpu::Account::start(broker.pid);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|k| {
            tokio::spawn(produce(
                broker.http.clone(),
                broker.base.clone(),
                k,
                batch,
                deadline,
            ))
        })
        .collect();
    let consumers: Vec<_> = (0..PARTITIONS)
        .map(|i| {
            tokio::spawn(consume(
                broker.http.clone(),
                broker.base.clone(),
                QUEUE.into(),
                format!("p{i}"),
                batch,
                true,
                AckMode::Batch,
                start,
                deadline,
            ))
        })
        .collect();
    let (mut pushed, mut push_lat, mut consumed, mut ack_lat, mut errors) =
        (0, vec![], 0, vec![], vec![]);
    for p in producers {
        let o = p.await.map_err(to_s)?;
        pushed += o.pushed;
        push_lat.extend(o.lat_ms);
        errors.extend(o.errors);
    }
    for c in consumers {
        let o = c.await.map_err(to_s)?;
        consumed += o.msgs;
        ack_lat.extend(o.lat_ms);
        errors.extend(o.errors);
    }
    let cpu = account.finish();
    let rounds_per_commit = match (before, push_commits(broker).await) {
        (Some((r0, c0)), Some((r1, c1))) if c1 > c0 => Some((r1 - r0) / (c1 - c0)),
        _ => None,
    };
    let out = RunOut {
        rounds_per_commit,
        cpu,
        pushed: pushed as f64 / secs,
        consumed: consumed as f64 / secs,
        push_lat: Summary::of(&push_lat),
        ack_lat: Summary::of(&ack_lat),
        peak_kb: sampler.finish(),
        wall: start.elapsed().as_secs_f64(),
        errors,
    };
    progress(
        ctx,
        "e2e",
        format!(
            "B={batch}: pushed {} msgs/s, consumed {} msgs/s, peak RSS {:.1} MiB{}",
            fmt_num(out.pushed),
            fmt_num(out.consumed),
            out.peak_kb as f64 / 1024.0,
            if out.errors.is_empty() {
                String::new()
            } else {
                format!(", {} errors (first: {})", out.errors.len(), out.errors[0])
            }
        ),
    );
    Ok(out)
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("3. End to end through the broker");
    let settings = db
        .query_one(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')",
            &[],
        )
        .await
        .map_err(to_s)?;
    let (fsync, sync): (String, String) = (settings.get(0), settings.get(1));
    let secs = ctx.pick(3.0, 15.0);
    let log = ctx.logs.join("broker-e2e.log");
    let broker = Broker::start(
        &ctx.broker_bin,
        &ctx.database_url,
        &[
            ("QUEEN_ACK_REGISTRY", "1"),
            ("QUEEN_ACK_FUSION", "1"),
            ("QUEEN_MAX_BATCH", "10000"),
        ],
        &log,
    )
    .await?;
    let start_rss = broker.status_kb("VmRSS").unwrap_or(0);
    let mut rows = Vec::new();
    let mut result = Ok(());
    'batches: for batch in [1usize, 10, 100, 500] {
        let mut runs = Vec::new();
        for _ in 0..REPEATS {
            match one_run(ctx, db, &broker, batch, secs).await {
                Ok(r) => runs.push(r),
                Err(e) => {
                    result = Err(e);
                    break 'batches;
                }
            }
        }
        runs.sort_by(|a, b| a.consumed.total_cmp(&b.consumed));
        let range = format!(
            "{} – {}",
            fmt_num(runs[0].consumed),
            fmt_num(runs[runs.len() - 1].consumed)
        );
        let r = &runs[(runs.len() - 1) / 2];
        rows.push(vec![
            batch.to_string(),
            fmt_num(r.pushed),
            fmt_num(r.consumed),
            range,
            fmt_ms(r.push_lat.median),
            fmt_ms(r.push_lat.p99),
            fmt_ms(r.ack_lat.median),
            fmt_ms(r.ack_lat.p99),
            r.rounds_per_commit
                .map_or("–".into(), |x| format!("{x:.2}")),
            format!("{:.1}", r.peak_kb as f64 / 1024.0),
            r.cpu.per_message(r.consumed * secs),
            format!("{:.1}", r.wall),
            if r.errors.is_empty() {
                "0".into()
            } else {
                format!("{}: {}", r.errors.len(), r.errors[0])
            },
        ]);
    }
    let hwm = broker.status_kb("VmHWM").unwrap_or(0);
    broker.stop().await;
    drop_queues(db, QUEUE).await?;
    result?;
    sec.para(format!(
        "{PRODUCERS} producers push batches of B (`POST /api/v1/push`, round-robin over {PARTITIONS} \
         partitions of `{QUEUE}`, provisioned before the run; the queue's default dedup window) while {PARTITIONS} consumers, one per \
         partition, long-poll pop batches of B (`wait=true`) and ack them in full (`/ack/batch`), \
         for {secs} s per run, {REPEATS} runs per batch size (the row is the run with the median \
         consumed msgs/s; min – max over the runs next to it). The load generators use typed \
         JSON (no `Value` trees): they share the two cores with broker and server. Broker: release binary, registry + ack fusion (defaults; \
         `QUEEN_PUSH_FUSION=1` in the bench's environment turns push fusion on, the broker \
         inherits it). Push rounds/commit: push statements the requests needed per push \
         commit, from the broker's push fusion counters (1.00 = nothing fused; – = push \
         fusion off). \
         Server: fsync = {fsync}, synchronous_commit = {sync}. **Client-side timing**; msgs/s = \
         messages answered `queued` (pushed) or acked with success (consumed) divided by the run \
         length. CPU: utime + stime from /proc over the run, of the bench process (the load \
         generators), the broker and every PostgreSQL process, per message consumed (each was \
         also pushed), and the cores they kept busy together (2 on this machine). \
         Peak RSS = highest VmRSS sampled every 50 ms during the run; the broker's VmRSS \
         before the first run was {:.1} MiB and its VmHWM at the end {:.1} MiB.",
        start_rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    ));
    sec.table(
        &[
            "B",
            "pushed msgs/s",
            "consumed msgs/s (median)",
            "consumed min – max",
            "push p50 ms",
            "push p99 ms",
            "ack p50 ms",
            "ack p99 ms",
            "push rounds/commit",
            "peak RSS MiB",
            "CPU µs per consumed msg: generators / broker / PostgreSQL (cores busy)",
            "wall s",
            "errors",
        ],
        &rows,
    );
    Ok(sec)
}
