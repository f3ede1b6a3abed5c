//! The systems section 5 sets side by side, and what one worker of each does: fill a
//! queue server-side, consume it (pop / read / next_batch, then ack / delete / finish),
//! produce into it. Every system carries the same fixed-size JSON payload
//! ([`payload`]), stored as JSON text or jsonb as the system does.

use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::broker_throughput::{consume, AckMode};
use crate::common::{drop_queues, to_s, BResult};
use crate::wire::{PushBody, PushItem, Pushed};

/// queen_ack's queue; worker i owns partition `p<i>`.
pub const QUEEN_Q: &str = "bench_peers";
/// pgmq's one queue, shared by every worker (its own concurrency: FOR UPDATE SKIP LOCKED).
pub const PGMQ_Q: &str = "bench";
/// PgQ's consumer name; worker i has queue `bench_q<i>` (PgQ delivers every event of a
/// queue to every registered consumer, so work is split by queue, as queen splits it
/// by partition).
pub const PGQ_CONSUMER: &str = "bench";
pub fn pgq_queue(i: usize) -> String {
    format!("bench_q{i}")
}

/// pgmq's visibility timeout and queen's lease, seconds: longer than any cell, so no
/// message is delivered twice inside one.
const LEASE_SECS: i32 = 120;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Sys {
    QueenSql,
    QueenSqlAt,
    QueenBroker,
    PgmqDelete,
    PgmqArchive,
    Pgq,
    /// The same documented cycles from Python (psycopg 3, bench/peer_client.py), as a
    /// user scripts a consumer: per-call overhead a thin client does not hide shows.
    QueenSqlPy,
    PgmqDeletePy,
    PgqPy,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Family {
    Queen,
    Pgmq,
    Pgq,
}

impl Sys {
    /// Every consume row, in table order.
    pub const CONSUME: [Sys; 9] = [
        Sys::QueenSql,
        Sys::QueenSqlAt,
        Sys::QueenBroker,
        Sys::PgmqDelete,
        Sys::PgmqArchive,
        Sys::Pgq,
        Sys::QueenSqlPy,
        Sys::PgmqDeletePy,
        Sys::PgqPy,
    ];
    /// The consume rows whose server-side cost (WAL anatomy, database cost) is measured:
    /// the Rust ones, first in [`Sys::CONSUME`] (the Python rows run their statements).
    pub const SERVER_COST: &'static [Sys] = Self::CONSUME.split_at(6).0;
    /// Produce rows: the two pgmq variants and the two queen SQL variants produce alike.
    pub const PRODUCE: [Sys; 4] = [Sys::QueenSql, Sys::QueenBroker, Sys::PgmqDelete, Sys::Pgq];

    pub fn label(self) -> &'static str {
        match self {
            Sys::QueenSql => "queen_ack SQL, ack by transactionId",
            Sys::QueenSqlAt => "queen_ack SQL, positional ack",
            Sys::QueenBroker => "queen_ack broker (HTTP)",
            Sys::PgmqDelete => "pgmq, read + delete",
            Sys::PgmqArchive => "pgmq, read + archive",
            Sys::Pgq => "PgQ",
            Sys::QueenSqlPy => "queen_ack SQL, ack by transactionId (Python)",
            Sys::PgmqDeletePy => "pgmq, read + delete (Python)",
            Sys::PgqPy => "PgQ (Python)",
        }
    }

    /// The Python client's `--system` for this row, if it is a Python row.
    pub fn python(self) -> Option<&'static str> {
        match self {
            Sys::QueenSqlPy => Some("queen"),
            Sys::PgmqDeletePy => Some("pgmq"),
            Sys::PgqPy => Some("pgq"),
            _ => None,
        }
    }

    pub fn produce_label(self) -> &'static str {
        match self {
            Sys::QueenSql | Sys::QueenSqlAt => "queen_ack SQL (queen.push)",
            Sys::QueenBroker => "queen_ack broker (POST /api/v1/push)",
            Sys::PgmqDelete | Sys::PgmqArchive => "pgmq (send_batch)",
            Sys::Pgq | Sys::PgqPy => "PgQ (insert_event)",
            Sys::QueenSqlPy => "queen_ack SQL (queen.push)",
            Sys::PgmqDeletePy => "pgmq (send_batch)",
        }
    }

    /// What one consume cycle is, for the report.
    pub fn cycle(self) -> &'static str {
        match self {
            Sys::QueenSql => "`queen.pop(q, 'p<i>', …, B, lease)` then `queen.ack(pid, lease, transactionIds)`, two autocommit statements",
            Sys::QueenSqlAt => "`queen.pop(…)` then `queen.log_ack_at_v1(pid, group, lease, last offset)`, two autocommit statements",
            Sys::QueenBroker => "`GET /api/v1/pop/queue/q/partition/p<i>?batch=B&wait=false` then one `POST /api/v1/ack/batch` (release broker, registry + fusion)",
            Sys::PgmqDelete => "`pgmq.read('bench', vt, B)` then `pgmq.delete('bench', ids)`, two autocommit statements, one queue",
            Sys::PgmqArchive => "`pgmq.read(…)` then `pgmq.archive('bench', ids)`",
            Sys::Pgq => "one transaction: `pgq.next_batch(q<i>, c)`, `pgq.get_batch_events(id)`, `pgq.finish_batch(id)`, COMMIT",
            Sys::QueenSqlPy | Sys::PgmqDeletePy | Sys::PgqPy => "the cycle of the Rust row above it, from Python: psycopg 3 (binary), an autocommit connection per consumer process, parameters bound by psycopg (server-side prepared after its default 5 executions), rows fetched and payloads decoded into Python objects (`bench/peer_client.py`)",
        }
    }

    pub fn family(self) -> Family {
        match self {
            Sys::QueenSql | Sys::QueenSqlAt | Sys::QueenBroker | Sys::QueenSqlPy => Family::Queen,
            Sys::PgmqDelete | Sys::PgmqArchive | Sys::PgmqDeletePy => Family::Pgmq,
            Sys::Pgq | Sys::PgqPy => Family::Pgq,
        }
    }
}

impl Family {
    /// The schema holding every relation of the system.
    pub fn schema(self) -> &'static str {
        match self {
            Family::Queen => "queen",
            Family::Pgmq => "pgmq",
            Family::Pgq => "pgq",
        }
    }
}

/// Size of every message as JSON text, in bytes.
pub const PAYLOAD_BYTES: usize = 107;
const PAYLOAD_HEAD: &str = r#"{"id":""#;
const PAYLOAD_MID: &str = r#"","kind":"bench","body":""#;
const PAYLOAD_TAIL: &str = r#""}"#;
const ID_DIGITS: usize = 12;

/// Everything after the 12-digit id, padded so a payload is [`PAYLOAD_BYTES`] long.
pub fn payload_suffix() -> String {
    let body =
        PAYLOAD_BYTES - PAYLOAD_HEAD.len() - ID_DIGITS - PAYLOAD_MID.len() - PAYLOAD_TAIL.len();
    format!("{PAYLOAD_MID}{}{PAYLOAD_TAIL}", "x".repeat(body))
}

/// The payload of message n: `{"id":"<n, 12 digits>","kind":"bench","body":"xxx…"}`.
/// The server-side fills build the same text from the head and suffix (peers.payload).
pub fn payload(n: u64, suffix: &str) -> String {
    format!("{PAYLOAD_HEAD}{n:0w$}{suffix}", w = ID_DIGITS)
}

pub fn payload_head() -> &'static str {
    PAYLOAD_HEAD
}

/// Server-side fill procedures (schema `peers` of the section's own database): they call
/// the systems' own API, commit every segment, and run with synchronous_commit off (the
/// fill is not measured, except in the cost table, where WAL and commits count alike).
pub const PEERS_SQL: &str = r#"
CREATE SCHEMA IF NOT EXISTS peers;

CREATE OR REPLACE FUNCTION peers.payload(p_n bigint, p_head text, p_suf text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT p_head || lpad(p_n::text, 12, '0') || p_suf $$;

-- queen_ack: p_per messages into each partition p0..p(p_parts-1) by queen.push, segments
-- of p_seg (at least one message per partition); dedup window 0 after the first segment
-- (pgmq and PgQ have no dedup; pops and acks never read the window).
CREATE OR REPLACE PROCEDURE peers.fill_queen(p_queue text, p_parts int, p_per int, p_seg int,
    p_head text, p_suf text) LANGUAGE plpgsql AS $$
DECLARE k int; n int;
BEGIN
  FOR p IN 0 .. p_parts - 1 LOOP
    n := 0;
    LOOP
      k := greatest(1, least(p_seg, p_per - n));
      PERFORM queen.push(p_queue, (SELECT jsonb_agg(peers.payload(p::bigint * 1000000000 + n + g,
          p_head, p_suf)::jsonb ORDER BY g) FROM generate_series(0, k - 1) g), NULL, 'p' || p);
      IF p = 0 AND n = 0 THEN
        UPDATE queen.queues SET dedup_window_seconds = 0 WHERE name = p_queue;
      END IF;
      COMMIT;
      n := n + k;
      EXIT WHEN n >= p_per;
    END LOOP;
  END LOOP;
END $$;

-- pgmq: p_n messages by send_batch, p_seg per call and transaction.
CREATE OR REPLACE PROCEDURE peers.fill_pgmq(p_queue text, p_n int, p_seg int, p_head text,
    p_suf text) LANGUAGE plpgsql AS $$
DECLARE k int; n int := 0;
BEGIN
  WHILE n < p_n LOOP
    k := least(p_seg, p_n - n);
    PERFORM pgmq.send_batch(p_queue, ARRAY(SELECT peers.payload(n + g, p_head, p_suf)::jsonb
                                             FROM generate_series(0, k - 1) g));
    COMMIT;
    n := n + k;
  END LOOP;
END $$;

-- PgQ: p_per events into each queue by insert_event, at most p_seg per transaction, and a
-- tick after every p_tick events, in its own transaction once they committed (a tick's
-- snapshot leaves in-flight events to the next batch): each batch holds p_tick events.
CREATE OR REPLACE PROCEDURE peers.fill_pgq(p_queues text[], p_per int, p_tick int, p_seg int,
    p_head text, p_suf text) LANGUAGE plpgsql AS $$
DECLARE k int; n int; since int; q text; t bigint;
BEGIN
  FOREACH q IN ARRAY p_queues LOOP
    n := 0; since := 0;
    WHILE n < p_per LOOP
      k := least(p_seg, p_per - n, p_tick - since);
      PERFORM pgq.insert_event(q, 'bench', peers.payload(n + g, p_head, p_suf))
         FROM generate_series(0, k - 1) g;
      COMMIT;
      n := n + k;
      since := since + k;
      IF since = p_tick OR n = p_per THEN
        t := pgq.ticker(q);
        IF t IS NULL THEN
          RAISE EXCEPTION 'pgq.ticker(%) made no tick after % events', q, since;
        END IF;
        COMMIT;
        since := 0;
      END IF;
    END LOOP;
  END LOOP;
END $$;

-- Drops every bench queue of pgmq and PgQ.
CREATE OR REPLACE PROCEDURE peers.drop_peer_queues() LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pgmq.drop_queue(queue_name) FROM pgmq.meta WHERE queue_name = 'bench';
  PERFORM pgq.drop_queue(queue_name, true) FROM pgq.queue WHERE queue_name LIKE 'bench\_q%';
END $$;
"#;

fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Drops the family's bench queues and creates empty ones for `workers` workers (queen's
/// partitions are created by the fill: it writes at least one message per partition).
pub async fn reset(db: &Client, fam: Family, workers: usize) -> BResult<()> {
    let err = |e: tokio_postgres::Error| format!("resetting {fam:?} queues: {}", to_s(&e));
    db.batch_execute("CALL peers.drop_peer_queues()")
        .await
        .map_err(err)?;
    drop_queues(db, QUEEN_Q).await?;
    match fam {
        Family::Queen => {}
        Family::Pgmq => {
            db.batch_execute(&format!("SELECT pgmq.create({})", lit(PGMQ_Q)))
                .await
                .map_err(err)?;
        }
        Family::Pgq => {
            for i in 0..workers {
                let q = lit(&pgq_queue(i));
                // ticker_max_count 1: a ticker() call after any new event ticks; no
                // lag- or idle-driven ticks: only the fill ticks.
                db.batch_execute(&format!(
                    "SELECT pgq.create_queue({q});
                     SELECT pgq.set_queue_config({q}, 'ticker_max_count', '1');
                     SELECT pgq.set_queue_config({q}, 'ticker_max_lag', '1 day');
                     SELECT pgq.set_queue_config({q}, 'ticker_idle_period', '1 day');
                     SELECT pgq.register_consumer({q}, {})",
                    lit(PGQ_CONSUMER)
                ))
                .await
                .map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Fills the family's queues server-side with `per` messages per worker (pgmq: one queue
/// of workers × per), pushed in segments of `seg`; PgQ ticks every `tick` events.
pub async fn fill(
    db: &Client,
    fam: Family,
    workers: usize,
    per: usize,
    seg: usize,
    tick: usize,
    sync_off: bool,
) -> BResult<()> {
    let (head, suf) = (lit(payload_head()), lit(&payload_suffix()));
    let call = match fam {
        Family::Queen => format!(
            "CALL peers.fill_queen({}, {workers}, {per}, {seg}, {head}, {suf})",
            lit(QUEEN_Q)
        ),
        Family::Pgmq => format!(
            "CALL peers.fill_pgmq({}, {}, {seg}, {head}, {suf})",
            lit(PGMQ_Q),
            workers * per
        ),
        Family::Pgq => {
            let qs: Vec<String> = (0..workers).map(pgq_queue).collect();
            format!(
                "CALL peers.fill_pgq(ARRAY[{}], {per}, {tick}, {seg}, {head}, {suf})",
                qs.iter().map(|q| lit(q)).collect::<Vec<_>>().join(",")
            )
        }
    };
    let sync = if sync_off { "off" } else { "on" };
    db.batch_execute(&format!("SET synchronous_commit = {sync}"))
        .await
        .map_err(to_s)?;
    let r = db.batch_execute(&call).await;
    let _ = db.batch_execute("RESET synchronous_commit").await;
    r.map_err(|e| format!("filling {fam:?}: {}", to_s(&e)))
}

/// What one worker did.
#[derive(Default)]
pub struct WorkerOut {
    pub msgs: u64,
    /// Client-side latency of each ack (consume) or push (produce), ms.
    pub lat_ms: Vec<f64>,
    pub errors: Vec<String>,
    pub finished: Duration,
    /// Stopped because its queue was empty (before the deadline).
    pub drained: bool,
}

impl WorkerOut {
    fn fail(&mut self, what: &str, e: impl std::fmt::Display) {
        self.errors.push(format!("{what}: {e}"));
    }
}

/// How a worker reaches its system.
pub enum Conn {
    Sql(Client),
    Http {
        http: reqwest::Client,
        base: String,
    },
    /// A Python consumer process (bench/peer_client.py), connected and waiting for go.
    Python(PythonWorker),
}

/// A started `bench/peer_client.py` that has printed "ready".
pub struct PythonWorker {
    child: tokio::process::Child,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

/// The interpreter with psycopg 3: `QUEEN_BENCH_PYTHON`, else bench/run.sh's venv.
fn python() -> BResult<std::path::PathBuf> {
    let p = std::env::var_os("QUEEN_BENCH_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| crate::common::workspace_root().join("target/bench-venv/bin/python"));
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "no Python with psycopg at {} (bench/run.sh makes target/bench-venv; or set QUEEN_BENCH_PYTHON)",
            p.display()
        ))
    }
}

impl PythonWorker {
    /// Starts consumer `i` of `sys` (a Python row) at batch `b` for at most `secs`, and
    /// waits until it has connected.
    pub async fn start(sys: Sys, url: &str, i: usize, b: usize, secs: f64) -> BResult<Self> {
        use tokio::io::AsyncBufReadExt;
        let system = sys.python().ok_or("not a Python row")?;
        let script = crate::common::workspace_root().join("bench/peer_client.py");
        let mut child = tokio::process::Command::new(python()?)
            .arg(script)
            .args(["--url", url, "--system", system])
            .args(["--worker", &i.to_string(), "--batch", &b.to_string()])
            .args(["--seconds", &secs.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting bench/peer_client.py: {e}"))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut stdout = tokio::io::BufReader::new(out).lines();
        match stdout.next_line().await.map_err(to_s)? {
            Some(l) if l == "ready" => Ok(Self { child, stdout }),
            other => Err(format!("peer_client.py did not get ready: {other:?}")),
        }
    }

    /// Says go, and reads what the consumer did when it is done.
    async fn run(mut self, out: &mut WorkerOut) -> BResult<()> {
        use tokio::io::AsyncWriteExt;
        let mut stdin = self.child.stdin.take().ok_or("no stdin")?;
        stdin.write_all(b"go\n").await.map_err(to_s)?;
        stdin.flush().await.map_err(to_s)?;
        let line = self
            .stdout
            .next_line()
            .await
            .map_err(to_s)?
            .ok_or("peer_client.py ended without its report")?;
        let _ = self.child.wait().await;
        let r: PythonReport = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        out.msgs = r.msgs;
        out.lat_ms = r.lat_ms;
        out.errors = r.errors;
        out.drained = r.drained;
        out.finished = Duration::from_secs_f64(r.finished_s);
        Ok(())
    }
}

/// What bench/peer_client.py prints when it is done.
#[derive(serde::Deserialize)]
struct PythonReport {
    msgs: u64,
    lat_ms: Vec<f64>,
    errors: Vec<String>,
    drained: bool,
    finished_s: f64,
}

/// Consumes from worker `i`'s share until its queue is empty or the deadline passes.
pub async fn consume_worker(
    sys: Sys,
    conn: Conn,
    i: usize,
    batch: usize,
    start: Instant,
    deadline: Instant,
) -> WorkerOut {
    let mut out = WorkerOut::default();
    let r = match (conn, sys.family()) {
        (Conn::Python(w), _) => {
            if let Err(e) = w.run(&mut out).await {
                out.fail("python", e);
                out.finished = start.elapsed();
            }
            return out;
        }
        (Conn::Http { http, base }, _) => {
            let o = consume(
                http.clone(),
                base.clone(),
                QUEEN_Q.into(),
                format!("p{i}"),
                batch,
                false,
                AckMode::Batch,
                start,
                deadline,
            )
            .await;
            out.msgs = o.msgs;
            out.lat_ms = o.lat_ms;
            out.errors = o.errors;
            out.drained = Instant::now() < deadline;
            return WorkerOut {
                finished: o.finished,
                ..out
            };
        }
        (Conn::Sql(db), Family::Queen) => {
            consume_queen(&db, sys == Sys::QueenSqlAt, i, batch, deadline, &mut out).await
        }
        (Conn::Sql(db), Family::Pgmq) => {
            consume_pgmq(&db, sys == Sys::PgmqArchive, batch, deadline, &mut out).await
        }
        (Conn::Sql(db), Family::Pgq) => consume_pgq(&db, i, deadline, &mut out).await,
    };
    if let Err(e) = r {
        out.fail("prepare", e);
    }
    out.finished = start.elapsed();
    out
}

async fn consume_queen(
    db: &Client,
    positional: bool,
    i: usize,
    batch: usize,
    deadline: Instant,
    out: &mut WorkerOut,
) -> BResult<()> {
    let pop = db
        .prepare(&format!(
            "SELECT r_partition_id, r_lease_id, r_transaction_id, r_payload::text, r_offset
               FROM queen.pop($1, $2, '__QUEUE_MODE__', $3::int, {LEASE_SECS})"
        ))
        .await
        .map_err(to_s)?;
    let ack = db
        .prepare(if positional {
            "SELECT coalesce((r->>'acked')::bigint, -1), r->>'error'
               FROM (SELECT queen.log_ack_at_v1($1, '__QUEUE_MODE__', $2, $3::bigint) AS r) s"
        } else {
            "SELECT coalesce((r->>'acked')::bigint, -1), r->>'error'
               FROM (SELECT queen.ack($1, $2, $3::text[]) AS r) s"
        })
        .await
        .map_err(to_s)?;
    let partition = format!("p{i}");
    while Instant::now() < deadline && out.errors.len() < 5 {
        let rows = match db
            .query(&pop, &[&QUEEN_Q, &partition, &(batch as i32)])
            .await
        {
            Ok(r) => r,
            Err(e) => {
                out.fail("queen.pop", to_s(&e));
                continue;
            }
        };
        let Some(first) = rows.first() else {
            out.drained = true;
            break;
        };
        let (pid, lease): (Uuid, String) = (first.get(0), first.get(1));
        let _bytes: usize = rows.iter().map(|r| r.get::<_, &str>(3).len()).sum();
        let n = rows.len() as i64;
        let t = Instant::now();
        let r = if positional {
            let upto = rows.iter().map(|r| r.get::<_, i64>(4)).max().unwrap_or(-1);
            db.query_one(&ack, &[&pid, &lease, &upto]).await
        } else {
            let txns: Vec<&str> = rows.iter().map(|r| r.get::<_, &str>(2)).collect();
            db.query_one(&ack, &[&pid, &lease, &txns]).await
        };
        out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        match r {
            Ok(row) => {
                let acked: i64 = row.get(0);
                if acked != n {
                    let e: Option<String> = row.get(1);
                    out.fail("ack", format!("acked {acked} of {n}: {e:?}"));
                }
                out.msgs += acked.max(0) as u64;
            }
            Err(e) => out.fail("ack", to_s(&e)),
        }
    }
    Ok(())
}

async fn consume_pgmq(
    db: &Client,
    archive: bool,
    batch: usize,
    deadline: Instant,
    out: &mut WorkerOut,
) -> BResult<()> {
    let read = db
        .prepare(&format!(
            "SELECT msg_id, message::text FROM pgmq.read($1::text, {LEASE_SECS}, $2::int)"
        ))
        .await
        .map_err(to_s)?;
    let done = db
        .prepare(if archive {
            "SELECT count(*) FROM pgmq.archive($1::text, $2::bigint[])"
        } else {
            "SELECT count(*) FROM pgmq.delete($1::text, $2::bigint[])"
        })
        .await
        .map_err(to_s)?;
    while Instant::now() < deadline && out.errors.len() < 5 {
        let rows = match db.query(&read, &[&PGMQ_Q, &(batch as i32)]).await {
            Ok(r) => r,
            Err(e) => {
                out.fail("pgmq.read", to_s(&e));
                continue;
            }
        };
        if rows.is_empty() {
            out.drained = true;
            break;
        }
        let _bytes: usize = rows.iter().map(|r| r.get::<_, &str>(1).len()).sum();
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let t = Instant::now();
        let r = db.query_one(&done, &[&PGMQ_Q, &ids]).await;
        out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        match r {
            Ok(row) => {
                let k: i64 = row.get(0);
                if k != ids.len() as i64 {
                    out.fail("pgmq ack", format!("{k} of {} ids", ids.len()));
                }
                out.msgs += k.max(0) as u64;
            }
            Err(e) => out.fail("pgmq ack", to_s(&e)),
        }
    }
    Ok(())
}

async fn consume_pgq(db: &Client, i: usize, deadline: Instant, out: &mut WorkerOut) -> BResult<()> {
    let next = db
        .prepare("SELECT pgq.next_batch($1, $2)")
        .await
        .map_err(to_s)?;
    let events = db
        .prepare("SELECT ev_id, ev_data FROM pgq.get_batch_events($1)")
        .await
        .map_err(to_s)?;
    let finish = db
        .prepare("SELECT pgq.finish_batch($1)")
        .await
        .map_err(to_s)?;
    let queue = pgq_queue(i);
    while Instant::now() < deadline && out.errors.len() < 5 {
        let cycle = async {
            db.batch_execute("BEGIN").await?;
            let id: Option<i64> = db.query_one(&next, &[&queue, &PGQ_CONSUMER]).await?.get(0);
            let Some(id) = id else {
                db.batch_execute("COMMIT").await?;
                return Ok(None);
            };
            let rows = db.query(&events, &[&id]).await?;
            let _bytes: usize = rows
                .iter()
                .map(|r| r.get::<_, Option<&str>>(1).map_or(0, str::len))
                .sum();
            let t = Instant::now();
            db.query_one(&finish, &[&id]).await?;
            db.batch_execute("COMMIT").await?;
            Ok::<_, tokio_postgres::Error>(Some((rows.len() as u64, t.elapsed())))
        };
        match cycle.await {
            Ok(Some((n, lat))) => {
                out.msgs += n;
                out.lat_ms.push(lat.as_secs_f64() * 1000.0);
            }
            Ok(None) => {
                out.drained = true;
                break;
            }
            Err(e) => {
                let _ = db.batch_execute("ROLLBACK").await;
                out.fail("pgq cycle", to_s(&e));
            }
        }
    }
    Ok(())
}

/// Produces batches of `batch` into worker `i`'s share until the deadline; latency per
/// push statement or request.
pub async fn produce_worker(
    sys: Sys,
    conn: Conn,
    i: usize,
    batch: usize,
    start: Instant,
    deadline: Instant,
) -> WorkerOut {
    let mut out = WorkerOut::default();
    let suffix = payload_suffix();
    let mut n = i as u64 * 1_000_000_000;
    let partition = format!("p{i}");
    let pgq_q = pgq_queue(i);
    let stmt = match (&conn, sys.family()) {
        (Conn::Sql(db), fam) => {
            let sql = match fam {
                Family::Queen => format!(
                    "SELECT (queen.push({}, $1::text::jsonb, NULL, $2::text))->>'status' = 'queued'",
                    lit(QUEEN_Q)
                ),
                Family::Pgmq => format!(
                    "SELECT count(*) = cardinality($1::text[]) FROM pgmq.send_batch({}, $1::text[]::jsonb[])",
                    lit(PGMQ_Q)
                ),
                Family::Pgq => "SELECT count(pgq.insert_event($2::text, 'bench', x)) = cardinality($1::text[])
                                  FROM unnest($1::text[]) x"
                    .to_string(),
            };
            match db.prepare(&sql).await {
                Ok(s) => Some(s),
                Err(e) => {
                    out.fail("prepare", to_s(&e));
                    return out;
                }
            }
        }
        (Conn::Http { .. }, _) => None,
        (Conn::Python(_), _) => {
            out.fail("produce", "the Python client only consumes");
            return out;
        }
    };
    while Instant::now() < deadline && out.errors.len() < 5 {
        let texts: Vec<String> = (0..batch as u64).map(|k| payload(n + k, &suffix)).collect();
        n += batch as u64;
        let t = Instant::now();
        let ok = match (&conn, &stmt) {
            (Conn::Sql(db), Some(stmt)) => {
                let r = match sys.family() {
                    Family::Queen => {
                        let body = format!("[{}]", texts.join(","));
                        db.query_one(stmt, &[&body, &partition]).await
                    }
                    Family::Pgmq => db.query_one(stmt, &[&texts]).await,
                    Family::Pgq => db.query_one(stmt, &[&texts, &pgq_q]).await,
                };
                r.map(|row| row.get::<_, bool>(0)).map_err(to_s)
            }
            (Conn::Http { http, base }, _) => push_http(http, base, &partition, &texts).await,
            _ => Err("no statement".into()),
        };
        match ok {
            Ok(true) => {
                out.lat_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                out.msgs += batch as u64;
            }
            Ok(false) => out.fail("push", "not every message was accepted"),
            Err(e) => out.fail("push", e),
        }
    }
    out.finished = start.elapsed();
    out
}

async fn push_http(
    http: &reqwest::Client,
    base: &str,
    partition: &str,
    texts: &[String],
) -> BResult<bool> {
    let raws: Vec<&RawValue> = texts
        .iter()
        .map(|t| serde_json::from_str::<&RawValue>(t).map_err(to_s))
        .collect::<BResult<_>>()?;
    let body = PushBody {
        items: raws
            .into_iter()
            .map(|payload| PushItem {
                queue: QUEEN_Q,
                partition,
                payload,
            })
            .collect(),
    };
    let body = serde_json::to_vec(&body).map_err(to_s)?;
    let r = http
        .post(format!("{base}/api/v1/push"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(to_s)?;
    if !r.status().is_success() {
        return Err(format!("HTTP {}", r.status()));
    }
    let b = r.bytes().await.map_err(to_s)?;
    let items: Vec<Pushed> = serde_json::from_slice(&b)
        .map_err(|_| format!("unexpected body {}", String::from_utf8_lossy(&b)))?;
    Ok(items.len() == texts.len() && items.iter().all(|p| p.status == "queued"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_has_the_fixed_size_and_is_json() {
        let s = payload_suffix();
        for n in [0u64, 42, 999_999_999_999] {
            let p = payload(n, &s);
            assert_eq!(p.len(), PAYLOAD_BYTES, "{p}");
            let v: serde_json::Value = serde_json::from_str(&p).unwrap();
            assert_eq!(v["id"], format!("{n:012}"));
        }
        assert_ne!(payload(1, &s), payload(2, &s));
    }
}
