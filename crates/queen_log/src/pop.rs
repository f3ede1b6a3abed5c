//! The pop's decisions (docs/contract.md §5) as pure functions: where a new cursor starts, which
//! slices of which segments a budget serves, and the cursor state a lease or an auto-ack
//! leaves. The extension loads rows, calls these and writes the claim.

use crate::ack::CursorState;

/// Where a new cursor starts, once the subscription (or the pop's own mode) is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start<T> {
    /// Mode 'all': every message still in the log (`log_start − 1`).
    Beginning,
    /// Mode 'new' without a timestamp: only messages pushed from now on (`last_offset`).
    End,
    /// Just before the first segment created at or after the timestamp; at the end when
    /// there is none.
    Since(T),
}

/// What the pop itself asked for (used when the group has no subscription record): 'new'
/// or a `from` of 'now' start at the end; another non-empty `from` is a timestamp, which
/// the caller parses; anything else, unknown modes included, is 'all'.
pub fn requested_start<'a>(sub_mode: &str, sub_from: &'a str) -> Start<&'a str> {
    if sub_mode == "new" || sub_from.eq_ignore_ascii_case("now") {
        Start::End
    } else if !sub_from.is_empty() {
        Start::Since(sub_from)
    } else {
        Start::Beginning
    }
}

/// A subscription record's (mode, timestamp) as a start: 'all' from the beginning; 'new'
/// and 'timestamp' since the recorded instant (at the end when there is none).
pub fn recorded_start<T>(mode: &str, ts: Option<T>) -> Start<T> {
    match (mode, ts) {
        ("all", _) => Start::Beginning,
        (_, Some(ts)) => Start::Since(ts),
        (_, None) => Start::End,
    }
}

/// A timestamp that does not parse means 'all' (a pop never fails on it).
pub fn parsed<T, U>(start: Start<T>, parse: impl FnOnce(T) -> Option<U>) -> Start<U> {
    match start {
        Start::Beginning => Start::Beginning,
        Start::End => Start::End,
        Start::Since(t) => parse(t).map_or(Start::Beginning, Start::Since),
    }
}

/// The committed offset a new cursor gets. `first_base_since` is the base offset of the
/// first segment created at or after the `Since` instant, if any.
pub fn seed_offset<T>(
    start: &Start<T>,
    log_start: i64,
    last_offset: i64,
    first_base_since: Option<i64>,
) -> i64 {
    match start {
        Start::Beginning => log_start - 1,
        Start::End => last_offset,
        Start::Since(_) => first_base_since.map_or(last_offset, |b| b - 1),
    }
}

/// A stored segment's offset range (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub base: i64,
    pub end: i64,
}

/// One served slice: frames `start_idx .. start_idx + take` of segment `seg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// Index into the segments given to [`plan`].
    pub seg: usize,
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
    pub msg_count: i32,
}

impl Slice {
    pub fn first_offset(&self) -> i64 {
        self.base + i64::from(self.start_idx)
    }

    pub fn last_offset(&self) -> i64 {
        self.first_offset() + i64::from(self.take) - 1
    }
}

/// Up to `budget` frames from `next` onward, across consecutive segments (given in
/// ascending base order, the first one covering `next` or lying above it). After a
/// retention gap the first slice starts at the first remaining segment; a gap between
/// two later segments ends the slices (offsets are never skipped mid-batch).
pub fn plan(next: i64, budget: i64, segs: &[Span]) -> Vec<Slice> {
    let mut left = budget.max(0);
    let mut out: Vec<Slice> = Vec::new();
    let mut want = next;
    for (i, s) in segs.iter().enumerate() {
        if s.end < want {
            continue;
        }
        if left == 0 || (!out.is_empty() && s.base != want) {
            break;
        }
        let start = want.max(s.base);
        let take = (s.end - start + 1).min(left);
        left -= take;
        want = start + take;
        out.push(Slice {
            seg: i,
            base: s.base,
            start_idx: (start - s.base) as i32,
            take: take as i32,
            msg_count: (s.end - s.base + 1) as i32,
        });
    }
    out
}

/// How many of a pop's segments (ascending base order, by created_at) it may serve under
/// `delayedProcessing`: a message becomes visible at its segment's created_at + delay, so
/// only segments created at or before `deadline` (now − delay) count; `None` (no delay)
/// counts them all without looking. created_at is monotone in base_offset (stamped under
/// the partition row lock), so the visible segments are a prefix: the first one that is
/// still too young stops the pop (head of line), and nothing behind it is served first.
pub fn visible_prefix<T: PartialOrd>(created: &[T], deadline: Option<&T>) -> usize {
    match deadline {
        None => created.len(),
        Some(d) => created.iter().take_while(|c| *c <= d).count(),
    }
}

/// What a pop does with the segments at and above its cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Serve these slices.
    Serve(Vec<Slice>),
    /// Messages exist above the cursor but none is visible yet (`delayedProcessing`):
    /// serve nothing and leave the cursor alone.
    Deferred,
    /// No segment holds an offset above the cursor: a hole the caller may seal.
    Empty,
}

/// [`plan`] over the first `visible` of `segs` (see [`visible_prefix`]), telling a
/// deferred partition from an empty one: only an empty one may have its hole sealed (a
/// seal over deferred messages would skip them).
pub fn plan_visible(next: i64, budget: i64, segs: &[Span], visible: usize) -> Outcome {
    let slices = plan(next, budget, &segs[..visible.min(segs.len())]);
    if !slices.is_empty() {
        Outcome::Serve(slices)
    } else if segs.iter().any(|s| s.end >= next) {
        Outcome::Deferred
    } else {
        Outcome::Empty
    }
}

/// Frames served by a plan.
pub fn taken(slices: &[Slice]) -> i64 {
    slices.iter().map(|s| i64::from(s.take)).sum()
}

/// Nothing to serve although offsets above the cursor were allocated: their segments are
/// gone (retention), so the cursor is sealed at `last_offset` rather than starve on a hole.
pub fn seal_hole(committed: i64, last_offset: i64) -> Option<i64> {
    (last_offset > committed).then_some(last_offset)
}

/// The state a lease of `[first, last]` leaves: the batch end is the last delivered
/// offset; a batch starting where the last delivery started is a redelivery (attempt + 1).
pub fn leased(state: &CursorState, first: i64, last: i64) -> CursorState {
    CursorState {
        batch_end: Some(last),
        attempt_count: if state.attempt_offset == Some(first) {
            state.attempt_count + 1
        } else {
            1
        },
        attempt_offset: Some(first),
        ..state.clone()
    }
}

/// The state an auto-ack pop leaves: everything served is committed, no lease.
pub fn auto_acked(state: &CursorState, last: i64, taken: i64) -> CursorState {
    CursorState {
        committed: last,
        batch_end: None,
        total_consumed: state.total_consumed + taken,
        ..state.clone()
    }
}

/// A queue-level pop's global cap, spent partition by partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget(i64);

impl Budget {
    pub fn new(n: i64) -> Self {
        Budget(n.max(0))
    }

    pub fn left(&self) -> i64 {
        self.0
    }

    pub fn is_spent(&self) -> bool {
        self.0 == 0
    }

    pub fn spend(&mut self, n: i64) {
        self.0 = (self.0 - n).max(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(v: &[(i64, i64)]) -> Vec<Span> {
        v.iter().map(|&(base, end)| Span { base, end }).collect()
    }

    #[test]
    fn requested_start_modes() {
        assert_eq!(requested_start("new", ""), Start::End);
        assert_eq!(requested_start("all", "NOW"), Start::End);
        assert_eq!(
            requested_start("timestamp", "2026-01-01"),
            Start::Since("2026-01-01")
        );
        assert_eq!(
            requested_start("all", "2026-01-01"),
            Start::Since("2026-01-01")
        );
        assert_eq!(requested_start("bogus", ""), Start::Beginning);
        assert_eq!(requested_start("all", ""), Start::Beginning);
    }

    #[test]
    fn recorded_start_modes() {
        assert_eq!(recorded_start("all", Some(5)), Start::Beginning);
        assert_eq!(recorded_start("new", Some(5)), Start::Since(5));
        assert_eq!(recorded_start::<i32>("timestamp", None), Start::End);
    }

    #[test]
    fn an_unparseable_timestamp_means_all() {
        let s = parsed(Start::Since("garbage"), |_| None::<i64>);
        assert_eq!(s, Start::Beginning);
        assert_eq!(parsed(Start::Since("x"), |_| Some(7)), Start::Since(7));
    }

    #[test]
    fn seed_offsets() {
        assert_eq!(seed_offset(&Start::<()>::Beginning, 10, 20, None), 9);
        assert_eq!(seed_offset(&Start::<()>::End, 10, 20, None), 20);
        assert_eq!(seed_offset(&Start::Since(()), 10, 20, Some(15)), 14);
        assert_eq!(seed_offset(&Start::Since(()), 10, 20, None), 20);
    }

    #[test]
    fn plan_starts_mid_segment_and_spans_segments() {
        let p = plan(3, 10, &spans(&[(0, 4), (5, 9), (10, 19)]));
        assert_eq!(
            p.iter()
                .map(|s| (s.base, s.start_idx, s.take))
                .collect::<Vec<_>>(),
            vec![(0, 3, 2), (5, 0, 5), (10, 0, 3)]
        );
        assert_eq!(taken(&p), 10);
        assert_eq!(p.last().unwrap().last_offset(), 12);
        assert_eq!(p[0].msg_count, 5);
    }

    #[test]
    fn plan_after_a_retention_gap_starts_at_the_first_segment() {
        let p = plan(2, 3, &spans(&[(10, 19)]));
        assert_eq!(p[0].first_offset(), 10);
        assert_eq!(p[0].take, 3);
    }

    #[test]
    fn plan_never_skips_offsets_between_segments() {
        let p = plan(0, 100, &spans(&[(0, 4), (8, 9)]));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].last_offset(), 4);
    }

    #[test]
    fn plan_skips_segments_below_next_and_stops_at_the_budget() {
        let p = plan(5, 2, &spans(&[(0, 4), (5, 9)]));
        assert_eq!((p[0].seg, p[0].start_idx, p[0].take), (1, 0, 2));
        assert!(plan(0, 0, &spans(&[(0, 4)])).is_empty());
        assert!(plan(10, 5, &spans(&[(0, 4)])).is_empty());
    }

    #[test]
    fn only_segments_old_enough_are_visible_and_the_first_young_one_stops() {
        assert_eq!(visible_prefix(&[1, 2, 3], None), 3, "no delay: all, unread");
        assert_eq!(
            visible_prefix(&[1, 2, 3], Some(&2)),
            2,
            "created at the deadline counts"
        );
        assert_eq!(visible_prefix(&[5, 6], Some(&4)), 0);
        assert_eq!(visible_prefix::<i64>(&[], Some(&4)), 0);
    }

    #[test]
    fn a_deferred_partition_serves_nothing_and_is_not_a_hole() {
        let segs = spans(&[(0, 4), (5, 9), (10, 19)]);
        let Outcome::Serve(p) = plan_visible(3, 100, &segs, 2) else {
            panic!("visible part is served")
        };
        assert_eq!(
            p.last().unwrap().last_offset(),
            9,
            "stops before the young segment"
        );
        assert_eq!(plan_visible(10, 100, &segs, 2), Outcome::Deferred);
        assert_eq!(plan_visible(0, 100, &segs, 0), Outcome::Deferred);
        assert_eq!(plan_visible(20, 100, &segs, 3), Outcome::Empty);
        assert_eq!(plan_visible(0, 100, &[], 0), Outcome::Empty);
        assert_eq!(
            plan_visible(0, 100, &segs, 3),
            Outcome::Serve(plan(0, 100, &segs))
        );
    }

    #[test]
    fn hole_is_sealed_only_when_offsets_were_allocated() {
        assert_eq!(seal_hole(4, 9), Some(9));
        assert_eq!(seal_hole(9, 9), None);
    }

    fn cursor() -> CursorState {
        CursorState {
            committed: 4,
            batch_end: None,
            batch_retry_count: 1,
            attempt_offset: Some(5),
            attempt_count: 2,
            total_consumed: 5,
        }
    }

    #[test]
    fn a_lease_at_the_last_attempt_start_is_a_redelivery() {
        let s = leased(&cursor(), 5, 9);
        assert_eq!(
            (s.batch_end, s.attempt_offset, s.attempt_count),
            (Some(9), Some(5), 3)
        );
        assert_eq!(
            s.batch_retry_count, 1,
            "a pop never spends or resets the budget"
        );
        let t = leased(&cursor(), 7, 9);
        assert_eq!((t.attempt_offset, t.attempt_count), (Some(7), 1));
    }

    #[test]
    fn auto_ack_commits_what_was_served() {
        let s = auto_acked(&cursor(), 9, 5);
        assert_eq!((s.committed, s.batch_end, s.total_consumed), (9, None, 10));
    }

    #[test]
    fn budget_is_a_global_cap() {
        let mut b = Budget::new(5);
        b.spend(3);
        assert_eq!(b.left(), 2);
        b.spend(4);
        assert!(b.is_spent());
        assert!(Budget::new(-1).is_spent());
    }
}

/// The seed of [`try_order`] for one pop: its worker (the lease id a leasing pop names,
/// fresh for every pop the broker makes) when it has one, so the same pop makes the same
/// choices on any node, else the backend's pid (auto-acking pops name none).
pub fn try_seed(worker: &str, backend_pid: u32) -> usize {
    if worker.is_empty() {
        backend_pid as usize
    } else {
        let h = crate::hash::txn_hash(worker);
        usize::from_be_bytes(
            h[..std::mem::size_of::<usize>()]
                .try_into()
                .expect("16 bytes"),
        )
    }
}

/// The order a queue pop tries one page of candidate partitions in
/// (docs/decisions.md, "Which partitions a queue pop tries"): the first, the one that
/// waited longest, always first; then from a place of this caller's own ([`try_seed`]),
/// wrapping. Concurrent pops read the same page, and trying it from the
/// same end made each later one step over every partition the earlier ones had locked,
/// one statement each; a pop alone serves its first partition as before.
pub fn try_order(len: usize, seed: usize) -> impl Iterator<Item = usize> {
    let rest = len.saturating_sub(1);
    let start = if rest == 0 { 0 } else { seed % rest };
    (0..len.min(1)).chain((0..rest).map(move |i| 1 + (start + i) % rest))
}

/// Why a pop asking for conflation (last-value delivery, docs/decisions.md "Conflation")
/// is refused, if it is: it is a consumer group's policy, and the newest message's ack is
/// what retires everything behind it, so commit-on-delivery has nothing to retire with.
/// The extension refuses the same (22023).
pub fn conflation_refusal(named_group: bool, auto_ack: bool) -> Option<&'static str> {
    if !named_group {
        Some("conflation=true needs a consumerGroup (it is a consumer group's policy)")
    } else if auto_ack {
        Some("conflation=true cannot be combined with autoAck (commit on delivery)")
    } else {
        None
    }
}

/// What the answer to a pop that asked for conflation says, given the policies stored for
/// the group on the queues it popped: `Conflating` (`"conflation": true`) when every one
/// conflates, else `Conflict` (`"conflationConflict": true`: a stored non-conflating
/// policy won, as Queen's SDK expects). A pop that did not ask gets no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflationEcho {
    Conflating,
    Conflict,
}

pub fn conflation_echo(stored: impl IntoIterator<Item = bool>) -> ConflationEcho {
    if stored.into_iter().all(|c| c) {
        ConflationEcho::Conflating
    } else {
        ConflationEcho::Conflict
    }
}

#[cfg(test)]
mod conflation_tests {
    use super::*;

    #[test]
    fn refusals_and_echoes() {
        assert!(conflation_refusal(false, false).is_some());
        assert!(conflation_refusal(true, true).is_some());
        assert_eq!(conflation_refusal(true, false), None);
        assert_eq!(conflation_echo([true, true]), ConflationEcho::Conflating);
        assert_eq!(conflation_echo([true, false]), ConflationEcho::Conflict);
    }

    #[test]
    fn try_order_tries_the_longest_waiting_first_then_every_other_once() {
        assert_eq!(try_order(0, 7).count(), 0);
        assert_eq!(try_order(1, 7).collect::<Vec<_>>(), vec![0]);
        assert_eq!(try_order(5, 0).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        assert_eq!(try_order(5, 6).collect::<Vec<_>>(), vec![0, 3, 4, 1, 2]);
        for seed in 0..20 {
            let mut o: Vec<usize> = try_order(12, seed).collect();
            assert_eq!(o[0], 0);
            o.sort_unstable();
            assert_eq!(o, (0..12).collect::<Vec<_>>());
        }
    }

    #[test]
    fn try_seed_is_the_workers_hash_or_the_backends_pid() {
        assert_eq!(try_seed("", 4242), 4242);
        assert_eq!(
            try_seed("w1", 1),
            try_seed("w1", 2),
            "the same pop, the same seed"
        );
        assert_ne!(try_seed("w1", 1), try_seed("w2", 1));
    }
}
