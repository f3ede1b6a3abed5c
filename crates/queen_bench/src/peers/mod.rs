//! Section 5: queen_ack side by side with the queues a user would pick instead — pgmq and
//! PgQ — in one run on one cluster, with the same fixed-size JSON payload: consume a
//! pre-filled queue (C consumers × batch B), produce, the cost to the database per
//! message (WAL, commits, relation sizes and dead tuples after N messages, before and
//! after VACUUM), and the WAL records of one consume cycle. Everything runs in a database
//! of its own (`queen_peers`, created and dropped by the section) on the bench cluster.

mod cost;
mod pgmq_sql;
mod systems;
mod waldump;

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::broker_throughput::{pgss_reset, pgss_schema};
use crate::common::{
    connect, fmt_int, fmt_ms, fmt_num, install_helpers, progress, to_s, BResult, Ctx, Summary,
};
use crate::report::{Chart, Section};
use crate::svg::{LineChart, Series};
use cost::{Counters, Sizes};
use systems::{Conn, Family, PythonWorker, Sys, WorkerOut};

const DB: &str = "queen_peers";
/// Runs of every cell, systems interleaved (the order rotates per run).
const REPEATS: usize = 3;
/// Messages per push of a fill (every system): producers write batches of 100.
const FILL_SEG: usize = 100;

/// The section's database URL: the bench URL with its database name replaced.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let host_start = base.find("://").map_or(0, |i| i + 3);
    let root = match base[host_start..].find('/') {
        Some(i) => &base[..host_start + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

struct Env<'a> {
    ctx: &'a Ctx,
    db: Client,
    url: String,
    broker: Option<Broker>,
}

impl Env<'_> {
    /// One connection (or HTTP client, or connected Python process) per worker, opened
    /// before any clock starts; a Python consumer runs batch `b` for at most `dur`.
    async fn conns(&self, sys: Sys, n: usize, b: usize, dur: f64) -> BResult<Vec<Conn>> {
        let mut v = Vec::with_capacity(n);
        if sys.python().is_some() {
            for i in 0..n {
                v.push(Conn::Python(
                    PythonWorker::start(sys, &self.url, i, b, dur).await?,
                ));
            }
            return Ok(v);
        }
        for _ in 0..n {
            v.push(match (sys, &self.broker) {
                (Sys::QueenBroker, Some(b)) => Conn::Http {
                    http: b.http.clone(),
                    base: b.base.clone(),
                },
                (Sys::QueenBroker, None) => return Err("no broker running".into()),
                _ => Conn::Sql(connect(&self.url).await?),
            });
        }
        Ok(v)
    }
}

/// One measured run of C workers.
#[derive(Clone)]
struct CellOut {
    sys: Sys,
    c: usize,
    b: usize,
    msgs: u64,
    prefilled: u64,
    secs: f64,
    lat: Summary,
    delta: Counters,
    drained: usize,
    errors: Vec<String>,
    /// msgs/s of every run of this cell (this one is the median).
    reps: Vec<f64>,
}

impl CellOut {
    fn rate(&self) -> f64 {
        self.msgs as f64 / self.secs.max(1e-9)
    }
    fn per_msg(&self, x: i64) -> f64 {
        if self.msgs == 0 {
            f64::NAN
        } else {
            x as f64 / self.msgs as f64
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Work {
    Consume,
    Produce,
}

/// Runs `sys` with `c` workers at batch `b` for `dur` (consume: or until drained).
async fn run_cell(
    env: &Env<'_>,
    work: Work,
    sys: Sys,
    c: usize,
    b: usize,
    dur: f64,
    prefilled: u64,
) -> BResult<CellOut> {
    let conns = env.conns(sys, c, b, dur).await?;
    let before = Counters::read(&env.db).await?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(dur);
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, conn)| {
            tokio::spawn(async move {
                match work {
                    Work::Consume => {
                        systems::consume_worker(sys, conn, i, b, start, deadline).await
                    }
                    Work::Produce => {
                        systems::produce_worker(sys, conn, i, b, start, deadline).await
                    }
                }
            })
        })
        .collect();
    let mut outs: Vec<WorkerOut> = Vec::new();
    for t in tasks {
        outs.push(t.await.map_err(to_s)?);
    }
    // The workers' connections closed with their tasks; their backends flush their
    // statistics as they exit.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let delta = Counters::read(&env.db).await?.since(&before);
    let secs = outs
        .iter()
        .map(|o| o.finished)
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let mut lat = Vec::new();
    let mut errors = Vec::new();
    for o in &outs {
        lat.extend_from_slice(&o.lat_ms);
        errors.extend(o.errors.iter().cloned());
    }
    let out = CellOut {
        sys,
        c,
        b,
        msgs: outs.iter().map(|o| o.msgs).sum(),
        prefilled,
        secs,
        lat: Summary::of(&lat),
        delta,
        drained: outs.iter().filter(|o| o.drained).count(),
        errors,
        reps: Vec::new(),
    };
    progress(
        env.ctx,
        "peers",
        format!(
            "{} {}: C={c} B={b}: {} msgs/s, ack/push p50 {} ms p99 {} ms, WAL {:.0} B/msg{}",
            if work == Work::Consume {
                "consume"
            } else {
                "produce"
            },
            sys.label(),
            fmt_num(out.rate()),
            fmt_ms(out.lat.median),
            fmt_ms(out.lat.p99),
            out.per_msg(out.delta.wal),
            if out.errors.is_empty() {
                String::new()
            } else {
                format!(", {} errors (first: {})", out.errors.len(), out.errors[0])
            }
        ),
    );
    Ok(out)
}

/// A generous guess of the consume rate at batch B, to size the fill so a cell rarely
/// drains before its deadline (a drained cell ends early and says so).
fn rate_guess(b: usize) -> f64 {
    match b {
        0..=1 => 5_000.0,
        2..=10 => 30_000.0,
        11..=100 => 150_000.0,
        _ => 250_000.0,
    }
}

/// Messages per worker for a consume cell: whole batches, at least 3, at most `cap` in
/// all (fill and cell together must stay far below max_wal_size, or a checkpoint would
/// land inside the cell).
fn per_worker(c: usize, b: usize, dur: f64, cap: usize) -> usize {
    let total = (rate_guess(b) * dur * 1.3).min(cap as f64);
    let batches = ((total / (c * b) as f64).ceil() as usize).max(3);
    batches * b
}

async fn consume_cell(env: &Env<'_>, sys: Sys, c: usize, b: usize, dur: f64) -> BResult<CellOut> {
    let fam = sys.family();
    let per = per_worker(c, b, dur, env.ctx.pick(150_000, 400_000));
    cost::checkpoint(&env.db).await?;
    systems::reset(&env.db, fam, c).await?;
    systems::fill(&env.db, fam, c, per, FILL_SEG, b, true).await?;
    run_cell(env, Work::Consume, sys, c, b, dur, (c * per) as u64).await
}

async fn produce_cell(env: &Env<'_>, sys: Sys, c: usize, b: usize, dur: f64) -> BResult<CellOut> {
    let fam = sys.family();
    cost::checkpoint(&env.db).await?;
    systems::reset(&env.db, fam, c).await?;
    if fam == Family::Queen {
        // Queue and partitions exist (one message each) before the clock starts.
        systems::fill(&env.db, fam, c, 0, FILL_SEG, 1, true).await?;
    }
    run_cell(env, Work::Produce, sys, c, b, dur, 0).await
}

/// The run with the median rate, carrying every run's rate.
fn median_run(mut runs: Vec<CellOut>) -> Option<CellOut> {
    runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    let reps: Vec<f64> = runs.iter().map(CellOut::rate).collect();
    let mut m = runs.get((runs.len().max(1) - 1) / 2)?.clone();
    m.reps = reps;
    Some(m)
}

/// Every (C, B) point × system × repeat, systems interleaved within a repeat.
async fn grid(
    env: &Env<'_>,
    work: Work,
    systems: &[Sys],
    points: &[(usize, usize)],
    dur: f64,
) -> Vec<CellOut> {
    let mut cells = Vec::new();
    for &(c, b) in points {
        let mut runs: Vec<Vec<CellOut>> = vec![Vec::new(); systems.len()];
        let mut failed: Vec<Option<String>> = vec![None; systems.len()];
        for rep in 0..REPEATS {
            for k in 0..systems.len() {
                let i = (k + rep) % systems.len();
                if failed[i].is_some() {
                    continue;
                }
                let r = match work {
                    Work::Consume => consume_cell(env, systems[i], c, b, dur).await,
                    Work::Produce => produce_cell(env, systems[i], c, b, dur).await,
                };
                match r {
                    Ok(o) => runs[i].push(o),
                    Err(e) => {
                        progress(
                            env.ctx,
                            "peers",
                            format!("{} C={c} B={b} FAILED: {e}", systems[i].label()),
                        );
                        failed[i] = Some(e);
                    }
                }
            }
        }
        for (i, r) in runs.into_iter().enumerate() {
            match (median_run(r), failed[i].take()) {
                (Some(m), None) => cells.push(m),
                (m, Some(e)) => cells.push(CellOut {
                    errors: vec![format!("cell failed: {e}")],
                    ..m.unwrap_or(CellOut {
                        sys: systems[i],
                        c,
                        b,
                        msgs: 0,
                        prefilled: 0,
                        secs: 0.0,
                        lat: Summary::default(),
                        delta: Counters::default(),
                        drained: 0,
                        errors: vec![],
                        reps: vec![],
                    })
                }),
                (None, None) => {}
            }
        }
    }
    cells
}

fn range(reps: &[f64]) -> String {
    match (reps.first(), reps.last()) {
        (Some(a), Some(b)) => format!("{} – {}", fmt_num(*a), fmt_num(*b)),
        _ => "n/a".into(),
    }
}

fn errors_cell(c: &CellOut) -> String {
    if c.errors.is_empty() {
        "0".into()
    } else {
        format!("{}: {}", c.errors.len(), c.errors[0])
    }
}

/// One row per system, one column per batch, at C consumers; `f` picks the figure.
fn matrix(
    sec: &mut Section,
    cells: &[CellOut],
    systems: &[Sys],
    c: usize,
    first: &str,
    f: &dyn Fn(&CellOut) -> String,
) {
    let mut batches: Vec<usize> = cells.iter().filter(|x| x.c == c).map(|x| x.b).collect();
    batches.sort();
    batches.dedup();
    if batches.is_empty() {
        return;
    }
    let heads: Vec<String> = std::iter::once(first.to_string())
        .chain(batches.iter().map(|b| format!("B={b}")))
        .collect();
    let rows: Vec<Vec<String>> = systems
        .iter()
        .map(|s| {
            std::iter::once(s.label().to_string())
                .chain(batches.iter().map(|b| {
                    cells
                        .iter()
                        .find(|x| x.sys == *s && x.c == c && x.b == *b)
                        .map(f)
                        .unwrap_or_else(|| "–".into())
                }))
                .collect()
        })
        .collect();
    let h: Vec<&str> = heads.iter().map(String::as_str).collect();
    sec.table(&h, &rows);
}

fn rate_cell(x: &CellOut) -> String {
    if !x.errors.is_empty() && x.msgs == 0 {
        return "**failed**".into();
    }
    format!(
        "{}{}",
        fmt_num(x.rate()),
        if x.errors.is_empty() { "" } else { " (errors)" }
    )
}

fn detail_table(sec: &mut Section, cells: &[CellOut], what: &str) {
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            vec![
                c.sys.label().to_string(),
                c.c.to_string(),
                c.b.to_string(),
                fmt_num(c.rate()),
                range(&c.reps),
                if c.prefilled > 0 {
                    format!(
                        "{} / {}",
                        fmt_int(c.msgs as i64),
                        fmt_int(c.prefilled as i64)
                    )
                } else {
                    fmt_int(c.msgs as i64)
                },
                format!("{:.2}", c.secs),
                format!("{}/{}", c.drained, c.c),
                fmt_ms(c.lat.median),
                fmt_ms(c.lat.p99),
                format!("{:.1}", c.per_msg(c.delta.wal)),
                format!("{:.3}", c.per_msg(c.delta.xid)),
                if c.sys == Sys::QueenBroker {
                    // The broker's pooled connections outlive the cell: their statistics
                    // reach pg_stat_database up to a second later or more.
                    "–".into()
                } else {
                    format!("{:.3}", c.per_msg(c.delta.commits))
                },
                c.delta.checkpoints.to_string(),
                errors_cell(c),
            ]
        })
        .collect();
    sec.table(
        &[
            "system",
            "C",
            "B",
            "msgs/s (median)",
            "min – max",
            if what == "consume" {
                "acked / prefilled"
            } else {
                "messages"
            },
            "wall s",
            "drained",
            if what == "consume" {
                "ack p50 ms"
            } else {
                "push p50 ms"
            },
            if what == "consume" {
                "ack p99 ms"
            } else {
                "push p99 ms"
            },
            "WAL B/msg",
            "write commits/msg",
            "xact_commit/msg",
            "checkpoints",
            "errors",
        ],
        &rows,
    );
}

/// The cost of N messages through one system.
struct CostOut {
    sys: Sys,
    n: usize,
    produce: Counters,
    produce_secs: f64,
    consume: Counters,
    consume_secs: f64,
    consumed: u64,
    base: Sizes,
    full: Sizes,
    after: Sizes,
    vacuumed: Sizes,
    errors: Vec<String>,
}

async fn cost_run(env: &mut Env<'_>, sys: Sys, n: usize) -> BResult<CostOut> {
    const C: usize = 8;
    const B: usize = 100;
    let fam = sys.family();
    let schema = fam.schema();
    systems::reset(&env.db, fam, C).await?;
    cost::vacuum(&env.db, schema).await?;
    cost::checkpoint(&env.db).await?;
    let base = cost::sizes(&env.db, schema).await?;
    let c0 = Counters::read(&env.db).await?;
    let t = Instant::now();
    systems::fill(&env.db, fam, C, n / C, FILL_SEG, B, false).await?;
    let produce_secs = t.elapsed().as_secs_f64();
    let c1 = Counters::read(&env.db).await?;
    let full = cost::sizes(&env.db, schema).await?;
    let broker_log = env.ctx.logs.join("broker-peers-cost.log");
    if sys == Sys::QueenBroker {
        env.broker = Some(start_broker(env, &broker_log).await?);
    }
    let cell = run_cell(env, Work::Consume, sys, C, B, 1800.0, n as u64).await;
    if let Some(b) = env.broker.take() {
        b.stop().await; // its connections close: their statistics are flushed
    }
    let cell = cell?;
    let c2 = Counters::read(&env.db).await?;
    let after = cost::sizes(&env.db, schema).await?;
    cost::vacuum(&env.db, schema).await?;
    let vacuumed = cost::sizes(&env.db, schema).await?;
    Ok(CostOut {
        sys,
        n,
        produce: c1.since(&c0),
        produce_secs,
        consume: c2.since(&c1),
        consume_secs: cell.secs,
        consumed: cell.msgs,
        base,
        full,
        after,
        vacuumed,
        errors: cell.errors,
    })
}

async fn start_broker(env: &Env<'_>, log: &std::path::Path) -> BResult<Broker> {
    Broker::start(
        &env.ctx.broker_bin,
        &env.url,
        &[
            ("QUEEN_ACK_REGISTRY", "1"),
            ("QUEEN_ACK_FUSION", "1"),
            ("QUEEN_MAX_BATCH", "10000"),
        ],
        log,
    )
    .await
}

fn mb(x: i64) -> String {
    format!("{:.1}", x as f64 / 1e6)
}

fn cost_table(sec: &mut Section, costs: &[CostOut]) {
    let per = |x: i64, n: u64| {
        if n == 0 {
            f64::NAN
        } else {
            x as f64 / n as f64
        }
    };
    let rows: Vec<Vec<String>> = costs
        .iter()
        .map(|c| {
            let n = c.n as u64;
            vec![
                c.sys.label().to_string(),
                format!("{:.1}", per(c.produce.wal, n)),
                format!(
                    "{:.3} / {:.3}",
                    per(c.produce.xid, n),
                    per(c.produce.commits, n)
                ),
                fmt_num(n as f64 / c.produce_secs.max(1e-9)),
                format!("{:.1}", per(c.consume.wal, c.consumed)),
                format!(
                    "{:.3} / {:.3}",
                    per(c.consume.xid, c.consumed),
                    per(c.consume.commits, c.consumed)
                ),
                fmt_num(c.consumed as f64 / c.consume_secs.max(1e-9)),
                format!(
                    "{} + {}",
                    mb(c.full.heap - c.base.heap),
                    mb(c.full.index - c.base.index)
                ),
                format!(
                    "{} + {}",
                    mb(c.after.heap - c.base.heap),
                    mb(c.after.index - c.base.index)
                ),
                format!(
                    "{} + {}",
                    mb(c.vacuumed.heap - c.base.heap),
                    mb(c.vacuumed.index - c.base.index)
                ),
                format!("{} / {}", fmt_int(c.after.live), fmt_int(c.after.dead)),
                format!(
                    "{} / {}",
                    fmt_int(c.vacuumed.live),
                    fmt_int(c.vacuumed.dead)
                ),
                if c.errors.is_empty() && c.consumed == n {
                    "0".into()
                } else {
                    format!(
                        "consumed {} of {n}; {}",
                        c.consumed,
                        c.errors.first().cloned().unwrap_or_default()
                    )
                },
            ]
        })
        .collect();
    sec.table(
        &[
            "system",
            "produce WAL B/msg",
            "produce write commits / xact_commit per msg",
            "fill msgs/s",
            "consume WAL B/msg",
            "consume write commits / xact_commit per msg",
            "consume msgs/s",
            "MB heap + index, queue full",
            "… all consumed",
            "… after VACUUM",
            "live / dead tuples, all consumed",
            "live / dead after VACUUM",
            "checkpoints produce / consume",
            "errors",
        ],
        &rows,
    );
}

/// A system's measured consume cycles: their messages, WAL records and the top-level
/// statements' server time.
struct Anatomy {
    sys: Sys,
    msgs: u64,
    kinds: Vec<waldump::Kind>,
    stmts: Vec<cost::Stmt>,
}

/// WAL records of one consume cycle per system at batch `b`, one consumer, and the
/// server time of its statements (pg_stat_statements, when the cluster preloads it).
async fn anatomy(env: &Env<'_>, sys: Sys, b: usize, cycles: usize) -> BResult<Anatomy> {
    let fam = sys.family();
    cost::checkpoint(&env.db).await?;
    systems::reset(&env.db, fam, 1).await?;
    // Warm-up batches first (first-contact rows, caches), drained unmeasured.
    systems::fill(&env.db, fam, 1, 5 * b, FILL_SEG, b, true).await?;
    run_cell(env, Work::Consume, sys, 1, b, 120.0, 0).await?;
    systems::fill(&env.db, fam, 1, cycles * b, FILL_SEG, b, true).await?;
    let pgss = pgss_schema(&env.db).await;
    let timed = match &pgss {
        Some(schema) => pgss_reset(&env.db, schema).await,
        None => false,
    };
    let from = waldump::lsn(&env.db).await?;
    let cell = run_cell(env, Work::Consume, sys, 1, b, 600.0, 0).await?;
    let to = waldump::lsn(&env.db).await?;
    // Before the dump: its relation-name look-ups are statements too.
    let stmts = match (&pgss, timed) {
        (Some(schema), true) => cost::statements(&env.db, schema).await.unwrap_or_default(),
        _ => Vec::new(),
    };
    let kinds = waldump::dump(&env.db, from, to).await?;
    Ok(Anatomy {
        sys,
        msgs: cell.msgs,
        kinds,
        stmts,
    })
}

fn statements_table(sec: &mut Section, b: usize, rows_in: &[Anatomy]) {
    let mut rows = Vec::new();
    for a in rows_in {
        let m = a.msgs.max(1) as f64;
        for st in a.stmts.iter().take(4) {
            let q: String = st.query.split_whitespace().collect::<Vec<_>>().join(" ");
            let q: String = q.chars().take(110).collect();
            rows.push(vec![
                a.sys.label().to_string(),
                format!("`{q}`"),
                format!("{:.3}", st.calls as f64 / m),
                fmt_ms(st.mean_ms),
                format!("{:.1}", st.total_ms * 1000.0 / m),
            ]);
        }
    }
    if rows.is_empty() {
        return;
    }
    sec.heading(format!(
        "Server time per statement of the consume cycle, batch {b}, one consumer"
    ));
    sec.table(
        &[
            "system",
            "top-level statement (pg_stat_statements)",
            "calls/msg",
            "mean server ms",
            "server µs/msg",
        ],
        &rows,
    );
}

fn anatomy_table(sec: &mut Section, b: usize, rows_in: &[Anatomy]) {
    let mut rows = Vec::new();
    for Anatomy {
        sys, msgs, kinds, ..
    } in rows_in
    {
        let m = (*msgs).max(1) as f64;
        let total: u64 = kinds.iter().map(|k| k.bytes).sum();
        rows.push(vec![
            format!("**{}**", sys.label()),
            "**all records**".into(),
            String::new(),
            format!(
                "{:.2}",
                kinds.iter().map(|k| k.count).sum::<u64>() as f64 / m
            ),
            format!("**{:.1}**", total as f64 / m),
            format!(
                "{:.1}",
                kinds.iter().map(|k| k.fpi_bytes).sum::<u64>() as f64 / m
            ),
        ]);
        for k in kinds.iter().filter(|k| k.bytes * 50 >= total).take(10) {
            rows.push(vec![
                String::new(),
                k.record.clone(),
                k.rel.clone(),
                format!("{:.2}", k.count as f64 / m),
                format!("{:.1}", k.bytes as f64 / m),
                format!("{:.1}", k.fpi_bytes as f64 / m),
            ]);
        }
    }
    sec.heading(format!(
        "WAL records of the consume cycle, batch {b}, one consumer"
    ));
    sec.table(
        &[
            "system",
            "record (rmgr/type)",
            "relation (first block)",
            "records/msg",
            "bytes/msg",
            "of which full-page images",
        ],
        &rows,
    );
}

fn chart(
    cells: &[CellOut],
    systems: &[Sys],
    c: usize,
    file: &str,
    title: &str,
    y: &str,
    f: &dyn Fn(&CellOut) -> f64,
) -> Chart {
    let series = systems
        .iter()
        .enumerate()
        .map(|(i, s)| Series {
            name: s.label().to_string(),
            points: cells
                .iter()
                .filter(|x| x.sys == *s && x.c == c && x.msgs > 0)
                .map(|x| (x.b as f64, f(x)))
                .collect(),
            dashed: matches!(s, Sys::QueenSqlAt | Sys::PgmqArchive),
            color: i,
        })
        .collect();
    Chart {
        file: file.into(),
        title: title.into(),
        svg: LineChart {
            title,
            x_label: "batch size B",
            y_label: y,
            log_x: true,
            log_y: true,
            series,
        }
        .render(),
    }
}

async fn setup(ctx: &Ctx, main_db: &Client) -> BResult<(Client, String, String)> {
    let url = with_database(&ctx.database_url, DB);
    let e = |e: tokio_postgres::Error| format!("creating database {DB}: {}", to_s(&e));
    main_db
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        .await
        .map_err(e)?;
    main_db
        .batch_execute(&format!("CREATE DATABASE {DB}"))
        .await
        .map_err(e)?;
    let db = connect(&url).await?;
    db.batch_execute(
        "SET client_min_messages = warning;
         CREATE EXTENSION queen_ack; CREATE EXTENSION pgq; CREATE EXTENSION pgstattuple",
    )
    .await
    .map_err(|e| {
        format!(
            "extensions in {DB} (PgQ: apt-get install postgresql-15-pgq3, see scripts/setup.sh): {}",
            to_s(&e)
        )
    })?;
    // Server time per statement in the WAL anatomy, where the cluster preloads it.
    let _ = db
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await;
    install_helpers(&db).await?;
    let how = pgmq_sql::install(&db, &url).await?;
    db.batch_execute(systems::PEERS_SQL)
        .await
        .map_err(|e| format!("installing the fill procedures: {}", to_s(&e)))?;
    Ok((db, url, how))
}

pub async fn run(ctx: &Ctx, main_db: &Client) -> BResult<Section> {
    let mut sec = Section::new("5. Peers: queen_ack vs pgmq vs PgQ");
    let load_start = loadavg();
    let (db, url, pgmq_how) = setup(ctx, main_db).await?;
    let versions = db
        .query_one(
            "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'pgq'),
                    (SELECT extversion FROM pg_extension WHERE extname = 'queen_ack'),
                    current_setting('autovacuum')",
            &[],
        )
        .await
        .map_err(to_s)?;
    let (pgq_v, queen_v, autovac): (String, String, String) =
        (versions.get(0), versions.get(1), versions.get(2));
    progress(
        ctx,
        "peers",
        format!("pgmq: {pgmq_how}; PgQ {pgq_v}; queen_ack {queen_v}"),
    );
    let mut env = Env {
        ctx,
        db,
        url,
        broker: None,
    };
    env.broker = Some(start_broker(&env, &ctx.logs.join("broker-peers.log")).await?);
    let dur = ctx.pick(1.5, 5.0);
    // `--cells`: a focused run of these consume cells only (no produce, anatomy or cost).
    let focused = ctx.cells.is_some();
    let points: Vec<(usize, usize)> = if let Some(cells) = &ctx.cells {
        cells.clone()
    } else if ctx.quick {
        vec![(8, 1), (8, 10), (8, 100), (64, 10)]
    } else {
        [1usize, 8, 64]
            .iter()
            .flat_map(|&c| [1usize, 10, 100, 500].map(|b| (c, b)))
            .collect()
    };
    let consume = grid(&env, Work::Consume, &Sys::CONSUME, &points, dur).await;
    let ppoints: Vec<(usize, usize)> = if focused {
        Vec::new()
    } else if ctx.quick {
        vec![(8, 1), (8, 100)]
    } else {
        vec![(1, 1), (1, 100), (8, 1), (8, 100)]
    };
    let produce = grid(&env, Work::Produce, &Sys::PRODUCE, &ppoints, dur).await;
    let (cycles1, cycles100) = ctx.pick((200, 20), (1000, 100));
    let mut anat: Vec<(usize, Vec<Anatomy>)> = Vec::new();
    let mut anat_err = Vec::new();
    let anatomy_points: &[(usize, usize)] = if focused {
        &[]
    } else {
        &[(1, cycles1), (100, cycles100)]
    };
    for &(b, cycles) in anatomy_points {
        let mut v = Vec::new();
        for &sys in Sys::SERVER_COST {
            match anatomy(&env, sys, b, cycles).await {
                Ok(a) => v.push(a),
                Err(e) => anat_err.push(format!("{} B={b}: {e}", sys.label())),
            }
        }
        anat.push((b, v));
    }
    if let Some(b) = env.broker.take() {
        b.stop().await;
    }
    let n = ctx.pick(100_000usize, 1_000_000);
    let mut costs = Vec::new();
    let mut cost_err = Vec::new();
    for sys in Sys::SERVER_COST.iter().copied().filter(|_| !focused) {
        match cost_run(&mut env, sys, n).await {
            Ok(c) => costs.push(c),
            Err(e) => {
                progress(ctx, "peers", format!("cost {} FAILED: {e}", sys.label()));
                cost_err.push(format!("{}: {e}", sys.label()));
            }
        }
    }
    if let Some(b) = env.broker.take() {
        b.stop().await;
    }
    drop(env);
    // Let the section's connection close before the drop would terminate it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = main_db
        .batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
        .await;

    sec.para(format!(
        "Load average (1/5/15 min) of the machine at the start of the section: {load_start}; at its end: {}. \
         Other work on the machine (the load above the bench's own) makes figures noisy: compare within a run.",
        loadavg()
    ));
    sec.para(format!(
        "One cluster, one machine, one run; database `{DB}` of its own (created and dropped by the section). \
         Every message is the same {}-byte JSON text `{{\"id\":\"<12 digits>\",\"kind\":\"bench\",\"body\":\"xx…\"}}` \
         (stored as the system stores it: queen_ack frames of jsonb text, pgmq jsonb, PgQ text). \
         **pgmq**: {pgmq_how}; one queue `bench` shared by all consumers (pgmq's own concurrency, FOR UPDATE SKIP LOCKED), \
         visibility timeout 120 s. **PgQ** {pgq_v} (Debian's postgresql-15-pgq3): a queue per worker (PgQ hands every event of a queue to every \
         consumer, so work is split by queue, as queen_ack splits it by partition), one registered consumer each; \
         **the ticker is driven by the bench**, no pgqd: the fill calls `pgq.ticker(q)` in its own transaction after every B events \
         (ticker_max_count 1, no lag or idle ticks), so each PgQ batch holds B events, the PgQ equivalent of asking for B. \
         **queen_ack** {queen_v}: a partition per worker (`p<i>` of queue `bench_peers`), over plain SQL (the psql API `queen.pop`/`queen.ack`, \
         or `queen.log_ack_at_v1` positionally with the pop's lease) and through the release broker over HTTP (registry + fusion). \
         Queues are filled server-side through each system's own API (`queen.push`, `pgmq.send_batch`, `pgq.insert_event`), \
         100 messages per transaction; every cell gets a fresh queue. The cycles: {}. \
         Cells of {dur} s (or until the queue is empty: `drained` counts the workers that emptied theirs), {REPEATS} runs each with the systems \
         interleaved (the order rotates per run); the row is the median run, min – max next to it. **Client-side timing**. \
         WAL = cluster-wide `pg_current_wal_insert_lsn()` delta over the cell ÷ messages (autovacuum, when it runs, counts too: autovacuum = {autovac}); \
         **write commits** = transaction ids assigned (a transaction that wrote), **xact_commit** = pg_stat_database delta (read-only commits included).",
        systems::PAYLOAD_BYTES,
        Sys::CONSUME
            .iter()
            .map(|s| format!("{} — {}", s.label(), s.cycle()))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    let cs: Vec<usize> = {
        let mut v: Vec<usize> = consume.iter().map(|c| c.c).collect();
        v.sort();
        v.dedup();
        v
    };
    sec.heading("Consume a pre-filled queue: messages/s consumed and acknowledged");
    for &c in &cs {
        sec.para(format!("{c} consumer(s):"));
        matrix(&mut sec, &consume, &Sys::CONSUME, c, "msgs/s", &rate_cell);
    }
    sec.heading("Consume: WAL bytes per message (8 consumers)");
    matrix(&mut sec, &consume, &Sys::CONSUME, 8, "WAL B/msg", &|x| {
        format!("{:.1}", x.per_msg(x.delta.wal))
    });
    sec.heading("Consume: ack latency p50 / p99, ms (8 consumers)");
    matrix(&mut sec, &consume, &Sys::CONSUME, 8, "ack ms", &|x| {
        format!("{} / {}", fmt_ms(x.lat.median), fmt_ms(x.lat.p99))
    });
    sec.para(
        "Ack latency: queen SQL = the ack statement; broker = the `/ack/batch` request; pgmq = the delete/archive statement; \
         PgQ = `finish_batch` + COMMIT (its batch is one transaction).",
    );
    sec.heading("Consume: every cell");
    detail_table(&mut sec, &consume, "consume");
    if focused {
        sec.para(
            "A focused run (`--cells`): these consume cells only, without produce rates, the database cost \
             or the WAL anatomy.",
        );
    } else {
        sec.heading("Produce: messages/s");
        let prod_rows: Vec<Vec<String>> = produce
            .iter()
            .map(|c| {
                vec![
                    c.sys.produce_label().to_string(),
                    c.c.to_string(),
                    c.b.to_string(),
                    rate_cell(c),
                    range(&c.reps),
                    fmt_ms(c.lat.median),
                    fmt_ms(c.lat.p99),
                    format!("{:.1}", c.per_msg(c.delta.wal)),
                    format!("{:.3}", c.per_msg(c.delta.xid)),
                    errors_cell(c),
                ]
            })
            .collect();
        sec.para(format!(
            "P producers, each into its own partition (queen_ack: `p<i>`, dedup window 0 like the peers, which have none) or queue (PgQ), \
             pgmq into its one queue; batches of B per statement or request: `queen.push(q, <JSON array>, NULL, 'p<i>')`, \
             `POST /api/v1/push`, `pgmq.send_batch(q, jsonb[])`, `SELECT pgq.insert_event(q, 'bench', x) FROM unnest(texts)`; autocommit; \
             {dur} s per cell, {REPEATS} runs interleaved. PgQ's ticks are not part of this figure (they are in the cost table)."
        ));
        sec.table(
            &[
                "system",
                "P",
                "B",
                "msgs/s (median)",
                "min – max",
                "push p50 ms",
                "push p99 ms",
                "WAL B/msg",
                "write commits/msg",
                "errors",
            ],
            &prod_rows,
        );
        sec.heading(format!(
            "Cost to the database of {} messages",
            fmt_int(n as i64)
        ));
        sec.para(format!(
            "Per system, from empty (its tables VACUUMed first; sizes are growth over that baseline): the fill writes {} messages \
             server-side in transactions of 100 with synchronous_commit on (PgQ: plus a tick after every 100 events, counted here), \
             then 8 consumers consume all of them at batch 100 (the broker row through a broker started for it and stopped after, \
             so every statistic is flushed). Heap = table + TOAST bytes, index = every index, of the system's schema \
             (queen, pgmq, pgq); live / dead tuples counted exactly by pgstattuple; then `VACUUM` of each table. \
             PgQ never deletes an event: its 3 rotating tables are TRUNCATEd in turn by maintenance (rotation_period 2 h by default), \
             which this run does not reach.",
            fmt_int(n as i64)
        ));
        cost_table(&mut sec, &costs);
        if !cost_err.is_empty() {
            sec.para(format!("Cost runs that failed: {}", cost_err.join("; ")));
        }
        sec.heading("Where the WAL goes: one consume cycle");
        sec.para(format!(
            "One consumer, {cycles1} cycles at batch 1 and {cycles100} at batch 100 after 5 warm-up batches; the server's `pg_waldump` over the \
             WAL range of the measured cycles, summed per record type and the relation of its first block reference; \
             records of at least 2 % of a system's bytes are listed. Full-page images depend on checkpoint timing."
        ));
        for (b, v) in &anat {
            anatomy_table(&mut sec, *b, v);
            statements_table(&mut sec, *b, v);
        }
        if !anat_err.is_empty() {
            sec.para(format!(
                "WAL anatomy not measured for: {}",
                anat_err.join("; ")
            ));
        }
    }
    let errs: Vec<String> = consume
        .iter()
        .chain(produce.iter())
        .flat_map(|c| {
            c.errors
                .iter()
                .take(2)
                .map(move |e| format!("- {} C={} B={}: {e}", c.sys.label(), c.c, c.b))
        })
        .take(20)
        .collect();
    if !errs.is_empty() {
        sec.para(format!("First errors:\n\n{}", errs.join("\n")));
    }
    sec.charts.push(chart(
        &consume,
        &Sys::CONSUME,
        8,
        "peers_consume_vs_batch.svg",
        "Consume: messages/s vs batch, 8 consumers",
        "messages consumed and acked per second",
        &CellOut::rate,
    ));
    sec.charts.push(chart(
        &consume,
        &Sys::CONSUME,
        8,
        "peers_wal_vs_batch.svg",
        "Consume: WAL bytes per message vs batch, 8 consumers",
        "WAL bytes per message",
        &|x| x.per_msg(x.delta.wal),
    ));
    Ok(sec)
}

/// The first three fields of /proc/loadavg.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" / "))
        .unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_rewrite() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5490/queen_test", "x"),
            "postgres://postgres@127.0.0.1:5490/x"
        );
        assert_eq!(
            with_database("postgres://u@h:1/db?sslmode=disable", "x"),
            "postgres://u@h:1/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    }

    #[test]
    fn fills_are_whole_batches_and_sized_by_rate() {
        for (c, b) in [(1, 1), (8, 10), (64, 500), (8, 100)] {
            let per = per_worker(c, b, 1.5, 400_000);
            assert_eq!(per % b, 0);
            assert!(per >= 3 * b);
        }
        // 8 consumers at batch 1 for 5 s: a little over 5 s at the guessed rate in all.
        assert_eq!(per_worker(8, 1, 5.0, 400_000) * 8 / 1000, 32);
        // Capped: 64 consumers at batch 500 for 5 s get 400,000 messages in all.
        assert_eq!(per_worker(64, 500, 5.0, 400_000) * 64, 416_000);
    }
}
