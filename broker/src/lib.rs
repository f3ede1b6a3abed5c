//! queen_broker: a thin, Queen-compatible HTTP broker in front of the queen_ack
//! PostgreSQL extension. It holds no durable state: every decision that must survive a
//! crash is made by the extension (see shared/spec/broker.md for the wire).

pub mod body_timeout;
pub mod config;
pub mod db;
pub mod dedup;
pub mod dlq_ops;
pub mod error;
pub mod exposition;
pub mod fusion;
pub mod items;
pub mod lanes;
pub mod maintenance;
pub mod metrics;
pub mod push_fusion;
pub mod queue_stats;
pub mod queue_views;
pub mod registry;
pub mod routes;
pub mod server;
pub mod state;
mod util;

use axum::Router;

pub use config::Config;
pub use server::serve;
pub use state::AppState;

/// The HTTP application over a given state.
pub fn app(state: AppState) -> Router {
    routes::router(state)
}
