//! `POST /api/v1/transaction`: pushes and acks in one database transaction through
//! `log_transaction_wire_v1`, all or nothing (broker.md §1).
//!
//! Pushes are encoded here exactly as for `/push`. Acks are grouped by (partitionId,
//! group); a group goes in positional form when this process served its pop and the
//! registry's fast-path conditions hold (the entry is consumed), else in hash form.

use std::collections::{HashMap, HashSet};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use queen_log::hash::{hash_hex, TxnHash};
use queen_log::segment::{encode_segment, segment_hashes};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::routes::ack::{self, owned_partitions, Status};
use crate::routes::auth::Tenant;
use crate::routes::push::{self, check_item_count, frame_of};
use crate::state::AppState;
use crate::util::parse_json;

/// A validated operation, tagged with its index in `operations`.
enum Op {
    Push(usize, Vec<push::Item>),
    Ack(usize, ack::Item),
}

/// A failed transaction: nothing was written.
fn failure(status: StatusCode, txn: &str, reason: &str, error: &str) -> Response {
    let body = json!({"transactionId": txn, "success": false, "reason": reason,
                      "error": error, "results": []});
    (status, Json(body)).into_response()
}

pub async fn transaction(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Response> {
    let txn = Uuid::now_v7().to_string();
    let (ops, required) = match parse(&body, state.config.max_push_items) {
        Ok(p) => p,
        Err(e) => {
            return Ok(failure(
                StatusCode::BAD_REQUEST,
                &txn,
                "bad_request",
                &e.to_string(),
            ))
        }
    };
    let pushes = encode_pushes(&ops).await?;
    let ack_groups = ack_groups(&ops);
    // Tenancy: a foreign partition never reaches the registry or the cursor lookup; the
    // wire itself then refuses it exactly like a nonexistent one (contract §9 step 1).
    let ack_pids = ops.iter().filter_map(|op| match op {
        Op::Ack(_, it) => Some(it.pid),
        Op::Push(..) => None,
    });
    let owned = owned_partitions(&state, tenant, ack_pids).await?;
    let db = state.db().await?;
    let mut acks = Vec::new();
    for g in &ack_groups {
        let pid = ack_item(&ops[g[0]]).pid;
        let foreign = owned.as_ref().is_some_and(|o| !o.contains(&pid));
        acks.push(ack_wire(&state, &db, &ops, g, &required, foreign).await?);
    }
    let wire = json!({"pushes": pushes.wire, "acks": acks, "_tenant": tenant});
    let result = db
        .query_one("SELECT queen.log_transaction_wire_v1($1::jsonb)", &[&wire])
        .await;
    match result {
        Ok(row) => {
            let r: Value = row.get(0);
            for q in &pushes.queues {
                state.wake_queue(tenant, q);
            }
            let results = render(&ops, &pushes.dup_of, &r);
            Ok(
                Json(json!({"transactionId": txn, "success": true, "results": results}))
                    .into_response(),
            )
        }
        Err(e) => {
            let (reason, msg) = classify(&e)?;
            Ok(failure(StatusCode::OK, &txn, reason, &msg))
        }
    }
}

fn parse(body: &[u8], max_items: usize) -> ApiResult<(Vec<Op>, Vec<String>)> {
    let v: Value = parse_json(body)?;
    let ops = v
        .get("operations")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::bad("operations must be an array"))?;
    let required: Vec<String> = match v.get("requiredLeases") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|l| l.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::bad("requiredLeases must be an array of strings"))?,
        Some(_) => return Err(ApiError::bad("requiredLeases must be an array of strings")),
    };
    let ops = ops
        .iter()
        .enumerate()
        .map(|(i, op)| parse_op(i, op))
        .collect::<ApiResult<Vec<_>>>()?;
    let pushed = ops
        .iter()
        .map(|op| match op {
            Op::Push(_, items) => items.len(),
            Op::Ack(..) => 0,
        })
        .sum();
    check_item_count(pushed, max_items)?;
    Ok((ops, required))
}

fn parse_op(i: usize, op: &Value) -> ApiResult<Op> {
    let prefix = |e: ApiError| ApiError::bad(format!("operations[{i}]: {e}"));
    match op.get("type").and_then(Value::as_str) {
        Some("push") => {
            let items = op
                .get("items")
                .and_then(Value::as_array)
                .ok_or_else(|| ApiError::bad(format!("operations[{i}]: items must be an array")))?;
            let items = items
                .iter()
                .enumerate()
                .map(|(k, it)| push::parse_item(k, it))
                .collect::<ApiResult<Vec<_>>>()
                .map_err(prefix)?;
            Ok(Op::Push(i, items))
        }
        // Unknown statuses keep the /ack wording: `unknown status "x" at index <op>`.
        Some("ack") => {
            let it = ack::item(i, op.clone(), None)?;
            if it.delay.is_some() {
                return Err(ApiError::bad(format!(
                    "operations[{i}]: delaySeconds is not supported in a transaction"
                )));
            }
            Ok(Op::Ack(i, it))
        }
        _ => Err(ApiError::bad(format!(
            "operations[{i}]: type must be \"push\" or \"ack\""
        ))),
    }
}

/// The encoded pushes, plus what rendering needs.
struct Pushes {
    wire: Vec<Value>,
    /// (op, item) → the (op, item) of the first with the same (queue, partition, txn).
    dup_of: HashMap<(usize, usize), (usize, usize)>,
    queues: HashSet<String>,
}

/// One segment per (queue, partition); a transactionId repeated inside the request for
/// the same partition is a duplicate of its first occurrence and is not pushed.
async fn encode_pushes(ops: &[Op]) -> ApiResult<Pushes> {
    let mut first: HashMap<(&str, &str, &str), (usize, usize)> = HashMap::new();
    let mut dup_of = HashMap::new();
    let mut segs: Vec<((String, String), Vec<queen_log::frame::Frame>)> = Vec::new();
    let mut seg_index: HashMap<(&str, &str), usize> = HashMap::new();
    for op in ops {
        let Op::Push(oi, items) = op else { continue };
        for (k, it) in items.iter().enumerate() {
            let key = (it.queue.as_str(), it.partition.as_str(), it.txn.as_str());
            if let Some(&f) = first.get(&key) {
                dup_of.insert((*oi, k), f);
                continue;
            }
            first.insert(key, (*oi, k));
            let s = *seg_index
                .entry((it.queue.as_str(), it.partition.as_str()))
                .or_insert_with(|| {
                    segs.push(((it.queue.clone(), it.partition.clone()), Vec::new()));
                    segs.len() - 1
                });
            segs[s].1.push(frame_of(it));
        }
    }
    let queues = segs.iter().map(|s| s.0 .0.clone()).collect();
    let wire = tokio::task::spawn_blocking(move || {
        segs.into_iter()
            .map(|((queue, partition), frames)| {
                let blob = encode_segment(&frames)?;
                Ok(json!({
                    "queue": queue, "partition": partition, "count": frames.len(),
                    "hashesHex": hash_hex(&segment_hashes(&frames)),
                    "blobB64": base64::engine::general_purpose::STANDARD.encode(blob),
                }))
            })
            .collect::<Result<Vec<_>, queen_log::frame::CodecError>>()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("encoder task failed: {e}")))??;
    Ok(Pushes {
        wire,
        dup_of,
        queues,
    })
}

/// Ack op indexes (into `ops`) per (partition, group), in order of first appearance.
fn ack_groups(ops: &[Op]) -> Vec<Vec<usize>> {
    let mut index: HashMap<(Uuid, &str), usize> = HashMap::new();
    let mut out: Vec<Vec<usize>> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let Op::Ack(_, it) = op else { continue };
        let gi = *index.entry((it.pid, it.group.as_str())).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[gi].push(n);
    }
    out
}

fn ack_item(op: &Op) -> &ack::Item {
    match op {
        Op::Ack(_, it) => it,
        Op::Push(..) => unreachable!("ack groups hold ack ops only"),
    }
}

/// One wire ack op for a group: positional when the registry grants it, else by hash.
async fn ack_wire(
    state: &AppState,
    db: &deadpool_postgres::Object,
    ops: &[Op],
    g: &[usize],
    required: &[String],
    foreign: bool,
) -> ApiResult<Value> {
    let items: Vec<&ack::Item> = g.iter().map(|&n| ack_item(&ops[n])).collect();
    let first = items[0];
    if foreign {
        return Ok(
            json!({"partitionId": first.pid, "group": first.group, "worker": null,
            "acks": hash_acks(&items)}),
        );
    }
    let worker = worker_for(db, ops, &items, required).await?;
    let mut op = json!({"partitionId": first.pid, "group": first.group, "worker": worker});
    if let Some(w) = worker.as_deref() {
        if items.iter().all(|it| it.status == Status::Completed) {
            let set: HashSet<TxnHash> = items.iter().map(|it| it.hash).collect();
            if let Some(end) = state
                .registry
                .take_if_match(first.pid, &first.group, w, &set)
            {
                op["uptoOff"] = json!(end);
                return Ok(op);
            }
        }
        state.registry.evict_if_worker(first.pid, &first.group, w);
    }
    op["acks"] = hash_acks(&items);
    Ok(op)
}

/// The hash form of a group's acks.
fn hash_acks(items: &[&ack::Item]) -> Value {
    items
        .iter()
        .map(|it| json!({"h": hash_hex(&it.hash), "status": it.status.sql(), "error": it.error}))
        .collect()
}

/// The group's worker: its own leaseId; else, when any leaseId was sent, the partition's
/// current worker; else the single unambiguous requiredLeases entry; else lease-less.
async fn worker_for(
    db: &deadpool_postgres::Object,
    ops: &[Op],
    items: &[&ack::Item],
    required: &[String],
) -> ApiResult<Option<String>> {
    if let Some(l) = items.iter().find_map(|it| it.lease.clone()) {
        return Ok(Some(l));
    }
    let any_lease = ops
        .iter()
        .any(|op| matches!(op, Op::Ack(_, it) if it.lease.is_some()));
    if any_lease {
        let row = db
            .query_opt(
                "SELECT queen.cursor_worker_v1($1, $2)",
                &[&items[0].pid, &items[0].group],
            )
            .await?;
        return Ok(row.and_then(|r| r.get::<_, Option<String>>(0)));
    }
    let distinct: HashSet<&String> = required.iter().filter(|l| !l.is_empty()).collect();
    Ok(match distinct.len() {
        1 => distinct.into_iter().next().cloned(),
        _ => None,
    })
}

/// Results in operation order: one per pushed item, one per ack.
fn render(ops: &[Op], dup_of: &HashMap<(usize, usize), (usize, usize)>, r: &Value) -> Vec<Value> {
    let dlq_groups: HashSet<(String, String)> = r
        .get("acks")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|x| x.get("dlq").and_then(Value::as_bool) == Some(true))
                .filter_map(|x| {
                    Some((
                        x.get("partitionId")?.as_str()?.to_string(),
                        x.get("group")?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let push_item = |oi: usize, k: usize| -> &push::Item {
        match &ops[oi] {
            Op::Push(_, items) => &items[k],
            Op::Ack(..) => unreachable!("push index"),
        }
    };
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Push(oi, items) => {
                for (k, it) in items.iter().enumerate() {
                    let dup = dup_of.get(&(*oi, k));
                    let id = dup.map_or(it.message_id, |&(fo, fk)| push_item(fo, fk).message_id);
                    let mut v = json!({"index": oi, "type": "push", "success": true,
                        "transactionId": it.txn, "messageId": id, "queueName": it.queue});
                    if dup.is_some() {
                        v["duplicate"] = json!(true);
                    }
                    out.push(v);
                }
            }
            Op::Ack(oi, it) => {
                let dlq = dlq_groups.contains(&(it.pid.to_string(), it.group.clone()));
                out.push(json!({"index": oi, "type": "ack", "success": true,
                    "transactionId": it.txn, "error": null, "dlq": dlq}));
            }
        }
    }
    out
}

/// Why the wire refused: (reason, message). An unreachable database stays a 503.
fn classify(e: &tokio_postgres::Error) -> ApiResult<(&'static str, String)> {
    let Some(db) = e.as_db_error() else {
        return Err(ApiError::Unavailable(format!("database unreachable: {e}")));
    };
    let code = db.code().code();
    let msg = match db.detail() {
        Some(d) => format!("{} ({d})", db.message()),
        None => db.message().to_string(),
    };
    let reason = if code == "23505" || db.message().starts_with("QDUP") {
        "duplicate"
    } else if db.message().starts_with("QTXN ack") {
        "ack_rejected"
    } else if code.starts_with("22") || db.message().starts_with("QTXN resolved") {
        "bad_request"
    } else if code.starts_with("08") || code == "57P01" || code == "57P03" {
        return Err(ApiError::Unavailable(format!(
            "database unavailable: {msg}"
        )));
    } else {
        "db_error"
    };
    Ok((reason, msg))
}
