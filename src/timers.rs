//! Timers (docs/decisions.md, "Timers"; the rules in queen_log::timers): Queen 2.x's
//! scheduled messages. `queen.timers_apply_v1(ops, tenant)` schedules, reschedules and
//! cancels (also the transaction wire's rider); `queen.timers_fire_v1(limit)` delivers
//! the due ones. A delivery is one transaction: the due rows are locked SKIP LOCKED (two
//! sweepers never take the same timer), pushed through the ordinary push path (its dedup
//! window included) and deleted, so a timer arrives once or, when the transaction fails,
//! stays pending. The reads (`timers_get_v1`, `timers_list_v1`) are in sql/timers.sql.

use std::collections::HashSet;

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::encryption::is_envelope;
use queen_log::frame::Frame;
use queen_log::timers::{
    apply_order, check_ops, DeliveredTo, OpKind, SweepReport, TimerOp, TimerResult, TimerStatus,
    SWEEP_MAX,
};

use crate::db::{bad_param, col, default_tenant, jsonb, q, raise, required, OrRaise};
use crate::db::{clock_plus, find_queue, iso_ms};
use crate::push::{provision, push_groups, resolve, FrameGroup, Landed};

/// How long a timer that cannot be delivered waits before the next try (a plaintext
/// payload for a queue that now encrypts: the database cannot seal it).
const RETRY_AFTER_SECONDS: f64 = 60.0;
/// The pause a sweeper is told to take while another sweep holds the lock.
const BUSY_PAUSE_MS: i64 = 50;

/// Applies `ops` (checked first, nothing written on a refusal) as if one after another
/// in input order: each op sees what the earlier ones did, so schedule then cancel of
/// one key leaves it absent. They run in `apply_order` (by (queue, key), input order
/// within a key: the same answers) so that two calls on the same keys lock them in one
/// order; answers in input order.
pub fn apply(client: &mut SpiClient<'_>, tenant: Uuid, ops: &[TimerOp]) -> Vec<TimerResult> {
    check_ops(ops).unwrap_or_else(|e| bad_param(format!("QTIMER {e}")));
    for (i, op) in ops.iter().enumerate() {
        check_envelope(i, op);
    }
    let mut out: Vec<Option<TimerResult>> = vec![None; ops.len()];
    for i in apply_order(ops) {
        out[i] = Some(match ops[i].op {
            OpKind::Cancel => cancel(client, tenant, &ops[i]),
            OpKind::Schedule | OpKind::Reschedule => schedule(client, tenant, &ops[i]),
        });
    }
    out.into_iter().flatten().collect()
}

/// A payload flagged encrypted must be Queen's envelope, as a pushed frame must.
fn check_envelope(i: usize, op: &TimerOp) {
    let sealed = op.payload.as_ref().map(|p| p.get().as_bytes());
    if op.encrypted && !sealed.is_some_and(is_envelope) {
        bad_param(format!(
            "QTIMER operations[{i}]: the payload is flagged encrypted but is not an \
             encryption envelope {{\"encrypted\", \"iv\", \"authTag\"}}"
        ));
    }
}

/// The upsert: a new timer under the key, or the pending one replaced (its attempts and
/// last error cleared: a rescheduled timer is a new timer under an old name). The queue
/// and the partition are created here, as a push would create them, so that a delivery
/// never writes the shared tables (lock order: queues and partition names before timer
/// rows, everywhere; docs/decisions.md, "Timers").
fn schedule(client: &mut SpiClient<'_>, tenant: Uuid, op: &TimerOp) -> TimerResult {
    let target = resolve(client, tenant, &op.queue, op.partition(), None).or_else(|| {
        provision(client, tenant, &op.queue, op.partition());
        resolve(client, tenant, &op.queue, op.partition(), None)
    });
    let (Some(crate::push::Target { encrypts, .. }), Some(queue)) =
        (target, find_queue(client, tenant, &op.queue))
    else {
        raise(
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            format!(
                "QTIMER queue {} was deleted while this call scheduled into it; retry",
                op.queue
            ),
        );
    };
    let queue_id = queue.id;
    if encrypts && !op.encrypted {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "QENC queue {} encrypts payloads (encryptionEnabled) but timer \"{}\" is \
                 plaintext: schedule through a broker that holds QUEEN_ENCRYPTION_KEY. \
                 Nothing was written",
                op.queue, op.timer_key
            ),
        );
    }
    let message_id = uuid::Uuid::now_v7();
    let payload = op.payload.as_ref().map_or("null", |p| p.get()).as_bytes();
    let (now, deliver_at) = clock_plus(client, op.delay_ms.unwrap_or(0) as f64 / 1000.0);
    // Whether the key is pending, its row locked: the verdict, and a reschedule that
    // waits here for a delivery in progress then finds the key free.
    let existed = !q(
        client,
        "SELECT 1 FROM queen.timers WHERE queue_id = $1 AND timer_key = $2 FOR UPDATE",
        &[queue_id.into(), op.timer_key.as_str().into()],
    )
    .or_raise()
    .is_empty();
    let txn = op.txn.clone().unwrap_or_else(|| message_id.to_string());
    // The instants are parameters: Citus refuses volatile functions in a modification
    // of a reference table.
    q(
        client,
        "INSERT INTO queen.timers AS t (queue_id, timer_key, partition, txn, message_id,
                                        payload, encrypted, deliver_at, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
         ON CONFLICT (queue_id, timer_key) DO UPDATE
            SET partition = EXCLUDED.partition, txn = EXCLUDED.txn,
                message_id = EXCLUDED.message_id, payload = EXCLUDED.payload,
                encrypted = EXCLUDED.encrypted, deliver_at = EXCLUDED.deliver_at,
                attempts = 0, last_error = NULL, updated_at = EXCLUDED.updated_at",
        &[
            queue_id.into(),
            op.timer_key.as_str().into(),
            op.partition().into(),
            txn.as_str().into(),
            Uuid::from_bytes(*message_id.as_bytes()).into(),
            payload.into(),
            op.encrypted.into(),
            deliver_at.into(),
            now.into(),
        ],
    )
    .or_raise();
    let status = if existed {
        TimerStatus::Rescheduled
    } else {
        TimerStatus::Scheduled
    };
    TimerResult {
        ok: true,
        status,
        queue: op.queue.clone(),
        timer_key: op.timer_key.clone(),
        txn: Some(txn),
        message_id: Some(message_id),
        deliver_at: Some(iso_ms(deliver_at)),
    }
}

/// Deletes the pending timer (only the one carrying `txn` when the op names one). A
/// delivery in progress holds the row: the delete waits for it and then finds nothing,
/// which is `absent` (the timer was delivered). By primary key: one shard on Citus.
fn cancel(client: &mut SpiClient<'_>, tenant: Uuid, op: &TimerOp) -> TimerResult {
    let gone = find_queue(client, tenant, &op.queue).and_then(|queue| {
        q(
            client,
            "DELETE FROM queen.timers
              WHERE queue_id = $1 AND timer_key = $2 AND ($3::text IS NULL OR txn = $3)
             RETURNING txn, message_id",
            &[
                queue.id.into(),
                op.timer_key.as_str().into(),
                op.txn.as_deref().into(),
            ],
        )
        .or_raise()
        .next()
        .map(|r| {
            let id: Uuid = col(&r, 2, "timers.message_id");
            (
                col::<String>(&r, 1, "timers.txn"),
                uuid::Uuid::from_bytes(*id.as_bytes()),
            )
        })
    });
    let status = if gone.is_some() {
        TimerStatus::Cancelled
    } else {
        TimerStatus::Absent
    };
    TimerResult {
        ok: status.ok(),
        status,
        queue: op.queue.clone(),
        timer_key: op.timer_key.clone(),
        txn: gone
            .as_ref()
            .map(|g| g.0.clone())
            .or_else(|| op.txn.clone()),
        message_id: gone.map(|g| g.1),
        deliver_at: None,
    }
}

/// A due timer, locked for delivery.
struct Due {
    queue_id: Uuid,
    key: String,
    queue: String,
    tenant: Uuid,
    partition: String,
    frame: Frame,
    /// The queue encrypts and the payload is plaintext: not deliverable.
    refused: bool,
}

/// Up to `limit` due timers, locked: first the queues with due timers, earliest first
/// (a read, no lock), then each queue's due rows `FOR UPDATE SKIP LOCKED`. Each locking
/// statement names one queue, the distribution key of `queen.timers` on Citus, so it
/// runs on one shard (Citus locks rows only in a single-shard statement).
fn lock_due(client: &SpiClient<'_>, limit: i32) -> Vec<Due> {
    let now = clock_plus(client, 0.0).0;
    let queues: Vec<(Uuid, String, Uuid, bool)> = q(
        client,
        "SELECT d.queue_id, q.name::text, q.tenant_id, q.encryption_enabled
           FROM (SELECT queue_id, min(deliver_at) AS first FROM queen.timers
                  WHERE deliver_at <= $2 GROUP BY queue_id ORDER BY 2, 1 LIMIT $1) d
           JOIN queen.queues q ON q.id = d.queue_id
          ORDER BY d.first, d.queue_id",
        &[limit.into(), now.into()],
    )
    .or_raise()
    .map(|r| {
        (
            col(&r, 1, "timers.queue_id"),
            col(&r, 2, "queues.name"),
            col(&r, 3, "queues.tenant_id"),
            col(&r, 4, "queues.encryption_enabled"),
        )
    })
    .collect();
    let mut out = Vec::new();
    for (queue_id, queue, tenant, encrypts) in queues {
        let left = limit - out.len() as i32;
        if left <= 0 {
            break;
        }
        let rows = q(
            client,
            "SELECT timer_key, partition, txn, message_id, payload, encrypted
               FROM queen.timers
              WHERE queue_id = $1 AND deliver_at <= $2
              ORDER BY deliver_at, timer_key
              LIMIT $3
                FOR UPDATE SKIP LOCKED",
            &[queue_id.into(), now.into(), left.into()],
        )
        .or_raise();
        for r in rows {
            let id: Uuid = col(&r, 4, "timers.message_id");
            let encrypted: bool = col(&r, 6, "timers.encrypted");
            out.push(Due {
                queue_id,
                key: col(&r, 1, "timers.timer_key"),
                queue: queue.clone(),
                tenant,
                partition: col(&r, 2, "timers.partition"),
                frame: Frame {
                    message_id: *id.as_bytes(),
                    trace_id: None,
                    transaction_id: col(&r, 3, "timers.txn"),
                    producer_sub: None,
                    encrypted,
                    payload: col(&r, 5, "timers.payload"),
                },
                refused: encrypts && !encrypted,
            });
        }
    }
    out
}

/// One partition's due timers, in due order, as one segment; a timer whose
/// transactionId an earlier one of the same sweep carries is a duplicate.
struct Group<'d> {
    due: Vec<&'d Due>,
}

fn groups(due: &[Due]) -> (Vec<Group<'_>>, i64) {
    let mut out: Vec<Group<'_>> = Vec::new();
    let mut seen: HashSet<(&[u8; 16], &str, &str)> = HashSet::new();
    let mut dups = 0;
    for d in due.iter().filter(|d| !d.refused) {
        let txn = (
            d.tenant.as_bytes(),
            d.queue.as_str(),
            d.frame.transaction_id.as_str(),
        );
        if !seen.insert(txn) {
            dups += 1;
            continue;
        }
        let at = out.iter().position(|g| {
            let h = g.due[0];
            h.tenant == d.tenant && h.queue == d.queue && h.partition == d.partition
        });
        match at {
            Some(i) => out[i].due.push(d),
            None => out.push(Group { due: vec![d] }),
        }
    }
    (out, dups)
}

/// Pushes the groups (crate::push::push_groups: a frame the dedup window holds is a
/// duplicate, the rest of its group is pushed again). Returns (delivered, duplicates).
fn deliver(client: &mut SpiClient<'_>, groups: Vec<Group<'_>>) -> (i64, i64) {
    let frames: Vec<FrameGroup<'_>> = groups
        .iter()
        .map(|g| FrameGroup {
            tenant: g.due[0].tenant,
            queue: &g.due[0].queue,
            partition: &g.due[0].partition,
            frames: g.due.iter().map(|d| d.frame.clone()).collect(),
        })
        .collect();
    let landed = push_groups(client, &frames);
    let dups = landed
        .iter()
        .flatten()
        .filter(|l| matches!(l, Landed::Duplicate { .. }))
        .count() as i64;
    let all = landed.iter().map(Vec::len).sum::<usize>() as i64;
    (all - dups, dups)
}

/// The delivered (and duplicate) timers leave; the refused ones wait and say why. Row by
/// row by primary key: a plain router statement on every layout (Citus included).
fn settle(client: &SpiClient<'_>, due: &[Due]) {
    let retry_at = due
        .iter()
        .any(|d| d.refused)
        .then(|| clock_plus(client, RETRY_AFTER_SECONDS).1);
    for d in due {
        match retry_at.filter(|_| d.refused) {
            None => q(
                client,
                "DELETE FROM queen.timers WHERE queue_id = $1 AND timer_key = $2",
                &[d.queue_id.into(), d.key.as_str().into()],
            ),
            Some(at) => q(
                client,
                "UPDATE queen.timers SET attempts = attempts + 1, deliver_at = $3,
                        last_error = 'the queue encrypts payloads (encryptionEnabled) and \
                                      this timer was scheduled in plaintext: cancel it, or \
                                      reschedule it through a broker that holds the key'
                  WHERE queue_id = $1 AND timer_key = $2",
                &[d.queue_id.into(), d.key.as_str().into(), at.into()],
            ),
        }
        .or_raise();
    }
}

/// Milliseconds until the earliest pending timer falls due (0 when due already).
fn next_due_ms(client: &SpiClient<'_>) -> Option<i64> {
    q(
        client,
        "SELECT ceil(extract(epoch FROM min(deliver_at) - $1) * 1000)::bigint FROM queen.timers",
        &[clock_plus(client, 0.0).0.into()],
    )
    .or_raise()
    .next()
    .and_then(|r| r.get::<i64>(1).or_raise())
    .map(|ms| ms.max(0))
}

pub fn fire(client: &mut SpiClient<'_>, limit: i32) -> SweepReport {
    // One sweep at a time: two sweeps would only skip each other's rows, and on Citus
    // each is a distributed transaction over several workers; a caller that finds the
    // lock taken only reads when the next timer falls due (the other sweep delivers what
    // is due now).
    let free = q(
        client,
        "SELECT pg_try_advisory_xact_lock(hashtext('queen.timers_fire_v1'))",
        &[],
    )
    .or_raise()
    .next()
    .is_some_and(|r| col::<bool>(&r, 1, "advisory lock"));
    if !free {
        return SweepReport {
            next_due_ms: next_due_ms(client).map(|ms| ms.max(BUSY_PAUSE_MS)),
            ..Default::default()
        };
    }
    let due = lock_due(client, limit);
    let (groups, in_sweep_dups) = groups(&due);
    let mut queues: Vec<DeliveredTo> = groups
        .iter()
        .map(|g| DeliveredTo {
            tenant: uuid::Uuid::from_bytes(*g.due[0].tenant.as_bytes()),
            queue: g.due[0].queue.clone(),
        })
        .collect();
    queues.sort_by(|a, b| (a.tenant, &a.queue).cmp(&(b.tenant, &b.queue)));
    queues.dedup();
    let (fired, dups) = deliver(client, groups);
    settle(client, &due);
    SweepReport {
        fired,
        duplicates: dups + in_sweep_dups,
        next_due_ms: if due.len() as i32 >= limit {
            Some(0)
        } else {
            next_due_ms(client)
        },
        queues,
    }
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn timers_apply_v1(
    p_ops: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let ops: Vec<TimerOp> = serde_json::from_value(required(p_ops, "p_ops").0)
        .unwrap_or_else(|e| bad_param(format!("QTIMER p_ops: {e}")));
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&Spi::connect_mut(|c| apply(c, tenant, &ops)))
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn timers_fire_v1(p_limit: default!(Option<i32>, "1000")) -> JsonB {
    let limit = p_limit.unwrap_or(SWEEP_MAX);
    if !(1..=SWEEP_MAX).contains(&limit) {
        bad_param(format!("QTIMER p_limit must be 1 to {SWEEP_MAX}"));
    }
    jsonb(&Spi::connect_mut(|c| fire(c, limit)))
}
