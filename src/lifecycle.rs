//! Retention (docs/contract.md §13), the glue: one bounded step for one partition, under that
//! partition's row lock (the same lock, taken first, as a push). `queen_log::lifecycle`
//! decides what goes and what a lagging cursor loses; this loads rows and writes.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::lifecycle::{evict, new_log_start, retention_prefix, Rules, SegmentAge};
use queen_log::wire::RetentionStep;

use crate::db::{
    bad_param, col, ensure_leases, jsonb, lock_cursor, micros, q, required, write_cursor, OrRaise,
};

/// The partition's row, locked: (log_start, last_offset).
fn lock_partition(client: &mut SpiClient<'_>, pid: Uuid) -> Option<(i64, i64)> {
    q(
        client,
        "SELECT log_start, last_offset FROM queen.log_partitions WHERE id = $1 FOR NO KEY UPDATE",
        &[pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| {
        (
            col(&r, 1, "log_partitions.log_start"),
            col(&r, 2, "log_partitions.last_offset"),
        )
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

/// What rule 2 counts as consumed: MIN(committed) of the partition's cursors; None (so
/// nothing is consumed) when it has none, or when a group subscribed to the queue has no
/// cursor on this partition yet (it still needs everything here).
fn min_committed(client: &SpiClient<'_>, pid: Uuid) -> Option<i64> {
    q(
        client,
        "SELECT CASE WHEN EXISTS (
                    SELECT 1 FROM queen.consumer_groups_metadata m
                      JOIN queen.log_partitions p ON p.queue_id = m.queue_id AND p.id = $1
                     WHERE NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                        WHERE c.partition_id = $1 AND c.consumer_group = m.consumer_group))
                THEN NULL
                ELSE (SELECT min(committed) FROM queen.log_consumers WHERE partition_id = $1) END",
        &[pid.into()],
    )
    .or_raise()
    .first()
    .get_one::<i64>()
    .or_raise()
}

/// Cursors left below the new log start move up, their lease rows locked in the global
/// lock order (group bytewise); returns the messages they lost.
fn evict_cursors(client: &mut SpiClient<'_>, pid: Uuid, log_start: i64) -> i64 {
    let groups = || {
        q(
            client,
            "SELECT consumer_group FROM queen.log_consumers
              WHERE partition_id = $1 AND committed < $2 - 1
              ORDER BY consumer_group COLLATE \"C\"",
            &[pid.into(), log_start.into()],
        )
        .or_raise()
        .map(|r| col::<String>(&r, 1, "log_consumers.consumer_group"))
        .collect::<Vec<String>>()
    };
    let behind = groups();
    if behind.is_empty() {
        return 0;
    }
    let names: Vec<&str> = behind.iter().map(String::as_str).collect();
    ensure_leases(client, pid, &names);
    let mut lost = 0;
    for group in &behind {
        let Some(cur) = lock_cursor(client, pid, group) else {
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

/// One retention step (docs/contract.md §13).
fn step(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    all_cutoff: Option<TimestampWithTimeZone>,
    completed_cutoff: Option<TimestampWithTimeZone>,
    max_rows: i32,
) -> RetentionStep {
    let Some((log_start, last_offset)) = lock_partition(client, pid) else {
        return RetentionStep {
            deleted: 0,
            messages: 0,
            expired: 0,
            expired_messages: 0,
            new_log_start: None,
            evicted: 0,
            done: true,
        };
    };
    // One more than can go, so that the new log start is known.
    let segs = oldest_segments(client, pid, i64::from(max_rows) + 1);
    let rules = Rules {
        all_cutoff_us: all_cutoff.map(micros),
        completed_cutoff_us: completed_cutoff.map(micros),
        min_committed: completed_cutoff.and_then(|_| min_committed(client, pid)),
    };
    let prefix = retention_prefix(&segs, rules, max_rows as usize);
    let gone = &segs[..prefix.len];
    let count = |s: &[SegmentAge]| s.iter().map(|s| s.end - s.base + 1).sum::<i64>();
    if let Some(last) = gone.last() {
        q(
            client,
            "DELETE FROM queen.log_segments WHERE partition_id = $1 AND base_offset <= $2",
            &[pid.into(), last.base.into()],
        )
        .or_raise();
    }
    let start = new_log_start(&segs, prefix.len, log_start, last_offset);
    if start != log_start {
        q(
            client,
            "UPDATE queen.log_partitions SET log_start = $2 WHERE id = $1",
            &[pid.into(), start.into()],
        )
        .or_raise();
    }
    let evicted = if gone.is_empty() {
        0
    } else {
        evict_cursors(client, pid, start)
    };
    RetentionStep {
        deleted: gone.len() as i64,
        messages: count(gone),
        expired: prefix.expired as i64,
        // The expired segments are the prefix's tail: rule 2 alone stopped before them.
        expired_messages: count(&gone[prefix.len - prefix.expired..]),
        new_log_start: Some(start),
        evicted,
        done: prefix.len < max_rows as usize,
    }
}

/// `queen.log_retention_step_v1` (docs/contract.md §13): at most p_max_rows whole segments from
/// the low end of one partition. A NULL cutoff disables its rule.
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
