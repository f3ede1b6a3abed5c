//! The push dedup probe (docs/contract.md §4) as a pure scan: which incoming hashes already occur
//! in the sidecar rows of the window, and at which MIN original offset.

use crate::hash::{TxnHash, TxnHashMap};

/// `(incoming frame index, MIN original offset)` for every incoming hash found in `rows`
/// (`(base_offset, packed hashes)`) at an offset above `verified`; sorted by index.
pub fn find_duplicates<'a>(
    incoming: &[TxnHash],
    rows: impl IntoIterator<Item = (i64, &'a [u8])>,
    verified: i64,
) -> Vec<(usize, i64)> {
    let mut best: TxnHashMap<i64> = incoming.iter().map(|h| (*h, i64::MAX)).collect();
    for (base, hashes) in rows {
        for (k, chunk) in hashes.chunks_exact(16).enumerate() {
            let off = base + k as i64;
            if off <= verified {
                continue;
            }
            if let Some(o) = best.get_mut(<&TxnHash>::try_from(chunk).expect("16-byte chunk")) {
                *o = (*o).min(off);
            }
        }
    }
    incoming
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some((i, best[h])).filter(|(_, o)| *o != i64::MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_min_offset_per_incoming_index_above_watermark() {
        let (a, b, c) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let r0 = [a, b].concat();
        let r1 = [b, a].concat();
        let rows = [(0i64, r0.as_slice()), (2, r1.as_slice())];
        assert_eq!(
            find_duplicates(&[c, a, b, a], rows, -1),
            vec![(1, 0), (2, 1), (3, 0)]
        );
        // Offsets up to the verified watermark are known unique: only 2 and 3 are probed.
        assert_eq!(find_duplicates(&[a, b], rows, 1), vec![(0, 3), (1, 2)]);
        assert!(find_duplicates(&[c], rows, -1).is_empty());
    }
}
