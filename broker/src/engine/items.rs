//! The items a write carries once the routes have read them (crate::http::items reads
//! them from JSON, crate::http::binary_body from the SDK's binary bodies), and the rules
//! every route that writes them shares, each written once: in-request duplicates (marked
//! before the write, answered with their first item's id after it), the grouping of
//! pushes per partition and of acks per key, and sealing (pushes and timers) for queues
//! that encrypt.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use queen_log::ack::Status;
use queen_log::frame::Frame;
use queen_log::hash::TxnHash;
use queen_log::timers::{OpKind, TimerOp};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::db::Db;
use crate::engine::sealing::Sealer;
use crate::engine::Engine;
use crate::error::{ApiError, ApiResult};

/// One validated push item.
pub struct PushItem {
    pub queue: String,
    pub partition: String,
    pub txn: String,
    pub trace: Option<[u8; 16]>,
    /// The payload's JSON text, as written.
    pub payload: Vec<u8>,
    /// Minted when read; replaced by the original's id when the item turns out duplicate.
    pub message_id: Uuid,
    /// Earlier item of this request with the same (queue, partition, transactionId).
    pub dup_of: Option<usize>,
    /// The payload is sealed (its queue encrypts; see [`seal_items`]).
    pub encrypted: bool,
    /// The producer subject stored with the message: the verified token's `sub`
    /// ([`stamp_subject`]), never a body's `producerSub`.
    pub producer_sub: Option<Arc<str>>,
}

impl PushItem {
    /// The frame this item is stored as.
    pub fn frame(&self) -> Frame {
        Frame {
            message_id: *self.message_id.as_bytes(),
            trace_id: self.trace,
            transaction_id: self.txn.clone(),
            producer_sub: self.producer_sub.as_deref().map(str::to_owned),
            encrypted: self.encrypted,
            payload: self.payload.clone(),
        }
    }
}

/// Stamps the request's producer subject (the verified token's `sub`; none with
/// authentication off) on every item, as Queen's push does (docs/security.md, "Producer
/// identity"). Whatever a body said is not consulted: the reader dropped it.
pub fn stamp_subject(items: &mut [PushItem], subject: Option<&Arc<str>>) {
    for it in items {
        it.producer_sub = subject.cloned();
    }
}

/// One validated ack.
pub struct AckItem {
    pub txn: String,
    pub hash: TxnHash,
    pub pid: Uuid,
    pub status: Status,
    pub error: Option<String>,
    pub group: String,
    pub lease: Option<String>,
    /// `delaySeconds`, validated (failed or retry only, 0..=i32::MAX).
    pub delay: Option<i32>,
}

/// A group's compressed frames as the client sent them (crate::http::binary_body),
/// storable as they are while the group's pushed items are exactly `items` and none of
/// them was sealed.
pub struct ReadySegment {
    pub items: Vec<usize>,
    pub blob: Vec<u8>,
}

/// The ready segment for a group of `items`, if one came whole; taken, so a second
/// round (after a duplicate) encodes what is left.
pub fn take_ready(ready: &mut Vec<ReadySegment>, items: &[usize]) -> Option<Vec<u8>> {
    let at = ready.iter().position(|r| r.items == items)?;
    Some(ready.swap_remove(at).blob)
}

/// Indexes of `items` per key, groups in order of first appearance (the one grouping
/// every write route uses).
fn in_groups<'a, T: 'a, K: Hash + Eq + Clone>(
    items: impl Iterator<Item = (usize, &'a T)>,
    key: impl Fn(&'a T) -> K,
) -> Vec<(K, Vec<usize>)> {
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut out: Vec<(K, Vec<usize>)> = Vec::new();
    for (i, it) in items {
        let k = key(it);
        match index.get(&k) {
            Some(&g) => out[g].1.push(i),
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, vec![i]));
            }
        }
    }
    out
}

/// A transactionId repeated inside one request for the same partition: the first wins,
/// the later ones are duplicates of it.
pub fn mark_request_duplicates<'a>(items: impl Iterator<Item = &'a mut PushItem>) {
    let mut first: HashMap<(String, String, String), usize> = HashMap::new();
    for (i, it) in items.enumerate() {
        let key = (it.queue.clone(), it.partition.clone(), it.txn.clone());
        match first.get(&key) {
            Some(&f) => it.dup_of = Some(f),
            None => {
                first.insert(key, i);
            }
        }
    }
}

/// In-request duplicates answer with whatever their first item ended up with.
pub fn copy_request_duplicates(items: &mut [PushItem]) {
    for i in 0..items.len() {
        if let Some(f) = items[i].dup_of {
            items[i].message_id = items[f].message_id;
        }
    }
}

/// The items to push, one segment per (queue, partition) in order of first appearance:
/// (queue, partition, item indexes). In-request duplicates are not pushed.
pub fn group_by_partition(items: &[PushItem]) -> Vec<(&str, &str, Vec<usize>)> {
    let pushed = items
        .iter()
        .enumerate()
        .filter(|(_, it)| it.dup_of.is_none());
    in_groups(pushed, |it| (it.queue.as_str(), it.partition.as_str()))
        .into_iter()
        .map(|((q, p), idx)| (q, p, idx))
        .collect()
}

/// How acks are grouped: each group is one statement (or one wire ack op) on one cursor.
#[derive(Clone, Copy)]
pub enum AckKey {
    /// (partition, group, lease): `/ack` and `/ack/batch`, a group per lease.
    PerLease,
    /// (partition, group): a transaction, whose group's worker is resolved once.
    PerCursor,
}

/// Ack indexes per key, in order of first appearance.
pub fn ack_groups(acks: &[AckItem], by: AckKey) -> Vec<Vec<usize>> {
    in_groups(acks.iter().enumerate(), |it| {
        let lease = match by {
            AckKey::PerLease => it.lease.as_deref(),
            AckKey::PerCursor => None,
        };
        (it.pid, it.group.as_str(), lease)
    })
    .into_iter()
    .map(|(_, idx)| idx)
    .collect()
}

/// `encryptionEnabled` (crate::engine::sealing): every item whose queue encrypts is sealed
/// once, before it is encoded. A broker without `QUEEN_ENCRYPTION_KEY` refuses such a push
/// (503 `encryption_key_missing`, nothing written): the database would refuse the
/// plaintext anyway.
pub fn seal_items(
    sealer: &Sealer,
    items: &mut [PushItem],
    encrypts: impl Fn(&PushItem) -> bool,
) -> ApiResult<()> {
    for it in items.iter_mut().filter(|it| encrypts(it)) {
        it.payload = sealer.seal_for(&it.queue, &it.payload)?;
        it.encrypted = true;
    }
    Ok(())
}

/// Which of the (queue, partition) pairs name a queue that encrypts (`encryptionEnabled`),
/// by index: one `partitions_lookup_v1`, for the pushes and timers a write must seal.
pub async fn encrypting(
    db: &Db,
    tenant: Uuid,
    queues: &[&str],
    partitions: &[&str],
) -> ApiResult<HashSet<usize>> {
    let found = db
        .conn()
        .await?
        .partitions_lookup(tenant, queues, partitions)
        .await?;
    Ok(found
        .iter()
        .filter(|f| f.encrypted)
        .map(|f| f.index)
        .collect())
}

/// Seals the payloads of timer ops into queues that encrypt (one lookup of the queues
/// named), as [`seal_items`] seals pushes.
pub async fn seal_timer_ops(e: &Engine<'_>, tenant: Uuid, ops: &mut [TimerOp]) -> ApiResult<()> {
    let scheduled: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].op != OpKind::Cancel)
        .collect();
    if scheduled.is_empty() {
        return Ok(());
    }
    let qs: Vec<&str> = scheduled.iter().map(|&i| ops[i].queue.as_str()).collect();
    let ps: Vec<&str> = scheduled.iter().map(|&i| ops[i].partition()).collect();
    let sealed: Vec<usize> = encrypting(e.db, tenant, &qs, &ps)
        .await?
        .into_iter()
        .filter_map(|i| scheduled.get(i).copied())
        .collect();
    for i in sealed {
        let op = &mut ops[i];
        let plain = op.payload.as_ref().map_or("null", |p| p.get());
        let sealed = e.sealer.seal_for(&op.queue, plain.as_bytes())?;
        let text = String::from_utf8(sealed)
            .map_err(|_| ApiError::Internal("a sealed envelope is JSON text".into()))?;
        op.payload = Some(
            RawValue::from_string(text)
                .map_err(|err| ApiError::Internal(format!("sealed envelope: {err}")))?,
        );
        op.encrypted = true;
    }
    Ok(())
}

/// Wakes this broker's timer sweeper for every schedule that falls due before its next
/// sweep (applied ops only).
pub fn timers_scheduled(e: &Engine<'_>, ops: &[TimerOp]) {
    for d in ops.iter().filter_map(|o| o.delay_ms) {
        e.signals.timer_scheduled(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(pid: u128, group: &str, lease: Option<&str>) -> AckItem {
        AckItem {
            txn: String::new(),
            hash: [0; 16],
            pid: Uuid::from_u128(pid),
            status: Status::Completed,
            error: None,
            group: group.into(),
            lease: lease.map(str::to_string),
            delay: None,
        }
    }

    #[test]
    fn acks_group_per_lease_or_per_cursor_in_order_of_first_appearance() {
        let acks = [
            ack(2, "g", Some("a")),
            ack(1, "g", Some("a")),
            ack(2, "g", Some("b")),
            ack(2, "g", Some("a")),
            ack(2, "h", None),
        ];
        assert_eq!(
            ack_groups(&acks, AckKey::PerLease),
            vec![vec![0, 3], vec![1], vec![2], vec![4]]
        );
        assert_eq!(
            ack_groups(&acks, AckKey::PerCursor),
            vec![vec![0, 2, 3], vec![1], vec![4]]
        );
    }
}
