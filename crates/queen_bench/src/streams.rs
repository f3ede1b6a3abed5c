//! Section 11: stream cycles (`POST /streams/v1/cycle`) against the separate calls they
//! replace, through one broker. 8 clients, each on a source queue of its own with P
//! partitions, each looping: push B messages to the next partition, pop them (leased),
//! then either one cycle (S state upserts, B sink items spread over P sink partitions,
//! the ack through the last message) or the same work as three requests (S kv puts,
//! the push of B sink items, the ack of B). The source push and the pop are the same in
//! both; the two modes interleaved round by round.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::common::{
    call, drop_queues, fmt_num, fmt_ratio, median_of, progress, to_s, BResult, Ctx,
};
use crate::report::Section;

const CLIENTS: usize = 8;
const ROUNDS: usize = 3;
/// (batch, partitions, state ops per cycle).
const CELLS: [(usize, usize, usize); 8] = [
    (10, 1, 1),
    (10, 1, 100),
    (10, 8, 1),
    (10, 8, 100),
    (100, 1, 1),
    (100, 1, 100),
    (100, 8, 1),
    (100, 8, 100),
];

/// One client's fixed names: its source and sink queues, its query, its kv namespace.
struct Lane {
    base: String,
    http: reqwest::Client,
    source: String,
    sink: String,
    query_id: Value,
}

impl Lane {
    async fn new(b: &Broker, tag: &str) -> BResult<Lane> {
        let (source, sink) = (
            format!("bench_st_{tag}_src"),
            format!("bench_st_{tag}_sink"),
        );
        let v = call(
            b.http
                .post(format!("{}/streams/v1/queries", b.base))
                .json(&json!({
            "name": format!("bench_st_{tag}"), "source_queue": source, "sink_queue": sink,
            "config_hash": "bench"})),
        )
        .await?
        .unwrap_or(Value::Null);
        Ok(Lane {
            base: b.base.clone(),
            http: b.http.clone(),
            source,
            sink,
            query_id: v["query_id"].clone(),
        })
    }

    /// Push B to partition `p` of the source and pop them: the messages and the lease.
    async fn feed(&self, p: usize, b: usize, n: u64) -> BResult<Option<Value>> {
        let items: Vec<Value> = (0..b)
            .map(|i| {
                json!({"queue": self.source, "partition": format!("p{p}"),
                            "payload": {"n": n, "i": i}})
            })
            .collect();
        call(
            self.http
                .post(format!("{}/api/v1/push", self.base))
                .json(&json!({ "items": items })),
        )
        .await?;
        call(self.http.get(format!(
            "{}/api/v1/pop/queue/{}/partition/p{p}?batch={b}&consumerGroup=bench",
            self.base, self.source
        )))
        .await
    }

    fn sink_items(&self, msgs: &[Value], partitions: usize) -> Vec<Value> {
        msgs.iter()
            .enumerate()
            .map(|(k, m)| {
                json!({"queue": self.sink, "partition": format!("s{}", k % partitions),
                                 "payload": {"of": m["transactionId"]}})
            })
            .collect()
    }

    /// The cycle: messages acked.
    async fn cycle(&self, pop: &Value, partitions: usize, ops: usize, n: u64) -> BResult<u64> {
        let msgs = pop["messages"].as_array().cloned().unwrap_or_default();
        let Some(last) = msgs.last() else {
            return Ok(0);
        };
        let state: Vec<Value> = (0..ops)
            .map(|k| json!({"type": "upsert", "key": format!("k{k}"), "value": {"acc": n}}))
            .collect();
        let v = call(
            self.http
                .post(format!("{}/streams/v1/cycle", self.base))
                .json(&json!({
                    "query_id": self.query_id, "partition_id": last["partitionId"],
                    "consumer_group": "bench", "state_ops": state,
                    "push_items": self.sink_items(&msgs, partitions),
                    "ack": {"transactionId": last["transactionId"], "leaseId": pop["leaseId"],
                            "status": "completed", "count": msgs.len()},
                    "release_lease": true})),
        )
        .await?
        .unwrap_or(Value::Null);
        if v["success"] != true {
            return Err(format!("cycle refused: {v}"));
        }
        Ok(v["ack_result"]["count"].as_u64().unwrap_or(0))
    }

    /// The same work as three requests: kv puts, the sink push, the ack.
    async fn separate(&self, pop: &Value, partitions: usize, ops: usize, n: u64) -> BResult<u64> {
        let msgs = pop["messages"].as_array().cloned().unwrap_or_default();
        if msgs.is_empty() {
            return Ok(0);
        }
        let puts: Vec<Value> = (0..ops)
            .map(|k| {
                json!({"op": "put", "ns": "bench-st", "key": format!("{}:k{k}", self.source),
                            "value": {"acc": n}, "forever": true})
            })
            .collect();
        call(
            self.http
                .post(format!("{}/api/v1/kv", self.base))
                .json(&json!({ "operations": puts })),
        )
        .await?;
        call(
            self.http
                .post(format!("{}/api/v1/push", self.base))
                .json(&json!({"items": self.sink_items(&msgs, partitions)})),
        )
        .await?;
        let acks: Vec<Value> = msgs
            .iter()
            .map(|m| {
                json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                            "leaseId": pop["leaseId"], "status": "completed"})
            })
            .collect();
        let v = call(
            self.http
                .post(format!("{}/api/v1/ack/batch", self.base))
                .json(&json!({"consumerGroup": "bench", "acknowledgments": acks})),
        )
        .await?
        .unwrap_or(Value::Null);
        Ok(v.as_array()
            .map_or(0, |r| r.iter().filter(|x| x["success"] == true).count()) as u64)
    }
}

/// One client's loop until `until`: (messages acked, cycles).
async fn client(
    lane: Lane,
    cell: (usize, usize, usize),
    cycle: bool,
    until: Instant,
) -> BResult<(u64, u64)> {
    let (b, partitions, ops) = cell;
    let (mut acked, mut cycles, mut n) = (0u64, 0u64, 0u64);
    while Instant::now() < until {
        let Some(pop) = lane.feed(n as usize % partitions, b, n).await? else {
            n += 1;
            continue;
        };
        acked += if cycle {
            lane.cycle(&pop, partitions, ops, n).await?
        } else {
            lane.separate(&pop, partitions, ops, n).await?
        };
        cycles += 1;
        n += 1;
    }
    Ok((acked, cycles))
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("11. Stream cycles against the separate calls they replace");
    let log = ctx.logs.join("broker-streams.log");
    let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &[], &log).await?;
    let r = measure(ctx, &b, &mut sec).await;
    b.stop().await;
    drop_queues(db, "bench_st_%").await?;
    db.batch_execute(
        "DELETE FROM queen.stream_queries WHERE name LIKE 'bench_st_%';
         DELETE FROM queen.kv WHERE ns = 'bench-st'",
    )
    .await
    .map_err(to_s)?;
    r?;
    Ok(sec)
}

async fn measure(ctx: &Ctx, b: &Broker, sec: &mut Section) -> BResult<()> {
    let dur = Duration::from_secs_f64(ctx.pick(1.5, 5.0));
    // (cell, cycle?) → (msgs/s, cycles/s) of the rounds.
    let mut rate = vec![vec![Vec::new(); 2]; CELLS.len()];
    let mut cps = vec![vec![Vec::new(); 2]; CELLS.len()];
    for round in 0..ROUNDS {
        for (ci, &cell) in CELLS.iter().enumerate() {
            for k in 0..2 {
                let cycle = (k + round) % 2 == 0;
                let mut lanes = Vec::new();
                for c in 0..CLIENTS {
                    let (bt, p, s) = cell;
                    let mode = if cycle { "c" } else { "s" };
                    lanes.push(Lane::new(b, &format!("{mode}{bt}x{p}x{s}_{c}")).await?);
                }
                let start = Instant::now();
                let tasks: Vec<_> = lanes
                    .into_iter()
                    .map(|l| tokio::spawn(client(l, cell, cycle, start + dur)))
                    .collect();
                let (mut n, mut cy) = (0, 0);
                for t in tasks {
                    let (a, c) = t.await.map_err(to_s)??;
                    n += a;
                    cy += c;
                }
                let secs = start.elapsed().as_secs_f64();
                progress(
                    ctx,
                    "streams",
                    format!(
                        "{cell:?} cycle={cycle}: {} msgs/s",
                        fmt_num(n as f64 / secs)
                    ),
                );
                rate[ci][usize::from(cycle)].push(n as f64 / secs);
                cps[ci][usize::from(cycle)].push(cy as f64 / secs);
            }
        }
    }
    let rows: Vec<Vec<String>> = CELLS
        .iter()
        .enumerate()
        .map(|(ci, (bt, p, s))| {
            let (sep, cyc) = (median_of(&rate[ci][0]), median_of(&rate[ci][1]));
            vec![
                bt.to_string(),
                p.to_string(),
                s.to_string(),
                fmt_num(median_of(&cps[ci][1])),
                fmt_num(cyc),
                fmt_num(median_of(&cps[ci][0])),
                fmt_num(sep),
                fmt_ratio(cyc, sep),
            ]
        })
        .collect();
    sec.para(format!(
        "{CLIENTS} clients over HTTP, each on a source queue of its own with P partitions, each \
         looping: push B to the next partition, pop them, then commit. Cycle: one \
         `POST /streams/v1/cycle` (S state upserts, B sink items over P sink partitions, the \
         ack through the last message). Separate: the same work as `POST /api/v1/kv` (S puts), \
         `POST /api/v1/push` (B items) and `POST /api/v1/ack/batch` (B acks) — not atomic. \
         {}s per run, medians of {ROUNDS} interleaved runs; msgs/s = source messages acked per \
         second, the source push and pop included in both.",
        dur.as_secs_f64()
    ));
    sec.table(
        &[
            "batch B",
            "partitions P",
            "state ops S",
            "cycles/s",
            "cycle msgs/s",
            "separate rounds/s",
            "separate msgs/s",
            "cycle ÷ separate",
        ],
        &rows,
    );
    Ok(())
}
