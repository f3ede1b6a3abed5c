//! Acks (docs/contract.md §6): the by-hash authority and the positional fast paths. Each entry
//! point validates, locks the cursor row, asks `queen_log::ack` what to do, writes the
//! new state back and reports.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::ack::{
    ack_upto, ackable_span, below_window, decide, occurs_below, purged_span, redelivered,
    release_only, resolve_in_span, Branch, Element, Policy, Status,
};
use queen_log::dlq::error_text;
use queen_log::hash::{hash_hex, TxnHash};
use queen_log::order::cursor_lock_order;
use queen_log::wire::{HashAck, MultiAck, MultiRow, PositionalAck, Reply};

use crate::db::{
    bad_param, bytea_array, col, default_tenant, find_partition, iso_utc, jsonb, lock_checked, now,
    parse_uuid, plus_millis, q, raise, raise_q, required, write_cursor, OrRaise,
};
use crate::dlq::{dlq_head, DlqEntry};

/// Validate hashes and statuses (before any lock): misaligned arrays, NULL or non-16-byte
/// hashes and unknown statuses are errors.
pub fn parse_ack_input(
    hashes: &[Option<Vec<u8>>],
    statuses: Option<&[Option<String>]>,
) -> (Vec<TxnHash>, Vec<Status>) {
    if let Some(st) = statuses {
        if st.len() != hashes.len() {
            raise_q(format!(
                "QACK misaligned arrays: {} hashes, {} statuses",
                hashes.len(),
                st.len()
            ));
        }
    }
    let hs = hashes
        .iter()
        .enumerate()
        .map(|(i, h)| match h.as_deref().map(<TxnHash>::try_from) {
            Some(Ok(h)) => h,
            Some(Err(_)) => bad_param(format!(
                "p_hashes[{}] must be 16 bytes, got {}",
                i + 1,
                h.as_ref().unwrap().len()
            )),
            None => bad_param(format!("p_hashes[{}] must not be NULL", i + 1)),
        })
        .collect();
    let st = (0..hashes.len())
        .map(|i| {
            let s = statuses.and_then(|st| st[i].as_deref());
            Status::parse(s).unwrap_or_else(|e| bad_param(format!("{e} at p_statuses[{}]", i + 1)))
        })
        .collect();
    (hs, st)
}

/// Sidecar rows overlapping `[lo, hi]`, found through the primary key: O(span), never
/// reading rows above `hi`.
fn span_rows(client: &SpiClient<'_>, pid: Uuid, lo: i64, hi: Option<i64>) -> Vec<(i64, Vec<u8>)> {
    read_txns(
        client,
        "SELECT base_offset, hashes FROM queen.log_txns
          WHERE partition_id = $1 AND base_offset <= $3
            AND base_offset >= COALESCE((SELECT max(base_offset) FROM queen.log_txns
                                          WHERE partition_id = $1 AND base_offset <= $2), $2)
          ORDER BY base_offset",
        &[pid.into(), lo.into(), hi.unwrap_or(i64::MAX).into()],
    )
}

/// Sidecar rows overlapping the below-cursor window `[from, committed]`: only read when
/// some hash did not resolve in span, and never more than the window (a bogus ack of
/// unknown hashes costs what a real one costs: docs/decisions.md, "Acks of unknown
/// hashes").
fn below_rows(
    client: &SpiClient<'_>,
    pid: Uuid,
    (from, committed): (i64, i64),
) -> Vec<(i64, Vec<u8>)> {
    span_rows(client, pid, from, Some(committed))
}

fn read_txns(
    client: &SpiClient<'_>,
    sql: &'static str,
    args: &[pgrx::datum::DatumWithOid<'_>],
) -> Vec<(i64, Vec<u8>)> {
    q(client, sql, args)
        .or_raise()
        .map(|r| {
            (
                col(&r, 1, "log_txns.base_offset"),
                col(&r, 2, "log_txns.hashes"),
            )
        })
        .collect()
}

/// The hashes of the frames of the segments covering `[lo, hi]`, computed from the
/// frames themselves: the sidecar of a purged range, rebuilt for one lease.
fn frame_hashes(client: &SpiClient<'_>, pid: Uuid, lo: i64, hi: i64) -> Vec<(i64, Vec<u8>)> {
    q(
        client,
        "SELECT base_offset, blob FROM queen.log_segments
          WHERE partition_id = $1 AND base_offset <= $3
            AND base_offset >= COALESCE((SELECT max(base_offset) FROM queen.log_segments
                                          WHERE partition_id = $1 AND base_offset <= $2), $2)
          ORDER BY base_offset",
        &[pid.into(), lo.into(), hi.into()],
    )
    .or_raise()
    .filter_map(|r| {
        let blob: Vec<u8> = col(&r, 2, "log_segments.blob");
        // A segment that does not decode resolves nothing: its frames stay unresolved.
        let frames = queen_log::segment::decode_segment(&blob).ok()?;
        Some((
            col(&r, 1, "log_segments.base_offset"),
            queen_log::segment::segment_hashes(&frames),
        ))
    })
    .collect()
}

/// Where an ack's elements are looked up: the ackable span `lo..=hi` (hi None: open),
/// the bounded window below the cursor (the below-cursor test, `below_window`), and the
/// purged part of a leased batch, read from its frames.
#[derive(Clone, Copy)]
struct Ranges {
    lo: i64,
    hi: Option<i64>,
    below_window: (i64, i64),
    purged: Option<(i64, i64)>,
}

/// Resolve every element: in-span minimum offset (from the sidecar, and from the frames
/// for a purged part of a leased batch), and the below-cursor test only for those that
/// did not resolve.
fn resolve(
    client: &SpiClient<'_>,
    pid: Uuid,
    hashes: &[TxnHash],
    statuses: &[Status],
    at: &Ranges,
) -> Vec<Element> {
    let Ranges {
        lo,
        hi,
        below_window,
        purged,
    } = *at;
    if hashes.is_empty() {
        return Vec::new();
    }
    let rows = span_rows(client, pid, lo, hi);
    let mut effs = resolve_in_span(hashes, rows.iter().map(|(b, h)| (*b, h.as_slice())), lo, hi);
    if let Some((plo, phi)) = purged {
        let frames = frame_hashes(client, pid, plo, phi);
        let below_sidecar = resolve_in_span(
            hashes,
            frames.iter().map(|(b, h)| (*b, h.as_slice())),
            plo,
            Some(phi),
        );
        for (e, p) in effs.iter_mut().zip(below_sidecar) {
            *e = match (*e, p) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    let missing: Vec<TxnHash> = hashes
        .iter()
        .zip(&effs)
        .filter(|(_, e)| e.is_none())
        .map(|(h, _)| *h)
        .collect();
    let below: std::collections::HashMap<TxnHash, bool> = if missing.is_empty() {
        Default::default()
    } else {
        let rows = below_rows(client, pid, below_window);
        let flags = occurs_below(
            &missing,
            rows.iter().map(|(b, h)| (*b, h.as_slice())),
            below_window,
        );
        missing.into_iter().zip(flags).collect()
    };
    hashes
        .iter()
        .zip(effs)
        .zip(statuses)
        .map(|((h, eff), status)| Element {
            status: *status,
            eff,
            below: eff.is_none() && below.get(h).copied().unwrap_or(false),
        })
        .collect()
}

/// Where one transactionId's message is for a locked cursor (a stream cycle's cumulative
/// ack): its offset when it is in the ackable span (the leased batch, purged part
/// included), else whether it lies below the cursor (already acknowledged).
pub fn locate(
    client: &SpiClient<'_>,
    pid: Uuid,
    cur: &crate::db::LockedCursor,
    hash: TxnHash,
) -> Element {
    let (lo, hi) = ackable_span(&cur.state, cur.txns_start);
    let ranges = Ranges {
        lo,
        hi,
        below_window: below_window(cur.state.committed, cur.txns_start),
        purged: purged_span(&cur.state, cur.txns_start),
    };
    resolve(client, pid, &[hash], &[Status::Completed], &ranges)
        .pop()
        .unwrap_or_else(|| crate::db::raise_internal("one hash resolved to no element"))
}

/// One by-hash ack: what the caller asks beyond the elements.
pub struct HashAckCall<'a> {
    pub pid: Uuid,
    pub group: &'a str,
    pub worker: Option<&'a str>,
    pub hashes: &'a [TxnHash],
    pub statuses: &'a [Status],
    /// A nack's delay: when the branch taken releases the lease for redelivery (failed
    /// within the budget, retry), the (partition, group)'s next pop waits this many
    /// seconds (`redeliver_at`, durable). 0 = the queue's `retryDelay` (milliseconds;
    /// 0 there too = none: docs/decisions.md, "Queue options").
    pub delay_s: i32,
    /// `Some`: a dlq verdict files the DLQ row in this call, its error text by
    /// `queen_log::dlq::error_text` over these per-element errors (input order; missing
    /// entries are no error). `None`: the hand-off of `log_ack_by_hash_v1`, the caller
    /// files (docs/contract.md §6.1 branch 1).
    pub dlq_errors: Option<&'a [Option<String>]>,
}

/// The authority (docs/contract.md §6.1), shared by the SQL functions, the psql helper and the
/// transaction wire. Done results carry `headIndex`: the input element whose signal
/// chose the branch.
pub fn ack_by_hash(client: &mut SpiClient<'_>, call: &HashAckCall<'_>) -> Reply<HashAck> {
    let HashAckCall {
        pid,
        group,
        worker,
        hashes,
        statuses,
        ..
    } = *call;
    let cur = match lock_checked(client, pid, group, worker) {
        Ok(c) => c,
        Err(e) => return Reply::Refused(e.into()),
    };
    let (lo, hi) = ackable_span(&cur.state, cur.txns_start);
    let ranges = Ranges {
        lo,
        hi,
        below_window: below_window(cur.state.committed, cur.txns_start),
        purged: purged_span(&cur.state, cur.txns_start),
    };
    let elements = resolve(client, pid, hashes, statuses, &ranges);
    let policy = Policy {
        retry_limit: cur.retry_limit,
        dlq_enabled: cur.dlq_enabled,
    };
    let d = decide(&cur.state, &elements, policy);
    write_cursor(client, pid, group, &cur.state, &d.state);
    let delay_ms = if call.delay_s > 0 {
        i64::from(call.delay_s) * 1000
    } else {
        i64::from(cur.retry_delay_ms)
    };
    let redeliver_at = (delay_ms > 0 && d.branch.holds_redelivery())
        .then(|| hold_redelivery(client, pid, group, delay_ms));
    let hex =
        |idx: &[usize]| -> Vec<String> { idx.iter().map(|&i| hash_hex(&hashes[i])).collect() };
    let dlq = d.branch == Branch::Dlq;
    let mut r = HashAck {
        acked: d.acked,
        off: d.off,
        noop_hashes: hex(&d.noop),
        stale_hashes: hex(&d.stale),
        unresolved_hashes: hex(&d.unresolved),
        lease_released: d.lease_released,
        dlq,
        dropped: d.branch == Branch::Dropped,
        head_index: d.head_index,
        partition_id: dlq.then(|| uuid::Uuid::from_bytes(*pid.as_bytes())),
        group: dlq.then(|| group.to_string()),
        worker: dlq.then(|| worker.map(str::to_string)),
        redelivered_hashes: hex(&redelivered(&elements, d.state.committed, d.lease_released)),
        redeliver_at: redeliver_at.map(iso_utc),
        ..HashAck::default()
    };
    if let (true, Some(errors)) = (dlq, call.dlq_errors) {
        file_in_call(client, call, errors, &elements, &mut r);
    }
    Reply::Done(r)
}

/// The dlq verdict filed in the ack's own call (native extraction, contract §7): the
/// head frame is retired and the lease released, so everything above it in the batch
/// is redelivered. A refused filing leaves the hand-off state and says why.
fn file_in_call(
    client: &mut SpiClient<'_>,
    call: &HashAckCall<'_>,
    errors: &[Option<String>],
    elements: &[Element],
    r: &mut HashAck,
) {
    let given: Vec<(Status, Option<&str>)> = call
        .statuses
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, errors.get(i).and_then(|e| e.as_deref())))
        .collect();
    let error = error_text(&given, r.head_index);
    let entry = DlqEntry::extracted(Some(error));
    match dlq_head(client, call.pid, call.group, call.worker, r.off, entry) {
        Reply::Done(filed) => {
            r.dlq_id = Some(filed.id);
            r.lease_released = true;
            r.redelivered_hashes = redelivered(elements, r.off, true)
                .into_iter()
                .map(|i| hash_hex(&call.hashes[i]))
                .collect();
        }
        Reply::Refused(e) => r.dlq_refused = Some(e),
    }
}

/// No pop of the (partition, group) before now + `delay_ms`: written to the durable
/// cursor row (a nack's delay survives a crash); returns the instant.
fn hold_redelivery(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    delay_ms: i64,
) -> TimestampWithTimeZone {
    let until = plus_millis(now(), delay_ms);
    q(
        client,
        "UPDATE queen.log_consumers SET redeliver_at = $3
          WHERE partition_id = $1 AND consumer_group = $2",
        &[pid.into(), group.into(), until.into()],
    )
    .or_raise();
    until
}

/// Per-element error texts: as long as the hashes when given.
pub fn checked_errors(errors: Option<Vec<Option<String>>>, n: usize) -> Vec<Option<String>> {
    match errors {
        Some(e) if e.len() != n => raise_q(format!(
            "QACK misaligned arrays: {n} hashes, {} errors",
            e.len()
        )),
        Some(e) => e,
        None => Vec::new(),
    }
}

/// The body of the three by-hash SQL functions: `files` = file a dlq verdict in this
/// call with these errors, else hand it off (v1 and delay_v1 answer as they always did).
fn by_hash_sql(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_hashes: Option<pgrx::datum::Array<'_, &[u8]>>,
    p_statuses: Option<Vec<Option<String>>>,
    p_delay_seconds: Option<i32>,
    files: Option<Option<Vec<Option<String>>>>,
) -> JsonB {
    let pid = required(p_partition_id, "p_partition_id");
    let group = required(p_group, "p_group");
    let delay = p_delay_seconds.unwrap_or(0);
    if delay < 0 {
        bad_param(format!("p_delay_seconds must be >= 0, got {delay}"));
    }
    let raw = bytea_array(required(p_hashes, "p_hashes"));
    let (hashes, statuses) = parse_ack_input(&raw, p_statuses.as_deref());
    let errors = files.map(|e| checked_errors(e, hashes.len()));
    let call = HashAckCall {
        pid,
        group,
        worker: p_worker,
        hashes: &hashes,
        statuses: &statuses,
        delay_s: delay,
        dlq_errors: errors.as_deref(),
    };
    jsonb(&Spi::connect_mut(|c| ack_by_hash(c, &call)))
}

/// The by-hash ack with everything in one call (our addition): a dlq verdict (a dlq
/// status, or failed with the budget spent) files the DLQ row inside this statement, its
/// error text taken from `p_errors` (per element, by queen_log::dlq's rule), and answers
/// `dlqId`; a nack's delay as in `log_ack_by_hash_delay_v1`. NULL errors = none given.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_ack_by_hash_v2(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_hashes: Option<pgrx::datum::Array<'_, &[u8]>>,
    p_statuses: default!(Option<Vec<Option<String>>>, "NULL"),
    p_errors: default!(Option<Vec<Option<String>>>, "NULL"),
    p_delay_seconds: default!(Option<i32>, 0),
) -> JsonB {
    by_hash_sql(
        p_partition_id,
        p_group,
        p_worker,
        p_hashes,
        p_statuses,
        p_delay_seconds,
        Some(p_errors),
    )
}

/// `log_ack_by_hash_v1` with a nack delay (our addition): a failed (within the budget)
/// or retry verdict releases the lease as usual, and the batch is redelivered no earlier
/// than `p_delay_seconds` from now. The budget rule is unchanged. NULL or 0 = no delay;
/// negative raises 22023. A dlq verdict is handed off as by v1.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_ack_by_hash_delay_v1(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_hashes: Option<pgrx::datum::Array<'_, &[u8]>>,
    p_statuses: Option<Vec<Option<String>>>,
    p_delay_seconds: Option<i32>,
) -> JsonB {
    let (pid, group, worker) = (p_partition_id, p_group, p_worker);
    by_hash_sql(
        pid,
        group,
        worker,
        p_hashes,
        p_statuses,
        p_delay_seconds,
        None,
    )
}

/// The contract's authority (§6.1): a dlq verdict is handed to the caller, who files it
/// with `log_dlq_head_v1` (kept so that callers of 0.1.0 keep working unchanged).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_ack_by_hash_v1(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_hashes: Option<pgrx::datum::Array<'_, &[u8]>>,
    p_statuses: Option<Vec<Option<String>>>,
) -> JsonB {
    let (pid, group, worker) = (p_partition_id, p_group, p_worker);
    by_hash_sql(pid, group, worker, p_hashes, p_statuses, Some(0), None)
}

/// The positional procedure (docs/contract.md §6.2), shared by ack_at, ack_v1, multi and the wire.
pub fn ack_at(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    worker: Option<&str>,
    upto: Option<i64>,
    ok: bool,
) -> Reply<PositionalAck> {
    let cur = match lock_checked(client, pid, group, worker) {
        Ok(c) => c,
        Err(e) => return Reply::Refused(e.into()),
    };
    let (next, acked, released) = match upto.filter(|_| ok) {
        Some(upto) => match ack_upto(&cur.state, upto) {
            Ok((next, acked)) => (next, acked, true),
            Err(e) => return Reply::Refused(e.message().into()),
        },
        None => {
            let (next, released) = release_only(&cur.state);
            (next, 0, released)
        }
    };
    write_cursor(client, pid, group, &cur.state, &next);
    Reply::Done(PositionalAck {
        acked,
        lease_released: released,
        ..Default::default()
    })
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_ack_at_v1(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_upto: Option<i64>,
    p_ok: default!(Option<bool>, true),
    p_acked_count: default!(Option<i32>, 0),
) -> JsonB {
    let _ = p_acked_count; // accepted for compatibility, never trusted for counting
    let pid = required(p_partition_id, "p_partition_id");
    let group = required(p_group, "p_group");
    jsonb(&Spi::connect_mut(|c| {
        ack_at(c, pid, group, p_worker, p_upto, p_ok.unwrap_or(false))
    }))
}

/// A partition by names: (tenant, queue name, partition name).
#[derive(Clone, Copy)]
pub struct PartitionName<'a> {
    pub tenant: Uuid,
    pub queue: &'a str,
    pub partition: &'a str,
}

/// Positional ack by names; an unknown partition is ok:false "partition not found".
pub fn ack_by_name(
    client: &mut SpiClient<'_>,
    at: PartitionName<'_>,
    group: &str,
    worker: Option<&str>,
    upto: Option<i64>,
    ok: bool,
) -> Reply<PositionalAck> {
    match find_partition(client, at.tenant, at.queue, at.partition) {
        Some(pid) => ack_at(client, pid, group, worker, upto, ok),
        None => Reply::Refused("partition not found".into()),
    }
}

// The SQL signature (compatibility: docs/contract.md §6) fixes the argument list.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_ack_v1(
    p_queue: Option<&str>,
    p_partition: Option<&str>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_upto: Option<i64>,
    p_ok: default!(Option<bool>, true),
    p_acked_count: default!(Option<i32>, 0),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let _ = p_acked_count;
    let queue = required(p_queue, "p_queue");
    let partition = required(p_partition, "p_partition");
    let group = required(p_group, "p_group");
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let ok = p_ok.unwrap_or(false);
    jsonb(&Spi::connect_mut(|c| {
        let at = PartitionName {
            tenant,
            queue,
            partition,
        };
        ack_by_name(c, at, group, p_worker, p_upto, ok)
    }))
}

/// One multi row after validation.
struct MultiIn<'a> {
    pid: Uuid,
    group: &'a str,
    end: i64,
    worker: &'a str,
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_ack_multi_v1(
    p_pids: Option<Vec<Option<String>>>,
    p_groups: Option<Vec<Option<String>>>,
    p_ends: Option<Vec<Option<i64>>>,
    p_workers: Option<Vec<Option<String>>>,
    p_counts: Option<Vec<Option<i32>>>,
) -> JsonB {
    let arrays = MultiArrays {
        pids: p_pids.unwrap_or_default(),
        groups: p_groups.unwrap_or_default(),
        ends: p_ends.unwrap_or_default(),
        workers: p_workers.unwrap_or_default(),
        counts: p_counts.unwrap_or_default(),
    };
    let rows = arrays.rows();
    jsonb(&Spi::connect_mut(|c| ack_multi(c, &rows)))
}

/// log_ack_multi_v1's arguments as given.
struct MultiArrays {
    pids: Vec<Option<String>>,
    groups: Vec<Option<String>>,
    ends: Vec<Option<i64>>,
    workers: Vec<Option<String>>,
    counts: Vec<Option<i32>>,
}

impl MultiArrays {
    /// Aligned, non-NULL rows, or the contract's error (QACKM misaligned / 22004).
    fn rows(&self) -> Vec<MultiIn<'_>> {
        let n = self.pids.len();
        let lens = [
            self.groups.len(),
            self.ends.len(),
            self.workers.len(),
            self.counts.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            raise_q(format!(
                "QACKM misaligned arrays: pids={n} groups={} ends={} workers={} counts={}",
                lens[0], lens[1], lens[2], lens[3]
            ));
        }
        (0..n).map(|i| self.row(i)).collect()
    }
}

/// N positional full-batch acks in the global lock order; verdicts by input position.
fn ack_multi(client: &mut SpiClient<'_>, rows: &[MultiIn<'_>]) -> MultiAck {
    let keys: Vec<([u8; 16], &str)> = rows.iter().map(|r| (*r.pid.as_bytes(), r.group)).collect();
    let mut results: Vec<Option<MultiRow>> = vec![None; rows.len()];
    for i in cursor_lock_order(&keys) {
        let r = &rows[i];
        results[i] = Some(
            match ack_at(client, r.pid, r.group, Some(r.worker), Some(r.end), true) {
                Reply::Done(a) => MultiRow {
                    ok: true,
                    acked: a.acked,
                    error: None,
                },
                Reply::Refused(e) => MultiRow {
                    ok: false,
                    acked: 0,
                    error: Some(e),
                },
            },
        );
    }
    MultiAck {
        ok: true,
        results: results.into_iter().flatten().collect(),
    }
}

impl MultiArrays {
    fn row(&self, i: usize) -> MultiIn<'_> {
        let null = |what: &str| -> ! {
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("QACKM NULL {what} at row {}", i + 1),
            )
        };
        let pid_text = self.pids[i]
            .as_deref()
            .unwrap_or_else(|| null("partition id"));
        let pid = parse_uuid(pid_text).unwrap_or_else(|| {
            bad_param(format!(
                "QACKM invalid partition id \"{pid_text}\" at row {}",
                i + 1
            ))
        });
        self.counts[i].unwrap_or_else(|| null("count"));
        MultiIn {
            pid,
            group: self.groups[i].as_deref().unwrap_or_else(|| null("group")),
            end: self.ends[i].unwrap_or_else(|| null("end")),
            worker: self.workers[i].as_deref().unwrap_or_else(|| null("worker")),
        }
    }
}
