//! The sampler of the history behind `/api/v1/status` and `/api/v1/analytics/*`
//! (docs/observability.md). Every `QUEEN_HISTORY_SAMPLE_MS` it reads the counters the
//! broker keeps anyway (for `/metrics`), and adds their growth since its last sample,
//! with the gauges of the moment (CPU, memory, pool, parked long-polls), to its row of
//! the current minute (`queen.history_record_v1`). Once a minute the first broker to get
//! there files a snapshot of every queue (`queen.history_queues_v1`) from the same
//! statistics `/metrics` renders. Nothing here runs on a push, pop or ack: the hot path
//! only bumps the counters it bumped before.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use serde_json::{json, Value};

use crate::db::Db;
use crate::error::ApiError;
use crate::ops::metrics::Metrics;
use crate::ops::process;
use crate::ops::queue_stats::{load, QueueStats};
use crate::ops::queue_views::queue_figures;

/// The counters the history adds up, as they stand (they only grow).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub push_requests: u64,
    pub push_messages: u64,
    pub pop_requests: u64,
    pub pop_messages: u64,
    pub pop_empty: u64,
    pub ack_requests: u64,
    pub ack_messages: u64,
    pub transactions: u64,
    pub dlq: u64,
    pub server_errors: u64,
    pub db_errors: u64,
    pub cpu_user_us: u64,
    pub cpu_system_us: u64,
}

impl Counters {
    /// The requests answered, by (method, route template, status), into the request
    /// counters: pushes, pops (204: empty), acks, transactions, 5xx and 503 (the
    /// database unavailable, or the broker refusing while it is).
    pub fn add_requests(&mut self, requests: &BTreeMap<(String, String, u16), u64>) {
        for ((_, route, status), n) in requests {
            let n = *n;
            match route.as_str() {
                "/api/v1/push" => self.push_requests += n,
                r if r.starts_with("/api/v1/pop") => {
                    self.pop_requests += n;
                    if *status == 204 {
                        self.pop_empty += n;
                    }
                }
                "/api/v1/ack" | "/api/v1/ack/batch" => self.ack_requests += n,
                "/api/v1/transaction" => self.transactions += n,
                _ => {}
            }
            if *status >= 500 {
                self.server_errors += n;
            }
            if *status == 503 {
                self.db_errors += n;
            }
        }
    }

    /// What grew from `before` to `self` (a counter never shrinks; if one did, the
    /// broker restarted and what it holds now is the growth).
    pub fn since(&self, before: &Counters) -> Counters {
        let d = |now: u64, was: u64| if now >= was { now - was } else { now };
        Counters {
            push_requests: d(self.push_requests, before.push_requests),
            push_messages: d(self.push_messages, before.push_messages),
            pop_requests: d(self.pop_requests, before.pop_requests),
            pop_messages: d(self.pop_messages, before.pop_messages),
            pop_empty: d(self.pop_empty, before.pop_empty),
            ack_requests: d(self.ack_requests, before.ack_requests),
            ack_messages: d(self.ack_messages, before.ack_messages),
            transactions: d(self.transactions, before.transactions),
            dlq: d(self.dlq, before.dlq),
            server_errors: d(self.server_errors, before.server_errors),
            db_errors: d(self.db_errors, before.db_errors),
            cpu_user_us: d(self.cpu_user_us, before.cpu_user_us),
            cpu_system_us: d(self.cpu_system_us, before.cpu_system_us),
        }
    }
}

/// The gauges of the moment.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub rss_bytes: u64,
    pub pool_size: usize,
    pub pool_idle: usize,
    pub parked: usize,
    /// The long-polls parked per (tenant, queue), queues with none left out.
    pub parked_queues: Vec<(uuid::Uuid, String, usize)>,
}

/// One sample as `history_record_v1` takes it.
pub fn sample_json(d: &Counters, g: &Gauges) -> Value {
    json!({
        "pushRequests": d.push_requests, "pushMessages": d.push_messages,
        "popRequests": d.pop_requests, "popMessages": d.pop_messages, "popEmpty": d.pop_empty,
        "ackRequests": d.ack_requests, "ackMessages": d.ack_messages,
        "transactions": d.transactions, "dlq": d.dlq,
        "serverErrors": d.server_errors, "dbErrors": d.db_errors,
        "cpuUserUs": d.cpu_user_us, "cpuSystemUs": d.cpu_system_us,
        "rssBytes": g.rss_bytes, "poolSize": g.pool_size, "poolIdle": g.pool_idle,
        "parked": g.parked,
        "parkedQueues": g.parked_queues.iter()
            .map(|(t, q, n)| json!({"tenantId": t, "queue": q, "parked": n}))
            .collect::<Vec<_>>(),
    })
}

/// One queue's snapshot as `history_queues_v1` takes it: `pushed` counts every offset
/// ever assigned in its partitions, `consumed` every message consumed over its groups.
pub fn queue_row(q: &QueueStats) -> Value {
    let f = queue_figures(q);
    let pushed: i64 = q.partitions.iter().map(|p| p.stats.last_offset + 1).sum();
    let cursors = || q.cursors().map(|(_, c)| c);
    let consumed: i64 = cursors().map(|c| c.total_consumed).sum();
    let lag: i64 = cursors().map(|c| c.lag).sum();
    let oldest = cursors()
        .filter(|c| c.lag > 0)
        .filter_map(|c| c.oldest_unconsumed_age_s)
        .chain(q.partitions.iter().filter_map(|p| p.stats.oldest_age_s))
        .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))));
    json!({
        "queueId": q.meta.id, "tenantId": q.meta.tenant, "queue": q.meta.name,
        "namespace": q.meta.namespace, "task": q.meta.task,
        "partitions": q.partitions.len(), "groups": q.groups().len(),
        "messages": f.total, "pushed": pushed.max(0), "consumed": consumed, "lag": lag,
        "oldestAgeS": oldest.map(|a| a.round() as i64), "dlq": f.dead_letter,
        "dlqPartitions": q.partitions.iter()
            .filter(|p| p.stats.cursors.iter().any(|c| c.dlq > 0)).count(),
        "leases": cursors().filter(|c| c.leased).count(),
        "leasedPartitions": q.partitions.iter()
            .filter(|p| p.stats.cursors.iter().any(|c| c.leased)).count(),
        "leasedMessages": cursors().filter(|c| c.leased).map(|c| c.leased_messages).sum::<i64>(),
    })
}

/// A broker as the history names it.
#[derive(Debug, Clone)]
pub struct BrokerName {
    /// `hostname:port`: unique per broker of a database.
    pub name: String,
    pub hostname: String,
    pub port: i32,
}

/// This broker's name in the history: `hostname:port`.
pub fn broker_name(listen: &str) -> BrokerName {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let port = listen
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(0);
    BrokerName {
        name: format!("{hostname}:{port}"),
        hostname,
        port,
    }
}

/// The counters as they stand now.
pub fn counters(m: &Metrics) -> Counters {
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let mut c = Counters {
        push_messages: load(&m.messages_pushed),
        pop_messages: load(&m.messages_popped),
        ack_messages: load(&m.acks_sql) + load(&m.acks_fast),
        dlq: load(&m.dlq_filed),
        ..Counters::default()
    };
    c.add_requests(&m.requests_snapshot());
    let u = process::usage();
    c.cpu_user_us = u.user_us;
    c.cpu_system_us = u.system_us;
    c
}

/// The gauges of the moment: the process's memory, the pool, the long-polls parked per
/// (tenant, queue) and in all.
pub fn gauges(db: &Db, parked_queues: Vec<(uuid::Uuid, String, usize)>) -> Gauges {
    let pool = db.pool().status();
    Gauges {
        rss_bytes: process::usage().rss_bytes,
        pool_size: pool.size,
        pool_idle: pool.available,
        parked: parked_queues.iter().map(|(_, _, n)| n).sum(),
        parked_queues,
    }
}

/// Samples every `every_ms` (0: never) until `stop` resolves; `read` gives the counters
/// and gauges of the moment. The first sample is taken one interval after start, from
/// the counters at start; the first queue snapshot in the first minute that begins after
/// start.
pub fn start(
    db: Db,
    every_ms: u64,
    me: BrokerName,
    read: impl Fn() -> (Counters, Gauges) + Send + Sync + 'static,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    if every_ms == 0 {
        return;
    }
    tokio::spawn(async move {
        let run = async {
            let mut before = read().0;
            // The first snapshot waits for the next minute: brokers started together (a
            // deploy, a restart) do not each read every queue's statistics at once.
            let mut filed_minute = Some(chrono::Utc::now().timestamp() / 60);
            loop {
                tokio::time::sleep(Duration::from_millis(every_ms)).await;
                let (now, g) = read();
                match sample(&db, &me, &now.since(&before), &g).await {
                    // What the database did not take is added to the next sample.
                    Ok(()) => before = now,
                    Err(e) => tracing::debug!("history sample not recorded: {e}"),
                }
                let minute = chrono::Utc::now().timestamp() / 60;
                if filed_minute != Some(minute) {
                    match snapshot(&db, false).await {
                        Ok(_) => filed_minute = Some(minute),
                        Err(e) => tracing::debug!("queue snapshot not filed: {e}"),
                    }
                }
            }
        };
        tokio::select! {
            _ = run => {}
            _ = stop => {}
        }
    });
}

async fn sample(db: &Db, me: &BrokerName, d: &Counters, g: &Gauges) -> Result<(), ApiError> {
    let s = sample_json(d, g);
    let pid = std::process::id() as i32;
    db.conn()
        .await?
        .history_record(&me.name, &me.hostname, me.port, pid, &s)
        .await?;
    Ok(())
}

/// Files this minute's queue snapshot unless another broker did (`replace`: over it);
/// whether this one did.
pub async fn snapshot(db: &Db, replace: bool) -> Result<bool, ApiError> {
    let queues = load(db, None, None).await?;
    let rows: Vec<Value> = queues.iter().map(queue_row).collect();
    Ok(db
        .conn()
        .await?
        .history_queues(&Value::Array(rows), replace)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(rows: &[(&str, u16, u64)]) -> BTreeMap<(String, String, u16), u64> {
        rows.iter()
            .map(|(r, s, n)| (("GET".to_string(), r.to_string(), *s), *n))
            .collect()
    }

    #[test]
    fn requests_are_classified_by_route_and_status() {
        let mut c = Counters::default();
        c.add_requests(&requests(&[
            ("/api/v1/push", 201, 5),
            ("/api/v1/push", 503, 2),
            ("/api/v1/pop/queue/{queue}", 200, 3),
            ("/api/v1/pop/queue/{queue}", 204, 4),
            ("/api/v1/pop", 204, 1),
            ("/api/v1/ack", 200, 6),
            ("/api/v1/ack/batch", 200, 1),
            ("/api/v1/transaction", 200, 2),
            ("/api/v1/resources/queues", 500, 1),
        ]));
        assert_eq!(c.push_requests, 7);
        assert_eq!(c.pop_requests, 8);
        assert_eq!(c.pop_empty, 5);
        assert_eq!(c.ack_requests, 7);
        assert_eq!(c.transactions, 2);
        assert_eq!(c.server_errors, 3);
        assert_eq!(c.db_errors, 2);
    }

    #[test]
    fn growth_is_the_difference_and_a_restart_counts_from_zero() {
        let was = Counters {
            push_messages: 10,
            ack_messages: 4,
            ..Counters::default()
        };
        let now = Counters {
            push_messages: 25,
            ack_messages: 3,
            ..Counters::default()
        };
        let d = now.since(&was);
        assert_eq!(d.push_messages, 15);
        assert_eq!(d.ack_messages, 3);
    }

    #[test]
    fn the_broker_is_named_by_host_and_port() {
        let b = broker_name("0.0.0.0:6632");
        assert_eq!(b.port, 6632);
        assert_eq!(b.name, format!("{}:6632", b.hostname));
    }
}
