//! The slices a pop served, decoded (docs/contract.md §3): each pop row names a run of
//! frames in one segment; this turns the rows into their messages, in order, with their
//! offsets, decoding each segment once through [`DecodedSegments`]. The one decode loop
//! of a pop's rows (`queen.pop` and the broker's pop route).

use std::cell::RefCell;

use crate::frame::{CodecError, Frame};
use crate::segment_cache::{DecodedSegments, DEFAULT_MAX_BYTES};

thread_local! {
    /// This thread's recently decoded segments: one per backend in the extension, one per
    /// decoding thread in the broker (no lock between them).
    static THREAD_SEGMENTS: RefCell<DecodedSegments> =
        RefCell::new(DecodedSegments::new(DEFAULT_MAX_BYTES));
}

/// [`decode_served`] through this thread's cache: what `queen.pop` and the broker's pop
/// call, so a pop of one message from a segment of a hundred decodes it once, not per pop.
pub fn decode_served_here<S, T>(
    rows: &[S],
    view: impl Fn(&S) -> ServedSlice<'_>,
    item: impl FnMut(&S, i64, &Frame) -> T,
) -> Result<Vec<T>, CodecError> {
    THREAD_SEGMENTS.with(|cache| decode_served(rows, &mut cache.borrow_mut(), view, item))
}

/// Frames `start .. start + take` of a segment of `frames` with their index in it: the
/// slice a pop serves. The slice must lie inside the segment.
fn slice_of(
    frames: &[Frame],
    start: usize,
    take: usize,
) -> Result<impl Iterator<Item = (usize, &Frame)>, CodecError> {
    if start.saturating_add(take) > frames.len() {
        return Err(CodecError::FrameCountMismatch {
            expected: start.saturating_add(take),
            found: frames.len(),
        });
    }
    Ok(frames.iter().enumerate().skip(start).take(take))
}

/// One served slice as a pop row carries it (`r_partition_id, r_base, r_start_idx,
/// r_take, r_msg_count, r_blob`): frames `start_idx .. start_idx + take` of a segment of
/// `msg_count` frames whose first offset is `base`, in partition `partition`.
#[derive(Debug, Clone, Copy)]
pub struct ServedSlice<'a> {
    pub partition: [u8; 16],
    pub blob: &'a [u8],
    pub msg_count: i32,
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
}

impl<'a> ServedSlice<'a> {
    /// A pop row's slice, from its columns in the rows' order (`r_partition_id, r_base,
    /// r_start_idx, r_take, r_msg_count, r_blob`).
    pub fn of(
        partition: [u8; 16],
        base: i64,
        start_idx: i32,
        take: i32,
        msg_count: i32,
        blob: &'a [u8],
    ) -> Self {
        Self {
            partition,
            blob,
            msg_count,
            base,
            start_idx,
            take,
        }
    }
}

/// The messages of served slices, in order: `item(row, offset, frame)` for every frame
/// each row's slice serves, `view` saying where a row keeps its slice. A segment that does
/// not hold the frames its row says is corrupt: an error, never a silently shorter batch.
/// Segments are decoded through `cache` (crate::segment_cache): once, however many pops
/// serve them. The one decode loop of a pop's rows (`queen.pop` and the broker's pop
/// route).
pub fn decode_served<S, T>(
    rows: &[S],
    cache: &mut DecodedSegments,
    view: impl Fn(&S) -> ServedSlice<'_>,
    mut item: impl FnMut(&S, i64, &Frame) -> T,
) -> Result<Vec<T>, CodecError> {
    // A negative count is a corrupt row: as usize::MAX it fails the slice's checks.
    let count = |n: i32| usize::try_from(n).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    for row in rows {
        let v = view(row);
        if v.msg_count < 0 {
            return Err(CodecError::FrameCountMismatch {
                expected: count(v.msg_count),
                found: 0,
            });
        }
        // Kept only when this pop leaves part of the segment for the next ones.
        let keep = i64::from(v.start_idx) + i64::from(v.take) < i64::from(v.msg_count);
        let frames = cache.frames(v.partition, v.base, v.blob, count(v.msg_count), keep)?;
        let slice = slice_of(&frames, count(v.start_idx), count(v.take))?;
        out.extend(slice.map(|(k, frame)| item(row, v.base + k as i64, frame)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::encode_segment;

    /// Three frames with the transactionIds a, bb, ccc.
    fn sample() -> Vec<Frame> {
        ["a", "bb", "ccc"]
            .iter()
            .map(|t| Frame {
                message_id: [t.len() as u8; 16],
                trace_id: None,
                transaction_id: (*t).to_owned(),
                producer_sub: None,
                encrypted: false,
                payload: format!("{{\"t\":\"{t}\"}}").into_bytes(),
            })
            .collect()
    }

    #[test]
    fn slices_are_checked_against_the_segment() {
        let frames = sample();
        let got: Vec<usize> = slice_of(&frames, 1, 1).unwrap().map(|(k, _)| k).collect();
        assert_eq!(got, vec![1]);
        assert!(slice_of(&frames, 1, frames.len()).is_err());
        assert!(slice_of(&frames, usize::MAX, 1).is_err());
    }

    /// A test row: (base, start_idx, take, msg_count, blob).
    struct Row<'a>(i64, i32, i32, i32, &'a [u8]);

    fn view<'r>(r: &'r Row<'_>) -> ServedSlice<'r> {
        ServedSlice::of([1; 16], r.0, r.1, r.2, r.3, r.4)
    }

    #[test]
    fn served_slices_decode_in_order_with_their_offsets() {
        let frames = sample();
        let n = frames.len() as i32;
        let blob = encode_segment(&frames).unwrap();
        let mut cache = DecodedSegments::new(1 << 20);
        // Two slices of one segment, as two pops: the first serves part of it (decoded and
        // kept), the second the rest (read from memory, then let go).
        let rows = [Row(100, 0, 1, n, &blob), Row(100, 1, n - 1, n, &blob)];
        let got = decode_served(&rows, &mut cache, view, |r, off, f| {
            (r.1, off, f.transaction_id.clone())
        })
        .unwrap();
        let want: Vec<_> = [(0, 100, frames[0].transaction_id.clone())]
            .into_iter()
            .chain((1..n).map(|k| {
                (
                    1,
                    100 + i64::from(k),
                    frames[k as usize].transaction_id.clone(),
                )
            }))
            .collect();
        assert_eq!(got, want);
        assert_eq!((cache.misses, cache.hits, cache.len()), (1, 1, 0));
        // A row that asks for more frames than its segment holds, or a negative count, is
        // corrupt: an error, not a shorter batch (and no panic), cached or not.
        for (start, take, count) in [(0, n + 1, n), (-1, 1, n), (0, -1, n), (0, 1, -1)] {
            assert!(matches!(
                decode_served(
                    &[Row(100, start, take, count, &blob)],
                    &mut cache,
                    view,
                    |_, off, _| off
                ),
                Err(CodecError::FrameCountMismatch { .. })
            ));
        }
    }
}
