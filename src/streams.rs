//! Streams (Queen's `/streams/v1`; docs/decisions.md "Streams"): stream queries, their
//! keyed state, and the processing cycle — state ops, sink pushes and the source ack in
//! one transaction. The shapes and bounds are `queen_log::streams`'; this file reads and
//! writes the tables. `queen.streams_cycle_v1` (sql/streams.sql) runs each request of a
//! merged call in its own subtransaction around `streams_cycle_request_v1`, which raises
//! on any refusal so that nothing of a refused cycle stays.

use pgrx::datum::Uuid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::ack::{ack_upto, ack_upto_keeping_lease};
use queen_log::encryption::is_envelope;
use queen_log::frame::Frame;
use queen_log::hash::txn_hash;
use queen_log::streams::{
    check_cycle, cycle_digest, final_ops, AckKind, AckResult, CycleAck, CycleRequest, CycleResult,
    PushResult, RegisterRequest, SinkItem, StateGetRequest, FENCED, MAX_BATCH,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

// `now()` is a value, not a call in the statement: Citus refuses volatile functions in
// modifications of its tables (docs/citus.md).
use crate::db::{
    bad_param, col, default_tenant, jsonb, lock_checked, now, parse_uuid, q, raise_q, required,
    std_uuid, write_cursor, OrRaise,
};
use crate::dlq::{dlq_head, DlqEntry};
use crate::push::{push_groups, FrameGroup, Landed};

/// Every refusal of a cycle starts with this (P0001), so callers can tell it apart.
const QSTREAM: &str = "QSTREAM";

/// The position a merged request's element carries.
#[derive(Deserialize)]
struct Idx {
    idx: Option<i64>,
}

/// A request, or Queen's merged form `[{..., idx}]`: each element with its position.
fn requests<T: DeserializeOwned>(p: Value, what: &str) -> (bool, Vec<(i64, T)>) {
    let (merged, items) = match p {
        Value::Array(a) => (true, a),
        v @ Value::Object(_) => (false, vec![v]),
        _ => bad_param(format!("{what}: a JSON object or an array of objects")),
    };
    if items.len() > MAX_BATCH {
        bad_param(format!("{what}: at most {MAX_BATCH} requests in one call"));
    }
    let parsed = items
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            // Queen's position, when it is an integer; else the element's own.
            let idx = Idx::deserialize(&v)
                .ok()
                .and_then(|x| x.idx)
                .unwrap_or(i as i64);
            let r = serde_json::from_value(v)
                .unwrap_or_else(|e| bad_param(format!("{what}[{i}]: {e}")));
            (idx, r)
        })
        .collect();
    (merged, parsed)
}

/// The answer in the request's form: the result, or `[{idx, result}]`.
fn answer(merged: bool, results: Vec<(i64, Value)>) -> JsonB {
    if merged {
        let out: Vec<Value> = results
            .into_iter()
            .map(|(idx, result)| json!({"idx": idx, "result": result}))
            .collect();
        return JsonB(Value::Array(out));
    }
    JsonB(results.into_iter().next().map_or(Value::Null, |r| r.1))
}

fn uuid_of(s: &Option<String>, key: &str) -> Uuid {
    let s = s.as_deref().unwrap_or_default();
    parse_uuid(s).unwrap_or_else(|| bad_param(format!("{key} \"{s}\" is not a uuid")))
}

// ---- register ------------------------------------------------------------------------

/// One registration (Queen's rules): new → fresh; the same hash → source and sink
/// updated, state kept; another hash with `reset` → state wiped, hash updated; another
/// hash without → the conflict answer, nothing written.
fn register(client: &mut SpiClient<'_>, tenant: Uuid, r: &RegisterRequest) -> Value {
    r.check().unwrap_or_else(|e| bad_param(e));
    let (name, source, hash) = (
        r.name.as_deref().unwrap_or_default(),
        r.source_queue.as_deref().unwrap_or_default(),
        r.config_hash.as_deref().unwrap_or_default(),
    );
    let sink = r.sink_queue.as_deref().filter(|s| !s.is_empty());
    let inserted = q(
        client,
        "INSERT INTO queen.stream_queries (tenant_id, name, source_queue, sink_queue, config_hash)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, name) DO NOTHING RETURNING id",
        &[
            tenant.into(),
            name.into(),
            source.into(),
            sink.into(),
            hash.into(),
        ],
    )
    .or_raise()
    .next()
    .map(|row| col::<Uuid>(&row, 1, "id"));
    let done = |id: Uuid, fresh: bool, reset: bool| {
        json!({"success": true, "query_id": std_uuid(id), "name": name, "config_hash": hash,
               "fresh": fresh, "reset": reset})
    };
    if let Some(id) = inserted {
        return done(id, true, false);
    }
    let row = q(
        client,
        "SELECT id, config_hash FROM queen.stream_queries WHERE tenant_id = $1 AND name = $2
            FOR UPDATE",
        &[tenant.into(), name.into()],
    )
    .or_raise()
    .next()
    .map(|row| {
        (
            col::<Uuid>(&row, 1, "id"),
            col::<String>(&row, 2, "config_hash"),
        )
    });
    let Some((id, stored)) = row else {
        raise_q(format!(
            "{QSTREAM} query \"{name}\" was deleted during its registration"
        ));
    };
    let reset = stored != hash;
    if reset && !r.reset.unwrap_or(false) {
        return json!({"success": false, "query_id": std_uuid(id), "name": name,
            "error": format!("config_hash mismatch: operator chain changed for queryId '{name}'. \
                              Pass reset:true to wipe existing state, or use a new queryId.")});
    }
    if reset {
        for sql in [
            "DELETE FROM queen.stream_state WHERE query_id = $1",
            "DELETE FROM queen.stream_shards WHERE query_id = $1",
        ] {
            q(client, sql, &[id.into()]).or_raise();
        }
    }
    q(
        client,
        "UPDATE queen.stream_queries SET source_queue = $2, sink_queue = $3, config_hash = $4,
                updated_at = $5 WHERE id = $1",
        &[
            id.into(),
            source.into(),
            sink.into(),
            hash.into(),
            now().into(),
        ],
    )
    .or_raise();
    done(id, false, reset)
}

/// `queen.streams_register_query_v1(p, tenant)`: one registration or Queen's merged
/// form. Input errors are 22023 and write nothing; a config-hash conflict is an answer.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn streams_register_query_v1(
    p: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let (merged, reqs) = requests::<RegisterRequest>(required(p, "p").0, "register");
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let results = Spi::connect_mut(|c| {
        reqs.iter()
            .map(|(idx, r)| (*idx, register(c, tenant, r)))
            .collect()
    });
    answer(merged, results)
}

// ---- state ---------------------------------------------------------------------------

fn state_get(client: &SpiClient<'_>, tenant: Uuid, r: &StateGetRequest) -> Value {
    r.check().unwrap_or_else(|e| bad_param(e));
    let keys = r.keys.clone().filter(|k| !k.is_empty());
    let prefix = r.key_prefix.as_deref().filter(|p| !p.is_empty());
    let rows = q(
        client,
        "SELECT COALESCE(jsonb_agg(jsonb_build_object('key', s.key, 'value', s.value,
                                                      'updated_at', s.updated_at)
                                   ORDER BY s.key), '[]'::jsonb)
           FROM queen.stream_state s JOIN queen.stream_queries qq ON qq.id = s.query_id
          WHERE s.query_id = $1 AND s.partition_id = $2 AND qq.tenant_id = $3
            AND ($4::text[] IS NULL OR s.key = ANY ($4))
            AND ($5::text IS NULL OR starts_with(s.key, $5))
            AND ($6::bigint IS NULL OR (jsonb_typeof(s.value -> 'windowEnd') = 'number'
                                        AND (s.value ->> 'windowEnd')::numeric <= $6))",
        &[
            uuid_of(&r.query_id, "query_id").into(),
            uuid_of(&r.partition_id, "partition_id").into(),
            tenant.into(),
            keys.into(),
            prefix.into(),
            r.ripe_ms().into(),
        ],
    )
    .or_raise()
    .first()
    .get_one::<JsonB>()
    .or_raise()
    .map_or(json!([]), |j| j.0);
    json!({"success": true, "rows": rows})
}

/// `queen.streams_state_get_v1(p, tenant)`: a (query, partition)'s state rows by key,
/// filtered by `keys`, a literal `key_prefix` and `ripe_at_or_before`; one read or
/// Queen's merged form. A query of another tenant reads as one without rows.
#[pg_extern(stable, parallel_safe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn streams_state_get_v1(
    p: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let (merged, reqs) = requests::<StateGetRequest>(required(p, "p").0, "state_get");
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    let results = Spi::connect(|c| {
        reqs.iter()
            .map(|(idx, r)| (*idx, state_get(c, tenant, r)))
            .collect()
    });
    answer(merged, results)
}

// ---- the cycle -----------------------------------------------------------------------

/// The query's source queue and the source partition's queue name, both the tenant's;
/// the partition must be one of the source queue's.
fn source_of(client: &SpiClient<'_>, tenant: Uuid, query: Uuid, pid: Uuid) -> String {
    let source: Option<String> = q(
        client,
        "SELECT source_queue FROM queen.stream_queries WHERE id = $1 AND tenant_id = $2",
        &[query.into(), tenant.into()],
    )
    .or_raise()
    .next()
    .map(|row| col(&row, 1, "source_queue"));
    let Some(source) = source else {
        raise_q(format!("{QSTREAM} query {query} not found"));
    };
    let queue: Option<String> = q(
        client,
        "SELECT q.name::text FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = $1 AND q.tenant_id = $2",
        &[pid.into(), tenant.into()],
    )
    .or_raise()
    .next()
    .map(|row| col(&row, 1, "queues.name"));
    match queue {
        None => raise_q(format!("{QSTREAM} partition {pid} not found")),
        Some(q) if !source.is_empty() && q != source => raise_q(format!(
            "{QSTREAM} partition {pid} belongs to queue \"{q}\", not to the query's source queue \"{source}\""
        )),
        Some(q) => q,
    }
}

/// Locks the shard row (serialising cycles of one (query, partition)) and answers
/// whether this digest is the shard's last committed cycle: a retry of that commit.
fn lock_shard(client: &mut SpiClient<'_>, query: Uuid, pid: Uuid, digest: &str) -> bool {
    let locked = |client: &mut SpiClient<'_>| -> Option<Option<String>> {
        q(
            client,
            "SELECT last_digest FROM queen.stream_shards
              WHERE query_id = $1 AND partition_id = $2 FOR UPDATE",
            &[query.into(), pid.into()],
        )
        .or_raise()
        .next()
        .map(|row| row.get::<String>(1).or_raise())
    };
    // The shard exists after its first cycle: one statement then, two the first time.
    let last = match locked(client) {
        Some(last) => last,
        None => {
            q(
                client,
                "INSERT INTO queen.stream_shards (query_id, partition_id) VALUES ($1, $2)
                 ON CONFLICT (query_id, partition_id) DO NOTHING",
                &[query.into(), pid.into()],
            )
            .or_raise();
            locked(client).flatten()
        }
    };
    last.as_deref() == Some(digest)
}

/// The state ops' final effect per key (queen_log::streams::final_ops): one delete and
/// one upsert statement, whatever the number of ops. A cycle fenced by the state it read
/// (`CycleRequest::fenced_by_state`, an idle flush) is fenced out (rolled back) when a
/// row it deletes is gone: it closes a window that another cycle has closed (and
/// emitted) since it read it.
fn apply_state(client: &mut SpiClient<'_>, query: Uuid, pid: Uuid, r: &CycleRequest) {
    let (upserts, deletes) = final_ops(r.ops());
    if !deletes.is_empty() {
        let gone: Vec<String> = q(
            client,
            "DELETE FROM queen.stream_state WHERE query_id = $1 AND partition_id = $2
                AND key = ANY ($3) RETURNING key",
            &[query.into(), pid.into(), deletes.clone().into()],
        )
        .or_raise()
        .map(|row| col::<String>(&row, 1, "stream_state.key"))
        .collect();
        if r.fenced_by_state() && gone.len() < deletes.len() {
            let missing = deletes.iter().find(|k| !gone.contains(k));
            raise_q(format!(
                "{FENCED} partition {pid}: the state row {:?} this cycle deletes no longer \
                 exists (another cycle closed it after this one read it); nothing was written",
                missing.map(String::as_str).unwrap_or_default()
            ));
        }
    }
    if !upserts.is_empty() {
        let (keys, values): (Vec<String>, Vec<JsonB>) =
            upserts.into_iter().map(|(k, v)| (k, JsonB(v))).unzip();
        q(
            client,
            // No parameter in ON CONFLICT: Citus runs this INSERT ... SELECT through the
            // coordinator and sends the conflict clause to the worker without them.
            "INSERT INTO queen.stream_state AS s (query_id, partition_id, key, value, updated_at)
             SELECT $1::uuid, $2::uuid, k, v, $5::timestamptz
               FROM unnest($3::text[], $4::jsonb[]) AS u (k, v)
             ON CONFLICT (query_id, partition_id, key)
             DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at",
            &[
                query.into(),
                pid.into(),
                keys.into(),
                values.into(),
                now().into(),
            ],
        )
        .or_raise();
    }
}

/// A sink item as a frame: its message id (or a new UUIDv7), its transactionId (or the
/// message id), its payload (`{}` when absent, as in Queen).
fn frame_of(i: usize, it: &SinkItem) -> Frame {
    let id = it
        .message_id
        .as_deref()
        .filter(|m| !m.is_empty())
        .and_then(|m| uuid::Uuid::parse_str(m).ok())
        .unwrap_or_else(uuid::Uuid::now_v7);
    let trace = it
        .trace_id
        .as_deref()
        .and_then(|t| uuid::Uuid::parse_str(t).ok());
    let payload = it.payload.clone().unwrap_or_else(|| json!({})).to_string();
    let encrypted = it.is_encrypted.unwrap_or(false);
    if encrypted && !is_envelope(payload.as_bytes()) {
        bad_param(format!(
            "push_items[{i}]: is_encrypted is set but the payload is not an encryption envelope \
             {{\"encrypted\", \"iv\", \"authTag\"}}"
        ));
    }
    Frame {
        message_id: *id.as_bytes(),
        trace_id: trace.map(|t| *t.as_bytes()),
        transaction_id: it.transaction_id.clone().unwrap_or_else(|| id.to_string()),
        // The broker's word (the token's subject), as `is_encrypted` is.
        producer_sub: it.producer_sub.clone().filter(|s| !s.is_empty()),
        encrypted,
        payload: payload.into_bytes(),
    }
}

/// The sink pushes, one segment per (queue, partition) in order of first appearance; a
/// transactionId repeated in one partition, or already in its dedup window, is answered
/// as a duplicate (Queen's per-item `duplicate`), not an error.
fn push_sink(client: &mut SpiClient<'_>, tenant: Uuid, items: &[SinkItem]) -> Vec<PushResult> {
    let mut groups: Vec<FrameGroup<'_>> = Vec::new();
    // Per item: (group, index in group) or the earlier item it repeats.
    let mut place: Vec<Result<(usize, usize), usize>> = Vec::with_capacity(items.len());
    let mut seen: std::collections::HashMap<(&str, &str, String), usize> = Default::default();
    for (i, it) in items.iter().enumerate() {
        let f = frame_of(i, it);
        let (queue, partition) = (it.queue.as_deref().unwrap_or_default(), it.partition_name());
        if let Some(&first) = seen.get(&(queue, partition, f.transaction_id.clone())) {
            place.push(Err(first));
            continue;
        }
        seen.insert((queue, partition, f.transaction_id.clone()), i);
        let g = match groups
            .iter()
            .position(|g| g.queue == queue && g.partition == partition)
        {
            Some(g) => g,
            None => {
                groups.push(FrameGroup {
                    tenant,
                    queue,
                    partition,
                    frames: Vec::new(),
                });
                groups.len() - 1
            }
        };
        groups[g].frames.push(f);
        place.push(Ok((g, groups[g].frames.len() - 1)));
    }
    let landed = push_groups(client, &groups);
    let mut out: Vec<PushResult> = Vec::with_capacity(items.len());
    for (i, p) in place.iter().enumerate() {
        let r = match *p {
            Ok((g, k)) => {
                let f = &groups[g].frames[k];
                let (status, message_id, partition_id) = match landed[g][k] {
                    Landed::Queued { partition_id, .. } => (
                        "queued",
                        Some(uuid::Uuid::from_bytes(f.message_id)),
                        partition_id,
                    ),
                    Landed::Duplicate { of, partition_id } => ("duplicate", of, partition_id),
                };
                PushResult {
                    index: i,
                    transaction_id: f.transaction_id.clone(),
                    status: status.into(),
                    message_id,
                    partition_id: Some(partition_id),
                    trace_id: f.trace_id.map(uuid::Uuid::from_bytes),
                    queue_name: groups[g].queue.to_string(),
                }
            }
            Err(first) => PushResult {
                index: i,
                status: "duplicate".into(),
                ..out[first].clone()
            },
        };
        out.push(r);
    }
    out
}

/// The source ack, cumulative through its transactionId: the lease checked when named,
/// the message found in the leased batch, the cursor moved past it (keeping the lease
/// when `release_lease` is false), or — for `failed`/`dlq` — the earlier messages
/// committed and the message filed in the DLQ.
fn ack_source(
    client: &mut SpiClient<'_>,
    pid: Uuid,
    group: &str,
    releases: bool,
    a: &CycleAck,
) -> AckResult {
    let txn = a.transaction_id.as_deref().unwrap_or_default();
    let refuse = |why: &str| -> ! {
        raise_q(format!(
            "{QSTREAM} ack of \"{txn}\" refused for partition {pid} group \"{group}\": {why}"
        ))
    };
    let cur = lock_checked(client, pid, group, a.lease()).unwrap_or_else(|e| refuse(e));
    let at = crate::ack::locate(client, pid, &cur, txn_hash(txn));
    let Some(off) = at.eff else {
        refuse(if at.below {
            "the message is already acknowledged"
        } else {
            "the message is not in the leased batch"
        });
    };
    let kind = a.kind().unwrap_or_else(|e| bad_param(e));
    // `committed` is the last offset acknowledged (docs/contract.md §2): through `off`,
    // or through the one before it when `off` goes to the DLQ.
    let (upto, keep) = match kind {
        AckKind::Commit => (off, !releases),
        AckKind::DeadLetter => (off - 1, true),
    };
    let step = if keep {
        ack_upto_keeping_lease(&cur.state, upto)
    } else {
        ack_upto(&cur.state, upto)
    };
    let (next, acked) = step.unwrap_or_else(|e| refuse(e.message()));
    write_cursor(client, pid, group, &cur.state, &next);
    if kind == AckKind::Commit {
        return AckResult {
            success: true,
            count: acked,
            lease_released: next.batch_end.is_none(),
            dlq: false,
        };
    }
    let error = a
        .error
        .clone()
        .unwrap_or_else(|| "Streaming cycle reported failure".into());
    let entry = DlqEntry::extracted(Some(error));
    if let queen_log::wire::Reply::Refused(e) = dlq_head(client, pid, group, a.lease(), off, entry)
    {
        refuse(&e);
    }
    AckResult {
        success: true,
        count: acked,
        lease_released: true,
        dlq: true,
    }
}

/// The second half of the fence of a cycle without an ack (an idle flush): the source
/// partition's cursor for the cycle's group is locked where an ack would lock it (the
/// lock order's last step) and must hold no live lease. A live lease is a cycle in
/// flight that read the shard's state after its pop and will commit over it (closing the
/// same window, or adding to a window this one emits); it goes first, and the flush reads
/// again on its next tick. Holding the lock until commit makes a pop skip the partition
/// (its claim is SKIP LOCKED), so no cycle can read the state between this check and the
/// commit.
fn fence_unleased(client: &mut SpiClient<'_>, pid: Uuid, group: &str) {
    let Some(cur) = crate::db::lock_cursor(client, pid, group) else {
        return;
    };
    if cur.lease_live && cur.state.batch_end.is_some() {
        raise_q(format!(
            "{FENCED} partition {pid}: a cycle of group \"{group}\" holds the partition's \
             lease and commits over the state this one read; nothing was written"
        ));
    }
}

fn cycle(client: &mut SpiClient<'_>, tenant: Uuid, r: &CycleRequest) -> CycleResult {
    check_cycle(r).unwrap_or_else(|e| bad_param(e));
    let (query, pid) = (
        uuid_of(&r.query_id, "query_id"),
        uuid_of(&r.partition_id, "partition_id"),
    );
    let queue = source_of(client, tenant, query, pid);
    let digest = cycle_digest(r);
    let mut out = CycleResult {
        queue_name: Some(queue),
        ..CycleResult::empty(r)
    };
    // Lock order (docs/decisions.md "Lock order"): the shard row, its state rows, the
    // sink partitions (as a push), the source cursor (as an ack).
    if lock_shard(client, query, pid, &digest) {
        out.replayed = true;
        return out;
    }
    apply_state(client, query, pid, r);
    out.state_ops_applied = r.ops().len();
    out.push_results = push_sink(client, tenant, r.items());
    out.ack_result = r
        .ack
        .as_ref()
        .map(|a| ack_source(client, pid, r.group(), r.releases(), a));
    if r.fenced_by_state() {
        fence_unleased(client, pid, r.group());
    }
    q(
        client,
        "UPDATE queen.stream_shards SET last_digest = $3, cycles = cycles + 1, updated_at = $4
          WHERE query_id = $1 AND partition_id = $2",
        &[
            query.into(),
            pid.into(),
            digest.as_str().into(),
            now().into(),
        ],
    )
    .or_raise();
    out
}

/// One cycle, all or nothing: raises on any refusal (`QSTREAM ...`, P0001; input 22023;
/// QENC 55000) and when fenced out by the state it read (`QFENCE ...`, P0001), so its
/// caller's subtransaction undoes everything it wrote. Called by
/// `queen.streams_cycle_v1`, which is the function to call.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn streams_cycle_request_v1(
    p: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let r: CycleRequest = serde_json::from_value(required(p, "p").0)
        .unwrap_or_else(|e| bad_param(format!("cycle: {e}")));
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&Spi::connect_mut(|c| cycle(c, tenant, &r)))
}
