//! `DELETE /api/v1/resources/queues/{queue}`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::check_queue_name;
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
    let r = state.db.conn().await?.delete_queue(&queue, tenant).await?;
    state.queue_changed(tenant, &queue);
    Ok(Json(json!({
        "deleted": r.deleted,
        "queue": queue,
        "existed": r.existed,
    })))
}
