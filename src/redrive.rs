//! DLQ redrive (docs/decisions.md, "Redrive"): dead-lettered messages go back into their own partitions as
//! new messages, in the same transaction as they leave the DLQ. The rules (which frame,
//! which transactionId, one message per dead-lettered offset) are `queen_log::dlq`'s;
//! this loads, locks, pushes and deletes. Deleting DLQ rows is plain SQL
//! (sql/dlq_admin.sql).
//!
//! Lock order: the partitions first (ascending id, the push serializer, as every push
//! takes it), then the DLQ rows, partition by partition in that order, each partition's
//! in ascending id (one row lock statement per partition: on Citus a row lock must name
//! one partition). A queue deletion takes its partitions before it deletes their DLQ
//! rows, so the two cannot wait on each other in a cycle.

use std::collections::HashMap;

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::dlq::{redrive_groups, redrive_txn, redriven_frame};
use queen_log::frame::Frame;
use queen_log::order::partition_lock_order;
use queen_log::segment::{encode_segment, segment_hashes};
use queen_log::wire::{PushVerdict, RedriveResult, RedriveRow, Redriven};

use crate::db::{col, default_tenant, jsonb, q, raise, required, OrRaise};
use crate::push::{lock_partition, push_resolved, FramesAt, SegmentIn};

/// A DLQ row, locked, with where it goes back to.
struct DlqRow {
    id: Uuid,
    pid: Uuid,
    queue: String,
    partition: String,
    window: i32,
    /// The queue's `maxSize` (0 = none), which the push back checks.
    max_size: i32,
    group: String,
    offset: i64,
    txn: Option<String>,
    /// The payload snapshot as JSON text; None when it was not captured.
    snapshot: Option<String>,
    /// The queue encrypts (`encryptionEnabled`): only then can a snapshot be sealed.
    encrypts: bool,
}

/// What became of a row: its result, and the new message (id, transactionId, offset).
struct Fate {
    result: RedriveResult,
    message: Option<(uuid::Uuid, String, i64)>,
    error: Option<String>,
}

impl Fate {
    fn refused(error: String) -> Self {
        Fate {
            result: RedriveResult::Refused,
            message: None,
            error: Some(error),
        }
    }
}

/// The partitions of the tenant's rows among `ids` (read without locking).
fn partitions_of(client: &SpiClient<'_>, ids: &[Uuid], tenant: Uuid) -> Vec<Uuid> {
    q(
        client,
        "SELECT DISTINCT d.partition_id FROM queen.log_dlq d
           JOIN queen.log_partitions p ON p.id = d.partition_id
           JOIN queen.queues q ON q.id = p.queue_id
          WHERE d.id = ANY($1) AND q.tenant_id = $2",
        &[ids.to_vec().into(), tenant.into()],
    )
    .or_raise()
    .map(|r| col::<Uuid>(&r, 1, "log_dlq.partition_id"))
    .collect()
}

/// The rows still there once their partitions are locked, locked partition by partition
/// (in the order of `pids`), each partition's in id order.
fn lock_rows(client: &SpiClient<'_>, ids: &[Uuid], tenant: Uuid, pids: &[Uuid]) -> Vec<DlqRow> {
    pids.iter()
        .flat_map(|pid| lock_partition_rows(client, ids, tenant, *pid))
        .collect()
}

fn lock_partition_rows(
    client: &SpiClient<'_>,
    ids: &[Uuid],
    tenant: Uuid,
    pid: Uuid,
) -> Vec<DlqRow> {
    q(
        client,
        "SELECT d.id, d.partition_id, q.name, p.name, q.dedup_window_seconds, d.consumer_group,
                d.\"offset\", d.transaction_id, d.payload::text, q.encryption_enabled,
                q.max_size
           FROM queen.log_dlq d
           JOIN queen.log_partitions p ON p.id = d.partition_id
           JOIN queen.queues q ON q.id = p.queue_id
          WHERE d.partition_id = $3 AND d.id = ANY($1) AND q.tenant_id = $2
          ORDER BY d.id
            FOR UPDATE OF d",
        &[ids.to_vec().into(), tenant.into(), pid.into()],
    )
    .or_raise()
    .map(|r| DlqRow {
        id: col(&r, 1, "log_dlq.id"),
        pid: col(&r, 2, "log_dlq.partition_id"),
        queue: col(&r, 3, "queues.name"),
        partition: col(&r, 4, "log_partitions.name"),
        window: col(&r, 5, "queues.dedup_window_seconds"),
        max_size: col(&r, 11, "queues.max_size"),
        group: col(&r, 6, "log_dlq.consumer_group"),
        offset: col(&r, 7, "log_dlq.offset"),
        txn: r.get(8).or_raise(),
        snapshot: r.get(9).or_raise(),
        encrypts: col(&r, 10, "queues.encryption_enabled"),
    })
    .collect()
}

/// The new frame of each message (rows grouped by offset), or why it cannot go back.
fn new_frames(
    client: &SpiClient<'_>,
    rows: &[&DlqRow],
) -> Vec<(Vec<usize>, Result<Frame, String>)> {
    let offsets: Vec<i64> = rows.iter().map(|r| r.offset).collect();
    let originals = FramesAt::load(client, rows[0].pid, &offsets);
    let keys: Vec<((), i64)> = rows.iter().map(|r| ((), r.offset)).collect();
    redrive_groups(&keys)
        .into_iter()
        .map(|members| {
            let first = rows[members[0]];
            let original = originals.get(first.offset);
            let txn = first
                .txn
                .as_deref()
                .or(original.map(|f| f.transaction_id.as_str()));
            let frame = redriven_frame(
                original,
                first.snapshot.as_deref(),
                first.encrypts,
                *uuid::Uuid::now_v7().as_bytes(),
                redrive_txn(uuid::Uuid::from_bytes(*first.id.as_bytes()), txn),
            )
            .map_err(|e| e.to_string());
            (members, frame)
        })
        .collect()
}

/// Push one partition's redriven frames as one segment (in offset order). A frame the
/// dedup window already holds (someone pushed that transactionId) is a duplicate: the
/// rest is pushed again without it. Returns each frame's (new offset) or duplicate.
fn push_frames(
    client: &mut SpiClient<'_>,
    tenant: Uuid,
    row: &DlqRow,
    frames: &[Frame],
) -> Vec<Option<i64>> {
    let mut out: Vec<Option<i64>> = vec![None; frames.len()];
    let mut todo: Vec<usize> = (0..frames.len()).collect();
    while !todo.is_empty() {
        let batch: Vec<Frame> = todo.iter().map(|&i| frames[i].clone()).collect();
        let blob = encode_segment(&batch)
            .unwrap_or_else(|e| crate::db::raise_internal(format!("redrive segment: {e}")));
        let hashes = segment_hashes(&batch);
        let seg = SegmentIn {
            queue: &row.queue,
            partition: &row.partition,
            msg_count: batch.len() as i32,
            hashes: &hashes,
            verified: -1,
            verified_for: None,
            blob: &blob,
            tenant,
        };
        match push_resolved(client, row.pid, row.window, row.max_size, &seg) {
            PushVerdict::Queued { base_offset, .. } => {
                for (k, &i) in todo.iter().enumerate() {
                    out[i] = Some(base_offset + k as i64);
                }
                break;
            }
            PushVerdict::Duplicate { dups, .. } => {
                let dup: Vec<usize> = dups.iter().map(|d| todo[d.i]).collect();
                todo.retain(|i| !dup.contains(i));
            }
        }
    }
    out
}

/// Redrive one partition's rows: returns each row's fate, by row index into `rows`.
fn redrive_partition(
    client: &mut SpiClient<'_>,
    tenant: Uuid,
    rows: &[&DlqRow],
) -> Vec<(usize, Fate)> {
    let mut fates = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut frames: Vec<Frame> = Vec::new();
    for (m, frame) in new_frames(client, rows) {
        match frame {
            Ok(f) => {
                members.push(m);
                frames.push(f);
            }
            Err(e) => fates.extend(m.into_iter().map(|i| (i, Fate::refused(e.clone())))),
        }
    }
    if frames.is_empty() {
        return fates;
    }
    let offsets = push_frames(client, tenant, rows[0], &frames);
    for ((m, f), off) in members.into_iter().zip(&frames).zip(offsets) {
        fates.extend(m.into_iter().map(|i| (i, pushed(f, off))));
    }
    fates
}

/// The fate of a row whose frame `f` was pushed at `off` (None: a duplicate).
fn pushed(f: &Frame, off: Option<i64>) -> Fate {
    match off {
        Some(o) => Fate {
            result: RedriveResult::Moved,
            message: Some((
                uuid::Uuid::from_bytes(f.message_id),
                f.transaction_id.clone(),
                o,
            )),
            error: None,
        },
        None => Fate {
            result: RedriveResult::Duplicate,
            message: None,
            error: Some("the redrive transactionId is already in the dedup window".into()),
        },
    }
}

/// Redrive the tenant's DLQ rows `ids`: one result per id, in input order.
pub fn redrive(client: &mut SpiClient<'_>, ids: &[Uuid], tenant: Uuid) -> Redriven {
    let mut pids = partitions_of(client, ids, tenant);
    let order = partition_lock_order(pids.iter().map(|p| *p.as_bytes()));
    pids.clear();
    for id in order {
        let pid = Uuid::from_bytes(id);
        if lock_partition(client, pid).is_some() {
            pids.push(pid);
        }
    }
    let rows = lock_rows(client, ids, tenant, &pids);
    // Rows in request order, so the first requested row of a message names it.
    let asked: HashMap<[u8; 16], usize> = ids
        .iter()
        .enumerate()
        .rev()
        .map(|(i, id)| (*id.as_bytes(), i))
        .collect();
    let mut fates: HashMap<[u8; 16], Fate> = HashMap::new();
    for pid in &pids {
        let mut mine: Vec<&DlqRow> = rows.iter().filter(|r| r.pid == *pid).collect();
        mine.sort_by_key(|r| asked.get(r.id.as_bytes()));
        if mine.is_empty() {
            continue;
        }
        for (i, fate) in redrive_partition(client, tenant, &mine) {
            fates.insert(*mine[i].id.as_bytes(), fate);
        }
    }
    let moved: Vec<Uuid> = rows
        .iter()
        .filter(|r| fates.get(r.id.as_bytes()).map(|f| f.result) == Some(RedriveResult::Moved))
        .map(|r| r.id)
        .collect();
    if !moved.is_empty() {
        q(
            client,
            "DELETE FROM queen.log_dlq WHERE partition_id = ANY($2) AND id = ANY($1)",
            &[moved.clone().into(), pids.clone().into()],
        )
        .or_raise();
    }
    let by_id: HashMap<[u8; 16], &DlqRow> = rows.iter().map(|r| (*r.id.as_bytes(), r)).collect();
    Redriven {
        moved: moved.len() as i64,
        results: ids
            .iter()
            .map(|id| {
                row_result(
                    id,
                    by_id.get(id.as_bytes()).copied(),
                    fates.get(id.as_bytes()),
                )
            })
            .collect(),
    }
}

fn row_result(id: &Uuid, row: Option<&DlqRow>, fate: Option<&Fate>) -> RedriveRow {
    let uuid = |u: &Uuid| uuid::Uuid::from_bytes(*u.as_bytes());
    let message = fate.and_then(|f| f.message.clone());
    RedriveRow {
        dlq_id: uuid(id),
        result: fate.map_or(RedriveResult::Gone, |f| f.result),
        queue: row.map(|r| r.queue.clone()),
        partition: row.map(|r| r.partition.clone()),
        partition_id: row.map(|r| uuid(&r.pid)),
        consumer_group: row.map(|r| r.group.clone()),
        original_offset: row.map(|r| r.offset),
        original_transaction_id: row.and_then(|r| r.txn.clone()),
        message_id: message.as_ref().map(|m| m.0),
        transaction_id: message.as_ref().map(|m| m.1.clone()),
        offset: message.as_ref().map(|m| m.2),
        error: fate.and_then(|f| f.error.clone()),
    }
}

/// `queen.dlq_redrive_v1(p_ids, p_tenant)`: the tenant's DLQ rows `p_ids` back into their
/// partitions as new messages (same payload, transactionId `dlq:<row id>:<original>`),
/// removed from the DLQ in the same transaction. Rows of one message (same partition and
/// offset, several groups) go back as one message. An id that is not the tenant's DLQ
/// row is `gone`; a row that cannot go back is `refused` and stays.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn dlq_redrive_v1(
    p_ids: Option<Vec<Option<Uuid>>>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let ids: Vec<Uuid> = required(p_ids, "p_ids")
        .into_iter()
        .enumerate()
        .map(|(i, id)| {
            id.unwrap_or_else(|| {
                raise(
                    PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                    format!("p_ids[{}] must not be NULL", i + 1),
                )
            })
        })
        .collect();
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&Spi::connect_mut(|c| redrive(c, &ids, tenant)))
}
