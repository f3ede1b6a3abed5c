//! The items of request bodies, read once, by one reader each, for every route that takes
//! them: push items (`/push` and the transaction's push operations) and acks (`/ack`,
//! `/ack/batch` and the transaction's ack operations). Items stay raw JSON until read
//! here: payloads are stored as the client wrote them (never rebuilt into a `Value`, so
//! a 30-digit integer survives), and nothing builds a `Value` tree per item. What a
//! write does with the items is crate::engine::items' and the engine's.

use std::borrow::Cow;

use queen_log::ack::Status;
use queen_log::hash::txn_hash;
use queen_log::names::NameKind;
use serde::Deserialize;
use serde_json::value::RawValue;
use uuid::Uuid;

pub use crate::engine::items::{AckItem, PushItem};
use crate::error::{ApiError, ApiResult};
use crate::http::input::{check_name, parse_uuid, part_error};
use crate::util::group_or_queue_mode;

/// The fields of a push item that push reads; a JSON null reads as absent. Queen's
/// `producerSub` is accepted with Queen's meaning: ignored, whatever its value (the
/// stored subject is the verified token's, crate::engine::items::stamp_subject;
/// docs/security.md, "Producer identity"). Any other key (`messageId`, a typo) is
/// refused naming it: the item is read by one borrowed pass, no `Value` tree, and an
/// unknown key costs nothing until it fails.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPushItem<'a> {
    /// Read and dropped: a client's claim of identity is never stored.
    #[serde(default, rename = "producerSub")]
    _producer_sub: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    queue: Option<&'a RawValue>,
    #[serde(borrow, default)]
    partition: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "transactionId")]
    transaction_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "traceId")]
    trace_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// A string-or-absent field of a push item.
enum Field<'a> {
    Absent,
    Str(Cow<'a, str>),
    Other,
}

impl<'a> Field<'a> {
    fn of(v: Option<&'a RawValue>) -> Self {
        let Some(raw) = v else { return Field::Absent };
        match raw.get() {
            s if !s.starts_with('"') => Field::Other,
            // Borrowed unless the string has escapes.
            s => match serde_json::from_str::<&str>(s) {
                Ok(s) => Field::Str(Cow::Borrowed(s)),
                Err(_) => serde_json::from_str::<String>(s)
                    .map_or(Field::Other, |s| Field::Str(Cow::Owned(s))),
            },
        }
    }
}

/// `QUEEN_MAX_PUSH_ITEMS`: one request may carry at most `max` items.
pub fn check_item_count(n: usize, max: usize) -> ApiResult<()> {
    if n > max {
        return Err(ApiError::bad(format!(
            "too many items: {n} (at most {max} per request, QUEEN_MAX_PUSH_ITEMS); split the push"
        )));
    }
    Ok(())
}

/// Item `i` of a push (or of a transaction's push operation).
pub fn read_push_item(i: usize, v: &RawValue) -> ApiResult<PushItem> {
    let bad = |m: &str| ApiError::bad(format!("items[{i}]: {m}"));
    if !v.get().starts_with('{') {
        return Err(bad("must be an object"));
    }
    let raw: RawPushItem<'_> = serde_json::from_str(v.get())
        .map_err(|e| part_error(e, &format!("items[{i}]"), &format!("items[{i}]: ")))?;
    // `payload` wins over its alias `data` (a JSON null reads as absent, so a null
    // payload gives way to data); neither pops as data:null.
    let payload = match (raw.payload, raw.data) {
        (Some(p), _) => p.get(),
        (None, Some(d)) => d.get(),
        (None, None) => "null",
    };
    // What PostgreSQL cannot hold (a \u0000, a lone surrogate, a number outside numeric)
    // could be stored as bytes but never read back: refused here (docs/http-api.md,
    // "Payloads PostgreSQL cannot hold").
    queen_log::payload::check_write(payload.as_bytes()).map_err(|e| bad(&e.to_string()))?;
    let queue = match Field::of(raw.queue) {
        Field::Str(s) => s.into_owned(),
        _ => return Err(bad("queue must be a non-empty string")),
    };
    check_name(NameKind::Queue, &queue).map_err(|e| bad(&e.to_string()))?;
    let partition = match Field::of(raw.partition) {
        Field::Absent => "Default".to_string(),
        Field::Str(s) if s.is_empty() => "Default".to_string(),
        Field::Str(s) => s.into_owned(),
        Field::Other => return Err(bad("partition must be a string")),
    };
    check_name(NameKind::Partition, &partition).map_err(|e| bad(&e.to_string()))?;
    let message_id = Uuid::now_v7();
    let txn = match Field::of(raw.transaction_id) {
        Field::Absent => message_id.to_string(),
        Field::Str(s) if s.is_empty() => message_id.to_string(),
        Field::Str(s) if s.contains('\0') => {
            return Err(bad(&format!(
                "transactionId: {}",
                queen_log::payload::Unstorable::NulInText
            )))
        }
        Field::Str(s) if s.len() <= usize::from(u16::MAX) => s.into_owned(),
        Field::Str(_) => return Err(bad("transactionId longer than 65535 bytes")),
        Field::Other => return Err(bad("transactionId must be a string")),
    };
    let trace = match Field::of(raw.trace_id) {
        Field::Absent => None,
        Field::Str(s) if s.is_empty() => None,
        Field::Str(s) => Some(
            *Uuid::parse_str(&s)
                .map_err(|_| bad("traceId must be a UUID"))?
                .as_bytes(),
        ),
        Field::Other => return Err(bad("traceId must be a UUID string")),
    };
    Ok(PushItem {
        queue,
        partition,
        txn,
        trace,
        payload: payload.as_bytes().to_vec(),
        message_id,
        dup_of: None,
        encrypted: false,
        producer_sub: None,
    })
}

/// Where an ack was read: the path prefix of its fields in a refusal, and whether the
/// operation's `type` key belongs to it.
#[derive(Clone, Copy)]
pub enum AckAt {
    /// `POST /api/v1/ack`: the body is the ack.
    Body,
    /// `POST /api/v1/ack/batch`: `acknowledgments[i]`.
    Batch,
    /// `POST /api/v1/transaction`: `operations[i]`, with its `type`.
    Operation,
}

/// Every key an ack may carry (the SDKs send transactionId, partitionId, status, error,
/// consumerGroup, leaseId); any other is refused naming it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAck {
    transaction_id: String,
    partition_id: String,
    status: Option<String>,
    error: Option<String>,
    consumer_group: Option<String>,
    lease_id: Option<String>,
    /// A nack's delay (our addition): the batch is redelivered no earlier than this many
    /// seconds from now. Only with status failed or retry.
    delay_seconds: Option<i64>,
    /// A transaction operation's `"ack"` (checked by routes/transaction.rs); refused
    /// outside a transaction.
    #[serde(rename = "type")]
    op_type: Option<serde::de::IgnoredAny>,
}

/// Ack `i` of a request; `top_group` (an ack batch's consumerGroup) overrides the item's.
/// Statuses are read by the contract's one rule (queen_log::ack::Status): an unknown one
/// is a 400 for the whole request, never a silent "failed".
pub fn read_ack_item(
    i: usize,
    v: &RawValue,
    top_group: Option<&str>,
    at: AckAt,
) -> ApiResult<AckItem> {
    let path = match at {
        AckAt::Body => String::new(),
        AckAt::Batch => format!("acknowledgments[{i}]"),
        AckAt::Operation => format!("operations[{i}]"),
    };
    let what = format!("acknowledgment at index {i}: ");
    let a: RawAck = serde_json::from_str(v.get()).map_err(|e| part_error(e, &path, &what))?;
    if a.op_type.is_some() && !matches!(at, AckAt::Operation) {
        let field = if path.is_empty() {
            "type".to_string()
        } else {
            format!("{path}.type")
        };
        return Err(ApiError::field(
            field,
            format!("{what}unknown field `type`: only a transaction operation has a type"),
        ));
    }
    let status = Status::parse(a.status.as_deref()).map_err(|_| {
        ApiError::bad(format!(
            "unknown status \"{}\" at index {i}",
            a.status.as_deref().unwrap_or_default()
        ))
    })?;
    let pid = parse_uuid(&a.partition_id, "partitionId")
        .map_err(|e| ApiError::bad(format!("{e} at index {i}")))?;
    let delay = match a.delay_seconds {
        None => None,
        Some(_) if !matches!(status, Status::Failed | Status::Retry) => {
            return Err(ApiError::bad(format!(
                "delaySeconds is only allowed with status failed or retry (index {i})"
            )))
        }
        Some(d) => Some(i32::try_from(d).ok().filter(|d| *d >= 0).ok_or_else(|| {
            ApiError::bad(format!(
                "delaySeconds must be an integer from 0 to {} (index {i}), got {d}",
                i32::MAX
            ))
        })?),
    };
    let group = group_or_queue_mode(top_group.or(a.consumer_group.as_deref())).to_string();
    check_name(NameKind::ConsumerGroup, &group)?;
    Ok(AckItem {
        hash: txn_hash(&a.transaction_id),
        txn: a.transaction_id,
        pid,
        status,
        error: a.error.filter(|e| !e.is_empty()),
        group,
        lease: a.lease_id.filter(|l| !l.is_empty()),
        delay,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::items::mark_request_duplicates;

    fn push_item(src: &str) -> ApiResult<PushItem> {
        read_push_item(3, serde_json::from_str(src).unwrap())
    }

    /// What a reader made of an item: (queue, partition, trace, payload) or the error.
    type Read = Result<(String, String, Option<[u8; 16]>, String), String>;

    fn fields(r: &ApiResult<PushItem>) -> Read {
        match r {
            Ok(it) => Ok((
                it.queue.clone(),
                it.partition.clone(),
                it.trace,
                String::from_utf8(it.payload.clone()).unwrap(),
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn push_item_rules() {
        let ok = |src: &str, q: &str, p: &str, payload: &str| {
            let (gq, gp, _, gpayload) = fields(&push_item(src)).unwrap();
            assert_eq!(
                (gq.as_str(), gp.as_str(), gpayload.as_str()),
                (q, p, payload),
                "{src}"
            );
        };
        ok(
            r#"{"queue":"q","payload":{"a":[1,2]}}"#,
            "q",
            "Default",
            r#"{"a":[1,2]}"#,
        );
        ok(
            r#"{"queue":"q","partition":"p\u00e9","payload":1}"#,
            "q",
            "pé",
            "1",
        );
        ok(
            r#"{"queue":"q","partition":null,"payload":null,"data":{"d":true}}"#,
            "q",
            "Default",
            r#"{"d":true}"#,
        );
        ok(
            r#"{"queue":"q","partition":"","transactionId":"","traceId":""}"#,
            "q",
            "Default",
            "null",
        );
        ok(
            r#"{"queue":"q","traceId":"0190d6a8-8b2c-7cc1-9b1e-3f3c0a6a1e01"}"#,
            "q",
            "Default",
            "null",
        );
        for bad in [
            r#"{"payload":1}"#,
            r#"{"queue":7}"#,
            r#"{"queue":""}"#,
            r#"{"queue":"q","partition":5}"#,
            r#"{"queue":"q","transactionId":{"x":1}}"#,
            r#"{"queue":"q","traceId":"not-a-uuid"}"#,
            r#"{"queue":"q","traceId":12}"#,
            r#"[1,2]"#,
            r#""q""#,
        ] {
            let e = push_item(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} must be refused"))
                .to_string();
            assert!(e.starts_with("items[3]: "), "{bad}: {e}");
        }
    }

    #[test]
    fn producer_sub_is_accepted_and_never_stored_as_given() {
        use crate::engine::items::stamp_subject;
        for src in [
            r#"{"queue":"q","producerSub":"attacker"}"#,
            r#"{"queue":"q","producerSub":null}"#,
            r#"{"queue":"q","producerSub":{"forged":[1]},"payload":2}"#,
        ] {
            let it = push_item(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            assert_eq!(it.producer_sub, None, "{src}");
            assert_eq!(it.frame().producer_sub, None, "{src}");
        }
        let mut items = vec![push_item(r#"{"queue":"q","producerSub":"attacker"}"#).unwrap()];
        stamp_subject(&mut items, Some(&"alice".into()));
        assert_eq!(items[0].frame().producer_sub.as_deref(), Some("alice"));
        stamp_subject(&mut items, None);
        assert_eq!(items[0].frame().producer_sub, None, "no token, no subject");
    }

    #[test]
    fn unknown_push_item_keys_are_refused_naming_them() {
        for (src, field) in [
            (r#"{"queue":"q","extra":[1]}"#, "items[3].extra"),
            (
                r#"{"queue":"q","producer_sub":"me"}"#,
                "items[3].producer_sub",
            ),
            (r#"{"queue":"q","messageId":"m"}"#, "items[3].messageId"),
        ] {
            let e = push_item(src).err().expect(src);
            assert_eq!(e.field_name(), Some(field), "{src}: {e}");
            assert!(e.to_string().starts_with("items[3]: unknown field"), "{e}");
        }
    }

    #[test]
    fn unknown_ack_keys_and_a_stray_type_are_refused_naming_them() {
        let pid = "0190d6a8-8b2c-7cc1-9b1e-3f3c0a6a1e01";
        let src = format!(r#"{{"transactionId":"t","partitionId":"{pid}","retry":true}}"#);
        let v: &RawValue = serde_json::from_str(&src).unwrap();
        let e = read_ack_item(0, v, None, AckAt::Body).err().unwrap();
        assert_eq!(e.field_name(), Some("retry"));
        let e = read_ack_item(4, v, None, AckAt::Batch).err().unwrap();
        assert_eq!(e.field_name(), Some("acknowledgments[4].retry"));
        let typed = format!(r#"{{"type":"ack","transactionId":"t","partitionId":"{pid}"}}"#);
        let v: &RawValue = serde_json::from_str(&typed).unwrap();
        assert!(read_ack_item(1, v, None, AckAt::Operation).is_ok());
        let e = read_ack_item(1, v, None, AckAt::Batch).err().unwrap();
        assert_eq!(e.field_name(), Some("acknowledgments[1].type"));
    }

    #[test]
    fn push_payload_is_stored_as_written() {
        let it = push_item(r#"{"queue":"q","transactionId":"t","payload":{"big":123456789012345678901234567890, "f": 1.50}}"#).unwrap();
        assert_eq!(it.txn, "t");
        assert_eq!(
            std::str::from_utf8(&it.payload).unwrap(),
            r#"{"big":123456789012345678901234567890, "f": 1.50}"#,
            "no float rounding, no re-encoding"
        );
        let minted = push_item(r#"{"queue":"q"}"#).unwrap();
        assert_eq!(
            minted.txn,
            minted.message_id.to_string(),
            "transactionId defaults to the message id"
        );
    }

    #[test]
    fn later_repeats_of_a_transaction_id_are_duplicates_of_the_first() {
        let mut items: Vec<PushItem> = [
            r#"{"queue":"q","transactionId":"a"}"#,
            r#"{"queue":"q","transactionId":"a"}"#,
            r#"{"queue":"q","partition":"p","transactionId":"a"}"#,
        ]
        .iter()
        .map(|s| push_item(s).unwrap())
        .collect();
        mark_request_duplicates(items.iter_mut());
        assert_eq!(
            items.iter().map(|i| i.dup_of).collect::<Vec<_>>(),
            vec![None, Some(0), None]
        );
    }

    fn ack(src: &str, top: Option<&str>) -> ApiResult<AckItem> {
        read_ack_item(2, serde_json::from_str(src).unwrap(), top, AckAt::Batch)
    }

    #[test]
    fn ack_item_rules() {
        let pid = "0190d6a8-8b2c-7cc1-9b1e-3f3c0a6a1e01";
        let a = ack(
            &format!(
                r#"{{"transactionId":"t","partitionId":"{pid}","status":"ok","consumerGroup":"g"}}"#
            ),
            None,
        )
        .unwrap();
        assert_eq!(
            (a.status, a.group.as_str(), a.hash),
            (Status::Completed, "g", txn_hash("t"))
        );
        let b = ack(
            &format!(r#"{{"transactionId":"t","partitionId":"{pid}","consumerGroup":"g"}}"#),
            Some("top"),
        )
        .unwrap();
        assert_eq!(b.group, "top", "the batch's group wins");
        let q = ack(
            &format!(r#"{{"transactionId":"t","partitionId":"{pid}","leaseId":""}}"#),
            None,
        )
        .unwrap();
        assert_eq!((q.group.as_str(), q.lease), ("__QUEUE_MODE__", None));
        let e = ack(
            &format!(r#"{{"transactionId":"t","partitionId":"{pid}","status":"Failed"}}"#),
            None,
        )
        .err()
        .unwrap();
        assert_eq!(e.to_string(), "unknown status \"Failed\" at index 2");
        let d = ack(
            &format!(
                r#"{{"transactionId":"t","partitionId":"{pid}","status":"ok","delaySeconds":5}}"#
            ),
            None,
        )
        .err()
        .unwrap();
        assert!(d.to_string().starts_with("delaySeconds is only allowed"));
        let f = ack(
            &format!(
                r#"{{"transactionId":"t","partitionId":"{pid}","status":"retry","delaySeconds":5}}"#
            ),
            None,
        )
        .unwrap();
        assert_eq!(f.delay, Some(5));
        assert!(ack(r#"{"transactionId":"t","partitionId":"nope"}"#, None).is_err());
    }
}
