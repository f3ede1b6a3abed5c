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

/// The partition row locks one pop has taken, so that it takes them in ascending id like
/// every other statement (docs/decisions.md, "Lock order"). A pop that seeded a group's
/// cursors holds every partition row of the queue it saw; a partition created after that
/// list and sorting below one it holds is not locked now but left to the next pop.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AscendingLocks {
    highest: Option<[u8; 16]>,
}

impl AscendingLocks {
    /// Whether the row of `id` may be locked now: at or above every row held.
    pub fn may_lock(&self, id: [u8; 16]) -> bool {
        self.highest.is_none_or(|h| id >= h)
    }

    /// Record the lock of `id`'s row.
    pub fn locked(&mut self, id: [u8; 16]) {
        self.highest = self.highest.max(Some(id));
    }
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

    #[test]
    fn a_pop_locks_partition_rows_only_upward() {
        let mut held = AscendingLocks::default();
        assert!(held.may_lock([5u8; 16]));
        held.locked([5u8; 16]);
        held.locked([2u8; 16]);
        assert!(
            held.may_lock([5u8; 16]),
            "a row already held may be taken again"
        );
        assert!(held.may_lock([6u8; 16]));
        assert!(
            !held.may_lock([4u8; 16]),
            "below a held row: left to the next pop"
        );
    }
}
