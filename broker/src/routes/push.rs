//! `POST /api/v1/push`: encode frames, zstd and hashes here with the shared codec, push
//! one segment per (queue, partition) through `log_push_multi_v1`, answer per item.
//!
//! The SQL push writes nothing for a segment in which any frame is a duplicate, so the
//! non-duplicate rest of such a segment is pushed again in a further round.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use queen_log::frame::Frame;
use queen_log::segment::{decode_segment, encode_segment, segment_hashes};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use queen_log::hash::{split_hashes, TxnHash};

use crate::dedup::DedupCache;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::routes::auth::Tenant;
use crate::routes::configure::check_queue_name;
use crate::state::AppState;
use crate::util::parse_json;

#[derive(Deserialize)]
struct PushBody {
    items: Vec<Value>,
}

/// One validated item.
pub(crate) struct Item {
    pub(crate) queue: String,
    pub(crate) partition: String,
    pub(crate) txn: String,
    trace: Option<[u8; 16]>,
    payload: Vec<u8>,
    /// Minted here; replaced by the original's id when the item turns out duplicate.
    pub(crate) message_id: Uuid,
    /// Earlier item of this request with the same (queue, partition, transactionId).
    dup_of: Option<usize>,
}

/// What happened to an item.
#[derive(Clone, Copy, Default)]
struct Outcome {
    queued: bool,
    offset: Option<i64>,
    /// Offset of the original when the database reported a duplicate.
    original_off: Option<i64>,
}

/// The items of one (queue, partition) still to be pushed.
struct Group {
    queue: String,
    partition: String,
    pending: Vec<usize>,
}

pub async fn push(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let body: PushBody = parse_json(&body)?;
    check_item_count(body.items.len(), state.config.max_push_items)?;
    let mut items = body
        .items
        .iter()
        .enumerate()
        .map(|(i, v)| parse_item(i, v))
        .collect::<ApiResult<Vec<_>>>()?;
    if items.is_empty() {
        return Ok((StatusCode::CREATED, Json(json!([]))));
    }
    mark_request_duplicates(&mut items);
    let mut groups = group_items(&items);
    let mut outcomes = vec![Outcome::default(); items.len()];
    let db = state.db().await?;
    let cached = dedup_targets(&db, &state.dedup, tenant, &groups).await?;
    // Each round retires at least one item, so this terminates.
    for _ in 0..=items.len() {
        if groups.iter().all(|g| g.pending.is_empty()) {
            break;
        }
        let dedup = (&state.dedup, &cached);
        push_round(&db, tenant, &items, &mut groups, &mut outcomes, dedup).await?;
    }
    let pids = resolve_partitions(&db, tenant, &items).await?;
    resolve_originals(&db, &mut items, &outcomes, &pids).await?;
    drop(db);
    let queued: Vec<(&str, &str)> = items
        .iter()
        .zip(&outcomes)
        .filter(|(_, o)| o.queued)
        .map(|(it, _)| (it.queue.as_str(), it.partition.as_str()))
        .collect();
    let mut woken = std::collections::HashSet::new();
    for (q, p) in queued.iter().filter(|qp| woken.insert(**qp)) {
        state.wake(tenant, q, p);
    }
    Metrics::add(&state.metrics.messages_pushed, queued.len() as u64);
    Metrics::add(
        &state.metrics.messages_duplicate,
        (items.len() - queued.len()) as u64,
    );
    Ok((StatusCode::CREATED, Json(render(&items, &outcomes, &pids))))
}

/// `QUEEN_MAX_PUSH_ITEMS`: one request may carry at most `max` items.
pub(crate) fn check_item_count(n: usize, max: usize) -> ApiResult<()> {
    if n > max {
        return Err(ApiError::bad(format!(
            "too many items: {n} (at most {max} per request, QUEEN_MAX_PUSH_ITEMS); split the push"
        )));
    }
    Ok(())
}

pub(crate) fn parse_item(i: usize, v: &Value) -> ApiResult<Item> {
    let bad = |m: &str| ApiError::bad(format!("items[{i}]: {m}"));
    let obj = v.as_object().ok_or_else(|| bad("must be an object"))?;
    let queue = match obj.get("queue") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(bad("queue must be a non-empty string")),
    };
    check_queue_name(&queue)
        .map_err(|_| bad("queue must be a non-empty string of at most 255 characters"))?;
    let partition = match obj.get("partition") {
        None | Some(Value::Null) => "Default".to_string(),
        Some(Value::String(s)) if s.is_empty() => "Default".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("partition must be a string")),
    };
    let message_id = Uuid::now_v7();
    let txn = match obj.get("transactionId") {
        None | Some(Value::Null) => message_id.to_string(),
        Some(Value::String(s)) if s.is_empty() => message_id.to_string(),
        Some(Value::String(s)) if s.len() <= usize::from(u16::MAX) => s.clone(),
        Some(Value::String(_)) => return Err(bad("transactionId longer than 65535 bytes")),
        Some(_) => return Err(bad("transactionId must be a string")),
    };
    let trace = match obj.get("traceId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(
            *Uuid::parse_str(s)
                .map_err(|_| bad("traceId must be a UUID"))?
                .as_bytes(),
        ),
        Some(_) => return Err(bad("traceId must be a UUID string")),
    };
    // `payload` wins over its alias `data`; null or absent pops as data:null.
    let payload = match obj.get("payload") {
        Some(p) if !p.is_null() => p,
        _ => obj.get("data").unwrap_or(&Value::Null),
    };
    Ok(Item {
        queue,
        partition,
        txn,
        trace,
        payload: serde_json::to_vec(payload).expect("a Value always serializes"),
        message_id,
        dup_of: None,
    })
}

/// A transactionId repeated inside one request for the same partition: the first wins.
fn mark_request_duplicates(items: &mut [Item]) {
    let mut first: HashMap<(String, String, String), usize> = HashMap::new();
    for (i, it) in items.iter_mut().enumerate() {
        let key = (it.queue.clone(), it.partition.clone(), it.txn.clone());
        match first.get(&key) {
            Some(&f) => it.dup_of = Some(f),
            None => {
                first.insert(key, i);
            }
        }
    }
}

/// One group per (queue, partition) in order of first appearance; in-request
/// duplicates are not pushed.
fn group_items(items: &[Item]) -> Vec<Group> {
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    for (i, it) in items
        .iter()
        .enumerate()
        .filter(|(_, it)| it.dup_of.is_none())
    {
        let gi = *index
            .entry((it.queue.as_str(), it.partition.as_str()))
            .or_insert_with(|| {
                groups.push(Group {
                    queue: it.queue.clone(),
                    partition: it.partition.clone(),
                    pending: Vec::new(),
                });
                groups.len() - 1
            });
        groups[gi].pending.push(i);
    }
    groups
}

pub(crate) fn frame_of(it: &Item) -> Frame {
    Frame {
        message_id: *it.message_id.as_bytes(),
        trace_id: it.trace,
        transaction_id: it.txn.clone(),
        producer_sub: None,
        encrypted: false,
        payload: it.payload.clone(),
    }
}

/// Groups whose partition exists with a dedup window, mapped to its id, each loaded into
/// the dedup cache if it was not (see dedup.rs). New partitions and window-0 queues are
/// not cached: their pushes probe with -1, which is cheap for them.
async fn dedup_targets(
    db: &deadpool_postgres::Object,
    cache: &DedupCache,
    tenant: Uuid,
    groups: &[Group],
) -> ApiResult<HashMap<usize, Uuid>> {
    if !cache.enabled() {
        return Ok(HashMap::new());
    }
    let qs: Vec<&str> = groups.iter().map(|g| g.queue.as_str()).collect();
    let ps: Vec<&str> = groups.iter().map(|g| g.partition.as_str()).collect();
    let rows = db
        .query(
&db.prepare_cached("SELECT t.i::int, p.id FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(qn, pn, i)
               JOIN queen.queues q ON q.tenant_id = $1 AND q.name = t.qn
               JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = t.pn
              WHERE q.dedup_window_seconds > 0").await?,
            &[&tenant, &qs, &ps],
        )
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        let (g, pid): (i32, Uuid) = (r.get(0), r.get(1));
        if cache.watermark(pid, &[]).is_none() {
            load_window(db, cache, pid).await?;
        }
        out.insert(g as usize - 1, pid);
    }
    Ok(out)
}

/// One snapshot of a partition's `last_offset` and its sidecar rows inside the window.
async fn load_window(
    db: &deadpool_postgres::Object,
    cache: &DedupCache,
    pid: Uuid,
) -> ApiResult<()> {
    let rows = db
        .query(
&db.prepare_cached("SELECT p.last_offset, t.base_offset, t.hashes
               FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
               LEFT JOIN queen.log_txns t ON t.partition_id = p.id
                    AND t.created_at >= clock_timestamp() - make_interval(secs => q.dedup_window_seconds)
              WHERE p.id = $1 ORDER BY t.base_offset").await?,
            &[&pid],
        )
        .await?;
    let Some(last) = rows.first().map(|r| r.get::<_, i64>(0)) else {
        return Ok(()); // deleted meanwhile: nothing to cache
    };
    let segs: Vec<(i64, Vec<TxnHash>)> = rows
        .iter()
        .filter_map(|r| Some((r.get::<_, Option<i64>>(1)?, r.get::<_, Option<Vec<u8>>>(2)?)))
        .map(|(base, packed)| (base, split_hashes(&packed).unwrap_or_default()))
        .collect();
    cache.load(pid, last, &segs);
    Ok(())
}

/// Pushes every group with pending items as one multi call and records the verdicts.
async fn push_round(
    db: &deadpool_postgres::Object,
    tenant: Uuid,
    items: &[Item],
    groups: &mut [Group],
    outcomes: &mut [Outcome],
    (cache, cached): (&DedupCache, &HashMap<usize, Uuid>),
) -> ApiResult<()> {
    let live: Vec<usize> = (0..groups.len())
        .filter(|&g| !groups[g].pending.is_empty())
        .collect();
    let frames: Vec<Vec<Frame>> = live
        .iter()
        .map(|&g| {
            groups[g]
                .pending
                .iter()
                .map(|&i| frame_of(&items[i]))
                .collect()
        })
        .collect();
    // zstd over several MiB is CPU work: keep it off the async workers.
    let encoded = tokio::task::spawn_blocking(move || {
        frames
            .iter()
            .map(|f| Ok((encode_segment(f)?, segment_hashes(f), f.len() as i32)))
            .collect::<Result<Vec<_>, queen_log::frame::CodecError>>()
    })
    .await
    .map_err(|e| ApiError::Internal(format!("encoder task failed: {e}")))??;
    let queues: Vec<&str> = live.iter().map(|&g| groups[g].queue.as_str()).collect();
    let parts: Vec<&str> = live.iter().map(|&g| groups[g].partition.as_str()).collect();
    let counts: Vec<i32> = encoded.iter().map(|e| e.2).collect();
    let hashes: Vec<&[u8]> = encoded.iter().map(|e| e.1.as_slice()).collect();
    let blobs: Vec<&[u8]> = encoded.iter().map(|e| e.0.as_slice()).collect();
    let incoming: Vec<Vec<TxnHash>> = encoded
        .iter()
        .map(|e| split_hashes(&e.1).expect("16 bytes per frame"))
        .collect();
    let verified: Vec<i64> = live
        .iter()
        .zip(&incoming)
        .map(|(g, hs)| {
            cached
                .get(g)
                .and_then(|pid| cache.watermark(*pid, hs))
                .unwrap_or(-1)
        })
        .collect();
    let tenants: Vec<Uuid> = vec![tenant; live.len()];
    let row = db
        .query_one(
            &db.prepare_cached(
                "SELECT queen.log_push_multi_v1($1::text[], $2::text[], $3::int[], $4::bytea[], \
             $5::bigint[], $6::bytea[], $7::uuid[])",
            )
            .await?,
            &[
                &queues, &parts, &counts, &hashes, &verified, &blobs, &tenants,
            ],
        )
        .await?;
    let results: Value = row.get(0);
    let results = results
        .as_array()
        .filter(|a| a.len() == live.len())
        .ok_or_else(|| ApiError::Internal(format!("unexpected push result: {results}")))?;
    for ((&g, r), hs) in live.iter().zip(results).zip(incoming) {
        apply_verdict(&mut groups[g], r, outcomes)?;
        let base = r.get("baseOffset").and_then(Value::as_i64);
        if let (Some(pid), Some(base)) = (cached.get(&g), base) {
            cache.record(*pid, base, hs);
        }
    }
    Ok(())
}

/// Queued: every pending item gets its offset. Duplicate: the named frames are retired
/// as duplicates and the rest stays pending for the next round.
fn apply_verdict(group: &mut Group, r: &Value, outcomes: &mut [Outcome]) -> ApiResult<()> {
    let unexpected = || ApiError::Internal(format!("unexpected push verdict: {r}"));
    match r.get("status").and_then(Value::as_str) {
        Some("queued") => {
            let base = r
                .get("baseOffset")
                .and_then(Value::as_i64)
                .ok_or_else(unexpected)?;
            for (k, &i) in group.pending.iter().enumerate() {
                outcomes[i] = Outcome {
                    queued: true,
                    offset: Some(base + k as i64),
                    original_off: None,
                };
            }
            group.pending.clear();
        }
        Some("duplicate") => {
            let dups = r
                .get("dups")
                .and_then(Value::as_array)
                .ok_or_else(unexpected)?;
            let mut gone = vec![false; group.pending.len()];
            for d in dups {
                let k = d.get("i").and_then(Value::as_u64).ok_or_else(unexpected)? as usize;
                let off = d
                    .get("off")
                    .and_then(Value::as_i64)
                    .ok_or_else(unexpected)?;
                let i = *group.pending.get(k).ok_or_else(unexpected)?;
                outcomes[i].original_off = Some(off);
                gone[k] = true;
            }
            if !gone.contains(&true) {
                return Err(unexpected());
            }
            let mut k = 0;
            group.pending.retain(|_| {
                k += 1;
                !gone[k - 1]
            });
        }
        _ => return Err(unexpected()),
    }
    Ok(())
}

/// Partition ids of every (queue, partition) pushed to, in one query.
async fn resolve_partitions(
    db: &deadpool_postgres::Object,
    tenant: Uuid,
    items: &[Item],
) -> ApiResult<HashMap<(String, String), Uuid>> {
    // One lookup per distinct (queue, partition), not per item: a 500-item push into
    // one partition is one row.
    let mut seen = std::collections::HashSet::new();
    let (mut qs, mut ps): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    for it in items
        .iter()
        .filter(|it| seen.insert((&it.queue, &it.partition)))
    {
        qs.push(&it.queue);
        ps.push(&it.partition);
    }
    let rows = db
        .query(
            &db.prepare_cached(
                "SELECT q.name::text, p.name, p.id
               FROM unnest($2::text[], $3::text[]) AS t(qn, pn)
               JOIN queen.queues q ON q.tenant_id = $1 AND q.name = t.qn
               JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = t.pn",
            )
            .await?,
            &[&tenant, &qs, &ps],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect())
}

/// A database duplicate answers with the ORIGINAL message id: read it from the frame at
/// the original offset (unknown if that segment was retained away). In-request
/// duplicates then copy whatever their first item ended up with.
async fn resolve_originals(
    db: &deadpool_postgres::Object,
    items: &mut [Item],
    outcomes: &[Outcome],
    pids: &HashMap<(String, String), Uuid>,
) -> ApiResult<()> {
    let mut want: Vec<(usize, Uuid, i64)> = Vec::new();
    for (i, (it, o)) in items.iter().zip(outcomes).enumerate() {
        let pid = pids.get(&(it.queue.clone(), it.partition.clone()));
        if let (Some(off), Some(pid)) = (o.original_off, pid) {
            want.push((i, *pid, off));
        }
    }
    if !want.is_empty() {
        let ids = original_ids(db, &want).await?;
        for (i, pid, off) in want {
            if let Some(id) = ids.get(&(pid, off)) {
                items[i].message_id = *id;
            }
        }
    }
    for i in 0..items.len() {
        if let Some(f) = items[i].dup_of {
            items[i].message_id = items[f].message_id;
        }
    }
    Ok(())
}

async fn original_ids(
    db: &deadpool_postgres::Object,
    want: &[(usize, Uuid, i64)],
) -> ApiResult<HashMap<(Uuid, i64), Uuid>> {
    let pids: Vec<Uuid> = want.iter().map(|w| w.1).collect();
    let offs: Vec<i64> = want.iter().map(|w| w.2).collect();
    let rows = db
        .query(
            &db.prepare_cached(
                "SELECT t.pid, t.off, s.r_base, s.r_blob
               FROM unnest($1::uuid[], $2::bigint[]) AS t(pid, off)
               CROSS JOIN LATERAL queen.log_segment_at_v1(t.pid, t.off) AS s",
            )
            .await?,
            &[&pids, &offs],
        )
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        let (pid, off, base, blob): (Uuid, i64, i64, Vec<u8>) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        // A segment that no longer decodes just leaves the id unknown.
        if let Ok(frames) = decode_segment(&blob) {
            if let Some(f) = frames.get((off - base) as usize) {
                out.insert((pid, off), Uuid::from_bytes(f.message_id));
            }
        }
    }
    Ok(out)
}

fn render(items: &[Item], outcomes: &[Outcome], pids: &HashMap<(String, String), Uuid>) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let o = outcomes[it.dup_of.unwrap_or(i)];
            let queued = outcomes[i].queued;
            let pid = pids.get(&(it.queue.clone(), it.partition.clone()));
            let mut v = json!({
                "index": i,
                "message_id": it.message_id,
                "transaction_id": it.txn,
                "queueName": it.queue,
                "partition_id": pid,
                "status": if queued { "queued" } else { "duplicate" },
            });
            if let Some(off) = o.offset.or(o.original_off) {
                v["offset"] = json!(off);
            }
            v
        })
        .collect();
    Value::Array(rows)
}
