//! The global lock order of contract conventions, one implementation for every caller:
//! PUSH partitions in ascending id, then cursor rows in ascending (partition_id,
//! consumer_group) with the group compared bytewise (COLLATE "C"), ties in input order.

/// Indexes of `keys` (partition id bytes, consumer group) in cursor lock order; stable,
/// so equal keys keep their input order.
pub fn cursor_lock_order(keys: &[([u8; 16], &str)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| {
        (keys[a].0, keys[a].1.as_bytes()).cmp(&(keys[b].0, keys[b].1.as_bytes()))
    });
    order
}

/// The distinct partition ids of a push, in the order their rows are locked.
pub fn partition_lock_order(ids: impl IntoIterator<Item = [u8; 16]>) -> Vec<[u8; 16]> {
    let mut v: Vec<[u8; 16]> = ids.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_order_is_partition_then_group_bytewise_ties_in_input_order() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        let keys = [(b, "g"), (a, "b"), (a, "B"), (a, "b"), (a, "é")];
        // 'B' (0x42) < 'b' (0x62) < 'é' (0xc3 ..) bytewise; the two (a, "b") keep order.
        assert_eq!(cursor_lock_order(&keys), vec![2, 1, 3, 4, 0]);
    }

    #[test]
    fn partitions_ascending_and_distinct() {
        let v = partition_lock_order([[3u8; 16], [1u8; 16], [3u8; 16]]);
        assert_eq!(v, vec![[1u8; 16], [3u8; 16]]);
    }
}
