//! The transaction wire (docs/contract.md §9): pushes and acks in one transaction, all or nothing.
//! Any failure raises, so PostgreSQL rolls back everything this call wrote.

use base64::Engine;
use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::ack::Status;
use queen_log::hash::{parse_hash_hex, TxnHash};
use queen_log::order::cursor_lock_order;
use queen_log::wire::{
    HashAck, PositionalAck, PushVerdict, Reply, TxnWire, TxnWireRequest, WireAck, WireAckOp,
    WireHashElem, WirePush,
};

use crate::ack::{ack_by_hash, ack_by_name, HashAckCall, PartitionName};
use crate::db::{
    bad_param, col, default_tenant, jsonb, parse_uuid, q, raise, raise_detail, raise_q, required,
    OrRaise, QUEUE_MODE,
};
use crate::push::{push_many, SegmentIn};

/// A push op decoded into bytes.
struct PushBytes {
    hashes: Vec<u8>,
    blob: Vec<u8>,
}

fn decode_push(i: usize, p: &WirePush) -> PushBytes {
    let hashes = (0..p.hashes_hex.len() / 32)
        .map(|k| {
            p.hashes_hex
                .get(32 * k..32 * k + 32)
                .and_then(|t| parse_hash_hex(t).ok())
        })
        .collect::<Option<Vec<TxnHash>>>()
        .filter(|_| p.hashes_hex.len().is_multiple_of(32))
        .unwrap_or_else(|| {
            bad_param(format!(
                "pushes[{i}].hashesHex is not a list of 32-hex-digit hashes"
            ))
        });
    let blob = base64::engine::general_purpose::STANDARD
        .decode(&p.blob_b64)
        .unwrap_or_else(|e| bad_param(format!("pushes[{i}].blobB64 is not base64: {e}")));
    PushBytes {
        hashes: hashes.concat(),
        blob,
    }
}

/// The op's consumer group; '' or absent is queue mode.
fn group_of(op: &WireAckOp) -> &str {
    op.group
        .as_deref()
        .filter(|g| !g.is_empty())
        .unwrap_or(QUEUE_MODE)
}

/// Step 1: every ack partition must belong to a queue of the tenant. A partition that
/// does not exist at all is refused the same way, so tenants cannot probe each other.
fn check_ownership(client: &SpiClient<'_>, tenant: Uuid, pids: &[Uuid]) {
    for pid in pids {
        let owned = q(
            client,
            "SELECT 1 FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
                  WHERE p.id = $1 AND q.tenant_id = $2",
            &[(*pid).into(), tenant.into()],
        )
        .or_raise();
        if owned.is_empty() {
            raise_q(format!(
                "QTXN ack references partition {pid} not owned by this tenant"
            ));
        }
    }
}

/// Steps 2–4: provision, lock in ascending id and push in input order.
fn run_pushes(client: &mut SpiClient<'_>, tenant: Uuid, pushes: &[WirePush]) -> Vec<PushVerdict> {
    let bytes: Vec<PushBytes> = pushes
        .iter()
        .enumerate()
        .map(|(i, p)| decode_push(i, p))
        .collect();
    let resolved = pushes
        .iter()
        .filter(|p| !p.queue.is_empty() && !p.partition.is_empty())
        .count();
    if resolved != pushes.len() {
        raise_q(format!(
            "QTXN resolved {resolved} of {} pushes (empty or unknown queue/partition)",
            pushes.len()
        ));
    }
    let segs: Vec<SegmentIn<'_>> = pushes
        .iter()
        .zip(&bytes)
        .map(|(p, b)| SegmentIn {
            queue: &p.queue,
            partition: &p.partition,
            msg_count: p.count,
            hashes: &b.hashes,
            verified: p.verified.unwrap_or(-1),
            verified_for: None,
            blob: &b.blob,
            tenant,
        })
        .collect();
    let results = push_many(client, &segs);
    for (p, r) in pushes.iter().zip(&results) {
        if matches!(r, PushVerdict::Duplicate { .. }) {
            raise(
                PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION,
                format!(
                    "QDUP duplicate messages in queue \"{}\" partition \"{}\"; transaction rolled back",
                    p.queue, p.partition
                ),
            );
        }
    }
    results
}

/// A hash-form ack: the element status, else failed when "ok": false, else completed.
fn run_hash_ack(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    op: &WireAckOp,
    elems: &[WireHashElem],
) -> HashAck {
    let hashes: Vec<TxnHash> = elems
        .iter()
        .map(|e| {
            parse_hash_hex(&e.h)
                .unwrap_or_else(|err| bad_param(format!("ack hash \"{}\": {err}", e.h)))
        })
        .collect();
    let statuses: Vec<Status> = elems
        .iter()
        .map(|e| match (e.status.as_deref(), e.ok) {
            (Some(s), _) => Status::parse(Some(s)).unwrap_or_else(|err| bad_param(err.to_string())),
            (None, Some(false)) => Status::Failed,
            (None, _) => Status::Completed,
        })
        .collect();
    let errors: Vec<Option<String>> = elems.iter().map(|e| e.error.clone()).collect();
    let call = HashAckCall {
        pid,
        group: group_of(op),
        worker: op.worker.as_deref(),
        hashes: &hashes,
        statuses: &statuses,
        delay_s: 0,
        dlq_errors: Some(&errors),
    };
    let r = done_or_raise(pid, op, ack_by_hash(client, &call));
    if !r.unresolved_hashes.is_empty() {
        raise_detail(
            PgSqlErrorCode::ERRCODE_RAISE_EXCEPTION,
            "QTXN ack references unknown transactionId; transaction rolled back",
            serde_json::to_string(&r.unresolved_hashes).unwrap_or_default(),
        );
    }
    if let Some(e) = &r.dlq_refused {
        done_or_raise::<()>(pid, op, Reply::Refused(e.clone()));
    }
    r
}

/// The wire is all or nothing: a refused ack raises, rolling everything back.
fn done_or_raise<T>(pid: Uuid, op: &WireAckOp, r: Reply<T>) -> T {
    match r {
        Reply::Done(t) => t,
        Reply::Refused(e) => raise_q(format!(
            "QTXN ack failed for partition {pid} group \"{}\": {e}; transaction rolled back",
            group_of(op)
        )),
    }
}

/// A positional ack through log_ack_v1 (by names); NULL uptoOff releases only.
fn run_positional_ack(
    client: &mut SpiClient<'_>,
    tenant: Uuid,
    pid: Uuid,
    op: &WireAckOp,
) -> PositionalAck {
    let names = q(
        client,
        "SELECT q.name::text, p.name FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = $1",
        &[pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| (col::<String>(&r, 1, "queues.name"), col::<String>(&r, 2, "log_partitions.name")));
    let Some((queue, partition)) = names else {
        raise_q(format!("QTXN ack references unknown partition {pid}"));
    };
    let ok = op.ok.unwrap_or(true);
    let at = PartitionName {
        tenant,
        queue: &queue,
        partition: &partition,
    };
    let r = ack_by_name(
        client,
        at,
        group_of(op),
        op.worker.as_deref(),
        op.upto_off,
        ok,
    );
    done_or_raise(pid, op, r)
}

fn wire(client: &mut SpiClient<'_>, w: TxnWireRequest) -> TxnWire {
    let tenant = match &w.tenant {
        Some(t) => {
            parse_uuid(t).unwrap_or_else(|| bad_param(format!("_tenant \"{t}\" is not a uuid")))
        }
        None => default_tenant(),
    };
    let pids: Vec<Uuid> = w
        .acks
        .iter()
        .map(|a| {
            parse_uuid(&a.partition_id).unwrap_or_else(|| {
                bad_param(format!(
                    "ack partitionId \"{}\" is not a uuid",
                    a.partition_id
                ))
            })
        })
        .collect();
    check_ownership(client, tenant, &pids);
    // Before the pushes: a sweeper holds due timer rows while it waits for partition
    // locks, so a rider taking timer rows after this call's partition locks could wait
    // on it in a cycle (docs/decisions.md, "Timers").
    let timers = crate::timers::apply(client, tenant, &w.timers);
    // A kv row is no one else's lock to wait for in a cycle: kv ops take kv rows only.
    let kv = crate::kv::apply(client, tenant, &w.kv);
    let pushes = run_pushes(client, tenant, &w.pushes);
    let keys: Vec<([u8; 16], &str)> = pids
        .iter()
        .zip(&w.acks)
        .map(|(p, a)| (*p.as_bytes(), group_of(a)))
        .collect();
    let acks = cursor_lock_order(&keys)
        .into_iter()
        .map(|i| {
            let (op, pid) = (&w.acks[i], pids[i]);
            let (partition_id, group) = (
                Some(uuid::Uuid::from_bytes(*pid.as_bytes())),
                Some(group_of(op).to_string()),
            );
            Reply::Done(match &op.acks {
                Some(elems) => WireAck::Hash(Box::new(HashAck {
                    partition_id,
                    group,
                    ..run_hash_ack(client, pid, op, elems)
                })),
                None => WireAck::Positional(PositionalAck {
                    partition_id,
                    group,
                    ..run_positional_ack(client, tenant, pid, op)
                }),
            })
        })
        .collect();
    TxnWire {
        ok: true,
        pushes,
        acks,
        timers,
        kv,
    }
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_transaction_wire_v1(p: Option<JsonB>) -> JsonB {
    let w: TxnWireRequest = serde_json::from_value(required(p, "p").0)
        .unwrap_or_else(|e| bad_param(format!("transaction wire: {e}")));
    jsonb(&Spi::connect_mut(|c| wire(c, w)))
}
