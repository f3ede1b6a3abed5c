//! Running the broker: the maintenance loop and the timer sweeper, the metrics it and the engine count, their
//! `/metrics` exposition, and the queue statistics with the admin views rendered from
//! them. Reads the database through crate::db; knows nothing of HTTP routing.
//!
//! - `analytics.rs`: the sampled history in Queen's status and analytics shapes;
//! - `maintenance.rs`: `CALL queen.run_maintenance()` every interval, and its counters;
//! - `timers.rs`: the timer sweeper (`queen.timers_fire_v1`), and its counters;
//! - `ephemeral.rs`: the ephemeral declarations loaded at start, and the rings' sweeper;
//! - `metrics.rs`: request counters and latency histograms (no metrics crate);
//! - `exposition.rs`: the `/metrics` text, and Queen's JSON form of it;
//! - `history.rs`: the sampler of the status and analytics history;
//! - `process.rs`: the process's resident memory and CPU time;
//! - `queue_stats.rs`: `queue_list_v1` and `queue_stats_v1` grouped per queue and
//!   partition;
//! - `queue_views.rs`: those statistics in Queen's admin shapes;
//! - `shared_state.rs`: the maintenance modes every broker of the database shares.

pub mod analytics;
pub mod ephemeral;
pub mod exposition;
pub mod history;
pub mod maintenance;
pub mod metrics;
pub mod process;
pub mod queue_stats;
pub mod queue_views;
pub mod shared_state;
pub mod timers;
