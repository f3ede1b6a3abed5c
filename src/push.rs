//! Push (docs/contract.md §4): auto-create, dedup window probe, offset allocation under the
//! partition row lock, and the segment + sidecar write.

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::dedup::find_duplicates;
use queen_log::encryption::is_envelope;
use queen_log::frame::Frame;
use queen_log::hash::split_hashes;
use queen_log::names::NameKind;
use queen_log::order::partition_lock_order;
use queen_log::payload::{check_frame, Unstorable};
use queen_log::segment::{decode_segment, verify_segment};
use queen_log::wire::{Duplicate, PushVerdict};

use crate::db::{
    bad_param, col, default_tenant, iso_utc, jsonb, now, q, raise_q, required, OrRaise,
};

/// One segment to push, already encoded by the caller (or by `queen.push`).
pub struct SegmentIn<'a> {
    pub queue: &'a str,
    pub partition: &'a str,
    pub msg_count: i32,
    pub hashes: &'a [u8],
    pub verified: i64,
    /// The partition and dedup window `verified` was computed for (None: the caller
    /// vouches for it as it stands). See [`SegmentIn::watermark`].
    pub verified_for: Option<(Uuid, i32)>,
    pub blob: &'a [u8],
    pub tenant: Uuid,
}

impl SegmentIn<'_> {
    /// The dedup watermark this push may trust for partition `pid`, whose queue's window
    /// is `window` now. A watermark computed for another partition (the name deleted and
    /// pushed again: a new id) or under a shorter window (rows the caller never read
    /// became in-window) says nothing here: -1, the whole window is probed. So a caller
    /// that cached its lookup can never skip a probe it needed (docs/decisions.md, "The
    /// push's lookup").
    pub fn watermark(&self, pid: Uuid, window: i32) -> i64 {
        match self.verified_for {
            Some((p, w)) if p != pid || window > w => -1,
            _ => self.verified,
        }
    }
}

/// The contract's shape check, then the blob itself: it must decode into exactly
/// `msg_count` frames whose transactionIds hash to `hashes`. Runs before anything is read
/// or written, so a segment that could not be served is never stored (a pop of one used
/// to fail forever while holding its lease, or an auto-ack to consume what it could not
/// deliver). A frame flagged encrypted must hold Queen's envelope (docs/decisions.md,
/// "Payload encryption"): a reader would otherwise be told ciphertext is there when it
/// is not.
pub fn check_segment(msg_count: i32, hashes: &[u8], blob: &[u8]) -> Checked {
    if msg_count < 1 || hashes.len() as i64 != 16 * i64::from(msg_count) {
        raise_q(format!(
            "QPUSH bad segment: msg_count={msg_count}, hashes={} bytes (want 16/msg)",
            hashes.len()
        ));
    }
    let frames = verify_segment(blob, hashes)
        .unwrap_or_else(|e| bad_param(format!("QPUSH bad segment blob: {e}")));
    // What PostgreSQL cannot hold (queen_log::payload::check_frame) is never stored: a
    // frame holding it could be written but not read, failed or dead-lettered
    // (docs/decisions.md, "Payloads and names").
    for (i, f) in frames.iter().enumerate() {
        if let Err(u) = check_frame(f) {
            let code = match u {
                Unstorable::Number { .. } => PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                _ => PgSqlErrorCode::ERRCODE_UNTRANSLATABLE_CHARACTER,
            };
            crate::db::raise(code, format!("QPUSH frame {i}: {u}. Nothing was written"));
        }
    }
    if let Some(i) = frames
        .iter()
        .position(|f| f.encrypted && !is_envelope(&f.payload))
    {
        bad_param(format!(
            "QPUSH bad segment blob: frame {i} is flagged encrypted but its payload is not \
             an encryption envelope {{\"encrypted\", \"iv\", \"authTag\"}}"
        ));
    }
    Checked {
        first_plain: frames.iter().position(|f| !f.encrypted),
    }
}

/// What push learned of a checked segment's payloads.
pub struct Checked {
    /// The first frame not flagged encrypted (None: every frame is sealed).
    first_plain: Option<usize>,
}

impl Checked {
    /// `encryptionEnabled` enforced: a queue that encrypts takes sealed frames only. The
    /// database never holds the key (docs/security.md), so it cannot seal them itself;
    /// a plaintext frame is refused (nothing written) rather than stored in clear. 55000
    /// (object_not_in_prerequisite_state): the queue's state, not the segment, decides,
    /// and a broker that looked the queue up just before encryption was turned on
    /// answers 503 so its client retries, and is sealed on the retry.
    pub fn require_sealed(&self, queue: &str, encrypts: bool) {
        if let (true, Some(i)) = (encrypts, self.first_plain) {
            crate::db::raise(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "QENC queue {queue} encrypts payloads (encryptionEnabled) but frame {i} is \
                 plaintext: push through a broker that holds QUEEN_ENCRYPTION_KEY, which \
                 seals them. Nothing was written"
                ),
            );
        }
    }
}

/// Create the queue (per tenant) and the partition if missing. `a.b` → namespace a,
/// task b; a name without a dot → namespace = the name, task = ''.
///
/// The queue row is KEY SHARE locked before the partition is inserted under it: a
/// concurrent DELETE of the queue then either finished first (the lock finds no row, and
/// the queue is created again) or waits for this push. Without the lock the partition's
/// foreign key check failed with 23503 when the delete won the race.
pub fn provision(client: &mut SpiClient<'_>, tenant: Uuid, queue: &str, partition: &str) {
    crate::names::check(NameKind::Queue, queue);
    crate::names::check(NameKind::Partition, partition);
    let queue_id = provision_queue(client, tenant, queue);
    q(
        client,
        "SELECT queen.provision_partition($1, $2)",
        &[queue_id.into(), partition.into()],
    )
    .or_raise();
}

/// Create the queue (per tenant) if missing and lock its row FOR KEY SHARE (see
/// `provision`); returns its id.
pub fn provision_queue(client: &mut SpiClient<'_>, tenant: Uuid, queue: &str) -> Uuid {
    crate::names::check(NameKind::Queue, queue);
    // Separate statements on purpose: when a concurrent push creates the same queue, the
    // INSERT waits for it and does nothing; only a statement started after that wait (a
    // fresh snapshot) sees the committed queue row the partition must hang off.
    for _ in 0..3 {
        q(
            client,
            "INSERT INTO queen.queues (name, tenant_id, namespace, task)
             VALUES ($2, $1,
                     CASE WHEN strpos($2, '.') > 0 THEN split_part($2, '.', 1) ELSE $2 END,
                     CASE WHEN strpos($2, '.') > 0 THEN substr($2, strpos($2, '.') + 1) ELSE '' END)
             ON CONFLICT (tenant_id, name) DO NOTHING",
            &[tenant.into(), queue.into()],
        )
        .or_raise();
        let locked = q(
            client,
            "SELECT id FROM queen.queues WHERE tenant_id = $1 AND name = $2 FOR KEY SHARE",
            &[tenant.into(), queue.into()],
        )
        .or_raise()
        .next()
        .map(|r| col::<Uuid>(&r, 1, "queues.id"));
        if let Some(queue_id) = locked {
            return queue_id;
        }
    }
    retry_later(format!(
        "queue {queue} was deleted while this push created it"
    ));
}

/// A race with a concurrent DELETE this call cannot settle: raise serialization_failure
/// (40001), which callers retry (the broker answers 503). Nothing was written.
fn retry_later(why: String) -> ! {
    crate::db::raise(
        PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!("QPUSH {why}; retry"),
    )
}

/// A push's target: the partition and what the push needs of its queue, read with it.
#[derive(Clone, Copy)]
pub struct Target {
    pub pid: Uuid,
    /// The queue's dedup window (seconds).
    pub window: i32,
    pub encrypts: bool,
    /// The queue's `maxSize` (0 = none): a push checks it after writing (enforce_caps).
    pub max_size: i32,
}

/// The target resolved by names (or a hinted id).
pub fn resolve(
    client: &SpiClient<'_>,
    tenant: Uuid,
    queue: &str,
    partition: &str,
    pid: Option<Uuid>,
) -> Option<Target> {
    q(
        client,
        "SELECT p.id, q.dedup_window_seconds, q.encryption_enabled, q.max_size
               FROM queen.partition_names p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.tenant_id = $1 AND q.name = $2 AND p.name = $3
                AND ($4::uuid IS NULL OR p.id = $4)",
        &[tenant.into(), queue.into(), partition.into(), pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| Target {
        pid: col(&r, 1, "log_partitions.id"),
        window: col(&r, 2, "dedup_window_seconds"),
        encrypts: col(&r, 3, "encryption_enabled"),
        max_size: col(&r, 4, "queues.max_size"),
    })
}

/// Resolve, provisioning on first push; raises when the target still cannot be found.
pub fn resolve_or_create(
    client: &mut SpiClient<'_>,
    seg: &SegmentIn<'_>,
    pid: Option<Uuid>,
) -> Target {
    if let Some(found) = resolve(client, seg.tenant, seg.queue, seg.partition, pid) {
        return found;
    }
    provision(client, seg.tenant, seg.queue, seg.partition);
    resolve(client, seg.tenant, seg.queue, seg.partition, None).unwrap_or_else(|| {
        raise_q(format!(
            "QPUSH unknown queue/partition {}/{}",
            seg.queue, seg.partition
        ))
    })
}

/// Resolve every segment's partition, creating the missing ones in one global order
/// (tenant, queue, partition). An uncommitted new partition row makes a concurrent
/// creator of the same name wait for its transaction; created in input order, two
/// pushes naming the same new partitions in different orders each held one and waited
/// for the other (40P01, found by the soak test).
fn resolve_all(client: &mut SpiClient<'_>, segs: &[SegmentIn<'_>]) -> Vec<Target> {
    let found: Vec<Option<Target>> = segs
        .iter()
        .map(|s| resolve(client, s.tenant, s.queue, s.partition, None))
        .collect();
    let mut missing: Vec<(&[u8; 16], &str, &str)> = segs
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(s, _)| (s.tenant.as_bytes(), s.queue, s.partition))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    for (tenant, queue, partition) in missing {
        provision(client, Uuid::from_bytes(*tenant), queue, partition);
    }
    segs.iter()
        .zip(found)
        .map(|(s, f)| f.unwrap_or_else(|| resolve_or_create(client, s, None)))
        .collect()
}

/// Push one segment into a resolved partition (`window` and `max_size`: its queue's, as
/// resolved with it). The partition row is locked first: the probe and the allocation
/// see the same log, and the write's timestamp, taken after the lock, is monotone in
/// base_offset.
pub fn push_resolved(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    window: i32,
    max_size: i32,
    seg: &SegmentIn<'_>,
) -> PushVerdict {
    let Some(txns_start) = lock_partition(client, pid) else {
        retry_later(format!(
            "partition {}/{} was deleted while this push wrote to it",
            seg.queue, seg.partition
        ));
    };
    duplicate(client, pid, window, seg, txns_start)
        .unwrap_or_else(|| append(client, pid, max_size, seg))
}

/// The dedup window probe (contract §4): the duplicate verdict of `seg`, if any.
fn duplicate(
    client: &SpiClient<'_>,
    pid: Uuid,
    window: i32,
    seg: &SegmentIn<'_>,
    txns_start: i64,
) -> Option<PushVerdict> {
    if window <= 0 {
        return None;
    }
    let from = seg.watermark(pid, window).max(txns_start - 1);
    let dups = probe_duplicates(client, pid, window, from, seg.hashes);
    (!dups.is_empty()).then(|| PushVerdict::Duplicate {
        dups: with_original_ids(client, pid, dups),
        partition_id: uuid::Uuid::from_bytes(*pid.as_bytes()),
    })
}

/// The per-partition push serializer. NO KEY UPDATE, the lock the allocating UPDATE
/// takes anyway: it serializes pushes but, unlike FOR UPDATE, does not conflict with the
/// KEY SHARE locks that foreign-key checks take when a pop creates cursor rows, which
/// otherwise deadlocked against multi-partition pushes (found by the soak test).
/// Returns the partition's txns_start (the lowest offset the sidecar still covers), or
/// None when the partition was deleted meanwhile.
pub fn lock_partition(client: &mut SpiClient<'_>, pid: Uuid) -> Option<i64> {
    q(
        client,
        "SELECT txns_start FROM queen.log_partitions WHERE id = $1 FOR NO KEY UPDATE",
        &[pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| col(&r, 1, "log_partitions.txns_start"))
}

/// A duplicate verdict names the ORIGINAL messages: their ids are read from the frames at
/// the original offsets. An id stays unknown when its segment was retained away or does
/// not decode.
fn with_original_ids(client: &SpiClient<'_>, pid: Uuid, dups: Vec<(usize, i64)>) -> Vec<Duplicate> {
    let offs: Vec<i64> = dups.iter().map(|d| d.1).collect();
    let frames = FramesAt::load(client, pid, &offs);
    dups.into_iter()
        .map(|(i, off)| Duplicate {
            i,
            off,
            id: frames
                .get(off)
                .map(|f| uuid::Uuid::from_bytes(f.message_id)),
        })
        .collect()
}

/// The frames at some offsets of a partition, each covering segment read and decoded
/// once. A segment retained away or not decodable holds nothing here.
pub struct FramesAt(Vec<(i64, Vec<Frame>)>);

impl FramesAt {
    pub fn load(client: &SpiClient<'_>, pid: Uuid, offs: &[i64]) -> FramesAt {
        let segs = q(
            client,
            "SELECT DISTINCT ON (s.base_offset) s.base_offset, s.blob
               FROM unnest($2::bigint[]) AS o(off)
               CROSS JOIN LATERAL (SELECT base_offset, end_offset, blob FROM queen.log_segments
                                    WHERE partition_id = $1 AND base_offset <= o.off
                                    ORDER BY base_offset DESC LIMIT 1) s
              WHERE s.end_offset >= o.off",
            &[pid.into(), offs.to_vec().into()],
        )
        .or_raise()
        .filter_map(|r| {
            let blob: Vec<u8> = col(&r, 2, "log_segments.blob");
            let frames = decode_segment(&blob).ok()?;
            Some((col(&r, 1, "log_segments.base_offset"), frames))
        })
        .collect();
        FramesAt(segs)
    }

    /// The frame at `off`, if its segment was loaded.
    pub fn get(&self, off: i64) -> Option<&Frame> {
        self.0
            .iter()
            .filter(|(base, _)| *base <= off)
            .max_by_key(|(base, _)| *base)
            .and_then(|(base, frames)| frames.get((off - base) as usize))
    }
}

/// Sidecar rows ending above `from` (the verified watermark, or below txns_start) and
/// inside the window, scanned for any incoming hash: (incoming index, MIN original
/// offset), sorted by index. The rows are borrowed from SPI memory, not copied.
///
/// The scan seeks the primary key: the row holding `from + 1` (found as the greatest
/// base_offset <= from) and everything above it. Filtering on end_offset alone would walk
/// every sidecar row of the partition per push, growing with history even when the
/// broker's watermark cache says nothing needs reading. `from` is a sub-select where it
/// bounds end_offset, so the plan's estimate does not depend on it and the cached generic
/// plan is used (a custom plan per push was the choice before: every push planned it).
fn probe_duplicates(
    client: &SpiClient<'_>,
    pid: Uuid,
    window: i32,
    from: i64,
    hashes: &[u8],
) -> Vec<(usize, i64)> {
    let incoming = split_hashes(hashes).expect("checked by check_segment");
    let rows = q(
        client,
        "SELECT t.base_offset, t.hashes FROM queen.log_txns t
          WHERE t.partition_id = $1 AND t.end_offset > (SELECT $2)
            AND t.base_offset >= COALESCE((SELECT max(base_offset) FROM queen.log_txns
                                            WHERE partition_id = $1 AND base_offset <= $2), $2)
            AND t.created_at >= clock_timestamp() - make_interval(secs => $3)",
        &[pid.into(), from.into(), f64::from(window).into()],
    )
    .or_raise();
    let rows: Vec<(i64, &[u8])> = rows
        .map(|r| {
            (
                col::<i64>(&r, 1, "log_txns.base_offset"),
                col::<&[u8]>(&r, 2, "log_txns.hashes"),
            )
        })
        .collect();
    find_duplicates(&incoming, rows, from)
}

/// Allocate `[last_offset+1, last_offset+n]` and write segment and sidecar rows with one
/// timestamp, taken after the partition row lock (monotone in base_offset). Three plain
/// statements, not one statement of data-modifying CTEs: Citus runs such a CTE through
/// intermediate results broadcast to every node (10 ms a push on a worker, measured).
fn append(client: &mut SpiClient<'_>, pid: Uuid, cap: i32, seg: &SegmentIn<'_>) -> PushVerdict {
    let at = now();
    let n = i64::from(seg.msg_count);
    let base = q(
        client,
        "UPDATE queen.log_partitions SET last_offset = last_offset + $2, last_write_at = $3
          WHERE id = $1
         RETURNING last_offset - $2 + 1",
        &[pid.into(), n.into(), at.into()],
    )
    .or_raise()
    .next()
    .map(|r| col::<i64>(&r, 1, "log_partitions.last_offset"))
    .unwrap_or_else(|| {
        raise_q(format!(
            "QPUSH unknown queue/partition {}/{}",
            seg.queue, seg.partition
        ))
    });
    let verdict = write_rows(client, pid, base, at, seg);
    if cap > 0 {
        enforce_caps(client, &[pid]);
    }
    verdict
}

/// `maxSize` (docs/decisions.md, "Queue options"): after a push wrote, the queues of the
/// capped partitions it wrote to must hold at most their maxSize unconsumed messages
/// (per partition, the messages above its slowest group's cursor, or above its log start
/// when nobody has read it: what retention rule 2 still has to keep); else the push
/// raises 54000 `QFULL` and, rolled back, wrote nothing. A transaction-level advisory
/// lock per capped queue, taken after the partition rows and in queue-id order,
/// serializes its pushes' checks, so two pushes into different partitions cannot both
/// pass the last free place; the count is a statement after the lock, which sees what the
/// previous holder committed. The capped queues are read once, by the statement that
/// locks them (the locks taken in queue-id order, as the sorted sub-select yields them).
fn enforce_caps(client: &mut SpiClient<'_>, pids: &[Uuid]) {
    // Per capped queue, its unconsumed count: plain statements that name the queue, no
    // correlated sub-select (Citus refuses one over a reference table).
    let capped: Vec<(Uuid, String, i32)> = q(
        client,
        "WITH capped AS MATERIALIZED (
             SELECT DISTINCT q.id, q.name::text AS name, q.max_size
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE p.id = ANY($1) AND q.max_size > 0),
         locked AS MATERIALIZED (
             SELECT c.id, c.name, c.max_size, pg_advisory_xact_lock(1903519087, hashtext(c.id::text))
               FROM (SELECT id, name, max_size FROM capped ORDER BY id) c)
         SELECT id, name, max_size FROM locked ORDER BY id",
        &[pids.to_vec().into()],
    )
    .or_raise()
    .map(|r| {
        (
            col::<Uuid>(&r, 1, "queues.id"),
            col::<String>(&r, 2, "queues.name"),
            col::<i32>(&r, 3, "queues.max_size"),
        )
    })
    .collect();
    let full = capped
        .into_iter()
        .map(|(id, queue, cap)| (queue, cap, unconsumed(client, id)))
        .find(|(_, cap, n)| *n > i64::from(*cap));
    if let Some((queue, cap, n)) = full {
        crate::db::raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!(
                "QFULL queue {queue} would hold {n} unconsumed messages, over its maxSize {cap}; \
                 nothing was written"
            ),
        );
    }
}

/// A queue's unconsumed messages for `maxSize`: per partition, those above its slowest
/// group's cursor, or above its log start when nobody has read it.
fn unconsumed(client: &SpiClient<'_>, queue: Uuid) -> i64 {
    q(
        client,
        "SELECT COALESCE(sum(GREATEST(p.last_offset
                                      - GREATEST(p.log_start - 1, COALESCE(c.slowest, -1)), 0)), 0)::int8
           FROM queen.log_partitions p
           LEFT JOIN (SELECT partition_id, min(committed) AS slowest
                        FROM queen.log_consumers GROUP BY partition_id) c
             ON c.partition_id = p.id
          WHERE p.queue_id = $1",
        &[queue.into()],
    )
    .or_raise()
    .first()
    .get_one::<i64>()
    .or_raise()
    .unwrap_or(0)
}

/// The segment and sidecar rows of `seg` at `[base, base + msg_count − 1]`.
fn write_rows(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    base: i64,
    at: pgrx::datum::TimestampWithTimeZone,
    seg: &SegmentIn<'_>,
) -> PushVerdict {
    let end = base + i64::from(seg.msg_count) - 1;
    // The segment, then its sidecar row: the same range, each with its own payload.
    for (sql, payload) in [
        (
            "INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
             VALUES ($1, $2, $3, $4, $5)",
            seg.blob,
        ),
        (
            "INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
             VALUES ($1, $2, $3, $4, $5)",
            seg.hashes,
        ),
    ] {
        q(
            client,
            sql,
            &[
                pid.into(),
                base.into(),
                end.into(),
                at.into(),
                payload.into(),
            ],
        )
        .or_raise();
    }
    PushVerdict::Queued {
        base_offset: base,
        created_at: iso_utc(at),
        partition_id: uuid::Uuid::from_bytes(*pid.as_bytes()),
    }
}

/// Validate, resolve (auto-create) and push one segment.
pub fn push_one(
    client: &mut SpiClient<'_>,
    seg: &SegmentIn<'_>,
    pid: Option<Uuid>,
    window: Option<i32>,
) -> PushVerdict {
    let checked = check_segment(seg.msg_count, seg.hashes, seg.blob);
    let t = resolve_or_create(client, seg, pid);
    checked.require_sealed(seg.queue, t.encrypts);
    push_resolved(client, t.pid, window.unwrap_or(t.window), t.max_size, seg)
}

// The SQL signature (compatibility: docs/contract.md §4) fixes the argument list.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_push_one_v1(
    p_queue: Option<&str>,
    p_partition: Option<&str>,
    p_msg_count: Option<i32>,
    p_hashes: Option<&[u8]>,
    p_verified: Option<i64>,
    p_blob: Option<&[u8]>,
    p_pid: default!(Option<Uuid>, "NULL"),
    p_window: default!(Option<i32>, "NULL"),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let seg = SegmentIn {
        queue: required(p_queue, "p_queue"),
        partition: required(p_partition, "p_partition"),
        msg_count: required(p_msg_count, "p_msg_count"),
        hashes: required(p_hashes, "p_hashes"),
        verified: p_verified.unwrap_or(-1),
        verified_for: None,
        blob: required(p_blob, "p_blob"),
        tenant: p_tenant.unwrap_or_else(default_tenant),
    };
    jsonb(&Spi::connect_mut(|client| {
        push_one(client, &seg, p_pid, p_window)
    }))
}

/// A partition of the tenant by id: (queue name, partition name, the target), without
/// locking; a router read of the partition's own row.
fn resolve_by_id(
    client: &SpiClient<'_>,
    tenant: Uuid,
    pid: Uuid,
) -> Option<(String, String, Target)> {
    q(
        client,
        "SELECT q.name::text, p.name, q.dedup_window_seconds, q.encryption_enabled, q.max_size
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = $1 AND q.tenant_id = $2",
        &[pid.into(), tenant.into()],
    )
    .or_raise()
    .next()
    .map(|r| {
        (
            col(&r, 1, "queues.name"),
            col(&r, 2, "log_partitions.name"),
            Target {
                pid,
                window: col(&r, 3, "dedup_window_seconds"),
                encrypts: col(&r, 4, "encryption_enabled"),
                max_size: col(&r, 5, "queues.max_size"),
            },
        )
    })
}

/// A push addressed by partition id (for Citus, docs/citus.md): log_push_one_v1 into a partition that
/// exists, for a caller that knows its id. It touches that partition's rows only, so on a
/// Citus cluster it is delegated to the worker holding the partition. It never creates
/// anything: an unknown partition, or another tenant's, is refused alike (P0001).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_push_at_v1(
    p_partition_id: Option<Uuid>,
    p_msg_count: Option<i32>,
    p_hashes: Option<&[u8]>,
    p_verified: Option<i64>,
    p_blob: Option<&[u8]>,
    p_window: default!(Option<i32>, "NULL"),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let pid = required(p_partition_id, "p_partition_id");
    let (msg_count, hashes, blob) = (
        required(p_msg_count, "p_msg_count"),
        required(p_hashes, "p_hashes"),
        required(p_blob, "p_blob"),
    );
    let checked = check_segment(msg_count, hashes, blob);
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&Spi::connect_mut(|client| {
        let Some((queue, partition, t)) = resolve_by_id(client, tenant, pid) else {
            raise_q(format!("QPUSH unknown partition {pid}"));
        };
        checked.require_sealed(&queue, t.encrypts);
        let seg = SegmentIn {
            queue: &queue,
            partition: &partition,
            msg_count,
            hashes,
            verified: p_verified.unwrap_or(-1),
            verified_for: None,
            blob,
            tenant,
        };
        push_resolved(client, pid, p_window.unwrap_or(t.window), t.max_size, &seg)
    }))
}

// The SQL signature (compatibility: docs/contract.md §4) fixes the argument list.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_push_multi_v1(
    p_queues: Option<Vec<Option<String>>>,
    p_partitions: Option<Vec<Option<String>>>,
    p_msg_counts: Option<Vec<Option<i32>>>,
    p_hashes: Option<pgrx::datum::Array<'_, &[u8]>>,
    p_verified: Option<Vec<Option<i64>>>,
    p_blobs: Option<pgrx::datum::Array<'_, &[u8]>>,
    p_tenants: default!(Option<Vec<Option<Uuid>>>, "NULL"),
    p_verified_pids: default!(Option<Vec<Option<Uuid>>>, "NULL"),
    p_verified_windows: default!(Option<Vec<Option<i32>>>, "NULL"),
) -> JsonB {
    let queues = p_queues.unwrap_or_default();
    let n = queues.len();
    let arrays = MultiPush {
        verified_pids: p_verified_pids.unwrap_or_else(|| vec![None; n]),
        verified_windows: p_verified_windows.unwrap_or_else(|| vec![None; n]),
        partitions: p_partitions.unwrap_or_default(),
        counts: p_msg_counts.unwrap_or_default(),
        hashes: p_hashes.map(crate::db::bytea_array).unwrap_or_default(),
        verified: p_verified.unwrap_or_else(|| vec![None; n]),
        blobs: p_blobs.map(crate::db::bytea_array).unwrap_or_default(),
        tenants: p_tenants.unwrap_or_else(|| vec![None; n]),
        queues,
    };
    let segs = arrays.segments();
    jsonb(&Spi::connect_mut(|client| push_many(client, &segs)))
}

/// log_push_multi_v1's arguments as given.
struct MultiPush {
    queues: Vec<Option<String>>,
    partitions: Vec<Option<String>>,
    counts: Vec<Option<i32>>,
    hashes: Vec<Option<Vec<u8>>>,
    verified: Vec<Option<i64>>,
    blobs: Vec<Option<Vec<u8>>>,
    tenants: Vec<Option<Uuid>>,
    verified_pids: Vec<Option<Uuid>>,
    verified_windows: Vec<Option<i32>>,
}

impl MultiPush {
    /// Aligned, non-NULL segments, or the contract's error (QMULTI misaligned / 22004).
    fn segments(&self) -> Vec<SegmentIn<'_>> {
        let n = self.queues.len();
        let lens = [
            self.partitions.len(),
            self.counts.len(),
            self.hashes.len(),
            self.verified.len(),
            self.blobs.len(),
            self.tenants.len(),
            self.verified_pids.len(),
            self.verified_windows.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            raise_q(format!("QMULTI misaligned arrays ({n} queues)"));
        }
        (0..n)
            .map(|i| SegmentIn {
                queue: required(self.queues[i].as_deref(), "p_queues element"),
                partition: required(self.partitions[i].as_deref(), "p_partitions element"),
                msg_count: required(self.counts[i], "p_msg_counts element"),
                hashes: required(self.hashes[i].as_deref(), "p_hashes element"),
                verified: self.verified[i].unwrap_or(-1),
                verified_for: self.verified_pids[i].zip(self.verified_windows[i]),
                blob: required(self.blobs[i].as_deref(), "p_blobs element"),
                tenant: self.tenants[i].unwrap_or_else(default_tenant),
            })
            .collect()
    }
}

/// Many segments in one transaction: validate all, provision all, lock the partitions in
/// ascending id, then push in input order. Shared with the transaction wire.
///
/// Each partition row is written once, at the end, however many segments went to it:
/// offsets are allocated from its tail read under the lock. A second UPDATE of a row
/// this transaction already updated re-runs its foreign key checks (PostgreSQL re-checks
/// a row version of its own transaction), which locks the queue row FOR KEY SHARE after
/// the partition rows: against `delete_queue_v1` (queue row, then partition rows) that
/// deadlocked (docs/decisions.md, "Lock order").
pub fn push_many(client: &mut SpiClient<'_>, segs: &[SegmentIn<'_>]) -> Vec<PushVerdict> {
    let checked: Vec<Checked> = segs
        .iter()
        .map(|s| check_segment(s.msg_count, s.hashes, s.blob))
        .collect();
    let targets = resolve_all(client, segs);
    for ((s, c), t) in segs.iter().zip(&checked).zip(&targets) {
        c.require_sealed(s.queue, t.encrypts);
    }
    let mut tails: Vec<([u8; 16], Tail)> =
        partition_lock_order(targets.iter().map(|t| *t.pid.as_bytes()))
            .into_iter()
            .map(|id| (id, lock_tail(client, Uuid::from_bytes(id), segs, &targets)))
            .collect();
    let verdicts = segs
        .iter()
        .zip(&targets)
        .map(|(s, t)| {
            let tail = tails
                .iter_mut()
                .find(|(id, _)| id == t.pid.as_bytes())
                .map(|(_, t)| t)
                .expect("every target was locked");
            push_to_tail(client, t.pid, t.window, s, tail)
        })
        .collect();
    for (id, tail) in &tails {
        if let Some(at) = tail.written {
            q(
                client,
                "UPDATE queen.log_partitions SET last_offset = $2, last_write_at = $3 WHERE id = $1",
                &[Uuid::from_bytes(*id).into(), tail.last_offset.into(), at.into()],
            )
            .or_raise();
        }
    }
    // After every partition row holds its new tail: the cap counts the whole push.
    let capped: Vec<Uuid> = tails
        .iter()
        .filter(|(_, t)| t.written.is_some() && t.capped)
        .map(|(id, _)| Uuid::from_bytes(*id))
        .collect();
    if !capped.is_empty() {
        enforce_caps(client, &capped);
    }
    verdicts
}

/// A locked partition during a multi-push: its sidecar start, its last offset as
/// allocated so far, and the time of the last segment written (None: nothing written).
struct Tail {
    txns_start: i64,
    last_offset: i64,
    written: Option<pgrx::datum::TimestampWithTimeZone>,
    /// Its queue has a `maxSize` (enforce_caps runs after the writes), as resolved.
    capped: bool,
}

/// Lock a target partition row (FOR NO KEY UPDATE, as lock_partition) and read its tail;
/// a partition deleted meanwhile fails the push with 40001 (nothing was written).
fn lock_tail(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    segs: &[SegmentIn<'_>],
    targets: &[Target],
) -> Tail {
    let capped = targets
        .iter()
        .any(|t| t.pid.as_bytes() == pid.as_bytes() && t.max_size > 0);
    q(
        client,
        "SELECT txns_start, last_offset FROM queen.log_partitions WHERE id = $1 FOR NO KEY UPDATE",
        &[pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| Tail {
        txns_start: col(&r, 1, "log_partitions.txns_start"),
        last_offset: col(&r, 2, "log_partitions.last_offset"),
        written: None,
        capped,
    })
    .unwrap_or_else(|| {
        let seg = targets
            .iter()
            .position(|t| t.pid.as_bytes() == pid.as_bytes())
            .map(|i| &segs[i])
            .expect("a target of this push");
        retry_later(format!(
            "partition {}/{} was deleted while this push wrote to it",
            seg.queue, seg.partition
        ))
    })
}

/// push_resolved for a partition locked by push_many: the same dedup probe, the offsets
/// taken from its tail.
fn push_to_tail(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    window: i32,
    seg: &SegmentIn<'_>,
    tail: &mut Tail,
) -> PushVerdict {
    if let Some(dup) = duplicate(client, pid, window, seg, tail.txns_start) {
        return dup;
    }
    let at = now();
    let base = tail.last_offset + 1;
    tail.last_offset += i64::from(seg.msg_count);
    tail.written = Some(at);
    write_rows(client, pid, base, at, seg)
}

/// One group of frames for one (queue, partition) of a tenant, pushed by the extension's
/// own writers (timers, stream cycles).
pub struct FrameGroup<'a> {
    pub tenant: Uuid,
    pub queue: &'a str,
    pub partition: &'a str,
    pub frames: Vec<Frame>,
}

/// What became of one frame of a [`FrameGroup`].
#[derive(Debug, Clone, Copy)]
pub enum Landed {
    Queued {
        partition_id: uuid::Uuid,
    },
    /// Already in the dedup window: `of` is the original message's id when known.
    Duplicate {
        of: Option<uuid::Uuid>,
        partition_id: uuid::Uuid,
    },
}

/// Pushes the groups (one segment each, in the global lock order); a group the dedup
/// window refuses in part is pushed again without the frames it already holds (nothing
/// of a refused segment was written), so every frame lands once: queued or duplicate.
pub fn push_groups(client: &mut SpiClient<'_>, groups: &[FrameGroup<'_>]) -> Vec<Vec<Landed>> {
    let mut landed: Vec<Vec<Option<Landed>>> =
        groups.iter().map(|g| vec![None; g.frames.len()]).collect();
    let mut pending: Vec<(usize, Vec<usize>)> = groups
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.frames.is_empty())
        .map(|(i, g)| (i, (0..g.frames.len()).collect()))
        .collect();
    while !pending.is_empty() {
        let encoded: Vec<(Vec<u8>, Vec<u8>)> = pending
            .iter()
            .map(|(g, idx)| {
                let frames: Vec<Frame> =
                    idx.iter().map(|&i| groups[*g].frames[i].clone()).collect();
                let blob = queen_log::segment::encode_segment(&frames)
                    .unwrap_or_else(|e| bad_param(e.to_string()));
                (queen_log::segment::segment_hashes(&frames), blob)
            })
            .collect();
        let segs: Vec<SegmentIn<'_>> = pending
            .iter()
            .zip(&encoded)
            .map(|((g, idx), (hashes, blob))| SegmentIn {
                queue: groups[*g].queue,
                partition: groups[*g].partition,
                msg_count: idx.len() as i32,
                hashes,
                verified: -1,
                verified_for: None,
                blob,
                tenant: groups[*g].tenant,
            })
            .collect();
        let verdicts = push_many(client, &segs);
        let mut again = Vec::new();
        for ((g, idx), v) in pending.into_iter().zip(verdicts) {
            match v {
                PushVerdict::Queued { partition_id, .. } => {
                    for &i in &idx {
                        landed[g][i] = Some(Landed::Queued { partition_id });
                    }
                }
                PushVerdict::Duplicate { dups, partition_id } => {
                    if dups.is_empty() {
                        crate::db::raise_internal("a duplicate verdict named no frame");
                    }
                    for d in &dups {
                        let of = d.id;
                        landed[g][idx[d.i]] = Some(Landed::Duplicate { of, partition_id });
                    }
                    let held: std::collections::HashSet<usize> = dups.iter().map(|d| d.i).collect();
                    let rest: Vec<usize> = (0..idx.len())
                        .filter(|k| !held.contains(k))
                        .map(|k| idx[k])
                        .collect();
                    if !rest.is_empty() {
                        again.push((g, rest));
                    }
                }
            }
        }
        pending = again;
    }
    landed
        .into_iter()
        .map(|g| {
            g.into_iter()
                .map(|l| l.unwrap_or_else(|| crate::db::raise_internal("a frame did not land")))
                .collect()
        })
        .collect()
}
