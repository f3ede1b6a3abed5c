//! Streams (Queen's `/streams/v1`, docs/decisions.md "Streams"): the rules both halves
//! apply to a processing cycle — state ops, sink pushes and the source ack committed in
//! one transaction. The request shapes are Queen's (snake_case keys, as its SDKs send
//! them); every other key is refused naming it. The broker checks a cycle with
//! [`check_cycle`] before it reaches the database (a 400), the extension checks it again
//! (22023), so psql callers get the same answer.
//!
//! A cycle is idempotent without an idempotency key: the extension keeps, per (query,
//! source partition), the [`cycle_digest`] of the last committed cycle, and a request
//! whose digest equals it is a retry of that commit (its answer was lost) and changes
//! nothing. Any other cycle on the shard changes the digest, so an identical request
//! later is new work; an acked cycle names its lease, which its own commit released.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::{hash_hex, txn_hash};
use crate::names::{check_name, NameKind, MAX_NAME_BYTES};

/// Most state ops and sink items in one cycle.
pub const MAX_STATE_OPS: usize = 10_000;
pub const MAX_PUSH_ITEMS: usize = 10_000;
/// Longest state key in bytes; largest state value as JSON text (docs/decisions.md).
pub const MAX_KEY_BYTES: usize = 1024;
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Most requests merged into one call of the SQL functions.
pub const MAX_BATCH: usize = 1000;
/// Most keys of one state read.
pub const MAX_KEYS: usize = 10_000;

/// `POST /streams/v1/queries`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub name: Option<String>,
    pub source_queue: Option<String>,
    pub config_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<bool>,
    /// The position in a merged call (Queen's `idx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idx: Option<i64>,
}

impl RegisterRequest {
    /// Queen's texts, in Queen's order.
    pub fn check(&self) -> Result<(), String> {
        let given = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
        for (key, v) in [
            ("name", &self.name),
            ("source_queue", &self.source_queue),
            ("config_hash", &self.config_hash),
        ] {
            if !given(v) {
                return Err(format!("{key} is required"));
            }
        }
        let name = self.name.as_deref().unwrap_or_default();
        if name.len() > MAX_NAME_BYTES {
            return Err(format!(
                "name is {} bytes long; at most {MAX_NAME_BYTES} bytes (UTF-8) are allowed",
                name.len()
            ));
        }
        for (key, q) in [
            ("source_queue", &self.source_queue),
            ("sink_queue", &self.sink_queue),
        ] {
            if let Some(q) = q.as_deref().filter(|q| !q.is_empty()) {
                check_name(NameKind::Queue, q).map_err(|e| format!("{key}: {e}"))?;
            }
        }
        Ok(())
    }
}

/// `POST /streams/v1/state/get`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateGetRequest {
    pub query_id: Option<String>,
    pub partition_id: Option<String>,
    /// Empty or absent: every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// A literal prefix (Queen's SQL uses LIKE unescaped; here `%` and `_` are characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// Epoch milliseconds: only rows whose numeric `value.windowEnd` is at or before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ripe_at_or_before: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idx: Option<i64>,
}

impl StateGetRequest {
    pub fn check(&self) -> Result<(), String> {
        required_uuid("query_id", &self.query_id)?;
        required_uuid("partition_id", &self.partition_id)?;
        if self.keys.as_ref().is_some_and(|k| k.len() > MAX_KEYS) {
            return Err(format!("keys: at most {MAX_KEYS} keys in one read"));
        }
        Ok(())
    }

    /// `ripe_at_or_before` when it is a number (Queen ignores any other JSON type).
    pub fn ripe_ms(&self) -> Option<i64> {
        let v = self.ripe_at_or_before.as_ref()?;
        v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
    }
}

/// One state op, scoped to the cycle's (query, partition).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateOp {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// What a state op does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateOpKind {
    Upsert,
    Delete,
}

impl StateOp {
    pub fn op_kind(&self) -> Option<StateOpKind> {
        match self.kind.as_deref() {
            Some("upsert") => Some(StateOpKind::Upsert),
            Some("delete") => Some(StateOpKind::Delete),
            _ => None,
        }
    }

    /// The stored value: a missing one is `{}`, as in Queen.
    pub fn stored_value(&self) -> Value {
        self.value
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default()))
    }
}

/// One push to the sink (Queen's push item keys that a cycle may carry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkItem {
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(
        default,
        rename = "transactionId",
        skip_serializing_if = "Option::is_none"
    )]
    pub transaction_id: Option<String>,
    #[serde(default, rename = "messageId", skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, rename = "traceId", skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Set by the broker when it sealed the payload for a queue that encrypts: the payload
    /// is then the envelope `{encrypted, iv, authTag}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_encrypted: Option<bool>,
    /// Queen's `producerSub` as a client sends it: accepted and ignored, as Queen's push
    /// ignores it; a client's claim of identity is never stored (docs/security.md,
    /// "Producer identity").
    #[serde(default, rename = "producerSub", skip_serializing)]
    pub claimed_producer_sub: Option<serde::de::IgnoredAny>,
    /// The producer subject stored with the message: set by the broker from the verified
    /// token's `sub`, never a client's (the broker refuses a body that carries it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer_sub: Option<String>,
}

impl SinkItem {
    /// Queen's default partition.
    pub fn partition_name(&self) -> &str {
        self.partition
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or("Default")
    }
}

/// The source ack of a cycle: cumulative, through `transactionId` (its message and every
/// earlier one of the leased batch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CycleAck {
    #[serde(rename = "transactionId")]
    pub transaction_id: Option<String>,
    #[serde(default, rename = "leaseId", skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the source ack does with its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    /// `completed` / `success` (the default): the cursor moves past the message.
    Commit,
    /// `failed` / `dlq`: the earlier messages commit, the message is filed in the DLQ.
    DeadLetter,
}

impl CycleAck {
    pub fn kind(&self) -> Result<AckKind, String> {
        match self.status.as_deref() {
            None | Some("completed") | Some("success") => Ok(AckKind::Commit),
            Some("failed") | Some("dlq") => Ok(AckKind::DeadLetter),
            Some(s) => Err(format!("Unknown ack.status: {s}")),
        }
    }

    /// The lease to check: an empty one is none (no lease check, as in Queen).
    pub fn lease(&self) -> Option<&str> {
        self.lease_id.as_deref().filter(|l| !l.is_empty())
    }
}

/// `POST /streams/v1/cycle`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CycleRequest {
    pub query_id: Option<String>,
    pub partition_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_lease: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_ops: Option<Vec<StateOp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_items: Option<Vec<SinkItem>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<CycleAck>,
    /// The position in a merged call; not part of the digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idx: Option<i64>,
}

impl CycleRequest {
    pub fn group(&self) -> &str {
        self.consumer_group
            .as_deref()
            .filter(|g| !g.is_empty())
            .unwrap_or(crate::conventions::QUEUE_MODE)
    }

    pub fn ops(&self) -> &[StateOp] {
        self.state_ops.as_deref().unwrap_or_default()
    }

    pub fn items(&self) -> &[SinkItem] {
        self.push_items.as_deref().unwrap_or_default()
    }

    pub fn releases(&self) -> bool {
        self.release_lease.unwrap_or(true)
    }

    /// A cycle without a source ack (the SDKs' idle flush: it closes ripe windows it read
    /// outside any lease) is fenced by the state it read (docs/decisions.md, "Streams"):
    /// every row it deletes must still be there, and no cycle may hold the source
    /// partition's lease for its group when it commits. An acked cycle is fenced by its
    /// lease instead: it read the state after its pop, and no fenced cycle commits while
    /// that lease is live.
    pub fn fenced_by_state(&self) -> bool {
        self.ack.is_none()
    }
}

fn required_uuid(key: &str, v: &Option<String>) -> Result<uuid::Uuid, String> {
    let s = v
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{key} is required"))?;
    uuid::Uuid::parse_str(s).map_err(|_| format!("{key} \"{s}\" is not a uuid"))
}

/// Every rule a cycle must meet before anything is written: the ids, the op types, the
/// key and value bounds, the sink items' names, the ack's keys. The message names the
/// field (`state_ops[3].key: ...`).
pub fn check_cycle(r: &CycleRequest) -> Result<(), String> {
    required_uuid("query_id", &r.query_id)?;
    required_uuid("partition_id", &r.partition_id)?;
    check_name(NameKind::ConsumerGroup, r.group()).map_err(|e| format!("consumer_group: {e}"))?;
    if r.ops().len() > MAX_STATE_OPS {
        return Err(format!(
            "state_ops: at most {MAX_STATE_OPS} ops in one cycle, got {}",
            r.ops().len()
        ));
    }
    if r.items().len() > MAX_PUSH_ITEMS {
        return Err(format!(
            "push_items: at most {MAX_PUSH_ITEMS} items in one cycle, got {}",
            r.items().len()
        ));
    }
    for (i, op) in r.ops().iter().enumerate() {
        check_op(op).map_err(|e| format!("state_ops[{i}].{e}"))?;
    }
    for (i, it) in r.items().iter().enumerate() {
        check_item(it).map_err(|e| format!("push_items[{i}].{e}"))?;
    }
    if let Some(a) = &r.ack {
        if a.transaction_id.as_deref().is_none_or(str::is_empty) {
            return Err("ack.transactionId is required".into());
        }
        a.kind().map_err(|e| format!("ack.status: {e}"))?;
        if a.count.is_some_and(|c| c < 0) {
            return Err("ack.count: must not be negative".into());
        }
    }
    Ok(())
}

fn check_op(op: &StateOp) -> Result<(), String> {
    let kind = op.op_kind().ok_or_else(|| {
        format!(
            "type: Unknown state_op type: {}",
            op.kind.as_deref().unwrap_or("null")
        )
    })?;
    let key = op.key.as_deref().ok_or("key: is required")?;
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "key: {} bytes is over the {MAX_KEY_BYTES}-byte limit",
            key.len()
        ));
    }
    crate::payload::check_text(key).map_err(|e| format!("key: {e}"))?;
    if kind == StateOpKind::Upsert {
        let text = op.value.as_ref().map(Value::to_string);
        let n = text.as_ref().map_or(2, String::len);
        if n > MAX_VALUE_BYTES {
            return Err(format!(
                "value: {n} bytes of JSON is over the {MAX_VALUE_BYTES}-byte limit"
            ));
        }
        // What PostgreSQL's jsonb cannot hold is refused before anything is written
        // (queen_log::payload; docs/http-api.md "Payloads PostgreSQL cannot hold").
        if let Some(text) = &text {
            crate::payload::check_write(text.as_bytes()).map_err(|e| format!("value: {e}"))?;
        }
    } else if op.value.is_some() {
        return Err("value: a delete takes no value".into());
    }
    Ok(())
}

fn check_item(it: &SinkItem) -> Result<(), String> {
    let queue = it.queue.as_deref().filter(|q| !q.is_empty());
    let queue = queue.ok_or("queue: is required")?;
    check_name(NameKind::Queue, queue).map_err(|e| format!("queue: {e}"))?;
    check_name(NameKind::Partition, it.partition_name()).map_err(|e| format!("partition: {e}"))?;
    if let Some(m) = it.message_id.as_deref().filter(|m| !m.is_empty()) {
        uuid::Uuid::parse_str(m).map_err(|_| format!("messageId: \"{m}\" is not a uuid"))?;
    }
    if let Some(t) = it.trace_id.as_deref().filter(|t| !t.is_empty()) {
        uuid::Uuid::parse_str(t).map_err(|_| format!("traceId: \"{t}\" is not a uuid"))?;
    }
    if it.transaction_id.as_deref() == Some("") {
        return Err("transactionId: must not be empty".into());
    }
    if let Some(t) = &it.transaction_id {
        crate::payload::check_text(t).map_err(|e| format!("transactionId: {e}"))?;
    }
    if let Some(p) = &it.payload {
        crate::payload::check_write(p.to_string().as_bytes()).map_err(|e| format!("{e}"))?;
    }
    Ok(())
}

/// The final effect of a cycle's state ops per key, the last op on a key winning (all are
/// on one shard, so order between keys does not matter): (upserts, deletes), each key
/// once, in order of the op that decided it.
pub fn final_ops(ops: &[StateOp]) -> (Vec<(String, Value)>, Vec<String>) {
    let mut last: std::collections::HashMap<&str, usize> = Default::default();
    for (i, op) in ops.iter().enumerate() {
        last.insert(op.key.as_deref().unwrap_or_default(), i);
    }
    let mut decided: Vec<usize> = last.into_values().collect();
    decided.sort_unstable();
    let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
    for i in decided {
        let op = &ops[i];
        let key = op.key.clone().unwrap_or_default();
        match op.op_kind() {
            Some(StateOpKind::Upsert) => upserts.push((key, op.stored_value())),
            _ => deletes.push(key),
        }
    }
    (upserts, deletes)
}

/// The cycle's identity for replay detection: xxh3-128 over the request without `idx`
/// (serde_json writes object keys in order, so equal requests give equal text).
pub fn cycle_digest(r: &CycleRequest) -> String {
    let mut r = r.clone();
    r.idx = None;
    let text = serde_json::to_string(&r).unwrap_or_default();
    hash_hex(&txn_hash(&text))
}

/// A sink push's answer, Queen's keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PushResult {
    pub index: usize,
    pub transaction_id: String,
    /// `queued` or `duplicate` (already in the sink partition's dedup window).
    pub status: String,
    pub message_id: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_id: Option<uuid::Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<uuid::Uuid>,
    #[serde(rename = "queueName")]
    pub queue_name: String,
}

/// The source ack's answer, Queen's keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AckResult {
    pub success: bool,
    /// Messages the cursor moved over (Queen reports the request's `count`; this is
    /// what happened, which is the same for a batch acked through its last message).
    pub count: i64,
    pub lease_released: bool,
    pub dlq: bool,
}

/// One cycle's answer. A refused cycle has `success: false`, its `error`, and nothing
/// applied (unlike Queen, the counters do not show work that was rolled back).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CycleResult {
    pub success: bool,
    pub query_id: String,
    pub partition_id: String,
    #[serde(rename = "queueName")]
    pub queue_name: Option<String>,
    pub state_ops_applied: usize,
    pub push_results: Vec<PushResult>,
    pub ack_result: Option<AckResult>,
    /// A retry of the shard's last committed cycle: nothing was applied again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// Why a cycle fenced by the state it read ([`CycleRequest::fenced_by_state`]) did not
    /// apply: the state it read changed or is being changed ([`is_fenced`]). Nothing was
    /// written, and `success` is true: the caller did nothing wrong, and its next read
    /// sees what happened (the SDKs count a `success: false` as a runner error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The SQLSTATE of a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
}

/// The message prefix of the error that rolls back a cycle fenced by the state it read
/// (raised with SQLSTATE P0001, as every Q-prefixed contract error): its callers answer
/// it with [`CycleResult::fenced`], not as a refusal.
pub const FENCED: &str = "QFENCE";

/// Whether a failed cycle was fenced out ([`FENCED`]) rather than refused.
pub fn is_fenced(sqlstate: &str, message: &str) -> bool {
    sqlstate == "P0001" && message.starts_with(FENCED)
}

/// Whether a failed cycle is the cycle's own refusal (answered `success: false`, nothing
/// written) rather than the database's state — unreachable, out of resources, a
/// deadlock or serialization loss, a timeout, an internal error — which is raised (the
/// broker's 503, retried). `queen.streams_cycle_v1` applies the same classes in SQL, but
/// answers a 55000 (a plaintext sink item for a queue that encrypts: QENC) as a refusal,
/// where this rule, for the broker, takes it for an outdated extension.
pub fn is_refusal(sqlstate: &str) -> bool {
    use crate::sqlstate::{classify, ErrorClass};
    let transient = matches!(
        classify(sqlstate),
        ErrorClass::Unavailable | ErrorClass::Retryable
    );
    !(transient || sqlstate.starts_with("XX") || sqlstate.starts_with("58"))
}

impl CycleResult {
    /// A successful cycle's answer before anything is applied.
    pub fn empty(r: &CycleRequest) -> CycleResult {
        CycleResult {
            success: true,
            query_id: r.query_id.clone().unwrap_or_default(),
            partition_id: r.partition_id.clone().unwrap_or_default(),
            queue_name: None,
            state_ops_applied: 0,
            push_results: Vec::new(),
            ack_result: None,
            replayed: false,
            fenced: None,
            error: None,
            sqlstate: None,
        }
    }

    /// A cycle fenced out by the state it read: nothing applied, `success` true, the
    /// reason without its [`FENCED`] prefix.
    pub fn fenced(r: &CycleRequest, message: &str) -> CycleResult {
        let reason = message.strip_prefix(FENCED).unwrap_or(message).trim_start();
        CycleResult {
            fenced: Some(reason.to_string()),
            ..CycleResult::empty(r)
        }
    }

    /// A refused cycle: nothing applied.
    pub fn refused(r: &CycleRequest, error: String) -> CycleResult {
        CycleResult {
            success: false,
            error: Some(error),
            ..CycleResult::empty(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cycle(v: Value) -> CycleRequest {
        serde_json::from_value(v).unwrap()
    }

    const Q: &str = "0190e0a0-0000-7000-8000-000000000001";
    const P: &str = "0190e0a0-0000-7000-8000-000000000002";

    #[test]
    fn a_cycle_as_the_sdk_sends_it_passes() {
        let c = cycle(
            json!({"query_id": Q, "partition_id": P, "consumer_group": "streams.q",
            "state_ops": [{"type": "upsert", "key": "k", "value": {"acc": 1}},
                          {"type": "delete", "key": "old"}],
            "push_items": [{"queue": "sums", "partition": "p1", "payload": {"value": 7}}],
            "ack": {"transactionId": "t2", "leaseId": "l1", "status": "completed", "count": 3},
            "release_lease": true}),
        );
        assert_eq!(check_cycle(&c), Ok(()));
        assert_eq!(c.group(), "streams.q");
        assert_eq!(c.ack.unwrap().kind(), Ok(AckKind::Commit));
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let e =
            serde_json::from_value::<CycleRequest>(json!({"query_id": Q, "bogus": 1})).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = serde_json::from_value::<CycleRequest>(
            json!({"query_id": Q, "push_items": [{"queue": "s", "namespace": "x"}]}),
        )
        .unwrap_err();
        assert!(e.to_string().contains("namespace"), "{e}");
    }

    #[test]
    fn each_rule_names_its_field() {
        let base = json!({"query_id": Q, "partition_id": P});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            check_cycle(&cycle(b)).unwrap_err()
        };
        assert_eq!(
            check_cycle(&cycle(json!({"partition_id": P}))).unwrap_err(),
            "query_id is required"
        );
        assert!(with("partition_id", json!("nope")).contains("not a uuid"));
        assert!(with("state_ops", json!([{"type": "merge", "key": "k"}]))
            .starts_with("state_ops[0].type: Unknown state_op type: merge"));
        assert!(with("state_ops", json!([{"type": "upsert"}])).starts_with("state_ops[0].key"));
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(with("state_ops", json!([{"type": "delete", "key": long}])).contains("limit"));
        let big = "v".repeat(MAX_VALUE_BYTES);
        assert!(with(
            "state_ops",
            json!([{"type": "upsert", "key": "k", "value": big}])
        )
        .starts_with("state_ops[0].value"));
        assert!(with("push_items", json!([{"partition": "p"}])).starts_with("push_items[0].queue"));
        assert!(
            with("push_items", json!([{"queue": "s", "messageId": "x"}])).contains("messageId")
        );
        assert_eq!(
            with("ack", json!({"count": 1})),
            "ack.transactionId is required"
        );
        assert!(
            with("ack", json!({"transactionId": "t", "status": "maybe"}))
                .contains("Unknown ack.status: maybe")
        );
    }

    #[test]
    fn the_digest_ignores_idx_and_sees_everything_else() {
        let a = cycle(json!({"query_id": Q, "partition_id": P, "idx": 0,
            "push_items": [{"queue": "s", "payload": {"b": 1, "a": 2}}]}));
        let mut b = a.clone();
        b.idx = Some(7);
        assert_eq!(cycle_digest(&a), cycle_digest(&b));
        let c = cycle(json!({"query_id": Q, "partition_id": P,
            "push_items": [{"queue": "s", "payload": {"a": 2, "b": 1}}]}));
        assert_eq!(
            cycle_digest(&a),
            cycle_digest(&c),
            "key order does not matter"
        );
        let d = cycle(json!({"query_id": Q, "partition_id": P,
            "push_items": [{"queue": "s", "payload": {"a": 2, "b": 2}}]}));
        assert_ne!(cycle_digest(&a), cycle_digest(&d));
    }

    #[test]
    fn the_last_op_on_a_key_decides_it() {
        let ops: Vec<StateOp> = serde_json::from_value(json!([
            {"type": "upsert", "key": "a", "value": 1},
            {"type": "upsert", "key": "b", "value": 1},
            {"type": "delete", "key": "a"},
            {"type": "upsert", "key": "b", "value": 2},
            {"type": "delete", "key": "c"},
            {"type": "upsert", "key": "c"},
        ]))
        .unwrap();
        let (up, del) = final_ops(&ops);
        assert_eq!(del, vec!["a".to_string()]);
        assert_eq!(up, vec![("b".into(), json!(2)), ("c".into(), json!({}))]);
    }

    #[test]
    fn register_needs_queens_three_keys_in_order() {
        let r = |v: Value| {
            serde_json::from_value::<RegisterRequest>(v)
                .unwrap()
                .check()
        };
        assert_eq!(r(json!({})), Err("name is required".into()));
        assert_eq!(
            r(json!({"name": "q", "config_hash": "h"})),
            Err("source_queue is required".into())
        );
        assert_eq!(
            r(json!({"name": "q", "source_queue": "s", "config_hash": ""})),
            Err("config_hash is required".into())
        );
        assert_eq!(
            r(json!({"name": "q", "source_queue": "s", "config_hash": "h"})),
            Ok(())
        );
    }

    #[test]
    fn refusals_are_the_cycles_not_the_databases() {
        for s in ["P0001", "22023", "22004", "23505", "P0002"] {
            assert!(is_refusal(s), "{s}");
        }
        for s in [
            "40001", "40P01", "57014", "57P01", "08006", "53300", "55000", "XX000", "58P01",
        ] {
            assert!(!is_refusal(s), "{s}");
        }
    }

    #[test]
    fn a_fenced_cycle_is_answered_success_with_its_reason() {
        let flush = cycle(json!({"query_id": Q, "partition_id": P,
                                 "state_ops": [{"type": "delete", "key": "k"}], "ack": null}));
        assert!(flush.fenced_by_state());
        let acked = cycle(json!({"query_id": Q, "partition_id": P,
                                 "ack": {"transactionId": "t"}}));
        assert!(!acked.fenced_by_state());
        assert!(is_fenced("P0001", "QFENCE partition x: gone"));
        assert!(!is_fenced("P0001", "QSTREAM query x not found"));
        assert!(!is_fenced("22023", "QFENCE"));
        let v =
            serde_json::to_value(CycleResult::fenced(&flush, "QFENCE partition x: gone")).unwrap();
        assert_eq!(
            (
                &v["success"],
                &v["fenced"],
                &v["state_ops_applied"],
                &v["push_results"]
            ),
            (
                &json!(true),
                &json!("partition x: gone"),
                &json!(0),
                &json!([])
            )
        );
        assert!(v.get("error").is_none());
    }

    #[test]
    fn ripe_is_read_only_from_a_number() {
        let g = |v: Value| {
            serde_json::from_value::<StateGetRequest>(v)
                .unwrap()
                .ripe_ms()
        };
        assert_eq!(g(json!({"ripe_at_or_before": 5})), Some(5));
        assert_eq!(g(json!({"ripe_at_or_before": "5"})), None);
        assert_eq!(g(json!({})), None);
    }
}
