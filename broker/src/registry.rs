//! Ack registry (broker.md §3): what this process delivered on each leasing pop, so that
//! an ack of exactly that batch can be one positional advance instead of a by-hash
//! resolution. A pure accelerator: every miss, and every row the database refuses,
//! falls back to the SQL path.
//!
//! Keyed (partition_id, consumer_group). Born on a leasing pop that delivered frames
//! (never for autoAck, never when two frames of the batch share a transactionId); dies on
//! a fast-path hit, on an SQL-path outcome of the same worker, on TTL (lease + 10 s),
//! on LRU eviction under the byte cap, or on overwrite. Sweeps run on insert, at most
//! every 5 s: there is no background task. One global mutex; callers build their hash
//! sets before taking it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use queen_log::hash::{txn_hash, TxnHash};
use uuid::Uuid;

use crate::config::Config;

/// TTL slack beyond the lease, and the lease assumed when the pop used the queue default.
const TTL_SLACK: Duration = Duration::from_secs(10);
const UNKNOWN_LEASE_SECS: u64 = 300;
const SWEEP_EVERY: Duration = Duration::from_secs(5);
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Rough per-entry overhead (key, strings, map slots) for the byte cap.
const ENTRY_OVERHEAD: usize = 160;

/// One partition's share of a leasing pop, as the pop handler reports it.
pub struct Delivered {
    pub partition_id: Uuid,
    pub group: String,
    pub worker: String,
    /// Inclusive last delivered offset.
    pub batch_end: i64,
    /// The lease length asked for; None = the queue's default (unknown here).
    pub lease_seconds: Option<i32>,
    pub txns: Vec<String>,
}

type Key = (Uuid, String);

struct Entry {
    worker: String,
    batch_end: i64,
    hashes: HashSet<TxnHash>,
    expires: Instant,
    seq: u64,
    bytes: usize,
}

#[derive(Default)]
struct Map {
    entries: HashMap<Key, Entry>,
    /// Insertion order for LRU eviction: an entry is read at most once (a hit removes
    /// it), so insertion order is recency order.
    order: BTreeMap<u64, Key>,
    bytes: usize,
    next_seq: u64,
    last_sweep: Option<Instant>,
    hits: u64,
    misses: u64,
    last_log: Option<Instant>,
}

/// The registry; see the module docs.
pub struct Registry {
    enabled: bool,
    cap_bytes: usize,
    map: Mutex<Map>,
}

impl Registry {
    /// An empty registry, enabled per `QUEEN_ACK_REGISTRY`, capped per `QUEEN_ACK_REGISTRY_MB`.
    pub fn new(config: &Config) -> Self {
        Registry {
            enabled: config.ack_registry && config.ack_registry_mb > 0,
            cap_bytes: config.ack_registry_mb.saturating_mul(1024 * 1024),
            map: Mutex::new(Map::default()),
        }
    }

    /// Whether the fast path may be attempted at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Records the batches of one leasing pop (one entry per partition).
    pub fn record(&self, delivered: Vec<Delivered>) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let built: Vec<(Key, Entry)> = delivered
            .into_iter()
            .filter_map(|d| build_entry(d, now))
            .collect();
        let mut m = self.map.lock().expect("registry poisoned");
        m.maybe_sweep(now);
        for (key, mut e) in built {
            e.seq = m.next_seq;
            m.next_seq += 1;
            m.remove(&key);
            m.bytes += e.bytes;
            m.order.insert(e.seq, key.clone());
            m.entries.insert(key, e);
        }
        while m.bytes > self.cap_bytes {
            let Some((_, key)) = m.order.pop_first() else {
                break;
            };
            m.remove(&key);
        }
    }

    /// The fast-path test: when the entry's worker is `worker` and its delivered set
    /// equals `hashes`, consume the entry and return its batch_end.
    pub fn take_if_match(
        &self,
        pid: Uuid,
        group: &str,
        worker: &str,
        hashes: &HashSet<TxnHash>,
    ) -> Option<i64> {
        if !self.enabled {
            return None;
        }
        let key = (pid, group.to_string());
        let now = Instant::now();
        let mut m = self.map.lock().expect("registry poisoned");
        let hit = m
            .entries
            .get(&key)
            .is_some_and(|e| e.worker == worker && e.expires > now && e.hashes == *hashes);
        let out = if hit {
            m.hits += 1;
            m.remove(&key).map(|e| e.batch_end)
        } else {
            m.misses += 1;
            None
        };
        m.maybe_log(now);
        out
    }

    /// The SQL path ran for (pid, group) with `worker`: that entry can no longer be right.
    pub fn evict_if_worker(&self, pid: Uuid, group: &str, worker: &str) {
        if !self.enabled {
            return;
        }
        let key = (pid, group.to_string());
        let mut m = self.map.lock().expect("registry poisoned");
        if m.entries.get(&key).is_some_and(|e| e.worker == worker) {
            m.remove(&key);
        }
    }

    /// Number of live entries (for tests and diagnostics).
    pub fn len(&self) -> usize {
        self.map.lock().expect("registry poisoned").entries.len()
    }

    /// Whether the registry holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Builds an entry off-lock; None when two frames share a transactionId (the by-hash
/// path would resolve such a batch to a partial ack, which the fast path cannot mimic).
fn build_entry(d: Delivered, now: Instant) -> Option<(Key, Entry)> {
    let hashes: HashSet<TxnHash> = d.txns.iter().map(|t| txn_hash(t)).collect();
    if hashes.len() != d.txns.len() || hashes.is_empty() {
        return None;
    }
    let lease = d
        .lease_seconds
        .map_or(UNKNOWN_LEASE_SECS, |s| s.max(1) as u64);
    let bytes = ENTRY_OVERHEAD + d.group.len() + d.worker.len() + 16 * hashes.len();
    Some((
        (d.partition_id, d.group),
        Entry {
            worker: d.worker,
            batch_end: d.batch_end,
            hashes,
            expires: now + Duration::from_secs(lease) + TTL_SLACK,
            seq: 0,
            bytes,
        },
    ))
}

impl Map {
    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        self.order.remove(&e.seq);
        self.bytes -= e.bytes;
        Some(e)
    }

    fn maybe_sweep(&mut self, now: Instant) {
        if self
            .last_sweep
            .is_some_and(|t| now.duration_since(t) < SWEEP_EVERY)
        {
            return;
        }
        self.last_sweep = Some(now);
        let dead: Vec<Key> = self
            .entries
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in dead {
            self.remove(&k);
        }
    }

    fn maybe_log(&mut self, now: Instant) {
        if self
            .last_log
            .is_some_and(|t| now.duration_since(t) < LOG_EVERY)
        {
            return;
        }
        self.last_log = Some(now);
        let total = self.hits + self.misses;
        tracing::info!(
            hits = self.hits,
            misses = self.misses,
            entries = self.entries.len(),
            "ack registry hit rate {:.1}%",
            if total == 0 {
                0.0
            } else {
                100.0 * self.hits as f64 / total as f64
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(mb: usize) -> Registry {
        let mut c = Config::for_database("postgres://x@y/z");
        c.ack_registry_mb = mb;
        Registry::new(&c)
    }

    fn delivered(pid: Uuid, worker: &str, txns: &[&str]) -> Delivered {
        Delivered {
            partition_id: pid,
            group: "g".into(),
            worker: worker.into(),
            batch_end: 7,
            lease_seconds: Some(30),
            txns: txns.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn set(txns: &[&str]) -> HashSet<TxnHash> {
        txns.iter().map(|t| txn_hash(t)).collect()
    }

    #[test]
    fn hit_requires_same_worker_and_set_and_consumes() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        r.record(vec![delivered(pid, "w", &["a", "b"])]);
        assert_eq!(r.take_if_match(pid, "g", "other", &set(&["a", "b"])), None);
        assert_eq!(r.take_if_match(pid, "g", "w", &set(&["a"])), None);
        assert_eq!(r.take_if_match(pid, "g", "w", &set(&["b", "a"])), Some(7));
        assert_eq!(r.take_if_match(pid, "g", "w", &set(&["b", "a"])), None);
    }

    #[test]
    fn repeated_txn_batches_are_not_registered() {
        let r = reg(1);
        r.record(vec![delivered(Uuid::now_v7(), "w", &["a", "a"])]);
        assert!(r.is_empty());
    }

    #[test]
    fn eviction_keeps_under_cap() {
        let r = reg(1);
        for _ in 0..20_000 {
            r.record(vec![delivered(Uuid::now_v7(), "w", &["a", "b", "c"])]);
        }
        let m = r.map.lock().unwrap();
        assert!(m.bytes <= 1024 * 1024);
        assert_eq!(m.entries.len(), m.order.len());
    }

    #[test]
    fn evict_only_same_worker() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        r.record(vec![delivered(pid, "w", &["a"])]);
        r.evict_if_worker(pid, "g", "x");
        assert_eq!(r.len(), 1);
        r.evict_if_worker(pid, "g", "w");
        assert!(r.is_empty());
    }
}
