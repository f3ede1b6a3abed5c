//! DLQ filing (contract §7): snapshot the poison frame into queen.log_dlq and retire it.

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::ack::file_dlq;
use queen_log::segment::decode_segment;
use serde_json::{json, Value};

use crate::ack::not_ok;
use crate::db::{lock_checked, q, required, write_cursor, OrRaise};

/// The row to file; `None` fields are extracted from the covering segment.
pub struct DlqEntry {
    pub message_id: Option<Uuid>,
    pub txn: Option<String>,
    pub payload: Option<Value>,
    pub error: Option<String>,
}

/// Read message id, transactionId and payload of frame `off` from its segment. When the
/// segment was retained away (or cannot be decoded), say so in the error text.
fn extract(client: &SpiClient<'_>, pid: Uuid, off: i64, error: Option<String>) -> DlqEntry {
    let seg = q(
        client,
        "SELECT r_base, r_blob FROM queen.log_segment_at_v1($1, $2)",
        &[pid.into(), off.into()],
    )
    .or_raise()
    .next()
    .map(|r| {
        (
            r.get::<i64>(1).or_raise().unwrap(),
            r.get::<Vec<u8>>(2).or_raise().unwrap(),
        )
    });
    let frame = seg.as_ref().map(|(base, blob)| {
        decode_segment(blob).map(|mut frames| frames.swap_remove((off - base) as usize))
    });
    let with_note = |note: String| {
        Some(match &error {
            Some(e) if !e.is_empty() => format!("{e} ({note})"),
            _ => note,
        })
    };
    match frame {
        Some(Ok(f)) => DlqEntry {
            message_id: Some(Uuid::from_bytes(f.message_id)),
            payload: Some(payload_value(&f)),
            txn: Some(f.transaction_id),
            error,
        },
        Some(Err(e)) => DlqEntry {
            message_id: None,
            txn: None,
            payload: None,
            error: with_note(format!("payload not captured: {e}")),
        },
        None => DlqEntry {
            message_id: None,
            txn: None,
            payload: None,
            error: with_note(format!(
                "payload not captured: offset {off} was retained away"
            )),
        },
    }
}

/// The payload as JSON; a payload that is not JSON text (e.g. encrypted) is kept as a string.
fn payload_value(f: &queen_log::frame::Frame) -> Value {
    match f.payload_json() {
        Ok(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string())),
        Err(_) => Value::String(queen_log::hash::hash_hex(&f.payload)),
    }
}

/// File the DLQ row and retire the frame; shared with the transaction wire.
pub fn dlq_head(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    worker: Option<&str>,
    off: i64,
    entry: DlqEntry,
) -> Value {
    let cur = match lock_checked(client, pid, group, worker) {
        Ok(c) => c,
        Err(e) => return not_ok(e),
    };
    let next = match file_dlq(&cur.state, off) {
        Ok(n) => n,
        Err(e) => return not_ok(e),
    };
    let entry = if entry.message_id.is_none() && entry.txn.is_none() && entry.payload.is_none() {
        extract(client, pid, off, entry.error)
    } else {
        entry
    };
    let id: Uuid = q(
        client,
        "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\", message_id,
                                        transaction_id, payload, error, retry_count)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        &[
            pid.into(),
            group.into(),
            off.into(),
            entry.message_id.into(),
            entry.txn.into(),
            entry.payload.map(JsonB).into(),
            entry.error.into(),
            cur.state.batch_retry_count.into(),
        ],
    )
    .or_raise()
    .first()
    .get_one()
    .or_raise()
    .expect("INSERT RETURNING id");
    write_cursor(client, pid, group, &cur.state, &next);
    json!({"ok": true, "id": id.to_string()})
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_dlq_head_v1(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_worker: Option<&str>,
    p_off: Option<i64>,
    p_message_id: Option<Uuid>,
    p_txn: Option<String>,
    p_payload: Option<JsonB>,
    p_error: Option<String>,
) -> JsonB {
    let pid = required(p_partition_id, "p_partition_id");
    let group = required(p_group, "p_group");
    let off = required(p_off, "p_off");
    let entry = DlqEntry {
        message_id: p_message_id,
        txn: p_txn,
        payload: p_payload.map(|j| j.0),
        error: p_error,
    };
    JsonB(Spi::connect_mut(|c| {
        dlq_head(c, pid, group, p_worker, off, entry)
    }))
}
