//! Section 6: what `encryptionEnabled` costs through the broker. One broker holding
//! `QUEEN_ENCRYPTION_KEY`; two queues alike but for the option, each with 8 partitions
//! filled over HTTP (so the encrypted one is sealed by the broker, as in production);
//! then 8 consumers pop a batch of B and ack it (section 2's consumer), per queue,
//! interleaved round by round. Push figures are the fills' own (items/s over HTTP).

use std::time::{Duration, Instant};

use serde_json::json;
use tokio_postgres::Client;

use crate::broker_proc::{metric_sum, Broker};
use crate::broker_throughput::{consume, AckMode};
use crate::common::{drop_queues, fmt_num, fmt_ratio, progress, to_s, BResult, Ctx};
use crate::report::Section;

/// A fixed test key (the figures do not depend on its value).
const KEY: &str = "6b1d8e0f2c3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9001122334";
const CONSUMERS: usize = 8;
const ROUNDS: usize = 3;
/// A payload of the size of section 2's (a small JSON object).
fn payload(i: usize) -> serde_json::Value {
    json!({"n": i, "body": "bench payload"})
}

/// Pushes `per` messages into each of the 8 partitions of `queue`, 500 a request;
/// returns items/s.
async fn fill(b: &Broker, queue: &str, per: usize) -> BResult<f64> {
    let t = Instant::now();
    for p in 0..CONSUMERS {
        for chunk in (0..per).collect::<Vec<_>>().chunks(500) {
            let items: Vec<_> = chunk
                .iter()
                .map(|&i| json!({"queue": queue, "partition": format!("p{p}"), "payload": payload(i)}))
                .collect();
            let r = b
                .http
                .post(format!("{}/api/v1/push", b.base))
                .json(&json!({ "items": items }))
                .send()
                .await
                .map_err(to_s)?;
            if !r.status().is_success() {
                return Err(format!("push {queue}: HTTP {}", r.status()));
            }
        }
    }
    Ok((CONSUMERS * per) as f64 / t.elapsed().as_secs_f64())
}

async fn configure(b: &Broker, queue: &str, encrypted: bool) -> BResult<()> {
    let r = b
        .http
        .post(format!("{}/api/v1/configure", b.base))
        .json(
            &json!({"queue": queue, "options": {"encryptionEnabled": encrypted,
                                                   "dedupWindowSeconds": 0}}),
        )
        .send()
        .await
        .map_err(to_s)?;
    if !r.status().is_success() {
        return Err(format!("configure {queue}: HTTP {}", r.status()));
    }
    Ok(())
}

/// Messages/s of 8 consumers popping `batch` and acking it, for `dur`.
async fn drain(b: &Broker, queue: &str, batch: usize, dur: Duration) -> BResult<f64> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONSUMERS)
        .map(|i| {
            tokio::spawn(consume(
                b.http.clone(),
                b.base.clone(),
                queue.to_string(),
                format!("p{i}"),
                batch,
                false,
                AckMode::Batch,
                start,
                start + dur,
            ))
        })
        .collect();
    let (mut msgs, mut secs) = (0u64, 0f64);
    for t in tasks {
        let o = t.await.map_err(to_s)?;
        if let Some(e) = o.errors.first() {
            return Err(format!("consume {queue}: {e}"));
        }
        msgs += o.msgs;
        secs = secs.max(o.finished.as_secs_f64());
    }
    Ok(msgs as f64 / secs.max(1e-9))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("6. Encrypted queues (encryptionEnabled)");
    let log = ctx.logs.join("broker-encryption.log");
    let env = [("QUEEN_ENCRYPTION_KEY", KEY), ("QUEEN_MAX_BATCH", "10000")];
    let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &env, &log).await?;
    let r = measure(ctx, db, &b, &mut sec).await;
    let sealed = b
        .metrics()
        .await
        .ok()
        .and_then(|m| metric_sum(&m, |n, _| n == "queen_payloads_sealed_total"));
    b.stop().await;
    drop_queues(db, "bench_enc").await?;
    r?;
    sec.para(format!(
        "The broker sealed {} payloads in this section (`queen_payloads_sealed_total`).",
        sealed.map_or("n/a".into(), fmt_num)
    ));
    Ok(sec)
}

async fn measure(ctx: &Ctx, db: &Client, b: &Broker, sec: &mut Section) -> BResult<()> {
    let dur = Duration::from_secs_f64(ctx.pick(2.0, 8.0));
    let per = ctx.pick(3_000usize, 20_000);
    let mut rows = Vec::new();
    for batch in [10usize, 100] {
        let mut pushed = [Vec::new(), Vec::new()];
        let mut popped = [Vec::new(), Vec::new()];
        for round in 0..ROUNDS {
            for k in 0..2 {
                // Alternate which queue goes first, so drift hits both alike.
                let encrypted = (k + round) % 2 == 1;
                let queue = format!("bench_enc_{}", if encrypted { "on" } else { "off" });
                drop_queues(db, &queue).await?;
                configure(b, &queue, encrypted).await?;
                pushed[encrypted as usize].push(fill(b, &queue, per).await?);
                let rate = drain(b, &queue, batch, dur).await?;
                popped[encrypted as usize].push(rate);
                progress(
                    ctx,
                    "encryption",
                    format!(
                        "B={batch} encrypted={encrypted}: {} msgs/s pop+ack",
                        fmt_num(rate)
                    ),
                );
            }
        }
        let [push_plain, push_enc] = pushed.map(median);
        let [pop_plain, pop_enc] = popped.map(median);
        rows.push(vec![
            batch.to_string(),
            fmt_num(pop_plain),
            fmt_num(pop_enc),
            fmt_ratio(pop_enc, pop_plain),
            fmt_num(push_plain),
            fmt_num(push_enc),
            fmt_ratio(push_enc, push_plain),
        ]);
    }
    sec.para(format!(
        "{CONSUMERS} consumers, one partition each, pop B (leasing) + one `/ack/batch`, {}s \
         per run; push: {} messages a partition in requests of 500. Medians of {ROUNDS} \
         interleaved runs.",
        dur.as_secs_f64(),
        per
    ));
    sec.table(
        &[
            "batch",
            "pop+ack plain msgs/s",
            "pop+ack encrypted msgs/s",
            "encrypted / plain",
            "push plain msgs/s",
            "push encrypted msgs/s",
            "encrypted / plain",
        ],
        &rows,
    );
    Ok(())
}
