//! Reads by offset (docs/decisions.md, "Reads by offset"; the rules in
//! queen_log::fetch): `queen.fetch_v1(entries, max_bytes, tenant)` reads each entry's
//! partition from its offset, decoding only the segments the range touches, until the
//! entry's and the call's byte budgets are spent. Read-only, no lock: one snapshot for
//! the whole call (STABLE), so a partition's high watermark and its records agree.

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::fetch::{
    check, in_range, take, EntryIn, EntryOut, FetchOut, PartitionRead, Record, MAX_ENTRY_BYTES,
    OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION,
};
use queen_log::payload::json_raw_of;
use queen_log::segment::decode_segment;

use crate::db::{bad_param, col, find_partition, iso_utc, jsonb, q, raise, required, OrRaise};

/// A partition's ends in the call's snapshot: (high watermark, log start).
fn ends(client: &SpiClient<'_>, pid: Uuid) -> Option<(i64, i64)> {
    q(
        client,
        "SELECT last_offset + 1, log_start FROM queen.log_partitions WHERE id = $1",
        &[pid.into()],
    )
    .or_raise()
    .next()
    .map(|r| (col(&r, 1, "high watermark"), col(&r, 2, "log_start")))
}

/// The segment holding `offset` (the first one ending at or after it), if any.
fn segment_at(
    client: &SpiClient<'_>,
    pid: Uuid,
    offset: i64,
) -> Option<(i64, pgrx::datum::TimestampWithTimeZone, Vec<u8>)> {
    q(
        client,
        "SELECT base_offset, created_at, blob FROM queen.log_segments
          WHERE partition_id = $1 AND end_offset >= $2 ORDER BY base_offset LIMIT 1",
        &[pid.into(), offset.into()],
    )
    .or_raise()
    .next()
    .map(|r| {
        (
            col(&r, 1, "base_offset"),
            col(&r, 2, "created_at"),
            col(&r, 3, "blob"),
        )
    })
}

/// Reads one entry within `budget` bytes (the call's remainder); returns what it read
/// and the bytes spent. The partition is read by `queen.fetch_partition_v1`, which
/// Citus runs on the partition's worker (docs/citus.md): only the records travel.
fn read_entry(
    client: &SpiClient<'_>,
    tenant: Uuid,
    e: &EntryIn,
    budget: i64,
    must_progress: bool,
) -> (EntryOut, i64) {
    let mut out = EntryOut {
        queue: e.queue.clone(),
        partition: e.partition.clone(),
        records: Vec::new(),
        high_watermark: None,
        log_start_offset: None,
        next_offset: e.offset,
        error: None,
    };
    let Some(pid) = find_partition(client, tenant, &e.queue, &e.partition) else {
        out.error = Some(UNKNOWN_TOPIC_OR_PARTITION.into());
        return (out, 0);
    };
    // Citus delegates a call made inside another function only when it is forced
    // (sql/citus.sql), its partition argument is a constant and the function stands in
    // FROM: hence literals (a uuid, numbers and a bool this code formats, never caller
    // text) and the FROM form.
    let call = format!(
        "SELECT r FROM queen.fetch_partition_v1('{pid}'::uuid, {}::bigint, {}::bigint, {must_progress}) AS r",
        e.offset,
        budget.min(e.max_bytes),
    );
    let text: String = client
        .select(&call, None, &[])
        .or_raise()
        .next()
        .map(|r| col(&r, 1, "fetch_partition_v1"))
        .unwrap_or_else(|| crate::db::raise_internal("fetch_partition_v1 answered no row"));
    let read: PartitionRead = serde_json::from_str(&text)
        .unwrap_or_else(|err| crate::db::raise_internal(format!("fetch_partition_v1: {err}")));
    out.records = read.records;
    out.high_watermark = read.high_watermark;
    out.log_start_offset = read.log_start_offset;
    out.next_offset = read.next_offset;
    out.error = read.error;
    (out, read.spent)
}

/// One partition's records from `offset` within `budget` payload bytes (the first one
/// whatever its size when `must_progress`): decodes only the segments the range
/// touches. Every statement names the partition, so on Citus the whole read runs on
/// the worker holding it.
fn read_partition(
    client: &SpiClient<'_>,
    pid: Uuid,
    offset: i64,
    budget: i64,
    must_progress: bool,
) -> PartitionRead {
    let mut out = PartitionRead {
        records: Vec::new(),
        high_watermark: None,
        log_start_offset: None,
        next_offset: offset,
        spent: 0,
        error: None,
    };
    let Some((hw, log_start)) = ends(client, pid) else {
        out.error = Some(UNKNOWN_TOPIC_OR_PARTITION.into());
        return out;
    };
    out.high_watermark = Some(hw);
    out.log_start_offset = Some(log_start);
    if !in_range(offset, log_start, hw) {
        out.error = Some(OFFSET_OUT_OF_RANGE.into());
        return out;
    }
    let mut left = budget;
    let mut next = offset;
    while next < hw {
        let Some((base, created, blob)) = segment_at(client, pid, next) else {
            break;
        };
        let frames = decode_segment(&blob)
            .unwrap_or_else(|err| raise(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, err.to_string()));
        let from = (next - base).max(0) as usize;
        let rest = frames.get(from..).unwrap_or_default();
        let sizes: Vec<usize> = rest.iter().map(|f| f.payload.len()).collect();
        let n = take(&sizes, left, must_progress && out.records.is_empty());
        let ts = iso_utc(created);
        for (k, f) in rest[..n].iter().enumerate() {
            out.records.push(Record {
                offset: next + k as i64,
                transaction_id: f.transaction_id.clone(),
                payload: json_raw_of(&f.payload).into_owned(),
                ts: ts.clone(),
            });
        }
        let bytes: i64 = sizes[..n].iter().map(|s| *s as i64).sum();
        left -= bytes;
        out.spent += bytes;
        next += n as i64;
        if n < rest.len() {
            break;
        }
    }
    out.next_offset = next;
    out
}

/// `queen.fetch_partition_v1(partition_id, offset, budget, must_progress)`: the
/// per-partition half of `queen.fetch_v1`, as JSON text ([`PartitionRead`]). Registered
/// with Citus by its partition argument (force-delegated: it is called from inside
/// `fetch_v1`).
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn fetch_partition_v1(
    p_partition_id: Option<Uuid>,
    p_offset: Option<i64>,
    p_budget: Option<i64>,
    p_must_progress: Option<bool>,
) -> String {
    let pid = required(p_partition_id, "p_partition_id");
    let offset = required(p_offset, "p_offset");
    let budget = required(p_budget, "p_budget");
    let must_progress = p_must_progress.unwrap_or(false);
    Spi::connect(|client| {
        let read = read_partition(client, pid, offset, budget.max(0), must_progress);
        serde_json::to_string(&read).unwrap_or_else(|e| crate::db::raise_internal(e.to_string()))
    })
}

/// `queen.fetch_v1(entries, max_bytes, tenant)`: Queen 2.x's fetch. `entries` is a JSON
/// array of `{queue, partition, offset, maxBytes}`; the answer `{entries: [...]}` has one
/// entry per asked, in order, each with its records, `highWatermark`,
/// `logStartOffset`, `nextOffset` and, when nothing could be read, `error`
/// (`UNKNOWN_TOPIC_OR_PARTITION`, `OFFSET_OUT_OF_RANGE`). Bad requests are 22023.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn fetch_v1(
    p_entries: Option<JsonB>,
    p_max_bytes: default!(Option<i64>, 8388608),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let entries: Vec<EntryIn> = serde_json::from_value(required(p_entries, "p_entries").0)
        .unwrap_or_else(|e| bad_param(format!("fetch: entries: {e}")));
    let call = p_max_bytes.unwrap_or(MAX_ENTRY_BYTES);
    check(&entries, call).unwrap_or_else(|e| bad_param(format!("fetch: {e}")));
    for e in &entries {
        crate::names::check(queen_log::names::NameKind::Queue, &e.queue);
        crate::names::check(queen_log::names::NameKind::Partition, &e.partition);
    }
    let tenant = required(p_tenant, "p_tenant");
    Spi::connect(|client| {
        let mut left = call;
        let mut out = Vec::with_capacity(entries.len());
        for e in &entries {
            let (read, spent) = read_entry(client, tenant, e, left.max(0), spent_nothing(&out));
            left -= spent;
            out.push(read);
        }
        jsonb(&FetchOut { entries: out })
    })
}

/// Whether no entry before this one read a record: the first record of a call is read
/// whatever its size (queen_log::fetch::take).
fn spent_nothing(read: &[EntryOut]) -> bool {
    read.iter().all(|e| e.records.is_empty())
}
