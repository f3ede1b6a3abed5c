//! The transaction wire (contract §9): pushes and acks in one transaction, all or nothing.
//! Any failure raises, so PostgreSQL rolls back everything this call wrote.

use base64::Engine;
use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::ack::Status;
use queen_log::hash::{parse_hash_hex, TxnHash};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::ack::{ack_by_hash_detail, ack_by_name};
use crate::db::{
    bad_param, default_tenant, parse_uuid, q, raise, raise_detail, raise_q, required, OrRaise,
    QUEUE_MODE,
};
use crate::dlq::{dlq_head, DlqEntry};
use crate::push::{push_many, SegmentIn};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    #[serde(default)]
    pushes: Vec<PushOp>,
    #[serde(default)]
    acks: Vec<AckOp>,
    #[serde(rename = "_tenant")]
    tenant: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PushOp {
    queue: String,
    partition: String,
    count: i32,
    hashes_hex: String,
    blob_b64: String,
    verified: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AckOp {
    partition_id: String,
    group: Option<String>,
    worker: Option<String>,
    upto_off: Option<i64>,
    ok: Option<bool>,
    #[allow(dead_code)] // accepted for compatibility, never trusted for counting
    count: Option<i64>,
    acks: Option<Vec<HashAck>>,
}

#[derive(Deserialize)]
struct HashAck {
    h: String,
    status: Option<String>,
    ok: Option<bool>,
    error: Option<String>,
}

/// A push op decoded into bytes.
struct PushBytes {
    hashes: Vec<u8>,
    blob: Vec<u8>,
}

fn decode_push(i: usize, p: &PushOp) -> PushBytes {
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

impl AckOp {
    fn group(&self) -> &str {
        self.group
            .as_deref()
            .filter(|g| !g.is_empty())
            .unwrap_or(QUEUE_MODE)
    }
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
fn run_pushes(client: &mut SpiClient<'_>, tenant: Uuid, pushes: &[PushOp]) -> Vec<Value> {
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
            blob: &b.blob,
            tenant,
        })
        .collect();
    let results = push_many(client, &segs);
    for (p, r) in pushes.iter().zip(&results) {
        if r["status"] == "duplicate" {
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
fn run_hash_ack(client: &mut SpiClient<'_>, pid: Uuid, op: &AckOp, elems: &[HashAck]) -> Value {
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
    let (mut r, head) = ack_by_hash_detail(
        client,
        pid,
        op.group(),
        op.worker.as_deref(),
        &hashes,
        &statuses,
    );
    fail_unless_ok(pid, op, &r);
    if let Some(unresolved) = r["unresolvedHashes"].as_array().filter(|u| !u.is_empty()) {
        raise_detail(
            PgSqlErrorCode::ERRCODE_RAISE_EXCEPTION,
            "QTXN ack references unknown transactionId; transaction rolled back",
            Value::Array(unresolved.clone()).to_string(),
        );
    }
    if r["dlq"] == true {
        let error = dlq_error(elems, &statuses, head);
        let off = r["off"].as_i64().expect("dlq result has off");
        let filed = dlq_head(
            client,
            pid,
            op.group(),
            op.worker.as_deref(),
            off,
            DlqEntry {
                message_id: None,
                txn: None,
                payload: None,
                error: Some(error),
            },
        );
        fail_unless_ok(pid, op, &filed);
        r["dlqId"] = filed["id"].clone();
        r["leaseReleased"] = json!(true);
    }
    r
}

/// The DLQ row's error: the head element's error, else the first nack's, else the default.
fn dlq_error(elems: &[HashAck], statuses: &[Status], head: Option<usize>) -> String {
    head.and_then(|i| elems[i].error.clone())
        .or_else(|| {
            elems
                .iter()
                .zip(statuses)
                .find(|(e, s)| s.is_signal() && e.error.is_some())
                .and_then(|(e, _)| e.error.clone())
        })
        .unwrap_or_else(|| "Retries exhausted".to_string())
}

fn fail_unless_ok(pid: Uuid, op: &AckOp, r: &Value) {
    if r["ok"] != true {
        raise_q(format!(
            "QTXN ack failed for partition {pid} group \"{}\": {}; transaction rolled back",
            op.group(),
            r["error"].as_str().unwrap_or("unknown error")
        ));
    }
}

/// A positional ack through log_ack_v1 (by names); NULL uptoOff releases only.
fn run_positional_ack(client: &mut SpiClient<'_>, tenant: Uuid, pid: Uuid, op: &AckOp) -> Value {
    let names = q(client, "SELECT q.name::text, p.name FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE p.id = $1", &[pid.into()])
        .or_raise()
        .next()
        .map(|r| (r.get::<String>(1).or_raise().unwrap(), r.get::<String>(2).or_raise().unwrap()));
    let Some((queue, partition)) = names else {
        raise_q(format!("QTXN ack references unknown partition {pid}"));
    };
    let ok = op.ok.unwrap_or(true);
    let r = ack_by_name(
        client,
        tenant,
        &queue,
        &partition,
        op.group(),
        op.worker.as_deref(),
        op.upto_off,
        ok,
    );
    fail_unless_ok(pid, op, &r);
    r
}

fn wire(client: &mut SpiClient<'_>, w: Wire) -> Value {
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
    let pushes = run_pushes(client, tenant, &w.pushes);
    // Global lock order: (partition_id, group bytewise), ties in input order.
    let mut order: Vec<usize> = (0..w.acks.len()).collect();
    order.sort_by(|&a, &b| {
        (pids[a].as_bytes(), w.acks[a].group().as_bytes())
            .cmp(&(pids[b].as_bytes(), w.acks[b].group().as_bytes()))
    });
    let acks: Vec<Value> = order
        .into_iter()
        .map(|i| {
            let op = &w.acks[i];
            let mut r = match &op.acks {
                Some(elems) => run_hash_ack(client, pids[i], op, elems),
                None => run_positional_ack(client, tenant, pids[i], op),
            };
            r["partitionId"] = json!(pids[i].to_string());
            r["group"] = json!(op.group());
            r
        })
        .collect();
    json!({"ok": true, "pushes": pushes, "acks": acks})
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_transaction_wire_v1(p: Option<JsonB>) -> JsonB {
    let w: Wire = serde_json::from_value(required(p, "p").0)
        .unwrap_or_else(|e| bad_param(format!("transaction wire: {e}")));
    JsonB(Spi::connect_mut(|c| wire(c, w)))
}
