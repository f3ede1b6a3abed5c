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
