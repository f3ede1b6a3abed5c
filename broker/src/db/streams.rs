//! Streams (docs/decisions.md, "Streams"): the three functions of Queen's `/streams/v1`
//! on a pooled connection, one request per call (the extension also takes Queen's merged
//! form, for psql and other brokers).

use queen_log::streams::{CycleRequest, RegisterRequest, StateGetRequest};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::{Conn, DbError};

fn body<T: Serialize>(what: &str, r: &T) -> Result<Value, DbError> {
    serde_json::to_value(r).map_err(|e| DbError::Unreadable(format!("{what}: {e}")))
}

impl Conn {
    /// `queen.streams_register_query_v1`: the registration's answer (a conflict is one).
    pub async fn streams_register(
        &self,
        r: &RegisterRequest,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        let p = body("register", r)?;
        self.json(
            "SELECT queen.streams_register_query_v1($1::jsonb, $2::uuid)",
            &[&p, &tenant],
        )
        .await
    }

    /// `queen.streams_state_get_v1`: `{success, rows}`.
    pub async fn streams_state_get(
        &self,
        r: &StateGetRequest,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        let p = body("state_get", r)?;
        self.json(
            "SELECT queen.streams_state_get_v1($1::jsonb, $2::uuid)",
            &[&p, &tenant],
        )
        .await
    }

    /// `queen.streams_cycle_v1`: the cycle's result; a refused cycle is a result with
    /// `success: false` (nothing written), a transient failure an error.
    pub async fn streams_cycle(&self, r: &CycleRequest, tenant: Uuid) -> Result<Value, DbError> {
        let p = body("cycle", r)?;
        self.json(
            "SELECT queen.streams_cycle_v1($1::jsonb, $2::uuid)",
            &[&p, &tenant],
        )
        .await
    }

    /// `queen.streams_delete_query_v1`: whether the query existed.
    pub async fn streams_delete_query(&self, name: &str, tenant: Uuid) -> Result<bool, DbError> {
        let row = self
            .one(
                "SELECT queen.streams_delete_query_v1($1, $2::uuid)",
                &[&name, &tenant],
            )
            .await?;
        super::get(&row, 0)
    }
}
