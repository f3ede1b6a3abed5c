//! The broker-facing SQL API written in Rust (the rest is sql/broker_api.sql): what the
//! broker needs besides the log contract, so that it calls functions only and never reads
//! a table (its role has no SELECT on them).

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;

use queen_log::conventions::queue_lease_time;
use queen_log::options::normalized;

use crate::db::{bad_param, required};
use crate::pop::{max_partitions, pop, LeaseRule, PopRequest, PopRow, Target};

/// The broker's pop (docs/broker-contract.md §1): a partition pop when `p_partition` is
/// given, else a queue-level pop of up to `p_max_partitions` ready partitions. `p_lease_seconds` NULL or
/// below 1 means the queue's lease_time. Each row carries the delivery attempt of its
/// partition's lease (1 under auto-ack), so the broker needs no second statement.
// The SQL signature (compatibility) fixes the argument list and the set-returning type,
// which pgrx needs spelled inline (its macro cannot see through a type alias).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn broker_pop_v1(
    p_tenant: Option<Uuid>,
    p_queue: Option<&str>,
    p_partition: Option<&str>,
    p_group: Option<&str>,
    p_budget: Option<i32>,
    p_lease_seconds: Option<i32>,
    p_worker: Option<&str>,
    p_auto_ack: default!(Option<bool>, false),
    p_sub_mode: default!(Option<&str>, "'all'"),
    p_sub_from: default!(Option<&str>, "''"),
    p_max_partitions: default!(Option<i32>, 1),
    p_conflation: default!(Option<bool>, "NULL"),
    p_hints: default!(Option<Vec<Option<Uuid>>>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(r_partition_id, Uuid),
        name!(r_partition, String),
        name!(r_base, i64),
        name!(r_start_idx, i32),
        name!(r_take, i32),
        name!(r_msg_count, i32),
        name!(r_created_at, TimestampWithTimeZone),
        name!(r_blob, Vec<u8>),
        name!(r_attempt, i32),
    ),
> {
    let hints: Vec<Uuid> = p_hints.unwrap_or_default().into_iter().flatten().collect();
    let target = match (p_queue, p_partition) {
        (Some(queue), Some(partition)) => Target::Partition { queue, partition },
        (queue, None) => {
            let max_partitions = max_partitions(p_max_partitions);
            queue.map_or(Target::Nothing, |queue| Target::Queue {
                queue,
                max_partitions,
                hints: &hints,
            })
        }
        (None, Some(_)) => Target::Nothing,
    };
    let rows = pop(&PopRequest {
        tenant: p_tenant,
        target,
        group: p_group,
        budget: p_budget,
        lease_seconds: p_lease_seconds,
        lease_rule: LeaseRule::QueueUnlessPositive,
        worker: p_worker,
        auto_ack: p_auto_ack,
        sub_mode: p_sub_mode,
        sub_from: p_sub_from,
        conflate: p_conflation,
    });
    TableIterator::new(rows.into_iter().map(PopRow::columns))
}

/// A partition pop addressed by partition id: broker_pop_v1's partition pop and its rows,
/// for a caller that knows the id. It touches that partition's rows only, so on a Citus
/// cluster it is delegated to the worker holding the partition (`queen.distribute()`
/// registers it with p_partition_id as the distribution argument; docs/citus.md). A
/// partition that does not exist or belongs to another tenant serves nothing.
// The SQL signature (compatibility) fixes the argument list and the set-returning type,
// which pgrx needs spelled inline (its macro cannot see through a type alias).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_pop_at_v1(
    p_partition_id: Option<Uuid>,
    p_group: Option<&str>,
    p_budget: Option<i32>,
    p_lease_seconds: Option<i32>,
    p_worker: Option<&str>,
    p_auto_ack: default!(Option<bool>, false),
    p_sub_mode: default!(Option<&str>, "'all'"),
    p_sub_from: default!(Option<&str>, "''"),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> TableIterator<
    'static,
    (
        name!(r_partition_id, Uuid),
        name!(r_partition, String),
        name!(r_base, i64),
        name!(r_start_idx, i32),
        name!(r_take, i32),
        name!(r_msg_count, i32),
        name!(r_created_at, TimestampWithTimeZone),
        name!(r_blob, Vec<u8>),
        name!(r_attempt, i32),
    ),
> {
    let pid = required(p_partition_id, "p_partition_id");
    let rows = pop(&PopRequest {
        tenant: p_tenant,
        target: Target::PartitionId(pid),
        group: p_group,
        budget: p_budget,
        lease_seconds: p_lease_seconds,
        lease_rule: LeaseRule::QueueUnlessPositive,
        worker: p_worker,
        auto_ack: p_auto_ack,
        sub_mode: p_sub_mode,
        sub_from: p_sub_from,
        conflate: None,
    });
    TableIterator::new(rows.into_iter().map(PopRow::columns))
}

/// `queen.effective_lease_time(lease_time)`: the lease a pop of a queue whose
/// `queues.lease_time` is `p_lease_time` grants when asked for none (NULL means 60, at
/// least 1). The one rule (`queen_log::conventions::queue_lease_time`), also for SQL:
/// queue_info_v1 reports it.
#[pg_extern(immutable, parallel_safe)]
#[search_path(pg_catalog, pg_temp)]
fn effective_lease_time(p_lease_time: Option<i32>) -> i32 {
    queue_lease_time(p_lease_time)
}

/// `queen.check_queue_options_v1(options)`: configure's options as stored, checked by the
/// one rule of `queen_log::options` (the broker applies it too): an unknown key, or a
/// value asking for behaviour not implemented, raises 22023 naming `options.<key>`.
/// `queen.configure_queue_v1` calls it first, so nothing is stored and ignored.
#[pg_extern(immutable, parallel_safe)]
#[search_path(pg_catalog, pg_temp)]
fn check_queue_options_v1(p_options: pgrx::JsonB) -> pgrx::JsonB {
    let Some(o) = p_options.0.as_object() else {
        bad_param("options must be a JSON object")
    };
    match normalized(o) {
        Ok(m) => pgrx::JsonB(serde_json::Value::Object(m)),
        Err(r) => bad_param(r.message),
    }
}
