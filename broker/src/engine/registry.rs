//! Ack registry (docs/broker-contract.md §3): what this process delivered on each leasing
//! pop, so that an ack of exactly that batch can be one positional advance instead of a
//! by-hash resolution. A pure accelerator: every miss, and every row the database refuses,
//! falls back to the SQL path.
//!
//! Keyed (partition_id, consumer_group). Born on a leasing pop that delivered frames
//! (never for autoAck, never when two frames of the batch share a transactionId); dies on
//! a fast-path hit, on an SQL-path outcome of the same worker, on TTL (lease + 10 s),
//! on LRU eviction under the byte cap, or on overwrite. Sweeps run on insert, at most
//! every 5 s: there is no background task. One global mutex; callers build their hash
//! sets before taking it, and so does `record`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use queen_log::hash::{txn_hash, TxnHash};
use uuid::Uuid;

use crate::config::Config;
use crate::util::table_bytes;

/// TTL slack beyond the lease, and the lease assumed when the pop used the queue default.
const TTL_SLACK: Duration = Duration::from_secs(10);
const UNKNOWN_LEASE_SECS: u64 = 300;
const SWEEP_EVERY: Duration = Duration::from_secs(5);
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Bytes of one element of the LRU order map: a (seq, key) pair in B-tree leaves of 11
/// slots (544 bytes), which appends at the high end leave about half full.
const ORDER_BYTES: usize = 96;
/// An `Arc<str>`'s two reference counts, stored with the string's bytes.
const ARC_HEADER: usize = 16;

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

/// Counters and gauges of the registry, for `/metrics` and the hit-rate log line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegistryStats {
    /// Lookups that granted the fast path.
    pub hits: u64,
    /// Lookups that did not (no entry, other worker, other set, expired).
    pub misses: u64,
    /// Live entries and their accounted bytes.
    pub entries: u64,
    pub bytes: u64,
    /// Entries recorded, and pops not registered because a transactionId repeated.
    pub recorded: u64,
    pub skipped_repeated_txn: u64,
    /// Deaths other than a hit, by cause.
    pub evicted_ttl: u64,
    pub evicted_lru: u64,
    pub evicted_overwrite: u64,
    pub evicted_sql: u64,
}

/// The group name is stored once, shared by the entry map and the LRU order map (a long
/// name cloned into both was half of a registry's memory, and charged once).
type Key = (Uuid, Arc<str>);

struct Entry {
    worker: String,
    batch_end: i64,
    hashes: HashSet<TxnHash>,
    expires: Instant,
    seq: u64,
    /// Heap bytes this entry owns: its group name, worker string and hash set table.
    bytes: usize,
}

#[derive(Default)]
struct Map {
    entries: HashMap<Key, Entry>,
    /// Insertion order for LRU eviction: an entry is read at most once (a hit removes
    /// it), so insertion order is recency order.
    order: BTreeMap<u64, Key>,
    /// Sum of the entries' own heap bytes (see [`Map::accounted`] for the whole).
    bytes: usize,
    next_seq: u64,
    last_sweep: Option<Instant>,
    stats: RegistryStats,
    last_log: Option<Instant>,
    /// hits and misses at the previous log line, for the windowed rate.
    logged: (u64, u64),
}

/// The registry; see the module docs.
pub struct Registry {
    enabled: bool,
    cap_bytes: usize,
    map: Mutex<Map>,
}

/// Why an entry died (other than a hit).
#[derive(Clone, Copy)]
enum Cause {
    Ttl,
    Lru,
    Overwrite,
    Sql,
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

    /// Records the batches of one leasing pop (one entry per (partition, group); shares
    /// of one partition reported separately are merged first). A batch in which two
    /// frames share a transactionId is not registered, and the entry of an earlier lease
    /// of that key dies with it (it cannot be right any more).
    pub fn record(&self, delivered: Vec<Delivered>) {
        if !self.enabled || delivered.is_empty() {
            return;
        }
        let now = Instant::now();
        // Off-lock: merge per key, hash, build.
        let mut merged: Vec<Delivered> = Vec::with_capacity(delivered.len());
        let mut at: HashMap<(Uuid, String), usize> = HashMap::new();
        for d in delivered {
            match at.get(&(d.partition_id, d.group.clone())) {
                Some(&i) => {
                    let m = &mut merged[i];
                    m.batch_end = m.batch_end.max(d.batch_end);
                    m.txns.extend(d.txns);
                }
                None => {
                    at.insert((d.partition_id, d.group.clone()), merged.len());
                    merged.push(d);
                }
            }
        }
        let built: Vec<(Key, Option<Entry>)> =
            merged.into_iter().map(|d| build_entry(d, now)).collect();
        let mut m = self.map.lock().expect("registry poisoned");
        m.maybe_sweep(now);
        for (key, e) in built {
            if m.remove(&key).is_some() {
                m.count(Cause::Overwrite);
            }
            let Some(mut e) = e else {
                m.stats.skipped_repeated_txn += 1;
                continue;
            };
            e.seq = m.next_seq;
            m.next_seq += 1;
            m.bytes += e.bytes;
            m.stats.recorded += 1;
            m.order.insert(e.seq, key.clone());
            m.entries.insert(key, e);
        }
        m.fit(self.cap_bytes);
    }

    /// The fast-path test: when the entry's worker is `worker`, it has not expired and its
    /// delivered set equals `hashes`, consume the entry and return its batch_end. An
    /// expired entry dies here.
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
        let key: Key = (pid, Arc::from(group));
        let now = Instant::now();
        let mut m = self.map.lock().expect("registry poisoned");
        let (expired, hit) = match m.entries.get(&key) {
            None => (false, false),
            Some(e) if e.expires <= now => (true, false),
            Some(e) => (false, e.worker == worker && e.hashes == *hashes),
        };
        if expired {
            m.remove(&key);
            m.count(Cause::Ttl);
        }
        let out = if hit {
            m.stats.hits += 1;
            m.remove(&key).map(|e| e.batch_end)
        } else {
            m.stats.misses += 1;
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
        let key: Key = (pid, Arc::from(group));
        let mut m = self.map.lock().expect("registry poisoned");
        if m.entries.get(&key).is_some_and(|e| e.worker == worker) {
            m.remove(&key);
            m.count(Cause::Sql);
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

    /// A snapshot of the counters and gauges.
    pub fn stats(&self) -> RegistryStats {
        let m = self.map.lock().expect("registry poisoned");
        RegistryStats {
            entries: m.entries.len() as u64,
            bytes: m.accounted() as u64,
            ..m.stats
        }
    }
}

/// Builds an entry off-lock; None when two frames share a transactionId (the by-hash
/// path would resolve such a batch to a partial ack, which the fast path cannot mimic).
fn build_entry(d: Delivered, now: Instant) -> (Key, Option<Entry>) {
    let key: Key = (d.partition_id, Arc::from(d.group));
    let hashes: HashSet<TxnHash> = d.txns.iter().map(|t| txn_hash(t)).collect();
    if hashes.len() != d.txns.len() || hashes.is_empty() {
        return (key, None);
    }
    let lease = d
        .lease_seconds
        .map_or(UNKNOWN_LEASE_SECS, |s| s.max(1) as u64);
    let bytes = ARC_HEADER + key.1.len() + d.worker.capacity() + table_bytes(hashes.capacity(), 16);
    let entry = Entry {
        worker: d.worker,
        batch_end: d.batch_end,
        hashes,
        expires: now + Duration::from_secs(lease) + TTL_SLACK,
        seq: 0,
        bytes,
    };
    (key, Some(entry))
}

impl Map {
    /// Everything the registry holds: the entries' heap, the entry table by its
    /// capacity (it never shrinks), and the order map.
    fn accounted(&self) -> usize {
        self.bytes
            + table_bytes(self.entries.capacity(), std::mem::size_of::<(Key, Entry)>())
            + self.order.len() * ORDER_BYTES
    }

    /// Evicts least recently recorded entries until everything fits in `cap`. Entries
    /// come and go all the time, and the table's tombstones make it double although the
    /// number of entries did not grow: a table over twice as large as its entries need
    /// is shrunk first, so the cap is not spent on empty buckets.
    fn fit(&mut self, cap: usize) {
        while self.accounted() > cap {
            let len = self.entries.len();
            if self.entries.capacity() > 2 * len + 64 {
                self.entries.shrink_to(len);
                continue;
            }
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if self.remove(&key).is_some() {
                self.count(Cause::Lru);
            }
        }
    }

    fn remove(&mut self, key: &Key) -> Option<Entry> {
        let e = self.entries.remove(key)?;
        self.order.remove(&e.seq);
        self.bytes -= e.bytes;
        Some(e)
    }

    fn count(&mut self, cause: Cause) {
        let s = &mut self.stats;
        match cause {
            Cause::Ttl => s.evicted_ttl += 1,
            Cause::Lru => s.evicted_lru += 1,
            Cause::Overwrite => s.evicted_overwrite += 1,
            Cause::Sql => s.evicted_sql += 1,
        }
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
            self.count(Cause::Ttl);
        }
    }

    /// The hit-rate line, at most every 10 s, over the lookups since the previous line.
    fn maybe_log(&mut self, now: Instant) {
        if self
            .last_log
            .is_some_and(|t| now.duration_since(t) < LOG_EVERY)
        {
            return;
        }
        self.last_log = Some(now);
        let s = self.stats;
        let (hits, misses) = (s.hits - self.logged.0, s.misses - self.logged.1);
        self.logged = (s.hits, s.misses);
        let total = hits + misses;
        tracing::info!(
            hits,
            misses,
            entries = self.entries.len(),
            bytes = self.bytes,
            evicted_ttl = s.evicted_ttl,
            evicted_lru = s.evicted_lru,
            evicted_overwrite = s.evicted_overwrite,
            evicted_sql = s.evicted_sql,
            "ack registry hit rate {:.1}%",
            if total == 0 {
                0.0
            } else {
                100.0 * hits as f64 / total as f64
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
        let s = r.stats();
        assert_eq!((s.hits, s.misses, s.entries), (1, 3, 0));
        assert!(s.bytes < 1024, "only the empty entry table is left: {s:?}");
    }

    #[test]
    fn repeated_txn_batches_are_not_registered_and_kill_the_old_lease() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        r.record(vec![delivered(pid, "old", &["x"])]);
        r.record(vec![delivered(pid, "w", &["a", "b", "a"])]);
        assert!(r.is_empty());
        let s = r.stats();
        assert_eq!((s.skipped_repeated_txn, s.evicted_overwrite), (1, 1));
        assert_eq!(r.take_if_match(pid, "g", "old", &set(&["x"])), None);
    }

    #[test]
    fn shares_of_one_partition_merge() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        let mut first = delivered(pid, "w", &["a"]);
        first.batch_end = 3;
        let second = delivered(pid, "w", &["b"]);
        r.record(vec![first, second]);
        assert_eq!(r.len(), 1);
        assert_eq!(r.take_if_match(pid, "g", "w", &set(&["b"])), None);
        assert_eq!(r.take_if_match(pid, "g", "w", &set(&["a", "b"])), Some(7));
        // A repeat across the shares is still a repeat.
        r.record(vec![
            delivered(pid, "w", &["a"]),
            delivered(pid, "w", &["a"]),
        ]);
        assert!(r.is_empty());
    }

    #[test]
    fn overwrite_replaces_the_older_lease() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        r.record(vec![delivered(pid, "w1", &["a"])]);
        r.record(vec![delivered(pid, "w2", &["b"])]);
        assert_eq!(r.len(), 1);
        assert_eq!(r.stats().evicted_overwrite, 1);
        assert_eq!(r.take_if_match(pid, "g", "w1", &set(&["a"])), None);
        assert_eq!(r.take_if_match(pid, "g", "w2", &set(&["b"])), Some(7));
    }

    #[test]
    fn expired_entries_die_on_lookup_and_on_sweep() {
        let r = reg(1);
        let (p1, p2) = (Uuid::now_v7(), Uuid::now_v7());
        r.record(vec![delivered(p1, "w", &["a"]), delivered(p2, "w", &["b"])]);
        {
            let mut m = r.map.lock().unwrap();
            let past = Instant::now() - Duration::from_millis(1);
            for e in m.entries.values_mut() {
                e.expires = past;
            }
        }
        assert_eq!(r.take_if_match(p1, "g", "w", &set(&["a"])), None);
        assert_eq!(r.len(), 1);
        r.map.lock().unwrap().last_sweep = None;
        r.record(vec![delivered(Uuid::now_v7(), "w", &["c"])]);
        assert_eq!(r.len(), 1);
        assert_eq!(r.stats().evicted_ttl, 2);
        assert_eq!(r.take_if_match(p2, "g", "w", &set(&["b"])), None);
    }

    #[test]
    fn ttl_is_lease_plus_slack() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        let before = Instant::now();
        r.record(vec![delivered(pid, "w", &["a"])]);
        let m = r.map.lock().unwrap();
        let e = &m.entries[&(pid, Arc::from("g"))];
        let ttl = e.expires.duration_since(before);
        assert!(ttl >= Duration::from_secs(40) && ttl < Duration::from_secs(41));
    }

    #[test]
    fn eviction_keeps_under_cap_oldest_first() {
        let r = reg(1);
        let first = Uuid::now_v7();
        r.record(vec![delivered(first, "w", &["a", "b", "c"])]);
        let mut last = first;
        for _ in 0..20_000 {
            last = Uuid::now_v7();
            r.record(vec![delivered(last, "w", &["a", "b", "c"])]);
        }
        {
            let m = r.map.lock().unwrap();
            assert!(m.accounted() <= 1024 * 1024);
            assert_eq!(m.entries.len(), m.order.len());
            assert_eq!(m.bytes, m.entries.values().map(|e| e.bytes).sum::<usize>());
        }
        assert!(r.stats().evicted_lru > 0);
        assert_eq!(
            r.take_if_match(first, "g", "w", &set(&["a", "b", "c"])),
            None
        );
        assert_eq!(
            r.take_if_match(last, "g", "w", &set(&["a", "b", "c"])),
            Some(7)
        );
    }

    #[test]
    fn a_long_group_name_is_stored_once_and_charged_once() {
        let r = reg(1);
        let pid = Uuid::now_v7();
        let group = "g".repeat(255);
        let mut d = delivered(pid, "w", &["a", "b"]);
        d.group = group.clone();
        r.record(vec![d]);
        let m = r.map.lock().unwrap();
        let (key, e) = m.entries.iter().next().unwrap();
        // One allocation of the name, shared by the entry map and the order map.
        assert_eq!(Arc::strong_count(&key.1), 2);
        assert!(Arc::ptr_eq(&key.1, &m.order[&e.seq].1));
        assert_eq!(
            e.bytes,
            ARC_HEADER + 255 + e.worker.capacity() + table_bytes(e.hashes.capacity(), 16)
        );
        let slot = std::mem::size_of::<(Key, Entry)>();
        assert_eq!(
            m.accounted(),
            e.bytes + table_bytes(m.entries.capacity(), slot) + ORDER_BYTES
        );
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
        assert_eq!(r.stats().evicted_sql, 1);
    }

    #[test]
    fn disabled_registry_records_nothing() {
        let r = reg(0);
        let pid = Uuid::now_v7();
        r.record(vec![delivered(pid, "w", &["a"])]);
        assert!(!r.enabled() && r.is_empty());
        assert_eq!(r.take_if_match(pid, "g", "w", &set(&["a"])), None);
    }
}
