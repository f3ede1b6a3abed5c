//! Message browsing (docs/decisions.md, "Browsing messages"): Queen's
//! `queen.list_messages_v1` and `queen.get_message_v1`, read from the log. Statuses are
//! comparisons with the cursors (`queen_log::browse`); a listing reads the segment rows of
//! its window without their blobs and decodes only the segments of what it returns.

use std::collections::{HashMap, HashSet};

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiHeapTupleData};
use pgrx::JsonB;
use queen_log::browse::{self, CursorAt, SegmentRef, Status, MAX_PAGE};
use queen_log::frame::Frame;
use queen_log::hash::txn_hash;
use queen_log::payload;
use queen_log::segment::decode_segment;
use serde_json::{json, Map, Value};

use crate::db::{bad_param, col, q, raise, required, OrRaise};

/// Segments a lookup by transactionId decodes below the sidecar (whose hashes the
/// lifecycle purged) before it gives up: the bound of a lookup's cost.
const MAX_SCAN_SEGMENTS: i64 = 1000;

/// A partition of the listing, with its queue's names.
struct Part {
    id: Uuid,
    queue: String,
    name: String,
    namespace: Option<String>,
    task: Option<String>,
    log_start: i64,
}

impl Part {
    /// The first six columns of a statement selecting `p.id, q.name, p.name, q.namespace,
    /// q.task, p.log_start` in that order.
    fn read(r: &SpiHeapTupleData<'_>) -> Part {
        Part {
            id: col(r, 1, "id"),
            queue: col(r, 2, "queue"),
            name: col(r, 3, "partition"),
            namespace: r.get(4).or_raise(),
            task: r.get(5).or_raise(),
            log_start: col(r, 6, "log_start"),
        }
    }

    fn names(&self, out: &mut Map<String, Value>) {
        out.insert("partitionId".into(), json!(self.id.to_string()));
        out.insert(
            "queuePath".into(),
            json!(format!("{}/{}", self.queue, self.name)),
        );
        out.insert("queue".into(), json!(self.queue));
        out.insert("partition".into(), json!(self.name));
        out.insert("namespace".into(), json!(self.namespace));
        out.insert("task".into(), json!(self.task));
    }
}

/// A cursor with its live lease's expiry (ISO text), as the answers show it.
struct Reader {
    at: CursorAt,
    lease_expires_at: Option<String>,
}

fn not_found(msg: &str) -> ! {
    raise(PgSqlErrorCode::ERRCODE_NO_DATA_FOUND, msg)
}

/// The readers of partitions `pids`: cursor, live lease end and expiry.
fn readers(client: &SpiClient<'_>, pids: &[Uuid]) -> HashMap<Uuid, Vec<Reader>> {
    let mut out: HashMap<Uuid, Vec<Reader>> = HashMap::new();
    let rows = q(
        client,
        "SELECT c.partition_id, c.consumer_group, c.committed,
                CASE WHEN l.worker_id IS NOT NULL AND l.lease_expires_at > clock_timestamp()
                     THEN l.batch_end END,
                CASE WHEN l.worker_id IS NOT NULL AND l.lease_expires_at > clock_timestamp()
                     THEN queen.iso_utc(l.lease_expires_at) END
           FROM queen.log_consumers c
           LEFT JOIN queen.log_leases l USING (partition_id, consumer_group)
          WHERE c.partition_id = ANY($1)
          ORDER BY c.partition_id, c.consumer_group COLLATE \"C\"",
        &[pids.to_vec().into()],
    )
    .or_raise();
    for r in rows {
        let pid: Uuid = col(&r, 1, "partition_id");
        out.entry(pid).or_default().push(Reader {
            at: CursorAt {
                group: col(&r, 2, "consumer_group"),
                committed: col(&r, 3, "committed"),
                leased_to: r.get::<i64>(4).or_raise(),
            },
            lease_expires_at: r.get::<String>(5).or_raise(),
        });
    }
    out
}

fn cursors(rs: &[Reader]) -> Vec<CursorAt> {
    rs.iter().map(|r| r.at.clone()).collect()
}

/// Queen's `status`, `queueStatus`, `busStatus` and `leaseExpiresAt` of one message.
fn statuses(out: &mut Map<String, Value>, offset: i64, rs: &[Reader], dead: bool) {
    let cs = cursors(rs);
    let overall = browse::status(offset, &cs, dead);
    let queue = rs
        .iter()
        .find(|r| r.at.group == queen_log::conventions::QUEUE_MODE);
    let queue_status = match queue {
        Some(_) if dead => Status::DeadLetter,
        Some(r) => browse::group_status(offset, &r.at),
        None => overall,
    };
    let lease = rs
        .iter()
        .find(|r| browse::group_status(offset, &r.at) == Status::Processing)
        .and_then(|r| r.lease_expires_at.clone());
    out.insert("status".into(), json!(overall.as_str()));
    out.insert("queueStatus".into(), json!(queue_status.as_str()));
    let named = cs
        .iter()
        .filter(|c| c.group != queen_log::conventions::QUEUE_MODE);
    let named: Vec<CursorAt> = named.cloned().collect();
    out.insert(
        "busStatus".into(),
        json!({"consumedBy": browse::consumed_by(offset, &named), "totalGroups": named.len()}),
    );
    out.insert("leaseExpiresAt".into(), json!(lease));
}

/// A frame's identity fields as Queen names them.
fn frame_fields(out: &mut Map<String, Value>, f: &Frame) {
    out.insert(
        "id".into(),
        json!(Uuid::from_bytes(f.message_id).to_string()),
    );
    out.insert("transactionId".into(), json!(f.transaction_id));
    out.insert(
        "traceId".into(),
        json!(f.trace_id.map(|t| Uuid::from_bytes(t).to_string())),
    );
    out.insert("producerSub".into(), json!(f.producer_sub));
}

/// The listing's filters (Queen's keys); any other key is refused naming it.
struct Filters {
    queue: Option<String>,
    partition: Option<String>,
    namespace: Option<String>,
    task: Option<String>,
    status: Option<Status>,
    from: Option<String>,
    to: Option<String>,
    limit: i64,
    offset: i64,
}

fn text_filter(o: &Map<String, Value>, k: &str) -> Option<String> {
    match o.get(k) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::String(_)) => None,
        Some(v) => bad_param(format!(
            "list_messages_v1: filter {k} must be a string, got {v}"
        )),
    }
}

fn int_filter(o: &Map<String, Value>, k: &str, default: i64, max: i64) -> i64 {
    let v = match o.get(k) {
        None | Some(Value::Null) => return default,
        Some(v) => v.as_i64(),
    };
    match v {
        Some(n) if (0..=max).contains(&n) => n,
        _ => bad_param(format!(
            "list_messages_v1: filter {k} must be an integer from 0 to {max}, got {}",
            o[k]
        )),
    }
}

fn parse_filters(v: &Value) -> Filters {
    let Some(o) = v.as_object() else {
        bad_param("list_messages_v1: p_filters must be a JSON object")
    };
    const KNOWN: [&str; 9] = [
        "queue",
        "partition",
        "namespace",
        "task",
        "status",
        "from",
        "to",
        "limit",
        "offset",
    ];
    if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        bad_param(format!("list_messages_v1: unknown filter {k}"));
    }
    let status = text_filter(o, "status").map(|s| {
        Status::parse(&s).unwrap_or_else(|| {
            bad_param(format!(
                "list_messages_v1: status must be pending, processing, completed or dead_letter, got {s}"
            ))
        })
    });
    Filters {
        queue: text_filter(o, "queue"),
        partition: text_filter(o, "partition"),
        namespace: text_filter(o, "namespace"),
        task: text_filter(o, "task"),
        status,
        from: text_filter(o, "from"),
        to: text_filter(o, "to"),
        limit: int_filter(o, "limit", 200, MAX_PAGE),
        offset: int_filter(o, "offset", 0, i64::from(i32::MAX)),
    }
}

/// The tenant's partitions the filters name, in id order.
fn parts(client: &SpiClient<'_>, f: &Filters, tenant: Uuid) -> Vec<Part> {
    q(
        client,
        "SELECT p.id, q.name::text, p.name, q.namespace::text, q.task::text, p.log_start
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE q.tenant_id = $1 AND ($2::text IS NULL OR q.name = $2)
            AND ($3::text IS NULL OR p.name = $3) AND ($4::text IS NULL OR q.namespace = $4)
            AND ($5::text IS NULL OR q.task = $5)
          ORDER BY p.id",
        &[
            tenant.into(),
            f.queue.clone().into(),
            f.partition.clone().into(),
            f.namespace.clone().into(),
            f.task.clone().into(),
        ],
    )
    .or_raise()
    .map(|r| Part::read(&r))
    .collect()
}

/// The segment rows (no blobs) of `parts` created in the window, newest first, with the
/// creation time as ISO text. Queen's window: `from` (default an hour ago) inclusive,
/// `to` (default now) inclusive of its whole minute.
fn window(client: &SpiClient<'_>, ps: &[Part], f: &Filters) -> Vec<(SegmentRef, String)> {
    let index: HashMap<Uuid, usize> = ps.iter().enumerate().map(|(i, p)| (p.id, i)).collect();
    let pids: Vec<Uuid> = ps.iter().map(|p| p.id).collect();
    q(
        client,
        "SELECT s.partition_id, s.base_offset, s.end_offset, queen.iso_utc(s.created_at)
           FROM queen.log_segments s
          WHERE s.partition_id = ANY($1)
            AND s.created_at >= coalesce($2::text::timestamptz, now() - interval '1 hour')
            AND s.created_at < date_trunc('minute', coalesce($3::text::timestamptz, now())) + interval '1 minute'
          ORDER BY s.created_at DESC, s.partition_id, s.base_offset DESC",
        &[pids.into(), f.from.clone().into(), f.to.clone().into()],
    )
    .or_raise()
    .map(|r| {
        let p = index[&col::<Uuid>(&r, 1, "partition_id")];
        let seg = SegmentRef {
            partition: p,
            base: col(&r, 2, "base_offset"),
            end: col(&r, 3, "end_offset"),
            log_start: ps[p].log_start,
        };
        (seg, col(&r, 4, "created_at"))
    })
    .collect()
}

/// Offsets of partitions `pids` with a DLQ row (any group).
fn dead_offsets(client: &SpiClient<'_>, pids: &[Uuid]) -> HashSet<(Uuid, i64)> {
    q(
        client,
        "SELECT DISTINCT partition_id, \"offset\" FROM queen.log_dlq WHERE partition_id = ANY($1)",
        &[pids.to_vec().into()],
    )
    .or_raise()
    .map(|r| (col(&r, 1, "partition_id"), col(&r, 2, "offset")))
    .collect()
}

fn frames_of(client: &SpiClient<'_>, pid: Uuid, base: i64) -> Vec<Frame> {
    let blob: Vec<u8> = q(
        client,
        "SELECT blob FROM queen.log_segments WHERE partition_id = $1 AND base_offset = $2",
        &[pid.into(), base.into()],
    )
    .or_raise()
    .next()
    .map(|r| col(&r, 1, "blob"))
    .unwrap_or_else(|| not_found("the segment went while it was read (retention); retry"));
    decode_segment(&blob)
        .unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_DATA_CORRUPTED, e.to_string()))
}

fn list(client: &SpiClient<'_>, f: &Filters, tenant: Uuid) -> Value {
    let ps = parts(client, f, tenant);
    let pids: Vec<Uuid> = ps.iter().map(|p| p.id).collect();
    let segs = window(client, &ps, f);
    let rs = readers(client, &pids);
    let dead = dead_offsets(client, &pids);
    let cs: Vec<Vec<CursorAt>> = ps
        .iter()
        .map(|p| rs.get(&p.id).map_or(Vec::new(), |r| cursors(r)))
        .collect();
    let refs: Vec<SegmentRef> = segs.iter().map(|(s, _)| *s).collect();
    let picked = browse::pick(
        &refs,
        f.status,
        f.offset as usize,
        f.limit as usize,
        |p, o| browse::status(o, &cs[p], dead.contains(&(ps[p].id, o))),
    );
    let mut decoded: HashMap<usize, Vec<Frame>> = HashMap::new();
    let mut messages = Vec::with_capacity(picked.len());
    for pk in &picked {
        let (seg, created) = &segs[pk.segment];
        let part = &ps[seg.partition];
        let frames = decoded
            .entry(pk.segment)
            .or_insert_with(|| frames_of(client, part.id, seg.base));
        let mut m = Map::new();
        frame_fields(&mut m, &frames[(pk.offset - seg.base) as usize]);
        part.names(&mut m);
        let empty = Vec::new();
        statuses(
            &mut m,
            pk.offset,
            rs.get(&part.id).unwrap_or(&empty),
            dead.contains(&(part.id, pk.offset)),
        );
        m.insert("offset".into(), json!(pk.offset));
        m.insert("queuePriority".into(), json!(0));
        m.insert("createdAt".into(), json!(created));
        messages.push(Value::Object(m));
    }
    let groups: Vec<&str> = rs.values().flatten().map(|r| r.at.group.as_str()).collect();
    json!({"messages": messages, "mode": browse::mode(groups)})
}

/// List messages (Queen's `list_messages_v1`): filters `queue, partition, namespace,
/// task, status, from, to, limit` (default 200, at most 1,000), `offset`; newest first.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn list_messages_v1(
    p_filters: default!(Option<JsonB>, "'{}'"),
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let f = parse_filters(&p_filters.map_or(json!({}), |j| j.0));
    let tenant = required(p_tenant, "p_tenant");
    JsonB(Spi::connect(|c| list(c, &f, tenant)))
}

/// The offset of `txn` in partition `pid`: through the sidecar (the ack path's index),
/// else its DLQ rows, else by decoding the segments below the sidecar, newest first, at
/// most MAX_SCAN_SEGMENTS of them.
pub fn offset_of(client: &SpiClient<'_>, pid: Uuid, txn: &str) -> Option<i64> {
    let h = txn_hash(txn);
    let rows = q(
        client,
        "SELECT base_offset, hashes FROM queen.log_txns
          WHERE partition_id = $1 AND position($2::bytea IN hashes) > 0",
        &[pid.into(), h.to_vec().into()],
    )
    .or_raise();
    for r in rows {
        let base: i64 = col(&r, 1, "base_offset");
        let hashes: Vec<u8> = col(&r, 2, "hashes");
        if let Some(i) = hashes.chunks_exact(16).position(|c| c == h) {
            return Some(base + i as i64);
        }
    }
    let dlq = q(
        client,
        "SELECT max(\"offset\") FROM queen.log_dlq WHERE partition_id = $1 AND transaction_id = $2",
        &[pid.into(), txn.into()],
    )
    .or_raise()
    .next()
    .and_then(|r| r.get::<i64>(1).or_raise());
    dlq.or_else(|| scan_below_sidecar(client, pid, txn))
}

fn scan_below_sidecar(client: &SpiClient<'_>, pid: Uuid, txn: &str) -> Option<i64> {
    let bases: Vec<i64> = q(
        client,
        "SELECT s.base_offset FROM queen.log_segments s JOIN queen.log_partitions p ON p.id = s.partition_id
          WHERE s.partition_id = $1 AND p.id = $1 AND s.base_offset < p.txns_start
          ORDER BY s.base_offset DESC LIMIT $2",
        &[pid.into(), MAX_SCAN_SEGMENTS.into()],
    )
    .or_raise()
    .map(|r| col(&r, 1, "base_offset"))
    .collect();
    bases.into_iter().find_map(|base| {
        let frames = frames_of(client, pid, base);
        frames
            .iter()
            .position(|f| f.transaction_id == txn)
            .map(|i| base + i as i64)
    })
}

fn one_part(client: &SpiClient<'_>, pid: Uuid, tenant: Uuid) -> Option<(Part, Value, i64)> {
    q(
        client,
        "SELECT p.id, q.name::text, p.name, q.namespace::text, q.task::text, p.log_start,
                jsonb_build_object('leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
                                   'retryDelay', q.retry_delay, 'ttl', q.ttl, 'priority', q.priority),
                p.last_offset
           FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = $1 AND q.tenant_id = $2",
        &[pid.into(), tenant.into()],
    )
    .or_raise()
    .next()
    .map(|r| {
        let part = Part::read(&r);
        (
            part,
            col::<JsonB>(&r, 7, "config").0,
            col(&r, 8, "last_offset"),
        )
    })
}

/// The segment holding `offset`: its base and creation time (ISO text).
fn segment_at(client: &SpiClient<'_>, pid: Uuid, offset: i64) -> Option<(i64, String)> {
    q(
        client,
        "SELECT r_base, queen.iso_utc(r_created) FROM queen.log_segment_at_v1($1, $2)",
        &[pid.into(), offset.into()],
    )
    .or_raise()
    .next()
    .map(|r| (col(&r, 1, "base"), col(&r, 2, "created")))
}

/// The message's DLQ rows: (group, error, retry count), newest failure first.
fn dlq_rows(
    client: &SpiClient<'_>,
    pid: Uuid,
    offset: i64,
) -> Vec<(String, Option<String>, Option<i32>)> {
    q(
        client,
        "SELECT consumer_group, error, retry_count FROM queen.log_dlq
          WHERE partition_id = $1 AND \"offset\" = $2 ORDER BY failed_at DESC",
        &[pid.into(), offset.into()],
    )
    .or_raise()
    .map(|r| {
        (
            col(&r, 1, "consumer_group"),
            r.get(2).or_raise(),
            r.get(3).or_raise(),
        )
    })
    .collect()
}

/// Queen's answer for an address nobody (of this tenant) has.
fn gone() -> ! {
    not_found("Message not found")
}

fn detail(client: &SpiClient<'_>, pid: Uuid, txn: &str, tenant: Uuid) -> Value {
    let (part, config, last) = one_part(client, pid, tenant).unwrap_or_else(|| gone());
    let offset = offset_of(client, pid, txn).unwrap_or_else(|| gone());
    if offset < part.log_start || offset > last {
        gone();
    }
    let (base, created) = segment_at(client, pid, offset).unwrap_or_else(|| gone());
    let frames = frames_of(client, pid, base);
    let f = &frames[(offset - base) as usize];
    let dlq = dlq_rows(client, pid, offset);
    let rs = readers(client, &[pid]).remove(&pid).unwrap_or_default();
    let mut m = Map::new();
    frame_fields(&mut m, f);
    part.names(&mut m);
    statuses(&mut m, offset, &rs, !dlq.is_empty());
    m.insert("offset".into(), json!(offset));
    m.insert("payload".into(), payload::json_value(f));
    m.insert("isEncrypted".into(), json!(f.encrypted));
    m.insert("createdAt".into(), json!(created));
    m.insert(
        "errorMessage".into(),
        json!(dlq.first().and_then(|d| d.1.clone())),
    );
    m.insert("retryCount".into(), json!(dlq.first().and_then(|d| d.2)));
    m.insert("queueConfig".into(), config);
    let mut mode =
        serde_json::to_value(browse::mode(rs.iter().map(|r| r.at.group.as_str()))).expect("mode");
    let named: Vec<CursorAt> = cursors(&rs)
        .into_iter()
        .filter(|c| c.group != queen_log::conventions::QUEUE_MODE)
        .collect();
    mode["consumedByGroups"] = json!(browse::consumed_by(offset, &named));
    m.insert("mode".into(), mode);
    let groups: Vec<Value> = rs
        .iter()
        .map(|r| {
            let dead = dlq.iter().any(|d| d.0 == r.at.group);
            let st = if dead { Status::DeadLetter } else { browse::group_status(offset, &r.at) };
            json!({"name": r.at.group, "consumed": offset <= r.at.committed, "status": st.as_str(),
                   "leaseExpiresAt": (st == Status::Processing).then(|| r.lease_expires_at.clone()).flatten()})
        })
        .collect();
    m.insert("consumerGroups".into(), Value::Array(groups));
    Value::Object(m)
}

/// One message by address (Queen's `get_message_v1`): payload, offsets, created time,
/// per-group status, trace id. An unknown address, or another tenant's, is P0002.
#[pg_extern(stable, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn get_message_v1(
    p_partition_id: Option<Uuid>,
    p_transaction_id: Option<&str>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let pid = required(p_partition_id, "p_partition_id");
    let txn = required(p_transaction_id, "p_transaction_id");
    let tenant = required(p_tenant, "p_tenant");
    JsonB(Spi::connect(|c| detail(c, pid, txn, tenant)))
}
