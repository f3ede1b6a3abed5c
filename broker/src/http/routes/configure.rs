//! `POST /api/v1/configure`: create or update a queue and its "Default" partition.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{check_lease_cap, check_queue_name, json_integer, parse_json};
use crate::state::AppState;

#[derive(Deserialize)]
struct ConfigureBody {
    queue: String,
    namespace: Option<String>,
    task: Option<String>,
    options: Option<Map<String, Value>>,
}

/// The integer options of `queen.configure_queue_v1` (validated here so a bad value is
/// a 400 naming the key) and its boolean ones.
const INT_OPTIONS: [&str; 6] = [
    "leaseTime",
    "retryLimit",
    "retentionSeconds",
    "completedRetentionSeconds",
    "dedupWindowSeconds",
    "delayedProcessing",
];
const BOOL_OPTIONS: [&str; 2] = ["deadLetterQueue", "dlqAfterMaxRetries"];

/// Create or update through `queen.configure_queue_v1` (no direct table writes: the
/// broker may run as a least-privilege member of `queen_broker`).
pub async fn configure(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let body: ConfigureBody = parse_json(&body)?;
    check_queue_name(&body.queue)?;
    let options = body.options.unwrap_or_default();
    let normalized = normalized_options(&options)?;
    if let Some(Value::Number(n)) = normalized.get("leaseTime") {
        let lease = n.as_i64().unwrap_or(i64::MAX);
        check_lease_cap("options.leaseTime", lease, state.config.max_lease_seconds)?;
    }
    let r = state
        .db
        .conn()
        .await?
        .configure_queue(
            &body.queue,
            body.namespace.as_deref(),
            body.task.as_deref(),
            &Value::Object(normalized),
            tenant,
        )
        .await?;
    Ok(Json(json!({
        "configured": true,
        "queueId": r.queue_id,
        "partitionId": r.partition_id,
        "queue": body.queue,
        "namespace": body.namespace,
        "task": body.task,
        "options": options,
    })))
}

/// The options as stored: every key verbatim, except that the known ones are checked
/// and written in the canonical form the SQL casts expect (`30.0` → `30`).
fn normalized_options(o: &Map<String, Value>) -> ApiResult<Map<String, Value>> {
    let mut out = o.clone();
    for k in INT_OPTIONS {
        if let Some(v) = int_opt(o, k)? {
            out.insert(k.to_string(), json!(v));
        }
    }
    for k in BOOL_OPTIONS {
        bool_opt(o, k)?;
    }
    Ok(out)
}

/// An integer option; null means absent. Integral floats (`30.0`) are accepted.
fn int_opt(o: &Map<String, Value>, key: &str) -> ApiResult<Option<i32>> {
    let bad = || ApiError::bad(format!("options.{key} must be a non-negative integer"));
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(_)) => {
            let v = json_integer(v).ok_or_else(bad)?;
            i32::try_from(v)
                .ok()
                .filter(|v| *v >= 0)
                .map(Some)
                .ok_or_else(bad)
        }
        Some(_) => Err(bad()),
    }
}

fn bool_opt(o: &Map<String, Value>, key: &str) -> ApiResult<Option<bool>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad(format!("options.{key} must be a boolean"))),
    }
}
