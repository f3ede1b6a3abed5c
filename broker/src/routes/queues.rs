//! `DELETE /api/v1/resources/queues/{queue}`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::routes::auth::Tenant;
use crate::routes::configure::check_queue_name;
use crate::state::AppState;

/// Through `queen.delete_queue_v1`: the queue with its partitions, segments and cursors
/// (FK cascade), its sidecar rows and its DLQ rows, in one transaction, scoped to the
/// caller's tenant (another tenant's queue of the same name answers `existed:false`).
pub async fn delete_queue(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(queue): Path<String>,
) -> ApiResult<Json<Value>> {
    check_queue_name(&queue)?;
    let db = state.db().await?;
    let row = db
        .query_one(
            "SELECT queen.delete_queue_v1($1::text, $2::uuid)",
            &[&queue, &tenant],
        )
        .await?;
    let r: Value = row.get(0);
    Ok(Json(json!({
        "deleted": r.get("deleted").and_then(Value::as_bool).unwrap_or(true),
        "queue": queue,
        "existed": r.get("existed").and_then(Value::as_bool).unwrap_or(false),
    })))
}
