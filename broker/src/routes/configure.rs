//! `POST /api/v1/configure`: create or update a queue and its "Default" partition.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::util::{parse_json, DEFAULT_TENANT};

#[derive(Deserialize)]
struct ConfigureBody {
    queue: String,
    namespace: Option<String>,
    task: Option<String>,
    options: Option<Map<String, Value>>,
}

/// The options the ack path reads; the rest is kept verbatim in `queues.options`.
struct Known {
    lease_time: Option<i32>,
    retry_limit: Option<i32>,
    dead_letter_queue: Option<bool>,
    dlq_after_max_retries: Option<bool>,
    retention_seconds: Option<i32>,
    completed_retention_seconds: Option<i32>,
    dedup_window_seconds: Option<i32>,
}

/// Upsert: a new queue gets column defaults for absent options; an existing one keeps
/// its values for them. One statement also ensures the "Default" partition.
const UPSERT: &str = "
WITH q AS (
    INSERT INTO queen.queues AS q (tenant_id, name, namespace, task, lease_time, retry_limit,
        dead_letter_queue, dlq_after_max_retries, retention_seconds,
        completed_retention_seconds, dedup_window_seconds, options)
    VALUES ($1, $2, COALESCE($3::text, $13::text), COALESCE($4::text, $14::text), COALESCE($5::int, 60),
        COALESCE($6::int, 3), COALESCE($7::bool, true), COALESCE($8::bool, true),
        COALESCE($9::int, 0), COALESCE($10::int, 0), COALESCE($11::int, 3600), $12::jsonb)
    ON CONFLICT (tenant_id, name) DO UPDATE SET
        namespace = COALESCE($3::text, q.namespace), task = COALESCE($4::text, q.task),
        lease_time = COALESCE($5::int, q.lease_time),
        retry_limit = COALESCE($6::int, q.retry_limit),
        dead_letter_queue = COALESCE($7::bool, q.dead_letter_queue),
        dlq_after_max_retries = COALESCE($8::bool, q.dlq_after_max_retries),
        retention_seconds = COALESCE($9::int, q.retention_seconds),
        completed_retention_seconds = COALESCE($10::int, q.completed_retention_seconds),
        dedup_window_seconds = COALESCE($11::int, q.dedup_window_seconds),
        options = q.options || $12::jsonb
    RETURNING id),
p AS (
    INSERT INTO queen.log_partitions (queue_id, name) SELECT id, 'Default' FROM q
    ON CONFLICT (queue_id, name) DO NOTHING RETURNING id)
SELECT q.id, COALESCE((SELECT id FROM p),
    (SELECT lp.id FROM queen.log_partitions lp WHERE lp.queue_id = q.id AND lp.name = 'Default'))
FROM q";

pub async fn configure(State(state): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let body: ConfigureBody = parse_json(&body)?;
    check_queue_name(&body.queue)?;
    let options = body.options.unwrap_or_default();
    let k = known_options(&options)?;
    let (ns_default, task_default) = derived_namespace(&body.queue);
    let db = state.db().await?;
    let row = db
        .query_one(
            UPSERT,
            &[
                &DEFAULT_TENANT,
                &body.queue,
                &body.namespace,
                &body.task,
                &k.lease_time,
                &k.retry_limit,
                &k.dead_letter_queue,
                &k.dlq_after_max_retries,
                &k.retention_seconds,
                &k.completed_retention_seconds,
                &k.dedup_window_seconds,
                &Value::Object(options.clone()),
                &ns_default,
                &task_default,
            ],
        )
        .await?;
    let queue_id: uuid::Uuid = row.get(0);
    let partition_id: Option<uuid::Uuid> = row.get(1);
    Ok(Json(json!({
        "configured": true,
        "queueId": queue_id,
        "partitionId": partition_id,
        "queue": body.queue,
        "namespace": body.namespace,
        "task": body.task,
        "options": options,
    })))
}

/// Queue names are non-empty and fit the varchar(255) column.
pub fn check_queue_name(q: &str) -> ApiResult<()> {
    if q.is_empty() {
        return Err(ApiError::bad("queue must be a non-empty string"));
    }
    if q.chars().count() > 255 {
        return Err(ApiError::bad("queue name longer than 255 characters"));
    }
    Ok(())
}

/// The auto-create rule of the contract: `a.b` → namespace `a`, task `b`; otherwise the
/// name itself and an empty task.
fn derived_namespace(q: &str) -> (String, String) {
    match q.split_once('.') {
        Some((ns, task)) => (ns.to_string(), task.to_string()),
        None => (q.to_string(), String::new()),
    }
}

fn known_options(o: &Map<String, Value>) -> ApiResult<Known> {
    Ok(Known {
        lease_time: int_opt(o, "leaseTime")?,
        retry_limit: int_opt(o, "retryLimit")?,
        dead_letter_queue: bool_opt(o, "deadLetterQueue")?,
        dlq_after_max_retries: bool_opt(o, "dlqAfterMaxRetries")?,
        retention_seconds: int_opt(o, "retentionSeconds")?,
        completed_retention_seconds: int_opt(o, "completedRetentionSeconds")?,
        dedup_window_seconds: int_opt(o, "dedupWindowSeconds")?,
    })
}

/// An integer option; null means absent. Integral floats (`30.0`) are accepted.
fn int_opt(o: &Map<String, Value>, key: &str) -> ApiResult<Option<i32>> {
    let bad = || ApiError::bad(format!("options.{key} must be a non-negative integer"));
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let v = n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(bad)?;
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
