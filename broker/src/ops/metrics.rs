//! The broker's own counters and histograms, and the Prometheus text helpers. Plain
//! atomics and small mutex-guarded maps: no metrics crate. crate::ops::exposition adds the
//! gauges owned elsewhere (registry, fusion, pool, queue statistics) for `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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

/// An instant that defaults to now: when the counters began.
pub struct Started(pub std::time::Instant);

impl Default for Started {
    fn default() -> Self {
        Started(std::time::Instant::now())
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
    /// The last rendering of the queue gauges and when it was made (crate::ops::exposition).
    pub(crate) queue_gauges: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
    /// Connections over `QUEEN_MAX_CONNECTIONS`, answered 503 and closed.
    pub connections_rejected: AtomicU64,
    /// Stream cycles by outcome: committed, replayed (a retry of the last commit), refused.
    pub stream_cycles_committed: AtomicU64,
    pub stream_cycles_replayed: AtomicU64,
    pub stream_cycles_refused: AtomicU64,
    pub stream_cycles_fenced: AtomicU64,
    /// When the broker started (uptime).
    pub started: Started,
    /// Requests whose body did not arrive within `QUEEN_BODY_READ_TIMEOUT_MS` (408).
    pub body_timeouts: AtomicU64,
}

impl Metrics {
    /// Requests answered since start.
    pub fn requests_total(&self) -> u64 {
        self.requests
            .lock()
            .expect("metrics poisoned")
            .values()
            .sum()
    }

    /// The requests answered so far, by (method, route template, status).
    pub fn requests_snapshot(&self) -> BTreeMap<(String, String, u16), u64> {
        self.requests.lock().expect("metrics poisoned").clone()
    }

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
        header(
            &mut out,
            "queen_stream_cycles_total",
            "counter",
            "Stream cycles by result (replayed = a retry of the shard's last commit, applied once; \
             fenced = a cycle without an ack whose state changed since it read it, nothing written).",
        );
        for (result, c) in [
            ("committed", &self.stream_cycles_committed),
            ("replayed", &self.stream_cycles_replayed),
            ("refused", &self.stream_cycles_refused),
            ("fenced", &self.stream_cycles_fenced),
        ] {
            let _ = writeln!(
                out,
                "queen_stream_cycles_total{{result=\"{result}\"}} {}",
                load(c)
            );
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

/// A label value escaped for the exposition format.
pub(crate) fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

pub(crate) fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

pub(crate) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub(crate) fn scalar(out: &mut String, name: &str, kind: &str, help: &str, v: u64) {
    header(out, name, kind, help);
    let _ = writeln!(out, "{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

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
