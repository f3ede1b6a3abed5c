//! Deleting a consumer group, with Queen's paths, query and answer:
//!
//! - `DELETE /api/v1/consumer-groups/{group}?deleteMetadata=` (every queue of the tenant)
//! - `DELETE /api/v1/consumer-groups/{group}/queues/{queue}?deleteMetadata=`
//!
//! Through `queen.delete_consumer_group_v1` (docs/sql-api.md): the group's cursors and
//! leases go, and with `deleteMetadata` (default true) its subscription records, so its
//! next pop starts it as new. A lease held by the group is voided: its late ack answers
//! `success: false`, "consumer not found". An unknown group or queue deletes nothing (200, 0), as in
//! Queen (docs/decisions.md, "Deleting a consumer group").

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::Json;
use queen_log::names::NameKind;
use queen_log::wire::GroupDeleted;

use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::{bool_param, check_name, check_queue_name};
use crate::state::AppState;

/// `DELETE /api/v1/consumer-groups/{group}`: the group on every queue.
pub async fn delete_group(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(group): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<GroupDeleted>> {
    delete(&state, tenant, &group, None, &q).await
}

/// `DELETE /api/v1/consumer-groups/{group}/queues/{queue}`: the group on one queue.
pub async fn delete_group_for_queue(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((group, queue)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Json<GroupDeleted>> {
    check_queue_name(&queue)?;
    delete(&state, tenant, &group, Some(&queue), &q).await
}

async fn delete(
    state: &AppState,
    tenant: uuid::Uuid,
    group: &str,
    queue: Option<&str>,
    q: &HashMap<String, String>,
) -> ApiResult<Json<GroupDeleted>> {
    check_name(NameKind::ConsumerGroup, group)?;
    let delete_metadata = bool_param(
        q.get("deleteMetadata").map(String::as_str),
        "deleteMetadata",
        true,
    )?;
    let r = state
        .db
        .conn()
        .await?
        .delete_consumer_group(group, queue, delete_metadata, tenant)
        .await?;
    Ok(Json(r))
}
