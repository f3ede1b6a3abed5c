//! Properties of the ack decision procedure over thousands of random cursors and acks.

use proptest::prelude::*;
use queen_log::ack::*;

/// A leased cursor: committed c, batch (c, c+len], some spent budget.
fn leased_state() -> impl Strategy<Value = CursorState> {
    (-1i64..50, 1i64..20, 0i32..5, 0i64..100).prop_map(|(c, len, retries, total)| CursorState {
        committed: c,
        batch_end: Some(c + len),
        batch_retry_count: retries,
        attempt_offset: Some(c + 1),
        attempt_count: 1,
        total_consumed: total,
    })
}

fn policy() -> impl Strategy<Value = Policy> {
    (0i32..4, any::<bool>()).prop_map(|(retry_limit, dlq_enabled)| Policy {
        retry_limit,
        dlq_enabled,
    })
}

/// Deterministic elements inside the state's span from a seed: a mix of completed and
/// signal statuses, some unresolved, some below the cursor.
fn elements_from_seed(state: &CursorState, mut seed: u64) -> Vec<Element> {
    let (lo, hi) = (state.committed + 1, state.batch_end.unwrap());
    let width = (hi - lo + 1) as u64;
    let n = (seed % 12) as usize;
    (0..n)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let status = match (seed >> 33) % 9 {
                0 => Status::Failed,
                1 => Status::Retry,
                2 => Status::Dlq,
                _ => Status::Completed,
            };
            let resolved = !(seed >> 20).is_multiple_of(5);
            let eff = resolved.then(|| lo + ((seed >> 40) % width) as i64);
            Element {
                status,
                eff,
                below: (seed >> 7) & 1 == 1,
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    /// The registry/fusion fast path (ack_upto to batch_end, as log_ack_at_v1 and each
    /// log_ack_multi_v1 row run it) leaves exactly the row the authority leaves for a
    /// full-batch all-completed ack.
    #[test]
    fn positional_full_batch_equals_by_hash(state in leased_state(), p in policy()) {
        let end = state.batch_end.unwrap();
        let all: Vec<Element> = (state.committed + 1..=end)
            .map(|o| Element { status: Status::Completed, eff: Some(o), below: false })
            .collect();
        let by_hash = decide(&state, &all, p);
        let (fast, acked) = ack_upto(&state, end).unwrap();
        prop_assert_eq!(&by_hash.state, &fast);
        prop_assert_eq!(by_hash.acked, acked);
        prop_assert!(by_hash.lease_released);
    }

    #[test]
    fn cursor_never_moves_backward(state in leased_state(), p in policy(), seed in any::<u64>()) {
        let d = decide(&state, &elements_from_seed(&state, seed), p);
        prop_assert!(d.state.committed >= state.committed);
        prop_assert!(d.acked >= 0);
        let dropped = i64::from(d.branch == Branch::Dropped);
        prop_assert_eq!(d.state.total_consumed - state.total_consumed, d.acked + dropped);
        if let Ok((s, _)) = ack_upto(&state, (seed % 40) as i64 - 5) {
            prop_assert!(s.committed >= state.committed);
        }
    }

    /// Under a lease the cursor stops strictly below the head signal; only the drop
    /// branch (DLQ disabled, budget spent) retires the poison frame itself.
    #[test]
    fn explicit_signal_is_never_skipped(state in leased_state(), p in policy(), seed in any::<u64>()) {
        let els = elements_from_seed(&state, seed);
        let d = decide(&state, &els, p);
        let head = els.iter().filter(|e| e.status.is_signal()).filter_map(|e| e.eff).min();
        if let Some(h) = head {
            if d.branch == Branch::Dropped {
                prop_assert_eq!(d.state.committed, h);
            } else {
                prop_assert!(d.state.committed < h, "cursor passed signal at {}: {:?}", h, d);
            }
        }
    }

    #[test]
    fn failed_charges_budget_at_most_once(state in leased_state(), p in policy(), seed in any::<u64>()) {
        let d = decide(&state, &elements_from_seed(&state, seed), p);
        let charged = d.state.batch_retry_count - state.batch_retry_count;
        match d.branch {
            Branch::Failed => prop_assert_eq!(charged, 1),
            Branch::Dropped => prop_assert_eq!(d.state.batch_retry_count, 0),
            Branch::Completed if d.lease_released => prop_assert_eq!(d.state.batch_retry_count, 0),
            _ => prop_assert_eq!(charged, 0),
        }
    }
}
