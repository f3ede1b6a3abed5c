//! Section 10: ephemeral queues against durable ones through one broker. 8 clients, each
//! on a queue of its own, each looping push B → pop B → ack B (one request each, in
//! order, so every message takes the whole path), for B = 1 and 10, the ephemeral and
//! the durable queue interleaved round by round; messages through the whole cycle per
//! second and the cycle's latency.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::common::{
    call, drop_queues, fmt_ms, fmt_num, fmt_ratio, median_of, percentile_of, progress, to_s,
    BResult, Ctx,
};
use crate::report::Section;

const CLIENTS: usize = 8;
const ROUNDS: usize = 3;
const BATCHES: [usize; 2] = [1, 10];

/// One cycle on an ephemeral queue: messages acked.
async fn ephemeral_cycle(
    base: &str,
    http: &reqwest::Client,
    q: &str,
    b: usize,
    n: u64,
) -> BResult<u64> {
    let messages: Vec<Value> = (0..b)
        .map(|i| json!({"payload": {"n": n, "i": i}}))
        .collect();
    call(
        http.post(format!("{base}/api/v1/ephemeral/push"))
            .json(&json!({"queue": q, "messages": messages})),
    )
    .await?;
    let got = call(http.get(format!("{base}/api/v1/ephemeral/pop?queue={q}&batch={b}")))
        .await?
        .unwrap_or(Value::Null);
    let acks: Vec<Value> = got["messages"]
        .as_array()
        .map(|m| m.iter().map(|m| json!({"id": m["id"]})).collect())
        .unwrap_or_default();
    let v = call(
        http.post(format!("{base}/api/v1/ephemeral/ack"))
            .json(&json!({"queue": q, "acks": acks})),
    )
    .await?
    .unwrap_or(Value::Null);
    let acked = v["results"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|x| x["outcome"] == "acked").count());
    Ok(acked as u64)
}

/// One cycle on a durable queue: messages acked with success.
async fn durable_cycle(
    base: &str,
    http: &reqwest::Client,
    q: &str,
    b: usize,
    n: u64,
) -> BResult<u64> {
    let items: Vec<Value> = (0..b)
        .map(|i| json!({"queue": q, "payload": {"n": n, "i": i}}))
        .collect();
    call(
        http.post(format!("{base}/api/v1/push"))
            .json(&json!({"items": items})),
    )
    .await?;
    let Some(got) = call(http.get(format!("{base}/api/v1/pop/queue/{q}?batch={b}"))).await? else {
        return Ok(0);
    };
    let lease = got["leaseId"].clone();
    let acks: Vec<Value> = got["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| {
                    json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                "leaseId": lease, "status": "completed"})
                })
                .collect()
        })
        .unwrap_or_default();
    let v = call(
        http.post(format!("{base}/api/v1/ack/batch"))
            .json(&json!({"acknowledgments": acks})),
    )
    .await?
    .unwrap_or(Value::Null);
    Ok(v.as_array()
        .map_or(0, |r| r.iter().filter(|x| x["success"] == true).count()) as u64)
}

/// One client's loop until `until`: (messages acked, cycle latencies in ms).
async fn client(
    base: String,
    http: reqwest::Client,
    ephemeral: bool,
    q: String,
    b: usize,
    until: Instant,
) -> BResult<(u64, Vec<f64>)> {
    let (mut acked, mut lat, mut n) = (0u64, Vec::new(), 0u64);
    while Instant::now() < until {
        let t = Instant::now();
        acked += if ephemeral {
            ephemeral_cycle(&base, &http, &q, b, n).await?
        } else {
            durable_cycle(&base, &http, &q, b, n).await?
        };
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        n += 1;
    }
    Ok((acked, lat))
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("10. Ephemeral queues against durable ones");
    let log = ctx.logs.join("broker-ephemeral.log");
    let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &[], &log).await?;
    let r = measure(ctx, &b, &mut sec).await;
    b.stop().await;
    drop_queues(db, "bench_eph_%").await?;
    r?;
    Ok(sec)
}

async fn measure(ctx: &Ctx, b: &Broker, sec: &mut Section) -> BResult<()> {
    let dur = Duration::from_secs_f64(ctx.pick(2.0, 6.0));
    // (batch index, ephemeral?) → rates of the rounds, latencies of every cycle.
    let mut rate = vec![vec![Vec::new(); 2]; BATCHES.len()];
    let mut lats = vec![vec![Vec::new(); 2]; BATCHES.len()];
    for round in 0..ROUNDS {
        for (bi, &batch) in BATCHES.iter().enumerate() {
            for k in 0..2 {
                let ephemeral = (k + round) % 2 == 0;
                let start = Instant::now();
                let tasks: Vec<_> = (0..CLIENTS)
                    .map(|c| {
                        let q = format!(
                            "bench_eph_{}_{batch}_{c}",
                            if ephemeral { "e" } else { "d" }
                        );
                        tokio::spawn(client(
                            b.base.clone(),
                            b.http.clone(),
                            ephemeral,
                            q,
                            batch,
                            start + dur,
                        ))
                    })
                    .collect();
                let mut n = 0;
                for t in tasks {
                    let (done, l) = t.await.map_err(to_s)??;
                    n += done;
                    lats[bi][usize::from(ephemeral)].extend(l);
                }
                let r = n as f64 / start.elapsed().as_secs_f64();
                progress(
                    ctx,
                    "ephemeral",
                    format!("batch {batch} ephemeral={ephemeral}: {} msgs/s", fmt_num(r)),
                );
                rate[bi][usize::from(ephemeral)].push(r);
            }
        }
    }
    let med = |xs: &Vec<f64>| median_of(xs);
    let pct = |xs: &Vec<f64>, p: f64| percentile_of(xs, p);
    let rows: Vec<Vec<String>> = BATCHES
        .iter()
        .enumerate()
        .map(|(bi, batch)| {
            let (d, e) = (&rate[bi][0], &rate[bi][1]);
            vec![
                batch.to_string(),
                fmt_num(med(d)),
                fmt_num(med(e)),
                fmt_ratio(med(e), med(d)),
                format!(
                    "{} / {}",
                    fmt_ms(pct(&lats[bi][0], 0.5)),
                    fmt_ms(pct(&lats[bi][0], 0.99))
                ),
                format!(
                    "{} / {}",
                    fmt_ms(pct(&lats[bi][1], 0.5)),
                    fmt_ms(pct(&lats[bi][1], 0.99))
                ),
            ]
        })
        .collect();
    sec.para(format!(
        "{CLIENTS} clients over HTTP, each on a queue of its own, each looping push B → pop B → \
         ack B (three requests, in order), {}s per run; medians of {ROUNDS} interleaved runs. \
         msgs/s = messages acked with success per second; the cycle's latency over every \
         cycle of the runs. Durable: the queue's defaults (one partition, registry and ack \
         fusion on); ephemeral: the defaults (no database on the path).",
        dur.as_secs_f64()
    ));
    sec.table(
        &[
            "batch",
            "durable msgs/s",
            "ephemeral msgs/s",
            "ephemeral ÷ durable",
            "durable cycle p50 / p99 ms",
            "ephemeral cycle p50 / p99 ms",
        ],
        &rows,
    );
    Ok(())
}
