//! The HTTP room: the router and its middleware (CORS, request counting, the body limit and
//! read deadline, authentication and tenancy of the `/api/v1` routes, JSON bodies on every
//! error; docs/broker-contract.md §1), the connection loop (`server.rs`), request parsing
//! (`input.rs`, `items.rs`, `binary_body.rs`, `kv_ops.rs`, `timer_ops.rs`), how an `ApiError` answers (`response.rs`), the routes
//! (`routes/`), and the push spool's replay (`spool_replay.rs`, which pushes through the
//! push route's path).

pub mod access;
pub mod auth;
pub mod binary_body;
pub mod body_timeout;
pub mod console;
mod dlq_ops;
pub mod input;
pub mod items;
mod known_queue;
pub mod kv_ops;
pub mod mode_ops;
mod response;
pub mod routes;
pub mod server;
pub mod spool_replay;
pub mod static_files;
pub mod timer_ops;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::Router;
use serde_json::json;

use crate::state::AppState;
use routes::{
    ack, analytics, browse, configure, consumer_groups, dlq, dlq_admin, ephemeral, health, kv,
    lease, locks, maintenance, messages, pop, push, queues, reads, resources, status, streams,
    timers, traces, transaction,
};

/// Every route, with request counting, the configurable body limit, authentication of
/// the `/api/v1` routes (tenancy) and JSON bodies on every error.
pub fn router(state: AppState) -> Router {
    let limit = state.config.body_limit_bytes();
    let api = Router::new()
        .route("/api/v1/configure", post(configure::configure))
        .route("/api/v1/push", post(push::push))
        .route("/api/v1/pop", get(pop::pop_across))
        .route("/api/v1/pop/queue/{queue}", get(pop::pop_queue))
        .route(
            "/api/v1/pop/queue/{queue}/partition/{partition}",
            get(pop::pop_partition),
        )
        .route("/api/v1/ack", post(ack::ack_one))
        .route("/api/v1/ack/batch", post(ack::ack_batch))
        .route("/api/v1/lease/{lease_id}/extend", post(lease::extend))
        .route("/api/v1/transaction", post(transaction::transaction))
        .route("/api/v1/fetch", post(reads::fetch))
        .route("/api/v1/kv", post(kv::batch))
        .route("/api/v1/locks", post(locks::batch))
        .route(
            "/api/v1/partitions/changed",
            post(reads::partitions_changed),
        )
        .route("/api/v1/dlq", get(dlq::list).delete(dlq_admin::purge))
        .route(
            "/api/v1/resources/queues/{queue}",
            get(resources::get_queue).delete(queues::delete_queue),
        )
        .merge(admin_routes())
        .merge(ephemeral_routes())
        .merge(stream_routes())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    let web = state.config.webapp_root.is_some();
    let mut routes = Router::new()
        .merge(api)
        .merge(console::routes(state.clone()))
        .route("/health", get(health::health))
        .route("/metrics", get(health::metrics))
        .route("/metrics/prometheus", get(health::prometheus));
    if web {
        // QUEEN_WEBAPP_ROOT: any other GET is a file of the web app (http/static_files.rs).
        routes = routes.fallback(get(static_files::serve));
    }
    routes
        // Inside the request count, so a body timeout is counted as the 408 it answers.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::http::body_timeout::body_deadline,
        ))
        // route_layer: runs after routing, so the matched route template is known.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn(json_errors))
        .layer(middleware::from_fn_with_state(state.clone(), cors))
        .with_state(state)
}

/// CORS as Queen's server does it (docs/http-api.md, "CORS"): every answer carries
/// `Access-Control-Allow-*` for an allowed origin, and a preflight (`OPTIONS` of any
/// path) is answered 204 here, before routing and authentication, so a browser may ask
/// before it sends its token. `QUEEN_CORS_ORIGINS=off` leaves both to the router.
async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    let allow = match state.config.cors.allow(origin) {
        Some("*") => HeaderValue::from_static("*"),
        Some(o) => HeaderValue::from_str(o).unwrap_or_else(|_| HeaderValue::from_static("null")),
        None => return next.run(req).await,
    };
    let mut resp = if req.method() == axum::http::Method::OPTIONS {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NO_CONTENT;
        r.headers_mut().insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("86400"),
        );
        r
    } else {
        next.run(req).await
    };
    let by_name = allow != "*";
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE, OPTIONS"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Content-Type, Authorization"),
    );
    if by_name {
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    resp
}

/// Queen 2.x's ephemeral queues (http/routes/ephemeral.rs).
fn ephemeral_routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/ephemeral/configure", post(ephemeral::configure))
        .route("/api/v1/ephemeral/reset", post(ephemeral::reset))
        .route(
            "/api/v1/ephemeral/queue/{queue}",
            delete(ephemeral::delete_queue),
        )
        .route("/api/v1/ephemeral/push", post(ephemeral::push))
        .route("/api/v1/ephemeral/pop", get(ephemeral::pop))
        .route("/api/v1/ephemeral/ack", post(ephemeral::ack))
        .route("/api/v1/ephemeral/queues", get(ephemeral::queues))
        .route(
            "/api/v1/ephemeral/queues/{queue}/depth",
            get(ephemeral::depth),
        )
}

/// Queen's streams (http/routes/streams.rs): outside `/api/v1`, authenticated alike.
fn stream_routes() -> Router<AppState> {
    Router::new()
        .route("/streams/v1/queries", post(streams::register))
        .route("/streams/v1/queries/{name}", delete(streams::delete_query))
        .route("/streams/v1/state/get", post(streams::state_get))
        .route("/streams/v1/cycle", post(streams::cycle))
}

/// Operating a queue: Queen's admin views, DLQ redrive and deletion.
fn admin_routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/resources/queues", get(resources::list_queues))
        .route(
            "/api/v1/resources/queues/{queue}/depth",
            get(resources::queue_depth),
        )
        .route("/api/v1/resources/partitions", get(resources::partitions))
        .route("/api/v1/resources/overview", get(resources::overview))
        .route("/api/v1/resources/namespaces", get(resources::namespaces))
        .route("/api/v1/resources/tasks", get(resources::tasks))
        .route("/api/v1/status/queues", get(status::queues))
        .route("/api/v1/status/queues/{queue}", get(status::queue_detail))
        .route(
            "/api/v1/status/queues/{queue}/messages",
            get(status::queue_messages),
        )
        .route("/api/v1/consumer-groups", get(status::groups))
        .route("/api/v1/consumer-groups/lagging", get(status::lagging))
        .route(
            "/api/v1/consumer-groups/{group}",
            get(status::group).delete(consumer_groups::delete_group),
        )
        .route(
            "/api/v1/consumer-groups/{group}/queues/{queue}",
            delete(consumer_groups::delete_group_for_queue),
        )
        .route(
            "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
            post(consumer_groups::seek_queue),
        )
        .route(
            "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
            post(consumer_groups::seek_partition),
        )
        .route(
            "/api/v1/consumer-groups/{group}/subscription",
            post(consumer_groups::update_subscription),
        )
        .route("/api/v1/traces", post(traces::record))
        .route("/api/v1/traces/names", get(traces::names))
        .route("/api/v1/traces/by-name/{name}", get(traces::by_name))
        .route(
            "/api/v1/traces/{partition_id}/{transaction_id}",
            get(traces::of_message),
        )
        .route("/api/v1/messages", get(browse::list))
        .route(
            "/api/v1/messages/{partition_id}/{transaction_id}",
            get(browse::get_one).delete(messages::delete_message),
        )
        .route(
            "/api/v1/messages/{partition_id}/{transaction_id}/retry",
            post(messages::retry),
        )
        .route("/api/v1/timers", post(timers::batch))
        .route("/api/v1/timers/{queue}", get(timers::list))
        .route(
            "/api/v1/timers/{queue}/{*key}",
            get(timers::peek).delete(timers::cancel),
        )
        .route("/api/v1/dlq/redrive", post(dlq_admin::redrive_many))
        .route("/api/v1/dlq/{id}", delete(dlq_admin::delete_one))
        .route("/api/v1/dlq/{id}/replay", post(dlq_admin::replay))
        .route(
            "/api/v1/system/maintenance",
            get(maintenance::get_push).post(maintenance::set_push),
        )
        .route(
            "/api/v1/system/maintenance/pop",
            get(maintenance::get_pop).post(maintenance::set_pop),
        )
        .route("/api/v1/status/buffers", get(maintenance::buffers))
        .merge(analytics_routes())
}

/// Queen's status and analytics over the sampled history (http/routes/analytics.rs).
fn analytics_routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/status", get(analytics::status))
        .route("/api/v1/status/analytics", get(analytics::status_analytics))
        .route(
            "/api/v1/analytics/system-metrics",
            get(analytics::system_metrics),
        )
        .route(
            "/api/v1/analytics/worker-metrics",
            get(analytics::worker_metrics),
        )
        .route("/api/v1/analytics/queue-ops", get(analytics::queue_ops))
        .route("/api/v1/analytics/queue-lag", get(analytics::queue_lag))
        .route(
            "/api/v1/analytics/queue-parked-replicas",
            get(analytics::queue_parked_replicas),
        )
        .route("/api/v1/analytics/retention", get(analytics::retention))
        .route(
            "/api/v1/analytics/postgres-stats",
            get(analytics::postgres_stats),
        )
        .route("/api/v1/stats/refresh", post(analytics::refresh))
        .route("/api/v1/system/shared-state", get(analytics::shared_state))
}

/// Error bodies are JSON everywhere but the console's pages (docs/broker-contract.md §1): axum's own rejections
/// (413 body too large, 404, 405, a malformed query string) answer in plain text, so they
/// are wrapped as `{"error": <text>}` with the same status.
async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let error = match (text.is_empty(), status) {
        (false, _) => text,
        (true, StatusCode::NOT_FOUND) => "not found".to_string(),
        (true, s) => s.canonical_reason().unwrap_or("error").to_lowercase(),
    };
    let body = json!({ "error": error }).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

/// Counts each answered request by method, route template and status.
async fn count_requests(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let method = req.method().to_string();
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    state
        .metrics
        .observe(&method, &route, resp.status().as_u16(), started.elapsed());
    resp
}
