//! Retention (docs/contract.md §13), the glue: one bounded step for one partition, under that
//! partition's row lock (the same lock, taken first, as a push). `queen_log::lifecycle`
//! decides what goes and what a lagging cursor loses; this loads rows and writes.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::lifecycle::{
    clamp_cutoff, evict, new_log_start, pending_loss, retention_prefix, Rules, SegmentAge,
};
use queen_log::pop::{recorded_start, seed_offset, Start};
use queen_log::wire::RetentionStep;

use crate::db::{
    bad_param, col, ensure_leases, jsonb, micros, now, q, read_locked, required, write_cursor,
    OrRaise,
};

/// The partition's row, locked, with its queue's retention policy (seconds, 0 = off).
struct Locked {
    log_start: i64,
    last_offset: i64,
    retention: i64,
    completed_retention: i64,
}

/// Lock the partition's row, the step's first lock: a pop's cursor creation takes
/// FOR SHARE there, which conflicts, so a cursor is created either before the step (which
/// then sees and evicts it) or after it (seeded from the new log start). Lease rows come
/// after it only with SKIP LOCKED (lock_behind). docs/decisions.md, "Lock order".
fn lock_partition(client: &mut SpiClient<'_>, pid: Uuid) -> Option<Locked> {
    q(
        client,
        "SELECT p.log_start, p.last_offset, COALESCE(q.retention_seconds, 0)::int8,
                COALESCE(q.completed_retention_seconds, 0)::int8
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = $1 FOR NO KEY UPDATE OF p",
        &[pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| Locked {
        log_start: col(&r, 1, "log_partitions.log_start"),
        last_offset: col(&r, 2, "log_partitions.last_offset"),
        retention: col(&r, 3, "queues.retention_seconds"),
        completed_retention: col(&r, 4, "queues.completed_retention_seconds"),
    })
}

/// The oldest `n` segments (metadata only: blobs are never read by retention).
fn oldest_segments(client: &SpiClient<'_>, pid: Uuid, n: i64) -> Vec<SegmentAge> {
    q(
        client,
        "SELECT base_offset, end_offset, created_at FROM queen.log_segments
          WHERE partition_id = $1 ORDER BY base_offset LIMIT $2",
        &[pid.into(), n.into()],
    )
    .or_raise()
    .map(|r| SegmentAge {
        base: col(&r, 1, "log_segments.base_offset"),
        end: col(&r, 2, "log_segments.end_offset"),
        created_us: micros(col(&r, 3, "log_segments.created_at")),
    })
    .collect()
}

/// A group registered on the queue (consumer_groups_metadata) without a cursor on this
/// partition yet, and the committed offset its first contact would seed it at (its
/// subscription's start: 'all' from the log start, 'new'/'timestamp' from the first
/// segment created at or after its instant). docs/contract.md §13; docs/decisions.md,
/// "Rule 2 and a group that has never read a partition".
struct Pending {
    group: String,
    seed: i64,
}

fn pending_groups(
    client: &SpiClient<'_>,
    pid: Uuid,
    log_start: i64,
    last_offset: i64,
) -> Vec<Pending> {
    let rows: Vec<(String, String, Option<TimestampWithTimeZone>)> = q(
        client,
        "SELECT m.consumer_group, m.subscription_mode, m.subscription_timestamp
           FROM queen.consumer_groups_metadata m
           JOIN queen.log_partitions p ON p.queue_id = m.queue_id AND p.id = $1
          WHERE NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                             WHERE c.partition_id = $1 AND c.consumer_group = m.consumer_group)
          ORDER BY m.consumer_group COLLATE \"C\"",
        &[pid.into()],
    )
    .or_raise()
    .map(|r| {
        (
            col(&r, 1, "consumer_groups_metadata.consumer_group"),
            col(&r, 2, "consumer_groups_metadata.subscription_mode"),
            r.get::<TimestampWithTimeZone>(3).or_raise(),
        )
    })
    .collect();
    rows.into_iter()
        .map(|(group, mode, ts)| {
            let start = recorded_start(&mode, ts);
            let since = match start {
                Start::Since(t) => first_base_since(client, pid, t),
                _ => None,
            };
            Pending {
                group,
                seed: seed_offset(&start, log_start, last_offset, since),
            }
        })
        .collect()
}

/// The base offset of the first segment created at or after `t`.
fn first_base_since(client: &SpiClient<'_>, pid: Uuid, t: TimestampWithTimeZone) -> Option<i64> {
    q(
        client,
        "SELECT base_offset FROM queen.log_segments
          WHERE partition_id = $1 AND created_at >= $2 ORDER BY base_offset LIMIT 1",
        &[pid.into(), t.into()],
    )
    .or_raise()
    .next()
    .map(|r| col(&r, 1, "log_segments.base_offset"))
}

/// What rule 2 counts as consumed: the least of the partition's cursors' committed
/// offsets and of the seeds of the groups registered without a cursor here (a group that
/// has never read this partition keeps what its subscription still needs); None, so
/// nothing counts as consumed, when there is neither.
fn min_committed(client: &SpiClient<'_>, pid: Uuid, pending: &[Pending]) -> Option<i64> {
    let cursors = q(
        client,
        "SELECT min(committed) FROM queen.log_consumers WHERE partition_id = $1",
        &[pid.into()],
    )
    .or_raise()
    .first()
    .get_one::<i64>()
    .or_raise();
    cursors
        .into_iter()
        .chain(pending.iter().map(|p| p.seed))
        .min()
}

/// The registered groups without a cursor here that the new log start leaves something
/// behind for get their cursor now, at `log_start − 1`, with what they lost counted as
/// evicted: every eviction is counted for every group that could have read it. No pop can
/// create the same cursor meanwhile (it locks the partition row first, FOR SHARE).
fn evict_pending(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    log_start: i64,
    pending: &[Pending],
) -> i64 {
    let mut lost = 0;
    for p in pending {
        let Some(n) = pending_loss(p.seed, log_start) else {
            continue;
        };
        q(
            client,
            "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed, evicted)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            &[
                pid.into(),
                p.group.as_str().into(),
                (log_start - 1).into(),
                n.into(),
            ],
        )
        .or_raise();
        ensure_leases(client, pid, &[p.group.as_str()]);
        lost += n;
    }
    lost
}

/// The groups whose cursors a new log start leaves behind, their lease rows locked FOR
/// UPDATE SKIP LOCKED in the global order (group bytewise): None when one is locked
/// elsewhere (an ack or a pop in flight, or a queue deletion, which takes lease rows
/// before partition rows). The step holds the partition row, so it never waits for a
/// lease row (docs/decisions.md, "Lock order"); it reports busy and tries again on the
/// next run (docs/contract.md §13).
fn lock_behind(client: &mut SpiClient<'_>, pid: Uuid, log_start: i64) -> Option<Vec<String>> {
    let behind: Vec<String> = q(
        client,
        "SELECT consumer_group FROM queen.log_consumers
          WHERE partition_id = $1 AND committed < $2 - 1
          ORDER BY consumer_group COLLATE \"C\"",
        &[pid.into(), log_start.into()],
    )
    .or_raise()
    .map(|r| col::<String>(&r, 1, "log_consumers.consumer_group"))
    .collect();
    if behind.is_empty() {
        return Some(behind);
    }
    let names: Vec<&str> = behind.iter().map(String::as_str).collect();
    ensure_leases(client, pid, &names);
    let locked = q(
        client,
        "SELECT count(*) FROM (SELECT 1 FROM queen.log_leases
                                WHERE partition_id = $1 AND consumer_group = ANY($2)
                                ORDER BY consumer_group COLLATE \"C\"
                                FOR UPDATE SKIP LOCKED) l",
        &[pid.into(), names.into()],
    )
    .or_raise()
    .first()
    .get_one::<i64>()
    .or_raise()
    .unwrap_or(0);
    (locked == behind.len() as i64).then_some(behind)
}

/// The locked cursors left below the new log start move up; returns the messages they
/// lost.
fn evict_cursors(client: &mut SpiClient<'_>, pid: Uuid, log_start: i64, behind: &[String]) -> i64 {
    let mut lost = 0;
    for group in behind {
        // Read after the lock: the state the last holder committed.
        let Some(cur) = read_locked(client, pid, group) else {
            continue;
        };
        let Some((next, n)) = evict(&cur.state, log_start) else {
            continue;
        };
        write_cursor(client, pid, group, &cur.state, &next);
        q(
            client,
            "UPDATE queen.log_consumers SET evicted = evicted + $3
              WHERE partition_id = $1 AND consumer_group = $2",
            &[pid.into(), group.as_str().into(), n.into()],
        )
        .or_raise();
        lost += n;
    }
    lost
}

/// A step that found a lease row it needs locked: nothing deleted, the partition left for
/// the next run (`busy`).
fn busy(log_start: i64, clamped: bool) -> RetentionStep {
    RetentionStep {
        deleted: 0,
        messages: 0,
        expired: 0,
        expired_messages: 0,
        new_log_start: Some(log_start),
        evicted: 0,
        traces: 0,
        done: true,
        clamped,
        busy: true,
    }
}

/// The traces of the messages below `start` go with them (docs/decisions.md, "Traces").
fn delete_traces_below(client: &mut SpiClient<'_>, pid: Uuid, start: i64) -> i64 {
    q(
        client,
        "DELETE FROM queen.log_traces WHERE partition_id = $1 AND \"offset\" < $2 RETURNING 1",
        &[pid.into(), start.into()],
    )
    .or_raise()
    .len() as i64
}

/// One retention step (docs/contract.md §13), its cutoffs clamped to the queue's policy.
fn step(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    all_cutoff: Option<TimestampWithTimeZone>,
    completed_cutoff: Option<TimestampWithTimeZone>,
    max_rows: i32,
) -> RetentionStep {
    let Some(part) = lock_partition(client, pid) else {
        return RetentionStep {
            deleted: 0,
            messages: 0,
            expired: 0,
            expired_messages: 0,
            new_log_start: None,
            evicted: 0,
            traces: 0,
            done: true,
            clamped: false,
            busy: false,
        };
    };
    let (log_start, last_offset) = (part.log_start, part.last_offset);
    let now_us = micros(now());
    let (all_cut, all_clamped) = clamp_cutoff(all_cutoff.map(micros), part.retention, now_us);
    let (done_cut, done_clamped) = clamp_cutoff(
        completed_cutoff.map(micros),
        part.completed_retention,
        now_us,
    );
    // One more than can go, so that the new log start is known.
    let segs = oldest_segments(client, pid, i64::from(max_rows) + 1);
    let pending = pending_groups(client, pid, log_start, last_offset);
    let rules = Rules {
        all_cutoff_us: all_cut,
        completed_cutoff_us: done_cut,
        min_committed: done_cut.and_then(|_| min_committed(client, pid, &pending)),
    };
    let prefix = retention_prefix(&segs, rules, max_rows as usize);
    let gone = &segs[..prefix.len];
    let count = |s: &[SegmentAge]| s.iter().map(|s| s.end - s.base + 1).sum::<i64>();
    let start = new_log_start(&segs, prefix.len, log_start, last_offset);
    let behind = if gone.is_empty() {
        Vec::new()
    } else {
        match lock_behind(client, pid, start) {
            Some(b) => b,
            None => return busy(log_start, all_clamped || done_clamped),
        }
    };
    if let Some(last) = gone.last() {
        q(
            client,
            "DELETE FROM queen.log_segments WHERE partition_id = $1 AND base_offset <= $2",
            &[pid.into(), last.base.into()],
        )
        .or_raise();
    }
    if start != log_start {
        q(
            client,
            "UPDATE queen.log_partitions SET log_start = $2 WHERE id = $1",
            &[pid.into(), start.into()],
        )
        .or_raise();
    }
    let traces = if start != log_start {
        delete_traces_below(client, pid, start)
    } else {
        0
    };
    let evicted = if gone.is_empty() {
        0
    } else {
        evict_cursors(client, pid, start, &behind) + evict_pending(client, pid, start, &pending)
    };
    RetentionStep {
        deleted: gone.len() as i64,
        messages: count(gone),
        expired: prefix.expired as i64,
        // The expired segments are the prefix's tail: rule 2 alone stopped before them.
        expired_messages: count(&gone[prefix.len - prefix.expired..]),
        new_log_start: Some(start),
        evicted,
        traces,
        done: prefix.len < max_rows as usize,
        clamped: all_clamped || done_clamped,
        busy: false,
    }
}

/// `queen.log_retention_step_v1` (docs/contract.md §13): at most p_max_rows whole segments from
/// the low end of one partition. A NULL cutoff disables its rule; a cutoff later than the
/// queue's policy allows is clamped to it (`clamped` says so).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_retention_step_v1(
    p_pid: Option<Uuid>,
    p_all_cutoff: Option<TimestampWithTimeZone>,
    p_completed_cutoff: Option<TimestampWithTimeZone>,
    p_max_rows: Option<i32>,
) -> JsonB {
    let pid = required(p_pid, "p_pid");
    let max_rows = required(p_max_rows, "p_max_rows");
    if max_rows < 1 {
        bad_param(format!("p_max_rows must be >= 1, got {max_rows}"));
    }
    jsonb(&Spi::connect_mut(|c| {
        step(c, pid, p_all_cutoff, p_completed_cutoff, max_rows)
    }))
}

/// What one `maxWaitTimeSeconds` step did: messages the partition's groups lost, or
/// `busy` when a lease row it needed was locked (nothing changed; the next run retries).
#[derive(serde::Serialize)]
struct WaitEviction {
    evicted: i64,
    busy: bool,
}

/// One `maxWaitTimeSeconds` step for one partition (docs/decisions.md, "Queue options";
/// Queen's eviction service): every group, and every group registered on the queue without
/// a cursor here yet, whose next message has waited longer than the queue's
/// maxWaitTimeSeconds moves past every message that old, and its `evicted` count says how
/// many it lost. Nothing is deleted (retention decides what the log keeps). Locks as a
/// retention step: the partition row first, the lease rows of the groups behind only with
/// SKIP LOCKED. The floor is the first segment created at or after the cutoff above the
/// slowest group (an index range from there), or past the last offset.
fn wait_eviction(client: &mut SpiClient<'_>, pid: Uuid) -> WaitEviction {
    let idle = WaitEviction {
        evicted: 0,
        busy: false,
    };
    let Some(row) = q(
        client,
        "SELECT p.log_start, p.last_offset, q.max_wait_time_seconds
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = $1 FOR NO KEY UPDATE OF p",
        &[pid.into()],
    )
    .or_raise()
    .next() else {
        return idle;
    };
    let log_start: i64 = col(&row, 1, "log_partitions.log_start");
    let last_offset: i64 = col(&row, 2, "log_partitions.last_offset");
    let max_wait: i32 = col(&row, 3, "queues.max_wait_time_seconds");
    if max_wait <= 0 {
        return idle;
    }
    let pending = pending_groups(client, pid, log_start, last_offset);
    let Some(slowest) = min_committed(client, pid, &pending) else {
        return idle;
    };
    let Some(floor) = crate::db::expiry_floor(client, pid, slowest, last_offset, max_wait) else {
        return idle;
    };
    let Some(behind) = lock_behind(client, pid, floor) else {
        return WaitEviction {
            evicted: 0,
            busy: true,
        };
    };
    WaitEviction {
        evicted: evict_cursors(client, pid, floor, &behind)
            + evict_pending(client, pid, floor, &pending),
        busy: false,
    }
}

/// `queen.expired_v1(p_created, p_seconds)`: whether a message created at `p_created`
/// has, now, waited longer than `p_seconds` (`ttl`, `maxWaitTimeSeconds`; 0 or less:
/// never; a NULL creation time: no message, false). The expiry rule of
/// `queen_log::lifecycle`, for `queen.wait_eviction_plan_v1` (the pop and the
/// maintenance step apply the same rule in Rust). VOLATILE: it reads the clock.
#[pg_extern(volatile, parallel_safe)]
#[search_path(pg_catalog, pg_temp)]
fn expired_v1(p_created: Option<TimestampWithTimeZone>, p_seconds: Option<i32>) -> bool {
    match (p_created, p_seconds) {
        (Some(created), Some(seconds)) => queen_log::lifecycle::expired(
            crate::db::micros(created),
            crate::db::micros(now()),
            seconds,
        ),
        _ => false,
    }
}

/// `queen.log_wait_eviction_step_v1(p_pid)`: one `maxWaitTimeSeconds` step for one
/// partition, on its queue's setting (run_maintenance calls it for the partitions
/// `queen.wait_eviction_plan_v1` names). `{evicted, busy}`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_wait_eviction_step_v1(p_pid: Option<Uuid>) -> JsonB {
    let pid = required(p_pid, "p_pid");
    jsonb(&Spi::connect_mut(|c| wait_eviction(c, pid)))
}
