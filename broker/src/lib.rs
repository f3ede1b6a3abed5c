//! queen_broker: a thin, Queen-compatible HTTP broker in front of the queen_ack
//! PostgreSQL extension. It holds no durable state: every decision that must survive a
//! crash is made by the extension (see shared/spec/broker.md for the wire).

pub mod config;
pub mod dedup;
pub mod error;
pub mod fusion;
pub mod metrics;
pub mod queue_stats;
pub mod registry;
pub mod routes;
pub mod state;
mod util;

use std::future::Future;

use axum::Router;
use tokio::net::TcpListener;

pub use config::Config;
pub use state::AppState;

/// The HTTP application over a given state.
pub fn app(state: AppState) -> Router {
    routes::router(state)
}

/// Serves `state` on `listener` until `shutdown` resolves, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let drain = state.clone();
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await?;
    // Every request has been answered; finish any flush still in flight.
    if let Some(f) = &drain.fusion {
        f.shutdown().await;
    }
    Ok(())
}
