//! Prometheus counters. Plain atomics and one small mutex-guarded map: no metrics crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counters exposed at `GET /metrics`.
#[derive(Default)]
pub struct Metrics {
    /// (method, route, status) → count.
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    pub acks_sql: AtomicU64,
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

    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP queen_http_requests_total HTTP requests answered.\n");
        out.push_str("# TYPE queen_http_requests_total counter\n");
        for ((method, route, status), n) in self.requests.lock().expect("metrics poisoned").iter() {
            let _ = writeln!(
                out,
                "queen_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP queen_acks_total Acknowledged items by path.\n");
        out.push_str("# TYPE queen_acks_total counter\n");
        for (path, c) in [("sql", &self.acks_sql), ("fast", &self.acks_fast)] {
            let _ = writeln!(
                out,
                "queen_acks_total{{path=\"{path}\"}} {}",
                c.load(Ordering::Relaxed)
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
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                c.load(Ordering::Relaxed)
            );
        }
        out
    }
}
