//! The queue a detail route names in its path (`{queue}`): the caller's queue with its
//! statistics, or Queen's 404 before the handler runs. The preamble every queue-detail
//! route (resources and status) shares, written once.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::http::auth::Tenant;
use crate::ops::queue_stats::{load, QueueStats};
use crate::state::AppState;

/// The caller's queue named by the path, loaded.
pub struct KnownQueue(pub QueueStats);

impl FromRequestParts<AppState> for KnownQueue {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let Path(queue) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Tenant(tenant) = Tenant::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let queues = load(&state.db, Some(tenant), Some(&queue))
            .await
            .map_err(IntoResponse::into_response)?;
        queues
            .into_iter()
            .next()
            .map(KnownQueue)
            .ok_or_else(queue_not_found)
    }
}

/// Queen's 404 for an unknown queue.
pub fn queue_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": "Queue not found"})),
    )
        .into_response()
}
