//! Prometheus text exposition. Plain atomics and small mutex-guarded maps: no metrics
//! crate. [`render`] adds the gauges and counters owned elsewhere (ack registry, ack
//! fusion, connection pool) to the broker's own counters.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::state::AppState;

/// Upper bounds (seconds) of the request latency histogram buckets.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One (method, route) latency histogram: per-bucket (non-cumulative) counts, sum, count.
#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.buckets[i] += 1;
        }
        self.sum += secs;
        self.count += 1;
    }
}

/// Counters exposed at `GET /metrics`.
#[derive(Default)]
pub struct Metrics {
    /// (method, route, status) → count.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    /// (method, route) → latency histogram.
    latency: Mutex<BTreeMap<(String, String), Histogram>>,
    /// Ack items answered by the SQL path (`log_ack_by_hash_v1`), including fast-path
    /// attempts the database refused.
    pub acks_sql: AtomicU64,
    /// Ack items answered by the registry fast path (fused or `log_ack_at_v1`).
    pub acks_fast: AtomicU64,
    pub messages_pushed: AtomicU64,
    pub messages_duplicate: AtomicU64,
    pub messages_popped: AtomicU64,
    pub dlq_filed: AtomicU64,
    /// DLQ rows moved back into their partitions (redrive).
    pub dlq_redriven: AtomicU64,
    /// DLQ rows deleted.
    pub dlq_deleted: AtomicU64,
    /// The last rendering of the queue gauges and when it was made (see [`queue_gauges`]).
    queue_gauges: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
    /// Connections over `QUEEN_MAX_CONNECTIONS`, answered 503 and closed.
    pub connections_rejected: AtomicU64,
    /// Requests whose body did not arrive within `QUEEN_BODY_READ_TIMEOUT_MS` (408).
    pub body_timeouts: AtomicU64,
}

impl Metrics {
    /// Counts one answered request.
    pub fn request(&self, method: &str, route: &str, status: u16) {
        let mut m = self.requests.lock().expect("metrics poisoned");
        *m.entry((method.to_string(), route.to_string(), status))
            .or_default() += 1;
    }

    /// Counts one answered request and records how long it took.
    pub fn observe(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.request(method, route, status);
        let mut m = self.latency.lock().expect("metrics poisoned");
        m.entry((method.to_string(), route.to_string()))
            .or_default()
            .observe(elapsed.as_secs_f64());
    }

    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The broker's own counters (requests, latency, acks by path, messages, DLQ).
    pub fn render(&self) -> String {
        let mut out = String::new();
        header(
            &mut out,
            "queen_http_requests_total",
            "counter",
            "HTTP requests answered.",
        );
        for ((method, route, status), n) in self.requests.lock().expect("metrics poisoned").iter() {
            let _ = writeln!(
                out,
                "queen_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        header(
            &mut out,
            "queen_http_request_duration_seconds",
            "histogram",
            "HTTP request latency, from routing to the response head.",
        );
        for ((method, route), h) in self.latency.lock().expect("metrics poisoned").iter() {
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            let mut cum = 0;
            for (b, n) in BUCKETS.iter().zip(h.buckets) {
                cum += n;
                let _ = writeln!(
                    out,
                    "queen_http_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {cum}"
                );
            }
            let _ = writeln!(
                out,
                "queen_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
                 queen_http_request_duration_seconds_sum{{{labels}}} {}\n\
                 queen_http_request_duration_seconds_count{{{labels}}} {}",
                h.count, h.sum, h.count
            );
        }
        header(
            &mut out,
            "queen_acks_total",
            "counter",
            "Acknowledged items by path (fast = registry positional advance, sql = by hash).",
        );
        for (path, c) in [("fast", &self.acks_fast), ("sql", &self.acks_sql)] {
            let _ = writeln!(out, "queen_acks_total{{path=\"{path}\"}} {}", load(c));
        }
        for (name, help, c) in [
            (
                "queen_messages_pushed_total",
                "Messages queued.",
                &self.messages_pushed,
            ),
            (
                "queen_messages_duplicate_total",
                "Pushed messages found duplicate.",
                &self.messages_duplicate,
            ),
            (
                "queen_messages_popped_total",
                "Messages delivered by pops.",
                &self.messages_popped,
            ),
            (
                "queen_dlq_filed_total",
                "Messages filed to the dead-letter queue.",
                &self.dlq_filed,
            ),
            (
                "queen_dlq_redriven_total",
                "Dead-letter rows moved back into their partitions.",
                &self.dlq_redriven,
            ),
            (
                "queen_dlq_deleted_total",
                "Dead-letter rows deleted.",
                &self.dlq_deleted,
            ),
            (
                "queen_http_connections_rejected_total",
                "Connections over QUEEN_MAX_CONNECTIONS, answered 503 and closed.",
                &self.connections_rejected,
            ),
            (
                "queen_http_body_timeouts_total",
                "Requests whose body did not arrive within QUEEN_BODY_READ_TIMEOUT_MS (408).",
                &self.body_timeouts,
            ),
        ] {
            scalar(&mut out, name, "counter", help, load(c));
        }
        out
    }
}

/// The whole `/metrics` text: the broker's counters, the ack registry, ack fusion and the
/// connection pool.
pub fn render(state: &AppState) -> String {
    let mut out = state.metrics.render();
    let r = state.registry.stats();
    scalar(
        &mut out,
        "queen_ack_registry_enabled",
        "gauge",
        "1 when the ack registry (fast path) is on.",
        u64::from(state.registry.enabled()),
    );
    for (name, kind, help, v) in [
        (
            "queen_ack_registry_hits_total",
            "counter",
            "Registry lookups that granted the fast path.",
            r.hits,
        ),
        (
            "queen_ack_registry_misses_total",
            "counter",
            "Registry lookups that did not.",
            r.misses,
        ),
        (
            "queen_ack_registry_entries",
            "gauge",
            "Live registry entries.",
            r.entries,
        ),
        (
            "queen_ack_registry_bytes",
            "gauge",
            "Accounted registry memory (bytes).",
            r.bytes,
        ),
        (
            "queen_ack_registry_recorded_total",
            "counter",
            "Delivered batches registered.",
            r.recorded,
        ),
        (
            "queen_ack_registry_skipped_total",
            "counter",
            "Delivered batches not registered: a transactionId repeated in the batch.",
            r.skipped_repeated_txn,
        ),
    ] {
        scalar(&mut out, name, kind, help, v);
    }
    header(
        &mut out,
        "queen_ack_registry_evictions_total",
        "counter",
        "Registry entries that died other than by a hit, by cause.",
    );
    for (cause, v) in [
        ("ttl", r.evicted_ttl),
        ("lru", r.evicted_lru),
        ("overwrite", r.evicted_overwrite),
        ("sql", r.evicted_sql),
    ] {
        let _ = writeln!(
            out,
            "queen_ack_registry_evictions_total{{cause=\"{cause}\"}} {v}"
        );
    }
    let d = state.dedup.stats();
    for (name, kind, help, v) in [
        (
            "queen_dedup_cache_bytes",
            "gauge",
            "Accounted push dedup cache memory (bytes; QUEEN_DEDUP_CACHE_MB bounds it).",
            d.bytes,
        ),
        (
            "queen_dedup_cache_hashes",
            "gauge",
            "TransactionId hashes held by the push dedup cache.",
            d.hashes,
        ),
        (
            "queen_dedup_cache_partitions",
            "gauge",
            "Partitions held by the push dedup cache.",
            d.partitions,
        ),
        (
            "queen_dedup_cache_loads_total",
            "counter",
            "Dedup windows read from the database into the cache.",
            d.loads,
        ),
        (
            "queen_dedup_cache_skipped_total",
            "counter",
            "Pushes that did not load an evicted or refused partition (it does not fit).",
            d.skipped,
        ),
        (
            "queen_dedup_cache_too_big_total",
            "counter",
            "Loads given up: the window needs more than half the cache.",
            d.too_big,
        ),
        (
            "queen_dedup_cache_evictions_total",
            "counter",
            "Partitions evicted to keep the cache within QUEEN_DEDUP_CACHE_MB.",
            d.evicted,
        ),
        (
            "queen_dedup_cache_window_grew_total",
            "counter",
            "Cached partitions dropped because their queue's dedup window grew.",
            d.window_grew,
        ),
    ] {
        scalar(&mut out, name, kind, help, v);
    }
    let f = state.fusion.as_ref().map(|f| f.stats()).unwrap_or_default();
    scalar(
        &mut out,
        "queen_ack_fusion_enabled",
        "gauge",
        "1 when fast-path acks are fused into log_ack_multi_v1 flushes.",
        u64::from(state.fusion.is_some()),
    );
    for (name, help, v) in [
        (
            "queen_ack_fusion_commits_total",
            "Fusion flushes (log_ack_multi_v1 calls) that committed.",
            f.commits,
        ),
        (
            "queen_ack_fusion_rows_total",
            "Rows carried by committed fusion flushes.",
            f.rows,
        ),
        (
            "queen_ack_fusion_acks_total",
            "Parked acks answered by committed fusion flushes (acks - rows were folded).",
            f.acks,
        ),
        (
            "queen_ack_fusion_rejected_rows_total",
            "Fusion rows the database refused (answered through the SQL path).",
            f.rejected_rows,
        ),
        (
            "queen_ack_fusion_failed_flushes_total",
            "Fusion flushes that failed as a whole (answered through the SQL path).",
            f.failed_flushes,
        ),
    ] {
        scalar(&mut out, name, "counter", help, v);
    }
    let p = state.pool.status();
    let in_use = p.size.saturating_sub(p.available);
    for (name, help, v) in [
        (
            "queen_db_pool_in_use",
            "Pooled connections checked out.",
            in_use,
        ),
        (
            "queen_db_pool_idle",
            "Pooled connections open and idle.",
            p.available,
        ),
        ("queen_db_pool_size", "Pooled connections open.", p.size),
        (
            "queen_db_pool_max",
            "Pool capacity (QUEEN_POOL_SIZE).",
            p.max_size,
        ),
        (
            "queen_db_pool_waiting",
            "Tasks waiting for a pooled connection.",
            p.waiting,
        ),
    ] {
        scalar(&mut out, name, "gauge", help, v as u64);
    }
    out
}

/// How long one reading of the statistics serves `/metrics` scrapes: a scraper (or
/// anyone: /metrics is not authenticated) cannot make the broker query them more often.
pub const QUEUE_GAUGES_TTL: Duration = Duration::from_secs(5);
/// The fold-in label of the series beyond [`MAX_QUEUE_SERIES`].
const OTHER: &str = "__other__";

/// The per-queue and per-(queue, group) gauges from `queen.queue_stats_v1` (every
/// tenant; `tenant` is a label), rendered at most every [`QUEUE_GAUGES_TTL`]. The label
/// sets are bounded by `QUEEN_METRICS_QUEUE_SERIES` per family: the series with the
/// largest lag (per queue: pending) are shown, the rest are added up under
/// `queue="__other__"` (and `group="__other__"`), so sums stay right whatever the number
/// of queues. When the statistics cannot be read, `queen_queue_stats_up 0` only.
pub async fn queue_gauges(state: &AppState) -> String {
    let max = state.config.metrics_queue_series;
    if max == 0 {
        return String::new();
    }
    let mut cache = state.metrics.queue_gauges.lock().await;
    if let Some((at, text)) = cache.as_ref() {
        if at.elapsed() < QUEUE_GAUGES_TTL {
            return text.clone();
        }
    }
    let text = match crate::queue_stats::load(state, None, None).await {
        Ok(queues) => render_queues(&queues, max),
        Err(e) => {
            tracing::warn!("queue statistics for /metrics: {e}");
            let mut out = String::new();
            scalar(
                &mut out,
                "queen_queue_stats_up",
                "gauge",
                QUEUE_STATS_UP_HELP,
                0,
            );
            return out;
        }
    };
    *cache = Some((std::time::Instant::now(), text.clone()));
    text
}

const QUEUE_STATS_UP_HELP: &str = "1 when the queue statistics could be read for this scrape.";

/// One gauge family's values by label set, largest first, folded beyond the bound.
struct Family {
    name: &'static str,
    help: &'static str,
}

/// Per (tenant, queue, group): lag, oldest unconsumed age, leased, retries, DLQ rows.
const GROUP_FAMILIES: [Family; 5] = [
    Family {
        name: "queen_consumer_lag_messages",
        help: "Messages a consumer group has still to consume, summed over the queue's partitions.",
    },
    Family {
        name: "queen_consumer_oldest_unconsumed_age_seconds",
        help: "Age of the oldest message a consumer group has not consumed (0 when caught up).",
    },
    Family {
        name: "queen_consumer_leased_messages",
        help: "Messages under a live lease of the consumer group.",
    },
    Family {
        name: "queen_consumer_retries",
        help: "Retry budget spent on the batches at the group's cursors, summed over partitions.",
    },
    Family {
        name: "queen_consumer_dlq_messages",
        help: "Dead-letter rows the consumer group filed.",
    },
];

/// Per (tenant, queue): retained, pending (slowest reader), dead-letter, partitions.
const QUEUE_FAMILIES: [Family; 4] = [
    Family {
        name: "queen_queue_messages",
        help: "Messages retained in the queue's partitions.",
    },
    Family {
        name: "queen_queue_pending_messages",
        help: "Messages the slowest consumer of each partition has not consumed, summed.",
    },
    Family {
        name: "queen_queue_dlq_messages",
        help: "Dead-letter rows of the queue.",
    },
    Family {
        name: "queen_queue_partitions",
        help: "Partitions of the queue.",
    },
];

/// Keep at most `max` series: the largest `max − 1` (by value `rank`) and one folding the
/// rest (summed, or the maximum for the values in `fold_max`); returns how many folded.
fn bounded<K>(
    mut rows: Vec<(K, Vec<f64>)>,
    max: usize,
    rank: usize,
    other: K,
    fold_max: &[usize],
) -> (Vec<(K, Vec<f64>)>, usize) {
    rows.sort_by(|a, b| b.1[rank].total_cmp(&a.1[rank]));
    if rows.len() <= max {
        return (rows, 0);
    }
    let rest = rows.split_off(max.saturating_sub(1));
    let dropped = rest.len();
    let mut folded = vec![0.0f64; rest[0].1.len()];
    for (_, v) in &rest {
        for (i, x) in v.iter().enumerate() {
            folded[i] = if fold_max.contains(&i) {
                folded[i].max(*x)
            } else {
                folded[i] + x
            };
        }
    }
    rows.push((other, folded));
    (rows, dropped)
}

fn render_queues(queues: &[crate::queue_stats::QueueStats], max: usize) -> String {
    use queen_log::stats::{Figures, GroupTotals};
    let mut per_group: Vec<((String, String, String), Vec<f64>)> = Vec::new();
    let mut per_queue: Vec<((String, String), Vec<f64>)> = Vec::new();
    for q in queues {
        let (tenant, name) = (q.meta.tenant.to_string(), q.meta.name.clone());
        let mut f = Figures::default();
        q.partitions.iter().for_each(|p| f.add(&p.stats.figures()));
        per_queue.push((
            (tenant.clone(), name.clone()),
            vec![
                f.total as f64,
                f.pending as f64,
                f.dead_letter as f64,
                q.partitions.len() as f64,
            ],
        ));
        for g in q.groups() {
            let t = GroupTotals::of(q.cursors().filter(|(_, c)| c.group == g).map(|(_, c)| c));
            per_group.push((
                (tenant.clone(), name.clone(), g.to_string()),
                vec![
                    t.lag as f64,
                    t.max_age_s.unwrap_or(0.0),
                    t.leased_messages as f64,
                    t.retries as f64,
                    t.dlq as f64,
                ],
            ));
        }
    }
    let other = || OTHER.to_string();
    let (groups, dropped_groups) = bounded(per_group, max, 0, (other(), other(), other()), &[1]);
    let (queues, dropped_queues) = bounded(per_queue, max, 1, (other(), other()), &[]);
    let mut out = String::new();
    scalar(
        &mut out,
        "queen_queue_stats_up",
        "gauge",
        QUEUE_STATS_UP_HELP,
        1,
    );
    for (i, fam) in GROUP_FAMILIES.iter().enumerate() {
        header(&mut out, fam.name, "gauge", fam.help);
        for ((t, q, g), v) in &groups {
            let _ = writeln!(
                out,
                "{}{{tenant=\"{}\",queue=\"{}\",group=\"{}\"}} {}",
                fam.name,
                label(t),
                label(q),
                label(g),
                v[i]
            );
        }
    }
    for (i, fam) in QUEUE_FAMILIES.iter().enumerate() {
        header(&mut out, fam.name, "gauge", fam.help);
        for ((t, q), v) in &queues {
            let _ = writeln!(
                out,
                "{}{{tenant=\"{}\",queue=\"{}\"}} {}",
                fam.name,
                label(t),
                label(q),
                v[i]
            );
        }
    }
    scalar(
        &mut out,
        "queen_queue_series_folded",
        "gauge",
        "Series beyond QUEEN_METRICS_QUEUE_SERIES, added up under queue=\"__other__\".",
        (dropped_groups + dropped_queues) as u64,
    );
    out
}

/// A label value escaped for the exposition format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: u64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_series_beyond_the_bound_fold_into_one_keeping_sums_and_maxima() {
        let rows: Vec<(u32, Vec<f64>)> = (0..10)
            .map(|i| (i, vec![f64::from(i), 100.0 - f64::from(i)]))
            .collect();
        let (kept, folded) = bounded(rows.clone(), 4, 0, 99, &[1]);
        assert_eq!(folded, 7);
        assert_eq!(
            kept.iter().map(|r| r.0).collect::<Vec<_>>(),
            [9, 8, 7, 99],
            "largest first, then the fold"
        );
        assert_eq!(
            kept[3].1,
            vec![21.0, 100.0],
            "sum of 0..=6, max of the second value"
        );
        let (all, none) = bounded(rows, 10, 0, 99, &[]);
        assert_eq!((all.len(), none), (10, 0));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histogram_is_cumulative_with_inf_sum_count() {
        let m = Metrics::default();
        m.observe("GET", "/health", 200, Duration::from_micros(500));
        m.observe("GET", "/health", 200, Duration::from_millis(20));
        m.observe("GET", "/health", 503, Duration::from_secs(60));
        let text = m.render();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{needle} missing in\n{text}"))
                .to_string()
        };
        assert!(line("le=\"0.001\"").ends_with(" 1"));
        assert!(line("le=\"0.025\"").ends_with(" 2"));
        assert!(line("le=\"30\"").ends_with(" 2"));
        assert!(line("le=\"+Inf\"").ends_with(" 3"));
        assert!(line("queen_http_request_duration_seconds_count").ends_with(" 3"));
        assert!(line("status=\"503\"").ends_with(" 1"));
        assert!(text.contains("# TYPE queen_http_request_duration_seconds histogram"));
    }
}
