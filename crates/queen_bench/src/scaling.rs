//! Section 4: scaling curves, all timed inside the server (clock_timestamp() around the
//! call): ack time vs batch size, ack time vs sidecar depth, and the queue-level pop
//! (`queen.log_pop_queue_v1`) vs the number of partitions of the queue.

use std::collections::BTreeMap;
use std::time::Instant;

use tokio_postgres::Client;
use uuid::Uuid;

use crate::common::{drop_queues, fmt_int, progress, to_s, BResult, Ctx, Summary};
use crate::report::{Chart, Section};
use crate::sql_paths::{
    hash_round, pos_round, Cell, Fixtures, HashCase, HashInputs, PosCase, SHALLOW,
};
use crate::svg::{LineChart, Series};

const QUEUE_MODE: &str = "__QUEUE_MODE__";

pub async fn run(ctx: &Ctx, db: &Client, fixtures: &mut Fixtures) -> BResult<Section> {
    let mut sec = Section::new("4. Scaling");
    let rounds = ctx.pick(3, 15);
    sec.para(format!(
        "All times are server-side (clock_timestamp() around the one call inside a plpgsql \
         wrapper), median (min–max) of {rounds} rounds per point."
    ));
    batch_sizes(ctx, db, fixtures, rounds, &mut sec).await?;
    depths(ctx, db, fixtures, rounds, &mut sec).await?;
    partitions(ctx, db, rounds, &mut sec).await?;
    Ok(sec)
}

async fn batch_sizes(
    ctx: &Ctx,
    db: &Client,
    fixtures: &mut Fixtures,
    rounds: usize,
    sec: &mut Section,
) -> BResult<()> {
    let sizes: Vec<i32> = ctx.pick(
        vec![1, 10, 100, 1000, 5000],
        vec![1, 10, 100, 500, 1000, 2000, 5000],
    );
    let fx = fixtures.get(ctx, db, SHALLOW).await?;
    let mut cells: BTreeMap<(i32, usize), Cell> = BTreeMap::new();
    let mut inputs = BTreeMap::new();
    for n in &sizes {
        inputs.insert(*n, HashInputs::load(db, &fx, *n).await?);
    }
    for _ in 0..rounds {
        for n in &sizes {
            cells
                .entry((*n, 0))
                .or_default()
                .push(hash_round(db, &fx, &inputs[n], HashCase::Full).await?);
            cells
                .entry((*n, 1))
                .or_default()
                .push(hash_round(db, &fx, &inputs[n], HashCase::Unknown).await?);
            cells
                .entry((*n, 2))
                .or_default()
                .push(pos_round(db, &fx, PosCase::AtStatement, 1, *n).await?);
        }
    }
    progress(ctx, "scaling", "ack time vs batch size done");
    sec.heading(format!(
        "Ack time vs batch size (depth {})",
        fmt_int(SHALLOW)
    ));
    let names = [
        "by_hash full batch",
        "by_hash all unknown",
        "ack_at (positional)",
    ];
    let mut rows = Vec::new();
    let mut series = empty_series(&names);
    for n in &sizes {
        let mut r = vec![fmt_int(i64::from(*n))];
        for k in 0..3 {
            let s = Summary::of(&cells[&(*n, k)].server);
            r.push(s.cell());
            series[k].points.push((f64::from(*n), s.median));
        }
        let full = Summary::of(&cells[&(*n, 0)].server);
        r.push(format!("{:.2}", full.median * 1000.0 / f64::from(*n)));
        rows.push(r);
    }
    sec.table(
        &[
            "batch",
            "by_hash full, ms",
            "by_hash unknown, ms",
            "ack_at, ms",
            "by_hash full, µs/msg",
        ],
        &rows,
    );
    sec.charts.push(Chart {
        file: "ack_time_vs_batch.svg".into(),
        title: "Ack time vs batch size".into(),
        svg: LineChart {
            title: "Ack time vs batch size (server-side median)",
            x_label: "batch size (messages)",
            y_label: "ms per call",
            log_x: true,
            log_y: true,
            series,
        }
        .render(),
    });
    Ok(())
}

async fn depths(
    ctx: &Ctx,
    db: &Client,
    fixtures: &mut Fixtures,
    rounds: usize,
    sec: &mut Section,
) -> BResult<()> {
    let depths: Vec<i64> = vec![1_000, 10_000, 100_000, 1_000_000];
    let batch = 500;
    let mut fxs = Vec::new();
    for d in &depths {
        let fx = fixtures.get(ctx, db, *d).await?;
        let inp = HashInputs::load(db, &fx, batch).await?;
        fxs.push((fx, inp));
    }
    let cases = [HashCase::Full, HashCase::OneFailed, HashCase::Unknown];
    let mut cells: BTreeMap<(i64, usize), Cell> = BTreeMap::new();
    for _ in 0..rounds {
        for (fx, inp) in &fxs {
            for (k, c) in cases.iter().enumerate() {
                cells
                    .entry((fx.depth, k))
                    .or_default()
                    .push(hash_round(db, fx, inp, *c).await?);
            }
            cells
                .entry((fx.depth, 3))
                .or_default()
                .push(pos_round(db, fx, PosCase::AtStatement, 1, batch).await?);
        }
    }
    progress(ctx, "scaling", "ack time vs depth done");
    sec.heading(format!(
        "Ack time vs sidecar depth below the cursor (batch {batch})"
    ));
    let names = [
        "by_hash full",
        "by_hash one failed",
        "by_hash all unknown",
        "ack_at",
    ];
    let mut series = empty_series(&names);
    let mut rows = Vec::new();
    for d in &depths {
        let mut r = vec![fmt_int(*d)];
        for (k, s) in series.iter_mut().enumerate() {
            let sum = Summary::of(&cells[&(*d, k)].server);
            r.push(sum.cell());
            s.points.push((*d as f64, sum.median));
        }
        rows.push(r);
    }
    sec.table(
        &[
            "depth",
            "by_hash full, ms",
            "by_hash one failed, ms",
            "by_hash unknown, ms",
            "ack_at, ms",
        ],
        &rows,
    );
    sec.charts.push(Chart {
        file: "ack_time_vs_depth.svg".into(),
        title: "Ack time vs depth".into(),
        svg: LineChart {
            title: "Ack time vs sidecar depth (500-message batch)",
            x_label: "messages of sidecar history below the cursor",
            y_label: "ms per call (server median)",
            log_x: true,
            log_y: true,
            series,
        }
        .render(),
    });
    Ok(())
}

/// One timed queue-level pop (budget 10) followed by a release of what it claimed.
async fn pop_round(db: &Client, queue: &str) -> BResult<f64> {
    let row = db
        .query_one(
            "SELECT ms, taken, pid FROM queen_bench.t_pop_queue($1, $2, 10, 'bench-pq')",
            &[&queue, &QUEUE_MODE],
        )
        .await
        .map_err(|e| format!("log_pop_queue_v1: {}", to_s(&e)))?;
    let taken: i64 = row.get(1);
    let pid: Option<Uuid> = row.get(2);
    let Some(pid) = pid.filter(|_| taken > 0) else {
        return Err(format!("{queue}: the queue-level pop claimed nothing"));
    };
    // Release only (p_ok false): the batch stays unconsumed, the state stays constant.
    db.execute(
        "SELECT queen.log_ack_at_v1($1, $2, 'bench-pq', NULL, false)",
        &[&pid, &QUEUE_MODE],
    )
    .await
    .map_err(|e| format!("release: {}", to_s(&e)))?;
    Ok(row.get(0))
}

async fn partitions(ctx: &Ctx, db: &Client, rounds: usize, sec: &mut Section) -> BResult<()> {
    let counts: Vec<i32> = ctx.pick(vec![1, 100, 10_000], vec![1, 10, 100, 1_000, 10_000]);
    let mut rows = Vec::new();
    let mut all_ready = Series {
        name: "all partitions ready".into(),
        points: vec![],
        dashed: false,
        color: 0,
    };
    let mut one_ready = Series {
        name: "1 ready, rest consumed".into(),
        points: vec![],
        dashed: false,
        color: 1,
    };
    for p in &counts {
        let queue = format!("bench_pq_{p}");
        drop_queues(db, &queue).await?;
        let t = Instant::now();
        db.execute(
            "SELECT count(queen_bench.seed($1, 'p' || i, $1 || '-p' || i, 10, 10)) FROM generate_series(1, $2) i",
            &[&queue, p],
        )
        .await
        .map_err(|e| format!("seeding {queue}: {}", to_s(&e)))?;
        db.batch_execute("ANALYZE queen.log_partitions, queen.log_consumers")
            .await
            .map_err(to_s)?;
        progress(
            ctx,
            "scaling",
            format!(
                "{queue}: {p} partitions seeded in {:.1} s",
                t.elapsed().as_secs_f64()
            ),
        );
        let mut a = Vec::new();
        for _ in 0..rounds.max(5) {
            a.push(pop_round(db, &queue).await?);
        }
        // Every cursor at its partition's end but one: the pop has to find the one.
        db.execute(
            "INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
             SELECT p.id, $2, CASE WHEN p.name = 'p' || $3 THEN -1 ELSE p.last_offset END
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1
             ON CONFLICT (partition_id, consumer_group) DO UPDATE SET committed = excluded.committed",
            &[&queue, &QUEUE_MODE, &(p / 2 + 1).to_string()],
        )
        .await
        .map_err(|e| format!("{queue}: consuming all but one: {}", to_s(&e)))?;
        // No lease left over from the first measurement (leases live in queen.log_leases).
        db.execute(
            "UPDATE queen.log_leases l SET batch_end = NULL, worker_id = NULL, lease_expires_at = NULL
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE l.partition_id = p.id AND q.name = $1",
            &[&queue],
        )
        .await
        .map_err(|e| format!("{queue}: clearing leases: {}", to_s(&e)))?;
        let mut b = Vec::new();
        for _ in 0..rounds.max(5) {
            b.push(pop_round(db, &queue).await?);
        }
        let (sa, sb) = (Summary::of(&a), Summary::of(&b));
        all_ready.points.push((f64::from(*p), sa.median));
        one_ready.points.push((f64::from(*p), sb.median));
        rows.push(vec![fmt_int(i64::from(*p)), sa.cell(), sb.cell()]);
        drop_queues(db, &queue).await?;
    }
    progress(ctx, "scaling", "queue-level pop vs partitions done");
    sec.heading("Queue-level pop (`log_pop_queue_v1`, budget 10) vs partitions in the queue");
    sec.para("Each partition holds one 10-message segment. After every timed pop the claimed lease is released \
              (`log_ack_at_v1(..., NULL, false)`), so every round sees the same state. \
              \"1 ready\": every other partition's queue-mode cursor sits at its end.");
    sec.table(&["partitions", "all ready, ms", "1 ready, ms"], &rows);
    sec.charts.push(Chart {
        file: "pop_vs_partitions.svg".into(),
        title: "Queue-level pop vs partitions".into(),
        svg: LineChart {
            title: "log_pop_queue_v1 vs partitions (server median)",
            x_label: "partitions in the queue",
            y_label: "ms per pop",
            log_x: true,
            log_y: true,
            series: vec![all_ready, one_ready],
        }
        .render(),
    });
    Ok(())
}

/// One empty solid series per name, each in its own colour.
fn empty_series(names: &[&str]) -> Vec<Series> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| Series {
            name: n.to_string(),
            points: vec![],
            dashed: false,
            color: i,
        })
        .collect()
}
