//! Retention's decisions (docs/contract.md §13) as pure functions: how many whole segments from
//! the low end of a partition the two rules let go, where the log then starts, and what a
//! lagging cursor loses.
//!
//! Both rules select a prefix of the partition's segments: created_at is monotone in
//! base_offset (it is stamped after the partition row lock), and so is end_offset. The
//! union of the two prefixes is the longer one.

use crate::ack::CursorState;

/// What retention needs of a stored segment; `created_us` is any monotone clock reading
/// (microseconds), compared only with the cutoffs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentAge {
    pub base: i64,
    pub end: i64,
    pub created_us: i64,
}

/// The two rules' inputs. A rule is off when its cutoff is None.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Rule 1 (`retention_seconds`): segments created before this go, consumed or not.
    pub all_cutoff_us: Option<i64>,
    /// Rule 2 (`completed_retention_seconds`): segments created before this go when every
    /// consumer group has committed past them.
    pub completed_cutoff_us: Option<i64>,
    /// MIN(committed) over the partition's cursor rows; None when it has none (then
    /// nothing counts as consumed).
    pub min_committed: Option<i64>,
}

/// How the segments to delete split by rule (a segment both rules allow counts as
/// completed: nothing unconsumed was lost with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Prefix {
    /// Segments to delete from the low end.
    pub len: usize,
    /// Of those, segments only rule 1 allowed (some group had not consumed them).
    pub expired: usize,
}

/// The prefix of `segs` (ascending base_offset) the rules let go, at most `max`.
pub fn retention_prefix(segs: &[SegmentAge], rules: Rules, max: usize) -> Prefix {
    let older = |s: &SegmentAge, cut: Option<i64>| cut.is_some_and(|c| s.created_us < c);
    let completed = |s: &SegmentAge| {
        older(s, rules.completed_cutoff_us) && rules.min_committed.is_some_and(|m| s.end <= m)
    };
    let by_completion = segs.iter().take(max).take_while(|s| completed(s)).count();
    let by_age = segs
        .iter()
        .take(max)
        .take_while(|s| older(s, rules.all_cutoff_us))
        .count();
    let len = by_completion.max(by_age);
    Prefix {
        len,
        expired: len - by_completion,
    }
}

/// Where the log starts once `deleted` segments of `segs` are gone: the first remaining
/// segment's base, or `last_offset + 1` when none remains. `segs` must hold every
/// segment up to at least one past the deleted prefix, or all of them.
pub fn new_log_start(segs: &[SegmentAge], deleted: usize, log_start: i64, last_offset: i64) -> i64 {
    match segs.get(deleted) {
        Some(s) => s.base,
        None if deleted == 0 => log_start,
        None => last_offset + 1,
    }
}

/// A cursor left below the new log start moves up to `log_start − 1`; returns the new
/// state and the messages that group lost unconsumed, or None when the cursor is not
/// behind. A lease wholly below the new start is released (nothing of it is left to
/// deliver); one reaching above it is kept.
pub fn evict(state: &CursorState, log_start: i64) -> Option<(CursorState, i64)> {
    let floor = log_start - 1;
    if state.committed >= floor {
        return None;
    }
    let mut next = state.clone();
    next.committed = floor;
    if next.batch_end.is_some_and(|end| end <= floor) {
        next.batch_end = None;
        next.attempt_offset = None;
        next.attempt_count = 0;
    }
    Some((next, floor - state.committed))
}

/// A caller's cutoff clamped to the partition's own policy (docs/contract.md §13): a rule whose
/// queue setting is 0 is off whatever the caller asks, and no cutoff is later than
/// `now − policy`, so no caller (the broker's role included) can evict more than the queue
/// allows. Returns the cutoff to apply and whether the request was clamped.
pub fn clamp_cutoff(
    requested: Option<i64>,
    policy_seconds: i64,
    now_us: i64,
) -> (Option<i64>, bool) {
    let Some(req) = requested else {
        return (None, false);
    };
    if policy_seconds <= 0 {
        return (None, true);
    }
    let floor = now_us.saturating_sub(policy_seconds.saturating_mul(1_000_000));
    (Some(req.min(floor)), req > floor)
}

/// What a group registered on the queue but without a cursor on this partition loses
/// when the log now starts at `log_start`: it would be seeded at `seed` on first contact
/// (its subscription's start), so everything between is lost to it. None when nothing is.
pub fn pending_loss(seed: i64, log_start: i64) -> Option<i64> {
    let floor = log_start - 1;
    (seed < floor).then_some(floor - seed)
}

/// The sidecar purge's clock (docs/contract.md §10, §13): hashes are kept for at least the
/// largest of the dedup window, the completed retention and 900 s.
pub fn purge_keep_seconds(dedup_window: i64, completed_retention: i64) -> i64 {
    dedup_window.max(completed_retention).max(900)
}

/// A queue's message expiry in seconds (docs/decisions.md, "Queue options"): `ttl`, or
/// `maxWaitTimeSeconds` when that is shorter, so a group that starts reading after the
/// maintenance step ran is not served what waited too long either; 0 when neither is set.
pub fn expiry_seconds(ttl: i32, max_wait: i32) -> i32 {
    [ttl, max_wait]
        .into_iter()
        .filter(|s| *s > 0)
        .min()
        .unwrap_or(0)
}

/// The expiry rule, the one both halves apply: at `now_us`, a message created before the
/// returned cutoff has waited longer than `seconds` (`ttl`, `maxWaitTimeSeconds`); one
/// created at or after it has not. None when `seconds` is 0 or less (no expiry). The pop
/// moves a cursor past what is older (pop's expiry), run_maintenance's plan
/// (`queen.expired_v1`) picks the partitions where the slowest group's next message is.
pub fn expiry_cutoff(now_us: i64, seconds: i32) -> Option<i64> {
    (seconds > 0).then(|| now_us.saturating_sub(i64::from(seconds).saturating_mul(1_000_000)))
}

/// Whether a message created at `created_us` has expired at `now_us` ([`expiry_cutoff`]).
pub fn expired(created_us: i64, now_us: i64, seconds: i32) -> bool {
    expiry_cutoff(now_us, seconds).is_some_and(|cutoff| created_us < cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_the_shorter_of_ttl_and_max_wait_and_zero_is_off() {
        assert_eq!(expiry_seconds(0, 0), 0);
        assert_eq!(expiry_seconds(60, 0), 60);
        assert_eq!(expiry_seconds(0, 30), 30);
        assert_eq!(expiry_seconds(60, 30), 30);
        assert_eq!(expiry_seconds(20, 30), 20);
        assert_eq!(expiry_seconds(-1, 30), 30);
    }

    #[test]
    fn expired_strictly_before_the_cutoff() {
        let now = 100_000_000;
        assert_eq!(expiry_cutoff(now, 0), None);
        assert_eq!(expiry_cutoff(now, 10), Some(90_000_000));
        assert!(expired(89_999_999, now, 10));
        assert!(
            !expired(90_000_000, now, 10),
            "exactly `seconds` old is not expired"
        );
        assert!(!expired(0, now, 0), "0 seconds: nothing expires");
        assert!(!expired(0, now, -5));
        assert_eq!(expiry_cutoff(i64::MIN + 1, i32::MAX), Some(i64::MIN));
    }

    fn segs(v: &[(i64, i64, i64)]) -> Vec<SegmentAge> {
        v.iter()
            .map(|&(base, end, created_us)| SegmentAge {
                base,
                end,
                created_us,
            })
            .collect()
    }

    const LOG: [(i64, i64, i64); 4] = [(0, 4, 10), (5, 9, 20), (10, 14, 30), (15, 19, 40)];

    fn rules(all: Option<i64>, completed: Option<i64>, min: Option<i64>) -> Rules {
        Rules {
            all_cutoff_us: all,
            completed_cutoff_us: completed,
            min_committed: min,
        }
    }

    #[test]
    fn rule1_deletes_old_segments_consumed_or_not() {
        let p = retention_prefix(&segs(&LOG), rules(Some(25), None, Some(-1)), 10);
        assert_eq!(p, Prefix { len: 2, expired: 2 });
    }

    #[test]
    fn rule2_keeps_what_any_group_still_needs_and_partly_consumed_segments() {
        let s = segs(&LOG);
        // Slowest group committed 12: segment [10, 14] is only partly consumed.
        assert_eq!(
            retention_prefix(&s, rules(None, Some(100), Some(12)), 10).len,
            2
        );
        // Exactly at a segment end, it goes.
        assert_eq!(
            retention_prefix(&s, rules(None, Some(100), Some(14)), 10).len,
            3
        );
        // No cursor rows: nothing is consumed, nothing goes.
        assert_eq!(
            retention_prefix(&s, rules(None, Some(100), None), 10).len,
            0
        );
        // Consumed but younger than the cutoff: kept.
        assert_eq!(
            retention_prefix(&s, rules(None, Some(15), Some(19)), 10).len,
            1
        );
    }

    #[test]
    fn the_longer_prefix_wins_and_counts_what_was_unconsumed() {
        let s = segs(&LOG);
        let p = retention_prefix(&s, rules(Some(35), Some(100), Some(9)), 10);
        assert_eq!(p, Prefix { len: 3, expired: 1 });
    }

    #[test]
    fn bounded_by_max_rows() {
        let p = retention_prefix(&segs(&LOG), rules(Some(100), None, None), 2);
        assert_eq!(p.len, 2);
    }

    #[test]
    fn log_start_is_the_first_live_segment_or_past_the_end() {
        let s = segs(&LOG);
        assert_eq!(new_log_start(&s, 2, 0, 19), 10);
        assert_eq!(new_log_start(&s, 4, 0, 19), 20);
        assert_eq!(new_log_start(&s, 0, 0, 19), 0);
        assert_eq!(new_log_start(&[], 0, 7, 6), 7);
    }

    fn cursor(committed: i64, batch_end: Option<i64>) -> CursorState {
        CursorState {
            committed,
            batch_end,
            batch_retry_count: 1,
            attempt_offset: batch_end.map(|_| committed + 1),
            attempt_count: 2,
            total_consumed: 3,
        }
    }

    #[test]
    fn a_lagging_cursor_moves_up_and_counts_its_loss() {
        let (next, lost) = evict(&cursor(3, None), 10).unwrap();
        assert_eq!((next.committed, lost, next.total_consumed), (9, 6, 3));
        assert!(evict(&cursor(9, None), 10).is_none());
        assert!(evict(&cursor(15, None), 10).is_none());
    }

    #[test]
    fn a_lease_below_the_new_start_is_released_one_above_is_kept() {
        let (gone, _) = evict(&cursor(3, Some(8)), 10).unwrap();
        assert_eq!(
            (gone.batch_end, gone.attempt_offset, gone.attempt_count),
            (None, None, 0)
        );
        let (kept, lost) = evict(&cursor(3, Some(12)), 10).unwrap();
        assert_eq!((kept.batch_end, kept.committed, lost), (Some(12), 9, 6));
    }

    #[test]
    fn cutoffs_are_clamped_to_the_policy() {
        let now = 1_000_000_000;
        // No policy: the rule is off, whatever was asked.
        assert_eq!(clamp_cutoff(Some(i64::MAX), 0, now), (None, true));
        assert_eq!(clamp_cutoff(None, 0, now), (None, false));
        assert_eq!(clamp_cutoff(None, 60, now), (None, false));
        // A later cutoff than the policy allows is pulled back; an earlier one stands.
        assert_eq!(
            clamp_cutoff(Some(i64::MAX), 60, now),
            (Some(now - 60_000_000), true)
        );
        assert_eq!(
            clamp_cutoff(Some(now - 120_000_000), 60, now),
            (Some(now - 120_000_000), false)
        );
    }

    #[test]
    fn a_cursorless_group_loses_what_lies_below_the_new_start() {
        assert_eq!(pending_loss(-1, 30), Some(29 + 1));
        assert_eq!(pending_loss(29, 30), None);
        assert_eq!(pending_loss(40, 30), None);
    }

    #[test]
    fn purge_clock() {
        assert_eq!(purge_keep_seconds(3600, 0), 3600);
        assert_eq!(purge_keep_seconds(2, 5000), 5000);
        assert_eq!(purge_keep_seconds(0, 0), 900);
    }
}
