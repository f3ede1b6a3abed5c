//! Section 1: the SQL ack paths on a partition with shallow and deep unpurged sidecar
//! history below the cursor.
//!
//! A fixture is one partition `bench_sql_d<depth>` holding `depth` messages of history
//! (segments of 500 through `queen.push`, real xxh3-128 hashes, tiny payloads) followed by `EXTRA` messages above
//! the cursor. Every timed round first puts the cursor back to `depth − 1` without a lease
//! (`queen_bench.reset`) and leases the next batch with `log_pop_v1`, so the depth below
//! the cursor stays exactly `depth` however many rounds run. The timed call runs inside a
//! plpgsql wrapper that reads clock_timestamp() around it (server-side time: function
//! cost, no network, no commit); the client also times the whole statement (one round
//! trip plus the autocommit).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::common::{drop_queues, fmt_ratio, partition_id, progress, to_s, BResult, Ctx, Summary};
use crate::report::Section;

/// Messages above the cursor in every fixture: the largest batch of the scaling section.
pub const EXTRA: i64 = 5_000;
pub const SHALLOW: i64 = 1_000;
pub const DEEP: i64 = 1_000_000;
/// Group and worker of the by-hash rounds.
const GROUP: &str = "bench";
const WORKER: &str = "bench-w";

/// One seeded partition.
#[derive(Clone)]
pub struct Fixture {
    pub depth: i64,
    pub queue: String,
    pub pid: Uuid,
}

/// Seeded partitions by depth, shared by sections 1 and 4.
#[derive(Default)]
pub struct Fixtures {
    map: BTreeMap<i64, Fixture>,
}

impl Fixtures {
    /// The fixture of a depth, seeded on first use.
    pub async fn get(&mut self, ctx: &Ctx, db: &Client, depth: i64) -> BResult<Fixture> {
        if let Some(f) = self.map.get(&depth) {
            return Ok(f.clone());
        }
        let queue = format!("bench_sql_d{depth}");
        drop_queues(db, &queue).await?;
        let t = Instant::now();
        let last: i64 = db
            .query_one(
                "SELECT queen_bench.seed($1, 'Default', $1, $2, 500)",
                &[&queue, &(depth + EXTRA)],
            )
            .await
            .map_err(|e| format!("seeding {queue}: {}", to_s(&e)))?
            .get(0);
        if last != depth + EXTRA - 1 {
            return Err(format!(
                "seeding {queue}: last offset {last}, want {}",
                depth + EXTRA - 1
            ));
        }
        db.batch_execute("VACUUM ANALYZE queen.log_txns, queen.log_segments, queen.log_consumers")
            .await
            .map_err(to_s)?;
        progress(
            ctx,
            "seed",
            format!(
                "{queue}: {depth} messages of history + {EXTRA} above the cursor in {:.1} s",
                t.elapsed().as_secs_f64()
            ),
        );
        let f = Fixture {
            depth,
            pid: partition_id(db, &queue, "Default").await?,
            queue,
        };
        self.map.insert(depth, f.clone());
        Ok(f)
    }
}

/// The by-hash cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HashCase {
    /// The whole leased batch, all completed.
    Full,
    /// The first half of the batch.
    Partial,
    /// The whole batch, the middle element `failed`.
    OneFailed,
    /// As many hashes that were never pushed: every element scans below the cursor.
    Unknown,
}

impl HashCase {
    pub fn label(self, n: i32) -> String {
        match self {
            HashCase::Full => format!("by_hash: full batch of {n}"),
            HashCase::Partial => format!("by_hash: partial ({} of {n})", n / 2),
            HashCase::OneFailed => format!("by_hash: {n} with one `failed`"),
            HashCase::Unknown => format!("by_hash: {n} unknown hashes"),
        }
    }
}

/// One timed call: server-side ms (None where only the client timed) and client ms.
pub struct Sample {
    pub server_ms: Option<f64>,
    pub client_ms: f64,
}

/// Puts the cursor(s) at depth − 1 and leases `budget` frames per group.
async fn prepare(
    db: &Client,
    fx: &Fixture,
    groups: &[String],
    workers: &[String],
    budget: i32,
) -> BResult<()> {
    db.execute(
        "SELECT queen_bench.reset($1, $2, $3)",
        &[&fx.pid, &groups, &(fx.depth - 1)],
    )
    .await
    .map_err(|e| format!("reset: {}", to_s(&e)))?;
    let taken: i64 = db
        .query_one(
            "SELECT queen_bench.lease($1, 'Default', $2, $3, $4)",
            &[&fx.queue, &groups, &workers, &budget],
        )
        .await
        .map_err(|e| format!("lease: {}", to_s(&e)))?
        .get(0);
    let want = i64::from(budget) * groups.len() as i64;
    if taken != want {
        return Err(format!("{}: leased {taken} frames, want {want}", fx.queue));
    }
    Ok(())
}

/// Hashes of `n` messages of a fixture starting at offset `from` (or never-pushed ones).
pub async fn hashes(db: &Client, tag: &str, from: i64, n: i32) -> BResult<Vec<Vec<u8>>> {
    let row = db
        .query_one("SELECT queen_bench.hashes($1, $2, $3)", &[&tag, &from, &n])
        .await
        .map_err(to_s)?;
    Ok(row.get(0))
}

/// Per-fixture, per-batch-size inputs of the by-hash cases (computed once).
pub struct HashInputs {
    batch: Vec<Vec<u8>>,
    unknown: Vec<Vec<u8>>,
}

impl HashInputs {
    pub async fn load(db: &Client, fx: &Fixture, n: i32) -> BResult<Self> {
        Ok(HashInputs {
            batch: hashes(db, &fx.queue, fx.depth, n).await?,
            unknown: hashes(db, &format!("unknown-{}", fx.queue), 0, n).await?,
        })
    }
}

/// One round of a by-hash case on a fresh lease of `n` frames; checks the verdict.
pub async fn hash_round(
    db: &Client,
    fx: &Fixture,
    inp: &HashInputs,
    case: HashCase,
) -> BResult<Sample> {
    let n = inp.batch.len() as i32;
    prepare(db, fx, &[GROUP.into()], &[WORKER.into()], n).await?;
    let (hs, statuses): (Vec<Vec<u8>>, Option<Vec<Option<String>>>) = match case {
        HashCase::Full => (inp.batch.clone(), None),
        HashCase::Partial => (inp.batch[..(n / 2) as usize].to_vec(), None),
        HashCase::OneFailed => {
            let mut st = vec![None; n as usize];
            st[(n / 2) as usize] = Some("failed".to_string());
            (inp.batch.clone(), Some(st))
        }
        HashCase::Unknown => (inp.unknown.clone(), None),
    };
    let t = Instant::now();
    let row = db
        .query_one(
            "SELECT ms, r FROM queen_bench.t_ack_hash($1, $2, $3, $4, $5)",
            &[&fx.pid, &GROUP, &WORKER, &hs, &statuses],
        )
        .await
        .map_err(|e| format!("log_ack_by_hash_v1: {}", to_s(&e)))?;
    let client_ms = t.elapsed().as_secs_f64() * 1000.0;
    let r: Value = row.get(1);
    let acked = r.get("acked").and_then(Value::as_i64);
    let want = match case {
        HashCase::Full => i64::from(n),
        HashCase::Partial | HashCase::OneFailed => i64::from(n / 2),
        HashCase::Unknown => 0,
    };
    if r.get("ok") != Some(&Value::Bool(true)) || acked != Some(want) {
        return Err(format!(
            "{}: unexpected result {r} (want acked {want})",
            case.label(n)
        ));
    }
    Ok(Sample {
        server_ms: Some(row.get(0)),
        client_ms,
    })
}

/// The positional variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PosCase {
    /// N log_ack_at_v1 calls inside one statement (server-timed loop, one commit).
    AtStatement,
    /// N log_ack_at_v1 statements from the client, each its own transaction (what the
    /// broker does with fusion off).
    AtRoundTrips,
    /// One log_ack_multi_v1 call with N rows (the fusion flush).
    Multi,
}

impl PosCase {
    pub fn label(self, rows: usize) -> String {
        match self {
            PosCase::AtStatement => format!("ack_at × {rows} (one statement)"),
            PosCase::AtRoundTrips => format!("ack_at × {rows} (autocommit round trips)"),
            PosCase::Multi => format!("ack_multi, {rows} row{}", if rows == 1 { "" } else { "s" }),
        }
    }
}

/// One round of a positional case: `rows` groups on the fixture partition each lease
/// `batch` frames and are acked in full.
pub async fn pos_round(
    db: &Client,
    fx: &Fixture,
    case: PosCase,
    rows: usize,
    batch: i32,
) -> BResult<Sample> {
    let groups: Vec<String> = (1..=rows).map(|i| format!("g{i}")).collect();
    let workers: Vec<String> = (1..=rows).map(|i| format!("w{i}")).collect();
    prepare(db, fx, &groups, &workers, batch).await?;
    let upto = fx.depth - 1 + i64::from(batch);
    let want = i64::from(batch) * rows as i64;
    let t = Instant::now();
    let (server_ms, acked) = match case {
        PosCase::AtStatement => {
            let row = db
                .query_one(
                    "SELECT ms, r FROM queen_bench.t_ack_at($1, $2, $3, $4)",
                    &[&fx.pid, &groups, &workers, &upto],
                )
                .await
                .map_err(|e| format!("log_ack_at_v1: {}", to_s(&e)))?;
            (Some(row.get::<_, f64>(0)), row.get::<_, i64>(1))
        }
        PosCase::AtRoundTrips => {
            let st = db
                .prepare("SELECT queen.log_ack_at_v1($1, $2, $3, $4)")
                .await
                .map_err(to_s)?;
            let t = Instant::now();
            let mut acked = 0;
            for (g, w) in groups.iter().zip(&workers) {
                let r: Value = db
                    .query_one(&st, &[&fx.pid, g, w, &upto])
                    .await
                    .map_err(|e| format!("log_ack_at_v1: {}", to_s(&e)))?
                    .get(0);
                acked += r.get("acked").and_then(Value::as_i64).unwrap_or(0);
            }
            let client_ms = t.elapsed().as_secs_f64() * 1000.0;
            if acked != want {
                return Err(format!("{}: acked {acked}, want {want}", case.label(rows)));
            }
            return Ok(Sample {
                server_ms: None,
                client_ms,
            });
        }
        PosCase::Multi => {
            let pids: Vec<String> = vec![fx.pid.to_string(); rows];
            let ends: Vec<i64> = vec![upto; rows];
            let counts: Vec<i32> = vec![batch; rows];
            let row = db
                .query_one(
                    "SELECT ms, r FROM queen_bench.t_ack_multi($1, $2, $3, $4, $5)",
                    &[&pids, &groups, &ends, &workers, &counts],
                )
                .await
                .map_err(|e| format!("log_ack_multi_v1: {}", to_s(&e)))?;
            let r: Value = row.get(1);
            let results = r
                .get("results")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let ok = results.len() == rows
                && results
                    .iter()
                    .all(|x| x.get("ok") == Some(&Value::Bool(true)));
            if !ok {
                return Err(format!("{}: unexpected result {r}", case.label(rows)));
            }
            let acked = results
                .iter()
                .map(|x| x.get("acked").and_then(Value::as_i64).unwrap_or(0))
                .sum();
            (Some(row.get::<_, f64>(0)), acked)
        }
    };
    let client_ms = t.elapsed().as_secs_f64() * 1000.0;
    if acked != want {
        return Err(format!("{}: acked {acked}, want {want}", case.label(rows)));
    }
    Ok(Sample {
        server_ms,
        client_ms,
    })
}

/// Accumulated samples of one (label, depth) cell.
#[derive(Default)]
pub struct Cell {
    pub server: Vec<f64>,
    pub client: Vec<f64>,
}

impl Cell {
    pub fn push(&mut self, s: Sample) {
        if let Some(ms) = s.server_ms {
            self.server.push(ms);
        }
        self.client.push(s.client_ms);
    }
}

/// Section 1.
pub async fn run(ctx: &Ctx, db: &Client, fixtures: &mut Fixtures) -> BResult<Section> {
    let mut sec = Section::new("1. SQL ack paths: shallow vs deep sidecar history");
    let rounds = ctx.pick(7, 31);
    let batch = 500;
    let shallow = fixtures.get(ctx, db, SHALLOW).await?;
    let deep = fixtures.get(ctx, db, DEEP).await?;
    let fxs = [shallow, deep];
    let mut inputs = Vec::new();
    for fx in &fxs {
        inputs.push(HashInputs::load(db, fx, batch).await?);
    }
    let hash_cases = [
        HashCase::Full,
        HashCase::Partial,
        HashCase::OneFailed,
        HashCase::Unknown,
    ];
    let pos_cases = [PosCase::AtStatement, PosCase::AtRoundTrips, PosCase::Multi];
    let row_counts = [1usize, 10, 100];
    // (order, label) → per-depth cells; rounds interleave depths and cases so drift in
    // machine load hits both depths alike.
    let mut cells: BTreeMap<(usize, String), [Cell; 2]> = BTreeMap::new();
    for round in 0..rounds {
        for (d, fx) in fxs.iter().enumerate() {
            for (k, case) in hash_cases.iter().enumerate() {
                let s = hash_round(db, fx, &inputs[d], *case).await?;
                cells.entry((k, case.label(batch))).or_default()[d].push(s);
            }
            for (j, rows) in row_counts.iter().enumerate() {
                for (k, case) in pos_cases.iter().enumerate() {
                    let s = pos_round(db, fx, *case, *rows, batch).await?;
                    cells
                        .entry((10 + j * 3 + k, case.label(*rows)))
                        .or_default()[d]
                        .push(s);
                }
            }
        }
        progress(ctx, "sql", format!("round {}/{rounds} done", round + 1));
    }
    sec.para(format!(
        "Partition with **{}** vs **{}** messages of unpurged sidecar history below the cursor \
         (segments of 500 pushed with `queen.push`: real frames of payload `0`, transactionIds `tag:offset`, their xxh3-128 hashes). \
         Each round resets the cursor to just below a fresh {batch}-frame lease (`log_pop_v1`), \
         so the depth stays fixed. {rounds} rounds per cell, depths and cases interleaved. \
         **server ms** = clock_timestamp() around the call inside a plpgsql wrapper (function \
         cost only, no network, no commit); **client ms** = the whole statement seen from the \
         client (round trip + parse + commit). Cells: median (min–max). Positional acks use {batch}-frame \
         batches; N rows = N consumer groups leased on the same partition.",
        fmt_num_i(SHALLOW),
        fmt_num_i(DEEP)
    ));
    let mut rows = Vec::new();
    for ((_, label), c) in &cells {
        let s0 = Summary::of(&c[0].server);
        let s1 = Summary::of(&c[1].server);
        let c0 = Summary::of(&c[0].client);
        let c1 = Summary::of(&c[1].client);
        let ratio = if s0.n > 0 {
            fmt_ratio(s1.median, s0.median)
        } else {
            fmt_ratio(c1.median, c0.median)
        };
        rows.push(vec![
            label.clone(),
            s0.cell(),
            s1.cell(),
            ratio,
            c0.cell(),
            c1.cell(),
        ]);
    }
    sec.table(
        &[
            "call",
            &format!("server ms, depth {}", fmt_num_i(SHALLOW)),
            &format!("server ms, depth {}", fmt_num_i(DEEP)),
            "deep/shallow (median)",
            &format!("client ms, depth {}", fmt_num_i(SHALLOW)),
            &format!("client ms, depth {}", fmt_num_i(DEEP)),
        ],
        &rows,
    );
    sec.para("The ratio uses server medians, or client medians where only the client timed (autocommit round trips). Per-row cost of the positional paths = cell / N.");
    Ok(sec)
}

pub fn fmt_num_i(x: i64) -> String {
    crate::common::fmt_int(x)
}
