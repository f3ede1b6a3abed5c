//! Traces (docs/decisions.md, "Traces"): Queen's `queen.record_trace_v1`, what a
//! consumer records about a message while it processes it (`msg.trace()` of Queen's
//! SDKs). The reads are SQL (sql/admin.sql). A trace names its message by offset, so the
//! retention step that removes the message removes its traces (src/lifecycle.rs).

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::conventions::QUEUE_MODE;
use queen_log::names::{check_name, NameKind};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::browse::offset_of;
use crate::db::{bad_param, col, q, raise, required, OrRaise};

/// Most traces one message keeps; a trace beyond is refused (22023).
pub const MAX_TRACES_PER_MESSAGE: i64 = 100;
/// Most names one trace carries.
const MAX_NAMES: usize = 10;

/// One trace as recorded.
struct TraceIn {
    pid: Uuid,
    txn: String,
    group: String,
    event_type: String,
    data: Value,
    worker: Option<String>,
    names: Vec<String>,
}

/// `p_data` as Queen's SDKs send it; each field checked by its own rule below (a value
/// of the wrong type is refused with its key named, so fields stay JSON values here).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawTrace {
    transaction_id: Option<Value>,
    partition_id: Option<Value>,
    consumer_group: Option<Value>,
    event_type: Option<Value>,
    data: Option<Value>,
    trace_names: Option<Value>,
    worker_id: Option<Value>,
}

/// The keys RawTrace reads; any other is refused.
const KNOWN: [&str; 7] = [
    "transactionId",
    "partitionId",
    "consumerGroup",
    "eventType",
    "data",
    "traceNames",
    "workerId",
];

fn text(v: Option<Value>, k: &str) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(v) => bad_param(format!("record_trace_v1: {k} must be a string, got {v}")),
    }
}

/// Queen's `traceNames`: an array of names, or one name; empty names dropped.
fn names(v: Option<Value>) -> Vec<String> {
    let list: Vec<String> = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) => a
            .into_iter()
            .map(|v| match v {
                Value::String(s) => s,
                v => bad_param(format!(
                    "record_trace_v1: traceNames holds a non-string {v}"
                )),
            })
            .collect(),
        Some(v) => bad_param(format!(
            "record_trace_v1: traceNames must be a list of names, got {v}"
        )),
    };
    let list: Vec<String> = list.into_iter().filter(|s| !s.is_empty()).collect();
    if list.len() > MAX_NAMES {
        bad_param(format!(
            "record_trace_v1: at most {MAX_NAMES} traceNames, got {}",
            list.len()
        ));
    }
    for n in &list {
        if let Err(e) = check_name(NameKind::Queue, n) {
            bad_param(format!("record_trace_v1: trace name: {e}"));
        }
    }
    list
}

fn parse(v: &Value) -> TraceIn {
    let Some(o) = v.as_object() else {
        bad_param("record_trace_v1: p_data must be a JSON object")
    };
    if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        bad_param(format!("record_trace_v1: unknown key {k}"));
    }
    // Every field is an optional JSON value, so an object always reads.
    let raw = RawTrace::deserialize(v).unwrap_or_default();
    let (Some(txn), Some(pid)) = (
        text(raw.transaction_id, "transactionId"),
        text(raw.partition_id, "partitionId"),
    ) else {
        bad_param("transactionId and partitionId are required")
    };
    let pid = Uuid::from_bytes(
        *uuid::Uuid::parse_str(&pid)
            .unwrap_or_else(|_| {
                bad_param(format!(
                    "record_trace_v1: partitionId {pid:?} is not a UUID"
                ))
            })
            .as_bytes(),
    );
    let Some(data) = raw.data.filter(|d| !d.is_null()) else {
        bad_param("data is required")
    };
    TraceIn {
        pid,
        txn,
        group: text(raw.consumer_group, "consumerGroup").unwrap_or_else(|| QUEUE_MODE.to_string()),
        event_type: text(raw.event_type, "eventType").unwrap_or_else(|| "info".to_string()),
        data,
        worker: text(raw.worker_id, "workerId"),
        names: names(raw.trace_names),
    }
}

fn not_found() -> ! {
    raise(PgSqlErrorCode::ERRCODE_NO_DATA_FOUND, "Message not found")
}

/// The partition's log start, its row held FOR SHARE (a retention step's NO KEY UPDATE
/// waits for this trace, then deletes it with its message; or it ran first, and the
/// message is found gone); None when the tenant has no such partition.
fn share_partition(client: &SpiClient<'_>, pid: Uuid, tenant: Uuid) -> Option<(i64, i64)> {
    q(
        client,
        "SELECT p.log_start, p.last_offset FROM queen.log_partitions p
          WHERE p.id = $1 AND EXISTS (SELECT 1 FROM queen.partition_names n
                                        JOIN queen.queues q ON q.id = n.queue_id
                                       WHERE n.id = $1 AND q.tenant_id = $2)
            FOR SHARE OF p",
        &[pid.into(), tenant.into()],
    )
    .or_raise()
    .next()
    .map(|r| (col(&r, 1, "log_start"), col(&r, 2, "last_offset")))
}

fn record(client: &SpiClient<'_>, t: &TraceIn, tenant: Uuid) -> Value {
    let (log_start, last) = share_partition(client, t.pid, tenant).unwrap_or_else(|| not_found());
    let offset = offset_of(client, t.pid, &t.txn).unwrap_or_else(|| not_found());
    if offset < log_start || offset > last {
        not_found();
    }
    let n: i64 = q(
        client,
        "SELECT count(*) FROM queen.log_traces WHERE partition_id = $1 AND transaction_id = $2",
        &[t.pid.into(), t.txn.clone().into()],
    )
    .or_raise()
    .first()
    .get_one::<i64>()
    .or_raise()
    .unwrap_or(0);
    if n >= MAX_TRACES_PER_MESSAGE {
        bad_param(format!(
            "record_trace_v1: the message already has {n} traces, the most one message keeps"
        ));
    }
    let id: Uuid = q(
        client,
        "INSERT INTO queen.log_traces (partition_id, \"offset\", transaction_id, tenant_id,
                                       consumer_group, event_type, data, worker_id, names)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        &[
            t.pid.into(),
            offset.into(),
            t.txn.clone().into(),
            tenant.into(),
            t.group.clone().into(),
            t.event_type.clone().into(),
            JsonB(t.data.clone()).into(),
            t.worker.clone().into(),
            t.names.clone().into(),
        ],
    )
    .or_raise()
    .first()
    .get_one::<Uuid>()
    .or_raise()
    .expect("INSERT ... RETURNING id");
    json!({"success": true, "traceId": id.to_string()})
}

/// Record a trace for the message at (partitionId, transactionId) (Queen's
/// `record_trace_v1`): `{transactionId, partitionId, consumerGroup, eventType (default
/// info), data, traceNames, workerId}`. Answer `{success: true, traceId}`. A message the
/// tenant does not have (or no longer has) is P0002; a bad key, a missing field, more
/// than 10 names or a message's 101st trace is 22023.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn record_trace_v1(
    p_data: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let t = parse(&required(p_data, "p_data").0);
    let tenant = required(p_tenant, "p_tenant");
    JsonB(Spi::connect_mut(|c| record(c, &t, tenant)))
}
