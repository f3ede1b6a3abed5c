//! Section 3: end to end through the broker (registry + fusion, the defaults). Producers
//! push batches of B through `POST /api/v1/push` while consumers long-poll pop batches of
//! B from their own partition and ack them in full. Client-side timing; the broker's RSS
//! is sampled from /proc every 50 ms (peak) and its high-water mark read at the end.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::broker_proc::{Broker, RssSampler};
use crate::broker_throughput::consume;
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
    let log = ctx.out.join("broker-e2e.log");
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
    for batch in [1usize, 10, 100, 500] {
        if let Err(e) = drop_queues(db, QUEUE).await {
            result = Err(e);
            break;
        }
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
        if let Err(e) = warm.await {
            result = Err(format!("provisioning {QUEUE}: {}", to_s(&e)));
            break;
        }
        let sampler = RssSampler::start(broker.pid);
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
            let _ = o.requests;
        }
        for c in consumers {
            let o = c.await.map_err(to_s)?;
            consumed += o.msgs;
            ack_lat.extend(o.lat_ms);
            errors.extend(o.errors);
        }
        let wall = start.elapsed().as_secs_f64();
        let peak = sampler.finish();
        let (pl, al) = (Summary::of(&push_lat), Summary::of(&ack_lat));
        progress(
            ctx,
            "e2e",
            format!(
                "B={batch}: pushed {} msgs/s, consumed {} msgs/s, peak RSS {:.1} MiB{}",
                fmt_num(pushed as f64 / secs),
                fmt_num(consumed as f64 / secs),
                peak as f64 / 1024.0,
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(", {} errors (first: {})", errors.len(), errors[0])
                }
            ),
        );
        rows.push(vec![
            batch.to_string(),
            fmt_num(pushed as f64 / secs),
            fmt_num(consumed as f64 / secs),
            fmt_ms(pl.median),
            fmt_ms(pl.p99),
            fmt_ms(al.median),
            fmt_ms(al.p99),
            format!("{:.1}", peak as f64 / 1024.0),
            format!("{:.1}", wall),
            if errors.is_empty() {
                "0".into()
            } else {
                format!("{}: {}", errors.len(), errors[0])
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
         for {secs} s per batch size. Broker: release binary, registry + fusion (defaults). \
         Server: fsync = {fsync}, synchronous_commit = {sync}. **Client-side timing**; msgs/s = \
         messages answered `queued` (pushed) or acked with success (consumed) divided by the run \
         length. Peak RSS = highest VmRSS sampled every 50 ms during the run; the broker's VmRSS \
         before the first run was {:.1} MiB and its VmHWM at the end {:.1} MiB.",
        start_rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    ));
    sec.table(
        &[
            "B",
            "pushed msgs/s",
            "consumed msgs/s",
            "push p50 ms",
            "push p99 ms",
            "ack p50 ms",
            "ack p99 ms",
            "peak RSS MiB",
            "wall s",
            "errors",
        ],
        &rows,
    );
    Ok(sec)
}
