//! Timers (docs/decisions.md, "Timers"): `timers_apply_v1`, `timers_get_v1`,
//! `timers_list_v1` on pooled connections, and the sweeper's `timers_fire_v1` on a
//! connection of its own (a saturated pool must not delay deliveries).

use queen_log::timers::{SweepReport, TimerOp, TimerResult};
use serde_json::Value;
use tokio_postgres::types::Json as PgJson;
use tokio_postgres::Client;
use uuid::Uuid;

use super::maintenance::own_connection;
use super::{Conn, DbError};

/// The sweeper's `statement_timeout`: one sweep delivers at most a thousand timers.
const SWEEP_TIMEOUT_MS: u64 = 30_000;

impl Conn {
    /// `queen.timers_apply_v1`: schedules, reschedules and cancels, index-aligned answers.
    pub async fn timers_apply(
        &self,
        ops: &[TimerOp],
        tenant: Uuid,
    ) -> Result<Vec<TimerResult>, DbError> {
        let ops = serde_json::to_value(ops)
            .map_err(|e| DbError::Unreadable(format!("timer ops: {e}")))?;
        self.json(
            "SELECT queen.timers_apply_v1($1::jsonb, $2::uuid)",
            &[&ops, &tenant],
        )
        .await
    }

    /// `queen.timers_get_v1`: one timer, or `{"found": false}`.
    pub async fn timer_get(&self, queue: &str, key: &str, tenant: Uuid) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.timers_get_v1($1::text, $2::text, $3::uuid)",
            &[&queue, &key, &tenant],
        )
        .await
    }

    /// `queen.timers_list_v1`: a keyset page of one queue's pending timers.
    pub async fn timers_list(
        &self,
        queue: &str,
        after: Option<&str>,
        limit: Option<i32>,
        tenant: Uuid,
    ) -> Result<Value, DbError> {
        self.json(
            "SELECT queen.timers_list_v1($1::text, $2::text, $3::int, $4::uuid)",
            &[&queue, &after, &limit, &tenant],
        )
        .await
    }
}

/// The sweeper's connection, opened on first use and again after any failure.
pub struct SweepConn {
    url: String,
    client: Option<Client>,
}

impl SweepConn {
    pub fn new(url: &str) -> Self {
        SweepConn {
            url: url.to_string(),
            client: None,
        }
    }

    /// One `queen.timers_fire_v1(limit)`; a failure drops the connection.
    pub async fn fire(&mut self, limit: i32) -> Result<SweepReport, String> {
        let r = self.fire_inner(limit).await;
        if r.is_err() {
            self.client = None;
        }
        r
    }

    async fn fire_inner(&mut self, limit: i32) -> Result<SweepReport, String> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            let c = own_connection(&self.url, "queen-broker timers", SWEEP_TIMEOUT_MS).await?;
            self.client = Some(c);
        }
        let client = self.client.as_ref().expect("connected above");
        let row = client
            .query_one("SELECT queen.timers_fire_v1($1::int)", &[&limit])
            .await
            .map_err(|e| e.to_string())?;
        let PgJson(report): PgJson<SweepReport> = row
            .try_get(0)
            .map_err(|e| format!("unreadable sweep report: {e}"))?;
        Ok(report)
    }
}
