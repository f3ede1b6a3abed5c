//! Shared plumbing: the run context, database connections, the server-side helper
//! functions (schema `queen_bench`), summaries of repeated timings, progress lines.

use std::path::PathBuf;
use std::time::Instant;

use tokio_postgres::{Client, NoTls};

/// Everything a section needs.
pub struct Ctx {
    pub database_url: String,
    pub quick: bool,
    pub out: PathBuf,
    /// Run logs (the brokers' output): kept out of the results folder, which holds
    /// reports and charts only (default under target/bench-logs/).
    pub logs: PathBuf,
    pub broker_bin: PathBuf,
    pub started: Instant,
    /// Section 2's (consumers, batch) points when given on the command line.
    pub cells: Option<Vec<(usize, usize)>>,
}

impl Ctx {
    /// Full or quick value.
    pub fn pick<T>(&self, quick: T, full: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

pub type BResult<T> = Result<T, String>;

/// One JSON request to a broker: its answer, `None` for 204, an error for any other
/// non-2xx status (naming it and the body).
pub async fn call(req: reqwest::RequestBuilder) -> BResult<Option<serde_json::Value>> {
    let r = req.send().await.map_err(to_s)?;
    let s = r.status();
    if s == reqwest::StatusCode::NO_CONTENT {
        return Ok(None);
    }
    let v: serde_json::Value = r.json().await.map_err(to_s)?;
    if !s.is_success() {
        return Err(format!("HTTP {s}: {v}"));
    }
    Ok(Some(v))
}

/// `map_err(to_s)` for any error: its message and its sources (tokio-postgres puts the
/// server's message in the source of a plain "db error").
pub fn to_s<E: std::error::Error>(e: E) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// A progress line on stderr, stamped with the time since the start of the run.
pub fn progress(ctx: &Ctx, section: &str, msg: impl AsRef<str>) {
    eprintln!(
        "[{:>7.1}s] [{section}] {}",
        ctx.started.elapsed().as_secs_f64(),
        msg.as_ref()
    );
}

/// A fresh connection; the connection task runs on the current runtime.
pub async fn connect(url: &str) -> BResult<Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("cannot connect to {url}: {}", to_s(&e)))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            eprintln!("postgres connection error: {e}");
        }
    });
    Ok(client)
}

/// Server-side helpers of the bench. Every timed helper measures with clock_timestamp()
/// around the one call it wraps: function cost inside the server, no network, no commit.
pub const HELPERS_SQL: &str = r#"
CREATE SCHEMA IF NOT EXISTS queen_bench;

-- Hash of the message at offset o of a bench partition: xxh3_128(tag || ':' || o).
CREATE OR REPLACE FUNCTION queen_bench.hashes(p_tag text, p_from bigint, p_n int)
RETURNS bytea[] LANGUAGE sql AS $$
  SELECT coalesce(array_agg(queen.xxh3_128(p_tag || ':' || g) ORDER BY g), '{}')
    FROM generate_series(p_from, p_from + p_n - 1) g $$;

-- Appends p_n messages (payload 0, transactionId tag:offset, dedup window 0) in segments of
-- p_seg through queen.push; the hash of offset o is xxh3_128(tag || ':' || o).
-- Returns the partition's last offset.
CREATE OR REPLACE FUNCTION queen_bench.seed(p_queue text, p_partition text, p_tag text,
    p_n bigint, p_seg int) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint := 0; k int; base bigint; last bigint;
BEGIN
  SELECT p.last_offset INTO last FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.name = p_queue AND p.name = p_partition;
  base := coalesce(last, -1) + 1;
  WHILE n < p_n LOOP
    k := least(p_seg, p_n - n);
    -- A real segment (push validates blobs): queen.push frames k tiny payloads with
    -- the transactionIds tag:offset, whose hashes are xxh3_128(tag || ':' || offset).
    PERFORM queen.push(p_queue, (SELECT jsonb_agg(0) FROM generate_series(1, k)),
        ARRAY(SELECT p_tag || ':' || (base + n + g) FROM generate_series(0, k - 1) g ORDER BY g),
        p_partition);
    -- Dedup window 0 (no probe: the seed stays linear), as the first push created the queue.
    UPDATE queen.queues SET dedup_window_seconds = 0
     WHERE name = p_queue AND dedup_window_seconds <> 0;
    n := n + k;
  END LOOP;
  SELECT p.last_offset INTO last FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.name = p_queue AND p.name = p_partition;
  RETURN last;
END $$;

-- Puts the cursors of p_groups on a partition at p_committed, without a lease (upsert).
CREATE OR REPLACE FUNCTION queen_bench.reset(p_pid uuid, p_groups text[], p_committed bigint)
RETURNS void LANGUAGE sql AS $$
  WITH c AS (
    INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
    SELECT p_pid, g, p_committed FROM unnest(p_groups) g
    ON CONFLICT (partition_id, consumer_group) DO UPDATE SET committed = excluded.committed,
       batch_retry_count = 0
    RETURNING partition_id, consumer_group)
  INSERT INTO queen.log_leases AS l (partition_id, consumer_group) SELECT * FROM c
  ON CONFLICT (partition_id, consumer_group) DO UPDATE SET batch_end = NULL, worker_id = NULL,
     lease_expires_at = NULL, lease_acquired_at = NULL, attempt_offset = NULL, attempt_count = 0 $$;

-- Leases the next p_budget frames for every (group, worker) pair; returns frames taken.
CREATE OR REPLACE FUNCTION queen_bench.lease(p_queue text, p_partition text, p_groups text[],
    p_workers text[], p_budget int) RETURNS bigint LANGUAGE sql AS $$
  SELECT coalesce(sum(r.r_take), 0)::bigint
    FROM unnest(p_groups, p_workers) AS u(g, w),
         LATERAL queen.log_pop_v1(p_queue, p_partition, u.g, p_budget, 600, u.w) r $$;

CREATE OR REPLACE FUNCTION queen_bench.t_ack_hash(p_pid uuid, p_group text, p_worker text,
    p_hashes bytea[], p_statuses text[], OUT ms float8, OUT r jsonb) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  r := queen.log_ack_by_hash_v1(p_pid, p_group, p_worker, p_hashes, p_statuses);
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

-- N log_ack_at_v1 calls (one per group) in one statement; r = sum of acked.
CREATE OR REPLACE FUNCTION queen_bench.t_ack_at(p_pid uuid, p_groups text[], p_workers text[],
    p_upto bigint, OUT ms float8, OUT r bigint) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; j jsonb;
BEGIN
  r := 0;
  t0 := clock_timestamp();
  FOR i IN 1 .. coalesce(array_length(p_groups, 1), 0) LOOP
    j := queen.log_ack_at_v1(p_pid, p_groups[i], p_workers[i], p_upto);
    r := r + coalesce((j->>'acked')::bigint, 0);
  END LOOP;
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

CREATE OR REPLACE FUNCTION queen_bench.t_ack_multi(p_pids text[], p_groups text[],
    p_ends bigint[], p_workers text[], p_counts int[], OUT ms float8, OUT r jsonb)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  r := queen.log_ack_multi_v1(p_pids, p_groups, p_ends, p_workers, p_counts);
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

-- One queue-level pop; returns the time, the frames taken and the claimed partition.
CREATE OR REPLACE FUNCTION queen_bench.t_pop_queue(p_queue text, p_group text, p_budget int,
    p_worker text, OUT ms float8, OUT taken bigint, OUT pid uuid) LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  SELECT coalesce(sum(r_take), 0), min(r_partition_id::text)::uuid INTO taken, pid
    FROM queen.log_pop_queue_v1(p_queue, p_group, p_budget, 600, p_worker);
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
END $$;

"#;

/// Installs the helper functions (idempotent).
pub async fn install_helpers(db: &Client) -> BResult<()> {
    db.batch_execute(HELPERS_SQL)
        .await
        .map_err(|e| format!("installing bench helpers: {}", to_s(&e)))
}

/// Deletes every bench queue whose name matches a LIKE pattern through the extension's
/// own `delete_queue_v1`, one statement per queue: on Citus, a transaction that deleted
/// rows of several shards may not write the reference table `queues` again.
pub async fn drop_queues(db: &Client, like: &str) -> BResult<()> {
    let err = |e: tokio_postgres::Error| format!("dropping queues {like}: {}", to_s(&e));
    let queues = db
        .query(
            "SELECT tenant_id, name FROM queen.queues WHERE name LIKE $1",
            &[&like],
        )
        .await
        .map_err(err)?;
    for q in queues {
        let (tenant, name): (uuid::Uuid, String) = (q.get(0), q.get(1));
        db.execute("SELECT queen.delete_queue_v1($1, $2)", &[&name, &tenant])
            .await
            .map_err(err)?;
    }
    Ok(())
}

/// The id of a queue's partition.
pub async fn partition_id(db: &Client, queue: &str, partition: &str) -> BResult<uuid::Uuid> {
    let row = db
        .query_one(
            "SELECT p.id FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = $1 AND p.name = $2",
            &[&queue, &partition],
        )
        .await
        .map_err(|e| format!("partition {queue}/{partition}: {}", to_s(&e)))?;
    Ok(row.get(0))
}

/// Median / min / max (and tail percentiles) of repeated measurements.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    #[allow(dead_code)]
    pub mean: f64,
    pub p99: f64,
}

impl Summary {
    pub fn of(xs: &[f64]) -> Summary {
        if xs.is_empty() {
            return Summary::default();
        }
        let mut v = xs.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Summary {
            n,
            median,
            min: v[0],
            max: v[n - 1],
            mean: v.iter().sum::<f64>() / n as f64,
            p99: percentile(&v, 0.99),
        }
    }

    /// `median (min–max)` in ms.
    pub fn cell(&self) -> String {
        if self.n == 0 {
            return "n/a".into();
        }
        format!(
            "{} ({}–{})",
            fmt_ms(self.median),
            fmt_ms(self.min),
            fmt_ms(self.max)
        )
    }
}

/// Nearest-rank percentile of a sorted slice.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The middle value (the upper one of an even count) of unsorted samples.
pub fn median_of(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Nearest-rank percentile of unsorted samples.
pub fn percentile_of(xs: &[f64], q: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, q)
}

/// Milliseconds with a precision that suits their size.
pub fn fmt_ms(ms: f64) -> String {
    if !ms.is_finite() {
        "n/a".into()
    } else if ms < 1.0 {
        format!("{ms:.3}")
    } else if ms < 100.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.0}")
    }
}

/// A rate or count with thousands grouping and no decimals (1 decimal under 100).
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    if x.abs() < 100.0 {
        return format!("{x:.1}");
    }
    let s = format!("{:.0}", x);
    let (sign, digits) = s.strip_prefix('-').map(|d| ("-", d)).unwrap_or(("", &s));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// An integer count with thousands grouping.
pub fn fmt_int(x: i64) -> String {
    if x.abs() < 100 {
        return x.to_string();
    }
    fmt_num(x as f64)
}

/// Ratio with two decimals.
pub fn fmt_ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() && b.is_finite() {
        format!("{:.2}×", a / b)
    } else {
        "n/a".into()
    }
}

/// The workspace root: two levels above this crate's manifest.
pub fn workspace_root() -> std::path::PathBuf {
    let here = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .and_then(|p| p.parent())
        .map(std::path::PathBuf::from)
        .unwrap_or(here)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_formatting() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]);
        assert_eq!(s.median, 2.5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert_eq!(s.p99, 10.0);
        assert_eq!(fmt_num(1234567.0), "1,234,567");
        assert_eq!(fmt_num(999.4), "999");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_ratio(3.0, 1.5), "2.00×");
    }
}
