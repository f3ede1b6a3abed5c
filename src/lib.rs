//! queen_ack: the acknowledgement contract of a partitioned, log-structured queue,
//! native in PostgreSQL.
//!
//! This crate is the pgrx glue only: argument checks, SPI reads and writes, and JSON
//! results. Decisions (hashing, the frame codec, the ack procedure) live in the pure
//! `queen_log` crate, so they are tested without a server and shared with the broker.

use pgrx::prelude::*;

mod ack;
mod broker_api;
mod browse;
mod db;
mod dlq;
mod ephemeral;
mod fetch;
mod kv;
mod lifecycle;
mod locks;
mod names;
mod native;
mod pop;
mod push;
mod redrive;
mod streams;
mod timers;
mod traces;
mod txn_wire;

/// #[pg_test]s run inside a real PostgreSQL 15 with this extension installed. pgrx calls
/// them in schema `tests`, so every suite file is included into this one module.
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    include!("tests/common.rs");
    include!("tests/push_pop.rs");
    include!("tests/acks.rs");
    include!("tests/ack_dlq.rs");
    include!("tests/broker_api.rs");
    include!("tests/broker_functions.rs");
    include!("tests/lifecycle.rs");
    include!("tests/features.rs");
    include!("tests/distribution.rs");
}

::pgrx::pg_module_magic!();

extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!(
    "../sql/functions.sql",
    name = "sql_functions",
    requires = ["bootstrap"]
);
extension_sql_file!(
    "../sql/library.sql",
    name = "library",
    requires = ["bootstrap"]
);
extension_sql_file!(
    "../sql/broker_api.sql",
    name = "broker_api",
    requires = ["sql_functions", broker_api::effective_lease_time]
);
extension_sql_file!(
    "../sql/lifecycle.sql",
    name = "lifecycle",
    requires = ["broker_api"]
);
extension_sql_file!("../sql/admin.sql", name = "admin", requires = ["lifecycle"]);
extension_sql_file!("../sql/timers.sql", name = "timers", requires = ["admin"]);
extension_sql_file!(
    "../sql/ephemeral.sql",
    name = "ephemeral",
    requires = ["timers"]
);
extension_sql_file!(
    "../sql/streams.sql",
    name = "streams",
    requires = ["ephemeral"]
);
extension_sql_file!("../sql/system.sql", name = "system", requires = ["streams"]);
extension_sql_file!(
    "../sql/history.sql",
    name = "history",
    requires = ["system"]
);
extension_sql_file!("../sql/citus.sql", name = "citus", requires = ["history"]);
extension_sql_file!(
    "../sql/plan_settings.sql",
    name = "plan_settings",
    requires = [
        "citus",
        native::push,
        native::pop,
        native::ack,
        push::log_push_one_v1,
        push::log_push_at_v1,
        push::log_push_multi_v1,
        pop::log_pop_v1,
        pop::log_pop_queue_v1,
        broker_api::log_pop_at_v1,
        broker_api::broker_pop_v1,
        fetch::fetch_v1,
        fetch::fetch_partition_v1,
        ack::log_ack_v1,
        ack::log_ack_at_v1,
        ack::log_ack_multi_v1,
        ack::log_ack_by_hash_v1,
        ack::log_ack_by_hash_v2,
        ack::log_ack_by_hash_delay_v1,
        dlq::log_dlq_head_v1,
        txn_wire::log_transaction_wire_v1
    ]
);
extension_sql_file!("../sql/grants.sql", name = "grants", finalize);

/// Hooks for `cargo pgrx test`: every test cluster runs with `pg_test_config`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        include_str!("../pg_test_config")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    }
}
