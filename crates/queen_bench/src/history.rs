//! Section 13: the sampled history behind the status and analytics routes
//! (docs/observability.md). (a) What sampling costs: section 3's end-to-end run at batch
//! 10 through a broker sampling every second (ten times the default rate) against one
//! that never samples, the two interleaved, a fresh broker per run. (b) What the history
//! weighs: 24 hours of one broker's rows, 10 queues' snapshots and a lifecycle run a
//! minute, in tables laid out as the extension's. (c) What the routes cost at 1,000
//! queues and 10,000 partitions with an hour of history: the latency of each route, and
//! of the snapshot a broker files once a minute.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::common::{
    drop_queues, fmt_ms, fmt_num, fmt_ratio, median_of, percentile_of, progress, to_s, BResult, Ctx,
};
use crate::end_to_end::one_run;
use crate::report::Section;

const QUEUES: i32 = 1000;
const PARTITIONS: i32 = 10;
const PREFIX: &str = "bench_hist_";

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("13. The sampled history: its cost, its size, its routes");
    overhead(ctx, db, &mut sec).await?;
    store_size(db, &mut sec).await?;
    let r = routes(ctx, db, &mut sec).await;
    cleanup(db).await?;
    r?;
    Ok(sec)
}

async fn overhead(ctx: &Ctx, db: &Client, sec: &mut Section) -> BResult<()> {
    let rounds = ctx.pick(3, 5);
    let secs = ctx.pick(4.0, 10.0);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    // The sampler's own statements, from pg_stat_statements (only the sampling runs
    // issue them): what sampling costs the database, free of the runs' noise.
    let pgss = crate::broker_throughput::pgss_schema(db).await;
    if let Some(s) = &pgss {
        crate::broker_throughput::pgss_reset(db, s).await;
    }
    for round in 0..rounds {
        for k in 0..2 {
            let sampling = (k + round) % 2 == 1;
            let log = ctx.logs.join("broker-history.log");
            let every = if sampling { "1000" } else { "0" };
            let b = Broker::start(
                &ctx.broker_bin,
                &ctx.database_url,
                &[("QUEEN_HISTORY_SAMPLE_MS", every)],
                &log,
            )
            .await?;
            let r = one_run(ctx, db, &b, 10, secs).await;
            b.stop().await;
            let r = r?;
            if let Some(e) = r.errors.first() {
                return Err(format!("history overhead run: {e}"));
            }
            progress(
                ctx,
                "history",
                format!(
                    "sampling {}: consumed {} msgs/s",
                    if sampling { "on" } else { "off" },
                    fmt_num(r.consumed)
                ),
            );
            if sampling { &mut on } else { &mut off }.push(r.consumed);
        }
    }
    let (a, b) = (median_of(&off), median_of(&on));
    let cost = match &pgss {
        Some(s) => sampler_cost(db, s, secs * rounds as f64).await?,
        None => {
            "pg_stat_statements is not installed: the sampler's statements were not counted.".into()
        }
    };
    sec.heading("Sampling overhead");
    sec.para(format!(
        "Section 3's run at batch 10 (4 producers, 8 consumers, registry + ack fusion) for \
         {secs} s, through a fresh broker each run: `QUEEN_HISTORY_SAMPLE_MS=0` (never) or \
         `1000` (every second, ten times the default; a queue snapshot every minute). \
         Medians of {rounds} interleaved runs each; consumed messages per second."
    ));
    sec.table(
        &["sampling", "consumed msgs/s (median)", "runs", "on ÷ off"],
        &[
            vec!["off".into(), fmt_num(a), runs(&off), "–".into()],
            vec!["every 1 s".into(), fmt_num(b), runs(&on), fmt_ratio(b, a)],
        ],
    );
    sec.para(cost);
    Ok(())
}

/// The sampler's statements over `on_secs` of sampling runs: calls, database time, and
/// that time as a share of one core.
async fn sampler_cost(db: &Client, schema: &str, on_secs: f64) -> BResult<String> {
    let row = db
        .query_one(
            &format!(
                "SELECT coalesce(sum(calls) FILTER (WHERE query ILIKE '%history_record_v1%'), 0)::bigint,
                        coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE '%history_record_v1%'), 0)::float8,
                        coalesce(sum(calls) FILTER (WHERE query ILIKE '%history_queues_v1%'
                                                       OR query ILIKE '%queue_stats_v1%'
                                                       OR query ILIKE '%queue_list_v1%'), 0)::bigint,
                        coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE '%history_queues_v1%'
                                                       OR query ILIKE '%queue_stats_v1%'
                                                       OR query ILIKE '%queue_list_v1%'), 0)::float8
                   FROM {schema}.pg_stat_statements
                  WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ),
            &[],
        )
        .await
        .map_err(to_s)?;
    let (rc, rms, sc, sms): (i64, f64, i64, f64) = (row.get(0), row.get(1), row.get(2), row.get(3));
    let share = (rms + sms) / (on_secs * 1000.0) * 100.0;
    Ok(format!(
        "The sampler's statements over the {on_secs:.0} s of sampling runs \
         (pg_stat_statements): {rc} samples (`history_record_v1`) taking {rms:.1} ms of \
         database time, {sc} statements of the minute's queue snapshots (`queue_list_v1`, \
         `queue_stats_v1`, `history_queues_v1`) taking {sms:.1} ms: {share:.3} % of one core. \
         At the default interval (10 s) a tenth of the samples."
    ))
}

fn runs(xs: &[f64]) -> String {
    xs.iter()
        .map(|x| fmt_num(*x))
        .collect::<Vec<_>>()
        .join(", ")
}

/// 24 hours of history in scratch tables laid out as the extension's: the bytes it takes.
async fn store_size(db: &Client, sec: &mut Section) -> BResult<()> {
    let sql = "
        DROP TABLE IF EXISTS pg_temp.hb, pg_temp.hq, pg_temp.hl;
        CREATE TEMP TABLE hb (LIKE queen.history_brokers INCLUDING ALL);
        CREATE TEMP TABLE hq (LIKE queen.history_queues INCLUDING ALL);
        CREATE TEMP TABLE hl (LIKE queen.history_lifecycle INCLUDING ALL);
        INSERT INTO hb SELECT t, 'bench-host:6632', 'bench-host', 6632, 4242, 6,
               1200 + m, 12000 + m, 1200, 12000, 30, 1200, 12000, 0, 0, 0, 0, 0,
               9000000, 2000000, 6 * 60000000, 62000000, 60, 40, 5, 12, 4
          FROM generate_series(1, 1440) m, LATERAL (SELECT now() - m * interval '1 minute' AS t) x;
        INSERT INTO hq SELECT date_trunc('minute', now()) - m * interval '1 minute',
               ('00000000-0000-4000-8000-' || lpad(q::text, 12, '0'))::uuid,
               queen.default_tenant(), 'bench_queue_' || q, NULL, NULL,
               10, 2, 5000, 1000000 + m * 600, 995000 + m * 600, 5000, 12, 0, 0, 3, 3, 30
          FROM generate_series(1, 1440) m, generate_series(1, 10) q;
        INSERT INTO hl SELECT now() - m * interval '1 minute', 600, 0, 0, 6, 600, 12.5
          FROM generate_series(1, 1440) m;
        ANALYZE hb; ANALYZE hq; ANALYZE hl;";
    db.batch_execute(sql).await.map_err(to_s)?;
    let size = |t: &'static str| async move {
        db.query_one(
            &format!("SELECT pg_total_relation_size('pg_temp.{t}')"),
            &[],
        )
        .await
        .map(|r| r.get::<_, i64>(0))
        .map_err(to_s)
    };
    let (b, q, l) = (size("hb").await?, size("hq").await?, size("hl").await?);
    db.batch_execute("DROP TABLE pg_temp.hb, pg_temp.hq, pg_temp.hl")
        .await
        .map_err(to_s)?;
    let mib = |x: i64| format!("{:.2}", x as f64 / 1_048_576.0);
    sec.heading("Store size after 24 hours");
    sec.para(
        "One broker's row a minute, the snapshot of 10 queues a minute and one \
         run_maintenance report a minute for 24 hours (1,440 + 14,400 + 1,440 rows), in \
         tables created `LIKE` the extension's (`INCLUDING ALL`: the same columns and \
         indexes); `pg_total_relation_size` (heap, indexes, TOAST). The history keeps 7 \
         days by default (`queen.history_retention`): seven times these figures.",
    );
    sec.table(
        &["table", "rows", "MiB", "bytes per row"],
        &[
            vec![
                "history_brokers".into(),
                "1,440".into(),
                mib(b),
                format!("{}", b / 1440),
            ],
            vec![
                "history_queues".into(),
                "14,400".into(),
                mib(q),
                format!("{}", q / 14400),
            ],
            vec![
                "history_lifecycle".into(),
                "1,440".into(),
                mib(l),
                format!("{}", l / 1440),
            ],
            vec!["all".into(), "17,280".into(), mib(b + q + l), "–".into()],
        ],
    );
    Ok(())
}

async fn cleanup(db: &Client) -> BResult<()> {
    db.execute(
        "DELETE FROM queen.history_queues WHERE queue LIKE $1",
        &[&format!("{PREFIX}%")],
    )
    .await
    .map_err(to_s)?;
    db.execute(
        "DELETE FROM queen.history_brokers WHERE broker LIKE 'bench-fake-%'",
        &[],
    )
    .await
    .map_err(to_s)?;
    drop_queues(db, &format!("{PREFIX}%")).await
}

/// 1,000 queues × 10 partitions, an hour of their snapshots and of two brokers' rows; then
/// each route, 20 times in a row through a broker that does not sample.
async fn routes(ctx: &Ctx, db: &Client, sec: &mut Section) -> BResult<()> {
    cleanup(db).await?;
    let t = Instant::now();
    db.execute(
        "SELECT count(queen.push($1 || q, '[{\"n\": 1}]'::jsonb, NULL, 'p' || p))
           FROM generate_series(1, $2::int) q, generate_series(1, $3::int) p",
        &[&PREFIX, &QUEUES, &PARTITIONS],
    )
    .await
    .map_err(to_s)?;
    progress(
        ctx,
        "history",
        format!(
            "{QUEUES} queues × {PARTITIONS} partitions in {:.1} s",
            t.elapsed().as_secs_f64()
        ),
    );
    db.execute(
        "INSERT INTO queen.history_queues (bucket, queue_id, tenant_id, queue, namespace, task,
                partitions, groups, messages, pushed, consumed, lag, oldest_age_s, dlq)
         SELECT date_trunc('minute', now()) - m * interval '1 minute', q.id, q.tenant_id,
                q.name, q.namespace, q.task, $2::int, 1, 10, 10 + 60 * (60 - m), 60 * (60 - m),
                10, 30, 0
           FROM queen.queues q, generate_series(1, 60) m
          WHERE q.name LIKE $1 || '%'
         ON CONFLICT DO NOTHING",
        &[&PREFIX, &PARTITIONS],
    )
    .await
    .map_err(to_s)?;
    db.execute(
        "SELECT queen.history_record_v1('bench-fake-' || b, 'bench-host', b, 1,
                '{\"pushMessages\": 6000, \"pushRequests\": 600, \"popMessages\": 6000,
                  \"ackMessages\": 6000, \"rssBytes\": 50000000, \"poolSize\": 10, \"poolIdle\": 8}',
                now() - m * interval '1 minute')
           FROM generate_series(1, 60) m, generate_series(1, 2) b",
        &[],
    )
    .await
    .map_err(to_s)?;
    let log = ctx.logs.join("broker-history-routes.log");
    let b = Broker::start(
        &ctx.broker_bin,
        &ctx.database_url,
        &[("QUEEN_HISTORY_SAMPLE_MS", "0")],
        &log,
    )
    .await?;
    let one = format!("{PREFIX}500");
    let paths = [
        "/api/v1/status".to_string(),
        format!("/api/v1/status?queue={one}"),
        "/api/v1/status/analytics".to_string(),
        "/api/v1/analytics/queue-ops".to_string(),
        format!("/api/v1/analytics/queue-ops?queue={one}"),
        "/api/v1/analytics/queue-lag".to_string(),
        "/api/v1/analytics/worker-metrics".to_string(),
        "/api/v1/analytics/system-metrics".to_string(),
        "/api/v1/analytics/retention".to_string(),
        "/api/v1/analytics/postgres-stats".to_string(),
        "/console/queues".to_string(),
        format!("/console/queues/{one}"),
        "/console/groups".to_string(),
        "/console/throughput".to_string(),
    ];
    let mut rows = Vec::new();
    let r: BResult<()> = async {
        for p in &paths {
            let (lat, bytes) = timed(&b, reqwest::Method::GET, p, 20).await?;
            rows.push(vec![
                format!("`GET {p}`"),
                fmt_ms(median_of(&lat)),
                fmt_ms(percentile_of(&lat, 0.95)),
                format!("{:.0}", bytes / 1024.0),
            ]);
        }
        let (lat, _) = timed(&b, reqwest::Method::POST, "/api/v1/stats/refresh", 5).await?;
        rows.push(vec![
            "`POST /api/v1/stats/refresh` (the minute's snapshot)".into(),
            fmt_ms(median_of(&lat)),
            fmt_ms(percentile_of(&lat, 0.95)),
            "–".into(),
        ]);
        Ok(())
    }
    .await;
    b.stop().await;
    r?;
    sec.heading("Route latency at 1,000 queues and 10,000 partitions");
    sec.para(format!(
        "{QUEUES} queues of {PARTITIONS} partitions (one message each), 60 minutes of their \
         snapshots (60,000 rows) and of two brokers' rows, as sampling files them. Each route \
         20 times in a row from one client (5 for the refresh, which reads every queue's \
         statistics and files 1,000 rows); the default range (the last hour; \
         `/status/analytics`: the last 24 hours). `queue-ops` and `queue-lag` without a \
         queue answer every queue's 60 buckets; the `/console` pages are the operator \
         console's HTML (docs/console.md). Client-side timing, milliseconds; KiB = the \
         answer's size."
    ));
    sec.table(&["request", "p50 ms", "p95 ms", "KiB"], &rows);
    Ok(())
}

/// `n` requests in a row: their latencies (ms) and the last answer's size (bytes).
async fn timed(b: &Broker, m: reqwest::Method, path: &str, n: usize) -> BResult<(Vec<f64>, f64)> {
    let mut lat = Vec::with_capacity(n);
    let mut bytes = 0.0;
    for _ in 0..n {
        let t = Instant::now();
        let r = b
            .http
            .request(m.clone(), format!("{}{path}", b.base))
            .header("content-type", "application/json")
            .body(if m == reqwest::Method::POST { "{}" } else { "" })
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(to_s)?;
        let status = r.status();
        let body = r.bytes().await.map_err(to_s)?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        if !status.is_success() {
            return Err(format!(
                "{path}: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        bytes = body.len() as f64;
    }
    Ok((lat, bytes))
}
