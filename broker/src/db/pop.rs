//! The broker's pop (docs/contract.md §5; `src/broker_api.rs`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{get, Conn, DbError};

/// The arguments of one `broker_pop_v1` call.
pub struct PopArgs<'a> {
    pub tenant: Uuid,
    pub queue: &'a str,
    /// A partition pop when named, else up to `max_partitions` ready ones.
    pub partition: Option<&'a str>,
    /// The stored group name (the queue-mode group for queue mode).
    pub group: &'a str,
    pub batch: i32,
    /// None: the queue's lease_time.
    pub lease_seconds: Option<i32>,
    /// The lease id ("" under autoAck).
    pub worker: &'a str,
    pub auto_ack: bool,
    pub sub_mode: &'a str,
    pub sub_from: &'a str,
    pub max_partitions: i32,
    /// `Some(true)`: last-value delivery asked for (stored if the group registers now);
    /// None leaves it to the group's stored policy (docs/decisions.md, "Conflation").
    pub conflation: Option<bool>,
    /// Partitions a queue pop tries first (crate::engine::hints); ignored by a partition pop.
    pub hints: Vec<Uuid>,
}

/// One served slice of a segment.
pub struct PopSlice {
    pub pid: Uuid,
    pub partition: String,
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
    pub msg_count: i32,
    pub created_at: DateTime<Utc>,
    pub blob: Vec<u8>,
    /// The partition's delivery attempt (1 under autoAck).
    pub attempt: i32,
}

impl Conn {
    /// `queen.broker_pop_v1`: one pop, one statement, one round trip; each row carries
    /// its partition's delivery attempt.
    pub async fn broker_pop(&self, a: &PopArgs<'_>) -> Result<Vec<PopSlice>, DbError> {
        let rows = self
            .rows(
                "SELECT r_partition_id, r_partition, r_base, r_start_idx, r_take, r_msg_count,
                        r_created_at, r_blob, r_attempt
                   FROM queen.broker_pop_v1($1::uuid, $2::text, $3::text, $4::text, $5::int,
                        $6::int, $7::text, $8::bool, $9::text, $10::text, $11::int, $12::bool,
                        $13::uuid[])",
                &[
                    &a.tenant,
                    &a.queue,
                    &a.partition,
                    &a.group,
                    &a.batch,
                    &a.lease_seconds,
                    &a.worker,
                    &a.auto_ack,
                    &a.sub_mode,
                    &a.sub_from,
                    &a.max_partitions,
                    &a.conflation,
                    &a.hints,
                ],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(PopSlice {
                    pid: get(r, 0)?,
                    partition: get(r, 1)?,
                    base: get(r, 2)?,
                    start_idx: get(r, 3)?,
                    take: get(r, 4)?,
                    msg_count: get(r, 5)?,
                    created_at: get(r, 6)?,
                    blob: get(r, 7)?,
                    attempt: get(r, 8)?,
                })
            })
            .collect()
    }

    /// `queen.group_conflation_v1`: the group's stored conflation policy on the queue
    /// (false when it has none), what a conflating pop's answer echoes.
    pub async fn group_conflation(
        &self,
        tenant: Uuid,
        queue: &str,
        group: &str,
    ) -> Result<bool, DbError> {
        let row = self
            .one(
                "SELECT queen.group_conflation_v1($1::uuid, $2::text, $3::text)",
                &[&tenant, &queue, &group],
            )
            .await?;
        get(&row, 0)
    }
}
