//! Recently decoded segments (docs/benchmarks.md, "One message at a time"). A segment is
//! one zstd frame over all its frames, so a pop of one message from a segment of a hundred
//! decompressed and decoded all hundred, on every call: at batch 1 that was a tenth of a
//! consume cycle's instructions. A pop now asks this cache, which decodes a segment once
//! and serves the next pops of it from memory.
//!
//! A segment is known by where it lies (partition id, base offset) and by what it holds
//! (its blob's length and xxh3-64): a partition deleted and created again under the same
//! name has a new id, and a blob that differs is a different entry, so nothing stale is
//! ever served. Only a segment that a pop served part of is kept (the next pops of its
//! partition read it again); a pop that serves a segment to its end lets it go, so pops of
//! whole segments (batch 100 from segments of 100) keep nothing. The cache is bounded by the
//! decoded bytes it holds; a segment larger than a quarter of that is decoded and not kept.
//! It is not shared between threads: the extension keeps one per backend, the broker one
//! per decoding thread.

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::frame::{CodecError, Frame};
use crate::segment::decode_segment_exact;

/// The decoded bytes a cache holds at most by default (per backend or thread).
pub const DEFAULT_MAX_BYTES: usize = 4 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    partition: [u8; 16],
    base: i64,
    len: usize,
    fingerprint: u64,
}

struct Entry {
    key: Key,
    frames: Arc<[Frame]>,
    bytes: usize,
    used: u64,
}

/// A bounded cache of decoded segments, least recently used out first.
pub struct DecodedSegments {
    entries: Vec<Entry>,
    max_bytes: usize,
    bytes: usize,
    tick: u64,
    /// Lookups served from memory, and those that decoded.
    pub hits: u64,
    pub misses: u64,
}

/// What a decoded frame costs the cache: its variable parts and a fixed overhead.
fn frame_bytes(f: &Frame) -> usize {
    64 + f.transaction_id.len() + f.payload.len() + f.producer_sub.as_ref().map_or(0, String::len)
}

impl DecodedSegments {
    /// A cache holding at most `max_bytes` of decoded frames.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            entries: Vec::new(),
            max_bytes,
            bytes: 0,
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The frames of the segment `blob` at `base` of `partition`, which must hold
    /// `msg_count` frames (`decode_segment_exact`'s checks): from memory when this
    /// segment was decoded before, else decoded now. `keep`: whether it is worth keeping
    /// (a pop served part of it, so the next ones read it again); without, an entry of it
    /// is let go.
    pub fn frames(
        &mut self,
        partition: [u8; 16],
        base: i64,
        blob: &[u8],
        msg_count: usize,
        keep: bool,
    ) -> Result<Arc<[Frame]>, CodecError> {
        let key = Key {
            partition,
            base,
            len: blob.len(),
            fingerprint: xxh3_64(blob),
        };
        self.tick += 1;
        if let Some(i) = self.entries.iter().position(|e| e.key == key) {
            self.hits += 1;
            if !keep {
                let e = self.entries.swap_remove(i);
                self.bytes -= e.bytes;
                return Ok(e.frames);
            }
            let e = &mut self.entries[i];
            e.used = self.tick;
            return Ok(e.frames.clone());
        }
        self.misses += 1;
        let frames: Arc<[Frame]> = decode_segment_exact(blob, msg_count)?.into();
        let bytes: usize = frames.iter().map(frame_bytes).sum();
        if keep && bytes <= self.max_bytes / 4 {
            while self.bytes + bytes > self.max_bytes {
                self.evict_oldest();
            }
            self.bytes += bytes;
            self.entries.push(Entry {
                key,
                frames: frames.clone(),
                bytes,
                used: self.tick,
            });
        }
        Ok(frames)
    }

    fn evict_oldest(&mut self) {
        if let Some(i) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) {
            self.bytes -= self.entries.swap_remove(i).bytes;
        }
    }

    /// Decoded bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Segments held now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::encode_segment;

    fn seg(n: usize, tag: &str) -> Vec<u8> {
        let frames: Vec<Frame> = (0..n)
            .map(|i| Frame {
                message_id: [i as u8; 16],
                trace_id: None,
                transaction_id: format!("{tag}-{i}"),
                producer_sub: None,
                encrypted: false,
                payload: format!("{{\"i\":{i},\"tag\":\"{tag}\"}}").into_bytes(),
            })
            .collect();
        encode_segment(&frames).unwrap()
    }

    const P: [u8; 16] = [7; 16];

    #[test]
    fn a_segment_is_decoded_once_then_served_from_memory() {
        let mut c = DecodedSegments::new(DEFAULT_MAX_BYTES);
        let blob = seg(100, "a");
        let first = c.frames(P, 0, &blob, 100, true).unwrap();
        let again = c.frames(P, 0, &blob, 100, true).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!((c.hits, c.misses), (1, 1));
        assert_eq!(again[42].transaction_id, "a-42");
    }

    #[test]
    fn another_partition_base_or_content_is_another_segment() {
        let mut c = DecodedSegments::new(DEFAULT_MAX_BYTES);
        let a = seg(3, "a");
        let b = seg(3, "b");
        c.frames(P, 0, &a, 3, true).unwrap();
        // Same place, other content (a partition recreated, a row rewritten): decoded anew.
        assert_eq!(
            c.frames(P, 0, &b, 3, true).unwrap()[0].transaction_id,
            "b-0"
        );
        assert_eq!(
            c.frames([8; 16], 0, &a, 3, true).unwrap()[0].transaction_id,
            "a-0"
        );
        assert_eq!(
            c.frames(P, 3, &a, 3, true).unwrap()[0].transaction_id,
            "a-0"
        );
        assert_eq!((c.hits, c.misses), (0, 4));
    }

    #[test]
    fn a_wrong_count_is_refused_even_when_cached() {
        let mut c = DecodedSegments::new(DEFAULT_MAX_BYTES);
        let a = seg(3, "a");
        assert!(c.frames(P, 0, &a, 4, true).is_err());
        assert!(c.frames(P, 0, &a, 3, true).is_ok());
        assert!(c.frames(P, 0, b"not zstd", 3, true).is_err());
    }

    #[test]
    fn the_cache_stays_within_its_bytes_least_recently_used_out() {
        let blob = |i: i64| seg(10, &format!("s{i}"));
        let one = {
            let mut c = DecodedSegments::new(DEFAULT_MAX_BYTES);
            c.frames(P, 0, &blob(0), 10, true).unwrap();
            c.bytes()
        };
        let mut c = DecodedSegments::new(one * 4);
        for i in 0..4 {
            c.frames(P, i, &blob(i), 10, true).unwrap();
        }
        c.frames(P, 0, &blob(0), 10, true).unwrap(); // 0 is now the most recent
        c.frames(P, 4, &blob(4), 10, true).unwrap(); // evicts 1, the least recently used
        assert!(c.bytes() <= one * 4);
        let misses = c.misses;
        c.frames(P, 0, &blob(0), 10, true).unwrap();
        assert_eq!(c.misses, misses, "0 kept");
        c.frames(P, 1, &blob(1), 10, true).unwrap();
        assert_eq!(c.misses, misses + 1, "1 evicted");
    }

    #[test]
    fn a_segment_served_to_its_end_is_let_go() {
        let mut c = DecodedSegments::new(DEFAULT_MAX_BYTES);
        let blob = seg(10, "a");
        // Served whole: decoded, not kept.
        c.frames(P, 0, &blob, 10, false).unwrap();
        assert!(c.is_empty());
        // Served in part, then to its end: kept, then let go on that last read.
        c.frames(P, 0, &blob, 10, true).unwrap();
        assert_eq!(c.len(), 1);
        c.frames(P, 0, &blob, 10, false).unwrap();
        assert_eq!((c.len(), c.bytes(), c.hits), (0, 0, 1));
    }

    #[test]
    fn a_segment_over_a_quarter_of_the_cache_is_not_kept() {
        let mut c = DecodedSegments::new(1000);
        let big = seg(100, "big");
        c.frames(P, 0, &big, 100, true).unwrap();
        assert!(c.is_empty());
        assert_eq!(c.bytes(), 0);
    }
}
