//! Push dedup watermark cache (contract §4, `p_verified`).
//!
//! The extension's dedup probe scans every sidecar row of the window above `p_verified`;
//! with `-1` that is O(window) per push. This cache remembers, per partition, the hashes
//! of the window's sidecar rows up to a contiguous end offset, so a push can hand the
//! extension a watermark below which nothing needs probing. PostgreSQL stays the
//! authority: the cache only narrows the scan. When an incoming hash is known at offset O,
//! the watermark drops to O − 1 so the extension itself decides (window, MIN offset).
//!
//! Why it is correct: every sidecar row that is inside the dedup window at any later probe
//! was either loaded (rows inside the window at load time, read in one snapshot together
//! with `last_offset`) or recorded from a push this broker made at the contiguous end. A
//! segment this broker did not see (another writer, a transaction push) leaves a gap; the
//! watermark never passes a gap, and too many gaps drop the partition back to a reload.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use queen_log::hash::{TxnHash, TxnHashMap};
use uuid::Uuid;

/// Bytes charged per cached hash (key, offset and table overhead).
const BYTES_PER_HASH: usize = 40;
/// Out-of-order segments held above a gap before the partition is reloaded.
const MAX_PENDING: usize = 64;

/// What the broker knows of one partition's sidecar.
struct Known {
    /// MIN offset of each hash at or below `next - 1`.
    first_seen: TxnHashMap<i64>,
    /// Every offset below this is known (loaded or recorded).
    next: i64,
    /// Segments recorded above a gap, by base offset, waiting for the gap to fill.
    pending: BTreeMap<i64, Vec<TxnHash>>,
    hashes: usize,
    last_used: u64,
}

impl Known {
    fn absorb(&mut self, base: i64, hashes: &[TxnHash]) {
        for (k, h) in hashes.iter().enumerate() {
            self.first_seen.entry(*h).or_insert(base + k as i64);
        }
        self.next = base + hashes.len() as i64;
        self.hashes += hashes.len();
    }
}

/// The cache; `None` capacity = disabled.
pub struct DedupCache {
    max_hashes: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    parts: HashMap<Uuid, Known>,
    hashes: usize,
    tick: u64,
}

impl DedupCache {
    /// `max_mb` = 0 disables the cache (every push probes its whole window).
    pub fn new(max_mb: usize) -> Self {
        DedupCache {
            max_hashes: max_mb * (1 << 20) / BYTES_PER_HASH,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.max_hashes > 0
    }

    /// The watermark for a push of `incoming` into `pid`, or `None` when the partition is
    /// not cached (the caller loads it, or pushes with -1).
    pub fn watermark(&self, pid: Uuid, incoming: &[TxnHash]) -> Option<i64> {
        let mut inner = self.inner.lock().expect("dedup cache lock");
        inner.tick += 1;
        let tick = inner.tick;
        let known = inner.parts.get_mut(&pid)?;
        known.last_used = tick;
        let first_hit = incoming
            .iter()
            .filter_map(|h| known.first_seen.get(h))
            .min()
            .copied();
        Some(first_hit.map_or(known.next - 1, |o| (o - 1).min(known.next - 1)))
    }

    /// Install a partition from one snapshot: its `last_offset` and the sidecar rows
    /// inside the dedup window. A window larger than the cache is not cached at all.
    pub fn load(&self, pid: Uuid, last_offset: i64, rows: &[(i64, Vec<TxnHash>)]) {
        let total: usize = rows.iter().map(|(_, h)| h.len()).sum();
        if total > self.max_hashes / 2 {
            return;
        }
        let mut known = Known {
            first_seen: TxnHashMap::default(),
            next: 0,
            pending: BTreeMap::new(),
            hashes: 0,
            last_used: 0,
        };
        for (base, hashes) in rows {
            known.absorb(*base, hashes);
        }
        known.next = last_offset + 1;
        let mut inner = self.inner.lock().expect("dedup cache lock");
        if let Some(old) = inner.parts.insert(pid, known) {
            inner.hashes -= old.hashes;
        }
        inner.hashes += total;
        self.evict(&mut inner, pid);
    }

    /// Record a segment this broker pushed (committed) at `base`.
    pub fn record(&self, pid: Uuid, base: i64, hashes: Vec<TxnHash>) {
        let mut inner = self.inner.lock().expect("dedup cache lock");
        let Some(known) = inner.parts.get_mut(&pid) else {
            return;
        };
        let before = known.hashes;
        let consistent = if base == known.next {
            known.absorb(base, &hashes);
            while let Some(next) = known.pending.remove(&known.next) {
                let at = known.next;
                known.absorb(at, &next);
            }
            true
        } else if base > known.next && known.pending.len() < MAX_PENDING {
            known.pending.insert(base, hashes);
            true
        } else {
            false // below the known end (queue recreated?) or too many gaps: reload later
        };
        let added = known.hashes - before;
        if consistent {
            inner.hashes += added;
            self.evict(&mut inner, pid);
        } else if let Some(old) = inner.parts.remove(&pid) {
            inner.hashes -= old.hashes;
        }
    }

    /// Forget a partition (e.g. its queue was deleted through this broker).
    pub fn forget_all(&self) {
        let mut inner = self.inner.lock().expect("dedup cache lock");
        inner.parts.clear();
        inner.hashes = 0;
    }

    /// Least recently used partitions go first, never the one just touched.
    fn evict(&self, inner: &mut Inner, keep: Uuid) {
        while inner.hashes > self.max_hashes && inner.parts.len() > 1 {
            let victim = inner
                .parts
                .iter()
                .filter(|(pid, _)| **pid != keep)
                .min_by_key(|(_, k)| k.last_used)
                .map(|(pid, _)| *pid)
                .expect("more than one partition");
            let gone = inner.parts.remove(&victim).expect("victim exists");
            inner.hashes -= gone.hashes;
        }
        if inner.hashes > self.max_hashes {
            inner.parts.clear();
            inner.hashes = 0;
        }
    }

    pub fn cached_hashes(&self) -> usize {
        self.inner.lock().expect("dedup cache lock").hashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> TxnHash {
        [n; 16]
    }

    #[test]
    fn unknown_partition_has_no_watermark() {
        let c = DedupCache::new(1);
        assert_eq!(c.watermark(Uuid::nil(), &[h(1)]), None);
    }

    #[test]
    fn watermark_is_known_end_or_just_below_first_hit() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        c.load(pid, 3, &[(0, vec![h(1), h(2)]), (2, vec![h(3), h(1)])]);
        assert_eq!(c.watermark(pid, &[h(9)]), Some(3));
        assert_eq!(
            c.watermark(pid, &[h(9), h(3)]),
            Some(1),
            "the extension probes from 2"
        );
        assert_eq!(
            c.watermark(pid, &[h(1)]),
            Some(-1),
            "MIN offset of a repeated hash"
        );
    }

    #[test]
    fn recorded_segments_extend_the_end_and_gaps_hold_it() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        c.load(pid, -1, &[]);
        c.record(pid, 0, vec![h(1), h(2)]);
        assert_eq!(c.watermark(pid, &[h(7)]), Some(1));
        c.record(pid, 5, vec![h(5)]); // another writer pushed 2..4: a gap
        assert_eq!(c.watermark(pid, &[h(5)]), Some(1), "never passes a gap");
        c.record(pid, 2, vec![h(3), h(4), h(6)]); // the gap fills (out of order)
        assert_eq!(c.watermark(pid, &[h(7)]), Some(5));
        assert_eq!(c.watermark(pid, &[h(5)]), Some(4));
    }

    #[test]
    fn a_segment_below_the_known_end_drops_the_partition() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        c.load(pid, 9, &[]);
        c.record(pid, 0, vec![h(1)]); // offsets restarted: the queue was recreated
        assert_eq!(c.watermark(pid, &[h(1)]), None);
        assert_eq!(c.cached_hashes(), 0);
    }

    #[test]
    fn capacity_evicts_least_recently_used_partitions() {
        let c = DedupCache::new(1); // ~26k hashes
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let many: Vec<TxnHash> = (0..10_000u32)
            .map(|i| {
                let mut x = [0u8; 16];
                x[..4].copy_from_slice(&i.to_le_bytes());
                x
            })
            .collect();
        c.load(a, -1, &[]);
        c.load(b, -1, &[]);
        c.record(a, 0, many.clone());
        c.watermark(a, &[]);
        c.record(b, 0, many.clone());
        c.record(b, 10_000, many.clone());
        assert_eq!(c.watermark(a, &[]), None, "a was least recently used");
        assert_eq!(c.watermark(b, &[]), Some(19_999));
    }

    #[test]
    fn windows_larger_than_the_cache_are_not_cached() {
        let c = DedupCache::new(1);
        let rows = vec![(0i64, vec![[0u8; 16]; 20_000])];
        c.load(Uuid::nil(), 19_999, &rows);
        assert_eq!(c.watermark(Uuid::nil(), &[]), None);
    }
}
