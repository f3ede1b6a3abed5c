//! Section 7: the SDK's binary push bodies against the JSON body, through one broker.
//! 8 producers, one partition each, push requests of B messages for a fixed time, once
//! per body kind, interleaved round by round: JSON (`{"items": [...]}`), `QPB1` plain
//! (each payload its JSON text), `QPB1` framed (`push_compression`: the messages framed
//! and zstd-compressed by the client, stored by the broker as they came). Each request
//! is built in the producer's loop, as a client builds it. Reported: messages/s and the
//! broker's CPU per message (utime + stime of its process), medians of the rounds.

use std::time::{Duration, Instant};

use queen_log::frame::Frame;
use queen_log::segment::encode_segment;
use serde_json::json;
use tokio_postgres::Client;

use crate::broker_proc::{proc_cpu_secs, Broker};
use crate::common::{drop_queues, fmt_num, fmt_ratio, progress, to_s, BResult, Ctx};
use crate::report::Section;

const PRODUCERS: usize = 8;
const ROUNDS: usize = 3;

#[derive(Clone, Copy, PartialEq)]
enum Body {
    Json,
    Plain,
    Framed,
}

const KINDS: [Body; 3] = [Body::Json, Body::Plain, Body::Framed];

impl Body {
    fn name(self) -> &'static str {
        match self {
            Body::Json => "json",
            Body::Plain => "plain",
            Body::Framed => "framed",
        }
    }
}

fn payload(i: usize) -> String {
    format!(r#"{{"n":{i},"body":"bench payload"}}"#)
}

fn text16(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u16).to_le_bytes());
    out.extend(s.as_bytes());
}

/// One request of `n` messages into `queue`/`partition`, as the SDK encodes it.
fn request(kind: Body, queue: &str, partition: &str, n: usize, seq: usize) -> BResult<Vec<u8>> {
    if kind == Body::Json {
        let items: Vec<_> = (0..n)
            .map(|i| {
                let p: serde_json::Value = serde_json::from_str(&payload(seq + i)).expect("json");
                json!({"queue": queue, "partition": partition, "payload": p})
            })
            .collect();
        return serde_json::to_vec(&json!({ "items": items })).map_err(to_s);
    }
    let mut out = b"QPB1".to_vec();
    out.push(if kind == Body::Framed { 8 } else { 0 });
    out.extend(1u32.to_le_bytes());
    text16(&mut out, queue);
    text16(&mut out, partition);
    out.extend((n as u32).to_le_bytes());
    if kind == Body::Plain {
        for i in 0..n {
            let p = payload(seq + i);
            out.extend((p.len() as u32).to_le_bytes());
            out.extend(p.as_bytes());
        }
        return Ok(out);
    }
    let frames: Vec<Frame> = (0..n)
        .map(|i| {
            let id = uuid::Uuid::now_v7();
            Frame {
                message_id: *id.as_bytes(),
                trace_id: None,
                transaction_id: id.to_string(),
                producer_sub: None,
                encrypted: false,
                payload: payload(seq + i).into_bytes(),
            }
        })
        .collect();
    let z = encode_segment(&frames).map_err(|e| e.to_string())?;
    out.extend((z.len() as u32).to_le_bytes());
    out.extend(z);
    Ok(out)
}

/// One producer: requests of `batch` into its partition until `until`; messages pushed.
async fn produce(
    http: reqwest::Client,
    url: String,
    kind: Body,
    queue: String,
    partition: String,
    batch: usize,
    until: Instant,
) -> BResult<usize> {
    let mut sent = 0;
    while Instant::now() < until {
        let body = request(kind, &queue, &partition, batch, sent)?;
        let ct = if kind == Body::Json {
            "application/json"
        } else {
            "application/x-queen-push"
        };
        let r = http
            .post(&url)
            .header("content-type", ct)
            .body(body)
            .send()
            .await
            .map_err(to_s)?;
        if r.status().as_u16() != 201 {
            let s = r.status();
            return Err(format!(
                "push {}: HTTP {s}: {}",
                kind.name(),
                r.text().await.unwrap_or_default()
            ));
        }
        sent += batch;
    }
    Ok(sent)
}

/// (msgs/s, broker CPU µs per message) of one run.
async fn run_once(
    b: &Broker,
    kind: Body,
    queue: &str,
    batch: usize,
    dur: Duration,
) -> BResult<(f64, f64)> {
    let cpu0 = proc_cpu_secs(b.pid).unwrap_or(0.0);
    let start = Instant::now();
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|i| {
            tokio::spawn(produce(
                b.http.clone(),
                format!("{}/api/v1/push", b.base),
                kind,
                queue.to_string(),
                format!("p{i}"),
                batch,
                start + dur,
            ))
        })
        .collect();
    let mut msgs = 0usize;
    for t in tasks {
        msgs += t.await.map_err(to_s)??;
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = proc_cpu_secs(b.pid).unwrap_or(0.0) - cpu0;
    Ok((msgs as f64 / secs, cpu * 1e6 / msgs.max(1) as f64))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("7. Binary push bodies (QPB1) against JSON");
    let log = ctx.logs.join("broker-binary-push.log");
    let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &[], &log).await?;
    let r = measure(ctx, db, &b, &mut sec).await;
    b.stop().await;
    drop_queues(db, "bench_bin_%").await?;
    r?;
    Ok(sec)
}

async fn measure(ctx: &Ctx, db: &Client, b: &Broker, sec: &mut Section) -> BResult<()> {
    let dur = Duration::from_secs_f64(ctx.pick(2.0, 6.0));
    let mut rows = Vec::new();
    for batch in [10usize, 100] {
        let mut rate: [Vec<f64>; 3] = Default::default();
        let mut cpu: [Vec<f64>; 3] = Default::default();
        for round in 0..ROUNDS {
            for k in 0..KINDS.len() {
                // Rotate which body goes first, so drift hits all alike.
                let kind = KINDS[(k + round) % KINDS.len()];
                let ix = KINDS.iter().position(|x| *x == kind).expect("a kind");
                let queue = format!("bench_bin_{}_{batch}", kind.name());
                drop_queues(db, &queue).await?;
                let (r, c) = run_once(b, kind, &queue, batch, dur).await?;
                progress(
                    ctx,
                    "binary-push",
                    format!(
                        "B={batch} {}: {} msgs/s, {c:.1} µs broker CPU/msg",
                        kind.name(),
                        fmt_num(r)
                    ),
                );
                rate[ix].push(r);
                cpu[ix].push(c);
            }
        }
        let [rj, rp, rf] = rate.map(median);
        let [cj, cp, cf] = cpu.map(median);
        rows.push(vec![
            batch.to_string(),
            fmt_num(rj),
            fmt_num(rp),
            fmt_num(rf),
            format!("{} / {}", fmt_ratio(rp, rj), fmt_ratio(rf, rj)),
            format!("{cj:.1} / {cp:.1} / {cf:.1}"),
        ]);
    }
    sec.para(format!(
        "{PRODUCERS} producers, one partition each, one request of B messages at a time, \
         {}s per run, bodies built in the producer's loop (the framed body compressed \
         there, as `push_compression` does). Medians of {ROUNDS} interleaved runs.",
        dur.as_secs_f64()
    ));
    sec.table(
        &[
            "batch",
            "JSON msgs/s",
            "QPB1 plain msgs/s",
            "QPB1 framed msgs/s",
            "plain / framed ÷ JSON",
            "broker CPU µs/msg JSON / plain / framed",
        ],
        &rows,
    );
    Ok(())
}
