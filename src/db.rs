//! Small helpers shared by every SQL entry point: raising errors with the contract's
//! SQLSTATEs, unwrapping SPI results, and reading/writing the cursor row.

use pgrx::datum::{FromDatum, IntoDatum, TimestampWithTimeZone, Uuid};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::PgOid;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiHeapTupleData, SpiResult, SpiTupleTable};
use queen_log::ack::{CursorState, LogBounds};

pub use queen_log::conventions::QUEUE_MODE;
use queen_log::conventions::{queue_lease_time, DEFAULT_TENANT};
use queen_log::lifecycle::expiry_seconds;

thread_local! {
    /// Plans prepared once per backend, keyed by the address of their SQL text. They are
    /// leaked on purpose: a handful per backend, alive as long as the backend, and never
    /// borrowed from the map while a statement runs. PostgreSQL's plan cache revalidates
    /// them after DDL (e.g. DROP and CREATE EXTENSION).
    static PLANS: RefCell<HashMap<usize, &'static OwnedPreparedStatement>> = RefCell::new(HashMap::new());
    /// Whether this database's extension SQL is the version this library was built for.
    /// Only a match is remembered: after `ALTER EXTENSION queen_ack UPDATE` in another
    /// session, the next call here sees it.
    static SCHEMA_MATCHES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The version of the extension SQL this library needs (Cargo's version = the control
/// file's default_version).
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Refuse to run against another version's SQL: after a new library is installed, a
/// database keeps its old schema until `ALTER EXTENSION queen_ack UPDATE`, and the new
/// code would fail on it half-way (or worse, succeed on the wrong tables). 55000, and
/// nothing is changed; the broker answers 503.
fn schema_gate(client: &SpiClient<'_>) {
    if SCHEMA_MATCHES.get() {
        return;
    }
    let installed = client
        .select(
            "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'queen_ack'",
            None,
            &[],
        )
        .or_raise()
        .first()
        .get_one::<String>()
        .or_raise();
    match installed.as_deref() {
        Some(LIBRARY_VERSION) => SCHEMA_MATCHES.set(true),
        other => raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "queen_ack: the installed library is {LIBRARY_VERSION} but this database's \
                 extension is {}; run ALTER EXTENSION queen_ack UPDATE",
                other.unwrap_or("not created")
            ),
        ),
    }
}

/// Run a statement through a cached prepared plan; parameter types come from the first
/// call's arguments (every call site passes the same Rust types). Executes read-write, so
/// each statement sees a fresh snapshot, as PL/pgSQL would.
pub fn q<'c>(
    client: &SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid<'_>],
) -> SpiResult<SpiTupleTable<'c>> {
    schema_gate(client);
    let key = sql.as_ptr() as usize;
    let cached = PLANS.with(|p| p.borrow().get(&key).copied());
    let plan = match cached {
        Some(plan) => plan,
        None => {
            let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
            let plan: &'static OwnedPreparedStatement =
                Box::leak(Box::new(client.prepare_mut(sql, &types)?.keep()));
            PLANS.with(|p| p.borrow_mut().insert(key, plan));
            plan
        }
    };
    client.select(plan, None, args)
}

/// Raise an ERROR with a SQLSTATE; never returns.
pub fn raise(code: PgSqlErrorCode, msg: impl Into<String>) -> ! {
    ErrorReport::new(code, msg.into(), "queen_ack").report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raise an ERROR with a DETAIL line; never returns.
pub fn raise_detail(code: PgSqlErrorCode, msg: impl Into<String>, detail: impl Into<String>) -> ! {
    ErrorReport::new(code, msg.into(), "queen_ack")
        .set_detail(detail.into())
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Q-prefixed contract errors use raise_exception (P0001).
pub fn raise_q(msg: impl Into<String>) -> ! {
    raise(PgSqlErrorCode::ERRCODE_RAISE_EXCEPTION, msg)
}

pub fn bad_param(msg: impl Into<String>) -> ! {
    raise(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, msg)
}

/// A required argument: NULL raises 22004 naming it.
pub fn required<T>(v: Option<T>, name: &str) -> T {
    v.unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!("{name} must not be NULL"),
        )
    })
}

pub fn default_tenant() -> Uuid {
    Uuid::from_bytes(*DEFAULT_TENANT.as_bytes())
}

/// pgrx's uuid as the `uuid` crate's (the type of the wire's results).
pub fn std_uuid(u: Uuid) -> uuid::Uuid {
    uuid::Uuid::from_bytes(*u.as_bytes())
}

pub fn parse_uuid(s: &str) -> Option<Uuid> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(Uuid::from_bytes(b))
}

/// A result as jsonb, serialised once from its wire type (queen_log::wire).
pub fn jsonb<T: serde::Serialize>(v: &T) -> pgrx::JsonB {
    pgrx::JsonB(serde_json::to_value(v).unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("result does not serialise: {e}"),
        )
    }))
}

/// The current time (clock_timestamp()), read here and passed to statements as a value:
/// a statement that calls a volatile function on its own rows cannot be distributed.
pub fn now() -> TimestampWithTimeZone {
    pgrx::datum::clock_timestamp()
}

/// The expiry cutoff of `seconds` now (`queen_log::lifecycle::expiry_cutoff`, the one
/// rule): a segment created before it has expired. None when `seconds` is 0 or less.
pub fn expiry_cutoff(seconds: i32) -> Option<TimestampWithTimeZone> {
    queen_log::lifecycle::expiry_cutoff(micros(now()), seconds).map(|c| {
        TimestampWithTimeZone::try_from(c).unwrap_or_else(|_| {
            raise(
                PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                format!("timestamp out of range: now - {seconds} s"),
            )
        })
    })
}

/// Where the cursors of a partition expiring after `seconds` move to
/// (docs/decisions.md, "Queue options"): the first segment above `above` created at or
/// after the cutoff ([`expiry_cutoff`]), one index range from `above`, or past
/// `last_offset` when every message above it is older. The pop's expiry and
/// maintenance's maxWaitTimeSeconds step both use it. None when nothing expires.
pub fn expiry_floor(
    client: &SpiClient<'_>,
    pid: Uuid,
    above: i64,
    last_offset: i64,
    seconds: i32,
) -> Option<i64> {
    let cutoff = expiry_cutoff(seconds)?;
    Some(
        q(
            client,
            "SELECT base_offset FROM queen.log_segments
              WHERE partition_id = $1 AND end_offset > $2 AND created_at >= $3
              ORDER BY base_offset LIMIT 1",
            &[pid.into(), above.into(), cutoff.into()],
        )
        .or_raise()
        .next()
        .map_or(last_offset + 1, |r| {
            col::<i64>(&r, 1, "log_segments.base_offset")
        }),
    )
}

/// `t + secs` seconds.
pub fn plus_seconds(t: TimestampWithTimeZone, secs: i64) -> TimestampWithTimeZone {
    let micros = pg_sys::TimestampTz::from(t).saturating_add(secs.saturating_mul(1_000_000));
    TimestampWithTimeZone::try_from(micros).unwrap_or_else(|_| {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("timestamp out of range: now + {secs} s"),
        )
    })
}

/// `t` plus `ms` milliseconds (22008 when out of range).
pub fn plus_millis(t: TimestampWithTimeZone, ms: i64) -> TimestampWithTimeZone {
    let micros = pg_sys::TimestampTz::from(t).saturating_add(ms.saturating_mul(1_000));
    TimestampWithTimeZone::try_from(micros).unwrap_or_else(|_| {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("timestamp out of range: now + {ms} ms"),
        )
    })
}

/// UTC with microseconds, the timestamp form of every JSON result (contract conventions).
pub fn iso_utc(t: TimestampWithTimeZone) -> String {
    let u = t.to_utc();
    // The fourth field counts the whole seconds too.
    let (h, m, s, micros) = u.to_hms_micro();
    let micros = micros % 1_000_000;
    format!(
        "{:04}-{:02}-{:02}T{h:02}:{m:02}:{s:02}.{micros:06}Z",
        u.year(),
        u.month(),
        u.day()
    )
}

/// Column `i` (1-based) of a row, which the schema guarantees is not NULL: a NULL there
/// is a broken invariant, reported as an internal error naming the column.
pub fn col<T: FromDatum + IntoDatum>(row: &SpiHeapTupleData<'_>, i: usize, what: &str) -> T {
    row.get::<T>(i).or_raise().unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("queen_ack: {what} is unexpectedly NULL"),
        )
    })
}

/// SPI failures are internal errors (bad SQL or types on our side), not user errors.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for SpiResult<T> {
    fn or_raise(self) -> T {
        self.unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("SPI: {e}")))
    }
}

/// The locked cursor row plus what the ack paths need from its partition and queue.
pub struct LockedCursor {
    pub state: CursorState,
    pub worker_id: Option<String>,
    pub lease_live: bool,
    pub txns_start: i64,
    pub log: LogBounds,
    pub retry_limit: i32,
    pub dlq_enabled: bool,
    /// The queue's `retryDelay` (milliseconds): a failed ack's redelivery delay when the
    /// ack names none (docs/decisions.md, "Queue options").
    pub retry_delay_ms: i32,
}

/// Lock the (partition, group) lease row FOR UPDATE: the only lock any ack path takes
/// (log_leases is unlogged, so the lock writes no WAL). A lease row that a crash removed
/// is recreated first. None when the cursor does not exist.
pub fn lock_cursor(client: &mut SpiClient<'_>, pid: Uuid, group: &str) -> Option<LockedCursor> {
    if !lock_lease(client, pid, group) {
        ensure_leases(client, pid, &[group]);
        if !lock_lease(client, pid, group) {
            return None;
        }
    }
    read_locked(client, pid, group)
}

fn lock_lease(client: &mut SpiClient<'_>, pid: Uuid, group: &str) -> bool {
    !q(
        client,
        "SELECT 1 FROM queen.log_leases WHERE partition_id = $1 AND consumer_group = $2 FOR UPDATE",
        &[pid.into(), group.into()],
    )
    .or_raise()
    .is_empty()
}

/// The lease rows of existing cursors, created where missing (an empty lease table after a
/// crash or a failover): a lease row exists for every cursor that is in use.
pub fn ensure_leases(client: &mut SpiClient<'_>, pid: Uuid, groups: &[&str]) {
    q(
        client,
        "INSERT INTO queen.log_leases (partition_id, consumer_group)
         SELECT c.partition_id, c.consumer_group FROM queen.log_consumers c
          WHERE c.partition_id = $1 AND c.consumer_group = ANY($2)
          ORDER BY c.consumer_group COLLATE \"C\"
         ON CONFLICT DO NOTHING",
        &[pid.into(), groups.to_vec().into()],
    )
    .or_raise();
}

/// The cursor of a locked lease row, read by a statement that starts after the lock was
/// granted, so it sees what the previous holder committed (a row read by the locking
/// statement itself could be older than the lock).
pub fn read_locked(client: &SpiClient<'_>, pid: Uuid, group: &str) -> Option<LockedCursor> {
    let tbl = q(
        client,
        "SELECT c.committed, l.batch_end, c.batch_retry_count, l.attempt_offset,
                l.attempt_count, c.total_consumed, l.worker_id,
                COALESCE(l.lease_expires_at >= $3, false),
                p.txns_start, COALESCE(q.retry_limit, 3),
                COALESCE(q.dead_letter_queue, true) OR COALESCE(q.dlq_after_max_retries, true),
                p.log_start, p.last_offset, q.retry_delay
           FROM queen.log_leases l
           JOIN queen.log_consumers c
             ON c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
           JOIN queen.log_partitions p ON p.id = l.partition_id
           JOIN queen.queues q ON q.id = p.queue_id
          WHERE l.partition_id = $1 AND l.consumer_group = $2",
        &[pid.into(), group.into(), now().into()],
    )
    .or_raise();
    let row = tbl.into_iter().next()?;
    Some(LockedCursor {
        state: cursor_state(&row),
        worker_id: row.get::<String>(7).or_raise(),
        lease_live: col(&row, 8, "lease liveness"),
        txns_start: col(&row, 9, "log_partitions.txns_start"),
        retry_limit: col(&row, 10, "retry limit"),
        dlq_enabled: col(&row, 11, "dlq policy"),
        log: LogBounds {
            log_start: col(&row, 12, "log_partitions.log_start"),
            last_offset: col(&row, 13, "log_partitions.last_offset"),
        },
        retry_delay_ms: col(&row, 14, "queues.retry_delay"),
    })
}

/// The ack-visible part of a cursor row from the first six columns of a statement that
/// selects `committed, batch_end, batch_retry_count, attempt_offset, attempt_count,
/// total_consumed` in that order.
pub fn cursor_state(row: &SpiHeapTupleData<'_>) -> CursorState {
    CursorState {
        committed: col(row, 1, "log_consumers.committed"),
        batch_end: row.get::<i64>(2).or_raise(),
        batch_retry_count: col(row, 3, "log_consumers.batch_retry_count"),
        attempt_offset: row.get::<i64>(4).or_raise(),
        attempt_count: col(row, 5, "log_consumers.attempt_count"),
        total_consumed: col(row, 6, "log_consumers.total_consumed"),
    }
}

/// The common lease check (docs/contract.md §6): NULL or '' worker passes; otherwise the row
/// must be leased to that worker and not expired.
pub fn lease_check(cur: &LockedCursor, worker: Option<&str>) -> Result<(), &'static str> {
    match worker {
        None | Some("") => Ok(()),
        Some(w) if cur.worker_id.as_deref() == Some(w) && cur.lease_live => Ok(()),
        Some(_) => Err("invalid or expired lease"),
    }
}

/// Lock and lease-check in one step, mapping failures to the contract's error texts.
pub fn lock_checked(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    worker: Option<&str>,
) -> Result<LockedCursor, &'static str> {
    let cur = lock_cursor(client, pid, group).ok_or("consumer not found")?;
    lease_check(&cur, worker)?;
    Ok(cur)
}

/// Write a cursor state back: the durable half (committed, retry budget, consumed) to
/// log_consumers, the lease half to log_leases, each only when it changed — a pop that
/// only leases writes no WAL, an ack's update of the durable row is HOT. A state without
/// batch_end has no lease: worker and expiry are cleared with it.
pub fn write_cursor(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    old: &CursorState,
    new: &CursorState,
) {
    let durable = (old.committed, old.batch_retry_count, old.total_consumed)
        != (new.committed, new.batch_retry_count, new.total_consumed);
    if durable {
        q(
            client,
            "UPDATE queen.log_consumers
                SET committed = $3, batch_retry_count = $4, total_consumed = $5
              WHERE partition_id = $1 AND consumer_group = $2",
            &[
                pid.into(),
                group.into(),
                new.committed.into(),
                new.batch_retry_count.into(),
                new.total_consumed.into(),
            ],
        )
        .or_raise();
    }
    let lease = (old.batch_end, old.attempt_offset, old.attempt_count)
        != (new.batch_end, new.attempt_offset, new.attempt_count);
    if lease {
        q(
            client,
            "UPDATE queen.log_leases
                SET batch_end = $3, attempt_offset = $4, attempt_count = $5,
                    worker_id = CASE WHEN $6 THEN NULL ELSE worker_id END,
                    lease_expires_at = CASE WHEN $6 THEN NULL ELSE lease_expires_at END
              WHERE partition_id = $1 AND consumer_group = $2",
            &[
                pid.into(),
                group.into(),
                new.batch_end.into(),
                new.attempt_offset.into(),
                new.attempt_count.into(),
                new.batch_end.is_none().into(),
            ],
        )
        .or_raise();
    }
}

/// A queue resolved by name, with what pops need of it.
#[derive(Clone, Copy)]
pub struct QueueRef {
    pub id: Uuid,
    pub tenant: Uuid,
    /// The lease a pop grants when asked for none (`queen_log::conventions::queue_lease_time`).
    pub lease_time: i32,
    /// `delayedProcessing`: seconds a message stays invisible after its push (0 = none).
    pub delay: i32,
    /// `windowBuffer`: seconds a partition stays unserved after its last push (0 = none).
    pub window_buffer: i32,
    /// Seconds after which a message is retired unserved, counted (0 = none): `ttl`, or
    /// `maxWaitTimeSeconds` when that is shorter, so a group that starts reading after
    /// the maintenance step ran is not served what waited too long either
    /// (docs/decisions.md, "Queue options").
    pub expiry: i32,
}

/// The columns of `queues q` that `queue_ref` reads, in its order: one list for every
/// statement that resolves a queue (a macro, since `q` caches plans by a `&'static str`).
macro_rules! queue_ref_columns {
    () => {
        "q.id, q.lease_time, q.delayed_processing, q.window_buffer, q.ttl, q.max_wait_time_seconds"
    };
}

/// The queue of a row that selected `queue_ref_columns!()` from column `first` on.
fn queue_ref(row: &SpiHeapTupleData<'_>, first: usize, tenant: Uuid) -> QueueRef {
    QueueRef {
        id: col(row, first, "queues.id"),
        tenant,
        lease_time: queue_lease_time(row.get::<i32>(first + 1).or_raise()),
        delay: col(row, first + 2, "queues.delayed_processing"),
        window_buffer: col(row, first + 3, "queues.window_buffer"),
        expiry: expiry_seconds(
            col(row, first + 4, "queues.ttl"),
            col(row, first + 5, "queues.max_wait_time_seconds"),
        ),
    }
}

/// A partition resolved by names, with its queue.
pub struct PartitionRef {
    pub id: Uuid,
    pub queue: QueueRef,
}

/// Resolve a partition by (tenant, queue name, partition name), without locking, through
/// the name registry (a reference table on Citus: local on every node).
pub fn find_partition_ref(
    client: &SpiClient<'_>,
    tenant: Uuid,
    queue: &str,
    partition: &str,
) -> Option<PartitionRef> {
    q(
        client,
        concat!(
            "SELECT p.id, ",
            queue_ref_columns!(),
            " FROM queen.partition_names p JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.tenant_id = $1 AND q.name = $2 AND p.name = $3"
        ),
        &[tenant.into(), queue.into(), partition.into()],
    )
    .or_raise()
    .next()
    .map(|row| PartitionRef {
        id: col(&row, 1, "log_partitions.id"),
        queue: queue_ref(&row, 2, tenant),
    })
}

/// A partition of the tenant by id, with its name and queue, without locking: a router
/// read of the partition's own row (on Citus, on the node holding it).
pub fn find_partition_by_id(
    client: &SpiClient<'_>,
    tenant: Uuid,
    pid: Uuid,
) -> Option<(PartitionRef, String)> {
    q(
        client,
        concat!(
            "SELECT p.name, ",
            queue_ref_columns!(),
            " FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
              WHERE p.id = $1 AND q.tenant_id = $2"
        ),
        &[pid.into(), tenant.into()],
    )
    .or_raise()
    .next()
    .map(|row| {
        let queue = queue_ref(&row, 2, tenant);
        (
            PartitionRef { id: pid, queue },
            col(&row, 1, "log_partitions.name"),
        )
    })
}

/// Resolve a partition id by (tenant, queue name, partition name), without locking.
pub fn find_partition(
    client: &SpiClient<'_>,
    tenant: Uuid,
    queue: &str,
    partition: &str,
) -> Option<Uuid> {
    find_partition_ref(client, tenant, queue, partition).map(|p| p.id)
}

/// Resolve a queue by (tenant, name), without locking.
pub fn find_queue(client: &SpiClient<'_>, tenant: Uuid, queue: &str) -> Option<QueueRef> {
    q(
        client,
        concat!(
            "SELECT ",
            queue_ref_columns!(),
            " FROM queen.queues q WHERE q.tenant_id = $1 AND q.name = $2"
        ),
        &[tenant.into(), queue.into()],
    )
    .or_raise()
    .next()
    .map(|row| queue_ref(&row, 1, tenant))
}

/// Microseconds since the PostgreSQL epoch: a timestamp as a plain ordered number.
pub fn micros(t: TimestampWithTimeZone) -> i64 {
    pg_sys::TimestampTz::from(t)
}

/// Raise an internal error: a broken invariant on our side (SQLSTATE XX000).
pub fn raise_internal(msg: impl Into<String>) -> ! {
    raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, msg)
}

/// bytea[] arrives as a borrowed array; copy it out so elements outlive the call frame.
pub fn bytea_array(a: pgrx::datum::Array<'_, &[u8]>) -> Vec<Option<Vec<u8>>> {
    a.iter().map(|e| e.map(<[u8]>::to_vec)).collect()
}

/// The database clock now, and `secs` from now: instants a statement then takes as
/// parameters (Citus refuses volatile functions in some modifications).
pub fn clock_plus(
    client: &SpiClient<'_>,
    secs: f64,
) -> (TimestampWithTimeZone, TimestampWithTimeZone) {
    q(
        client,
        "SELECT clock_timestamp(), clock_timestamp() + make_interval(secs => $1)",
        &[secs.into()],
    )
    .or_raise()
    .next()
    .map(|r| (col(&r, 1, "now"), col(&r, 2, "now + secs")))
    .expect("one row")
}

/// UTC with milliseconds: the one form queen_log::time owns (queen.iso_ms agrees).
pub fn iso_ms(t: TimestampWithTimeZone) -> String {
    queen_log::time::iso_ms(micros(t).saturating_add(queen_log::time::PG_EPOCH_UNIX_MICROS))
}
