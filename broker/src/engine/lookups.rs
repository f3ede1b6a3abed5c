//! The push's lookup, remembered for a short while (`QUEEN_LOOKUP_CACHE_MS`,
//! docs/decisions.md, "The push's lookup").
//!
//! Before it pushes, a push needs each partition's id (the dedup cache's key), its
//! queue's dedup window and its queue's encryption switch (crate::engine::push). Read on
//! every request, that is a round trip before the write at one message per push. This
//! cache keeps what a lookup found for existing partitions, per (tenant, queue,
//! partition), for `ttl`. A stale entry can cost work but never an answer:
//! - the dedup watermark a push sends names the partition id and the window it was
//!   computed for, and the extension trusts it only for that partition under a window no
//!   longer than that (a partition deleted and pushed again, a window raised: the whole
//!   window is probed);
//! - a queue that began encrypting refuses a plaintext frame (QENC, nothing written), and
//!   a push whose lookup came from here then looks up afresh and seals (engine/push.rs);
//! - a queue that stopped encrypting takes a sealed frame, which a pop opens by its flag.
//!
//! Partitions not found yet are not remembered: their push creates them, and the next
//! push's lookup finds them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// Partitions remembered at most; a full cache starts again empty (a miss costs one
/// lookup). Names are at most 255 bytes each (queen_log::names), so a client pushing to
/// ever new partitions holds it under about 10 MB.
const CAPACITY: usize = 16_384;

/// What a lookup found for one existing partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    pub pid: Uuid,
    /// The queue's dedup window, seconds.
    pub window: i32,
    pub encrypts: bool,
}

/// Counters for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LookupStats {
    /// Partitions of push requests answered here, and those looked up in the database.
    pub hits: u64,
    pub misses: u64,
}

/// tenant → queue → partition → (what was found, when).
type Map = HashMap<Uuid, HashMap<String, HashMap<String, (Known, Instant)>>>;

/// See the module docs.
pub struct LookupCache {
    ttl: Duration,
    inner: Mutex<(Map, usize)>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl LookupCache {
    /// `ttl_ms` = 0: off, every push looks its partitions up.
    pub fn new(ttl_ms: u64) -> Self {
        LookupCache {
            ttl: Duration::from_millis(ttl_ms),
            inner: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        !self.ttl.is_zero()
    }

    /// What a lookup younger than the ttl found for this partition.
    pub fn get(&self, tenant: Uuid, queue: &str, partition: &str) -> Option<Known> {
        self.get_at(tenant, queue, partition, Instant::now())
    }

    fn get_at(&self, tenant: Uuid, queue: &str, partition: &str, now: Instant) -> Option<Known> {
        if !self.enabled() {
            return None;
        }
        let inner = self.inner.lock().expect("lookup cache lock");
        let found = inner
            .0
            .get(&tenant)
            .and_then(|qs| qs.get(queue))
            .and_then(|ps| ps.get(partition))
            .filter(|(_, at)| now.duration_since(*at) < self.ttl)
            .map(|(k, _)| *k);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Remembers what a lookup just found.
    pub fn put(&self, tenant: Uuid, queue: &str, partition: &str, known: Known) {
        self.put_at(tenant, queue, partition, known, Instant::now());
    }

    fn put_at(&self, tenant: Uuid, queue: &str, partition: &str, known: Known, now: Instant) {
        if !self.enabled() {
            return;
        }
        let mut inner = self.inner.lock().expect("lookup cache lock");
        let (map, len) = &mut *inner;
        let known_already = map
            .get(&tenant)
            .and_then(|qs| qs.get(queue))
            .is_some_and(|ps| ps.contains_key(partition));
        if *len >= CAPACITY && !known_already {
            map.clear();
            *len = 0;
        }
        let old = map
            .entry(tenant)
            .or_default()
            .entry(queue.to_owned())
            .or_default()
            .insert(partition.to_owned(), (known, now));
        *len += usize::from(old.is_none());
    }

    /// Forgets a queue's partitions: a lookup from here was refused as stale.
    pub fn forget_queue(&self, tenant: Uuid, queue: &str) {
        let mut inner = self.inner.lock().expect("lookup cache lock");
        let (map, len) = &mut *inner;
        if let Some(gone) = map.get_mut(&tenant).and_then(|qs| qs.remove(queue)) {
            *len -= gone.len();
        }
    }

    pub fn stats(&self) -> LookupStats {
        LookupStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(n: u8) -> Known {
        Known {
            pid: Uuid::from_bytes([n; 16]),
            window: 3600,
            encrypts: false,
        }
    }

    #[test]
    fn an_entry_lives_for_its_ttl_only() {
        let c = LookupCache::new(1000);
        let (t, t0) = (Uuid::nil(), Instant::now());
        c.put_at(t, "q", "p", known(1), t0);
        assert_eq!(
            c.get_at(t, "q", "p", t0 + Duration::from_millis(999)),
            Some(known(1))
        );
        assert_eq!(
            c.get_at(t, "q", "p", t0 + Duration::from_millis(1000)),
            None
        );
        assert_eq!(
            c.get_at(Uuid::from_bytes([9; 16]), "q", "p", t0),
            None,
            "another tenant"
        );
        assert_eq!(c.stats(), LookupStats { hits: 1, misses: 2 });
    }

    #[test]
    fn off_remembers_nothing() {
        let c = LookupCache::new(0);
        c.put(Uuid::nil(), "q", "p", known(1));
        assert_eq!(c.get(Uuid::nil(), "q", "p"), None);
    }

    #[test]
    fn a_forgotten_queue_is_looked_up_again_and_others_stay() {
        let c = LookupCache::new(60_000);
        let t = Uuid::nil();
        c.put(t, "q", "p", known(1));
        c.put(t, "q", "p2", known(2));
        c.put(t, "r", "p", known(3));
        c.forget_queue(t, "q");
        assert_eq!(c.get(t, "q", "p"), None);
        assert_eq!(c.get(t, "r", "p"), Some(known(3)));
        assert_eq!(c.inner.lock().unwrap().1, 1);
    }

    #[test]
    fn a_full_cache_starts_again() {
        let c = LookupCache::new(60_000);
        let t = Uuid::nil();
        for i in 0..CAPACITY {
            c.put(t, "q", &i.to_string(), known(1));
        }
        c.put(t, "q", "0", known(2));
        assert_eq!(
            c.inner.lock().unwrap().1,
            CAPACITY,
            "a replaced entry is not counted"
        );
        c.put(t, "q", "new", known(3));
        assert_eq!(c.inner.lock().unwrap().1, 1);
        assert_eq!(c.get(t, "q", "new"), Some(known(3)));
    }
}
