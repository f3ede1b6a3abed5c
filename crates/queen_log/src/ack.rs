//! The ack decision procedure of docs/contract.md §6 as pure functions over plain structs.
//!
//! The extension reads a cursor row and the sidecar rows, calls these functions, and
//! writes back the state they return; the broker's fast paths are proven equal to them
//! by property tests. Nothing here touches PostgreSQL, so every branch is unit-tested.

use std::fmt;

use crate::hash::{TxnHash, TxnHashMap};

/// An ack element's status after normalisation (docs/contract.md §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Completed,
    Failed,
    Retry,
    Dlq,
}

impl Status {
    /// NULL, '' and the ok spellings mean completed; signals are exact lowercase.
    pub fn parse(s: Option<&str>) -> Result<Status, UnknownStatus> {
        match s {
            None | Some("") | Some("completed") | Some("success") | Some("acked") | Some("ok") => {
                Ok(Status::Completed)
            }
            Some("failed") => Ok(Status::Failed),
            Some("retry") => Ok(Status::Retry),
            Some("dlq") => Ok(Status::Dlq),
            Some(other) => Err(UnknownStatus(other.to_string())),
        }
    }

    /// The status as the SQL API spells it (`p_statuses` elements).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Retry => "retry",
            Status::Dlq => "dlq",
        }
    }

    pub fn is_signal(self) -> bool {
        self != Status::Completed
    }

    /// Tie-break between signals at one offset: dlq > failed > retry.
    fn signal_rank(self) -> u8 {
        match self {
            Status::Dlq => 3,
            Status::Failed => 2,
            Status::Retry => 1,
            Status::Completed => 0,
        }
    }
}

/// A status string that is neither an ok spelling nor a signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown ack status \"{}\"", self.0)
    }
}

impl std::error::Error for UnknownStatus {}

/// The mutable part of a `queen.log_consumers` row that acks read and write.
///
/// `batch_end` doubles as the lease marker: "release the lease" clears it (the glue then
/// also clears worker_id, lease_expires_at and lease_conflated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorState {
    pub committed: i64,
    pub batch_end: Option<i64>,
    pub batch_retry_count: i32,
    pub attempt_offset: Option<i64>,
    pub attempt_count: i32,
    pub total_consumed: i64,
}

impl CursorState {
    pub fn under_lease(&self) -> bool {
        self.batch_end.is_some()
    }

    fn release(&mut self) {
        self.batch_end = None;
    }

    /// Completion of a whole leased batch: attempt and retry state start over.
    fn reset_attempts(&mut self) {
        self.attempt_offset = None;
        self.attempt_count = 0;
        self.batch_retry_count = 0;
    }
}

/// The queue settings the failed branch reads (already COALESCEd by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// COALESCE(queues.retry_limit, 3).
    pub retry_limit: i32,
    /// COALESCE(dead_letter_queue, true) OR COALESCE(dlq_after_max_retries, true).
    pub dlq_enabled: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            retry_limit: 3,
            dlq_enabled: true,
        }
    }
}

/// One input element after resolution against the sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element {
    pub status: Status,
    /// Minimum offset of the hash inside the ackable span, if any.
    pub eff: Option<i64>,
    /// Whether the hash occurs at or below the cursor (only consulted when `eff` is None).
    pub below: bool,
}

/// The ackable span `[lo, hi]`; `hi = None` means unbounded (no lease).
pub fn ackable_span(state: &CursorState, txns_start: i64) -> (i64, Option<i64>) {
    ((state.committed + 1).max(txns_start), state.batch_end)
}

/// The part of a leased batch whose sidecar rows were purged (`[committed + 1,
/// min(txns_start − 1, batch_end)]`), if any. Hashes there are resolved from the
/// segments' frames instead, so a batch delivered from a backlog older than the purge
/// clock can still be acked by transactionId. Lease-less acks (unbounded span) do not
/// get this fallback: it would decode an unbounded backlog.
pub fn purged_span(state: &CursorState, txns_start: i64) -> Option<(i64, i64)> {
    let end = state.batch_end?;
    let (lo, hi) = (state.committed + 1, (txns_start - 1).min(end));
    (lo <= hi).then_some((lo, hi))
}

/// Which branch of §6.1 the ack took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// Branch 1 (or 2b): hand the frame at `off` to the DLQ; the lease is kept.
    Dlq,
    /// Branch 2a: budget charged, lease released, batch redelivers.
    Failed,
    /// Branch 2c: DLQ disabled and budget spent: the poison frame is dropped.
    Dropped,
    /// Branch 3: lease released, budget untouched.
    Retry,
    /// Branch 4: plain completion (full or partial).
    Completed,
}

impl Branch {
    /// Whether a nack's delay (`log_ack_by_hash_delay_v1`, HTTP `delaySeconds`) holds back
    /// what this branch redelivers: only the branches that release a lease for redelivery
    /// do (failed within the budget, retry). A dlq hand-off or a dropped poison frame
    /// redelivers nothing that was nacked, and a completion nothing at all.
    pub fn holds_redelivery(self) -> bool {
        matches!(self, Branch::Failed | Branch::Retry)
    }
}

/// Everything the by-hash ack decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub state: CursorState,
    pub acked: i64,
    pub off: i64,
    pub branch: Branch,
    pub lease_released: bool,
    /// Input index of the head signal element that chose the branch (under a lease).
    pub head_index: Option<usize>,
    /// Input indexes for the three hex lists, in input order.
    pub noop: Vec<usize>,
    pub stale: Vec<usize>,
    pub unresolved: Vec<usize>,
}

/// The head signal: lowest eff among signals, ties broken dlq > failed > retry.
/// Returns (offset, status, input index of the winning element).
fn head_signal(elements: &[Element]) -> Option<(i64, Status, usize)> {
    elements
        .iter()
        .enumerate()
        .filter(|(_, e)| e.status.is_signal())
        .filter_map(|(i, e)| e.eff.map(|off| (off, e.status, i)))
        .min_by(|a, b| {
            a.0.cmp(&b.0)
                .then(b.1.signal_rank().cmp(&a.1.signal_rank()))
        })
}

/// The new cursor: the highest ok eff strictly below the head signal, else unchanged.
fn new_committed(state: &CursorState, elements: &[Element], head: Option<i64>) -> i64 {
    elements
        .iter()
        .filter(|e| !e.status.is_signal())
        .filter_map(|e| e.eff)
        .filter(|&off| head.is_none_or(|h| off < h))
        .max()
        .unwrap_or(state.committed)
        .max(state.committed)
}

/// The by-hash decision of docs/contract.md §6.1, after resolution.
pub fn decide(state: &CursorState, elements: &[Element], policy: Policy) -> Decision {
    let head = head_signal(elements);
    let new = new_committed(state, elements, head.map(|h| h.0));
    let acked = new - state.committed;
    let mut next = state.clone();
    next.committed = new;
    next.total_consumed += acked;
    let was_leased = state.under_lease();
    let signal = if was_leased { head } else { None };
    let (branch, off) = match signal {
        Some((off, Status::Dlq, _)) => (Branch::Dlq, off),
        Some((off, Status::Failed, _)) => failed_branch(&mut next, state, off, policy),
        Some((_, Status::Retry, _)) => {
            next.release();
            (Branch::Retry, new)
        }
        _ => {
            complete_branch(&mut next);
            (Branch::Completed, new)
        }
    };
    let (noop, stale, unresolved) = classify(elements);
    Decision {
        head_index: signal.map(|h| h.2),
        lease_released: was_leased && !next.under_lease(),
        state: next,
        acked,
        off,
        branch,
        noop,
        stale,
        unresolved,
    }
}

/// Branch 2: charge the budget, else hand to the DLQ, else drop the poison frame.
fn failed_branch(next: &mut CursorState, old: &CursorState, off: i64, p: Policy) -> (Branch, i64) {
    if old.batch_retry_count < p.retry_limit {
        next.release();
        next.batch_retry_count += 1;
        (Branch::Failed, next.committed)
    } else if p.dlq_enabled {
        (Branch::Dlq, off)
    } else {
        next.committed = off;
        next.release();
        next.batch_retry_count = 0;
        next.total_consumed += 1;
        (Branch::Dropped, off)
    }
}

/// Branch 4: a full batch releases and resets; a partial one keeps the lease.
fn complete_branch(next: &mut CursorState) {
    let Some(end) = next.batch_end else { return };
    if next.committed >= end {
        next.release();
        next.reset_attempts();
    } else {
        next.attempt_offset = Some(next.committed + 1);
    }
}

/// Split unresolved elements into the noop, stale and unresolved lists.
fn classify(elements: &[Element]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (mut noop, mut stale, mut unresolved) = (Vec::new(), Vec::new(), Vec::new());
    for (i, e) in elements.iter().enumerate().filter(|(_, e)| e.eff.is_none()) {
        match (e.below, e.status.is_signal()) {
            (false, _) => unresolved.push(i),
            (true, false) => noop.push(i),
            (true, true) => stale.push(i),
        }
    }
    (noop, stale, unresolved)
}

/// Why a positional ack was refused (docs/contract.md §6.2); the texts are interface facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionalError {
    NoLeasedBatch,
    BeyondBatch,
}

impl PositionalError {
    pub fn message(self) -> &'static str {
        match self {
            PositionalError::NoLeasedBatch => "no leased batch",
            PositionalError::BeyondBatch => "position beyond leased batch",
        }
    }
}

/// A positional ack up to `upto` (docs/contract.md §6.2, p_ok true): returns the new state and the
/// number of positions retired. Never moves the cursor backward; always releases the lease.
pub fn ack_upto(state: &CursorState, upto: i64) -> Result<(CursorState, i64), PositionalError> {
    let end = state.batch_end.ok_or(PositionalError::NoLeasedBatch)?;
    if upto > end {
        return Err(PositionalError::BeyondBatch);
    }
    let mut next = state.clone();
    next.committed = state.committed.max(upto);
    let acked = next.committed - state.committed;
    next.total_consumed += acked;
    next.release();
    if next.committed >= end {
        next.reset_attempts();
    }
    Ok((next, acked))
}

/// A stream cycle's commit through `upto` that keeps the lease (Queen's `release_lease:
/// false`, a gate's partial ack): the cursor moves, the rest of the batch stays leased and
/// is redelivered from the new cursor when the lease expires. A commit that reaches the
/// batch's end releases it as `ack_upto` does.
pub fn ack_upto_keeping_lease(
    state: &CursorState,
    upto: i64,
) -> Result<(CursorState, i64), PositionalError> {
    let end = state.batch_end.ok_or(PositionalError::NoLeasedBatch)?;
    if upto >= end {
        return ack_upto(state, upto);
    }
    let mut next = state.clone();
    next.committed = state.committed.max(upto);
    let acked = next.committed - state.committed;
    next.total_consumed += acked;
    Ok((next, acked))
}

/// Release-only positional ack (p_ok false, or no position): the batch redelivers.
pub fn release_only(state: &CursorState) -> (CursorState, bool) {
    let mut next = state.clone();
    next.release();
    (next, state.under_lease())
}

/// The partition's live offsets: segments hold `[log_start, last_offset]` (docs/contract.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    pub log_start: i64,
    pub last_offset: i64,
}

/// Why a DLQ filing was refused (docs/contract.md §7, §14); the texts are interface facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DlqRefusal {
    AlreadyCommitted,
    NoSuchMessage,
    BeyondBatch,
}

impl DlqRefusal {
    pub fn message(self) -> &'static str {
        match self {
            DlqRefusal::AlreadyCommitted => "already committed",
            DlqRefusal::NoSuchMessage => "no such message: offset outside the partition's log",
            DlqRefusal::BeyondBatch => "offset beyond leased batch",
        }
    }
}

/// DLQ filing (docs/contract.md §7, §14): retires one real message the caller may retire — above
/// the cursor (so one poison frame is never filed twice), inside the log, and under a
/// lease inside the leased batch. Anything else would move the cursor past messages that
/// were never delivered (or past the end of the log, starving every later push).
pub fn file_dlq(state: &CursorState, log: LogBounds, off: i64) -> Result<CursorState, DlqRefusal> {
    if off <= state.committed {
        return Err(DlqRefusal::AlreadyCommitted);
    }
    if off > log.last_offset || off < log.log_start {
        return Err(DlqRefusal::NoSuchMessage);
    }
    if state.batch_end.is_some_and(|end| off > end) {
        return Err(DlqRefusal::BeyondBatch);
    }
    let mut next = state.clone();
    next.committed = off;
    next.release();
    next.reset_attempts();
    next.total_consumed += 1;
    Ok(next)
}

/// Resolve hashes against sidecar rows inside `[lo, hi]`: the minimum in-span offset of
/// each wanted hash. `rows` are `(base_offset, hashes)`; any order is accepted.
pub fn resolve_in_span<'a>(
    wanted: &[TxnHash],
    rows: impl IntoIterator<Item = (i64, &'a [u8])>,
    lo: i64,
    hi: Option<i64>,
) -> Vec<Option<i64>> {
    let mut found: TxnHashMap<i64> = wanted.iter().map(|h| (*h, i64::MAX)).collect();
    for (base, hashes) in rows {
        for (k, chunk) in hashes.chunks_exact(16).enumerate() {
            let off = base + k as i64;
            if off < lo || hi.is_some_and(|h| off > h) {
                continue;
            }
            if let Some(best) = found.get_mut(<&TxnHash>::try_from(chunk).expect("16-byte chunk")) {
                *best = (*best).min(off);
            }
        }
    }
    wanted
        .iter()
        .map(|h| found.get(h).copied().filter(|&o| o != i64::MAX))
        .collect()
}

/// The elements a call that released the lease leaves to be delivered again: those that
/// resolved in span above the final cursor `committed` (after a DLQ filing, the filed
/// offset). Input indexes in input order; empty when the lease was kept.
pub fn redelivered(elements: &[Element], committed: i64, lease_released: bool) -> Vec<usize> {
    if !lease_released {
        return Vec::new();
    }
    (0..elements.len())
        .filter(|&i| elements[i].eff.is_some_and(|e| e > committed))
        .collect()
}

/// How far below the cursor an element that did not resolve in span is looked for (the
/// noop/stale test): the `BELOW_WINDOW` offsets up to the cursor. This covers a repeated
/// ack of anything in the current batch (a pop delivers at most 10,000 messages by
/// default) and late acks of messages up to that many positions behind; a hash farther
/// down answers unresolved instead of noop/stale (it changes nothing either way). Without
/// the bound, a bogus ack of unknown hashes would read the partition's whole sidecar
/// window (docs/decisions.md, "Acks of unknown hashes"; docs/contract.md §12).
pub const BELOW_WINDOW: i64 = 16_384;

/// The offsets `[from, committed]` the noop/stale test reads (see [`BELOW_WINDOW`]).
pub fn below_window(committed: i64, txns_start: i64) -> (i64, i64) {
    ((committed - BELOW_WINDOW + 1).max(txns_start), committed)
}

/// Which of `wanted` occur in `[from, committed]` (the [`below_window`]) in the given
/// sidecar rows.
pub fn occurs_below<'a>(
    wanted: &[TxnHash],
    rows: impl IntoIterator<Item = (i64, &'a [u8])>,
    (from, committed): (i64, i64),
) -> Vec<bool> {
    let mut seen: TxnHashMap<bool> = wanted.iter().map(|h| (*h, false)).collect();
    for (base, hashes) in rows {
        for (k, chunk) in hashes.chunks_exact(16).enumerate() {
            let off = base + k as i64;
            if off > committed {
                break;
            }
            if off < from {
                continue;
            }
            if let Some(flag) = seen.get_mut(<&TxnHash>::try_from(chunk).expect("16-byte chunk")) {
                *flag = true;
            }
        }
    }
    wanted.iter().map(|h| seen[h]).collect()
}

#[cfg(test)]
mod tests;
