//! The JSON the extension returns and the broker reads, as types.
//!
//! Every `jsonb` result of a SQL function that the broker reads has a type here. The
//! extension builds the value and serialises it once; the broker deserialises it
//! (`tokio_postgres::types::Json<T>`); neither side looks anything up by key. Field names
//! are the contract's JSON keys (docs/contract.md §4–§10, §13) and are interface facts: renaming a
//! field here is a breaking change of the SQL API. Results built by SQL functions
//! (configure, DLQ listing, renewal) have their types here too; a #[pg_test] per function
//! proves the SQL still produces exactly this shape.

use serde::de::{self, Deserializer};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `{"ok":true, ...fields of T}` or `{"ok":false,"error":"..."}` (contract conventions:
/// a refusal changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<T> {
    Done(T),
    Refused(String),
}

impl<T> Reply<T> {
    /// The refusal text, if refused.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            Reply::Done(_) => None,
            Reply::Refused(e) => Some(e),
        }
    }

    pub fn done(self) -> Option<T> {
        match self {
            Reply::Done(t) => Some(t),
            Reply::Refused(_) => None,
        }
    }
}

impl<T: Serialize> Serialize for Reply<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Done<'a, T> {
            ok: bool,
            #[serde(flatten)]
            inner: &'a T,
        }
        #[derive(Serialize)]
        struct Refused<'a> {
            ok: bool,
            error: &'a str,
        }
        match self {
            Reply::Done(inner) => Done { ok: true, inner }.serialize(s),
            Reply::Refused(error) => Refused { ok: false, error }.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Reply<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr<T> {
            Refused {
                #[allow(dead_code)] // only its value matters: it must be `false`
                ok: False,
                error: String,
            },
            Done {
                #[allow(dead_code)] // only its value matters: it must be `true`
                ok: True,
                #[serde(flatten)]
                inner: T,
            },
        }
        Ok(match Repr::deserialize(d)? {
            Repr::Refused { error, .. } => Reply::Refused(error),
            Repr::Done { inner, .. } => Reply::Done(inner),
        })
    }
}

/// A JSON `true` and nothing else (tags the success form of [`Reply`]).
struct True;
/// A JSON `false` and nothing else.
struct False;

impl<'de> Deserialize<'de> for True {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match bool::deserialize(d)? {
            true => Ok(True),
            false => Err(de::Error::custom("expected ok: true")),
        }
    }
}

impl<'de> Deserialize<'de> for False {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match bool::deserialize(d)? {
            false => Ok(False),
            true => Err(de::Error::custom("expected ok: false")),
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Distinguishes a JSON `null` (Some(None)) from an absent key (None).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A push verdict (docs/contract.md §4): one per segment, in input order for multi pushes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum PushVerdict {
    #[serde(rename_all = "camelCase")]
    Queued {
        base_offset: i64,
        /// UTC with microseconds.
        created_at: String,
        /// The partition written to (our addition: a first push learns the id of the
        /// partition it created without another lookup).
        partition_id: Uuid,
    },
    /// Nothing was written for this segment.
    #[serde(rename_all = "camelCase")]
    Duplicate {
        dups: Vec<Duplicate>,
        partition_id: Uuid,
    },
}

/// One incoming frame that is already in the dedup window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// Index of the incoming frame in its segment.
    pub i: usize,
    /// The MIN offset at which the transactionId was pushed before.
    pub off: i64,
    /// The original message's id, read from its frame (our addition: absent when that
    /// segment was retained away or does not decode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Uuid>,
}

/// `log_ack_by_hash_v1` done (docs/contract.md §6.1), also an ack entry of the transaction wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HashAck {
    pub acked: i64,
    pub off: i64,
    pub noop_hashes: Vec<String>,
    pub stale_hashes: Vec<String>,
    pub unresolved_hashes: Vec<String>,
    pub lease_released: bool,
    /// Branch 1 (or 2b): the frame at `off` goes to the DLQ. With `dlqId` it was filed in
    /// this call (`log_ack_by_hash_v2`, `queen.ack`, the transaction wire); without it the
    /// caller files it (`log_ack_by_hash_v1` / `_delay_v1`, whose answer is unchanged) or,
    /// with `dlqRefused`, filing was refused and the lease is kept.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dlq: bool,
    /// Branch 2c: the poison frame at `off` was dropped.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dropped: bool,
    /// Input index of the head signal that chose the branch (our addition), so the
    /// caller can take a DLQ row's error text from that element.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_index: Option<usize>,
    /// With `dlq`, and on every ack entry of the transaction wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// With `dlq`: the worker as given (null when none was).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub worker: Option<Option<String>>,
    /// The DLQ row this call filed for the dlq verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dlq_id: Option<Uuid>,
    /// Why filing in this call was refused (e.g. the frame was retained away): nothing
    /// was filed, the lease is kept, the batch redelivers when it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dlq_refused: Option<String>,
    /// Input elements (lowercase hex, input order) that resolved inside the batch above
    /// the cursor this call left, when this call released the lease: those messages are
    /// delivered again (what a nack of them, or a completion above a signal, amounts
    /// to). Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redelivered_hashes: Vec<String>,
    /// `log_ack_by_hash_delay_v1` and `log_ack_by_hash_v2`: a nack's delay held the
    /// redelivery back until this instant (UTC with microseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redeliver_at: Option<String>,
}

/// `log_ack_at_v1` / `log_ack_v1` done (docs/contract.md §6.2), also a positional entry of the
/// transaction wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PositionalAck {
    pub acked: i64,
    pub lease_released: bool,
    /// Transaction wire only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// `log_ack_multi_v1` (docs/contract.md §6.2): one row per input position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiAck {
    pub ok: bool,
    pub results: Vec<MultiRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiRow {
    pub ok: bool,
    pub acked: i64,
    pub error: Option<String>,
}

/// `log_dlq_head_v1` done (docs/contract.md §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqFiled {
    pub id: Uuid,
}

/// An ack entry of the transaction wire's result, in execution order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WireAck {
    /// Hash form (it has the hex lists; boxed: it is several times the positional form).
    Hash(Box<HashAck>),
    Positional(PositionalAck),
}

/// `log_transaction_wire_v1` (docs/contract.md §9): all or nothing, so it is always `ok: true`
/// and every ack entry is done (any refusal raises and rolls back).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnWire {
    pub ok: bool,
    pub pushes: Vec<PushVerdict>,
    pub acks: Vec<Reply<WireAck>>,
    /// The timer rider's verdicts, index-aligned with the request's `timers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<crate::timers::TimerResult>,
    /// The kv rider's results (queen_log::kv's answers), index-aligned with `kv`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv: Vec<serde_json::Value>,
}

/// `log_transaction_wire_v1`'s input (docs/contract.md §9): built by the broker, read by the
/// extension.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TxnWireRequest {
    #[serde(default)]
    pub pushes: Vec<WirePush>,
    #[serde(default)]
    pub acks: Vec<WireAckOp>,
    /// Timer ops applied in the same transaction, before the pushes (docs/decisions.md,
    /// "Timers": the lock order against the sweeper).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timers: Vec<crate::timers::TimerOp>,
    /// Key/value ops applied in the same transaction, after the timers and before the
    /// pushes and acks (docs/decisions.md, "Key/value"); checked by queen_log::kv.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv: Vec<crate::kv::KvOp>,
    #[serde(rename = "_tenant", default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// One segment of the wire, pre-encoded: `count` frames, their hashes as concatenated
/// 32-hex-digit tokens, the blob in standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WirePush {
    pub queue: String,
    pub partition: String,
    pub count: i32,
    pub hashes_hex: String,
    pub blob_b64: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<i64>,
}

/// One ack of the wire: positional (`uptoOff`, `ok`, `count`) or by hash (`acks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireAckOp {
    pub partition_id: String,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub worker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upto_off: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// Accepted for compatibility, never trusted for counting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acks: Option<Vec<WireHashElem>>,
}

/// One element of a hash-form wire ack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireHashElem {
    /// The transactionId's hash, 32 lowercase hex digits.
    pub h: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(default)]
    pub error: Option<String>,
}

/// `log_renew_lease_v1` / `log_renew_lease_tenant_v1` (docs/contract.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Renewed {
    pub renewed: i64,
    /// The earliest new expiry, UTC with microseconds; null when nothing was renewed.
    pub expires_at: Option<String>,
}

/// `kv_apply_v1` and `locks_apply_v1`: one answer per op, index-aligned (each op's own
/// shape, built by queen_log::kv and queen_log::locks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpResults {
    pub results: Vec<serde_json::Value>,
}

/// `ephemeral_configure_v1`: the effective options stored, and whether the declaration
/// is new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EphemeralConfigured {
    pub queue: String,
    pub options: serde_json::Value,
    pub created: bool,
}

/// `list_messages_v1`'s page as the queue status view reads it (the listing's other keys
/// stay unread).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct MessagePage {
    #[serde(default)]
    pub messages: Vec<ListedMessage>,
}

/// One message of a `list_messages_v1` page: its names and statuses (src/browse.rs).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedMessage {
    pub id: Option<String>,
    pub transaction_id: Option<String>,
    pub partition_id: Option<String>,
    pub queue_path: Option<String>,
    pub queue: Option<String>,
    pub partition: Option<String>,
    /// Over every group; `dead_letter` when filed.
    pub status: Option<String>,
    /// The queue-mode cursor's.
    pub queue_status: Option<String>,
    pub created_at: Option<String>,
}

/// `configure_queue_v1` (sql/broker_api.sql).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configured {
    /// Always true (Queen's answer has it).
    #[serde(default)]
    pub configured: bool,
    pub queue_id: Uuid,
    pub partition_id: Uuid,
    pub queue: String,
    pub namespace: Option<String>,
    pub task: Option<String>,
    pub lease_time: i32,
    pub retry_limit: i32,
    /// The queue's effective options after the call, every key of Queen's answer.
    #[serde(default)]
    pub options: serde_json::Map<String, serde_json::Value>,
}

/// `queue_info_v1` (sql/broker_api.sql); SQL NULL when the queue does not exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    pub queue_id: Uuid,
    pub lease_time: i32,
    pub retry_limit: i32,
}

/// `delete_queue_v1` (sql/broker_api.sql).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub deleted: bool,
    pub queue: String,
    pub existed: bool,
}

/// `delete_consumer_group_v1` (sql/admin.sql): Queen's answer to a consumer-group delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupDeleted {
    pub success: bool,
    pub consumer_group: String,
    /// Cursors removed (one per partition the group had read).
    pub deleted_partitions: i64,
    pub metadata_deleted: bool,
}

/// `seek_consumer_group_v1` (sql/admin.sql): Queen's answer to a queue seek, with what
/// the move passed over (`skipped`) and gave back (`replayed`), in messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupSeek {
    pub success: bool,
    pub consumer_group: String,
    pub queue_name: String,
    pub seek_to_end: bool,
    /// The target instant, ISO 8601 UTC with milliseconds; None for a seek to the end.
    pub target_timestamp: Option<String>,
    pub partitions_updated: i64,
    pub skipped: i64,
    pub replayed: i64,
}

/// `seek_partition_v1` (sql/admin.sql): Queen's answer to a partition seek, with the
/// cursor's new offset and what the move passed over or gave back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSeek {
    pub success: bool,
    pub consumer_group: String,
    pub queue_name: String,
    pub partition_name: String,
    pub updated: bool,
    /// Creation time of the last message now behind the cursor; None when none is.
    pub cursor_moved_to: Option<String>,
    pub offset: Option<i64>,
    pub skipped: Option<i64>,
    pub replayed: Option<i64>,
}

/// `update_consumer_group_subscription_v1` (sql/admin.sql): Queen's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionUpdated {
    pub success: bool,
    pub consumer_group: String,
    pub new_timestamp: String,
    pub rows_updated: i64,
}

/// `dlq_list_v1` (sql/broker_api.sql): one page, newest failure first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DlqPage {
    pub total: i64,
    pub messages: Vec<DlqEntry>,
}

/// One DLQ row as listed; timestamps in milliseconds (the HTTP wire's form).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DlqEntry {
    /// The message id (the DLQ row's own id when the message id was not captured).
    pub id: Uuid,
    pub dlq_id: Uuid,
    pub transaction_id: Option<String>,
    pub partition_id: Uuid,
    pub queue: String,
    pub partition: String,
    pub consumer_group: String,
    pub offset: i64,
    pub error_message: Option<String>,
    pub retry_count: Option<i32>,
    /// Kept as written (a `Value` would round a 30-digit integer to a float).
    pub data: Option<Box<serde_json::value::RawValue>>,
    pub created_at: Option<String>,
    pub failed_at: String,
}

/// `dlq_redrive_v1` / `dlq_redrive_queue_v1`: one result per requested DLQ row, in
/// request order; `moved` counts the rows that left the DLQ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redriven {
    pub moved: i64,
    pub results: Vec<RedriveRow>,
}

/// What became of one DLQ row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedriveResult {
    /// Pushed back as a new message and removed from the DLQ.
    Moved,
    /// The push found the redrive transactionId in the dedup window: nothing pushed,
    /// the row stays.
    Duplicate,
    /// No such DLQ row for this tenant (never existed, already redriven or deleted).
    Gone,
    /// The row cannot be redriven (see `error`); it stays.
    Refused,
}

/// One row's redrive. The location fields are null for a gone row; `messageId`,
/// `transactionId` and `offset` describe the new message (null unless moved).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RedriveRow {
    pub dlq_id: Uuid,
    pub result: RedriveResult,
    pub queue: Option<String>,
    pub partition: Option<String>,
    pub partition_id: Option<Uuid>,
    pub consumer_group: Option<String>,
    /// The dead-lettered message's offset.
    pub original_offset: Option<i64>,
    pub original_transaction_id: Option<String>,
    pub message_id: Option<Uuid>,
    pub transaction_id: Option<String>,
    pub offset: Option<i64>,
    pub error: Option<String>,
}

/// `dlq_delete_v1` / `dlq_delete_queue_v1`: the rows deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqDeleted {
    pub deleted: i64,
    pub ids: Vec<Uuid>,
}

/// The report of `CALL queen.run_maintenance()` (its INOUT argument, sql/lifecycle.sql).
/// `ran: false` (with `reason`) when another runner held the lock; every count is then 0.
/// Segments and messages are totals over both retention rules; the `expired` ones are
/// what rule 1 alone took.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MaintenanceReport {
    pub ran: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub partitions: i64,
    pub segments: i64,
    pub messages: i64,
    pub expired_segments: i64,
    pub expired_messages: i64,
    pub evicted: i64,
    /// Traces deleted with their messages.
    #[serde(default)]
    pub traces: i64,
    pub sidecar_rows: i64,
    pub orphan_rows: i64,
    /// Key/value rows removed past their expiry.
    pub kv_expired: i64,
    /// The time budget ran out with work left.
    pub more: bool,
    /// Another runner took the lock between two steps.
    pub interrupted: bool,
    pub duration_ms: f64,
}

/// `log_txns_purge_step_v1` (docs/contract.md §10, §13). `clamped`: the cutoff asked for was
/// later than the partition's clock allows, and the clock's cutoff was used instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurgeStep {
    pub deleted: i64,
    pub new_txns_start: Option<i64>,
    pub done: bool,
    pub clamped: bool,
}

/// `log_retention_step_v1` (docs/contract.md §13). `deleted` counts whole segments; `messages`
/// the messages in them; `expired` the segments only rule 1 allowed (some group had not
/// consumed them) and `expired_messages` the messages in those; `evicted` the messages
/// cursors lost unconsumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionStep {
    pub deleted: i64,
    pub messages: i64,
    pub expired: i64,
    /// Messages in the `expired` segments (rule 1 alone took them; `messages` counts all).
    #[serde(default)]
    pub expired_messages: i64,
    pub new_log_start: Option<i64>,
    pub evicted: i64,
    /// Traces deleted with their messages (below the new log start).
    #[serde(default)]
    pub traces: i64,
    pub done: bool,
    /// A cutoff asked for more than the queue's retention policy allows and was clamped.
    #[serde(default)]
    pub clamped: bool,
    /// A lease row the step needed was locked (an ack, a pop or a deletion in flight):
    /// nothing was deleted; the partition is left for the next run.
    #[serde(default)]
    pub busy: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reply_done_flattens_its_fields_beside_ok() {
        let r: Reply<PositionalAck> = Reply::Done(PositionalAck {
            acked: 3,
            lease_released: true,
            ..Default::default()
        });
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, json!({"ok": true, "acked": 3, "leaseReleased": true}));
        assert_eq!(
            serde_json::from_value::<Reply<PositionalAck>>(v).unwrap(),
            r
        );
    }

    #[test]
    fn reply_refused_is_ok_false_and_error_only() {
        let r: Reply<HashAck> = Reply::Refused("consumer not found".into());
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, json!({"ok": false, "error": "consumer not found"}));
        assert_eq!(serde_json::from_value::<Reply<HashAck>>(v).unwrap(), r);
    }

    #[test]
    fn reply_rejects_a_done_body_marked_not_ok() {
        let v = json!({"ok": false, "acked": 1, "leaseReleased": true});
        assert!(serde_json::from_value::<Reply<PositionalAck>>(v).is_err());
    }

    #[test]
    fn hash_ack_dlq_branch_keeps_a_null_worker() {
        let a = HashAck {
            off: 7,
            dlq: true,
            partition_id: Some(Uuid::nil()),
            group: Some("g".into()),
            worker: Some(None),
            ..Default::default()
        };
        let v = serde_json::to_value(Reply::Done(a.clone())).unwrap();
        assert_eq!(v["worker"], serde_json::Value::Null);
        assert!(v.as_object().unwrap().contains_key("worker"));
        assert!(!v.as_object().unwrap().contains_key("dropped"));
        assert_eq!(
            serde_json::from_value::<Reply<HashAck>>(v).unwrap(),
            Reply::Done(a)
        );
    }

    #[test]
    fn hash_ack_plain_branch_has_only_the_contract_keys() {
        let v = serde_json::to_value(Reply::Done(HashAck::default())).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "acked",
                "leaseReleased",
                "noopHashes",
                "off",
                "ok",
                "staleHashes",
                "unresolvedHashes"
            ]
        );
    }

    #[test]
    fn push_verdicts_are_tagged_by_status() {
        let q = PushVerdict::Queued {
            base_offset: 5,
            created_at: "2026-01-01T00:00:00.000000Z".into(),
            partition_id: Uuid::nil(),
        };
        assert_eq!(
            serde_json::to_value(&q).unwrap(),
            json!({"status": "queued", "baseOffset": 5, "createdAt": "2026-01-01T00:00:00.000000Z",
                   "partitionId": Uuid::nil()})
        );
        let d: PushVerdict = serde_json::from_value(
            json!({"status": "duplicate", "dups": [{"i": 0, "off": 3}], "partitionId": Uuid::nil()}),
        )
        .unwrap();
        assert_eq!(
            d,
            PushVerdict::Duplicate {
                dups: vec![Duplicate {
                    i: 0,
                    off: 3,
                    id: None
                }],
                partition_id: Uuid::nil(),
            }
        );
    }

    #[test]
    fn wire_acks_tell_hash_from_positional_entries() {
        let v = json!([
            {"ok": true, "acked": 1, "leaseReleased": true, "partitionId": Uuid::nil(), "group": "g"},
            {"ok": true, "acked": 1, "off": 4, "noopHashes": [], "staleHashes": [],
             "unresolvedHashes": [], "leaseReleased": true, "dlq": true, "dlqId": Uuid::nil()}
        ]);
        let acks: Vec<Reply<WireAck>> = serde_json::from_value(v.clone()).unwrap();
        assert!(matches!(acks[0], Reply::Done(WireAck::Positional(_))));
        let Reply::Done(WireAck::Hash(h)) = &acks[1] else {
            panic!("hash entry: {:?}", acks[1])
        };
        assert!(h.dlq && h.dlq_id == Some(Uuid::nil()));
        assert_eq!(serde_json::to_value(&acks).unwrap(), v, "round trip");
    }
}
