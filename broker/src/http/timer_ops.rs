//! Reading Queen 2.x's timer ops (`POST /api/v1/timers`, the transaction's `timers`
//! rider) into the extension's [`TimerOp`]: the payload decoded from base64 (and zstd
//! with `payloadZstd`) and checked to be one JSON document (crate::engine::items seals
//! it when its queue encrypts); the fields the server owns are refused naming them, as
//! is any other key (docs/decisions.md, "Timers").

use base64::Engine;
use queen_log::timers::{check_ops, OpKind, TimerOp};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::http::input::part_error;

/// What a client may not say of a timer: who produced it, its tenant and message id,
/// its absolute instant (only the relative `delayMs` travels), its delivery state. The
/// SDK refuses them too; a client that bypasses it is refused here, never ignored.
const SERVER_OWNED: [&str; 15] = [
    "producerSub",
    "producer_sub",
    "messageId",
    "message_id",
    "tenant",
    "tenantId",
    "tenant_id",
    "deliverAt",
    "deliver_at",
    "delaySeconds",
    "delay_seconds",
    "attempts",
    "claimToken",
    "claim_token",
    "claimedUntil",
];

/// One op as the SDK sends it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SdkOp {
    op: OpKind,
    queue: String,
    timer_key: String,
    payload: Option<String>,
    delay_ms: Option<i64>,
    txn: Option<String>,
    partition: Option<String>,
    #[serde(default)]
    payload_zstd: bool,
}

/// Reads the ops at `at` (`operations` or `timers`), checks them as the extension will,
/// and decodes their payloads; `max_payload` bounds a zstd payload's decoded size.
pub fn read_ops(v: &RawValue, at: &str, max_payload: usize) -> ApiResult<Vec<TimerOp>> {
    let raw: Vec<Map<String, Value>> = serde_json::from_str(v.get())
        .map_err(|e| ApiError::bad(format!("{at} must be an array of timer ops: {e}")))?;
    let ops = raw
        .into_iter()
        .enumerate()
        .map(|(i, m)| read_op(m, &format!("{at}[{i}]"), max_payload))
        .collect::<ApiResult<Vec<_>>>()?;
    check_ops(&ops).map_err(|e| ApiError::bad(e.replacen("operations", at, 1)))?;
    Ok(ops)
}

fn read_op(m: Map<String, Value>, at: &str, max_payload: usize) -> ApiResult<TimerOp> {
    if let Some(k) = m
        .keys()
        .find(|k| SERVER_OWNED.contains(&k.as_str()) || k.starts_with('_'))
    {
        return Err(ApiError::field(
            format!("{at}.{k}"),
            format!(
                "{at}.{k} is owned by the server and cannot be supplied (the tenant and \
                 producer come from the token, the message id is minted here, and only \
                 the relative delayMs travels); nothing was changed"
            ),
        ));
    }
    let op: SdkOp = serde_json::from_value(Value::Object(m))
        .map_err(|e| part_error(e, at, &format!("{at}: ")))?;
    let payload = match (&op.payload, op.op) {
        (Some(b64), OpKind::Schedule | OpKind::Reschedule) => Some(
            decode_payload(b64, op.payload_zstd, max_payload).map_err(|e| {
                ApiError::field(format!("{at}.payload"), format!("{at}.payload: {e}"))
            })?,
        ),
        (Some(_), OpKind::Cancel) => {
            return Err(ApiError::field(
                format!("{at}.payload"),
                format!("{at}: a cancel carries no payload"),
            ))
        }
        (None, _) => None,
    };
    Ok(TimerOp {
        op: op.op,
        queue: op.queue,
        timer_key: op.timer_key,
        partition: op.partition,
        txn: op.txn,
        payload,
        encrypted: false,
        delay_ms: op.delay_ms,
    })
}

/// base64 → bytes (→ zstd-decoded) → one JSON document, kept byte for byte.
fn decode_payload(b64: &str, zstd: bool, max: usize) -> Result<Box<RawValue>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("not base64: {e}"))?;
    let bytes = if zstd {
        zstd::bulk::decompress(&bytes, max)
            .map_err(|e| format!("not a zstd frame of at most {max} bytes: {e}"))?
    } else {
        bytes
    };
    // The push's rule (queen_log::payload::check_write): a timer delivers what it holds.
    queen_log::payload::check_write(&bytes).map_err(|e| e.to_string())?;
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    RawValue::from_string(text).map_err(|e| format!("not one JSON document: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(json: &str) -> ApiResult<Vec<TimerOp>> {
        let v: Box<RawValue> = serde_json::from_str(json).unwrap();
        read_ops(&v, "operations", 1 << 20)
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_payload_is_decoded_and_kept_byte_for_byte() {
        let ops = read(&format!(
            r#"[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{}","delayMs":5,"txn":"t"}}]"#,
            b64(r#"{"b": 1, "a": [2]}"#)
        ))
        .unwrap();
        assert_eq!(
            ops[0].payload.as_ref().unwrap().get(),
            r#"{"b": 1, "a": [2]}"#
        );
        assert_eq!(
            (ops[0].delay_ms, ops[0].txn.as_deref()),
            (Some(5), Some("t"))
        );
    }

    #[test]
    fn a_zstd_payload_is_decompressed() {
        let z = zstd::bulk::compress(br#"{"z":true}"#, 3).unwrap();
        let enc = base64::engine::general_purpose::STANDARD.encode(z);
        let ops = read(&format!(
            r#"[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{enc}","delayMs":0,"payloadZstd":true}}]"#
        ))
        .unwrap();
        assert_eq!(ops[0].payload.as_ref().unwrap().get(), r#"{"z":true}"#);
    }

    #[test]
    fn a_payload_that_is_not_json_is_refused_naming_it() {
        let e = read(&format!(
            r#"[{{"op":"schedule","queue":"q","timerKey":"k","payload":"{}","delayMs":0}}]"#,
            b64("not json")
        ))
        .unwrap_err();
        assert_eq!(e.field_name(), Some("operations[0].payload"));
        let e =
            read(r#"[{"op":"schedule","queue":"q","timerKey":"k","payload":"%%%","delayMs":0}]"#)
                .unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
    }

    #[test]
    fn server_owned_and_unknown_fields_are_refused_naming_them() {
        let e =
            read(r#"[{"op":"schedule","queue":"q","timerKey":"k","deliverAt":1}]"#).unwrap_err();
        assert_eq!(e.field_name(), Some("operations[0].deliverAt"));
        let e = read(r#"[{"op":"cancel","queue":"q","timerKey":"k","ttl":1}]"#).unwrap_err();
        assert_eq!(e.field_name(), Some("operations[0].ttl"));
        let e = read(r#"[{"op":"snooze","queue":"q","timerKey":"k"}]"#).unwrap_err();
        assert!(e.to_string().contains("snooze"), "{e}");
    }

    #[test]
    fn one_key_may_appear_several_times_in_a_call() {
        let op = format!(
            r#"{{"op":"schedule","queue":"q","timerKey":"dup","payload":"{}","delayMs":1}}"#,
            b64("1")
        );
        let cancel = r#"{"op":"cancel","queue":"q","timerKey":"dup"}"#;
        let ops = read(&format!("[{op},{cancel},{op}]")).unwrap();
        assert_eq!(
            ops.len(),
            3,
            "read in order, applied in order by the extension"
        );
    }
}
