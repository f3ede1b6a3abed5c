//! The HTTP surface (broker.md §1), one module per endpoint family.

pub mod ack;
pub mod configure;
pub mod dlq;
pub mod health;
pub mod lease;
pub mod pop;
pub mod push;
pub mod queues;
pub mod transaction;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::Router;

use crate::state::AppState;

/// Every route, with request counting and the configurable body limit.
pub fn router(state: AppState) -> Router {
    let limit = state.config.body_limit_bytes();
    Router::new()
        .route("/api/v1/configure", post(configure::configure))
        .route("/api/v1/push", post(push::push))
        .route("/api/v1/pop/queue/{queue}", get(pop::pop_queue))
        .route(
            "/api/v1/pop/queue/{queue}/partition/{partition}",
            get(pop::pop_partition),
        )
        .route("/api/v1/ack", post(ack::ack_one))
        .route("/api/v1/ack/batch", post(ack::ack_batch))
        .route("/api/v1/lease/{lease_id}/extend", post(lease::extend))
        .route("/api/v1/transaction", post(transaction::transaction))
        .route("/api/v1/dlq", get(dlq::list))
        .route(
            "/api/v1/resources/queues/{queue}",
            delete(queues::delete_queue),
        )
        .route("/health", get(health::health))
        .route("/metrics", get(health::metrics))
        // route_layer: runs after routing, so the matched route template is known.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Counts each answered request by method, route template and status.
async fn count_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().to_string();
    let resp = next.run(req).await;
    state
        .metrics
        .request(&method, &route, resp.status().as_u16());
    resp
}
