//! `GET /health` and `GET /metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde_json::json;

use crate::ops::exposition;
use crate::state::AppState;

/// 200 when a round trip to the database works, else 503 with the reason.
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let probe = async {
        state.db.conn().await?.extension_version().await?;
        Ok::<_, crate::error::ApiError>(())
    };
    match probe.await {
        Ok(()) => (
            StatusCode::OK,
            Json(json!({
                "status": "healthy",
                "database": "connected",
                "service": "queen-broker",
                "version": env!("CARGO_PKG_VERSION"),
            })),
        ),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "unhealthy",
                "database": "disconnected",
                "error": e.to_string(),
            })),
        ),
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut text = exposition::render(&state.metric_sources());
    let max = state.config.metrics_queue_series;
    text.push_str(&exposition::queue_gauges(&state.db, &state.metrics, max).await);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
