//! Properties of the pop's slice planning and lease transitions over random logs.

use proptest::prelude::*;
use queen_log::ack::CursorState;
use queen_log::pop::*;

/// A log as pushes build it: contiguous segments from `log_start`, lengths 1..8.
fn log() -> impl Strategy<Value = Vec<Span>> {
    (0i64..30, prop::collection::vec(1i64..8, 0..12)).prop_map(|(start, lens)| {
        let mut base = start;
        lens.into_iter()
            .map(|n| {
                let s = Span {
                    base,
                    end: base + n - 1,
                };
                base += n;
                s
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn a_plan_serves_contiguous_offsets_within_budget(segs in log(), next in -1i64..120, budget in 0i64..40) {
        let p = plan(next, budget, &segs);
        let served: Vec<i64> = p.iter().flat_map(|s| s.first_offset()..=s.last_offset()).collect();
        prop_assert!(served.len() as i64 <= budget);
        prop_assert_eq!(served.len() as i64, taken(&p));
        prop_assert!(served.windows(2).all(|w| w[1] == w[0] + 1), "contiguous: {:?}", served);
        if let Some(&first) = served.first() {
            // It starts at `next`, or at the first segment above it after a retention gap.
            let start = segs.iter().find(|s| s.end >= next).map(|s| next.max(s.base)).unwrap();
            prop_assert_eq!(first, start);
        }
        for s in &p {
            let seg = segs[s.seg];
            prop_assert_eq!(s.base, seg.base);
            prop_assert!(s.start_idx >= 0 && s.take >= 1);
            prop_assert!(s.last_offset() <= seg.end);
            prop_assert_eq!(i64::from(s.msg_count), seg.end - seg.base + 1);
        }
    }

    #[test]
    fn a_plan_serves_everything_available_up_to_the_budget(segs in log(), next in -1i64..120, budget in 0i64..40) {
        let available: i64 = segs.iter().map(|s| (s.end - next.max(s.base) + 1).max(0)).sum();
        prop_assert_eq!(taken(&plan(next, budget, &segs)), available.min(budget));
    }

    #[test]
    fn a_delayed_pop_never_serves_a_young_message_and_keeps_order(
        segs in log(), gaps in prop::collection::vec(0i64..3, 12), next in -1i64..120,
        budget in 1i64..40, deadline in 0i64..30,
    ) {
        // created_at is monotone in base_offset (equal instants allowed).
        let created: Vec<i64> = gaps.iter().take(segs.len())
            .scan(0i64, |t, g| { *t += g; Some(*t) }).collect();
        let visible = visible_prefix(&created, Some(&deadline));
        match plan_visible(next, budget, &segs, visible) {
            Outcome::Serve(p) => {
                for s in &p {
                    prop_assert!(created[s.seg] <= deadline, "served a young segment");
                }
                // Exactly what an undelayed pop serves of the visible prefix, in order.
                prop_assert_eq!(p, plan(next, budget, &segs[..visible]));
            }
            Outcome::Deferred => {
                prop_assert!(segs.iter().any(|s| s.end >= next));
                let young = segs.iter().zip(&created).filter(|(s, _)| s.end >= next);
                prop_assert!(young.clone().next().is_some_and(|(_, c)| *c > deadline),
                             "deferred although the head segment is visible");
            }
            Outcome::Empty => prop_assert!(segs.iter().all(|s| s.end < next)),
        }
        // Without a delay the outcome is the plain plan.
        let all = visible_prefix(&created, None);
        prop_assert_eq!(all, segs.len());
    }

    #[test]
    fn leasing_never_moves_the_cursor_or_spends_budget(
        committed in -1i64..50, first_delta in 1i64..5, len in 0i64..10,
        attempt_offset in prop::option::of(0i64..60), attempt_count in 0i32..5, retries in 0i32..4,
    ) {
        let s = CursorState { committed, batch_end: None, batch_retry_count: retries,
                              attempt_offset, attempt_count, total_consumed: 3 };
        let first = committed + first_delta;
        let l = leased(&s, first, first + len);
        prop_assert_eq!(l.committed, s.committed);
        prop_assert_eq!(l.total_consumed, s.total_consumed);
        prop_assert_eq!(l.batch_retry_count, s.batch_retry_count);
        prop_assert_eq!(l.batch_end, Some(first + len));
        prop_assert_eq!(l.attempt_offset, Some(first));
        prop_assert!(l.attempt_count >= 1);
        let a = auto_acked(&s, first + len, len + 1);
        prop_assert_eq!(a.committed, first + len);
        prop_assert_eq!(a.total_consumed, s.total_consumed + len + 1);
        prop_assert!(a.batch_end.is_none());
    }
}
