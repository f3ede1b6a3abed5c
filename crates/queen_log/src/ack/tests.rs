use super::*;

fn leased(committed: i64, batch_end: i64) -> CursorState {
    CursorState {
        committed,
        batch_end: Some(batch_end),
        batch_retry_count: 0,
        attempt_offset: Some(committed + 1),
        attempt_count: 1,
        total_consumed: 0,
    }
}

fn el(status: Status, eff: Option<i64>, below: bool) -> Element {
    Element { status, eff, below }
}

fn ok(off: i64) -> Element {
    el(Status::Completed, Some(off), false)
}

#[test]
fn status_parse_accepts_ok_spellings_and_signals() {
    for s in [
        None,
        Some(""),
        Some("completed"),
        Some("success"),
        Some("acked"),
        Some("ok"),
    ] {
        assert_eq!(Status::parse(s), Ok(Status::Completed));
    }
    assert_eq!(Status::parse(Some("failed")), Ok(Status::Failed));
    assert_eq!(Status::parse(Some("retry")), Ok(Status::Retry));
    assert_eq!(Status::parse(Some("dlq")), Ok(Status::Dlq));
    let err = Status::parse(Some("FAILED")).unwrap_err();
    assert_eq!(err.to_string(), "unknown ack status \"FAILED\"");
}

#[test]
fn full_batch_completion_releases_and_resets() {
    let mut s = leased(9, 14);
    s.batch_retry_count = 2;
    let d = decide(
        &s,
        &(10..=14).map(ok).collect::<Vec<_>>(),
        Policy::default(),
    );
    assert_eq!(d.branch, Branch::Completed);
    assert_eq!((d.state.committed, d.acked, d.off), (14, 5, 14));
    assert!(d.lease_released);
    assert_eq!(d.state.batch_end, None);
    assert_eq!((d.state.attempt_offset, d.state.attempt_count), (None, 0));
    assert_eq!(d.state.batch_retry_count, 0);
    assert_eq!(d.state.total_consumed, 5);
}

#[test]
fn implicit_gap_completion_acks_silent_positions() {
    let d = decide(&leased(9, 14), &[ok(14)], Policy::default());
    assert_eq!((d.state.committed, d.acked), (14, 5));
    assert!(d.lease_released);
}

#[test]
fn partial_ack_keeps_lease_and_moves_attempt_offset() {
    let d = decide(&leased(9, 14), &[ok(10), ok(11)], Policy::default());
    assert_eq!(d.state.committed, 11);
    assert_eq!(d.state.batch_end, Some(14));
    assert_eq!(d.state.attempt_offset, Some(12));
    assert!(!d.lease_released);
}

#[test]
fn nothing_resolved_is_a_partial_ack_of_zero() {
    let d = decide(
        &leased(9, 14),
        &[el(Status::Completed, None, false)],
        Policy::default(),
    );
    assert_eq!((d.state.committed, d.acked), (9, 0));
    assert_eq!(d.state.batch_end, Some(14));
    assert_eq!(d.unresolved, vec![0]);
}

#[test]
fn lowest_signal_wins_and_completed_above_it_redeliver() {
    let els = [
        ok(10),
        el(Status::Retry, Some(11), false),
        ok(12),
        el(Status::Failed, Some(13), false),
    ];
    let d = decide(&leased(9, 14), &els, Policy::default());
    assert_eq!(d.branch, Branch::Retry);
    assert_eq!((d.state.committed, d.off), (10, 10));
    assert_eq!(
        d.state.batch_retry_count, 0,
        "retry never charges the budget"
    );
    assert!(d.lease_released);
}

#[test]
fn tie_break_at_one_offset_prefers_dlq_then_failed() {
    let s = leased(9, 14);
    let d = decide(
        &s,
        &[
            el(Status::Retry, Some(12), false),
            el(Status::Failed, Some(12), false),
        ],
        Policy::default(),
    );
    assert_eq!(d.branch, Branch::Failed);
    let d = decide(
        &s,
        &[
            el(Status::Failed, Some(12), false),
            el(Status::Dlq, Some(12), false),
        ],
        Policy::default(),
    );
    assert_eq!(d.branch, Branch::Dlq);
    assert_eq!(d.off, 12);
}

#[test]
fn failed_with_budget_charges_once_and_releases() {
    let els = [
        ok(10),
        el(Status::Failed, Some(11), false),
        el(Status::Failed, Some(12), false),
    ];
    let d = decide(&leased(9, 14), &els, Policy::default());
    assert_eq!(d.branch, Branch::Failed);
    assert_eq!((d.state.committed, d.off, d.acked), (10, 10, 1));
    assert_eq!(d.state.batch_retry_count, 1);
    assert_eq!(d.state.attempt_offset, Some(10), "attempt state unchanged");
    assert!(d.lease_released);
}

#[test]
fn failed_with_budget_spent_and_dlq_on_hands_off_keeping_lease() {
    let mut s = leased(9, 14);
    s.batch_retry_count = 3;
    let d = decide(
        &s,
        &[ok(10), el(Status::Failed, Some(11), false)],
        Policy::default(),
    );
    assert_eq!(d.branch, Branch::Dlq);
    assert_eq!((d.state.committed, d.off), (10, 11));
    assert_eq!(d.state.batch_end, Some(14));
    assert_eq!(
        d.state.batch_retry_count, 3,
        "counter not reset by the hand-off"
    );
    assert!(!d.lease_released);
}

#[test]
fn failed_with_budget_spent_and_dlq_off_drops_the_poison_frame() {
    let mut s = leased(9, 14);
    s.batch_retry_count = 1;
    let p = Policy {
        retry_limit: 1,
        dlq_enabled: false,
    };
    let d = decide(&s, &[ok(10), el(Status::Failed, Some(12), false)], p);
    assert_eq!(d.branch, Branch::Dropped);
    assert_eq!((d.state.committed, d.off, d.acked), (12, 12, 1));
    assert_eq!(d.state.total_consumed, 2, "acked + the poison frame");
    assert_eq!(d.state.batch_retry_count, 0);
    assert!(d.lease_released);
}

#[test]
fn signals_without_lease_take_branch_four_but_still_clamp() {
    let s = CursorState {
        batch_end: None,
        ..leased(9, 14)
    };
    let d = decide(
        &s,
        &[ok(10), el(Status::Failed, Some(11), false), ok(12)],
        Policy::default(),
    );
    assert_eq!(d.branch, Branch::Completed);
    assert_eq!(d.state.committed, 10);
    assert_eq!(d.state.batch_retry_count, 0);
    assert!(!d.lease_released);
}

#[test]
fn lists_classify_unresolved_elements() {
    let els = [
        el(Status::Completed, None, true),
        el(Status::Failed, None, true),
        el(Status::Completed, None, false),
        ok(10),
        el(Status::Completed, None, true),
    ];
    let d = decide(&leased(9, 14), &els, Policy::default());
    assert_eq!(d.noop, vec![0, 4]);
    assert_eq!(d.stale, vec![1]);
    assert_eq!(d.unresolved, vec![2]);
}

#[test]
fn positional_ack_checks_batch_and_never_moves_backward() {
    assert_eq!(
        ack_upto(
            &CursorState {
                batch_end: None,
                ..leased(9, 14)
            },
            12
        ),
        Err(PositionalError::NoLeasedBatch)
    );
    assert_eq!(
        ack_upto(&leased(9, 14), 15),
        Err(PositionalError::BeyondBatch)
    );
    let (s, n) = ack_upto(&leased(9, 14), 5).unwrap();
    assert_eq!((s.committed, n, s.batch_end), (9, 0, None));
    let (s, n) = ack_upto(&leased(9, 14), 12).unwrap();
    assert_eq!((s.committed, n), (12, 3));
    assert_eq!(
        s.attempt_offset,
        Some(10),
        "partial positional keeps attempt state"
    );
}

#[test]
fn a_cycle_commit_keeping_the_lease_moves_the_cursor_and_keeps_the_rest_leased() {
    let (s, n) = ack_upto_keeping_lease(&leased(9, 14), 12).unwrap();
    assert_eq!((s.committed, n, s.batch_end), (12, 3, Some(14)));
    assert_eq!(s.total_consumed, 3);
    // Reaching the batch's end releases it, as a plain positional ack does.
    let (s, n) = ack_upto_keeping_lease(&leased(9, 14), 14).unwrap();
    assert_eq!(
        (s.committed, n, s.batch_end, s.attempt_offset),
        (14, 5, None, None)
    );
    assert_eq!(
        ack_upto_keeping_lease(&leased(9, 14), 15),
        Err(PositionalError::BeyondBatch)
    );
    let unleased = CursorState {
        batch_end: None,
        ..leased(9, 14)
    };
    assert_eq!(
        ack_upto_keeping_lease(&unleased, 12),
        Err(PositionalError::NoLeasedBatch)
    );
    let (s, n) = ack_upto_keeping_lease(&leased(9, 14), 5).unwrap();
    assert_eq!(
        (s.committed, n, s.batch_end),
        (9, 0, Some(14)),
        "never backward"
    );
}

#[test]
fn release_only_reports_whether_a_lease_was_held() {
    assert!(release_only(&leased(9, 14)).1);
    let unleased = CursorState {
        batch_end: None,
        ..leased(9, 14)
    };
    assert!(!release_only(&unleased).1);
}

const LOG: LogBounds = LogBounds {
    log_start: 0,
    last_offset: 20,
};

#[test]
fn dlq_filing_refuses_committed_offsets_and_resets() {
    let mut s = leased(9, 14);
    s.batch_retry_count = 3;
    assert_eq!(file_dlq(&s, LOG, 9), Err(DlqRefusal::AlreadyCommitted));
    let n = file_dlq(&s, LOG, 11).unwrap();
    assert_eq!(
        (
            n.committed,
            n.batch_end,
            n.batch_retry_count,
            n.total_consumed
        ),
        (11, None, 0, 1)
    );
    assert_eq!((n.attempt_offset, n.attempt_count), (None, 0));
}

#[test]
fn dlq_filing_refuses_offsets_beyond_the_leased_batch() {
    assert_eq!(
        file_dlq(&leased(9, 14), LOG, 15),
        Err(DlqRefusal::BeyondBatch)
    );
    assert!(file_dlq(&leased(9, 14), LOG, 14).is_ok());
}

#[test]
fn dlq_filing_refuses_offsets_outside_the_log() {
    let lease_less = CursorState {
        batch_end: None,
        ..leased(9, 14)
    };
    assert_eq!(
        file_dlq(&lease_less, LOG, 21),
        Err(DlqRefusal::NoSuchMessage)
    );
    assert_eq!(
        file_dlq(&lease_less, LOG, i64::MAX),
        Err(DlqRefusal::NoSuchMessage)
    );
    assert_eq!(file_dlq(&lease_less, LOG, 20).unwrap().committed, 20);
    let retained = LogBounds {
        log_start: 12,
        last_offset: 20,
    };
    assert_eq!(
        file_dlq(&lease_less, retained, 11),
        Err(DlqRefusal::NoSuchMessage)
    );
}

#[test]
fn resolution_takes_the_minimum_in_span_offset() {
    let (a, b, c) = ([1u8; 16], [2u8; 16], [3u8; 16]);
    let row0: Vec<u8> = [a, b].concat();
    let row1: Vec<u8> = [a, c, b].concat();
    let rows = [(0i64, row0.as_slice()), (2, row1.as_slice())];
    // span [1, 3]: a occurs at 0 (below span) and 2; b at 1 and 4 (above hi).
    assert_eq!(
        resolve_in_span(&[a, b, c], rows, 1, Some(3)),
        vec![Some(2), Some(1), Some(3)]
    );
    assert_eq!(resolve_in_span(&[c], rows, 4, None), vec![None]);
    assert_eq!(occurs_below(&[a, c], rows, (0, 1)), vec![true, false]);
    // The window's low end excludes what lies below it: a occurs at 0 and 2 only.
    assert_eq!(occurs_below(&[a, b], rows, (1, 1)), vec![false, true]);
}

#[test]
fn the_below_test_reads_a_bounded_window_up_to_the_cursor() {
    assert_eq!(
        below_window(999_999, 0),
        (999_999 - BELOW_WINDOW + 1, 999_999)
    );
    assert_eq!(below_window(100, 0), (0, 100), "never below txns_start");
    assert_eq!(below_window(100, 50), (50, 100));
    // Covers a whole batch of the broker's default QUEEN_MAX_BATCH (10,000).
    const { assert!(BELOW_WINDOW >= 10_000) };
}

#[test]
fn what_a_releasing_call_leaves_above_the_cursor_is_redelivered() {
    let el = |eff: Option<i64>| Element {
        status: Status::Failed,
        eff,
        below: false,
    };
    let elements = [el(Some(3)), el(Some(4)), el(None), el(Some(6)), el(Some(4))];
    assert_eq!(redelivered(&elements, 3, true), vec![1, 3, 4]);
    assert_eq!(
        redelivered(&elements, 3, false),
        Vec::<usize>::new(),
        "lease kept"
    );
    assert_eq!(redelivered(&elements, 6, true), Vec::<usize>::new());
}

#[test]
fn ackable_span_respects_purged_sidecar() {
    assert_eq!(ackable_span(&leased(9, 14), 0), (10, Some(14)));
    assert_eq!(ackable_span(&leased(9, 14), 12), (12, Some(14)));
}

#[test]
fn purged_span_is_the_leased_part_below_txns_start() {
    assert_eq!(purged_span(&leased(9, 14), 12), Some((10, 11)));
    assert_eq!(purged_span(&leased(9, 14), 20), Some((10, 14)));
    assert_eq!(purged_span(&leased(9, 14), 10), None);
    let lease_less = CursorState {
        batch_end: None,
        ..leased(9, 14)
    };
    assert_eq!(purged_span(&lease_less, 20), None);
}

#[test]
fn a_nack_delay_holds_only_the_branches_that_redeliver() {
    let retry = decide(
        &leased(9, 14),
        &[el(Status::Retry, Some(10), false)],
        Policy::default(),
    );
    let failed = decide(
        &leased(9, 14),
        &[el(Status::Failed, Some(10), false)],
        Policy::default(),
    );
    assert!(retry.branch.holds_redelivery() && failed.branch.holds_redelivery());
    assert_eq!(
        (
            retry.state.batch_retry_count,
            failed.state.batch_retry_count
        ),
        (0, 1),
        "the budget rule is unchanged: failed charges, retry does not"
    );
    let mut spent = leased(9, 14);
    spent.batch_retry_count = 3;
    let dlq = decide(
        &spent,
        &[el(Status::Failed, Some(10), false)],
        Policy::default(),
    );
    assert!(!dlq.branch.holds_redelivery(), "hand-off to the DLQ");
    for b in [Branch::Dropped, Branch::Completed, Branch::Dlq] {
        assert!(!b.holds_redelivery(), "{b:?}");
    }
}
