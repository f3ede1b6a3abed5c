//! Section 12: pushes through the push spool (docs/availability.md) against pushes
//! written directly, through one broker with `QUEEN_SPOOL_DIR`. 8 producers push batches
//! of B items for a fixed time, direct (maintenance off) or spooled (push maintenance on:
//! every item fsynced to the spool and answered `buffered`); after each spooled run the
//! mode is switched off and the replay timed until the spool is empty. The two modes
//! interleaved round by round.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::common::{
    call, drop_queues, fmt_num, fmt_ratio, median_of, progress, to_s, BResult, Ctx,
};
use crate::report::Section;

const PRODUCERS: usize = 8;
const ROUNDS: usize = 3;
const BATCHES: [usize; 3] = [1, 10, 100];

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("12. Pushes through the push spool against pushes written directly");
    let dir = ctx.logs.join(format!("bench-spool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = ctx.logs.join("broker-spool.log");
    let spool = dir.to_string_lossy().to_string();
    let b = Broker::start(
        &ctx.broker_bin,
        &ctx.database_url,
        &[
            ("QUEEN_SPOOL_DIR", spool.as_str()),
            ("QUEEN_SHARED_STATE_MS", "200"),
        ],
        &log,
    )
    .await?;
    let r = measure(ctx, &b, &mut sec).await;
    let _ = maintenance(&b, false).await;
    b.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    drop_queues(db, "bench_spool_%").await?;
    r?;
    Ok(sec)
}

async fn maintenance(b: &Broker, on: bool) -> BResult<()> {
    call(
        b.http
            .post(format!("{}/api/v1/system/maintenance", b.base))
            .json(&json!({ "enabled": on })),
    )
    .await?;
    Ok(())
}

/// One producer's loop until `until`: items answered (queued or buffered).
async fn producer(
    b: (String, reqwest::Client),
    queue: String,
    batch: usize,
    until: Instant,
) -> BResult<u64> {
    let (base, http) = b;
    let mut n = 0u64;
    while Instant::now() < until {
        let items: Vec<Value> = (0..batch)
            .map(|i| json!({"queue": queue, "payload": {"n": n, "i": i, "pad": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}))
            .collect();
        let v = call(
            http.post(format!("{base}/api/v1/push"))
                .json(&json!({ "items": items })),
        )
        .await?
        .unwrap_or(Value::Null);
        n += v.as_array().map_or(0, |a| a.len()) as u64;
    }
    Ok(n)
}

/// Items answered per second by all producers for `dur`.
async fn push_rate(b: &Broker, tag: &str, batch: usize, dur: Duration) -> BResult<(f64, u64)> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            tokio::spawn(producer(
                (b.base.clone(), b.http.clone()),
                format!("bench_spool_{tag}_{p}"),
                batch,
                start + dur,
            ))
        })
        .collect();
    let mut n = 0;
    for t in tasks {
        n += t.await.map_err(to_s)??;
    }
    Ok((n as f64 / start.elapsed().as_secs_f64(), n))
}

/// `/api/v1/status/buffers`.
async fn buffers(b: &Broker) -> BResult<Value> {
    Ok(
        call(b.http.get(format!("{}/api/v1/status/buffers", b.base)))
            .await?
            .unwrap_or(Value::Null),
    )
}

/// Switches maintenance off and waits for the spool to empty: records per second.
async fn replay_rate(b: &Broker, records: u64) -> BResult<f64> {
    let start = Instant::now();
    maintenance(b, false).await?;
    loop {
        if buffers(b).await?["pending"] == 0 {
            return Ok(records as f64 / start.elapsed().as_secs_f64());
        }
        if start.elapsed() > Duration::from_secs(600) {
            return Err("the spool did not drain in 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn measure(ctx: &Ctx, b: &Broker, sec: &mut Section) -> BResult<()> {
    let dur = Duration::from_secs_f64(ctx.pick(1.5, 5.0));
    let n = BATCHES.len();
    let (mut direct, mut spooled, mut replay, mut bytes) = (
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
    );
    for round in 0..ROUNDS {
        for (bi, &batch) in BATCHES.iter().enumerate() {
            for k in 0..2 {
                let spool = (k + round) % 2 == 1;
                let tag = format!("{}{batch}_{round}", if spool { "s" } else { "d" });
                if !spool {
                    let (r, _) = push_rate(b, &tag, batch, dur).await?;
                    progress(
                        ctx,
                        "spool",
                        format!("batch {batch} direct: {} msgs/s", fmt_num(r)),
                    );
                    direct[bi].push(r);
                    continue;
                }
                maintenance(b, true).await?;
                let before = b.metrics().await?;
                let (r, items) = push_rate(b, &tag, batch, dur).await?;
                let after = b.metrics().await?;
                let key = "queen_spool_bytes_total";
                let written = after.get(key).copied().unwrap_or(0.0)
                    - before.get(key).copied().unwrap_or(0.0);
                let rr = replay_rate(b, items).await?;
                progress(
                    ctx,
                    "spool",
                    format!(
                        "batch {batch} spooled: {} msgs/s, replay {} msgs/s",
                        fmt_num(r),
                        fmt_num(rr)
                    ),
                );
                spooled[bi].push(r);
                replay[bi].push(rr);
                bytes[bi].push(written / items.max(1) as f64);
            }
        }
    }
    let rows: Vec<Vec<String>> = BATCHES
        .iter()
        .enumerate()
        .map(|(bi, batch)| {
            let (d, s) = (median_of(&direct[bi]), median_of(&spooled[bi]));
            vec![
                batch.to_string(),
                fmt_num(d),
                fmt_num(s),
                fmt_ratio(s, d),
                fmt_num(median_of(&replay[bi])),
                format!("{:.0}", median_of(&bytes[bi])),
            ]
        })
        .collect();
    sec.para(format!(
        "{PRODUCERS} producers over HTTP, each pushing batches of B items (a ~100-byte JSON \
         payload) to a queue of its own for {}s per run. Direct: maintenance off, each push \
         written by `log_push_multi_v1`. Spooled: push maintenance on, each push appended to \
         the spool and fsynced (group commit) and answered `buffered`. Replay: maintenance \
         switched off after a spooled run, the spooled items per second until the spool is \
         empty (one transaction per `QUEEN_SPOOL_REPLAY_BATCH` = 1000 records, with the \
         mark). Spool bytes: `queen_spool_bytes_total` per item. Medians of {ROUNDS} \
         interleaved runs.",
        dur.as_secs_f64()
    ));
    sec.table(
        &[
            "batch B",
            "direct msgs/s",
            "spooled msgs/s",
            "spooled ÷ direct",
            "replay msgs/s",
            "spool bytes/msg",
        ],
        &rows,
    );
    Ok(())
}
