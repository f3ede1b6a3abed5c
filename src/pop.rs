//! Leasing pop (docs/contract.md §5), the glue: load the cursor and segment rows, ask
//! `queen_log::pop` where a new cursor starts, which slices a budget serves and what state
//! the claim leaves, then write the claim. A pop never waits for a lock.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use queen_log::ack::CursorState;
use queen_log::names::NameKind;
use queen_log::order::AscendingLocks;
use queen_log::pop::{
    auto_acked, leased, parsed, plan_visible, recorded_start, requested_start, seal_hole,
    seed_offset, visible_prefix, Budget, Outcome, Span, Start,
};

use crate::db::{
    bad_param, col, default_tenant, ensure_leases, expiry_floor, find_partition_by_id,
    find_partition_ref, find_queue, micros, now, plus_seconds, q, raise, read_locked, write_cursor,
    OrRaise, PartitionRef, QueueRef,
};
use queen_log::conventions::{pop_lease, QUEUE_MODE};

/// How a pop call's lease time is read.
#[derive(Clone, Copy)]
pub enum LeaseRule {
    /// As given (log_pop_v1, log_pop_queue_v1): NULL or below 1 is 22023 when leasing.
    AsGiven,
    /// NULL means the queue's lease time; below 1 is 22023 (queen.pop).
    QueueWhenNull,
    /// NULL or below 1 means the queue's lease time (broker_pop_v1, log_pop_at_v1;
    /// docs/broker-contract.md §1).
    QueueUnlessPositive,
}

/// Where a pop goes.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    /// One partition, by names.
    Partition { queue: &'a str, partition: &'a str },
    /// Up to `max_partitions` ready partitions of a queue, the budget a global cap;
    /// `hints` are tried first (the broker's partitions pushed to lately, [`hinted`]).
    Queue {
        queue: &'a str,
        max_partitions: i32,
        hints: &'a [Uuid],
    },
    /// One partition by id (log_pop_at_v1): it touches that partition's rows only.
    PartitionId(Uuid),
    /// A NULL queue or partition name: the arguments are checked, nothing is served.
    Nothing,
}

/// One pop call, as every pop entry point (log_pop_v1, log_pop_queue_v1, broker_pop_v1,
/// log_pop_at_v1, queen.pop) receives it, NULLs included. [`pop`] checks and serves it.
#[derive(Clone, Copy)]
pub struct PopRequest<'a> {
    pub tenant: Option<Uuid>,
    pub target: Target<'a>,
    /// NULL means queue mode.
    pub group: Option<&'a str>,
    pub budget: Option<i32>,
    pub lease_seconds: Option<i32>,
    pub lease_rule: LeaseRule,
    pub worker: Option<&'a str>,
    pub auto_ack: Option<bool>,
    pub sub_mode: Option<&'a str>,
    pub sub_from: Option<&'a str>,
    /// Last-value delivery asked for (docs/decisions.md, "Conflation"): None leaves it to
    /// the group's stored policy; a group's first registration stores what it asked.
    pub conflate: Option<bool>,
}

/// One served slice of one partition: the one row type of every pop entry point (each
/// returns the columns its SQL signature names).
pub struct PopRow {
    pub partition_id: Uuid,
    pub partition: String,
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
    pub msg_count: i32,
    pub created_at: TimestampWithTimeZone,
    pub blob: Vec<u8>,
    /// The delivery attempt of the partition's lease (1 under auto-ack).
    pub attempt: i32,
}

/// A pop row as columns, in the order of broker_pop_v1's result (`r_partition_id,
/// r_partition, r_base, r_start_idx, r_take, r_msg_count, r_created_at, r_blob,
/// r_attempt`); the other entry points return a part of it.
pub type PopColumns = (
    Uuid,
    String,
    i64,
    i32,
    i32,
    i32,
    TimestampWithTimeZone,
    Vec<u8>,
    i32,
);

impl PopRow {
    pub fn columns(self) -> PopColumns {
        (
            self.partition_id,
            self.partition,
            self.base,
            self.start_idx,
            self.take,
            self.msg_count,
            self.created_at,
            self.blob,
            self.attempt,
        )
    }
}

/// What a pop of one partition does, checked: the request with its lease resolved.
#[derive(Clone, Copy)]
struct Checked<'a> {
    group: &'a str,
    budget: i32,
    lease_seconds: i32,
    worker: &'a str,
    auto_ack: bool,
    /// Where a new cursor starts when the group has no subscription record.
    start: Start<&'a str>,
    /// Conflation as asked (stored when this pop registers the group).
    conflate_asked: Option<bool>,
    /// Conflation in effect: the group's stored policy, else what was asked.
    conflate: bool,
}

/// One served slice of a segment.
pub struct Slice {
    pub base: i64,
    pub start_idx: i32,
    pub take: i32,
    pub msg_count: i32,
    pub created_at: TimestampWithTimeZone,
    pub blob: Vec<u8>,
}

impl Slice {
    fn first_offset(&self) -> i64 {
        self.base + i64::from(self.start_idx)
    }

    fn last_offset(&self) -> i64 {
        self.first_offset() + i64::from(self.take) - 1
    }
}

/// Frames served by some slices.
fn frames(slices: &[Slice]) -> i64 {
    slices.iter().map(|s| i64::from(s.take)).sum()
}

/// What a pop served from one partition, and the delivery attempt it counts as.
struct Served {
    pub slices: Vec<Slice>,
    pub attempt: i32,
}

impl PopRequest<'_> {
    /// The lease a pop of a queue whose lease time is `queue_lease` asks for.
    fn lease(&self, queue_lease: i32) -> Option<i32> {
        match self.lease_rule {
            LeaseRule::AsGiven => self.lease_seconds,
            LeaseRule::QueueWhenNull => Some(self.lease_seconds.unwrap_or(queue_lease)),
            LeaseRule::QueueUnlessPositive => Some(pop_lease(self.lease_seconds, queue_lease)),
        }
    }

    /// Validate the pop arguments (docs/contract.md §5) for a queue whose lease time is
    /// `queue_lease`: budget and lease below 1 are 22023, a leasing pop needs a worker,
    /// conflation needs a named group and a leasing pop.
    fn checked(&self, queue_lease: i32) -> Checked<'_> {
        let auto_ack = self.auto_ack.unwrap_or(false);
        let budget = self.budget.unwrap_or(0);
        if budget < 1 {
            bad_param(format!("p_budget must be >= 1, got {budget}"));
        }
        let lease_seconds = self.lease(queue_lease).unwrap_or(0);
        let worker = self.worker.unwrap_or("");
        if !auto_ack && lease_seconds < 1 {
            bad_param(format!(
                "p_lease_seconds must be >= 1 when leasing, got {lease_seconds}"
            ));
        }
        if !auto_ack && worker.is_empty() {
            bad_param("p_worker must be a non-empty lease id when leasing");
        }
        if let Some(g) = self.group {
            crate::names::check(NameKind::ConsumerGroup, g);
        }
        if self.conflate == Some(true) {
            check_conflation(self.group.unwrap_or(QUEUE_MODE), auto_ack);
        }
        Checked {
            group: self.group.unwrap_or(QUEUE_MODE),
            budget,
            lease_seconds,
            worker,
            auto_ack,
            start: requested_start(self.sub_mode.unwrap_or("all"), self.sub_from.unwrap_or("")),
            conflate_asked: self.conflate,
            conflate: false,
        }
    }
}

/// Conflation needs a named group (it is a group's policy) and a leasing pop (the newest
/// message's ack is what retires everything behind it): 22023 otherwise.
fn check_conflation(group: &str, auto_ack: bool) {
    if group == QUEUE_MODE {
        bad_param("conflation needs a consumer group");
    }
    if auto_ack {
        bad_param("conflation cannot be combined with auto-ack (commit on delivery)");
    }
}

/// The group's stored conflation policy on a queue; None when it has no record.
fn stored_conflation(
    client: &SpiClient<'_>,
    tenant: Uuid,
    group: &str,
    queue_id: Uuid,
) -> Option<bool> {
    if group == QUEUE_MODE {
        return None;
    }
    q(
        client,
        "SELECT conflation FROM queen.consumer_groups_metadata
          WHERE tenant_id = $1 AND consumer_group = $2 AND queue_id = $3",
        &[tenant.into(), group.into(), queue_id.into()],
    )
    .or_raise()
    .next()
    .map(|r| col::<bool>(&r, 1, "consumer_groups_metadata.conflation"))
}

/// The request with its conflation resolved (docs/decisions.md, "Conflation"): a group
/// that asks for conflation and has no record registers now (so the policy is stored);
/// afterwards the stored policy wins over what a pop asks.
fn with_policy<'a>(
    client: &mut SpiClient<'_>,
    queue: &QueueRef,
    req: Checked<'a>,
    held: &mut AscendingLocks,
) -> Checked<'a> {
    if req.group == QUEUE_MODE {
        return req;
    }
    let mut stored = stored_conflation(client, queue.tenant, req.group, queue.id);
    if stored.is_none() && req.conflate_asked == Some(true) {
        register_group(client, queue.id, queue.tenant, &req, held);
        stored = stored_conflation(client, queue.tenant, req.group, queue.id);
    }
    let conflate = stored.unwrap_or(false);
    if conflate {
        check_conflation(req.group, req.auto_ack);
    }
    Checked { conflate, ..req }
}

/// Serve a pop call: check its arguments (refused whether or not its queue exists; a
/// queue's lease time is at least 1, so 1 stands in for it), resolve its target, pop. An
/// unknown queue or partition, or another tenant's, serves nothing.
pub fn pop(req: &PopRequest<'_>) -> Vec<PopRow> {
    req.checked(1);
    let tenant = req.tenant.unwrap_or_else(default_tenant);
    let served = Spi::connect_mut(|c| match req.target {
        Target::Partition { queue, partition } => find_partition_ref(c, tenant, queue, partition)
            .map(|p| pop_resolved(c, &p, partition.to_string(), req))
            .unwrap_or_default(),
        Target::PartitionId(pid) => find_partition_by_id(c, tenant, pid)
            .map(|(p, name)| pop_resolved(c, &p, name, req))
            .unwrap_or_default(),
        Target::Queue {
            queue,
            max_partitions,
            hints,
        } => find_queue(c, tenant, queue)
            .map(|q| pop_queue(c, &q, max_partitions, hints, &req.checked(q.lease_time)))
            .unwrap_or_default(),
        Target::Nothing => Vec::new(),
    });
    rows(served)
}

/// A claimed cursor row: its state and the partition's last offset when claimed.
struct Claim {
    state: CursorState,
    last_offset: i64,
}

/// The claim of a free lease row with something above the cursor: no live lease, no
/// nack delay pending (`redeliver_at`).
const CLAIM: &str = "SELECT 1 FROM queen.log_leases l
   JOIN queen.log_consumers c
     ON c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
   JOIN queen.log_partitions p ON p.id = l.partition_id
  WHERE l.partition_id = $1 AND l.consumer_group = $2
    AND (l.worker_id IS NULL OR l.lease_expires_at IS NULL OR l.lease_expires_at < $3)
    AND c.committed < p.last_offset
    AND (c.redeliver_at IS NULL OR c.redeliver_at <= $3)
    FOR UPDATE OF l SKIP LOCKED";

/// The same under `delayedProcessing` or `windowBuffer`: the segment holding the cursor's
/// next offset must be visible ($4 = now − delay, or infinity) and the partition quiet
/// since $5 (now − windowBuffer, or infinity: Queen's debounce, no pop until the
/// partition's last push is that old), so a consumer re-polling a deferred partition locks
/// nothing. No segment there at all (a retention hole) passes, so the hole gets sealed.
/// One index probe; a queue without a delay never runs it. Every table names the partition
/// by `$1` itself: Citus runs a row-locking query only when it can see that all of it
/// touches one partition (a subquery correlated through `p.id` is not enough).
const CLAIM_DELAYED: &str = "SELECT 1 FROM queen.log_leases l
   JOIN queen.log_consumers c
     ON c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
   JOIN queen.log_partitions p ON p.id = l.partition_id
  WHERE l.partition_id = $1 AND l.consumer_group = $2
    AND (l.worker_id IS NULL OR l.lease_expires_at IS NULL OR l.lease_expires_at < $3)
    AND c.committed < p.last_offset
    AND (c.redeliver_at IS NULL OR c.redeliver_at <= $3)
    AND COALESCE((SELECT s.created_at FROM queen.log_segments s
                   WHERE s.partition_id = $1 AND s.base_offset <= GREATEST(c.committed + 1, p.log_start)
                   ORDER BY s.base_offset DESC LIMIT 1), '-infinity') <= $4
    AND p.last_write_at <= $5
    FOR UPDATE OF l SKIP LOCKED";

/// Claim the (partition, group) lease row: FOR UPDATE SKIP LOCKED when no live lease is
/// held, no nack delay is pending and the partition has (visible) offsets above the
/// cursor; create the cursor (seeded) on first contact. None when the row is leased,
/// held, locked elsewhere, caught up, deferred, or raced into existence by another pop.
///
/// A caught-up cursor is not locked: even an unlogged row lock takes a transaction id,
/// and with it a commit record, which every empty re-poll of a long-polling consumer
/// would pay.
fn claim(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    queue: &QueueRef,
    req: &Checked<'_>,
    hold: Option<Hold>,
    held: &mut AscendingLocks,
) -> Option<Claim> {
    for _ in 0..2 {
        let free = match hold {
            None => q(client, CLAIM, &[pid.into(), req.group.into(), now().into()]),
            Some(h) => q(
                client,
                CLAIM_DELAYED,
                &[
                    pid.into(),
                    req.group.into(),
                    now().into(),
                    h.visible_before.into(),
                    h.quiet_before.into(),
                ],
            ),
        }
        .or_raise();
        if !free.is_empty() {
            // Read after the lock: the state the last holder committed.
            let cur = read_locked(client, pid, req.group)?;
            return Some(Claim {
                state: cur.state,
                last_offset: cur.log.last_offset,
            });
        }
        // Why nothing was claimed: no cursor yet (create it), a cursor whose lease row a
        // crash removed (recreate it and try again), or leased / locked / caught up.
        let has_lease = q(
            client,
            "SELECT EXISTS (SELECT 1 FROM queen.log_leases l
                             WHERE l.partition_id = c.partition_id AND l.consumer_group = c.consumer_group)
               FROM queen.log_consumers c WHERE c.partition_id = $1 AND c.consumer_group = $2",
            &[pid.into(), req.group.into()],
        )
        .or_raise()
        .next()
        .map(|r| col::<bool>(&r, 1, "lease row exists"));
        match has_lease {
            None => return create_cursor(client, pid, queue, req, held),
            Some(true) => return None,
            Some(false) => ensure_leases(client, pid, &[req.group]),
        }
    }
    None
}

/// A named group's subscription record on the queue, as a start (queue mode has none).
fn recorded(
    client: &SpiClient<'_>,
    tenant: Uuid,
    group: &str,
    queue_id: Uuid,
) -> Option<Start<TimestampWithTimeZone>> {
    if group == QUEUE_MODE {
        return None;
    }
    q(
        client,
        "SELECT subscription_mode, subscription_timestamp FROM queen.consumer_groups_metadata
          WHERE tenant_id = $1 AND consumer_group = $2 AND queue_id = $3",
        &[tenant.into(), group.into(), queue_id.into()],
    )
    .or_raise()
    .next()
    .map(|r| {
        let mode: String = col(&r, 1, "subscription_mode");
        recorded_start(&mode, r.get::<TimestampWithTimeZone>(2).or_raise())
    })
}

/// The pop's own start with its timestamp parsed by PostgreSQL (so every input format
/// timestamptz accepts works); one that does not parse means 'all'.
fn own_start(client: &SpiClient<'_>, req: &Checked<'_>) -> Start<TimestampWithTimeZone> {
    parsed(req.start, |text| {
        q(client, "SELECT queen.try_timestamptz($1)", &[text.into()])
            .or_raise()
            .first()
            .get_one::<TimestampWithTimeZone>()
            .or_raise()
    })
}

/// `since` as a statement argument: only a `Since` start needs the segment lookup.
fn since_of(start: &Start<TimestampWithTimeZone>) -> Option<TimestampWithTimeZone> {
    match start {
        Start::Since(ts) => Some(*ts),
        _ => None,
    }
}

/// The partition row lock a pop takes before it creates a cursor there. FOR SHARE
/// conflicts with a retention step's (and a push's) NO KEY UPDATE and a deletion's
/// UPDATE, so a cursor is seeded either before a step (which then sees and evicts it) or
/// from the log start the step left; KEY SHARE (what the foreign key check takes) let a
/// cursor be seeded below a retention step's new log start and lose messages uncounted.
/// One row per statement: on Citus a row lock names one partition.
/// docs/decisions.md, "Lock order".
const PARTITION_SHARE: &str = "SELECT 1 FROM queen.log_partitions WHERE id = $1 FOR SHARE";

/// Whether this pop may create the (partition, group) cursor: a transaction-level
/// advisory lock on the pair, tried, not waited for. A concurrent pop creating the same
/// cursor holds it and will lease the partition itself; without the lock this pop's
/// INSERT waited for that pop's commit only to find the row there (on a fresh queue every
/// concurrent pop tries the same first partition: milliseconds each, docs/benchmarks.md).
fn creating(client: &SpiClient<'_>, pid: Uuid, group: &str) -> bool {
    q(
        client,
        "SELECT pg_catalog.pg_try_advisory_xact_lock(
                    pg_catalog.hashtextextended($1::text || chr(31) || $2, 11))",
        &[pid.into(), group.into()],
    )
    .or_raise()
    .first()
    .get_one::<bool>()
    .or_raise()
    .unwrap_or(false)
}

/// First contact: seed from the group's subscription record if it has one for this queue,
/// else from the pop's own mode. The partition row is locked first (PARTITION_SHARE), so
/// a concurrent DELETE either finished (no row: nothing is created, the pop serves nothing
/// as for an unknown queue) or waits for this pop, and the seed is read after the lock.
/// A partition sorting below a row this pop holds is left alone (`held`): waiting for it
/// there deadlocked with a push holding it and waiting for the higher row.
fn create_cursor(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    queue: &QueueRef,
    req: &Checked<'_>,
    held: &mut AscendingLocks,
) -> Option<Claim> {
    if !held.may_lock(*pid.as_bytes()) || !creating(client, pid, req.group) {
        return None;
    }
    let start = recorded(client, queue.tenant, req.group, queue.id)
        .unwrap_or_else(|| own_start(client, req));
    if q(client, PARTITION_SHARE, &[pid.into()])
        .or_raise()
        .is_empty()
    {
        return None;
    }
    held.locked(*pid.as_bytes());
    let row = q(
        client,
        "SELECT p.log_start, p.last_offset,
                CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE
                    (SELECT s.base_offset FROM queen.log_segments s
                      WHERE s.partition_id = $1 AND s.created_at >= $2
                      ORDER BY s.base_offset LIMIT 1) END
           FROM queen.log_partitions p WHERE p.id = $1",
        &[pid.into(), since_of(&start).into()],
    )
    .or_raise()
    .next()?;
    let last_offset: i64 = col(&row, 2, "log_partitions.last_offset");
    let seed = seed_offset(
        &start,
        col(&row, 1, "log_partitions.log_start"),
        last_offset,
        row.get::<i64>(3).or_raise(),
    );
    // The cursor, then its lease row: two plain statements (on Citus a data-modifying CTE
    // runs through intermediate results sent to every node).
    let created = !q(
        client,
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
         VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING 1",
        &[pid.into(), req.group.into(), seed.into()],
    )
    .or_raise()
    .is_empty();
    if created {
        q(
            client,
            "INSERT INTO queen.log_leases (partition_id, consumer_group) VALUES ($1, $2)",
            &[pid.into(), req.group.into()],
        )
        .or_raise();
    }
    created.then_some(Claim {
        state: CursorState {
            committed: seed,
            batch_end: None,
            batch_retry_count: 0,
            attempt_offset: None,
            attempt_count: 0,
            total_consumed: 0,
        },
        last_offset,
    })
}

/// What a pop found at and above the cursor.
pub enum Found {
    Slices(Vec<Slice>),
    /// Messages are there but not visible yet (`delayedProcessing`).
    Deferred,
    /// No segment above the cursor.
    Empty,
}

/// The latest segment created_at a pop of this queue may serve now: now − its
/// `delayedProcessing`; None (nothing to check) without a delay.
pub fn visibility_deadline(queue: &QueueRef) -> Option<TimestampWithTimeZone> {
    (queue.delay > 0).then(|| plus_seconds(now(), -i64::from(queue.delay)))
}

/// What holds a queue's partitions back from a pop: `delayedProcessing` (a segment is
/// visible once created before `visible_before`) and `windowBuffer` (a partition is
/// served once its last push is before `quiet_before`); infinity where the option is off.
/// None (the plain claim) when neither is set.
#[derive(Clone, Copy)]
pub struct Hold {
    visible_before: TimestampWithTimeZone,
    quiet_before: TimestampWithTimeZone,
}

pub fn hold(queue: &QueueRef) -> Option<Hold> {
    if queue.delay <= 0 && queue.window_buffer <= 0 {
        return None;
    }
    let before = |secs: i32| {
        if secs > 0 {
            plus_seconds(now(), -i64::from(secs))
        } else {
            TimestampWithTimeZone::positive_infinity()
        }
    };
    Some(Hold {
        visible_before: before(queue.delay),
        quiet_before: before(queue.window_buffer),
    })
}

/// Whether the partition's last push is before `quiet_before` (`windowBuffer`).
fn quiet(client: &SpiClient<'_>, pid: Uuid, quiet_before: TimestampWithTimeZone) -> bool {
    q(
        client,
        "SELECT last_write_at <= $2 FROM queen.log_partitions WHERE id = $1",
        &[pid.into(), quiet_before.into()],
    )
    .or_raise()
    .first()
    .get_one::<bool>()
    .or_raise()
    .unwrap_or(false)
}

/// Under `ttl` or `maxWaitTimeSeconds` (docs/decisions.md, "Queue options"): a claimed
/// cursor whose next messages are older than the queue's expiry moves past them before anything is served, and the
/// group's `evicted` count says how many it lost, as retention's evictions do: an expired
/// message is never delivered and never dropped silently. The floor is the first segment
/// created at or after now − ttl above the cursor (one index range from the cursor), or
/// past the partition's last offset when every message is older. Returns the state to
/// serve from.
fn expire(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    queue: &QueueRef,
    claim: &Claim,
) -> CursorState {
    let old = &claim.state;
    if queue.expiry <= 0 || old.committed >= claim.last_offset {
        return old.clone();
    }
    let Some(floor) = expiry_floor(client, pid, old.committed, claim.last_offset, queue.expiry)
    else {
        return old.clone();
    };
    let Some((next, lost)) = queen_log::lifecycle::evict(old, floor) else {
        return old.clone();
    };
    write_cursor(client, pid, group, old, &next);
    q(
        client,
        "UPDATE queen.log_consumers SET evicted = evicted + $3
          WHERE partition_id = $1 AND consumer_group = $2",
        &[pid.into(), group.into(), lost.into()],
    )
    .or_raise();
    next
}

/// Read up to `budget` frames from `next` onward across consecutive segments, stopping
/// at the first segment created after `visible_before` (`queen_log::pop::plan_visible`).
/// Blobs are stored out of line (EXTERNAL): only the segments the plan serves are
/// detoasted. The offset and the limit are sub-selects: PostgreSQL estimates them alike for
/// a custom and a generic plan, so the cached generic plan is used; with `LIMIT $3` every
/// pop was planned anew (docs/benchmarks.md, "One message at a time").
pub fn serve(
    client: &SpiClient<'_>,
    pid: Uuid,
    next: i64,
    budget: i32,
    visible_before: Option<TimestampWithTimeZone>,
) -> Found {
    let rows: Vec<_> = q(
        client,
        "SELECT base_offset, end_offset, created_at, blob FROM queen.log_segments
              WHERE partition_id = $1 AND end_offset >= (SELECT $2)
                AND base_offset >= COALESCE((SELECT max(base_offset) FROM queen.log_segments
                                              WHERE partition_id = $1 AND base_offset <= $2), $2)
              ORDER BY base_offset LIMIT (SELECT $3)",
        &[pid.into(), next.into(), i64::from(budget).into()],
    )
    .or_raise()
    .collect();
    let spans: Vec<Span> = rows
        .iter()
        .map(|r| Span {
            base: col(r, 1, "log_segments.base_offset"),
            end: col(r, 2, "log_segments.end_offset"),
        })
        .collect();
    let visible = match visible_before {
        None => spans.len(),
        Some(deadline) => {
            let created: Vec<i64> = rows
                .iter()
                .map(|r| micros(col(r, 3, "log_segments.created_at")))
                .collect();
            visible_prefix(&created, Some(&micros(deadline)))
        }
    };
    match plan_visible(next, i64::from(budget), &spans, visible) {
        Outcome::Deferred => Found::Deferred,
        Outcome::Empty => Found::Empty,
        Outcome::Serve(plan) => Found::Slices(
            plan.into_iter()
                .map(|p| Slice {
                    base: p.base,
                    start_idx: p.start_idx,
                    take: p.take,
                    msg_count: p.msg_count,
                    created_at: col(&rows[p.seg], 3, "log_segments.created_at"),
                    blob: col(&rows[p.seg], 4, "log_segments.blob"),
                })
                .collect(),
        ),
    }
}

/// Write a lease of `[first, last]` to the worker.
fn write_lease(client: &mut SpiClient<'_>, pid: Uuid, req: &Checked<'_>, next: &CursorState) {
    let at = now();
    q(
        client,
        "UPDATE queen.log_leases
            SET worker_id = $3, batch_end = $4, lease_expires_at = $5, lease_acquired_at = $6,
                attempt_offset = $7, attempt_count = $8
          WHERE partition_id = $1 AND consumer_group = $2",
        &[
            pid.into(),
            req.group.into(),
            req.worker.into(),
            next.batch_end.into(),
            plus_seconds(at, i64::from(req.lease_seconds)).into(),
            at.into(),
            next.attempt_offset.into(),
            next.attempt_count.into(),
        ],
    )
    .or_raise();
}

/// Pop one partition: claim, serve, lease (or auto-ack). None when nothing was claimed
/// or served. Under the queue's `delayedProcessing` only visible messages are served.
fn pop_partition(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    queue: &QueueRef,
    req: &Checked<'_>,
    held: &mut AscendingLocks,
) -> Option<Served> {
    let visible_before = visibility_deadline(queue);
    let hold = hold(queue);
    let claim = claim(client, pid, queue, req, hold, held)?;
    // A cursor created by this pop skipped the claim's checks: windowBuffer asked again.
    if queue.window_buffer > 0 && hold.is_some_and(|h| !quiet(client, pid, h.quiet_before)) {
        return None;
    }
    let expired = expire(client, pid, req.group, queue, &claim);
    let old = &expired;
    // Conflation: only the newest message is served, under a lease whose ack commits the
    // cursor past it and so retires everything behind it (docs/decisions.md, "Conflation").
    let (from, budget) = if req.conflate {
        (claim.last_offset.max(old.committed + 1), 1)
    } else {
        (old.committed + 1, req.budget)
    };
    let slices = match serve(client, pid, from, budget, visible_before) {
        Found::Slices(s) => s,
        // A seal over deferred messages would skip them: leave the cursor alone.
        Found::Deferred => return None,
        Found::Empty => {
            if let Some(sealed) = seal_hole(old.committed, claim.last_offset) {
                let next = CursorState {
                    committed: sealed,
                    ..old.clone()
                };
                write_cursor(client, pid, req.group, old, &next);
            }
            return None;
        }
    };
    let (Some(first), Some(last)) = (slices.first(), slices.last()) else {
        return None;
    };
    let (first_off, last_off) = (first.first_offset(), last.last_offset());
    let attempt = if req.auto_ack {
        let next = auto_acked(old, last_off, frames(&slices));
        write_cursor(client, pid, req.group, old, &next);
        1
    } else {
        let next = leased(old, first_off, last_off);
        write_lease(client, pid, req, &next);
        next.attempt_count
    };
    Some(Served { slices, attempt })
}

// The SQL signature (compatibility: docs/contract.md §5) fixes the argument list.
#[allow(clippy::too_many_arguments)]
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
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
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
                                    // The compatibility contract's conflation flag stays unsupported (docs/contract.md §5);
                                    // last-value delivery is a group policy, reached through broker_pop_v1.
    if p_conflate.unwrap_or(false) {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "p_conflate is not supported by queen_ack",
        );
    }
    let target = match (p_queue, p_partition) {
        (Some(queue), Some(partition)) => Target::Partition { queue, partition },
        _ => Target::Nothing,
    };
    let rows = pop(&PopRequest {
        tenant: p_tenant,
        target,
        group: p_group,
        budget: p_budget,
        lease_seconds: p_lease_seconds,
        lease_rule: LeaseRule::AsGiven,
        worker: p_worker,
        auto_ack: p_auto_ack,
        sub_mode: p_sub_mode,
        sub_from: p_sub_from,
        conflate: None,
    });
    TableIterator::new(rows.into_iter().map(|r| {
        let (_, _, base, start_idx, take, msg_count, created_at, blob, _) = r.columns();
        (base, start_idx, take, msg_count, created_at, blob)
    }))
}

/// Pop one resolved partition, with the request checked against its queue's lease time.
fn pop_resolved(
    client: &mut SpiClient<'_>,
    p: &PartitionRef,
    name: String,
    req: &PopRequest<'_>,
) -> Vec<QueueServed> {
    let mut held = AscendingLocks::default();
    let checked = with_policy(client, &p.queue, req.checked(p.queue.lease_time), &mut held);
    pop_partition(client, p.id, &p.queue, &checked, &mut held)
        .map(|served| QueueServed {
            partition_id: p.id,
            partition: name,
            served,
        })
        .into_iter()
        .collect()
}

/// The rows of what a pop served, partition by partition.
fn rows(popped: Vec<QueueServed>) -> Vec<PopRow> {
    popped
        .into_iter()
        .flat_map(|p| {
            let (pid, name, attempt) = (p.partition_id, p.partition, p.served.attempt);
            p.served.slices.into_iter().map(move |s| PopRow {
                partition_id: pid,
                partition: name.clone(),
                base: s.base,
                start_idx: s.start_idx,
                take: s.take,
                msg_count: s.msg_count,
                created_at: s.created_at,
                blob: s.blob,
                attempt,
            })
        })
        .collect()
}

/// The statement that locks a queue row against a concurrent DELETE while rows that
/// reference it are written. FOR KEY SHARE on one node. On Citus, where queues is a
/// reference table, FOR UPDATE: Citus turns a row lock there into locks on the table's
/// shard, FOR KEY SHARE into a shared one and then a row-exclusive one, so two
/// transactions taking it at once deadlocked (40P01); FOR UPDATE's exclusive one comes
/// first and makes the second wait.
fn queue_row_lock(client: &SpiClient<'_>) -> &'static str {
    let distributed = q(client, "SELECT queen.is_distributed('queen.queues')", &[])
        .or_raise()
        .first()
        .get_one::<bool>()
        .or_raise()
        .unwrap_or(false);
    if distributed {
        "SELECT 1 FROM queen.queues WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT 1 FROM queen.queues WHERE id = $1 FOR KEY SHARE"
    }
}

/// The queue-level pop's first step for a named group: write its subscription record
/// (ON CONFLICT DO NOTHING) and, when this call wrote it, seed every partition's cursor
/// from it. The record of a start: 'all' with no instant, 'new' with the registration
/// instant, 'timestamp' with the parsed one. The partition rows it locks are recorded in
/// `held`.
fn register_group(
    client: &mut SpiClient<'_>,
    queue_id: Uuid,
    tenant: Uuid,
    req: &Checked<'_>,
    held: &mut AscendingLocks,
) {
    if req.group == QUEUE_MODE {
        return;
    }
    // Every pop after the first finds its record: a plain read, no lock. Locking the
    // queue row on each pop wrote a WAL record (a row lock on a logged table), which made
    // a pop that only leases wait for a WAL flush at commit; on Citus that lock is one on
    // the whole reference table, and concurrent pops deadlocked on it (queue_row_lock).
    if recorded(client, tenant, req.group, queue_id).is_some() {
        return;
    }
    // As in create_cursor: the queue row first, so a concurrent DELETE cannot make the
    // record's foreign key fail; a queue deleted meanwhile registers nothing.
    let alive = q(client, queue_row_lock(client), &[queue_id.into()]).or_raise();
    if alive.is_empty() {
        return;
    }
    let start = own_start(client, req);
    let (mode, ts) = match start {
        Start::Beginning => ("all", None),
        Start::End => ("new", Some(now())),
        Start::Since(ts) => ("timestamp", Some(ts)),
    };
    let written = q(
        client,
        "INSERT INTO queen.consumer_groups_metadata
                (tenant_id, consumer_group, queue_id, subscription_mode, subscription_timestamp,
                 conflation)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant_id, consumer_group, queue_id) DO NOTHING RETURNING id",
        &[
            tenant.into(),
            req.group.into(),
            queue_id.into(),
            mode.into(),
            ts.into(),
            (req.conflate_asked == Some(true)).into(),
        ],
    )
    .or_raise();
    if written.is_empty() {
        return;
    }
    let start = recorded_start(mode, ts);
    // Every partition row of the queue locked (PARTITION_SHARE) in ascending id before the
    // seeds are read, as in create_cursor; a partition created after this list gets its
    // cursor on first contact (in this pop only when it sorts above them: `held`).
    let ids: Vec<Uuid> = q(
        client,
        "SELECT id FROM queen.log_partitions WHERE queue_id = $1 ORDER BY id",
        &[queue_id.into()],
    )
    .or_raise()
    .map(|r| col::<Uuid>(&r, 1, "log_partitions.id"))
    .collect();
    for id in &ids {
        q(client, PARTITION_SHARE, &[(*id).into()]).or_raise();
        held.locked(*id.as_bytes());
    }
    let rows = q(
        client,
        "SELECT p.id, p.log_start, p.last_offset,
                CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE
                    (SELECT s.base_offset FROM queen.log_segments s
                      WHERE s.partition_id = p.id AND s.created_at >= $2
                      ORDER BY s.base_offset LIMIT 1) END
           FROM queen.log_partitions p WHERE p.queue_id = $1 AND p.id = ANY($3) ORDER BY p.id",
        &[queue_id.into(), since_of(&start).into(), ids.into()],
    )
    .or_raise();
    let (ids, seeds): (Vec<Uuid>, Vec<i64>) = rows
        .map(|r| {
            let seed = seed_offset(
                &start,
                col(&r, 2, "log_partitions.log_start"),
                col(&r, 3, "log_partitions.last_offset"),
                r.get::<i64>(4).or_raise(),
            );
            (col::<Uuid>(&r, 1, "log_partitions.id"), seed)
        })
        .unzip();
    // The cursors, then their lease rows (two statements, as in create_cursor). Neither
    // asks which rows it inserted: Citus counts an INSERT ... SELECT's routed rows, not
    // the rows ON CONFLICT kept (with RETURNING that fails SPI's consistency check). A
    // lease row for a cursor that was already there is either there too or was lost in a
    // crash, and then belongs there.
    q(
        client,
        "INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
         SELECT u.id, $1, u.seed FROM unnest($2::uuid[], $3::bigint[]) AS u(id, seed)
          ORDER BY u.id
         ON CONFLICT DO NOTHING",
        &[req.group.into(), ids.clone().into(), seeds.into()],
    )
    .or_raise();
    q(
        client,
        "INSERT INTO queen.log_leases (partition_id, consumer_group)
         SELECT u.id, $1 FROM unnest($2::uuid[]) AS u(id) ORDER BY u.id
         ON CONFLICT DO NOTHING",
        &[req.group.into(), ids.into()],
    )
    .or_raise();
}

/// Partitions of the queue that may have work for the group, hold no live lease and no
/// pending nack delay, least recently leased first (fairness), leaving out the ones this
/// pop already tried ($5); more than needed, since some will be locked. A pop reads
/// further pages until one serves or none is left (`pop_queue`).
const CANDIDATES: &str = "SELECT p.id, p.name FROM queen.log_partitions p
   LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $2
   LEFT JOIN queen.log_leases l ON l.partition_id = p.id AND l.consumer_group = $2
  WHERE p.queue_id = $1 AND p.id <> ALL($5)
    AND (c.partition_id IS NULL AND p.last_offset >= 0
         OR p.last_offset > c.committed
            AND (l.worker_id IS NULL OR l.lease_expires_at IS NULL OR l.lease_expires_at < $4)
            AND (c.redeliver_at IS NULL OR c.redeliver_at <= $4))
  ORDER BY l.lease_acquired_at NULLS FIRST, p.id
  LIMIT $3";

/// The same under `delayedProcessing` or `windowBuffer`: only partitions whose next
/// message is visible ($6 = now − delay, or infinity; one index probe each) and that have
/// been quiet since $7 (now − windowBuffer, or infinity). Without it, partitions holding
/// only young messages, never leased and so first in line, would fill the candidate list
/// and starve the ready ones behind them until their delay passed.
const CANDIDATES_DELAYED: &str = "SELECT p.id, p.name FROM queen.log_partitions p
   LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = $2
   LEFT JOIN queen.log_leases l ON l.partition_id = p.id AND l.consumer_group = $2
  WHERE p.queue_id = $1 AND p.id <> ALL($5)
    AND (c.partition_id IS NULL AND p.last_offset >= 0
         OR p.last_offset > c.committed
            AND (l.worker_id IS NULL OR l.lease_expires_at IS NULL OR l.lease_expires_at < $4)
            AND (c.redeliver_at IS NULL OR c.redeliver_at <= $4))
    AND COALESCE((SELECT s.created_at FROM queen.log_segments s
                   WHERE s.partition_id = p.id
                     AND s.base_offset <= GREATEST(COALESCE(c.committed + 1, p.log_start), p.log_start)
                   ORDER BY s.base_offset DESC LIMIT 1), '-infinity') <= $6
    AND p.last_write_at <= $7
  ORDER BY l.lease_acquired_at NULLS FIRST, p.id
  LIMIT $3";

/// One page of candidates: up to `want` × 4 + 8, none of `tried`.
fn candidates(
    client: &SpiClient<'_>,
    queue: &QueueRef,
    group: &str,
    want: i32,
    tried: &[Uuid],
) -> Vec<(Uuid, String)> {
    let limit = i64::from(want).saturating_mul(4).saturating_add(8);
    let args = [
        queue.id.into(),
        group.into(),
        limit.into(),
        now().into(),
        tried.to_vec().into(),
    ];
    match hold(queue) {
        None => q(client, CANDIDATES, &args),
        Some(h) => {
            let [a, b, c, d, e] = args;
            let (f, g) = (h.visible_before.into(), h.quiet_before.into());
            q(client, CANDIDATES_DELAYED, &[a, b, c, d, e, f, g])
        }
    }
    .or_raise()
    .map(|r| {
        (
            col(&r, 1, "log_partitions.id"),
            col(&r, 2, "log_partitions.name"),
        )
    })
    .collect()
}

/// The hinted partitions that are the queue's, by id (at most [`MAX_HINTS`]; an id of
/// another queue or tenant, or of no partition, is dropped). By id, as a page of
/// partitions never leased is: a pop creating cursors locks partitions in ascending id
/// ([`AscendingLocks`]), and one of several partitions in push order left out those below
/// the first it created.
/// Hints come from the broker (the partitions it pushed to lately and no pop of it has
/// served since, docs/decisions.md "Which partitions a queue pop tries"): a one-message
/// pop of a queue being pushed to would otherwise read a fresh page each time, as its
/// kept page drains as fast as it is read. Each is claimed with the claim's own checks,
/// and a pop none of them serves goes on as without hints, so a hint only saves the page
/// read.
fn hinted(client: &SpiClient<'_>, queue: &QueueRef, hints: &[Uuid]) -> Vec<(Uuid, String)> {
    let hints = &hints[..hints.len().min(MAX_HINTS)];
    let mut found: Vec<(Uuid, String)> = q(
        client,
        "SELECT id, name FROM queen.log_partitions WHERE id = ANY($1) AND queue_id = $2",
        &[hints.to_vec().into(), queue.id.into()],
    )
    .or_raise()
    .map(|r| {
        (
            col(&r, 1, "log_partitions.id"),
            col(&r, 2, "log_partitions.name"),
        )
    })
    .collect();
    found.sort_by_key(|(id, _)| *id.as_bytes());
    found
}

/// The most hints a pop tries.
pub const MAX_HINTS: usize = 32;

/// What a queue-level pop served from one partition.
struct QueueServed {
    pub partition_id: Uuid,
    pub partition: String,
    pub served: Served,
}

/// Pop across a queue: claim up to `max_partitions` ready partitions under one worker,
/// with the budget as a global cap. Candidates come a page at a time; while the pop has
/// served nothing it reads the next page (the partitions it has not tried yet), so it
/// answers empty only when every partition that looked ready was leased, locked by a
/// concurrent pop (SKIP LOCKED), deferred or drained meanwhile: concurrent pops all read
/// the same first page, and a first page wholly locked by them is no reason to stop while
/// other partitions have ready messages (docs/decisions.md, "Which partitions a queue pop tries").
/// Each partition is tried at most once, so a pop reads at most the queue's partitions.
/// A pop first tries the partitions its caller hinted at ([`hinted`]), then the page
/// this backend kept from its last one ([`kept`]); only when none of them serves does it
/// read pages as above.
fn pop_queue(
    client: &mut SpiClient<'_>,
    queue: &QueueRef,
    max_partitions: i32,
    hints: &[Uuid],
    req: &Checked<'_>,
) -> Vec<QueueServed> {
    let mut held = AscendingLocks::default();
    register_group(client, queue.id, queue.tenant, req, &mut held);
    let req = &with_policy(client, queue, *req, &mut held);
    let mut serving = Serving {
        out: Vec::new(),
        budget: Budget::new(i64::from(req.budget)),
        tried: Vec::new(),
        held,
    };
    let keep = hold(queue).is_none();
    // Hints and a kept page end a pop only when they filled it: a pop of several
    // partitions goes on to a fresh page for the rest.
    if keep && !hints.is_empty() {
        let page = hinted(client, queue, hints);
        serving.page(client, queue, &page, max_partitions, req);
        if serving.full(max_partitions) {
            return serving.out;
        }
    }
    if keep {
        if let Some((page, read_at)) = kept::take(queue.id, req.group) {
            serving.page(client, queue, &page, max_partitions, req);
            if serving.full(max_partitions) {
                kept::put(queue.id, req.group, serving.still_good(page, req), read_at);
                return serving.out;
            }
        }
    }
    let want = if keep {
        max_partitions.max(kept::WANT)
    } else {
        max_partitions
    };
    loop {
        let page = candidates(client, queue, req.group, want, &serving.tried);
        if page.is_empty() {
            break;
        }
        serving.page(client, queue, &page, max_partitions, req);
        if keep {
            let page = serving.still_good(page, req);
            kept::put(queue.id, req.group, page, std::time::Instant::now());
        }
        // Something served: this pop is done (as before, one page at most); a further
        // page is read only to avoid answering empty.
        if !serving.out.is_empty() {
            break;
        }
    }
    serving.out
}

/// What a queue pop has served so far, and what it has tried and holds.
struct Serving {
    out: Vec<QueueServed>,
    budget: Budget,
    tried: Vec<Uuid>,
    held: AscendingLocks,
}

impl Serving {
    /// Whether this pop has served all it may: `max_partitions`, or its budget.
    fn full(&self, max_partitions: i32) -> bool {
        self.out.len() >= max_partitions as usize || self.budget.is_spent()
    }

    /// `page` without the partitions this pop tried and did not serve (drained, or locked
    /// by a concurrent pop): the next pop would only try them again. A leasing pop drops
    /// the ones it served too: they are leased now; an auto-acking pop keeps them, as
    /// they stay candidates until they drain.
    fn still_good(&self, mut page: Vec<(Uuid, String)>, req: &Checked<'_>) -> Vec<(Uuid, String)> {
        page.retain(|(id, _)| {
            !self.tried.contains(id)
                || req.auto_ack && self.out.iter().any(|o| o.partition_id == *id)
        });
        page
    }

    /// Tries the untried partitions of one page in this backend's order
    /// (queen_log::pop::try_order) until `max_partitions` served or the budget is spent.
    fn page(
        &mut self,
        client: &mut SpiClient<'_>,
        queue: &QueueRef,
        page: &[(Uuid, String)],
        max_partitions: i32,
        req: &Checked<'_>,
    ) {
        for i in queen_log::pop::try_order(page.len(), try_seed(req.worker)) {
            if self.full(max_partitions) {
                break;
            }
            // Never a partition tried before: a fresh page leaves them out, a kept one is
            // tried first.
            let (pid, name) = &page[i];
            self.tried.push(*pid);
            let part_req = Checked {
                budget: self.budget.left() as i32,
                ..*req
            };
            let Some(served) = pop_partition(client, *pid, queue, &part_req, &mut self.held) else {
                continue;
            };
            self.budget.spend(frames(&served.slices));
            self.out.push(QueueServed {
                partition_id: *pid,
                partition: name.clone(),
                served,
            });
        }
    }
}

/// The page of candidates this backend's last pop of a (queue, group) read, kept a
/// quarter of a second for its next pops (docs/decisions.md, "Which partitions a queue
/// pop tries"). Reading the page was the dearest statement of a pop of one message (a
/// join over every partition of the queue, sorted). An auto-acked partition stays a
/// candidate until it drains; a leased one leaves the kept page (`Serving::still_good`).
/// Every partition of it is claimed with the claim's own checks, and a pop that none of
/// it serves reads fresh pages, so a kept page never makes a pop answer empty.
mod kept {
    use std::cell::RefCell;
    use std::time::{Duration, Instant};

    use pgrx::datum::Uuid;

    /// How long a kept page is used.
    const FOR: Duration = Duration::from_millis(250);
    /// The partitions a kept page asks for (a page holds 4 × this + 8).
    pub const WANT: i32 = 16;

    struct Page {
        queue: Uuid,
        group: String,
        read_at: Instant,
        page: Vec<(Uuid, String)>,
    }

    thread_local! {
        static KEPT: RefCell<Option<Page>> = const { RefCell::new(None) };
    }

    /// The kept page of (queue, group) and when it was read, if it is young enough.
    pub fn take(queue: Uuid, group: &str) -> Option<(Vec<(Uuid, String)>, Instant)> {
        KEPT.with(|k| {
            let p = k.borrow_mut().take()?;
            (p.queue == queue && p.group == group && p.read_at.elapsed() < FOR)
                .then_some((p.page, p.read_at))
        })
    }

    pub fn put(queue: Uuid, group: &str, page: Vec<(Uuid, String)>, read_at: Instant) {
        KEPT.with(|k| {
            *k.borrow_mut() = Some(Page {
                queue,
                group: group.to_owned(),
                read_at,
                page,
            })
        });
    }
}

/// This pop's place in a page of candidates (queen_log::pop::try_seed): its worker's,
/// or its backend's.
fn try_seed(worker: &str) -> usize {
    // SAFETY: a plain integer the postmaster sets before the backend runs any query.
    let pid = unsafe { pg_sys::MyProcPid };
    queen_log::pop::try_seed(worker, pid as u32)
}

/// `p_max_partitions` of a queue-level pop: at least 1.
pub fn max_partitions(p: Option<i32>) -> i32 {
    let n = p.unwrap_or(1);
    if n < 1 {
        bad_param(format!("p_max_partitions must be >= 1, got {n}"));
    }
    n
}

// The SQL signature (compatibility) fixes the argument list and the set-returning type,
// which pgrx needs spelled inline (its macro cannot see through a type alias).
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
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
    ),
> {
    let max_partitions = max_partitions(p_max_partitions);
    let target = p_queue.map_or(Target::Nothing, |queue| Target::Queue {
        queue,
        max_partitions,
        hints: &[],
    });
    let rows = pop(&PopRequest {
        tenant: p_tenant,
        target,
        group: p_group,
        budget: p_budget,
        lease_seconds: p_lease_seconds,
        lease_rule: LeaseRule::AsGiven,
        worker: p_worker,
        auto_ack: p_auto_ack,
        sub_mode: p_sub_mode,
        sub_from: p_sub_from,
        conflate: None,
    });
    TableIterator::new(rows.into_iter().map(|r| {
        let (pid, name, base, start_idx, take, msg_count, created_at, blob, _) = r.columns();
        (
            pid, name, base, start_idx, take, msg_count, created_at, blob,
        )
    }))
}
