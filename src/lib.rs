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
// One table of per-function traits (plan settings, Citus distribution, grants) that
// sql/citus.sql and sql/finalize.sql read: a new hot-path function is one row there.
extension_sql_file!("../sql/traits.sql", name = "traits", requires = ["history"]);
extension_sql_file!("../sql/citus.sql", name = "citus", requires = ["traits"]);
// Last: plan settings and grants over every function, the #[pg_extern]s included.
extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

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
