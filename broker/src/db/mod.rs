//! The broker's one database client: every statement the broker sends to PostgreSQL is
//! in this folder, one method per extension function, with typed arguments and typed
//! results (the extension's `jsonb` answers as `queen_log::wire` types, its row results
//! as the row structs defined next to their method). Nothing outside `db/` holds SQL
//! text, and the SQLSTATE → `ApiError` rule is `db/error.rs`, once.
//!
//! [`Db`] is the pool (cheap to clone); [`Conn`] is one checked-out connection, on which
//! the methods run, so a caller that needs several statements on one connection (a push
//! looks up its partitions, loads dedup windows, then pushes) checks out once. Every
//! statement is prepared once per pooled connection (`prepare_cached`), so a call is one
//! round trip. The maintenance loop's own connection (outside the pool) is
//! [`maintenance::MaintenanceConn`].
//!
//! Methods by area:
//! - `ack.rs`: `log_ack_by_hash_v2` (the by-hash authority, delay and DLQ filing in one
//!   statement), `log_ack_at_v1`, `log_ack_multi_v1`, `log_renew_lease_v1`,
//!   `log_renew_lease_tenant_v1`, `owned_partitions_v1`, `cursor_worker_v1`,
//!   `log_transaction_wire_v1`;
//! - `push.rs`: `partitions_lookup_v1`, `log_push_multi_v1`, `dedup_window_v1`;
//! - `pop.rs`: `broker_pop_v1`;
//! - `admin.rs`: `configure_queue_v1`, `delete_queue_v1`, the `dlq_*_v1` functions,
//!   `queue_list_v1`, `queue_stats_v1`, the browsing, trace and seek functions, the
//!   reads of Queen 2.x (`fetch_v1`, `partitions_changed_v1`), the extension's installed
//!   version;
//! - `timers.rs`: `timers_apply_v1`, `timers_get_v1`, `timers_list_v1`, and the
//!   sweeper's `timers_fire_v1` on a connection of its own;
//! - `ephemeral.rs`: `ephemeral_configure_v1`, `ephemeral_delete_v1`,
//!   `ephemeral_declared_v1` (declarations only: the contents stay in memory);
//! - `maintenance.rs`: `CALL queen.run_maintenance(...)`;
//! - `system.rs`: the maintenance modes (`system_state_v1`, `system_state_set_v1`), the
//!   spool replay marks (`spool_mark_v1`, `spool_mark_set_v1`) and a replay's
//!   transaction;
//! - `history.rs`: the sampled history (`history_record_v1`, `history_queues_v1`, their
//!   series) and `postgres_stats_v1`.

pub mod ack;
pub mod admin;
pub mod ephemeral;
pub mod error;
pub mod history;
pub mod kv;
pub mod maintenance;
pub mod pop;
pub mod push;
pub mod streams;
pub mod system;
pub mod timers;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use serde::de::DeserializeOwned;
use tokio_postgres::types::{Json as PgJson, ToSql};
use tokio_postgres::Row;

use crate::config::Config;

pub use admin::{QueueRow, StatsRow};
pub use error::DbError;
pub use pop::{PopArgs, PopSlice};
pub use push::{DedupRow, PartitionFound, PushSegment};

/// The version of the extension SQL this broker speaks: the workspace's `queen_ack`
/// version (the root Cargo.toml; a unit test keeps the two equal). `/health` compares the
/// database's `extversion` with it.
pub const EXTENSION_VERSION: &str = "0.3.0";

/// Attempts of a statement that may lose a deadlock race and is run again.
const LOST_RACE_ATTEMPTS: u32 = 3;

/// Statement arguments, as tokio-postgres takes them.
type Args<'a> = [&'a (dyn ToSql + Sync)];

/// The connection pool. Connections are opened lazily, so a broker can start before its
/// database and answer 503 until it is reachable.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
}

impl Db {
    /// The pool `cfg` describes (`QUEEN_DATABASE_URL`, `QUEEN_POOL_SIZE`,
    /// `QUEEN_POOL_TIMEOUT_MS`, `QUEEN_STATEMENT_TIMEOUT_MS`).
    pub fn new(cfg: &Config) -> Result<Self, String> {
        let mut pg: tokio_postgres::Config = cfg
            .database_url
            .parse()
            .map_err(|e| format!("QUEEN_DATABASE_URL: {e}"))?;
        if cfg.statement_timeout_ms > 0 {
            pg.options(format!("-c statement_timeout={}", cfg.statement_timeout_ms));
        }
        pg.application_name("queen-broker");
        pg.connect_timeout(Duration::from_secs(5));
        let mgr = Manager::from_config(
            pg,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(cfg.pool_size)
            .runtime(Runtime::Tokio1)
            // Bounded waits turn an unreachable or saturated database into a prompt 503
            // (with Retry-After) instead of a request that hangs.
            .wait_timeout(Some(Duration::from_millis(cfg.pool_timeout_ms)))
            .create_timeout(Some(Duration::from_secs(5)))
            .build()
            .map_err(|e| format!("database pool: {e}"))?;
        Ok(Db { pool })
    }

    /// A pooled connection, or the reason there is none (a 503 to the client).
    pub async fn conn(&self) -> Result<Conn, DbError> {
        Ok(Conn {
            obj: Some(self.pool.get().await?),
            lost: AtomicBool::new(false),
            open_txn: AtomicBool::new(false),
        })
    }

    /// The pool itself: its status for `/metrics`, and tests that hold connections.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// One checked-out connection; back to the pool when dropped, unless a statement on it
/// found the connection gone (a connection exception, the server terminating the
/// session): the next caller must never be handed a dead one, and a session the server
/// is closing can still look open for a moment (measured on a Citus coordinator: the
/// request after a terminated backend got "connection closed" from the pool).
pub struct Conn {
    /// Always `Some` until dropped.
    obj: Option<Object>,
    lost: AtomicBool,
    /// A transaction of [`Conn::begin`] is open: dropped now, the connection is
    /// discarded (its transaction rolls back with it), never pooled half-way.
    open_txn: AtomicBool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(obj) = self.obj.take() {
            if self.lost.load(Ordering::Relaxed)
                || self.open_txn.load(Ordering::Relaxed)
                || obj.is_closed()
            {
                drop(Object::take(obj));
            }
        }
    }
}

impl Conn {
    fn client(&self) -> &Object {
        self.obj
            .as_ref()
            .expect("a Conn holds its connection until dropped")
    }

    /// `r`, remembering when its error means the connection itself is gone.
    fn watch<T>(&self, r: Result<T, tokio_postgres::Error>) -> Result<T, DbError> {
        r.map_err(|e| {
            let e = DbError::from(e);
            if e.connection_lost() {
                self.lost.store(true, Ordering::Relaxed);
            }
            e
        })
    }

    fn in_transaction(&self) {
        self.open_txn.store(true, Ordering::Relaxed);
    }

    fn transaction_done(&self) {
        self.open_txn.store(false, Ordering::Relaxed);
    }

    /// A lost connection must not go back to the pool: the next caller (e.g. the SQL
    /// path retrying the very acks whose flush failed) would be handed a dead one.
    pub fn discard_if_lost(self, e: &DbError) {
        if e.connection_lost() {
            self.lost.store(true, Ordering::Relaxed);
        }
    }

    /// The one row of `sql`, prepared once per connection.
    async fn one(&self, sql: &str, args: &Args<'_>) -> Result<Row, DbError> {
        let stmt = self.watch(self.client().prepare_cached(sql).await)?;
        self.watch(self.client().query_one(&stmt, args).await)
    }

    /// Every row of `sql`, prepared once per connection.
    async fn rows(&self, sql: &str, args: &Args<'_>) -> Result<Vec<Row>, DbError> {
        let stmt = self.watch(self.client().prepare_cached(sql).await)?;
        self.watch(self.client().query(&stmt, args).await)
    }

    /// [`Conn::json`], run again (up to [`LOST_RACE_ATTEMPTS`] in all, after a short
    /// pause) when the statement lost a deadlock or serialization race (40P01, 40001):
    /// such a statement rolled back entirely, so running it again is safe.
    async fn json_retrying_lost_races<T: DeserializeOwned>(
        &self,
        sql: &str,
        args: &Args<'_>,
    ) -> Result<T, DbError> {
        let mut attempt = 1;
        loop {
            match self.json(sql, args).await {
                Err(e) if e.lost_race() && attempt < LOST_RACE_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(20 * attempt as u64)).await;
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    /// The `jsonb` answer of a one-value statement, read as `T`.
    async fn json<T: DeserializeOwned>(&self, sql: &str, args: &Args<'_>) -> Result<T, DbError> {
        let row = self.one(sql, args).await?;
        let PgJson(v): PgJson<T> = get(&row, 0)?;
        Ok(v)
    }
}

/// Column `i` of `row` as `T`; a column of another type is the extension answering
/// something this broker cannot read (a 500, never a panic).
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, DbError> {
    row.try_get(i)
        .map_err(|e| DbError::Unreadable(format!("column {i}: {e}")))
}

#[cfg(test)]
mod tests {
    /// A failover URL (docs/availability.md, "Failover"): several hosts, the writable one
    /// chosen at connect, in both of libpq's forms.
    #[test]
    fn a_multi_host_read_write_url_is_accepted() {
        use tokio_postgres::config::TargetSessionAttrs;
        for url in [
            "host=pg1,pg2 port=5432,5433 dbname=queen user=b target_session_attrs=read-write",
            "postgres://b@pg1:5432,pg2:5433/queen?target_session_attrs=read-write",
        ] {
            let pg: tokio_postgres::Config = url.parse().expect(url);
            assert_eq!(pg.get_hosts().len(), 2, "{url}");
            assert_eq!(pg.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
            super::Db::new(&crate::config::Config::for_database(url)).expect(url);
        }
    }

    /// The extension's version is the root package's (its control file says
    /// `default_version = '@CARGO_VERSION@'`).
    #[test]
    fn the_expected_sql_version_is_the_workspace_extension_version() {
        let root = include_str!("../../../Cargo.toml");
        let package = &root[root.find("[package]").expect("root package")..];
        let version = package
            .lines()
            .find_map(|l| l.trim().strip_prefix("version = "))
            .expect("package version")
            .trim_matches('"');
        assert_eq!(super::EXTENSION_VERSION, version);
    }
}
