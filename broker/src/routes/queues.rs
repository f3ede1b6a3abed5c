//! `DELETE /api/v1/resources/queues/{queue}`.

use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiResult;
use crate::state::AppState;
use crate::util::DEFAULT_TENANT;

/// The sidecar has no FK (contract §2), so its rows go explicitly, in the same
/// transaction as the queue (whose delete cascades to partitions, segments, cursors).
/// DLQ rows are snapshots meant to outlive their queue and stay.
pub async fn delete_queue(
    State(state): State<AppState>,
    Path(queue): Path<String>,
) -> ApiResult<Json<Value>> {
    let mut db = state.db().await?;
    let tx = db.transaction().await?;
    tx.execute(
        "DELETE FROM queen.log_txns t USING queen.log_partitions p, queen.queues q
          WHERE t.partition_id = p.id AND p.queue_id = q.id AND q.tenant_id = $1 AND q.name = $2",
        &[&DEFAULT_TENANT, &queue],
    )
    .await?;
    let n = tx
        .execute(
            "DELETE FROM queen.queues WHERE tenant_id = $1 AND name = $2",
            &[&DEFAULT_TENANT, &queue],
        )
        .await?;
    tx.commit().await?;
    Ok(Json(
        json!({"deleted": true, "queue": queue, "existed": n > 0}),
    ))
}
