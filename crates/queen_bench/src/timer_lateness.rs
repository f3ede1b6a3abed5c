//! Section 8: how late a timer arrives, with 1,000 and with 100,000 timers pending.
//! The pending ones are set an hour ahead (the backdrop the sweeper's scan has to pass);
//! then 200 probe timers are scheduled due 0.5–5.5 s ahead, spread evenly, and a
//! long-polling consumer (autoAck) receives them. A probe's lateness is the time it was
//! received minus its `deliverAt` (the database's clock, on this same machine): what a
//! consumer sees, sweep, push, wake and pop included. None may be early.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::common::{
    drop_queues, fmt_int, fmt_ms, fmt_num, percentile, progress, to_s, BResult, Ctx,
};
use crate::report::Section;

const PROBES: usize = 200;
/// The SDK's and the broker's most ops per request.
const OPS_PER_REQUEST: usize = 1000;

fn b64(v: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}

/// Schedules `ops` (1000 a request); returns each key's `deliverAt` in ms since the epoch.
async fn schedule(b: &Broker, ops: Vec<Value>) -> BResult<HashMap<String, i64>> {
    let mut due = HashMap::new();
    for chunk in ops.chunks(OPS_PER_REQUEST) {
        let r = b
            .http
            .post(format!("{}/api/v1/timers", b.base))
            .json(&json!({ "operations": chunk }))
            .send()
            .await
            .map_err(to_s)?;
        let s = r.status();
        let v: Value = r.json().await.map_err(to_s)?;
        if !s.is_success() {
            return Err(format!("timers: HTTP {s}: {v}"));
        }
        for res in v["results"].as_array().ok_or("timers: no results")? {
            let at = res["deliverAt"]
                .as_str()
                .ok_or_else(|| format!("no deliverAt: {res}"))?;
            let key = res["timerKey"].as_str().unwrap_or_default().to_string();
            due.insert(key, iso_ms(at).ok_or_else(|| format!("deliverAt {at}"))?);
        }
    }
    Ok(due)
}

/// `2026-12-02T18:00:00.123Z` as ms since the epoch (the broker writes UTC, ms).
fn iso_ms(s: &str) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(t.timestamp_millis())
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn op(queue: &str, key: &str, delay_ms: i64) -> Value {
    json!({"op": "schedule", "queue": queue, "timerKey": key,
           "payload": b64(&json!({"key": key})), "delayMs": delay_ms})
}

/// Lateness in ms of every probe received within `within`.
async fn receive(
    b: &Broker,
    queue: &str,
    due: &HashMap<String, i64>,
    within: Duration,
) -> BResult<Vec<f64>> {
    let until = Instant::now() + within;
    let mut late = Vec::new();
    while late.len() < due.len() && Instant::now() < until {
        let r = b
            .http
            .get(format!(
                "{}/api/v1/pop/queue/{queue}?batch=100&wait=true&timeout=1000&autoAck=true",
                b.base
            ))
            .send()
            .await
            .map_err(to_s)?;
        if r.status().as_u16() == 204 {
            continue;
        }
        let got = now_ms();
        let v: Value = r.json().await.map_err(to_s)?;
        for m in v["messages"]
            .as_array()
            .ok_or_else(|| format!("pop: {v}"))?
        {
            let key = m["data"]["key"].as_str().unwrap_or_default();
            let at = due.get(key).ok_or_else(|| format!("unknown probe {m}"))?;
            late.push((got - at) as f64);
        }
    }
    Ok(late)
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("8. Timer delivery lateness");
    let log = ctx.logs.join("broker-timers.log");
    let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &[], &log).await?;
    let r = measure(ctx, db, &b, &mut sec).await;
    b.stop().await;
    drop_queues(db, "bench_timer_%").await?;
    r?;
    Ok(sec)
}

async fn measure(ctx: &Ctx, db: &Client, b: &Broker, sec: &mut Section) -> BResult<()> {
    let mut rows = Vec::new();
    for pending in [1_000usize, 100_000] {
        drop_queues(db, "bench_timer_%").await?;
        let t = Instant::now();
        let backdrop: Vec<Value> = (0..pending)
            .map(|i| op("bench_timer_backdrop", &format!("bg-{i}"), 3_600_000))
            .collect();
        schedule(b, backdrop).await?;
        let fill = pending as f64 / t.elapsed().as_secs_f64();
        let probes: Vec<Value> = (0..PROBES)
            .map(|i| {
                op(
                    "bench_timer_probe",
                    &format!("probe-{i}"),
                    500 + (i as i64 * 5000) / PROBES as i64,
                )
            })
            .collect();
        let due = schedule(b, probes).await?;
        let mut late = receive(b, "bench_timer_probe", &due, Duration::from_secs(15)).await?;
        late.sort_by(f64::total_cmp);
        let early = late.iter().filter(|l| **l < 0.0).count();
        progress(
            ctx,
            "timers",
            format!(
                "{pending} pending: {} probes, p50 {} ms",
                late.len(),
                late.get(late.len() / 2).copied().unwrap_or(f64::NAN)
            ),
        );
        rows.push(vec![
            fmt_int(pending as i64),
            format!("{} of {PROBES}", late.len()),
            fmt_ms(percentile(&late, 0.5)),
            fmt_ms(percentile(&late, 0.99)),
            fmt_ms(late.last().copied().unwrap_or(f64::NAN)),
            early.to_string(),
            fmt_num(fill),
        ]);
        if late.len() < PROBES {
            return Err(format!(
                "{pending} pending: {} of {PROBES} probes arrived in 15 s",
                late.len()
            ));
        }
    }
    sec.para(format!(
        "One broker, default `QUEEN_TIMER_SWEEP_MS` (1000; a schedule wakes the sweeper for \
         its own due time). The pending timers are set an hour ahead; {PROBES} probes due \
         0.5–5.5 s ahead; a consumer long-polls (autoAck, batch 100). Lateness = received − \
         deliverAt, in ms."
    ));
    sec.table(
        &[
            "pending",
            "received",
            "p50 ms",
            "p99 ms",
            "max ms",
            "early",
            "schedule ops/s",
        ],
        &rows,
    );
    Ok(())
}
