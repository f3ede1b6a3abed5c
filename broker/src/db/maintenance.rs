//! The maintenance loop's own connection (outside the request pool, so a saturated pool
//! never starves retention, and a run never takes a request's slot).

use queen_log::wire::MaintenanceReport;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Margin of the maintenance connection's `statement_timeout` over the time budget: a
/// run checks its budget between steps, so the last step may end after it.
const TIMEOUT_MARGIN_MS: u64 = 30_000;

/// A connection opened on first use and again after any failure.
pub struct MaintenanceConn {
    url: String,
    budget_ms: u64,
    client: Option<Client>,
}

impl MaintenanceConn {
    /// Not connected yet: the first [`MaintenanceConn::run`] connects to `url`.
    pub fn new(url: &str, budget_ms: u64) -> Self {
        MaintenanceConn {
            url: url.to_string(),
            budget_ms,
            client: None,
        }
    }

    /// One `CALL queen.run_maintenance(budget, max_rows, NULL)`, connecting first when
    /// there is no open connection; a failure drops the connection. A simple-protocol
    /// query: the procedure COMMITs between steps, which PostgreSQL allows only when the
    /// CALL runs as its own top-level statement.
    pub async fn run(&mut self, max_rows: u32) -> Result<MaintenanceReport, String> {
        let r = self.run_inner(max_rows).await;
        if r.is_err() {
            self.client = None;
        }
        r
    }

    async fn run_inner(&mut self, max_rows: u32) -> Result<MaintenanceReport, String> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(self.connect().await?);
        }
        let client = self.client.as_ref().expect("connected above");
        let sql = format!(
            "CALL queen.run_maintenance({}, {max_rows}, NULL)",
            self.budget_ms
        );
        let rows = client.simple_query(&sql).await.map_err(|e| e.to_string())?;
        let text = rows
            .iter()
            .find_map(|m| match m {
                SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .ok_or("run_maintenance returned no report")?;
        serde_json::from_str(&text)
            .map_err(|e| format!("unreadable maintenance report {text}: {e}"))
    }

    async fn connect(&self) -> Result<Client, String> {
        let timeout = self.budget_ms.saturating_add(TIMEOUT_MARGIN_MS);
        own_connection(&self.url, "queen-broker maintenance", timeout).await
    }
}

/// A connection outside the pool for a loop of its own (maintenance, the timer
/// sweeper), named for `pg_stat_activity`, with its own `statement_timeout`.
pub async fn own_connection(url: &str, name: &str, timeout_ms: u64) -> Result<Client, String> {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("{name} connection: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("own connection closed: {e}");
        }
    });
    client
        .batch_execute(&format!(
            "SET application_name = '{name}'; SET statement_timeout = {timeout_ms}"
        ))
        .await
        .map_err(|e| format!("{name} connection setup: {e}"))?;
    Ok(client)
}
