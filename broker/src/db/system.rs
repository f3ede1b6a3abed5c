//! What every broker of a database shares (docs/availability.md): the maintenance modes
//! (`system_state_v1`, `system_state_set_v1`), the spool replay marks (`spool_mark_v1`,
//! `spool_mark_set_v1`) and purge holds (`spool_hold_v1`), and the explicit transaction a
//! spool replay pushes and marks in.

use serde::Deserialize;
use uuid::Uuid;

use super::{get, Conn, DbError};

/// `queen.system_state_v1()`'s answer.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Modes {
    /// Pushes go to the brokers' spools; the database is left alone.
    pub maintenance_mode: bool,
    /// Pops answer empty.
    pub pop_maintenance_mode: bool,
}

/// Which mode [`Conn::system_state_set`] switches.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    Push,
    Pop,
}

impl Conn {
    /// `queen.system_state_v1()`: the maintenance modes.
    pub async fn system_state(&self) -> Result<Modes, DbError> {
        self.json("SELECT queen.system_state_v1()", &[]).await
    }

    /// `queen.system_state_set_v1`: switches one mode; the modes after it.
    pub async fn system_state_set(&self, mode: Mode, enabled: bool) -> Result<Modes, DbError> {
        let mode = match mode {
            Mode::Push => "push",
            Mode::Pop => "pop",
        };
        self.json(
            "SELECT queen.system_state_set_v1($1::text, $2::bool)",
            &[&mode, &enabled],
        )
        .await
    }

    /// `queen.spool_mark_v1`: the last spool record of `spool` whose push committed.
    pub async fn spool_mark(&self, spool: Uuid) -> Result<u64, DbError> {
        let row = self
            .one("SELECT queen.spool_mark_v1($1::uuid)", &[&spool])
            .await?;
        Ok(get::<i64>(&row, 0)?.max(0) as u64)
    }

    /// `queen.spool_mark_set_v1`: moves the mark to `seq` (never back).
    pub async fn spool_mark_set(&self, spool: Uuid, seq: u64) -> Result<(), DbError> {
        let seq = i64::try_from(seq).map_err(|_| DbError::Unreadable("spool seq".into()))?;
        self.one(
            "SELECT queen.spool_mark_set_v1($1::uuid, $2::bigint)",
            &[&spool, &seq],
        )
        .await?;
        Ok(())
    }

    /// `queen.spool_hold_v1`: holds the sidecar purge back to `since_ms` (unix ms) for
    /// `spool`, or releases its hold (None).
    pub async fn spool_hold(&self, spool: Uuid, since_ms: Option<u64>) -> Result<(), DbError> {
        let since = since_ms.and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64));
        self.one(
            "SELECT queen.spool_hold_v1($1::uuid, $2::timestamptz)",
            &[&spool, &since],
        )
        .await?;
        Ok(())
    }

    /// Opens a transaction on this connection: the statements until [`Conn::commit`]
    /// commit together (a spool replay's pushes and its mark). Dropping the connection
    /// without committing rolls it back (the connection is discarded).
    pub async fn begin(&self) -> Result<(), DbError> {
        let r = self.client().batch_execute("BEGIN").await;
        self.watch(r)?;
        self.in_transaction();
        Ok(())
    }

    /// Commits the transaction [`Conn::begin`] opened.
    pub async fn commit(&self) -> Result<(), DbError> {
        let r = self.client().batch_execute("COMMIT").await;
        self.watch(r)?;
        self.transaction_done();
        Ok(())
    }
}
