//! Streams (docs/decisions.md, "Streams"): the functions of Queen's `/streams/v1` on a
//! pooled connection, one request per call (the extension also takes Queen's merged
//! form, for psql and other brokers).

use queen_log::streams::{
    is_fenced, is_refusal, CycleRequest, CycleResult, RegisterRequest, StateGetRequest,
};
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

    /// One cycle as one statement (`queen.streams_cycle_request_v1`: no subtransaction,
    /// the statement's own transaction is the cycle's); a refusal (queen_log::streams::
    /// is_refusal) is the result `success: false` with nothing written, a cycle fenced out
    /// by the state it read (is_fenced) the result `success: true, fenced` with nothing
    /// written, as `streams_cycle_v1` answers them; the database's state is an error (503).
    pub async fn streams_cycle(&self, r: &CycleRequest, tenant: Uuid) -> Result<Value, DbError> {
        let p = body("cycle", r)?;
        let e = match self
            .json::<Value>(
                "SELECT queen.streams_cycle_request_v1($1::jsonb, $2::uuid)",
                &[&p, &tenant],
            )
            .await
        {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if let Some(d) = e
            .server()
            .filter(|d| is_fenced(d.code().code(), d.message()))
        {
            return body("cycle result", &CycleResult::fenced(r, d.message()));
        }
        let refusal = e
            .server()
            .filter(|d| is_refusal(d.code().code()))
            .map(|d| (d.code().code().to_string(), d.message().to_string()));
        match refusal {
            Some((code, message)) => {
                let mut out = CycleResult::refused(r, message);
                out.sqlstate = Some(code);
                body("cycle result", &out)
            }
            None => Err(e),
        }
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
