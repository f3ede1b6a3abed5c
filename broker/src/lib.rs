//! queen_broker: a Queen-compatible HTTP broker in front of the queen_ack PostgreSQL
//! extension. Every decision that must survive a crash is made by the extension
//! (docs/broker-contract.md describes the wire). The broker keeps in memory the ack
//! registry, the push dedup cache, parked long-polls, ephemeral queues' contents and its
//! counters, and on disk only the push spool (pushes answered `buffered` while the
//! database was away, replayed in order: docs/availability.md).
//!
//! The rooms, each depending only on the ones listed before it:
//! - `config.rs`, `error.rs`, `util.rs`: the knobs, the one error type, shared helpers;
//! - `keys.rs`: the keys bearer tokens are verified with (secret, PEM key, JWKS);
//! - `peers.rs`: the other brokers, which own some ephemeral queues, and the client that
//!   passes requests on to them;
//! - `db/`: the database client, the only place with SQL (one method per extension
//!   function, the SQLSTATE → error rule);
//! - `engine/`: the decisions and the in-process state: how a push, an ack and a
//!   transaction are written (the routes only translate), the ack registry and the
//!   fast-path decision, ack fusion and its lanes, push fusion, the push dedup cache,
//!   payload sealing, the write gate and the push spool, the rings of ephemeral queues;
//! - `ops/`: running it: the maintenance loop, metrics and their exposition, the queue
//!   statistics and their views;
//! - `state.rs`: [`AppState`], everything above put together for the handlers;
//! - `http/`: the server, the router and its middleware (authentication and tenancy,
//!   body limits and timeouts, JSON errors), request parsing, and one module per route
//!   family under `http/routes/`, each reading its request, calling the engine or the
//!   database client, and rendering the answer.

pub mod config;
pub mod db;
pub mod engine;
pub mod error;
pub mod http;
pub mod keys;
pub mod ops;
pub mod peers;
pub mod state;
mod util;

use axum::Router;

pub use config::Config;
pub use http::server::serve;
pub use state::AppState;

/// The HTTP application over a given state.
pub fn app(state: AppState) -> Router {
    http::router(state)
}
