//! One module per endpoint family (docs/broker-contract.md §1); the router is
//! `http/mod.rs`. A route uses the database client, the engine's public types, the
//! operations room and the shared request parsing of `http/`, never another route.

pub mod ack;
pub mod analytics;
pub mod browse;
pub mod configure;
pub mod consumer_groups;
pub mod dlq;
pub mod dlq_admin;
pub mod ephemeral;
pub mod health;
pub mod kv;
pub mod lease;
pub mod locks;
pub mod maintenance;
pub mod messages;
pub mod pop;
pub mod push;
pub mod queues;
pub mod reads;
pub mod resources;
pub mod status;
pub mod streams;
pub mod timers;
pub mod traces;
pub mod transaction;
