//! `POST /api/v1/transaction`: pushes and acks in one database transaction through
//! `log_transaction_wire_v1`, all or nothing (docs/broker-contract.md §1).
//!
//! Pushes are encoded here exactly as for `/push`. Acks are grouped by (partitionId,
//! group); a group goes in positional form when this process served its pop and the
//! registry's fast-path conditions hold (the entry is consumed), else in hash form.
//! The `timers` rider (crate::http::timer_ops) is applied in the same transaction, its
//! results after the kv rider's; the `kv` rider (crate::http::kv_ops) runs in the same
//! transaction too, its results right after the operations'.
//! The body may be the SDK's binary one (`QTB1`, crate::http::binary_body): a JSON head
//! and the pushes as framed groups, each answered as one push operation after the head's.
//! A transaction that pushes asks the write gate first (crate::engine::write_gate): it
//! cannot be spooled, so push maintenance or spooled records of its partitions make it
//! a 503 that wrote nothing.

use std::collections::HashSet;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use queen_log::ack::Status;
use queen_log::hash::{hash_hex, TxnHash};
use queen_log::kv::KvOp;
use queen_log::segment::{encode_segment, segment_hashes};
use queen_log::timers::{TimerOp, TimerResult};
use queen_log::wire::{Reply, TxnWire, TxnWireRequest, WireAck, WireAckOp, WireHashElem, WirePush};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::db::Conn;
use crate::engine::write_gate::Targets;
use crate::error::{ApiError, ApiResult};
use crate::http::auth::{owned_partitions, Subject, Tenant};
use crate::http::binary_body::{is_binary, read_transaction, take_ready, ReadySegment, TXN_MAGIC};
use crate::http::input::{parse_json, part_error};
use crate::http::items::{
    check_item_count, encrypting, group_by_partition, mark_request_duplicates, read_ack_item,
    read_push_item, seal_items, stamp_subject, AckAt, AckItem, PushItem,
};
use crate::http::kv_ops;
use crate::http::timer_ops::{nudge, read_ops, seal_ops};
use crate::state::AppState;

/// The body: operations stay raw JSON until read (crate::http::items), as for /push and /ack.
/// Any other key is refused naming it (docs/http-api.md, "Strict bodies").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body<'a> {
    #[serde(borrow)]
    operations: Option<&'a RawValue>,
    #[serde(borrow, rename = "requiredLeases")]
    required_leases: Option<&'a RawValue>,
    /// Queen 2.x's key/value rider (`tx.kv.*`, `tx.once`, `tx.guard`): applied in the
    /// same database transaction (crate::http::kv_ops reads it).
    #[serde(borrow, default)]
    kv: Option<&'a RawValue>,
    /// Queen 2.x's timer rider (`tx.timer(..)`): applied in the same database
    /// transaction (crate::http::timer_ops reads it).
    #[serde(borrow, default)]
    timers: Option<&'a RawValue>,
}

/// An operation's keys: its type, a push's items, and the keys of an ack (read by
/// crate::http::items; listed here only so that a push carrying one is refused and any
/// other key is refused naming it).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct OpHead<'a> {
    #[serde(rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow)]
    items: Option<&'a RawValue>,
    transaction_id: Option<IgnoredAny>,
    partition_id: Option<IgnoredAny>,
    status: Option<IgnoredAny>,
    error: Option<IgnoredAny>,
    consumer_group: Option<IgnoredAny>,
    lease_id: Option<IgnoredAny>,
    delay_seconds: Option<IgnoredAny>,
}

impl OpHead<'_> {
    /// The first ack key present, which a push operation must not carry.
    fn ack_key(&self) -> Option<&'static str> {
        [
            ("transactionId", self.transaction_id.is_some()),
            ("partitionId", self.partition_id.is_some()),
            ("status", self.status.is_some()),
            ("error", self.error.is_some()),
            ("consumerGroup", self.consumer_group.is_some()),
            ("leaseId", self.lease_id.is_some()),
            ("delaySeconds", self.delay_seconds.is_some()),
        ]
        .into_iter()
        .find_map(|(k, present)| present.then_some(k))
    }
}

/// Only the type, for naming an unknown operation type before its unknown keys.
#[derive(Deserialize)]
struct OpType<'a> {
    #[serde(rename = "type")]
    kind: Option<&'a str>,
}

/// The request, read: its push items (with the operation each came from), its acks
/// (with theirs), and the requiredLeases.
struct Parsed {
    /// Operation index per entry, in operation order.
    order: Vec<Op>,
    pushes: Vec<PushItem>,
    acks: Vec<AckItem>,
    required: Vec<String>,
    /// The timer rider's ops; their results follow the kv rider's (a flat index space).
    timers: Vec<TimerOp>,
    /// The kv rider's ops; their results follow the operations'.
    kv: Vec<KvOp>,
    /// A binary body's push groups as the client compressed them (crate::http::binary_body).
    ready: Vec<ReadySegment>,
    /// A binary body's flag 2: pushes and acks are counted, not listed.
    counts: bool,
}

/// An operation's entries in `Parsed`: push items `pushes[first..first + n]`, or ack
/// `acks[i]`.
enum Op {
    Push {
        index: usize,
        first: usize,
        n: usize,
    },
    Ack {
        index: usize,
        ack: usize,
    },
}

/// A failed transaction: nothing was written. `field` names a refused body field.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Failure<'a> {
    transaction_id: &'a str,
    success: bool,
    reason: &'a str,
    error: &'a str,
    results: [(); 0],
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

fn failure(
    status: StatusCode,
    txn: &str,
    reason: &str,
    error: &str,
    field: Option<&str>,
) -> Response {
    let body = Failure {
        transaction_id: txn,
        success: false,
        reason,
        error,
        results: [],
        field,
    };
    (status, Json(body)).into_response()
}

pub async fn transaction(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    subject: Subject,
    body: Bytes,
) -> ApiResult<Response> {
    let txn = Uuid::now_v7().to_string();
    let mut p = match parse(
        &body,
        state.config.max_push_items,
        state.config.body_limit_bytes(),
    ) {
        Ok(p) => p,
        Err(e) => {
            return Ok(failure(
                StatusCode::BAD_REQUEST,
                &txn,
                "bad_request",
                &e.to_string(),
                e.field_name(),
            ))
        }
    };
    // The producer subject is the token's, as on `/push` (docs/security.md, "Producer
    // identity"); a binary body's frames carry none, so they are encoded again.
    stamp_subject(&mut p.pushes, &subject);
    if subject.0.is_some() {
        p.ready.clear();
    }
    mark_request_duplicates(p.pushes.iter_mut());
    seal_pushes(&state, tenant, &mut p.pushes).await?;
    seal_ops(&state, tenant, &mut p.timers).await?;
    let pushes = encode_pushes(&p.pushes, std::mem::take(&mut p.ready)).await?;
    // Tenancy: a foreign partition never reaches the registry or the cursor lookup; the
    // wire itself then refuses it exactly like a nonexistent one (docs/contract.md §9 step 1).
    let owned = owned_partitions(&state, tenant, p.acks.iter().map(|a| a.pid)).await?;
    // Its pushes cannot be spooled: while push maintenance is on or a partition it pushes
    // to has spooled records pending, it is a 503 that wrote nothing (write_gate).
    let targets: Vec<(Uuid, &str, &str)> = p
        .pushes
        .iter()
        .map(|i| (tenant, i.queue.as_str(), i.partition.as_str()))
        .collect();
    state
        .gate
        .admit("a transaction that pushes", Targets::Partitions(&targets))
        .await?;
    let db = state.db.conn().await?;
    let mut acks = Vec::new();
    for g in ack_groups(&p.acks) {
        let items: Vec<&AckItem> = g.iter().map(|&i| &p.acks[i]).collect();
        let foreign = owned.as_ref().is_some_and(|o| !o.contains(&items[0].pid));
        acks.push(ack_op(&state, &db, &p, &items, foreign).await?);
    }
    let wire = TxnWireRequest {
        pushes,
        acks,
        timers: std::mem::take(&mut p.timers),
        kv: std::mem::take(&mut p.kv),
        tenant: Some(tenant.to_string()),
    };
    match db.log_transaction_wire(&wire).await {
        Ok(r) => {
            let queues: HashSet<&str> = p.pushes.iter().map(|i| i.queue.as_str()).collect();
            for q in queues {
                state.wake_queue(tenant, q);
            }
            nudge(&state, &wire.timers);
            copy_request_duplicates(&mut p.pushes);
            if p.counts {
                return Ok(Json(counted(&txn, &p, &r)).into_response());
            }
            let results = render(&p, &r);
            Ok(Json(Done {
                transaction_id: &txn,
                success: true,
                results,
            })
            .into_response())
        }
        // A lost `required` kv precondition (nothing was written) is the SDK's 200
        // `kv_precondition`, its `failedIndex` in the flat space: every pushed item and
        // every ack first, then the kv rider.
        Err(e) if e.kv_precondition().is_some() => {
            let pre = e.kv_precondition().expect("checked");
            let flat = p.pushes.len() + p.acks.len();
            Ok(Json(json!({
                "transactionId": txn, "success": false, "reason": "kv_precondition",
                "error": format!("kv precondition lost at kv[{}] ({}): nothing was committed",
                                 pre.failed_index, pre.kv_reason),
                "failedIndex": flat + pre.failed_index, "kvReason": pre.kv_reason,
                "version": pre.version, "value": pre.value, "results": [],
            }))
            .into_response())
        }
        // The wire's refusal (nothing was written) is a 200 with the reason; a database
        // that is down or busy is the ApiError crate::db::error says (503).
        Err(e) => match e.wire_refusal() {
            Some((reason, msg)) => Ok(failure(StatusCode::OK, &txn, reason.as_str(), &msg, None)),
            None => Err(e.into()),
        },
    }
}

/// The JSON body, or the SDK's binary one: its JSON head read as a JSON body, then each
/// framed group one push operation after the head's (docs/http-api.md "Binary bodies").
fn parse(body: &[u8], max_items: usize, max_payload: usize) -> ApiResult<Parsed> {
    if !is_binary(body, TXN_MAGIC) {
        return parse_json_body(body, max_items, max_payload);
    }
    let t = read_transaction(body)?;
    let head: &[u8] = if t.head.is_empty() {
        br#"{"operations":[]}"#
    } else {
        t.head
    };
    let mut p = parse_json_body(head, max_items, max_payload)?;
    // The ready segments name items of the binary groups, which follow the head's.
    let head_items = p.pushes.len();
    let mut items = t.pushes.items.into_iter();
    for n in t.groups {
        let first = p.pushes.len();
        p.pushes.extend(items.by_ref().take(n));
        p.order.push(Op::Push {
            index: p.order.len(),
            first,
            n,
        });
    }
    p.ready = t
        .pushes
        .ready
        .into_iter()
        .map(|r| ReadySegment {
            items: r.items.iter().map(|i| i + head_items).collect(),
            blob: r.blob,
        })
        .collect();
    p.counts = t.pushes.counts;
    check_item_count(p.pushes.len(), max_items)?;
    Ok(p)
}

fn parse_json_body(body: &[u8], max_items: usize, max_payload: usize) -> ApiResult<Parsed> {
    let b: Body<'_> = parse_json(body)?;
    let kv = match b.kv.filter(|k| k.get() != "null") {
        Some(k) => kv_ops::read(k, "kv", true).map_err(|r| r.api_error())?.1,
        None => Vec::new(),
    };
    let timers = match b.timers.filter(|t| t.get() != "null") {
        Some(t) => read_ops(t, "timers", max_payload)?,
        None => Vec::new(),
    };
    let ops: Vec<&RawValue> = b
        .operations
        .and_then(|o| serde_json::from_str(o.get()).ok())
        .ok_or_else(|| ApiError::bad("operations must be an array"))?;
    let required: Vec<String> = match b.required_leases.map(RawValue::get) {
        None | Some("null") => Vec::new(),
        Some(r) => serde_json::from_str(r)
            .map_err(|_| ApiError::bad("requiredLeases must be an array of strings"))?,
    };
    let mut p = Parsed {
        order: Vec::new(),
        pushes: Vec::new(),
        acks: Vec::new(),
        required,
        timers,
        kv,
        ready: Vec::new(),
        counts: false,
    };
    for (i, op) in ops.into_iter().enumerate() {
        parse_op(i, op, &mut p)?;
    }
    check_item_count(p.pushes.len(), max_items)?;
    Ok(p)
}

fn parse_op(i: usize, op: &RawValue, p: &mut Parsed) -> ApiResult<()> {
    let at = format!("operations[{i}]");
    let head: OpHead<'_> = match serde_json::from_str(op.get()) {
        Ok(h) => h,
        // An unknown type is named before the unknown keys that come with it.
        Err(e) => match serde_json::from_str::<OpType<'_>>(op.get()) {
            Ok(OpType {
                kind: Some("push" | "ack"),
            }) => return Err(part_error(e, &at, &format!("{at}: "))),
            Ok(t) => return Err(bad_type(i, t.kind)),
            Err(_) => return Err(bad_type(i, None)),
        },
    };
    match head.kind {
        Some("push") => {
            if let Some(k) = head.ack_key() {
                return Err(ApiError::field(
                    format!("{at}.{k}"),
                    format!("{at}: `{k}` belongs to an ack operation, not to a push"),
                ));
            }
            let items: Vec<&RawValue> = head
                .items
                .and_then(|v| serde_json::from_str(v.get()).ok())
                .ok_or_else(|| ApiError::bad(format!("{at}: items must be an array")))?;
            let first = p.pushes.len();
            for (k, it) in items.into_iter().enumerate() {
                let item = read_push_item(k, it).map_err(|e| e.within(&at))?;
                p.pushes.push(item);
            }
            let n = p.pushes.len() - first;
            p.order.push(Op::Push { index: i, first, n });
        }
        // Unknown statuses keep the /ack wording: `unknown status "x" at index <op>`.
        Some("ack") => {
            let it = read_ack_item(i, op, None, AckAt::Operation)?;
            if it.delay.is_some() {
                return Err(ApiError::field(
                    format!("{at}.delaySeconds"),
                    format!("{at}: delaySeconds is not supported in a transaction"),
                ));
            }
            p.order.push(Op::Ack {
                index: i,
                ack: p.acks.len(),
            });
            p.acks.push(it);
        }
        other => return Err(bad_type(i, other)),
    }
    Ok(())
}

/// An operation type other than push and ack (Queen 2.x's kv, check, guard and timer ops
/// travel in the `kv` / `timers` riders, not in `operations`).
fn bad_type(i: usize, kind: Option<&str>) -> ApiError {
    let got = match kind {
        Some(k) => format!("operation type \"{k}\" is not implemented by this broker"),
        None => "an operation needs a type".to_string(),
    };
    ApiError::field(
        format!("operations[{i}].type"),
        format!("operations[{i}]: {got}: type must be \"push\" or \"ack\""),
    )
}

/// `encryptionEnabled` (crate::engine::sealing): the pushes into queues that encrypt are
/// sealed; one lookup of the pushed queues, made only when the transaction pushes.
async fn seal_pushes(state: &AppState, tenant: Uuid, items: &mut [PushItem]) -> ApiResult<()> {
    if items.is_empty() {
        return Ok(());
    }
    let qs: Vec<&str> = items.iter().map(|i| i.queue.as_str()).collect();
    let ps: Vec<&str> = items.iter().map(|i| i.partition.as_str()).collect();
    let queues: HashSet<String> = encrypting(state, tenant, &qs, &ps)
        .await?
        .into_iter()
        .filter_map(|i| items.get(i).map(|it| it.queue.clone()))
        .collect();
    seal_items(state, items, |it| queues.contains(&it.queue))
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
    .map_err(|e| ApiError::Internal(format!("encoder task failed: {e}")))?
    .map_err(ApiError::from)
}

/// Ack indexes per (partition, group), in order of first appearance.
fn ack_groups(acks: &[AckItem]) -> Vec<Vec<usize>> {
    let mut index: std::collections::HashMap<(Uuid, &str), usize> = Default::default();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (i, it) in acks.iter().enumerate() {
        let gi = *index.entry((it.pid, it.group.as_str())).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[gi].push(i);
    }
    out
}

/// One wire ack op for a group: positional when the registry grants it, else by hash.
async fn ack_op(
    state: &AppState,
    db: &Conn,
    p: &Parsed,
    items: &[&AckItem],
    foreign: bool,
) -> ApiResult<WireAckOp> {
    let first = items[0];
    let mut op = WireAckOp {
        partition_id: first.pid.to_string(),
        group: Some(first.group.clone()),
        ..Default::default()
    };
    if foreign {
        op.acks = Some(hash_acks(items));
        return Ok(op);
    }
    op.worker = worker_for(db, p, items).await?;
    if let Some(w) = op.worker.as_deref() {
        if items.iter().all(|it| it.status == Status::Completed) {
            let set: HashSet<TxnHash> = items.iter().map(|it| it.hash).collect();
            if let Some(end) = state
                .registry
                .take_if_match(first.pid, &first.group, w, &set)
            {
                op.upto_off = Some(end);
                return Ok(op);
            }
        }
        state.registry.evict_if_worker(first.pid, &first.group, w);
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
async fn worker_for(db: &Conn, p: &Parsed, items: &[&AckItem]) -> ApiResult<Option<String>> {
    if let Some(l) = items.iter().find_map(|it| it.lease.clone()) {
        return Ok(Some(l));
    }
    if p.acks.iter().any(|it| it.lease.is_some()) {
        return Ok(db.cursor_worker(items[0].pid, &items[0].group).await?);
    }
    let distinct: HashSet<&String> = p.required.iter().filter(|l| !l.is_empty()).collect();
    Ok(match distinct.len() {
        1 => distinct.into_iter().next().cloned(),
        _ => None,
    })
}

/// In-request duplicates answer with their first item's message id.
fn copy_request_duplicates(items: &mut [PushItem]) {
    for i in 0..items.len() {
        if let Some(f) = items[i].dup_of {
            items[i].message_id = items[f].message_id;
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Done<'a> {
    transaction_id: &'a str,
    success: bool,
    results: Vec<OpResult<'a>>,
}

/// One result: per pushed item, per ack.
#[derive(Serialize)]
#[serde(untagged)]
enum OpResult<'a> {
    #[serde(rename_all = "camelCase")]
    Push {
        index: usize,
        #[serde(rename = "type")]
        kind: &'static str,
        success: bool,
        transaction_id: &'a str,
        message_id: Uuid,
        queue_name: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        duplicate: bool,
    },
    #[serde(rename_all = "camelCase")]
    Ack {
        index: usize,
        #[serde(rename = "type")]
        kind: &'static str,
        success: bool,
        transaction_id: &'a str,
        error: Option<()>,
        dlq: bool,
    },
    /// A kv op's result (queen_log::kv's answer) with `type: "kv"`, `success` (applied
    /// or found) and its `index` its place in `results`.
    Kv(Value),
    /// A timer op's verdict, its `index` its place in `results`.
    Timer {
        index: usize,
        #[serde(rename = "type")]
        kind: &'static str,
        success: bool,
        #[serde(flatten)]
        result: &'a TimerResult,
    },
}

/// A binary body's flag 2: the pushes and acks counted, the riders' results listed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Counted<'a> {
    transaction_id: &'a str,
    success: bool,
    pushed: usize,
    duplicate: usize,
    acked: usize,
    results: Vec<OpResult<'a>>,
}

fn counted<'a>(txn: &'a str, p: &'a Parsed, r: &'a TxnWire) -> Counted<'a> {
    let duplicate = p.pushes.iter().filter(|i| i.dup_of.is_some()).count();
    let kv = r.kv.len();
    let results =
        r.kv.iter()
            .enumerate()
            .map(|(index, k)| OpResult::Kv(kv_result(index, k)))
            .chain(r.timers.iter().enumerate().map(|(i, t)| OpResult::Timer {
                index: kv + i,
                kind: "timer",
                success: t.ok,
                result: t,
            }))
            .collect();
    Counted {
        transaction_id: txn,
        success: true,
        pushed: p.pushes.len() - duplicate,
        duplicate,
        acked: p.acks.len(),
        results,
    }
}

/// A kv rider result in the transaction's flat space: `index` there, `type: "kv"`,
/// `success` whether the op applied (a write) or found its key (a read).
fn kv_result(index: usize, k: &Value) -> Value {
    let mut v = k.clone();
    let success = ["applied", "found"]
        .iter()
        .find_map(|f| k.get(*f).and_then(Value::as_bool))
        .unwrap_or(true);
    v["index"] = json!(index);
    v["type"] = json!("kv");
    v["success"] = json!(success);
    v
}

/// Results in operation order: one per pushed item, one per ack.
fn render<'a>(p: &'a Parsed, r: &'a TxnWire) -> Vec<OpResult<'a>> {
    let dlq_groups: HashSet<(Uuid, &str)> = r
        .acks
        .iter()
        .filter_map(|a| match a {
            Reply::Done(WireAck::Hash(h)) if h.dlq => Some((h.partition_id?, h.group.as_deref()?)),
            _ => None,
        })
        .collect();
    let mut out = Vec::new();
    for op in &p.order {
        match *op {
            Op::Push { index, first, n } => {
                for it in &p.pushes[first..first + n] {
                    out.push(OpResult::Push {
                        index,
                        kind: "push",
                        success: true,
                        transaction_id: &it.txn,
                        message_id: it.message_id,
                        queue_name: &it.queue,
                        duplicate: it.dup_of.is_some(),
                    });
                }
            }
            Op::Ack { index, ack } => {
                let it = &p.acks[ack];
                out.push(OpResult::Ack {
                    index,
                    kind: "ack",
                    success: true,
                    transaction_id: &it.txn,
                    error: None,
                    dlq: dlq_groups.contains(&(it.pid, it.group.as_str())),
                });
            }
        }
    }
    for k in &r.kv {
        out.push(OpResult::Kv(kv_result(out.len(), k)));
    }
    for t in &r.timers {
        out.push(OpResult::Timer {
            index: out.len(),
            kind: "timer",
            success: t.ok,
            result: t,
        });
    }
    out
}
