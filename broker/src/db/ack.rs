//! Acks, leases and the transaction wire (docs/contract.md §6–§9).

use queen_log::wire::{HashAck, MultiAck, PositionalAck, Renewed, Reply, TxnWire, TxnWireRequest};
use tokio_postgres::types::Json as PgJson;
use uuid::Uuid;

use super::{get, Conn, DbError};

/// The arguments of a by-hash ack: one element per acked transactionId, in order.
pub struct ByHash<'a> {
    pub pid: Uuid,
    pub group: &'a str,
    /// The lease the items were delivered under, if the client sent one.
    pub worker: Option<&'a str>,
    pub hashes: Vec<&'a [u8]>,
    /// `queen_log::ack::Status` names.
    pub statuses: Vec<&'a str>,
    /// Each item's error text (a nack's reason), for the DLQ row a dlq verdict files.
    pub errors: Vec<Option<&'a str>>,
    /// The nack delay in seconds: the longest any item asked for; 0 = none.
    pub delay: i32,
}

/// One positional ack of a whole delivered batch (`log_ack_at_v1`, a row of
/// `log_ack_multi_v1`).
pub struct AckRow<'a> {
    pub pid: Uuid,
    pub group: &'a str,
    pub worker: &'a str,
    pub batch_end: i64,
    pub count: i32,
}

impl Conn {
    /// `queen.log_ack_by_hash_v2`: the authority (docs/contract.md §6.1) in one statement:
    /// a nack delay of `delay` seconds (0 = none), and a dlq verdict filed inside it with
    /// its error text built by the extension from the items' `errors` (docs/decisions.md,
    /// "Dead-letter filing").
    pub async fn log_ack_by_hash(&self, a: &ByHash<'_>) -> Result<Reply<HashAck>, DbError> {
        self.json(
            "SELECT queen.log_ack_by_hash_v2($1::uuid, $2::text, $3::text, $4::bytea[], \
             $5::text[], $6::text[], $7::int)",
            &[
                &a.pid,
                &a.group,
                &a.worker,
                &a.hashes,
                &a.statuses,
                &a.errors,
                &a.delay,
            ],
        )
        .await
    }

    /// `queen.log_ack_at_v1` with release: one positional ack of a whole delivered batch
    /// (docs/contract.md §6.2).
    pub async fn log_ack_at(&self, r: &AckRow<'_>) -> Result<Reply<PositionalAck>, DbError> {
        self.json(
            "SELECT queen.log_ack_at_v1($1::uuid, $2::text, $3::text, $4::bigint, true, $5::int)",
            &[&r.pid, &r.group, &r.worker, &r.batch_end, &r.count],
        )
        .await
    }

    /// `queen.log_ack_multi_v1`: many positional acks in one transaction, one verdict
    /// per row by input ordinal.
    pub async fn log_ack_multi(&self, rows: &[AckRow<'_>]) -> Result<MultiAck, DbError> {
        let pids: Vec<String> = rows.iter().map(|r| r.pid.to_string()).collect();
        let groups: Vec<&str> = rows.iter().map(|r| r.group).collect();
        let workers: Vec<&str> = rows.iter().map(|r| r.worker).collect();
        let ends: Vec<i64> = rows.iter().map(|r| r.batch_end).collect();
        let counts: Vec<i32> = rows.iter().map(|r| r.count).collect();
        self.json(
            "SELECT queen.log_ack_multi_v1($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[])",
            &[&pids, &groups, &ends, &workers, &counts],
        )
        .await
    }

    /// `queen.log_renew_lease_v1` (docs/contract.md §8).
    pub async fn log_renew_lease(&self, lease: &str, seconds: i32) -> Result<Renewed, DbError> {
        self.json(
            "SELECT queen.log_renew_lease_v1($1::text, $2::int)",
            &[&lease, &seconds],
        )
        .await
    }

    /// `queen.log_renew_lease_tenant_v1`: the tenancy gate and the renewal in one
    /// statement, so a foreign lease renews nothing and answers like an unknown one.
    pub async fn log_renew_lease_tenant(
        &self,
        lease: &str,
        seconds: i32,
        tenant: Uuid,
    ) -> Result<Renewed, DbError> {
        self.json(
            "SELECT queen.log_renew_lease_tenant_v1($1::text, $2::int, $3::uuid)",
            &[&lease, &seconds, &tenant],
        )
        .await
    }

    /// `queen.owned_partitions_v1`: which of `pids` belong to `tenant`.
    pub async fn owned_partitions(
        &self,
        pids: &[Uuid],
        tenant: Uuid,
    ) -> Result<Vec<Uuid>, DbError> {
        let rows = self
            .rows(
                "SELECT queen.owned_partitions_v1($1::uuid[], $2::uuid)",
                &[&pids, &tenant],
            )
            .await?;
        rows.iter().map(|r| get(r, 0)).collect()
    }

    /// `queen.cursor_worker_v1`: the worker holding the (partition, group) cursor's
    /// lease, if any.
    pub async fn cursor_worker(&self, pid: Uuid, group: &str) -> Result<Option<String>, DbError> {
        let row = self
            .one("SELECT queen.cursor_worker_v1($1, $2)", &[&pid, &group])
            .await?;
        get(&row, 0)
    }

    /// `queen.log_transaction_wire_v1`: pushes and acks in one transaction, all or
    /// nothing (docs/contract.md §9). A refusal is an error; see
    /// [`DbError::wire_refusal`].
    pub async fn log_transaction_wire(&self, req: &TxnWireRequest) -> Result<TxnWire, DbError> {
        self.json(
            "SELECT queen.log_transaction_wire_v1($1::jsonb)",
            &[&PgJson(req)],
        )
        .await
    }
}
