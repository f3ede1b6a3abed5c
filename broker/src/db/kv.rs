//! Key/value (docs/decisions.md, "Key/value"): `kv_apply_v1` on a pooled connection, and
//! the lost `required` precondition read back from its error; the locks built on it
//! (`locks_apply_v1`) and the stores' sizes.

use queen_log::kv::{Precondition, RawOp, QKV_PRECONDITION};
use queen_log::locks::RawLockOp;
use queen_log::wire::OpResults;
use serde_json::Value;
use uuid::Uuid;

use super::{Conn, DbError};

impl Conn {
    /// `queen.kv_apply_v1`: the ops in order, in one transaction; index-aligned results.
    pub async fn kv_apply(&self, ops: &[RawOp], tenant: Uuid) -> Result<Vec<Value>, DbError> {
        let ops =
            serde_json::to_value(ops).map_err(|e| DbError::Unreadable(format!("kv ops: {e}")))?;
        let answer: OpResults = self
            .json(
                "SELECT queen.kv_apply_v1($1::jsonb, $2::uuid)",
                &[&ops, &tenant],
            )
            .await?;
        Ok(answer.results)
    }
}

impl Conn {
    /// `queen.locks_apply_v1`: lock ops, each answered on its own.
    pub async fn locks_apply(
        &self,
        ops: &[RawLockOp],
        tenant: Uuid,
    ) -> Result<Vec<Value>, DbError> {
        let ops =
            serde_json::to_value(ops).map_err(|e| DbError::Unreadable(format!("lock ops: {e}")))?;
        let answer: OpResults = self
            .json(
                "SELECT queen.locks_apply_v1($1::jsonb, $2::uuid)",
                &[&ops, &tenant],
            )
            .await?;
        Ok(answer.results)
    }

    /// `queen.store_sizes_v1`: the tenant's kv and timer rows and bytes.
    pub async fn store_sizes(&self, tenant: Uuid) -> Result<Value, DbError> {
        self.json("SELECT queen.store_sizes_v1($1::uuid)", &[&tenant])
            .await
    }
}

impl DbError {
    /// The verdict of a `required` op that did not apply (`QKV precondition`, its detail
    /// the JSON [`Precondition`]): nothing of the call committed.
    pub fn kv_precondition(&self) -> Option<Precondition> {
        let db = self.server()?;
        if !db.message().starts_with(QKV_PRECONDITION) {
            return None;
        }
        serde_json::from_str(db.detail()?).ok()
    }
}
