//! Section 2: broker ack throughput. C concurrent consumers, each on its own prefilled
//! partition, pop a batch of B (`wait=false`) and ack it in full with one `/ack/batch`
//! request, against the real broker binary in three modes: registry + fusion, registry
//! with fusion off, registry off. Timing is client-side (wall clock of the run, latency
//! of each ack request); commit counts come from the broker's `/metrics` and from
//! pg_stat_statements (top-level calls, reset before every cell).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_postgres::Client;

use crate::broker_proc::{metric_sum, Broker, RssSampler};
use crate::common::{drop_queues, fmt_ms, fmt_num, progress, to_s, BResult, Ctx, Summary};
use crate::report::{Chart, Section};
use crate::svg::{LineChart, Series};
use crate::wire::{AckBatch, AckItem, Acked, Popped};

/// (label, env) of the three broker modes.
pub const MODES: [(&str, &[(&str, &str)]); 3] = [
    (
        "registry+fusion",
        &[("QUEEN_ACK_REGISTRY", "1"), ("QUEEN_ACK_FUSION", "1")],
    ),
    (
        "registry, fusion off",
        &[("QUEEN_ACK_REGISTRY", "1"), ("QUEEN_ACK_FUSION", "0")],
    ),
    (
        "registry off",
        &[("QUEEN_ACK_REGISTRY", "0"), ("QUEEN_ACK_FUSION", "1")],
    ),
];

/// The reference row: `autoAck` pops on the registry+fusion broker, no ack requests.
pub const POP_ONLY: &str = "pop only (autoAck): ceiling";

/// What one consumer did.
#[derive(Default)]
pub struct ConsumerOut {
    pub acks: u64,
    pub msgs: u64,
    pub failed_items: u64,
    /// Pops answered 204 (empty), the last one of a drained partition included: a round
    /// trip that delivered nothing (docs/decisions.md, "Which partitions a queue pop tries").
    pub empty_pops: u64,
    pub lat_ms: Vec<f64>,
    pub errors: Vec<String>,
    pub finished: Duration,
}

/// How a consumer acknowledges what it popped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// A leasing pop, then one `/ack/batch` for the whole batch.
    Batch,
    /// `autoAck=true` pops and no ack request: the ceiling any ack speed-up can reach,
    /// since the pop (and its commit) is all that is left of a cycle.
    AutoAck,
}

/// Pop a batch from one partition and ack it in full, until the deadline or (without
/// long-poll) until the partition is drained.
#[allow(clippy::too_many_arguments)]
pub async fn consume(
    http: reqwest::Client,
    base: String,
    queue: String,
    partition: String,
    batch: usize,
    long_poll: bool,
    ack_mode: AckMode,
    start: Instant,
    deadline: Instant,
) -> ConsumerOut {
    let mut out = ConsumerOut::default();
    let auto = ack_mode == AckMode::AutoAck;
    let url = format!(
        "{base}/api/v1/pop/queue/{queue}/partition/{partition}?batch={batch}&wait={long_poll}&timeout=250&autoAck={auto}"
    );
    let ack_url = format!("{base}/api/v1/ack/batch");
    while Instant::now() < deadline && out.errors.len() < 5 {
        let resp = match http.get(&url).send().await {
            Ok(r) => r,
            Err(e) => {
                out.errors.push(format!("pop: {}", to_s(&e)));
                continue;
            }
        };
        if resp.status().as_u16() == 204 {
            out.empty_pops += 1;
            if long_poll {
                continue;
            }
            break;
        }
        if !resp.status().is_success() {
            let s = resp.status();
            out.errors.push(format!(
                "pop: HTTP {s}: {}",
                resp.text().await.unwrap_or_default()
            ));
            continue;
        }
        let popped: Popped = match resp.bytes().await.map_err(to_s).and_then(|b| {
            serde_json::from_slice(&b).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&b)))
        }) {
            Ok(v) => v,
            Err(e) => {
                out.errors.push(format!("pop body: {e}"));
                continue;
            }
        };
        let acks: Vec<AckItem<'_>> = popped
            .messages
            .iter()
            .map(|m| AckItem {
                transaction_id: &m.transaction_id,
                partition_id: &m.partition_id,
                lease_id: popped.lease_id.as_deref(),
                status: "completed",
            })
            .collect();
        if acks.is_empty() {
            continue;
        }
        let n = acks.len() as u64;
        if auto {
            out.acks += 1;
            out.msgs += n;
            continue;
        }
        let t = Instant::now();
        let body = serde_json::to_vec(&AckBatch {
            acknowledgments: acks,
        })
        .expect("an ack batch serializes");
        let r = http
            .post(&ack_url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        let r = match r {
            Ok(r) if r.status().is_success() => r.bytes().await.map_err(to_s),
            Ok(r) => Err(format!("ack: HTTP {}", r.status())),
            Err(e) => Err(format!("ack: {}", to_s(&e))),
        };
        out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let r = r.and_then(|b| match serde_json::from_slice::<Vec<Acked>>(&b) {
            Ok(items) => Ok((items, b)),
            Err(_) => Err(format!(
                "ack: unexpected body {}",
                String::from_utf8_lossy(&b)
            )),
        });
        match r {
            Ok((items, body)) => {
                let ok = items.iter().filter(|i| i.success).count() as u64;
                if ok < n && out.errors.len() < 5 {
                    // Only a failure is worth walking the whole answer for.
                    let all: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let bad = all.as_array().and_then(|a| {
                        a.iter()
                            .find(|i| i.get("success") != Some(&Value::Bool(true)))
                            .cloned()
                    });
                    out.errors
                        .push(format!("ack item failed: {}", bad.unwrap_or(Value::Null)));
                }
                out.acks += 1;
                out.msgs += ok;
                out.failed_items += n - ok;
            }
            Err(e) => out.errors.push(e),
        }
    }
    out.finished = start.elapsed();
    out
}

/// Top-level calls of the three ack functions since the last reset:
/// (log_ack_multi_v1, log_ack_at_v1, the by-hash authority log_ack_by_hash_v1 or _v2).
pub async fn pgss_calls(db: &Client, schema: &str) -> Option<(i64, i64, i64)> {
    let sql = format!(
        "SELECT coalesce(sum(calls) FILTER (WHERE query ILIKE '%log_ack_multi_v1%'), 0)::bigint,
                coalesce(sum(calls) FILTER (WHERE query ILIKE '%log_ack_at_v1%'), 0)::bigint,
                coalesce(sum(calls) FILTER (WHERE query ILIKE '%log_ack_by_hash_v%'), 0)::bigint
           FROM {schema}.pg_stat_statements
          WHERE toplevel AND query NOT ILIKE '%pg_stat_statements%'
            AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    );
    let row = db.query_one(&sql, &[]).await.ok()?;
    Some((row.get(0), row.get(1), row.get(2)))
}

/// The schema pg_stat_statements is installed in, if it is.
pub async fn pgss_schema(db: &Client) -> Option<String> {
    let row = db
        .query_opt(
            "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
              WHERE e.extname = 'pg_stat_statements'",
            &[],
        )
        .await
        .ok()??;
    Some(row.get(0))
}

pub async fn pgss_reset(db: &Client, schema: &str) -> bool {
    db.execute(&format!("SELECT {schema}.pg_stat_statements_reset()"), &[])
        .await
        .is_ok()
}

/// Prefills `partitions` partitions `p0..` of a queue with `per` messages each, in
/// segments of `seg`, through `queen.push` (native framing, real transactionIds). The first
/// segment of each partition creates queue and partitions; the queue's dedup window is then
/// set to 0, because the push-side duplicate probe reads the whole in-window sidecar of the
/// partition and would make a large prefill quadratic. Pops and acks never read the window.
pub async fn prefill(db: &Client, queue: &str, partitions: i32, per: i64, seg: i32) -> BResult<()> {
    let segs = ((per + i64::from(seg) - 1) / i64::from(seg)) as i32;
    const SQL: &str = "SELECT count(queen.push($1, (SELECT jsonb_agg(jsonb_build_object('n', g, 'body', 'bench payload'))
                                             FROM generate_series(1, $2::int) g), NULL, 'p' || p))
                FROM generate_series(0, $3::int - 1) p, generate_series(1, $4::int) s";
    let err = |e: tokio_postgres::Error| format!("prefill {queue}: {}", to_s(&e));
    db.execute(SQL, &[&queue, &seg, &partitions, &1.min(segs)])
        .await
        .map_err(err)?;
    db.execute(
        "UPDATE queen.queues SET dedup_window_seconds = 0 WHERE name = $1",
        &[&queue],
    )
    .await
    .map_err(err)?;
    if segs > 1 {
        db.execute(SQL, &[&queue, &seg, &partitions, &(segs - 1)])
            .await
            .map_err(err)?;
    }
    Ok(())
}

/// One cell of the grid.
pub struct CellOut {
    pub mode: &'static str,
    pub consumers: usize,
    pub batch: usize,
    pub acks: u64,
    pub msgs: u64,
    pub failed_items: u64,
    /// Pops that came back empty (204), over every consumer.
    pub empty_pops: u64,
    pub prefilled: i64,
    pub secs: f64,
    pub lat: Summary,
    /// Fusion commits and rows, and whether they came from /metrics (else estimated).
    pub commits: Option<f64>,
    pub rows: Option<f64>,
    pub from_metrics: bool,
    pub pgss: Option<(i64, i64, i64)>,
    pub fast_items: Option<f64>,
    pub sql_items: Option<f64>,
    pub rss_kb: u64,
    pub peak_rss_kb: u64,
    pub errors: Vec<String>,
    /// acks/s of every repeat of this cell (this run is the median one).
    pub reps: Vec<f64>,
}

impl CellOut {
    pub fn acks_per_s(&self) -> f64 {
        self.acks as f64 / self.secs.max(1e-9)
    }
    pub fn msgs_per_s(&self) -> f64 {
        self.msgs as f64 / self.secs.max(1e-9)
    }
    /// Every ack transaction: fusion flushes + single positional acks + by-hash acks.
    pub fn ack_commits(&self) -> Option<f64> {
        let (m, a, h) = self.pgss?;
        let fusion = self.commits.unwrap_or(m as f64);
        Some(fusion + a as f64 + h as f64)
    }
    pub fn rows_per_commit(&self) -> Option<f64> {
        match (self.commits, self.rows) {
            (Some(c), Some(r)) if c > 0.0 => Some(r / c),
            _ => None,
        }
    }
}

async fn cell(
    ctx: &Ctx,
    db: &Client,
    broker: &Broker,
    pgss: Option<&str>,
    mode: &'static str,
    consumers: usize,
    batch: usize,
) -> BResult<CellOut> {
    let queue = "bench_bt".to_string();
    drop_queues(db, "bench_bt").await?;
    let (budget, min_it, max_it) = ctx.pick((20_000i64, 3i64, 300i64), (200_000, 10, 3_000));
    let iters = (budget / (consumers * batch) as i64).clamp(min_it, max_it);
    let seg = batch.clamp(100, 500) as i32;
    let per = (iters * batch as i64 + i64::from(seg) - 1) / i64::from(seg) * i64::from(seg);
    prefill(db, &queue, consumers as i32, per, seg).await?;
    let before = broker.metrics().await.unwrap_or_default();
    let have_pgss = match pgss {
        Some(schema) => pgss_reset(db, schema).await,
        None => false,
    };
    let dur = Duration::from_secs_f64(ctx.pick(2.0, 10.0));
    let sampler = RssSampler::start(broker.pid);
    let start = Instant::now();
    let deadline = start + dur;
    let tasks: Vec<_> = (0..consumers)
        .map(|i| {
            tokio::spawn(consume(
                broker.http.clone(),
                broker.base.clone(),
                queue.clone(),
                format!("p{i}"),
                batch,
                false,
                if mode == POP_ONLY {
                    AckMode::AutoAck
                } else {
                    AckMode::Batch
                },
                start,
                deadline,
            ))
        })
        .collect();
    let mut outs = Vec::new();
    for t in tasks {
        outs.push(t.await.map_err(to_s)?);
    }
    let peak = sampler.finish();
    let secs = outs
        .iter()
        .map(|o| o.finished)
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let after = broker.metrics().await.unwrap_or_default();
    let pgss = match pgss {
        Some(schema) if have_pgss => pgss_calls(db, schema).await,
        _ => None,
    };
    let delta = |pred: &dyn Fn(&str, &str) -> bool| -> Option<f64> {
        let a = metric_sum(&after, pred)?;
        Some(a - metric_sum(&before, pred).unwrap_or(0.0))
    };
    let m_commits = delta(&|n, _| n.contains("fusion") && n.contains("commit"));
    let m_rows = delta(&|n, _| n.contains("fusion") && n.contains("rows") && !n.contains("per"));
    let fast_items = delta(&|n, l| n == "queen_acks_total" && l.contains("fast"));
    let sql_items = delta(&|n, l| n == "queen_acks_total" && l.contains("sql"));
    let from_metrics = m_commits.is_some() && m_rows.is_some();
    let (commits, rows) = if from_metrics {
        (m_commits, m_rows)
    } else {
        // Fallback: a flush is one log_ack_multi_v1 call; with one lease per partition no
        // two parked acks fold, so rows = fast-path ack requests = fast items / batch.
        let multi = pgss.map(|p| p.0 as f64);
        (
            multi,
            fast_items
                .map(|f| f / batch as f64)
                .filter(|_| multi.is_some_and(|m| m > 0.0)),
        )
    };
    let mut lat = Vec::new();
    let mut errors = Vec::new();
    for o in &outs {
        lat.extend_from_slice(&o.lat_ms);
        errors.extend(o.errors.iter().cloned());
    }
    let out = CellOut {
        mode,
        consumers,
        batch,
        acks: outs.iter().map(|o| o.acks).sum(),
        msgs: outs.iter().map(|o| o.msgs).sum(),
        failed_items: outs.iter().map(|o| o.failed_items).sum(),
        empty_pops: outs.iter().map(|o| o.empty_pops).sum(),
        prefilled: per * consumers as i64,
        secs,
        lat: Summary::of(&lat),
        commits,
        rows,
        from_metrics,
        pgss,
        fast_items,
        sql_items,
        rss_kb: broker.status_kb("VmRSS").unwrap_or(0),
        peak_rss_kb: peak,
        errors,
        reps: Vec::new(),
    };
    progress(
        ctx,
        "broker",
        format!(
            "{mode}: C={consumers} B={batch}: {} acks/s, {} msgs/s, p50 {} ms, p99 {} ms, {} empty pops{}",
            fmt_num(out.acks_per_s()),
            fmt_num(out.msgs_per_s()),
            fmt_ms(out.lat.median),
            fmt_ms(out.lat.p99),
            out.empty_pops,
            if out.errors.is_empty() {
                String::new()
            } else {
                format!(", {} errors (first: {})", out.errors.len(), out.errors[0])
            }
        ),
    );
    Ok(out)
}

/// Runs of every cell; the table shows the median one by acks/s, with min and max.
const REPEATS: usize = 3;

/// The run with the median acks/s, carrying every run's acks/s.
fn median_run(mut runs: Vec<CellOut>) -> Option<CellOut> {
    runs.sort_by(|a, b| a.acks_per_s().total_cmp(&b.acks_per_s()));
    let reps: Vec<f64> = runs.iter().map(CellOut::acks_per_s).collect();
    let mid = runs.len().checked_sub(1)? / 2;
    let mut m = runs.swap_remove(mid);
    m.reps = reps;
    Some(m)
}

/// The (consumers, batch) grid.
fn grid(ctx: &Ctx) -> Vec<(usize, usize)> {
    if let Some(cells) = &ctx.cells {
        cells.clone()
    } else if ctx.quick {
        vec![(1, 10), (8, 10), (64, 10), (8, 1), (8, 100)]
    } else {
        let mut g = Vec::new();
        for b in [1, 10, 100] {
            for c in [1, 8, 64, 256] {
                g.push((c, b));
            }
        }
        g
    }
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("2. Broker ack throughput");
    let mut cells = Vec::new();
    let pgss = pgss_schema(db).await;
    if pgss.is_none() {
        progress(
            ctx,
            "broker",
            "pg_stat_statements is not installed in this database: call counts will be n/a",
        );
    }
    // One broker per mode, all alive for the whole section; the grid runs cell by cell
    // with the modes interleaved, so drift in machine load hits every mode alike.
    let mut brokers = Vec::new();
    for (mode, env) in MODES {
        let mut env: Vec<(&str, &str)> = env.to_vec();
        env.push(("QUEEN_MAX_BATCH", "10000"));
        let log = ctx
            .logs
            .join(format!("broker-{}.log", mode.replace([' ', ',', '+'], "_")));
        match Broker::start(&ctx.broker_bin, &ctx.database_url, &env, &log).await {
            Ok(b) => {
                progress(
                    ctx,
                    "broker",
                    format!("mode {mode}: broker pid {} at {}", b.pid, b.base),
                );
                brokers.push((mode, b));
            }
            Err(e) => {
                for (_, b) in brokers {
                    b.stop().await;
                }
                return Err(e);
            }
        }
    }
    let mut failure = None;
    'grid: for (c, b) in grid(ctx) {
        let mut runs: Vec<Vec<CellOut>> = (0..=brokers.len()).map(|_| Vec::new()).collect();
        let ceiling = (POP_ONLY, &brokers[0].1);
        let modes: Vec<_> = brokers
            .iter()
            .map(|(m, b)| (*m, b))
            .chain([ceiling])
            .collect();
        for round in 0..REPEATS {
            // Each round starts with another mode: on a busy machine the first slot of a
            // round read low, which a fixed order charged to one mode every time.
            for k in 0..modes.len() {
                let i = (k + round) % modes.len();
                let (mode, broker) = modes[i];
                match cell(ctx, db, broker, pgss.as_deref(), mode, c, b).await {
                    Ok(o) => runs[i].push(o),
                    Err(e) => {
                        failure = Some(format!("{mode} C={c} B={b}: {e}"));
                        break 'grid;
                    }
                }
            }
        }
        cells.extend(runs.into_iter().filter_map(median_run));
    }
    for (_, b) in brokers {
        b.stop().await;
    }
    if let Some(e) = failure {
        return Err(e);
    }
    drop_queues(db, "bench_bt").await?;
    // Table order: by mode, then grid order.
    cells.sort_by_key(|c| {
        MODES
            .iter()
            .position(|m| m.0 == c.mode)
            .unwrap_or(MODES.len())
    });
    write_section(ctx, &mut sec, &cells, &ctx.logs.join("broker-*.log"));
    Ok(sec)
}

fn range(reps: &[f64]) -> String {
    match (reps.first(), reps.last()) {
        (Some(lo), Some(hi)) => format!("{} – {}", fmt_num(*lo), fmt_num(*hi)),
        _ => "–".into(),
    }
}

/// Fusion against fusion off per grid point: the ratio of median acks/s and what fusion
/// did to the ack commits.
fn ratio_table(sec: &mut Section, cells: &[CellOut]) {
    let find = |mode: &str, c: usize, b: usize| {
        cells
            .iter()
            .find(|x| x.mode == mode && x.consumers == c && x.batch == b)
    };
    let mut rows = Vec::new();
    for on in cells.iter().filter(|x| x.mode == MODES[0].0) {
        let Some(off) = find(MODES[1].0, on.consumers, on.batch) else {
            continue;
        };
        let per_s = |x: &CellOut| x.ack_commits().map(|k| k / x.secs.max(1e-9));
        let vs_off = |x: f64| format!("{:.2}×", x / off.acks_per_s().max(1e-9));
        let ceiling = find(POP_ONLY, on.consumers, on.batch).map(CellOut::acks_per_s);
        rows.push(vec![
            on.consumers.to_string(),
            on.batch.to_string(),
            fmt_num(on.acks_per_s()),
            fmt_num(off.acks_per_s()),
            vs_off(on.acks_per_s()),
            ceiling.map(fmt_num).unwrap_or("n/a".into()),
            ceiling.map(vs_off).unwrap_or("n/a".into()),
            per_s(on).map(fmt_num).unwrap_or("n/a".into()),
            per_s(off).map(fmt_num).unwrap_or("n/a".into()),
            on.rows_per_commit()
                .map(|r| format!("{r:.2}"))
                .unwrap_or("–".into()),
        ]);
    }
    sec.para(
        "Fusion against fusion off (median runs above; targets at 64 consumers: rows/commit ≥ 5 \
         and acks/s ≥ 2× fusion off). The ceiling is the same consumers popping with `autoAck` \
         and sending no ack at all: what remains of a cycle if an ack cost nothing, so no ack \
         path can beat fusion off by more than that ratio:",
    );
    sec.table(
        &[
            "C",
            "B",
            "fusion acks/s",
            "fusion off acks/s",
            "ratio",
            "pop-only ceiling, pops/s",
            "ceiling / fusion off",
            "ack commits/s, fusion",
            "ack commits/s, fusion off",
            "rows/commit",
        ],
        &rows,
    );
}

fn write_section(ctx: &Ctx, sec: &mut Section, cells: &[CellOut], logs: &Path) {
    sec.para(format!(
        "Each of C consumers owns one partition of queue `bench_bt`, prefilled through `queen.push` \
         (real frames and transactionIds; the queue's dedup window set to 0 after the first \
         segment so the prefill stays linear); it pops B messages (`wait=false`) and acks all of them \
         with one `POST /api/v1/ack/batch`, for {} s or until its partition is empty. \
         The broker is the release binary started as a child process per mode (env \
         `QUEEN_ACK_REGISTRY` / `QUEEN_ACK_FUSION`, other knobs at their defaults unless set in \
         the bench's environment; logs in `{}`). \
         Every cell runs {REPEATS} times (modes interleaved, each round starting with the next mode); the row is the run with the median \
         acks/s, min – max over the runs next to it. \
         **Client-side timing**: acks/s and messages/s over the wall time of the cell, ack latency = \
         one `/ack/batch` request. **ack commits/s** = top-level ack statements in \
         pg_stat_statements (each is one transaction; a fusion flush counts once). \
         **rows/commit** = fusion rows per `log_ack_multi_v1` flush{}.",
        ctx.pick(2, 10),
        logs.display(),
        if cells.iter().any(|c| c.commits.is_some() && !c.from_metrics) {
            " (the broker's /metrics had no fusion counters: commits = log_ack_multi_v1 calls, rows ≈ fast-path ack items / B, marked ≈)"
        } else {
            " from the broker's /metrics fusion counters"
        }
    ));
    let mut rows = Vec::new();
    for c in cells {
        let (m, a, h) = c
            .pgss
            .map(|(m, a, h)| (m.to_string(), a.to_string(), h.to_string()))
            .unwrap_or(("n/a".into(), "n/a".into(), "n/a".into()));
        rows.push(vec![
            c.mode.to_string(),
            c.consumers.to_string(),
            c.batch.to_string(),
            fmt_num(c.acks_per_s()),
            range(&c.reps),
            fmt_num(c.msgs_per_s()),
            format!("{} / {}", c.msgs, c.prefilled),
            c.empty_pops.to_string(),
            format!("{:.2}", c.secs),
            fmt_ms(c.lat.median),
            fmt_ms(c.lat.p99),
            c.ack_commits()
                .map(|x| fmt_num(x / c.secs.max(1e-9)))
                .unwrap_or("n/a".into()),
            c.rows_per_commit()
                .map(|r| format!("{}{r:.2}", if c.from_metrics { "" } else { "≈" }))
                .unwrap_or("–".into()),
            m,
            a,
            h,
            format!("{:.0}", c.fast_items.unwrap_or(f64::NAN)),
            format!("{:.0}", c.sql_items.unwrap_or(f64::NAN)),
            format!("{:.1}", c.rss_kb as f64 / 1024.0),
            format!("{:.1}", c.peak_rss_kb as f64 / 1024.0),
            if c.errors.is_empty() && c.failed_items == 0 {
                "0".into()
            } else {
                format!("{} ({} items)", c.errors.len(), c.failed_items)
            },
        ]);
    }
    sec.table(
        &[
            "mode",
            "C",
            "B",
            "acks/s (median)",
            "acks/s min – max",
            "msgs/s",
            "acked / prefilled",
            "empty pops",
            "wall s",
            "ack p50 ms",
            "ack p99 ms",
            "ack commits/s",
            "rows/commit",
            "ack_multi calls",
            "ack_at calls",
            "by_hash calls",
            "fast items",
            "sql items",
            "RSS MiB",
            "peak RSS MiB",
            "errors",
        ],
        &rows,
    );
    ratio_table(sec, cells);
    let errs: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.errors
                .iter()
                .take(2)
                .map(move |e| format!("- {} C={} B={}: {e}", c.mode, c.consumers, c.batch))
        })
        .take(10)
        .collect();
    if !errs.is_empty() {
        sec.para(format!("First errors:\n\n{}", errs.join("\n")));
    }
    let batches: Vec<usize> = {
        let mut b: Vec<usize> = cells.iter().map(|c| c.batch).collect();
        b.sort();
        b.dedup();
        b
    };
    // Throughput vs consumers, one colour per mode, dash per batch; only batches with ≥2 points.
    let mut tp = Vec::new();
    let mut rpc = Vec::new();
    for (mi, (mode, _)) in MODES.iter().enumerate() {
        for (bi, b) in batches.iter().enumerate() {
            let pts: Vec<&CellOut> = cells
                .iter()
                .filter(|c| c.mode == *mode && c.batch == *b)
                .collect();
            if pts.len() < 2 {
                continue;
            }
            tp.push(Series {
                name: format!("{mode}, B={b}"),
                points: pts
                    .iter()
                    .map(|c| (c.consumers as f64, c.msgs_per_s()))
                    .collect(),
                dashed: bi % 2 == 1,
                color: mi,
            });
            if mi == 0 {
                rpc.push(Series {
                    name: format!("B={b}"),
                    points: pts
                        .iter()
                        .filter_map(|c| Some((c.consumers as f64, c.rows_per_commit()?)))
                        .collect(),
                    dashed: false,
                    color: bi,
                });
            }
        }
    }
    sec.charts.push(Chart {
        file: "throughput_vs_consumers.svg".into(),
        title: "Broker ack throughput vs consumers".into(),
        svg: LineChart {
            title: "Acked messages/s vs consumers, per mode",
            x_label: "concurrent consumers",
            y_label: "messages acked per second",
            log_x: true,
            log_y: false,
            series: tp,
        }
        .render(),
    });
    sec.charts.push(Chart {
        file: "rows_per_commit_vs_consumers.svg".into(),
        title: "Fusion rows per commit vs consumers".into(),
        svg: LineChart {
            title: "Fusion rows per log_ack_multi_v1 commit (registry+fusion)",
            x_label: "concurrent consumers",
            y_label: "rows per commit",
            log_x: true,
            log_y: false,
            series: rpc,
        }
        .render(),
    });
}
