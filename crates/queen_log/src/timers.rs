//! Timers (docs/decisions.md, "Timers"): Queen 2.x's scheduled messages. One pending
//! timer per (queue, key); a schedule is an upsert, a cancel deletes it, and a due timer
//! is delivered into its queue as an ordinary push whose transactionId is the timer's
//! `txn`. The rules both halves apply: the shape of an op, its bounds, the statuses an op
//! answers, and how a list page is bounded.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Most ops in one call (one schedule batch or one transaction's rider).
pub const MAX_OPS: usize = 1000;
/// Longest timer key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;
/// Longest transactionId (a frame holds it behind a u16 length; the SDK mints uuids).
pub const MAX_TXN_BYTES: usize = 512;
/// The furthest a timer may be set ahead: a year and a day.
pub const MAX_DELAY_MS: i64 = 366 * 24 * 3600 * 1000;
/// A delay in the past is legal (it fires on the next sweep); this bounds it so that
/// `now + delay` stays a sane instant.
pub const MIN_DELAY_MS: i64 = -MAX_DELAY_MS;
/// A list page's default and largest size; a larger `limit` is clamped, never refused.
pub const LIST_DEFAULT: i64 = 100;
pub const LIST_MAX: i64 = 1000;
/// Most due timers one sweep delivers (one transaction).
pub const SWEEP_MAX: i32 = 1000;

/// What an op asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Schedule,
    /// The same upsert as `Schedule`, under the name of the intent.
    Reschedule,
    Cancel,
}

/// One timer op as the extension takes it: the SDK's op with its payload decoded
/// (base64, zstd) and, for a queue that encrypts, sealed by the broker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimerOp {
    pub op: OpKind,
    pub queue: String,
    pub timer_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// The transactionId the delivered message will carry (default: its message id);
    /// on a cancel, the timer it must be (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub txn: Option<String>,
    /// One JSON document (schedule only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Box<RawValue>>,
    /// The payload is Queen's encryption envelope (schedule only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypted: bool,
    /// Milliseconds from now (schedule only; negative: already due).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
}

impl TimerOp {
    /// The partition the timer delivers into.
    pub fn partition(&self) -> &str {
        self.partition.as_deref().unwrap_or("Default")
    }
}

/// An op's verdict (the SDK's closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerStatus {
    Scheduled,
    Rescheduled,
    Cancelled,
    /// Nothing pending under the key (never scheduled, cancelled, or delivered).
    Absent,
    /// In the SDK's set; never answered here: a delivery is one transaction, so an op
    /// meeting it waits for its commit and then finds the key absent (docs/decisions.md).
    TooLate,
}

impl TimerStatus {
    /// Whether the verdict is a success (`ok` of the answer).
    pub fn ok(self) -> bool {
        !matches!(self, TimerStatus::Absent | TimerStatus::TooLate)
    }
}

/// One op's answer, index-aligned with the ops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerResult {
    pub ok: bool,
    pub status: TimerStatus,
    pub queue: String,
    pub timer_key: String,
    /// The delivered message's transactionId (on `absent`: the one the cancel named).
    pub txn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<uuid::Uuid>,
    /// Not before this instant (UTC, milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<String>,
}

/// What one sweep did (`queen.timers_fire_v1`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// Timers delivered into their queues.
    pub fired: i64,
    /// Timers whose transactionId the queue already held in its dedup window: removed,
    /// not delivered twice.
    pub duplicates: i64,
    /// Milliseconds until the earliest timer still pending falls due (0: due now, more
    /// than one sweep's worth; None: nothing pending).
    pub next_due_ms: Option<i64>,
    /// The queues delivered into (a broker wakes the long-polls parked on them).
    #[serde(default)]
    pub queues: Vec<DeliveredTo>,
}

/// A queue a sweep delivered into.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeliveredTo {
    pub tenant: uuid::Uuid,
    pub queue: String,
}

/// The checks of a call's ops, before anything is read: the count and the bounds of
/// each op. One key may appear several times: a call's ops apply in order, each one
/// seeing what the ones before it did (Queen's rule; docs/decisions.md, "Timers"), and
/// [`apply_order`] is the order that keeps that while locking keys in one order.
pub fn check_ops(ops: &[TimerOp]) -> Result<(), String> {
    if ops.len() > MAX_OPS {
        return Err(format!("operations: at most {MAX_OPS} in one call"));
    }
    for (i, op) in ops.iter().enumerate() {
        check_op(op).map_err(|e| format!("operations[{i}]: {e}"))?;
    }
    Ok(())
}

/// The order in which a call's ops run: by (queue, key), and in input order among the
/// ops of one key (a stable sort). Ops on different keys touch different rows, so this
/// answers exactly as running them one after another in input order; and two calls
/// that share keys lock them in the same order, so they cannot deadlock.
pub fn apply_order(ops: &[TimerOp]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| {
        (&ops[a].queue, &ops[a].timer_key).cmp(&(&ops[b].queue, &ops[b].timer_key))
    });
    order
}

fn check_op(op: &TimerOp) -> Result<(), String> {
    crate::names::check_name(crate::names::NameKind::Queue, &op.queue)
        .map_err(|e| e.to_string())?;
    crate::names::check_name(crate::names::NameKind::Partition, op.partition())
        .map_err(|e| e.to_string())?;
    if op.partition.as_deref() == Some("") {
        return Err("partition, when given, must not be empty".into());
    }
    if op.timer_key.is_empty() || op.timer_key.len() > MAX_KEY_BYTES {
        return Err(format!("timerKey must be 1 to {MAX_KEY_BYTES} bytes"));
    }
    if let Some(t) = &op.txn {
        if t.is_empty() || t.len() > MAX_TXN_BYTES {
            return Err(format!("txn must be 1 to {MAX_TXN_BYTES} bytes"));
        }
    }
    match op.op {
        OpKind::Cancel => {
            if op.payload.is_some() || op.delay_ms.is_some() || op.encrypted {
                return Err("a cancel carries no payload and no delayMs".into());
            }
        }
        OpKind::Schedule | OpKind::Reschedule => {
            if op.payload.is_none() {
                return Err("payload is required".into());
            }
            match op.delay_ms {
                None => return Err("delayMs is required".into()),
                Some(d) if !(MIN_DELAY_MS..=MAX_DELAY_MS).contains(&d) => {
                    return Err(format!(
                        "delayMs must be within ±{MAX_DELAY_MS} (a year and a day)"
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// A list page's size: the default when absent, clamped to 1..=LIST_MAX.
pub fn list_limit(asked: Option<i64>) -> i64 {
    asked.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(json: &str) -> TimerOp {
        serde_json::from_str(json).unwrap()
    }

    fn schedule(key: &str) -> TimerOp {
        op(&format!(
            r#"{{"op":"schedule","queue":"q","timerKey":"{key}","payload":{{"a":1}},"delayMs":500}}"#
        ))
    }

    #[test]
    fn a_schedule_needs_a_payload_and_a_delay() {
        assert!(check_ops(&[schedule("k")]).is_ok());
        let no_delay = op(r#"{"op":"schedule","queue":"q","timerKey":"k","payload":1}"#);
        assert!(check_ops(&[no_delay]).unwrap_err().contains("delayMs"));
        let no_payload = op(r#"{"op":"reschedule","queue":"q","timerKey":"k","delayMs":1}"#);
        assert!(check_ops(&[no_payload]).unwrap_err().contains("payload"));
    }

    #[test]
    fn a_delay_in_the_past_is_legal_but_bounded() {
        let mut past = schedule("k");
        past.delay_ms = Some(-10_000);
        assert!(check_ops(&[past.clone()]).is_ok());
        past.delay_ms = Some(MIN_DELAY_MS - 1);
        assert!(check_ops(&[past]).is_err());
        let mut far = schedule("k");
        far.delay_ms = Some(MAX_DELAY_MS + 1);
        assert!(check_ops(&[far]).unwrap_err().contains("year"));
    }

    #[test]
    fn a_cancel_carries_nothing_to_deliver() {
        let c = op(r#"{"op":"cancel","queue":"q","timerKey":"k","txn":"t"}"#);
        assert!(check_ops(&[c]).is_ok());
        let bad = op(r#"{"op":"cancel","queue":"q","timerKey":"k","delayMs":5}"#);
        assert!(check_ops(&[bad]).is_err());
    }

    #[test]
    fn one_key_may_appear_several_times_and_keeps_its_input_order() {
        let c = op(r#"{"op":"cancel","queue":"q","timerKey":"a"}"#);
        let ops = [
            schedule("b"),
            schedule("a"),
            c.clone(),
            schedule("a"),
            schedule("0"),
        ];
        assert!(check_ops(&ops).is_ok());
        // "0" < "a" < "b"; the three ops on "a" stay in their input order 1, 2, 3.
        assert_eq!(apply_order(&ops), vec![4, 1, 2, 3, 0]);
        let mut other = schedule("a");
        other.queue = "p".into();
        assert_eq!(apply_order(&[schedule("a"), other, c]), vec![1, 0, 2]);
    }

    #[test]
    fn keys_txns_and_names_are_bounded() {
        assert!(check_ops(&[schedule("")]).is_err());
        assert!(check_ops(&[schedule(&"k".repeat(MAX_KEY_BYTES + 1))]).is_err());
        let mut t = schedule("k");
        t.txn = Some(String::new());
        assert!(check_ops(&[t]).is_err());
        let mut q = schedule("k");
        q.queue = String::new();
        assert!(check_ops(&[q]).is_err());
        let mut p = schedule("k");
        p.partition = Some(String::new());
        assert!(check_ops(&[p]).is_err());
    }

    #[test]
    fn unknown_op_fields_are_refused() {
        let r: Result<TimerOp, _> =
            serde_json::from_str(r#"{"op":"schedule","queue":"q","timerKey":"k","deliverAt":1}"#);
        assert!(r.unwrap_err().to_string().contains("deliverAt"));
    }

    #[test]
    fn statuses_spell_as_the_sdk_reads_them() {
        let s = serde_json::to_string(&[TimerStatus::TooLate, TimerStatus::Rescheduled]).unwrap();
        assert_eq!(s, r#"["too_late","rescheduled"]"#);
        assert!(!TimerStatus::Absent.ok() && TimerStatus::Cancelled.ok());
    }

    #[test]
    fn a_list_limit_is_clamped_not_refused() {
        assert_eq!(list_limit(None), LIST_DEFAULT);
        assert_eq!(list_limit(Some(0)), 1);
        assert_eq!(list_limit(Some(1_000_000)), LIST_MAX);
    }
}
