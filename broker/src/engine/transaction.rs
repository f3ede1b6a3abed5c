//! A transaction (`POST /api/v1/transaction`, docs/broker-contract.md §1): pushes, acks
//! and the kv and timer riders in one `log_transaction_wire_v1`, all or nothing. The
//! whole composition is here; the route reads the body and renders the verdict.
//!
//! Pushes are encoded exactly as for a push (crate::engine::push's codec, in-request
//! duplicates and sealing by crate::engine::items). Acks are grouped by (partitionId,
//! group); a group goes in positional form when crate::engine::ack's fast-path decision
//! grants it (the registry entry is consumed), else in hash form. A transaction that
//! pushes asks the write gate first (crate::engine::write_gate): it cannot be spooled,
//! so push maintenance or spooled records of its partitions make it a 503 that wrote
//! nothing.

use std::collections::HashSet;

use base64::Engine as _;
use queen_log::hash::hash_hex;
use queen_log::kv::{KvOp, Precondition};
use queen_log::segment::{encode_segment, segment_hashes};
use queen_log::sqlstate::WireRefusal;
use queen_log::timers::TimerOp;
use queen_log::wire::{TxnWire, TxnWireRequest, WireAckOp, WireHashElem, WirePush};
use uuid::Uuid;

use crate::db::Conn;
use crate::engine::ack::fast_path_end;
use crate::engine::items::{
    ack_groups, copy_request_duplicates, encrypting, group_by_partition, mark_request_duplicates,
    seal_items, seal_timer_ops, take_ready, timers_scheduled, AckItem, AckKey, PushItem,
    ReadySegment,
};
use crate::engine::write_gate::Targets;
use crate::engine::Engine;
use crate::error::{ApiError, ApiResult};

/// A transaction, read: its push items and acks (in operation order), the
/// `requiredLeases`, and the riders.
#[derive(Default)]
pub struct Transaction {
    pub pushes: Vec<PushItem>,
    pub acks: Vec<AckItem>,
    pub required: Vec<String>,
    /// The timer rider's ops; their results follow the kv rider's (a flat index space).
    pub timers: Vec<TimerOp>,
    /// The kv rider's ops; their results follow the operations'.
    pub kv: Vec<KvOp>,
    /// A binary body's push groups as the client compressed them (crate::http::binary_body).
    pub ready: Vec<ReadySegment>,
}

/// How a transaction ended, when the database answered.
pub enum Verdict {
    /// Everything was written; the pushes' in-request duplicates carry their first
    /// item's message id.
    Committed(TxnWire),
    /// A `required` kv op did not hold: nothing was written.
    KvPrecondition(Precondition),
    /// The wire refused the request (the reason, the message): nothing was written.
    Refused(WireRefusal, String),
}

/// Runs `t` for `tenant`. Errors are the database's state (down, busy), a missing
/// encryption key, or the write gate's refusal: nothing was written.
pub async fn run(e: &Engine<'_>, tenant: Uuid, t: &mut Transaction) -> ApiResult<Verdict> {
    mark_request_duplicates(t.pushes.iter_mut());
    seal_pushes(e, tenant, &mut t.pushes).await?;
    seal_timer_ops(e, tenant, &mut t.timers).await?;
    let pushes = encode_pushes(&t.pushes, std::mem::take(&mut t.ready)).await?;
    // Tenancy: a foreign partition never reaches the registry or the cursor lookup; the
    // wire itself then refuses it exactly like a nonexistent one (docs/contract.md §9 step 1).
    let owned = e
        .owned_partitions(tenant, t.acks.iter().map(|a| a.pid))
        .await?;
    // Its pushes cannot be spooled: while push maintenance is on or a partition it pushes
    // to has spooled records pending, it is a 503 that wrote nothing (write_gate).
    let targets: Vec<(Uuid, &str, &str)> = t
        .pushes
        .iter()
        .map(|i| (tenant, i.queue.as_str(), i.partition.as_str()))
        .collect();
    e.gate
        .admit("a transaction that pushes", Targets::Partitions(&targets))
        .await?;
    let db = e.db.conn().await?;
    let mut acks = Vec::new();
    for g in ack_groups(&t.acks, AckKey::PerCursor) {
        let items: Vec<&AckItem> = g.iter().map(|&i| &t.acks[i]).collect();
        let foreign = owned.as_ref().is_some_and(|o| !o.contains(&items[0].pid));
        acks.push(ack_op(e, &db, t, &items, foreign).await?);
    }
    let wire = TxnWireRequest {
        pushes,
        acks,
        timers: std::mem::take(&mut t.timers),
        kv: std::mem::take(&mut t.kv),
        tenant: Some(tenant.to_string()),
    };
    match db.log_transaction_wire(&wire).await {
        Ok(r) => {
            let queues: HashSet<&str> = t.pushes.iter().map(|i| i.queue.as_str()).collect();
            for q in queues {
                e.signals.appended(tenant, q, None);
            }
            timers_scheduled(e, &wire.timers);
            copy_request_duplicates(&mut t.pushes);
            Ok(Verdict::Committed(r))
        }
        Err(err) => {
            if let Some(pre) = err.kv_precondition() {
                return Ok(Verdict::KvPrecondition(pre));
            }
            // The wire's refusal (nothing was written) is a verdict; a database that is
            // down or busy is the ApiError crate::db::error says (503).
            match err.wire_refusal() {
                Some((reason, msg)) => Ok(Verdict::Refused(reason, msg)),
                None => Err(err.into()),
            }
        }
    }
}

/// `encryptionEnabled` (crate::engine::sealing): the pushes into queues that encrypt are
/// sealed; one lookup of the pushed queues, made only when the transaction pushes.
async fn seal_pushes(e: &Engine<'_>, tenant: Uuid, items: &mut [PushItem]) -> ApiResult<()> {
    if items.is_empty() {
        return Ok(());
    }
    let qs: Vec<&str> = items.iter().map(|i| i.queue.as_str()).collect();
    let ps: Vec<&str> = items.iter().map(|i| i.partition.as_str()).collect();
    let queues: HashSet<String> = encrypting(e.db, tenant, &qs, &ps)
        .await?
        .into_iter()
        .filter_map(|i| items.get(i).map(|it| it.queue.clone()))
        .collect();
    seal_items(e.sealer, items, |it| queues.contains(&it.queue))
}

/// One segment per (queue, partition); a transactionId repeated inside the request for
/// the same partition is a duplicate of its first occurrence and is not pushed.
/// A group a binary body sent ready (and not sealed since) is stored as it came.
async fn encode_pushes(
    items: &[PushItem],
    mut ready: Vec<ReadySegment>,
) -> ApiResult<Vec<WirePush>> {
    type Segment = (
        String,
        String,
        Vec<queen_log::frame::Frame>,
        Option<Vec<u8>>,
    );
    let segments: Vec<Segment> = group_by_partition(items)
        .into_iter()
        .map(|(q, p, idx)| {
            let as_sent = take_ready(&mut ready, &idx).filter(|_| !items[idx[0]].encrypted);
            (
                q.to_string(),
                p.to_string(),
                idx.iter().map(|&i| items[i].frame()).collect(),
                as_sent,
            )
        })
        .collect();
    tokio::task::spawn_blocking(move || {
        segments
            .into_iter()
            .map(|(queue, partition, frames, as_sent)| {
                let blob = match as_sent {
                    Some(b) => b,
                    None => encode_segment(&frames)?,
                };
                Ok(WirePush {
                    queue,
                    partition,
                    count: frames.len() as i32,
                    hashes_hex: hash_hex(&segment_hashes(&frames)),
                    blob_b64: base64::engine::general_purpose::STANDARD.encode(blob),
                    verified: None,
                })
            })
            .collect::<Result<Vec<_>, queen_log::frame::CodecError>>()
    })
    .await
    .map_err(|err| ApiError::Internal(format!("encoder task failed: {err}")))?
    .map_err(ApiError::from)
}

/// One wire ack op for a group: positional when the fast-path decision grants it, else
/// by hash. A foreign group goes by hash without the registry seeing it.
async fn ack_op(
    e: &Engine<'_>,
    db: &Conn,
    t: &Transaction,
    items: &[&AckItem],
    foreign: bool,
) -> ApiResult<WireAckOp> {
    let first = items[0];
    let mut op = WireAckOp {
        partition_id: first.pid.to_string(),
        group: Some(first.group.clone()),
        ..Default::default()
    };
    if !foreign {
        op.worker = worker_for(db, t, items).await?;
        if let Some(end) = fast_path_end(e.registry, items, op.worker.as_deref()) {
            op.upto_off = Some(end);
            return Ok(op);
        }
    }
    op.acks = Some(hash_acks(items));
    Ok(op)
}

/// The hash form of a group's acks.
fn hash_acks(items: &[&AckItem]) -> Vec<WireHashElem> {
    items
        .iter()
        .map(|it| WireHashElem {
            h: hash_hex(&it.hash),
            status: Some(it.status.as_str().to_string()),
            ok: None,
            error: it.error.clone(),
        })
        .collect()
}

/// The group's worker: its own leaseId; else, when any leaseId was sent, the partition's
/// current worker; else the single unambiguous requiredLeases entry; else lease-less.
async fn worker_for(db: &Conn, t: &Transaction, items: &[&AckItem]) -> ApiResult<Option<String>> {
    if let Some(l) = items.iter().find_map(|it| it.lease.clone()) {
        return Ok(Some(l));
    }
    if t.acks.iter().any(|it| it.lease.is_some()) {
        return Ok(db.cursor_worker(items[0].pid, &items[0].group).await?);
    }
    let distinct: HashSet<&String> = t.required.iter().filter(|l| !l.is_empty()).collect();
    Ok(match distinct.len() {
        1 => distinct.into_iter().next().cloned(),
        _ => None,
    })
}
