//! Ephemeral queues' declarations (docs/decisions.md, "Ephemeral queues"):
//! `ephemeral_configure_v1`, `ephemeral_delete_v1`, and `ephemeral_declared_v1`, which a
//! broker reads at start. The contents never come here.

use queen_log::ephemeral::Options;
use queen_log::wire::EphemeralConfigured;
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use super::{get, Conn, DbError};

/// One stored declaration.
#[derive(Deserialize)]
pub struct Declared {
    pub tenant: Uuid,
    pub queue: String,
    pub options: Value,
}

impl Conn {
    /// `queen.ephemeral_configure_v1`: stores the effective options; whether the queue
    /// was new.
    pub async fn ephemeral_configure(
        &self,
        tenant: Uuid,
        queue: &str,
        options: &Options,
    ) -> Result<bool, DbError> {
        let answer: EphemeralConfigured = self
            .json(
                "SELECT queen.ephemeral_configure_v1($1::text, $2::jsonb, $3::uuid)",
                &[&queue, &options.to_wire(), &tenant],
            )
            .await?;
        Ok(answer.created)
    }

    /// `queen.ephemeral_delete_v1`: whether a declaration was deleted.
    pub async fn ephemeral_delete(&self, tenant: Uuid, queue: &str) -> Result<bool, DbError> {
        let row = self
            .one(
                "SELECT queen.ephemeral_delete_v1($1::text, $2::uuid)",
                &[&queue, &tenant],
            )
            .await?;
        get(&row, 0)
    }

    /// `queen.ephemeral_declared_v1`: every tenant's declarations.
    pub async fn ephemeral_declared(&self) -> Result<Vec<Declared>, DbError> {
        self.json("SELECT queen.ephemeral_declared_v1()", &[]).await
    }
}
