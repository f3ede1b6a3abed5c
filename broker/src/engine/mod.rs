//! The engine: process-local accelerators between the routes and the database client.
//! None of it is durable but the push spool; each falls back to the authority (the
//! extension) when it cannot help (docs/broker-contract.md §3, §4).
//!
//! - `ephemeral.rs`: the rings of ephemeral queues (Queen 2.x), in memory only;
//! - `registry.rs`: what this process delivered on each leasing pop (the ack fast path);
//! - `fusion.rs`: fast-path acks of concurrent requests flushed as one
//!   `log_ack_multi_v1`, on `lanes.rs`;
//! - `lanes.rs`: fire-on-idle batching lanes with a bounded number of flushes in flight;
//! - `push_fusion.rs`: push rounds of concurrent requests in one `log_push_multi_v1`;
//! - `dedup.rs`: per-partition dedup watermarks, so a push probes only what it must;
//! - `sealing.rs`: payload encryption with `QUEEN_ENCRYPTION_KEY`, which only the broker
//!   holds (the extension refuses plaintext into an encrypting queue);
//! - `spool.rs`: the push spool, local durable files for pushes the database cannot take
//!   now (docs/availability.md), replayed by crate::http::spool_replay;
//! - `write_gate.rs`: the one rule every append obeys (push maintenance, spooled records
//!   of a partition first), asked by every path that appends messages.

pub mod dedup;
pub mod ephemeral;
pub mod fusion;
pub mod lanes;
pub mod push_fusion;
pub mod registry;
pub mod sealing;
pub mod spool;
pub mod write_gate;
