//! The broker-facing SQL API written in Rust (the rest is sql/broker_api.sql): what the
//! broker needs besides the log contract, so that it calls functions only and never reads
//! a table (its role has no SELECT on them).

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;

use crate::db::{default_tenant, find_partition_ref, find_queue};
use crate::pop::{max_partitions, pop_partition, pop_queue, request, QueueServed};

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
    let max_partitions = max_partitions(p_max_partitions);
    let lease_or = |queue_lease: i32| p_lease_seconds.filter(|s| *s >= 1).or(Some(queue_lease));
    let req_with = |lease| {
        request(
            p_group, p_budget, lease, p_worker, p_auto_ack, p_sub_mode, p_sub_from, false,
        )
    };
    // Bad arguments are refused whether or not the queue exists.
    req_with(lease_or(1));
    let Some(queue) = p_queue else {
        return TableIterator::new(Vec::new());
    };
    let popped: Vec<QueueServed> = Spi::connect_mut(|c| match p_partition {
        Some(part) => {
            let Some(p) = find_partition_ref(c, tenant, queue, part) else {
                return Vec::new();
            };
            let req = req_with(lease_or(p.lease_time));
            pop_partition(c, p.id, p.queue_id, tenant, &req)
                .map(|served| QueueServed {
                    partition_id: p.id,
                    partition: part.to_string(),
                    served,
                })
                .into_iter()
                .collect()
        }
        None => {
            let Some((queue_id, lease_time)) = find_queue(c, tenant, queue) else {
                return Vec::new();
            };
            pop_queue(
                c,
                tenant,
                queue_id,
                max_partitions,
                &req_with(lease_or(lease_time)),
            )
        }
    });
    TableIterator::new(popped.into_iter().flat_map(|p| {
        let (pid, name, attempt) = (p.partition_id, p.partition, p.served.attempt);
        p.served.slices.into_iter().map(move |s| {
            (
                pid,
                name.clone(),
                s.base,
                s.start_idx,
                s.take,
                s.msg_count,
                s.created_at,
                s.blob,
                attempt,
            )
        })
    }))
}
