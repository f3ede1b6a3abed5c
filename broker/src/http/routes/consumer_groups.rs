//! Moving and deleting a consumer group, with Queen's paths, bodies and answers:
//!
//! - `DELETE /api/v1/consumer-groups/{group}?deleteMetadata=` (every queue of the tenant)
//! - `DELETE /api/v1/consumer-groups/{group}/queues/{queue}?deleteMetadata=`
//! - `POST /api/v1/consumer-groups/{group}/queues/{queue}/seek` `{"timestamp"}` or
//!   `{"toEnd": true}`
//! - `POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek`
//!   (no body: to the end, Queen's only form; or `{"timestamp"}`)
//! - `POST /api/v1/consumer-groups/{group}/subscription` `{"subscriptionTimestamp"}`
//!
//! Through `queen.delete_consumer_group_v1`, `seek_consumer_group_v1`, `seek_partition_v1`
//! and `update_consumer_group_subscription_v1` (docs/sql-api.md). A delete voids the
//! group's leases (a late ack: "consumer not found") and an unknown group or queue deletes
//! nothing (200, 0), as in Queen (docs/decisions.md, "Deleting a consumer group"). A seek
//! voids them too (a late ack: "invalid or expired lease"), and a seek or subscription
//! update of an unknown queue, partition or group is a 404 that changes nothing
//! (docs/decisions.md, "Seeking a consumer group").

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::Json;
use queen_log::names::NameKind;
use queen_log::wire::{GroupDeleted, GroupSeek, PartitionSeek, SubscriptionUpdated};
use serde::Deserialize;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{body_or_empty, bool_param, check_name, check_queue_name, parse_json};
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

/// A seek's body (Queen's keys); any other key is refused naming it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SeekIn {
    timestamp: Option<String>,
    to_end: Option<bool>,
}

impl SeekIn {
    /// The target: `(timestamp, to_end)`, exactly one given (`toEnd: false` alone is
    /// neither). `default_to_end` is the answer to an empty body.
    fn target(&self, default_to_end: bool) -> ApiResult<(Option<&str>, bool)> {
        match (self.timestamp.as_deref(), self.to_end) {
            (None, None) if default_to_end => Ok((None, true)),
            (None, Some(true)) => Ok((None, true)),
            (Some(ts), None | Some(false)) if !ts.trim().is_empty() => Ok((Some(ts), false)),
            _ => Err(ApiError::bad(
                "Must specify either 'toEnd': true or 'timestamp' (one, not both)",
            )),
        }
    }
}

/// `POST /api/v1/consumer-groups/{group}/queues/{queue}/seek`: every partition of the
/// queue to the end or to the first message created at or after `timestamp`.
pub async fn seek_queue(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((group, queue)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<GroupSeek>> {
    check_name(NameKind::ConsumerGroup, &group)?;
    check_queue_name(&queue)?;
    let b: SeekIn = parse_json(&body)?;
    let (timestamp, to_end) = b.target(false)?;
    let r = state
        .db
        .conn()
        .await?
        .seek_consumer_group(&group, &queue, timestamp, to_end, tenant)
        .await?;
    Ok(Json(r))
}

/// `POST /api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek`: one
/// partition, to the end unless the body names a `timestamp`.
pub async fn seek_partition(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((group, queue, partition)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<Json<PartitionSeek>> {
    check_name(NameKind::ConsumerGroup, &group)?;
    check_queue_name(&queue)?;
    check_name(NameKind::Partition, &partition)?;
    let b: SeekIn = body_or_empty(&body)?;
    let (timestamp, _) = b.target(true)?;
    let r = state
        .db
        .conn()
        .await?
        .seek_partition(&group, &queue, &partition, timestamp, tenant)
        .await?;
    Ok(Json(r))
}

/// The subscription body (Queen's key); any other key is refused naming it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubscriptionIn {
    subscription_timestamp: Option<String>,
}

/// `POST /api/v1/consumer-groups/{group}/subscription`: where the group starts the
/// partitions it has not read yet, on every queue; its cursors do not move.
pub async fn update_subscription(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(group): Path<String>,
    body: Bytes,
) -> ApiResult<Json<SubscriptionUpdated>> {
    check_name(NameKind::ConsumerGroup, &group)?;
    let b: SubscriptionIn = parse_json(&body)?;
    let Some(ts) = b.subscription_timestamp.filter(|t| !t.trim().is_empty()) else {
        return Err(ApiError::bad(
            "Missing subscriptionTimestamp in request body",
        ));
    };
    let r = state
        .db
        .conn()
        .await?
        .update_subscription(&group, &ts, tenant)
        .await?;
    Ok(Json(r))
}
