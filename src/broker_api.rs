//! The broker-facing SQL API written in Rust (the rest is sql/broker_api.sql): what the
//! broker needs besides the log contract, so that it calls functions only and never reads
//! a table (its role has no SELECT on them).

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;

use crate::db::{default_tenant, find_partition_by_id, required};
use crate::pop::{max_partitions, pop_named, pop_resolved, request, rows, PopRequest, Target};

/// The broker's pop (docs/broker-contract.md §1): a partition pop when `p_partition` is given, else a
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
    let req = |queue_lease: i32| {
        broker_request(
            queue_lease,
            p_group,
            p_budget,
            p_lease_seconds,
            p_worker,
            p_auto_ack,
            p_sub_mode,
            p_sub_from,
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

/// The arguments of a broker pop, checked; the lease is the queue's lease time unless a
/// positive one was asked for.
fn broker_request<'a>(
    queue_lease: i32,
    group: Option<&'a str>,
    budget: Option<i32>,
    lease_seconds: Option<i32>,
    worker: Option<&'a str>,
    auto_ack: Option<bool>,
    sub_mode: Option<&'a str>,
    sub_from: Option<&'a str>,
) -> PopRequest<'a> {
    let lease = lease_seconds.filter(|s| *s >= 1).unwrap_or(queue_lease);
    request(
        group,
        budget,
        Some(lease),
        worker,
        auto_ack,
        sub_mode,
        sub_from,
        false,
    )
}

/// A partition pop addressed by partition id (pushed down to the partition's worker on Citus, docs/citus.md): broker_pop_v1's partition pop
/// and its rows, for a caller that knows the id. It touches that partition's rows only,
/// so on a Citus cluster it is delegated to the worker holding the partition
/// (`queen.distribute()` registers it with p_partition_id as the distribution argument).
/// A partition that does not exist or belongs to another tenant serves nothing.
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
    p_tenant: default!(Option<Uuid>, "'00000000-0000-0000-0000-000000000001'"),
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
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let req = |queue_lease: i32| {
        broker_request(
            queue_lease,
            p_group,
            p_budget,
            p_lease_seconds,
            p_worker,
            p_auto_ack,
            p_sub_mode,
            p_sub_from,
        )
    };
    req(1); // bad arguments are refused whether or not the partition exists
    TableIterator::new(rows(Spi::connect_mut(|c| {
        match find_partition_by_id(c, tenant, pid) {
            Some((p, name)) => pop_resolved(c, &p, name, req),
            None => Vec::new(),
        }
    })))
}
