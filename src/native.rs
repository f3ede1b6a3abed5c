//! Native helpers (docs/contract.md §11): what the reference engine cannot do in SQL. With these,
//! psql alone can run a queue: push JSON, pop decoded messages, ack by transactionId.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::JsonB;
use queen_log::conventions::QUEUE_MODE;
use queen_log::frame::Frame;
use queen_log::hash::{hash_hex, txn_hash};
use queen_log::payload;
use queen_log::segment::{decode_segment, encode_segment, segment_hashes};
use queen_log::served::{decode_served_here, ServedSlice};
use queen_log::wire::PushVerdict;
use serde::Serialize;
use serde_json::Value;

use crate::ack::{ack_by_hash, HashAckCall};
use crate::db::{bad_param, default_tenant, jsonb, required};
use crate::pop::{LeaseRule, PopRequest, PopRow, Target};
use crate::push::{push_one, SegmentIn};

#[pg_extern(immutable, parallel_safe)]
fn xxh3_128(p_text: &str) -> Vec<u8> {
    txn_hash(p_text).to_vec()
}

#[pg_extern(immutable, parallel_safe)]
fn xxh3_128_hex(p_text: &str) -> String {
    hash_hex(&txn_hash(p_text))
}

/// A frame's payload as a `jsonb` result: its JSON text by queen_log::payload's rule,
/// parsed once, by PostgreSQL. (As a serde value it was parsed, printed and parsed again:
/// a tenth of a batch-10 pop's instructions, docs/benchmarks.md "One message at a time".)
struct PayloadJsonb(String);

impl IntoDatum for PayloadJsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        // Valid JSON text never holds a NUL byte (control characters are escaped).
        let text = std::ffi::CString::new(self.0).expect("JSON text holds no NUL byte");
        // SAFETY: jsonb_in takes one cstring argument, which lives until it returns.
        unsafe {
            pgrx::fcinfo::direct_function_call_as_datum(
                pg_sys::jsonb_in,
                &[Some(text.as_ptr().into())],
            )
        }
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

impl_sql_translatable!(PayloadJsonb, "jsonb");

// SAFETY: the datum is returned to the function's caller, as BoxRet requires.
unsafe impl pgrx::callconv::BoxRet for PayloadJsonb {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

fn payload_jsonb(f: &Frame) -> PayloadJsonb {
    PayloadJsonb(payload::json_text(f).into_owned())
}

fn decode_or_raise(blob: &[u8]) -> Vec<Frame> {
    decode_segment(blob).unwrap_or_else(|e| bad_param(e.to_string()))
}

// The set-returning type names its columns, which pgrx needs spelled inline (its macro
// cannot see through a type alias).
#[allow(clippy::type_complexity)]
#[pg_extern(immutable, parallel_safe)]
fn decode_segment_v1(
    p_blob: &[u8],
) -> TableIterator<
    'static,
    (
        name!(frame_index, i32),
        name!(message_id, Uuid),
        name!(transaction_id, String),
        name!(payload, PayloadJsonb),
        name!(producer_sub, Option<String>),
        name!(trace_id, Option<Uuid>),
    ),
> {
    let rows: Vec<_> = decode_or_raise(p_blob)
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let payload = payload_jsonb(&f);
            (
                i as i32,
                Uuid::from_bytes(f.message_id),
                f.transaction_id,
                payload,
                f.producer_sub,
                f.trace_id.map(Uuid::from_bytes),
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// Frames for JSON payloads; transactionIds default to the minted uuidv7 message id.
fn frames_for(payloads: &[Value], txn_ids: Option<&[Option<String>]>) -> Vec<Frame> {
    let mut seen = std::collections::HashSet::new();
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let id = uuid::Uuid::now_v7();
            let txn = txn_ids
                .and_then(|t| t[i].clone())
                .unwrap_or_else(|| id.to_string());
            if !seen.insert(txn.clone()) {
                bad_param(format!("transactionId \"{txn}\" appears twice in one push"));
            }
            Frame {
                message_id: *id.as_bytes(),
                trace_id: None,
                transaction_id: txn,
                producer_sub: None,
                encrypted: false,
                payload: if p.is_null() {
                    Vec::new()
                } else {
                    p.to_string().into_bytes()
                },
            }
        })
        .collect()
}

/// Plain-SQL push of a JSON array of payloads, encoded natively into one segment.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn push(
    p_queue: Option<&str>,
    p_payloads: Option<JsonB>,
    p_transaction_ids: default!(Option<Vec<Option<String>>>, "NULL"),
    p_partition: default!(Option<&str>, "'Default'"),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let queue = required(p_queue, "p_queue");
    let txn_ids = p_transaction_ids.as_deref();
    let payloads = payload_list(required(p_payloads, "p_payloads").0, txn_ids);
    let frames = frames_for(&payloads, txn_ids);
    let partition = required(p_partition, "p_partition");
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&push_frames(queue, partition, tenant, &frames))
}

/// `p_payloads` must be a non-empty JSON array, as long as `p_transaction_ids` if given.
fn payload_list(payloads: Value, txn_ids: Option<&[Option<String>]>) -> Vec<Value> {
    let Value::Array(payloads) = payloads else {
        bad_param("p_payloads must be a JSON array of payloads");
    };
    if payloads.is_empty() {
        bad_param("p_payloads must not be empty");
    }
    if let Some(t) = txn_ids.filter(|t| t.len() != payloads.len()) {
        bad_param(format!(
            "{} payloads but {} transaction ids",
            payloads.len(),
            t.len()
        ));
    }
    payloads
}

/// Encode the frames into one segment and push it; report what each message became.
fn push_frames<'f>(
    queue: &str,
    partition: &str,
    tenant: Uuid,
    frames: &'f [Frame],
) -> NativePush<'f> {
    let blob = encode_segment(frames).unwrap_or_else(|e| bad_param(e.to_string()));
    let hashes = segment_hashes(frames);
    let seg = SegmentIn {
        queue,
        partition,
        msg_count: frames.len() as i32,
        hashes: &hashes,
        verified: -1,
        verified_for: None,
        blob: &blob,
        tenant,
    };
    let verdict = Spi::connect_mut(|c| push_one(c, &seg, None, None));
    let base = match &verdict {
        PushVerdict::Queued { base_offset, .. } => Some(*base_offset),
        PushVerdict::Duplicate { .. } => None,
    };
    let messages = frames
        .iter()
        .enumerate()
        .map(|(i, f)| NativeMessage {
            message_id: uuid::Uuid::from_bytes(f.message_id),
            transaction_id: &f.transaction_id,
            offset: base.map(|b| b + i as i64),
        })
        .collect();
    NativePush { verdict, messages }
}

/// `queen.push`'s result: the push verdict plus what each message became.
#[derive(Serialize)]
struct NativePush<'a> {
    #[serde(flatten)]
    verdict: PushVerdict,
    messages: Vec<NativeMessage<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NativeMessage<'a> {
    message_id: uuid::Uuid,
    transaction_id: &'a str,
    offset: Option<i64>,
}

/// One decoded message of `queen.pop`: its SQL columns.
type Decoded = (
    i64,
    Uuid,
    String,
    PayloadJsonb,
    TimestampWithTimeZone,
    Uuid,
    String,
);

/// The messages of a pop's rows, by the one decode loop (`queen_log::served`).
fn decoded(rows: &[PopRow], lease: &str) -> Vec<Decoded> {
    decode_served_here(
        rows,
        |r| {
            ServedSlice::of(
                *r.partition_id.as_bytes(),
                r.base,
                r.start_idx,
                r.take,
                r.msg_count,
                &r.blob,
            )
        },
        |r, offset, f| {
            (
                offset,
                Uuid::from_bytes(f.message_id),
                f.transaction_id.clone(),
                payload_jsonb(f),
                r.created_at,
                r.partition_id,
                lease.to_string(),
            )
        },
    )
    .unwrap_or_else(|e| bad_param(e.to_string()))
}

/// Plain-SQL leasing pop returning decoded messages. No partition = queue-level pop of
/// one ready partition; NULL lease = the queue's lease_time.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn pop(
    p_queue: Option<&str>,
    p_partition: default!(Option<&str>, "NULL"),
    p_group: default!(Option<&str>, "'__QUEUE_MODE__'"),
    p_batch: default!(Option<i32>, 1),
    p_lease_seconds: default!(Option<i32>, "NULL"),
    p_auto_ack: default!(Option<bool>, false),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> TableIterator<
    'static,
    (
        name!(r_offset, i64),
        name!(r_message_id, Uuid),
        name!(r_transaction_id, String),
        name!(r_payload, PayloadJsonb),
        name!(r_created_at, TimestampWithTimeZone),
        name!(r_partition_id, Uuid),
        name!(r_lease_id, String),
    ),
> {
    let queue = required(p_queue, "p_queue");
    let lease_id = if p_auto_ack == Some(true) {
        String::new()
    } else {
        uuid::Uuid::new_v4().to_string()
    };
    let target = match p_partition {
        Some(partition) => Target::Partition { queue, partition },
        None => Target::Queue {
            queue,
            max_partitions: 1,
            hints: &[],
        },
    };
    let rows = crate::pop::pop(&PopRequest {
        tenant: p_tenant,
        target,
        group: p_group,
        budget: p_batch,
        lease_seconds: p_lease_seconds,
        lease_rule: LeaseRule::QueueWhenNull,
        worker: Some(&lease_id),
        auto_ack: p_auto_ack,
        sub_mode: None,
        sub_from: None,
        conflate: None,
    });
    TableIterator::new(decoded(&rows, &lease_id))
}

/// Plain-SQL ack by transactionId: hashes natively, then runs the authority. A dlq
/// verdict is filed in this call (`dlqId`), its error text from `p_errors` (per element,
/// by queen_log::dlq's rule), as `log_ack_by_hash_v2` does.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn ack(
    p_partition_id: Option<Uuid>,
    p_lease_id: Option<&str>,
    p_transaction_ids: Option<Vec<Option<String>>>,
    p_statuses: default!(Option<Vec<Option<String>>>, "NULL"),
    p_group: default!(Option<&str>, "'__QUEUE_MODE__'"),
    p_errors: default!(Option<Vec<Option<String>>>, "NULL"),
) -> JsonB {
    let pid = required(p_partition_id, "p_partition_id");
    let txns = required(p_transaction_ids, "p_transaction_ids");
    let hashes: Vec<Option<Vec<u8>>> = txns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let t = t.as_deref().unwrap_or_else(|| {
                bad_param(format!("p_transaction_ids[{}] must not be NULL", i + 1))
            });
            Some(txn_hash(t).to_vec())
        })
        .collect();
    let (hashes, statuses) = crate::ack::parse_ack_input(&hashes, p_statuses.as_deref());
    let group = p_group.unwrap_or(QUEUE_MODE);
    let errors = crate::ack::checked_errors(p_errors, hashes.len());
    let call = HashAckCall {
        pid,
        group,
        worker: p_lease_id,
        hashes: &hashes,
        statuses: &statuses,
        delay_s: 0,
        dlq_errors: Some(&errors),
    };
    jsonb(&Spi::connect_mut(|c| ack_by_hash(c, &call)))
}
