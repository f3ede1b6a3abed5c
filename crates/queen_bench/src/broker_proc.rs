//! The broker under test as a child process (the real release binary), configured through
//! its environment, its log captured to a file, its RSS read from /proc.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::common::{to_s, BResult};

pub struct Broker {
    child: Child,
    pub pid: u32,
    pub base: String,
    pub http: reqwest::Client,
}

/// A port that was free a moment ago.
fn free_port() -> BResult<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(to_s)?;
    Ok(l.local_addr().map_err(to_s)?.port())
}

/// An HTTP client sized for hundreds of concurrent consumers.
pub fn http_client() -> BResult<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(to_s)
}

impl Broker {
    /// Starts the broker with `env` on a free port and waits for `/health`.
    pub async fn start(
        bin: &Path,
        database_url: &str,
        env: &[(&str, &str)],
        log: &Path,
    ) -> BResult<Broker> {
        if !bin.exists() {
            return Err(format!(
                "broker binary {} not found: build it with `cargo build --release -p queen_broker` or pass --broker-bin",
                bin.display()
            ));
        }
        let port = free_port()?;
        let logf = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = Command::new(bin);
        cmd.env("QUEEN_DATABASE_URL", database_url)
            .env("QUEEN_LISTEN", format!("127.0.0.1:{port}"))
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(logf.try_clone().map_err(to_s)?)
            .stderr(logf)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", bin.display()))?;
        let pid = child.id().ok_or("broker exited at once")?;
        let b = Broker {
            child,
            pid,
            base: format!("http://127.0.0.1:{port}"),
            http: http_client()?,
        };
        wait_healthy(&b.http, &b.base, 20, log).await?;
        Ok(b)
    }

    /// A `/proc/<pid>/status` field in kB (VmRSS, VmHWM).
    pub fn status_kb(&self, field: &str) -> Option<u64> {
        proc_status_kb(self.pid, field)
    }

    /// The Prometheus text of `/metrics` as (series with labels) → value.
    pub async fn metrics(&self) -> BResult<HashMap<String, f64>> {
        let text = self
            .http
            .get(format!("{}/metrics/prometheus", self.base))
            .send()
            .await
            .map_err(to_s)?
            .text()
            .await
            .map_err(to_s)?;
        Ok(parse_prometheus(&text))
    }

    /// SIGTERM (graceful drain), then SIGKILL after 10 s.
    pub async fn stop(self) {
        stop_child(self.child, self.pid).await;
    }
}

/// Waits until a server answers `GET /health` with success, for `secs` at most.
pub async fn wait_healthy(
    http: &reqwest::Client,
    base: &str,
    secs: u64,
    log: &Path,
) -> BResult<()> {
    let t = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/health")).send().await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        if t.elapsed() > Duration::from_secs(secs) {
            return Err(format!(
                "{base} did not become healthy in {secs} s (log: {})",
                log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGTERM (graceful drain), then SIGKILL after 10 s.
pub async fn stop_child(mut child: Child, pid: u32) {
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// CPU seconds (user + system) a process has used: `/proc/<pid>/stat` fields 14 and 15,
/// in USER_HZ ticks (100 per second on Linux whatever the kernel's HZ).
pub fn proc_cpu_secs(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

pub fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.trim().to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The sum of every series whose name (before labels) matches `pred`, and whether any did.
pub fn metric_sum(m: &HashMap<String, f64>, pred: impl Fn(&str, &str) -> bool) -> Option<f64> {
    let mut found = false;
    let mut sum = 0.0;
    for (k, v) in m {
        let (name, labels) = k.split_once('{').unwrap_or((k.as_str(), ""));
        if pred(name, labels) {
            found = true;
            sum += v;
        }
    }
    found.then_some(sum)
}

/// Samples VmRSS every 50 ms until stopped; keeps the peak (kB).
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
}

impl RssSampler {
    pub fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(proc_status_kb(pid, "VmRSS").unwrap_or(0)));
        let (s, p) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Some(kb) = proc_status_kb(pid, "VmRSS") {
                    p.fetch_max(kb, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        RssSampler { stop, peak }
    }

    /// Stops sampling; returns the peak in kB.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.peak.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_parsing() {
        let m = parse_prometheus(
            "# HELP x\nqueen_acks_total{path=\"fast\"} 12\nqueen_acks_total{path=\"sql\"} 3\nqueen_ack_fusion_commits_total 4\n",
        );
        assert_eq!(metric_sum(&m, |n, _| n == "queen_acks_total"), Some(15.0));
        assert_eq!(
            metric_sum(&m, |n, l| n == "queen_acks_total" && l.contains("fast")),
            Some(12.0)
        );
        assert_eq!(
            metric_sum(&m, |n, _| n.contains("fusion") && n.contains("commit")),
            Some(4.0)
        );
        assert_eq!(metric_sum(&m, |n, _| n == "nope"), None);
        assert!(proc_status_kb(std::process::id(), "VmRSS").unwrap() > 0);
    }
}
