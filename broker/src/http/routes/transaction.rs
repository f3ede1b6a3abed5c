//! `POST /api/v1/transaction`: pushes and acks in one database transaction through
//! `log_transaction_wire_v1`, all or nothing (docs/broker-contract.md §1). This route
//! reads the body and renders the verdict; crate::engine::transaction composes and runs
//! it (sealing, encoding, the acks' fast-path decision, the write gate).
//!
//! The `kv` rider (crate::http::kv_ops) and the `timers` rider (crate::http::timer_ops)
//! are read here; their results follow the operations', the kv rider's first.
//! The body may be the SDK's binary one (`QTB1`, crate::http::binary_body): a JSON head
//! and the pushes as framed groups, each answered as one push operation after the head's.

use std::collections::HashSet;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::timers::TimerResult;
use queen_log::wire::{Reply, TxnWire, WireAck};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::engine::items::{stamp_subject, ReadySegment};
use crate::engine::transaction::{run, Transaction, Verdict};
use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Subject, Tenant};
use crate::http::binary_body::{is_binary, read_transaction, TXN_MAGIC};
use crate::http::input::{parse_json, part_error};
use crate::http::items::{check_item_count, read_ack_item, read_push_item, AckAt};
use crate::http::kv_ops;
use crate::http::timer_ops::read_ops;
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

/// The request, read: the transaction, and for the answer the operation each of its
/// push items and acks came from.
struct Parsed {
    /// Operation index per entry, in operation order.
    order: Vec<Op>,
    t: Transaction,
    /// A binary body's flag 2: pushes and acks are counted, not listed.
    counts: bool,
}

/// An operation's entries in the transaction: push items `pushes[first..first + n]`, or
/// ack `acks[i]`.
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
    stamp_subject(&mut p.t.pushes, subject.0.as_ref());
    if subject.0.is_some() {
        p.t.ready.clear();
    }
    match run(&state.engine(), tenant, &mut p.t).await? {
        Verdict::Committed(r) => {
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
        Verdict::KvPrecondition(pre) => {
            let flat = p.t.pushes.len() + p.t.acks.len();
            Ok(Json(json!({
                "transactionId": txn, "success": false, "reason": "kv_precondition",
                "error": format!("kv precondition lost at kv[{}] ({}): nothing was committed",
                                 pre.failed_index, pre.kv_reason),
                "failedIndex": flat + pre.failed_index, "kvReason": pre.kv_reason,
                "version": pre.version, "value": pre.value, "results": [],
            }))
            .into_response())
        }
        // The wire's refusal (nothing was written) is a 200 with the reason.
        Verdict::Refused(reason, msg) => {
            Ok(failure(StatusCode::OK, &txn, reason.as_str(), &msg, None))
        }
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
    let head_items = p.t.pushes.len();
    let mut items = t.pushes.items.into_iter();
    for n in t.groups {
        let first = p.t.pushes.len();
        p.t.pushes.extend(items.by_ref().take(n));
        p.order.push(Op::Push {
            index: p.order.len(),
            first,
            n,
        });
    }
    p.t.ready = t
        .pushes
        .ready
        .into_iter()
        .map(|r| ReadySegment {
            items: r.items.iter().map(|i| i + head_items).collect(),
            blob: r.blob,
        })
        .collect();
    p.counts = t.pushes.counts;
    check_item_count(p.t.pushes.len(), max_items)?;
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
        t: Transaction {
            required,
            timers,
            kv,
            ..Transaction::default()
        },
        counts: false,
    };
    for (i, op) in ops.into_iter().enumerate() {
        parse_op(i, op, &mut p)?;
    }
    check_item_count(p.t.pushes.len(), max_items)?;
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
            let first = p.t.pushes.len();
            for (k, it) in items.into_iter().enumerate() {
                let item = read_push_item(k, it).map_err(|e| e.within(&at))?;
                p.t.pushes.push(item);
            }
            let n = p.t.pushes.len() - first;
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
                ack: p.t.acks.len(),
            });
            p.t.acks.push(it);
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
    let duplicate = p.t.pushes.iter().filter(|i| i.dup_of.is_some()).count();
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
        pushed: p.t.pushes.len() - duplicate,
        duplicate,
        acked: p.t.acks.len(),
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
                for it in &p.t.pushes[first..first + n] {
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
                let it = &p.t.acks[ack];
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
