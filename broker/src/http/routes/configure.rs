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

/// The body; any other top-level key is refused naming it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigureBody {
    queue: String,
    namespace: Option<String>,
    task: Option<String>,
    options: Option<Map<String, Value>>,
}

/// What configure does with an option key. Every key is enforced or refused, never
/// stored and ignored (docs/http-api.md, "Strict bodies", has the table and the reasons).
#[derive(Clone, Copy, PartialEq)]
enum Rule {
    /// Read by `queen.configure_queue_v1` and enforced: an integer >= 0.
    Int,
    /// Read and enforced: a boolean.
    Bool,
    /// Queen's option, not implemented here: accepted (and echoed) only as 0, the value
    /// Queen's SDKs send by default and which asks for nothing; else refused.
    ZeroOnly,
    /// Likewise, accepted only as `false`.
    FalseOnly,
    /// `retentionEnabled`: retention here is its two windows, so `true` (or null) is what
    /// the broker does anyway, and `false` only when this body sets both windows to 0.
    RetentionSwitch,
}

/// Every option key configure takes: the implemented ones, then Queen's others (the
/// list of its routes/configure.cpp). A key not listed is refused; null means absent.
const OPTIONS: [(&str, Rule); 16] = [
    ("leaseTime", Rule::Int),
    ("retryLimit", Rule::Int),
    ("retentionSeconds", Rule::Int),
    ("completedRetentionSeconds", Rule::Int),
    ("dedupWindowSeconds", Rule::Int),
    ("delayedProcessing", Rule::Int),
    ("deadLetterQueue", Rule::Bool),
    ("dlqAfterMaxRetries", Rule::Bool),
    ("retentionEnabled", Rule::RetentionSwitch),
    ("priority", Rule::ZeroOnly),
    ("windowBuffer", Rule::ZeroOnly),
    ("maxSize", Rule::ZeroOnly),
    ("maxWaitTimeSeconds", Rule::ZeroOnly),
    ("retryDelay", Rule::ZeroOnly),
    ("ttl", Rule::ZeroOnly),
    ("encryptionEnabled", Rule::FalseOnly),
];

/// Why a neutral-only option is refused when it asks for something.
fn not_implemented(key: &str) -> &'static str {
    match key {
        "priority" => "pop order by queue priority is not implemented",
        "windowBuffer" => "holding a partition back until it has been quiet is not implemented",
        "maxSize" => "a cap on a queue's messages is not implemented",
        "maxWaitTimeSeconds" => "evicting messages by age is not implemented (retentionSeconds is)",
        "retryDelay" => "a queue-wide retry delay is not implemented (a nack's delaySeconds is)",
        "ttl" => "a message time-to-live is not implemented (retentionSeconds is)",
        "encryptionEnabled" => "payload encryption is not implemented",
        _ => "not implemented",
    }
}

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

/// The options as stored: every key verbatim, except that the implemented ones are
/// checked and written in the canonical form the SQL casts expect (`30.0` -> `30`). A key
/// not in OPTIONS, or a value asking for what is not implemented, is a 400 naming
/// `options.<key>`, and nothing is written.
fn normalized_options(o: &Map<String, Value>) -> ApiResult<Map<String, Value>> {
    let mut out = o.clone();
    for (k, v) in o {
        let Some((_, rule)) = OPTIONS.iter().find(|(name, _)| name == k) else {
            return Err(ApiError::field(
                format!("options.{k}"),
                format!(
                    "options.{k} is not a queue option this broker implements (known: {}); \
                     refused, nothing was changed",
                    OPTIONS.map(|(n, _)| n).join(", ")
                ),
            ));
        };
        match rule {
            Rule::Int => {
                if let Some(n) = int_opt(o, k)? {
                    out.insert(k.clone(), json!(n));
                }
            }
            Rule::Bool => {
                bool_opt(o, k)?;
            }
            Rule::ZeroOnly => {
                if int_opt(o, k)?.is_some_and(|n| n != 0) {
                    return Err(refuse(k, v));
                }
            }
            Rule::FalseOnly => {
                if bool_opt(o, k)? == Some(true) {
                    return Err(refuse(k, v));
                }
            }
            Rule::RetentionSwitch => retention_switch(o)?,
        }
    }
    Ok(out)
}

/// A neutral-only option with a value that asks for behaviour this broker lacks.
fn refuse(key: &str, v: &Value) -> ApiError {
    ApiError::field(
        format!("options.{key}"),
        format!(
            "options.{key} = {v} is not supported: {}; only the neutral value is accepted. \
             Refused, nothing was changed",
            not_implemented(key)
        ),
    )
}

/// `retentionEnabled: false` means "keep everything": true here only when both retention
/// windows are set to 0 in the same body (a stored window would otherwise still apply).
fn retention_switch(o: &Map<String, Value>) -> ApiResult<()> {
    if bool_opt(o, "retentionEnabled")? != Some(false) {
        return Ok(());
    }
    let zero = |k: &str| int_opt(o, k).ok().flatten() == Some(0);
    if zero("retentionSeconds") && zero("completedRetentionSeconds") {
        return Ok(());
    }
    Err(ApiError::field(
        "options.retentionEnabled",
        "options.retentionEnabled = false needs retentionSeconds: 0 and \
         completedRetentionSeconds: 0 in the same body: this broker's retention is those two \
         windows, so a window set now or earlier would still apply. Refused, nothing was changed",
    ))
}

/// An integer option; null means absent. Integral floats (`30.0`) are accepted.
fn int_opt(o: &Map<String, Value>, key: &str) -> ApiResult<Option<i32>> {
    let bad = || {
        ApiError::field(
            format!("options.{key}"),
            format!("options.{key} must be a non-negative integer"),
        )
    };
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
        Some(_) => Err(ApiError::field(
            format!("options.{key}"),
            format!("options.{key} must be a boolean"),
        )),
    }
}
