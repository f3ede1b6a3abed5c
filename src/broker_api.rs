//! The broker-facing SQL API written in Rust (the rest is sql/broker_api.sql): what the
//! broker needs besides the log contract, so that it calls functions only and never reads
//! a table (its role has no SELECT on them).

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;

use crate::db::default_tenant;
use crate::pop::{max_partitions, pop_named, request, rows, Target};

/// The broker's pop (broker.md §1): a partition pop when `p_partition` is given, else a
/// queue-level pop of up to `p_max_partitions` ready partitions. `p_lease_seconds` NULL or
/// below 1 means the queue's lease_time. Each row carries the delivery attempt of its
/// partition's lease (1 under auto-ack), so the broker needs no second statement.
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
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let target = match p_partition {
        Some(name) => Target::Partition(name),
        None => Target::Queue {
            max_partitions: max_partitions(p_max_partitions),
        },
    };
    // The queue's lease time unless a positive one was asked for.
    let req = |queue_lease: i32| {
        let lease = p_lease_seconds.filter(|s| *s >= 1).unwrap_or(queue_lease);
        request(
            p_group,
            p_budget,
            Some(lease),
            p_worker,
            p_auto_ack,
            p_sub_mode,
            p_sub_from,
            false,
        )
    };
    req(1); // bad arguments are refused whether or not the queue exists
    let Some(queue) = p_queue else {
        return TableIterator::new(Vec::new());
    };
    TableIterator::new(rows(Spi::connect_mut(|c| {
        pop_named(c, tenant, queue, target, req)
    })))
}
