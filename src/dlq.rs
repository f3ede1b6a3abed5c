//! DLQ filing (docs/contract.md §7, §14): snapshot the poison frame into queen.log_dlq and retire it.

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::ack::file_dlq;
use queen_log::payload;
use queen_log::segment::decode_segment;
use queen_log::wire::{DlqFiled, Reply};
use serde_json::Value;

use crate::db::{col, jsonb, lock_checked, q, required, write_cursor, OrRaise};

/// The row to file; `None` fields are extracted from the covering segment.
pub struct DlqEntry {
    pub message_id: Option<Uuid>,
    pub txn: Option<String>,
    pub payload: Option<Value>,
    pub error: Option<String>,
}

impl DlqEntry {
    /// Nothing given: everything is read from the frame (native extraction).
    pub fn extracted(error: Option<String>) -> Self {
        DlqEntry {
            message_id: None,
            txn: None,
            payload: None,
            error,
        }
    }

    fn wants_extraction(&self) -> bool {
        self.message_id.is_none() && self.txn.is_none() && self.payload.is_none()
    }
}

/// Read message id, transactionId and payload of frame `off` from its segment. When no
/// segment covers it or it cannot be decoded, say so in the error text.
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
            col::<i64>(&r, 1, "segment base"),
            col::<Vec<u8>>(&r, 2, "segment blob"),
        )
    });
    let frame = seg.as_ref().map(|(base, blob)| {
        decode_segment(blob).and_then(|mut frames| {
            let k = (off - base) as usize;
            if k < frames.len() {
                Ok(frames.swap_remove(k))
            } else {
                Err(queen_log::frame::CodecError::FrameCountMismatch {
                    expected: k + 1,
                    found: frames.len(),
                })
            }
        })
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
            payload: Some(payload::json_value(&f)),
            txn: Some(f.transaction_id),
            error,
        },
        Some(Err(e)) => DlqEntry {
            error: with_note(format!("payload not captured: {e}")),
            ..DlqEntry::extracted(None)
        },
        None => DlqEntry {
            error: with_note(format!(
                "payload not captured: no segment holds offset {off} any more"
            )),
            ..DlqEntry::extracted(None)
        },
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
) -> Reply<DlqFiled> {
    let cur = match lock_checked(client, pid, group, worker) {
        Ok(c) => c,
        Err(e) => return Reply::Refused(e.into()),
    };
    let next = match file_dlq(&cur.state, cur.log, off) {
        Ok(n) => n,
        Err(e) => return Reply::Refused(e.message().into()),
    };
    let entry = if entry.wants_extraction() {
        extract(client, pid, off, entry.error)
    } else {
        entry
    };
    let row = q(
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
    .get_one::<Uuid>()
    .or_raise();
    write_cursor(client, pid, group, &cur.state, &next);
    let id = row.unwrap_or_else(|| crate::db::raise_internal("INSERT RETURNING id gave nothing"));
    Reply::Done(DlqFiled {
        id: uuid::Uuid::from_bytes(*id.as_bytes()),
    })
}

// The SQL signature (compatibility) fixes the argument list.
#[allow(clippy::too_many_arguments)]
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
    jsonb(&Spi::connect_mut(|c| {
        dlq_head(c, pid, group, p_worker, off, entry)
    }))
}
