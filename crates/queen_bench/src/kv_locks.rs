//! Section 9: key/value and locks through one broker. 8 clients, each on keys (and a
//! lock) of its own, each kind for a fixed time, interleaved round by round: kv `get`,
//! `put` and compare-and-set (`put` with `expect` of the version the last write
//! answered) in ops/s; lock `acquire`+`release` and `renew` latency p50/p99; a
//! transaction pushing one message against the same transaction with a `tx.once` gate
//! (a required `putIfAbsent`) riding it, in transactions/s.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_postgres::Client;

use crate::broker_proc::Broker;
use crate::common::{
    drop_queues, fmt_ms, fmt_num, fmt_ratio, median_of, percentile_of, progress, to_s, BResult, Ctx,
};
use crate::report::Section;

const CLIENTS: usize = 8;
const ROUNDS: usize = 3;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Get,
    Put,
    Cas,
    Lock,
    Renew,
    Txn,
    TxnOnce,
}

const KINDS: [Kind; 7] = [
    Kind::Get,
    Kind::Put,
    Kind::Cas,
    Kind::Lock,
    Kind::Renew,
    Kind::Txn,
    Kind::TxnOnce,
];

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> BResult<Value> {
    let r = http.post(url).json(body).send().await.map_err(to_s)?;
    let s = r.status();
    let v: Value = r.json().await.map_err(to_s)?;
    if !s.is_success() {
        return Err(format!("{url}: HTTP {s}: {v}"));
    }
    Ok(v)
}

/// One client's loop until `until`: (ops done, latencies in ms of each op).
async fn client(
    base: String,
    http: reqwest::Client,
    kind: Kind,
    c: usize,
    run: String,
    until: Instant,
) -> BResult<(u64, Vec<f64>)> {
    let kv = format!("{base}/api/v1/kv");
    let locks = format!("{base}/api/v1/locks");
    let txn = format!("{base}/api/v1/transaction");
    let ns = format!("bench-{run}-{c}");
    let lock = format!("bench-{run}-{c}");
    let queue = format!("bench_kvtx_{c}");
    let mut version = post(
        &http,
        &kv,
        &json!({"operations": [
        {"op": "put", "ns": ns, "key": "k", "value": 0, "ttlSeconds": 3600}]}),
    )
    .await?["results"][0]["version"]
        .as_i64()
        .unwrap_or(0);
    let mut token = 0i64;
    if kind == Kind::Renew {
        let v = post(
            &http,
            &locks,
            &json!({"operations": [
            {"op": "acquire", "name": lock, "ttlSeconds": 60, "owner": lock}]}),
        )
        .await?;
        token = v["results"][0]["token"].as_i64().unwrap_or(0);
    }
    let (mut n, mut lat) = (0u64, Vec::new());
    while Instant::now() < until {
        let t = Instant::now();
        match kind {
            Kind::Get => {
                post(
                    &http,
                    &kv,
                    &json!({"operations": [{"op": "get", "ns": ns, "key": "k"}]}),
                )
                .await?;
            }
            Kind::Put => {
                post(&http, &kv, &json!({"operations": [
                    {"op": "put", "ns": ns, "key": format!("p{n}"), "value": n, "ttlSeconds": 600}]})).await?;
            }
            Kind::Cas => {
                let v = post(&http, &kv, &json!({"operations": [
                    {"op": "put", "ns": ns, "key": "k", "value": n, "ttlSeconds": 3600, "expect": version}]})).await?;
                let r = &v["results"][0];
                if r["applied"] != true {
                    return Err(format!("a CAS on a key nobody else writes failed: {r}"));
                }
                version = r["version"].as_i64().unwrap_or(0);
            }
            Kind::Lock => {
                let v = post(
                    &http,
                    &locks,
                    &json!({"operations": [
                    {"op": "acquire", "name": lock, "ttlSeconds": 30, "owner": lock}]}),
                )
                .await?;
                let got = v["results"][0]["token"].clone();
                post(
                    &http,
                    &locks,
                    &json!({"operations": [{"op": "release", "name": lock, "token": got}]}),
                )
                .await?;
            }
            Kind::Renew => {
                let v = post(&http, &locks, &json!({"operations": [
                    {"op": "renew", "name": lock, "token": token, "ttlSeconds": 60, "owner": lock}]})).await?;
                token = v["results"][0]["token"].as_i64().unwrap_or(token);
            }
            Kind::Txn | Kind::TxnOnce => {
                let mut body = json!({"operations": [{"type": "push", "items": [
                    {"queue": queue, "payload": {"n": n}}]}]});
                if kind == Kind::TxnOnce {
                    body["kv"] = json!([{"op": "putIfAbsent", "ns": ns, "key": format!("once:{n}"),
                                         "value": true, "ttlSeconds": 600, "required": true}]);
                }
                let v = post(&http, &txn, &body).await?;
                if v["success"] != true {
                    return Err(format!("transaction failed: {v}"));
                }
            }
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        n += 1;
    }
    Ok((n, lat))
}

pub async fn run(ctx: &Ctx, db: &Client) -> BResult<Section> {
    let mut sec = Section::new("9. Key/value, locks and transaction riders");
    let log = ctx.logs.join("broker-kv.log");
    let b = Broker::start(&ctx.broker_bin, &ctx.database_url, &[], &log).await?;
    let r = measure(ctx, &b, &mut sec).await;
    b.stop().await;
    drop_queues(db, "bench_kvtx_%").await?;
    db.execute(
        "DELETE FROM queen.kv WHERE ns LIKE 'bench-%' OR key LIKE 'bench-%'",
        &[],
    )
    .await
    .map_err(to_s)?;
    r?;
    Ok(sec)
}

async fn measure(ctx: &Ctx, b: &Broker, sec: &mut Section) -> BResult<()> {
    let dur = Duration::from_secs_f64(ctx.pick(2.0, 6.0));
    let mut rate: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
    let mut lats: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
    for round in 0..ROUNDS {
        for k in 0..KINDS.len() {
            let ix = (k + round) % KINDS.len();
            let kind = KINDS[ix];
            let run = format!("{round}-{ix}-{}", ctx.started.elapsed().as_millis());
            let start = Instant::now();
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|c| {
                    tokio::spawn(client(
                        b.base.clone(),
                        b.http.clone(),
                        kind,
                        c,
                        run.clone(),
                        start + dur,
                    ))
                })
                .collect();
            let mut n = 0;
            for t in tasks {
                let (done, l) = t.await.map_err(to_s)??;
                n += done;
                lats[ix].extend(l);
            }
            let r = n as f64 / start.elapsed().as_secs_f64();
            progress(ctx, "kv", format!("kind {ix}: {} ops/s", fmt_num(r)));
            rate[ix].push(r);
        }
    }
    let med = |xs: &Vec<f64>| median_of(xs);
    let pct = |xs: &Vec<f64>, p: f64| percentile_of(xs, p);
    let row = |name: &str, ix: usize, unit: &str| {
        vec![
            name.to_string(),
            format!("{} {unit}", fmt_num(med(&rate[ix]))),
            fmt_ms(pct(&lats[ix], 0.5)),
            fmt_ms(pct(&lats[ix], 0.99)),
        ]
    };
    let rows = vec![
        row("kv get", 0, "ops/s"),
        row("kv put", 1, "ops/s"),
        row("kv compare-and-set (put with expect)", 2, "ops/s"),
        row("lock acquire + release (one cycle)", 3, "cycles/s"),
        row("lock renew", 4, "ops/s"),
        row("transaction: push 1", 5, "txn/s"),
        row("transaction: push 1 + tx.once rider", 6, "txn/s"),
    ];
    sec.para(format!(
        "{CLIENTS} clients over HTTP, each on its own keys, lock and queue, one request at a \
         time, {}s per run; medians of {ROUNDS} interleaved runs, latencies over every \
         request of the runs. With the rider a transaction runs at {} the plain one's rate.",
        dur.as_secs_f64(),
        fmt_ratio(med(&rate[6]), med(&rate[5]))
    ));
    sec.table(&["what", "rate", "p50 ms", "p99 ms"], &rows);
    Ok(())
}
