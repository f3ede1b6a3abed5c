//! `POST /api/v1/configure`: create or update a queue and its "Default" partition.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use queen_log::options;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{check_lease_cap, check_queue_name, parse_json};
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
    let (stored, wanted) = checked_options(&options)?;
    if let Some(lease) = wanted.lease_time {
        check_lease_cap("options.leaseTime", lease, state.config.max_lease_seconds)?;
    }
    // Enforced, so only a broker that can seal may turn it on (crate::engine::sealing).
    if wanted.encryption_enabled == Some(true) && !state.sealer.has_key() {
        return Err(ApiError::field(
            "options.encryptionEnabled",
            "options.encryptionEnabled = true needs QUEEN_ENCRYPTION_KEY (64 hex digits) on \
             this broker: without it payloads could not be encrypted. Refused, nothing was changed",
        ));
    }
    let r = state
        .db
        .conn()
        .await?
        .configure_queue(
            &body.queue,
            body.namespace.as_deref(),
            body.task.as_deref(),
            &stored,
            tenant,
        )
        .await?;
    state.queue_changed(tenant, &body.queue);
    // Queen's answer: the queue's effective options, every key (docs/http-api.md, "Configure").
    Ok(Json(json!({
        "configured": true,
        "queueId": r.queue_id,
        "partitionId": r.partition_id,
        "queue": body.queue,
        "namespace": body.namespace,
        "task": body.task,
        "options": r.options,
    })))
}

/// The options as stored (queen_log::options, the rule the extension applies too) and
/// the ones this broker checks itself, typed; a refused one is a 400 naming
/// `options.<key>`, and nothing is written.
fn checked_options(o: &Map<String, Value>) -> ApiResult<(Value, options::Requested)> {
    let refused = |r: options::Refusal| ApiError::field(r.field, r.message);
    let stored = Value::Object(options::normalized(o).map_err(refused)?);
    let wanted = options::Requested::of(&stored).map_err(refused)?;
    Ok((stored, wanted))
}
