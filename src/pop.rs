//! Leasing pop (contract §5): claim the cursor row without waiting, seed it on first
//! contact, serve up to a budget of frames across segments, then lease or auto-ack.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::db::{bad_param, default_tenant, find_partition, q, raise, OrRaise, QUEUE_MODE};

/// What the caller asked for, validated.
#[derive(Clone, Copy)]
pub struct PopRequest<'a> {
    pub group: &'a str,
    pub budget: i32,
    pub lease_seconds: i32,
    pub worker: &'a str,
    pub auto_ack: bool,
    pub sub_mode: &'a str,
    pub sub_from: &'a str,
}

/// One served slice of a segment, as log_pop_v1 returns it.
pub struct Slice {
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
    pub msg_count: i32,
    pub created_at: TimestampWithTimeZone,
    pub blob: Vec<u8>,
}

impl Slice {
    fn last_offset(&self) -> i64 {
        self.base + i64::from(self.start_idx) + i64::from(self.take) - 1
    }
}

/// Validate the pop arguments (contract §5): budget and lease below 1 are 22023, a
/// leasing pop needs a worker, conflation is 0A000. NULL group means queue mode.
pub fn request<'a>(
    group: Option<&'a str>,
    budget: Option<i32>,
    lease: Option<i32>,
    worker: Option<&'a str>,
    auto_ack: Option<bool>,
    sub_mode: Option<&'a str>,
    sub_from: Option<&'a str>,
    conflate: bool,
) -> PopRequest<'a> {
    if conflate {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "p_conflate is not supported by queen_ack",
        );
    }
    let auto_ack = auto_ack.unwrap_or(false);
    let budget = budget.unwrap_or(0);
    if budget < 1 {
        bad_param(format!("p_budget must be >= 1, got {budget}"));
    }
    let lease_seconds = lease.unwrap_or(0);
    let worker = worker.unwrap_or("");
    if !auto_ack && lease_seconds < 1 {
        bad_param(format!(
            "p_lease_seconds must be >= 1 when leasing, got {lease_seconds}"
        ));
    }
    if !auto_ack && worker.is_empty() {
        bad_param("p_worker must be a non-empty lease id when leasing");
    }
    PopRequest {
        group: group.unwrap_or(QUEUE_MODE),
        budget,
        lease_seconds,
        worker,
        auto_ack,
        sub_mode: sub_mode.unwrap_or("all"),
        sub_from: sub_from.unwrap_or(""),
    }
}

/// The pop's own subscription arguments as a seed mode: 'new' or from 'now' start at the
/// end; another non-empty `from` is a timestamp; anything else (unknown modes too) is 'all'.
fn own_seed_mode<'a>(req: &PopRequest<'a>) -> (&'static str, &'a str) {
    if req.sub_mode == "new" || req.sub_from.eq_ignore_ascii_case("now") {
        ("new", "")
    } else if !req.sub_from.is_empty() {
        ("timestamp", req.sub_from)
    } else {
        ("all", "")
    }
}

/// Claim the (partition, group) row: FOR UPDATE SKIP LOCKED when no live lease is held
/// and the partition has offsets above the cursor; create it (seeded) on first contact.
/// Returns the committed offset, or None when the row is leased, locked elsewhere, caught
/// up, or raced into existence by another pop.
///
/// A caught-up cursor is not locked: a row lock needs a transaction id, and so a WAL
/// flush at commit, which every empty re-poll of a long-polling consumer used to pay.
pub fn claim(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    queue_id: Option<Uuid>,
    tenant: Uuid,
    req: &PopRequest<'_>,
) -> Option<i64> {
    let free = q(
        client,
        "SELECT c.committed FROM queen.log_consumers c
              WHERE c.partition_id = $1 AND c.consumer_group = $2
                AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL
                     OR c.lease_expires_at < clock_timestamp())
                AND c.committed < (SELECT p.last_offset FROM queen.log_partitions p WHERE p.id = $1)
                FOR UPDATE OF c SKIP LOCKED",
        &[pid.into(), req.group.into()],
    )
    .or_raise();
    if let Some(row) = free.into_iter().next() {
        return row.get::<i64>(1).or_raise();
    }
    let exists = q(
        client,
        "SELECT 1 FROM queen.log_consumers WHERE partition_id = $1 AND consumer_group = $2",
        &[pid.into(), req.group.into()],
    )
    .or_raise();
    if !exists.is_empty() {
        return None;
    }
    let queue_id = queue_id.unwrap_or_else(|| queue_id_of(client, pid));
    create_cursor(client, pid, queue_id, tenant, req)
}

/// First contact: seed from the group's subscription record if it has one for this queue,
/// else from the pop's own mode (an unparseable timestamp falls back to 'all'). Queue mode
/// has no record.
fn create_cursor(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    queue_id: Uuid,
    tenant: Uuid,
    req: &PopRequest<'_>,
) -> Option<i64> {
    let (mode, from) = own_seed_mode(req);
    q(
        client,
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
             SELECT $1, $2, COALESCE(
                 (SELECT queen.seed_offset($1, m.subscription_mode, m.subscription_timestamp)
                    FROM queen.consumer_groups_metadata m
                   WHERE m.tenant_id = $3 AND m.consumer_group = $2 AND m.queue_id = $4),
                 queen.seed_offset($1,
                     CASE WHEN $6 = 'timestamp' AND queen.try_timestamptz($5) IS NULL
                          THEN 'all' ELSE $6 END,
                     queen.try_timestamptz($5)))
             ON CONFLICT DO NOTHING
             RETURNING committed",
        &[
            pid.into(),
            req.group.into(),
            tenant.into(),
            queue_id.into(),
            from.into(),
            mode.into(),
        ],
    )
    .or_raise()
    .next()
    .and_then(|r| r.get::<i64>(1).or_raise())
}

/// Read up to `budget` frames from `next` onward across consecutive segments.
pub fn serve(client: &SpiClient<'_>, pid: Uuid, next: i64, budget: i32) -> Vec<Slice> {
    let rows = q(
        client,
        "SELECT base_offset, end_offset, created_at, blob FROM queen.log_segments
              WHERE partition_id = $1 AND end_offset >= $2
                AND base_offset >= COALESCE((SELECT max(base_offset) FROM queen.log_segments
                                              WHERE partition_id = $1 AND base_offset <= $2), $2)
              ORDER BY base_offset LIMIT $3",
        &[pid.into(), next.into(), i64::from(budget).into()],
    )
    .or_raise();
    let mut left = i64::from(budget);
    let mut out = Vec::new();
    for row in rows {
        if left == 0 {
            break;
        }
        let base: i64 = row.get(1).or_raise().unwrap();
        let end: i64 = row.get(2).or_raise().unwrap();
        let start = next.max(base);
        let take = (end - start + 1).min(left);
        left -= take;
        out.push(Slice {
            base,
            start_idx: (start - base) as i32,
            take: take as i32,
            msg_count: (end - base + 1) as i32,
            created_at: row.get(3).or_raise().unwrap(),
            blob: row.get(4).or_raise().unwrap(),
        });
    }
    out
}

/// Nothing to serve but offsets were allocated: the segments are gone (retention), so
/// seal the cursor at last_offset rather than starve on a hole.
fn seal_if_hole(client: &mut SpiClient<'_>, pid: Uuid, group: &str, committed: i64) {
    q(
        client,
        "UPDATE queen.log_consumers c SET committed = p.last_offset
               FROM queen.log_partitions p
              WHERE p.id = c.partition_id AND c.partition_id = $1 AND c.consumer_group = $2
                AND p.last_offset > $3",
        &[pid.into(), group.into(), committed.into()],
    )
    .or_raise();
}

/// Lease the delivered span to the worker, or auto-ack it.
fn finish(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    req: &PopRequest<'_>,
    first: i64,
    last: i64,
    taken: i64,
) {
    let sql = if req.auto_ack {
        "UPDATE queen.log_consumers
            SET committed = $4, total_consumed = total_consumed + $6,
                worker_id = NULL, batch_end = NULL, lease_expires_at = NULL
          WHERE partition_id = $1 AND consumer_group = $2 AND $3::text IS NOT NULL
            AND $5::bigint IS NOT NULL AND $7::int IS NOT NULL"
    } else {
        "UPDATE queen.log_consumers
            SET worker_id = $3, batch_end = $4,
                lease_expires_at = clock_timestamp() + make_interval(secs => $7),
                lease_acquired_at = clock_timestamp(),
                attempt_count = CASE WHEN attempt_offset = $5 THEN attempt_count + 1 ELSE 1 END,
                attempt_offset = $5, lease_conflated = false
          WHERE partition_id = $1 AND consumer_group = $2 AND $6::bigint IS NOT NULL"
    };
    q(
        client,
        sql,
        &[
            pid.into(),
            req.group.into(),
            req.worker.into(),
            last.into(),
            first.into(),
            taken.into(),
            req.lease_seconds.into(),
        ],
    )
    .or_raise();
}

/// Pop one partition: claim, serve, lease. Returns the slices served (possibly none).
pub fn pop_partition(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    queue_id: Option<Uuid>,
    tenant: Uuid,
    req: &PopRequest<'_>,
) -> Vec<Slice> {
    let Some(committed) = claim(client, pid, queue_id, tenant, req) else {
        return Vec::new();
    };
    let slices = serve(client, pid, committed + 1, req.budget);
    let (Some(first), Some(last)) = (slices.first(), slices.last()) else {
        seal_if_hole(client, pid, req.group, committed);
        return slices;
    };
    let first_off = first.base + i64::from(first.start_idx);
    let taken: i64 = slices.iter().map(|s| i64::from(s.take)).sum();
    finish(client, pid, req, first_off, last.last_offset(), taken);
    slices
}

fn queue_id_of(client: &SpiClient<'_>, pid: Uuid) -> Uuid {
    q(
        client,
        "SELECT queue_id FROM queen.log_partitions WHERE id = $1",
        &[pid.into()],
    )
    .or_raise()
    .first()
    .get_one::<Uuid>()
    .or_raise()
    .expect("partition exists")
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_pop_v1(
    p_queue: Option<&str>,
    p_partition: Option<&str>,
    p_group: Option<&str>,
    p_budget: Option<i32>,
    p_lease_seconds: Option<i32>,
    p_worker: Option<&str>,
    p_auto_ack: default!(Option<bool>, false),
    p_sub_mode: default!(Option<&str>, "'all'"),
    p_sub_from: default!(Option<&str>, "''"),
    p_skip_window_debounce: default!(Option<bool>, false),
    p_tenant: default!(Option<Uuid>, "'00000000-0000-0000-0000-000000000001'"),
    p_conflate: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(r_base, i64),
        name!(r_start_idx, i32),
        name!(r_take, i32),
        name!(r_msg_count, i32),
        name!(r_created_at, TimestampWithTimeZone),
        name!(r_blob, Vec<u8>),
    ),
> {
    let _ = p_skip_window_debounce; // accepted for compatibility: there is no window debounce here
    let conflate = p_conflate.unwrap_or(false);
    let req = request(
        p_group,
        p_budget,
        p_lease_seconds,
        p_worker,
        p_auto_ack,
        p_sub_mode,
        p_sub_from,
        conflate,
    );
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let (Some(queue), Some(partition)) = (p_queue, p_partition) else {
        return TableIterator::new(Vec::new());
    };
    let slices = Spi::connect_mut(|client| {
        let Some(pid) = find_partition(client, tenant, queue, partition) else {
            return Vec::new();
        };
        pop_partition(client, pid, None, tenant, &req)
    });
    TableIterator::new(slices.into_iter().map(|s| {
        (
            s.base,
            s.start_idx,
            s.take,
            s.msg_count,
            s.created_at,
            s.blob,
        )
    }))
}

/// The queue-level pop's first step for a named group: write its subscription record
/// (ON CONFLICT DO NOTHING) and, when this call wrote it, seed every partition's cursor.
fn register_group(client: &mut SpiClient<'_>, queue_id: Uuid, tenant: Uuid, req: &PopRequest<'_>) {
    if req.group == QUEUE_MODE {
        return;
    }
    let (mode, from) = own_seed_mode(req);
    q(client, "WITH m AS (
                 INSERT INTO queen.consumer_groups_metadata
                        (tenant_id, consumer_group, queue_id, subscription_mode, subscription_timestamp)
                 SELECT $1, $2, $3, mode, CASE WHEN mode = 'all' THEN NULL
                                               WHEN mode = 'new' THEN clock_timestamp() ELSE ts END
                   FROM (SELECT CASE WHEN $4 = 'timestamp' AND t IS NULL THEN 'all' ELSE $4 END AS mode,
                                t AS ts
                           FROM queen.try_timestamptz($5) AS t) s
                 ON CONFLICT (tenant_id, consumer_group, queue_id) DO NOTHING
                 RETURNING subscription_mode, subscription_timestamp)
             INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
             SELECT p.id, $2, queen.seed_offset(p.id, m.subscription_mode, m.subscription_timestamp)
               FROM m, queen.log_partitions p WHERE p.queue_id = $3
              ORDER BY p.id
             ON CONFLICT DO NOTHING", &[tenant.into(), req.group.into(), queue_id.into(), mode.into(), from.into()])
        .or_raise();
}

/// Partitions of the queue that may have work for the group and hold no live lease,
/// least recently leased first (fairness); more than needed, since some will be locked.
fn candidates(
    client: &SpiClient<'_>,
    queue_id: Uuid,
    group: &str,
    want: i32,
) -> Vec<(Uuid, String)> {
    q(
        client,
        "SELECT p.id, p.name FROM queen.log_partitions p
               LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $2
              WHERE p.queue_id = $1
                AND (c.partition_id IS NULL AND p.last_offset >= 0
                     OR p.last_offset > c.committed
                        AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL
                             OR c.lease_expires_at < clock_timestamp()))
              ORDER BY c.lease_acquired_at NULLS FIRST, p.id
              LIMIT $3",
        &[
            queue_id.into(),
            group.into(),
            i64::from(want).saturating_mul(4).saturating_add(8).into(),
        ],
    )
    .or_raise()
    .map(|r| {
        (
            r.get::<Uuid>(1).or_raise().unwrap(),
            r.get::<String>(2).or_raise().unwrap(),
        )
    })
    .collect()
}

/// Pop across a queue: claim up to `max_partitions` ready partitions under one worker,
/// with the budget as a global cap. Returns (partition id, partition name, slice).
pub fn pop_queue(
    client: &mut SpiClient<'_>,
    tenant: Uuid,
    queue: &str,
    max_partitions: i32,
    req: &PopRequest<'_>,
) -> Vec<(Uuid, String, Slice)> {
    let Some(queue_id) = q(
        client,
        "SELECT id FROM queen.queues WHERE tenant_id = $1 AND name = $2",
        &[tenant.into(), queue.into()],
    )
    .or_raise()
    .next()
    .and_then(|r| r.get::<Uuid>(1).or_raise()) else {
        return Vec::new();
    };
    register_group(client, queue_id, tenant, req);
    let mut out = Vec::new();
    let (mut claimed, mut left) = (0, req.budget);
    for (pid, name) in candidates(client, queue_id, req.group, max_partitions) {
        if claimed >= max_partitions || left < 1 {
            break;
        }
        let part_req = PopRequest {
            budget: left,
            ..*req
        };
        let slices = pop_partition(client, pid, Some(queue_id), tenant, &part_req);
        if slices.is_empty() {
            continue;
        }
        claimed += 1;
        left -= slices.iter().map(|s| s.take).sum::<i32>();
        out.extend(slices.into_iter().map(|s| (pid, name.clone(), s)));
    }
    out
}

#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn log_pop_queue_v1(
    p_queue: Option<&str>,
    p_group: Option<&str>,
    p_budget: Option<i32>,
    p_lease_seconds: Option<i32>,
    p_worker: Option<&str>,
    p_auto_ack: default!(Option<bool>, false),
    p_sub_mode: default!(Option<&str>, "'all'"),
    p_sub_from: default!(Option<&str>, "''"),
    p_max_partitions: default!(Option<i32>, 1),
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
    ),
> {
    let req = request(
        p_group,
        p_budget,
        p_lease_seconds,
        p_worker,
        p_auto_ack,
        p_sub_mode,
        p_sub_from,
        false,
    );
    let max_partitions = p_max_partitions.unwrap_or(1);
    if max_partitions < 1 {
        bad_param(format!(
            "p_max_partitions must be >= 1, got {max_partitions}"
        ));
    }
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let Some(queue) = p_queue else {
        return TableIterator::new(Vec::new());
    };
    let rows = Spi::connect_mut(|c| pop_queue(c, tenant, queue, max_partitions, &req));
    TableIterator::new(rows.into_iter().map(|(pid, name, s)| {
        (
            pid,
            name,
            s.base,
            s.start_idx,
            s.take,
            s.msg_count,
            s.created_at,
            s.blob,
        )
    }))
}
