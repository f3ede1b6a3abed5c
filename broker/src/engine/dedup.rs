//! Push dedup watermark cache (docs/contract.md §4, `p_verified`).
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
//! "Inside the window at any later probe" holds only while the window does not grow: a
//! load under a window of W seconds skipped the rows older than W, which a longer window
//! probes again. So a partition remembers the window it was loaded under, and every push
//! compares it with the queue's window read at push time (`known_partitions`, one row per
//! partition, in every broker): a larger window drops what was loaded and reloads. A push
//! racing the configure that raises the window is answered as if it came first.
//!
//! Memory: `QUEEN_DEDUP_CACHE_MB` bounds the bytes the cache really holds (hash tables by
//! their capacity, pending segments, per-partition records), not a per-hash estimate.
//! A window that would take more than half the cache is not loaded (its size is known
//! from the first row of the load, before the rest is read). When the partitions pushed
//! to do not fit together, plain LRU would reload a whole window on nearly every push
//! (slower than no cache at all), so admission is controlled: a partition evicted or
//! refused is remembered with the bytes it needed, and is loaded again only when those
//! fit in free space, or after `RETRY_AFTER` (a workload that moved on gets its turn).
//! Until then its pushes probe with -1, exactly as with the cache off.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use queen_log::hash::{TxnHash, TxnHashMap};
use uuid::Uuid;

use crate::db::{Conn, DbError};

use crate::util::{capacity_for, table_bytes};

/// Out-of-order segments held above a gap before the partition is reloaded.
const MAX_PENDING: usize = 64;
/// How long an evicted or refused partition is not loaded again unless it fits.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Most remembered evicted/refused partitions; beyond, the oldest are forgotten.
const MAX_GHOSTS: usize = 4096;
/// Bytes of a `first_seen` slot: the hash and its offset.
const SLOT: usize = std::mem::size_of::<(TxnHash, i64)>();
/// Table capacities of a [`FirstSeen`] (see there): small ones of 2^11 buckets (51 KiB),
/// up to [`SMALL_UPTO`] hashes; then one of 2^15 (800 KiB); then 2^16 (1.6 MiB).
const SMALL: usize = 1792;
const SMALL_UPTO: usize = 4 * SMALL;
const MID: usize = 28_672;
const MAX_TABLE: usize = 57_344;

/// The MIN offset of every hash seen, in tables that are allocated once and never grow,
/// sized so that freed memory goes back to the system.
///
/// A std table that doubles frees its old allocation; mimalloc puts blocks of 84 KiB to
/// 512 KiB into shared 4 MiB pages, where a freed block stays resident until its whole
/// page is free. Measured, a cache of doubling tables held 1.8× its bytes in RSS, and
/// evicted partitions left about a third of the cap resident. So no table here is ever
/// rehashed and none is sized in that band: small tables (51 KiB, one size, so a freed
/// one is exactly what the next small table needs), then tables over 512 KiB, which
/// mimalloc maps alone and returns when freed. A full table stays as it is and the next
/// one takes new hashes; offsets only grow, so the oldest table that knows a hash holds
/// its MIN offset. A lookup probes every table: a few for windows of 100k hashes
/// (loaded into one table), about 20 per million grown by pushes.
struct FirstSeen {
    tables: Vec<TxnHashMap<i64>>,
}

/// A table able to hold `n` hashes without growing.
fn table(n: usize) -> TxnHashMap<i64> {
    TxnHashMap::with_capacity_and_hasher(n, Default::default())
}

impl FirstSeen {
    /// Sized for `n` hashes at once when they need a table over 512 KiB, else small.
    fn with_capacity(n: usize) -> Self {
        let first = if n > MID { n } else { n.clamp(28, SMALL) };
        debug_assert_eq!(table(first).capacity(), capacity_for(first));
        FirstSeen {
            tables: vec![table(first)],
        }
    }

    /// The bytes a partition of `n` hashes will hold (the tables it will have).
    fn bytes_for(n: usize) -> usize {
        let first = if n > MID { n } else { n.clamp(28, SMALL) };
        let mut caps = vec![capacity_for(first)];
        while caps.iter().sum::<usize>() < n {
            let total = caps.iter().sum();
            caps.push(capacity_for(Self::next_capacity(total)));
        }
        caps.iter().map(|c| table_bytes(*c, SLOT)).sum()
    }

    /// The capacity of the table after tables holding `total` hashes.
    fn next_capacity(total: usize) -> usize {
        if total < SMALL_UPTO {
            SMALL
        } else if total < SMALL_UPTO + MID {
            MID
        } else {
            MAX_TABLE
        }
    }

    fn get(&self, h: &TxnHash) -> Option<i64> {
        self.tables.iter().find_map(|t| t.get(h).copied())
    }

    /// Remembers `off` for `h` unless an earlier offset is known.
    fn insert_first(&mut self, h: TxnHash, off: i64) {
        if self.get(&h).is_some() {
            return;
        }
        let last = self.tables.last().expect("at least one table");
        if last.len() >= last.capacity() {
            let total = self.tables.iter().map(|t| t.capacity()).sum();
            self.tables.push(table(Self::next_capacity(total)));
        }
        self.tables
            .last_mut()
            .expect("at least one table")
            .insert(h, off);
    }

    fn bytes(&self) -> usize {
        let headers = self.tables.capacity() * std::mem::size_of::<TxnHashMap<i64>>();
        headers
            + self
                .tables
                .iter()
                .map(|t| table_bytes(t.capacity(), SLOT))
                .sum::<usize>()
    }
}
/// Per pending segment beyond its hashes: B-tree node share and the Vec header.
const PENDING_OVERHEAD: usize = 64;

/// What the broker knows of one partition's sidecar.
struct Known {
    /// MIN offset of each hash at or below `next - 1`.
    first_seen: FirstSeen,
    /// Every offset below this is known (loaded or recorded).
    next: i64,
    /// Segments recorded above a gap, by base offset, waiting for the gap to fill.
    pending: BTreeMap<i64, Vec<TxnHash>>,
    /// The dedup window (seconds) the partition was loaded under.
    window: i32,
    hashes: usize,
    /// Accounted heap bytes (see [`Known::measure`]).
    bytes: usize,
    last_used: u64,
}

impl Known {
    fn new(window: i32, capacity: usize) -> Self {
        let mut k = Known {
            first_seen: FirstSeen::with_capacity(capacity),
            next: 0,
            pending: BTreeMap::new(),
            window,
            hashes: 0,
            bytes: 0,
            last_used: 0,
        };
        k.measure();
        k
    }

    fn absorb(&mut self, base: i64, hashes: &[TxnHash]) {
        for (k, h) in hashes.iter().enumerate() {
            self.first_seen.insert_first(*h, base + k as i64);
        }
        self.next = base + hashes.len() as i64;
        self.hashes += hashes.len();
    }

    /// What this partition really holds: its hash tables by their capacity (each is
    /// allocated whole, once), the pending segments' hash vectors.
    fn measure(&mut self) {
        let pending: usize = self
            .pending
            .values()
            .map(|v| v.capacity() * 16 + PENDING_OVERHEAD)
            .sum();
        self.bytes = self.first_seen.bytes() + pending;
    }
}

/// A partition evicted or refused: the bytes it needed and when.
#[derive(Clone, Copy)]
struct Ghost {
    bytes: usize,
    at: Instant,
}

/// Counters of the cache, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DedupStats {
    /// Accounted bytes now, and hashes cached.
    pub bytes: u64,
    pub hashes: u64,
    pub partitions: u64,
    /// Windows loaded from the database.
    pub loads: u64,
    /// Loads not attempted: the partition was evicted or refused recently and its
    /// window does not fit in free space (its pushes probe with -1).
    pub skipped: u64,
    /// Loads given up because the window needs more than half the cache.
    pub too_big: u64,
    /// Partitions evicted to keep the cache within its bytes.
    pub evicted: u64,
    /// Cached partitions dropped because the queue's window grew since their load.
    pub window_grew: u64,
}

/// The cache; capacity 0 = disabled.
pub struct DedupCache {
    max_bytes: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    parts: HashMap<Uuid, Known>,
    ghosts: HashMap<Uuid, Ghost>,
    /// Sum of the partitions' accounted bytes.
    part_bytes: usize,
    tick: u64,
    stats: DedupStats,
}

impl Inner {
    /// Everything accounted: partitions plus the two maps' own tables.
    fn bytes(&self) -> usize {
        self.part_bytes
            + table_bytes(self.parts.capacity(), std::mem::size_of::<(Uuid, Known)>())
            + table_bytes(self.ghosts.capacity(), std::mem::size_of::<(Uuid, Ghost)>())
    }

    fn remove(&mut self, pid: &Uuid) -> Option<Known> {
        let k = self.parts.remove(pid)?;
        self.part_bytes -= k.bytes;
        Some(k)
    }

    fn ghost(&mut self, pid: Uuid, bytes: usize, at: Instant) {
        if self.ghosts.len() >= MAX_GHOSTS {
            self.ghosts
                .retain(|_, g| at.duration_since(g.at) < RETRY_AFTER);
            if self.ghosts.len() >= MAX_GHOSTS {
                self.ghosts.clear();
            }
        }
        self.ghosts.insert(pid, Ghost { bytes, at });
    }
}

/// A window being read from the database, built off-lock.
pub struct Loading {
    known: Known,
    expected: usize,
}

impl DedupCache {
    /// `max_mb` = 0 disables the cache (every push probes its whole window).
    pub fn new(max_mb: usize) -> Self {
        DedupCache {
            max_bytes: max_mb * (1 << 20),
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// The watermark for a push of `incoming` into `pid`, or `None` when the partition is
    /// not cached (the caller pushes with -1).
    pub fn watermark(&self, pid: Uuid, incoming: &[TxnHash]) -> Option<i64> {
        let mut inner = self.inner.lock().expect("dedup cache lock");
        inner.tick += 1;
        let tick = inner.tick;
        let known = inner.parts.get_mut(&pid)?;
        known.last_used = tick;
        let first_hit = incoming
            .iter()
            .filter_map(|h| known.first_seen.get(h))
            .min();
        Some(first_hit.map_or(known.next - 1, |o| (o - 1).min(known.next - 1)))
    }

    /// Whether a push into `pid`, whose queue's window is now `window` seconds, should
    /// load the partition first. False when it is cached under a window at least as long
    /// (the cache covers it), and false when admission refuses it (see the module docs).
    /// A partition cached under a shorter window is dropped here: it cannot be trusted.
    pub fn wants_load(&self, pid: Uuid, window: i32) -> bool {
        self.wants_load_at(pid, window, Instant::now())
    }

    fn wants_load_at(&self, pid: Uuid, window: i32, now: Instant) -> bool {
        if !self.enabled() {
            return false;
        }
        let mut inner = self.inner.lock().expect("dedup cache lock");
        if let Some(k) = inner.parts.get(&pid) {
            if k.window >= window {
                return false;
            }
            inner.remove(&pid);
            inner.stats.window_grew += 1;
        }
        let free = self.max_bytes.saturating_sub(inner.bytes());
        match inner.ghosts.get(&pid) {
            Some(g)
                if now.duration_since(g.at) < RETRY_AFTER
                    && (g.bytes > free || g.bytes > self.max_bytes / 2) =>
            {
                inner.stats.skipped += 1;
                false
            }
            _ => true,
        }
    }

    /// Starts building a partition from a snapshot's `last_offset`, the window the
    /// snapshot used and the base offset of its oldest in-window sidecar row (None: no
    /// row in the window). None when the window needs more than half the cache: the
    /// caller stops reading, and the partition is remembered as refused.
    pub fn begin(
        &self,
        pid: Uuid,
        window: i32,
        last_offset: i64,
        first_base: Option<i64>,
    ) -> Option<Loading> {
        self.begin_at(pid, window, last_offset, first_base, Instant::now())
    }

    fn begin_at(
        &self,
        pid: Uuid,
        window: i32,
        last_offset: i64,
        first_base: Option<i64>,
        now: Instant,
    ) -> Option<Loading> {
        let expected = first_base.map_or(0, |b| (last_offset - b + 1).max(0) as usize);
        let need = FirstSeen::bytes_for(expected);
        if need > self.max_bytes / 2 {
            let mut inner = self.inner.lock().expect("dedup cache lock");
            inner.stats.too_big += 1;
            inner.ghost(pid, need, now);
            return None;
        }
        let mut known = Known::new(window, expected);
        known.next = last_offset + 1;
        Some(Loading { known, expected })
    }

    /// Installs a loaded partition, evicting least recently used ones (never this one)
    /// until the cache is within its bytes again.
    pub fn install(&self, pid: Uuid, loading: Loading) {
        self.install_at(pid, loading, Instant::now());
    }

    fn install_at(&self, pid: Uuid, loading: Loading, now: Instant) {
        let Loading { mut known, .. } = loading;
        known.measure();
        let mut inner = self.inner.lock().expect("dedup cache lock");
        inner.tick += 1;
        known.last_used = inner.tick;
        inner.remove(&pid);
        inner.ghosts.remove(&pid);
        inner.part_bytes += known.bytes;
        inner.parts.insert(pid, known);
        inner.stats.loads += 1;
        self.evict(&mut inner, pid, now);
    }

    /// Reads `pid`'s window in one snapshot (its `last_offset`, the queue's window and
    /// the in-window sidecar rows, oldest first) and installs it; a partition that no
    /// longer exists, or whose window is too big, is not cached. Rows are streamed into
    /// the table, which is sized from the first row: no second copy of the window.
    pub async fn load_window(&self, db: &Conn, pid: Uuid) -> Result<(), DbError> {
        let mut loading: Option<Loading> = None;
        db.dedup_window(pid, |row| {
            let l = match loading.as_mut() {
                Some(l) => l,
                None => match self.begin(pid, row.window, row.last_offset, row.base) {
                    Some(l) => loading.insert(l),
                    // Too big: stop reading, install nothing.
                    None => return false,
                },
            };
            if let (Some(base), Some(packed)) = (row.base, row.hashes) {
                l.add(base, packed);
            }
            true
        })
        .await?;
        if let Some(l) = loading {
            self.install(pid, l);
        }
        Ok(())
    }

    /// Record a segment this broker pushed (committed) at `base`.
    pub fn record(&self, pid: Uuid, base: i64, hashes: Vec<TxnHash>) {
        let mut inner = self.inner.lock().expect("dedup cache lock");
        let Some(known) = inner.parts.get_mut(&pid) else {
            return;
        };
        let before = known.bytes;
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
        if consistent {
            known.measure();
            let after = known.bytes;
            inner.part_bytes = inner.part_bytes + after - before;
            self.evict(&mut inner, pid, Instant::now());
        } else {
            inner.remove(&pid);
        }
    }

    /// Forget every partition (as after a restart).
    pub fn forget_all(&self) {
        let mut inner = self.inner.lock().expect("dedup cache lock");
        inner.parts.clear();
        inner.ghosts.clear();
        inner.part_bytes = 0;
    }

    /// Least recently used partitions go first, never the one just touched (unless it
    /// alone is too big); each leaves a ghost with the bytes it held.
    fn evict(&self, inner: &mut Inner, keep: Uuid, now: Instant) {
        while inner.bytes() > self.max_bytes {
            let victim = inner
                .parts
                .iter()
                .filter(|(pid, _)| **pid != keep)
                .min_by_key(|(_, k)| k.last_used)
                .map(|(pid, _)| *pid)
                .unwrap_or(keep);
            let Some(gone) = inner.remove(&victim) else {
                break;
            };
            inner.stats.evicted += 1;
            inner.ghost(victim, gone.bytes, now);
        }
    }

    pub fn cached_hashes(&self) -> usize {
        let inner = self.inner.lock().expect("dedup cache lock");
        inner.parts.values().map(|k| k.hashes).sum()
    }

    /// A snapshot of the counters and gauges.
    pub fn stats(&self) -> DedupStats {
        let inner = self.inner.lock().expect("dedup cache lock");
        DedupStats {
            bytes: inner.bytes() as u64,
            hashes: inner.parts.values().map(|k| k.hashes as u64).sum(),
            partitions: inner.parts.len() as u64,
            ..inner.stats
        }
    }
}

impl Loading {
    /// One in-window sidecar row, in base-offset order. A malformed row (not 16 bytes
    /// per hash) is skipped: it leaves a gap below `next` that the watermark ignores, and
    /// the extension still probes it whenever a hash hits above it.
    pub fn add(&mut self, base: i64, packed: &[u8]) {
        if !packed.len().is_multiple_of(16) {
            return;
        }
        for (k, chunk) in packed.chunks_exact(16).enumerate() {
            let h: TxnHash = chunk.try_into().expect("16-byte chunk");
            self.known.first_seen.insert_first(h, base + k as i64);
        }
        self.known.hashes += packed.len() / 16;
    }

    /// Hashes expected from the first row (the table was sized for them).
    pub fn expected(&self) -> usize {
        self.expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real (uniform) hashes: the map hashes them by their first bytes.
    fn h(n: u32) -> TxnHash {
        queen_log::hash::txn_hash(&n.to_string())
    }

    fn many(from: u32, n: u32) -> Vec<TxnHash> {
        (from..from + n).map(h).collect()
    }

    /// Loads `rows` (base, hashes) of a partition with `last_offset` under `window`.
    fn load(c: &DedupCache, pid: Uuid, window: i32, last: i64, rows: &[(i64, Vec<TxnHash>)]) {
        load_at(c, pid, window, last, rows, Instant::now());
    }

    fn load_at(
        c: &DedupCache,
        pid: Uuid,
        window: i32,
        last: i64,
        rows: &[(i64, Vec<TxnHash>)],
        now: Instant,
    ) {
        if let Some(mut l) = c.begin_at(pid, window, last, rows.first().map(|r| r.0), now) {
            for (base, hs) in rows {
                l.add(*base, &queen_log::hash::join_hashes(hs));
            }
            c.install_at(pid, l, now);
        }
    }

    #[test]
    fn unknown_partition_has_no_watermark() {
        let c = DedupCache::new(1);
        assert_eq!(c.watermark(Uuid::nil(), &[h(1)]), None);
        assert!(c.wants_load(Uuid::nil(), 60));
    }

    #[test]
    fn disabled_cache_never_loads() {
        assert!(!DedupCache::new(0).wants_load(Uuid::nil(), 60));
    }

    #[test]
    fn first_seen_tables_never_grow_and_keep_the_min_offset() {
        let caps = |f: &FirstSeen| f.tables.iter().map(|t| t.capacity()).collect::<Vec<_>>();
        for start in [10, 5_000, 100_000] {
            let mut f = FirstSeen::with_capacity(start);
            let mut seen: Vec<usize> = Vec::new();
            for i in 0..200_000u32 {
                f.insert_first(h(i), i64::from(i));
                let now = caps(&f);
                assert_eq!(now[..seen.len()], seen[..], "a table was rehashed");
                seen = now;
            }
            for c in &seen {
                // Never in mimalloc's shared-page band (84 KiB to 512 KiB).
                let bytes = table_bytes(*c, SLOT);
                assert!(
                    bytes <= 84 * 1024 || bytes > 512 * 1024,
                    "{start}: {seen:?}"
                );
            }
            assert!(seen.len() <= 12, "{start}: {seen:?}");
            // A repeat keeps its first (lowest) offset, wherever it lands.
            f.insert_first(h(7), 999_999);
            assert_eq!(f.get(&h(7)), Some(7));
            assert_eq!(f.get(&h(199_999)), Some(199_999));
            assert_eq!(f.get(&h(200_000)), None);
        }
        assert_eq!(
            caps(&FirstSeen::with_capacity(100_000)).len(),
            1,
            "a big load: one table"
        );
    }

    #[test]
    fn watermark_is_known_end_or_just_below_first_hit() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        load(
            &c,
            pid,
            60,
            3,
            &[(0, vec![h(1), h(2)]), (2, vec![h(3), h(1)])],
        );
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
    fn a_longer_window_than_the_load_drops_the_partition() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        load(&c, pid, 2, 5, &[(5, vec![h(5)])]);
        assert!(!c.wants_load(pid, 2), "covered: same window");
        assert!(
            !c.wants_load(pid, 1),
            "covered: a shorter window probes less"
        );
        assert!(
            c.wants_load(pid, 3600),
            "rows older than 2 s were never read"
        );
        assert_eq!(c.watermark(pid, &[]), None, "dropped until reloaded");
        assert_eq!(c.stats().window_grew, 1);
        load(&c, pid, 3600, 5, &[(0, many(0, 6))]);
        assert!(!c.wants_load(pid, 3600));
        assert_eq!(c.watermark(pid, &[h(0)]), Some(-1));
    }

    #[test]
    fn recorded_segments_extend_the_end_and_gaps_hold_it() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        load(&c, pid, 60, -1, &[]);
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
        load(&c, pid, 60, 9, &[]);
        c.record(pid, 0, vec![h(1)]); // offsets restarted: the queue was recreated
        assert_eq!(c.watermark(pid, &[h(1)]), None);
        assert_eq!(c.cached_hashes(), 0);
    }

    #[test]
    fn accounted_bytes_are_the_tables_capacity_and_stay_within_the_cap() {
        let c = DedupCache::new(1);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        load(&c, a, 60, -1, &[]);
        c.record(a, 0, many(0, 1000));
        let s = c.stats();
        let tables = c.inner.lock().unwrap().parts[&a].first_seen.bytes();
        assert!(tables >= table_bytes(1000, SLOT));
        assert!(s.bytes as usize >= tables, "{s:?}");
        // Far more hashes than 1 MiB holds: the cache stays within it.
        load(&c, b, 60, -1, &[]);
        for i in 0..40u32 {
            c.record(b, i64::from(i) * 1000, many(10_000 + i * 1000, 1000));
            assert!(c.stats().bytes as usize <= 1 << 20, "{:?}", c.stats());
        }
    }

    #[test]
    fn capacity_evicts_least_recently_used_partitions() {
        let c = DedupCache::new(1); // 1 MiB: ~20k hashes at 48 bytes a slot
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        load(&c, a, 60, -1, &[]);
        load(&c, b, 60, -1, &[]);
        c.record(a, 0, many(0, 12_000));
        c.watermark(a, &[]);
        c.record(b, 0, many(0, 12_000));
        c.record(b, 12_000, many(12_000, 12_000));
        assert_eq!(c.watermark(a, &[]), None, "a was least recently used");
        assert_eq!(c.watermark(b, &[]), Some(23_999));
        assert_eq!(c.stats().evicted, 1);
    }

    #[test]
    fn windows_larger_than_half_the_cache_are_not_read_or_retried() {
        let c = DedupCache::new(1);
        let pid = Uuid::nil();
        let now = Instant::now();
        assert!(c.begin_at(pid, 60, 19_999, Some(0), now).is_none());
        assert_eq!(c.stats().too_big, 1);
        // The next pushes do not try again (each would read the whole window for nothing)...
        assert!(!c.wants_load_at(pid, 60, now + Duration::from_secs(1)));
        assert_eq!(c.stats().skipped, 1);
        // ...until the retry interval has passed.
        assert!(c.wants_load_at(pid, 60, now + RETRY_AFTER));
    }

    /// The thrash case: pushes round-robin over more partitions than
    /// fit. Plain LRU reloads on almost every push; with admission the partitions that
    /// were evicted are skipped (no load) until they fit or the retry interval passes.
    #[test]
    fn partitions_that_do_not_fit_together_are_not_reloaded_on_every_push() {
        let c = DedupCache::new(1);
        let now = Instant::now();
        let pids: Vec<Uuid> = (1..=10).map(Uuid::from_u128).collect();
        let rows = |i: u32| vec![(0i64, many(i * 10_000, 5_000))];
        let mut loads = 0;
        for round in 0..20u32 {
            for (i, pid) in pids.iter().enumerate() {
                let t = now + Duration::from_millis(u64::from(round) * 100);
                if c.wants_load_at(*pid, 60, t) {
                    loads += 1;
                    load_at(&c, *pid, 60, 4_999, &rows(i as u32), t);
                }
                c.watermark(*pid, &[]);
            }
        }
        let s = c.stats();
        assert!(s.bytes as usize <= 1 << 20, "{s:?}");
        assert!((1..10).contains(&s.partitions), "{s:?}");
        assert_eq!(loads, 10, "each partition loaded once in 20 rounds: {s:?}");
        assert!(s.skipped >= 19 * 4, "{s:?}");
        // After the retry interval each skipped partition gets one new attempt.
        let later = now + RETRY_AFTER + Duration::from_secs(2);
        let retried = pids
            .iter()
            .filter(|p| c.watermark(**p, &[]).is_none())
            .filter(|p| c.wants_load_at(**p, 60, later))
            .count();
        assert!(retried > 0);
    }

    #[test]
    fn a_refused_partition_that_fits_again_is_loaded() {
        let c = DedupCache::new(4);
        let now = Instant::now();
        let pids: Vec<Uuid> = (1..=5).map(Uuid::from_u128).collect();
        // 20,000 hashes take four small tables and an 800 KiB one (1 MB): four fit in
        // 4 MiB, not five.
        assert!(FirstSeen::bytes_for(20_000) > 1_000_000);
        for (i, pid) in pids.iter().enumerate() {
            let from = i as u32 * 20_000;
            load_at(&c, *pid, 60, 19_999, &[(0, many(from, 20_000))], now);
        }
        let a = pids[0];
        assert_eq!(c.watermark(a, &[]), None, "a evicted for the fifth");
        assert!(
            !c.wants_load_at(a, 60, now),
            "a does not fit beside the others"
        );
        // One leaves (its queue was deleted and its entry evicted, say): a fits again.
        c.inner.lock().unwrap().remove(&pids[1]);
        assert!(c.wants_load_at(a, 60, now), "now there is room for a");
    }

    #[test]
    fn the_size_of_a_load_is_known_before_it_is_read() {
        for n in [0, 1, 100, 1792, 1793, 7168, 20_000, 36_000, 100_000] {
            let mut f = FirstSeen::with_capacity(n);
            for i in 0..n as u32 {
                f.insert_first(h(i), i64::from(i));
            }
            assert_eq!(
                f.bytes() - f.tables.capacity() * std::mem::size_of::<TxnHashMap<i64>>(),
                FirstSeen::bytes_for(n),
                "{n}"
            );
        }
    }
}
