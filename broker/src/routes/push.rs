//! `POST /api/v1/push`: encode frames, zstd and hashes here with the shared codec, push
//! one segment per (queue, partition) through `log_push_multi_v1`, answer per item.
//!
//! The SQL push writes nothing for a segment in which any frame is a duplicate, so the
//! non-duplicate rest of such a segment is pushed again in a further round.

use std::borrow::Cow;
use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::frame::Frame;
use queen_log::segment::{decode_segment, encode_segment, segment_hashes};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use uuid::Uuid;

use queen_log::hash::{split_hashes, TxnHash};

use crate::dedup::DedupCache;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::routes::auth::Tenant;
use crate::routes::configure::check_queue_name;
use crate::state::AppState;
use crate::util::{check_name, parse_json};
use queen_log::names::NameKind;

/// The body with each item left as raw JSON: items are validated field by field below and
/// payloads are stored as the client wrote them, never built into a `Value` tree.
#[derive(Deserialize)]
struct PushBody<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

/// The fields of one item that push reads; a JSON null reads as absent, as with `Value`.
#[derive(Deserialize)]
struct RawItem<'a> {
    #[serde(borrow, default)]
    queue: Option<&'a RawValue>,
    #[serde(borrow, default)]
    partition: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "transactionId")]
    transaction_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "traceId")]
    trace_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

/// A string-or-absent field as the validator sees it, from either representation.
enum Field<'a> {
    Absent,
    Str(Cow<'a, str>),
    Other,
}

impl<'a> Field<'a> {
    fn of_value(v: Option<&'a Value>) -> Self {
        match v {
            None | Some(Value::Null) => Field::Absent,
            Some(Value::String(s)) => Field::Str(Cow::Borrowed(s)),
            Some(_) => Field::Other,
        }
    }

    fn of_raw(v: Option<&'a RawValue>) -> Self {
        let Some(raw) = v else { return Field::Absent };
        if !raw.get().starts_with('"') {
            return Field::Other;
        }
        // Borrowed unless the string has escapes.
        match serde_json::from_str::<&str>(raw.get()) {
            Ok(s) => Field::Str(Cow::Borrowed(s)),
            Err(_) => serde_json::from_str::<String>(raw.get())
                .map_or(Field::Other, |s| Field::Str(Cow::Owned(s))),
        }
    }
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
) -> ApiResult<Response> {
    let body: PushBody<'_> = parse_json(&body)?;
    check_item_count(body.items.len(), state.config.max_push_items)?;
    let mut items = body
        .items
        .iter()
        .enumerate()
        .map(|(i, v)| parse_raw_item(i, v))
        .collect::<ApiResult<Vec<_>>>()?;
    if items.is_empty() {
        return Ok((StatusCode::CREATED, Json(json!([]))).into_response());
    }
    mark_request_duplicates(&mut items);
    let mut groups = group_items(&items);
    let mut outcomes = vec![Outcome::default(); items.len()];
    let db = state.db().await?;
    let all: Vec<&Group> = groups.iter().collect();
    let known = known_partitions(&db, tenant, &all).await?;
    let cached = dedup_targets(&db, &state.dedup, &known).await?;
    // Each round retires at least one item, so this terminates.
    for _ in 0..=items.len() {
        if groups.iter().all(|g| g.pending.is_empty()) {
            break;
        }
        let dedup = (&state.dedup, &cached);
        push_round(&db, tenant, &items, &mut groups, &mut outcomes, dedup).await?;
    }
    let pids = partition_ids(&db, tenant, &groups, &known).await?;
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
    let answer = render(&items, &outcomes, &pids);
    Ok((StatusCode::CREATED, Json(answer)).into_response())
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

/// One item of a transaction's push operation (already a `Value`).
pub(crate) fn parse_item(i: usize, v: &Value) -> ApiResult<Item> {
    let obj = v
        .as_object()
        .ok_or_else(|| ApiError::bad(format!("items[{i}]: must be an object")))?;
    // `payload` wins over its alias `data`; null or absent pops as data:null.
    let payload = match obj.get("payload") {
        Some(p) if !p.is_null() => p,
        _ => obj.get("data").unwrap_or(&Value::Null),
    };
    let f = |k: &str| Field::of_value(obj.get(k));
    let payload = serde_json::to_vec(payload).expect("a Value always serializes");
    validate_item(
        i,
        [f("queue"), f("partition"), f("transactionId"), f("traceId")],
        payload,
    )
}

/// One item of a push body, straight from its raw JSON.
fn parse_raw_item(i: usize, v: &RawValue) -> ApiResult<Item> {
    let bad = |m: String| ApiError::bad(format!("items[{i}]: {m}"));
    if !v.get().starts_with('{') {
        return Err(bad("must be an object".into()));
    }
    let raw: RawItem<'_> = serde_json::from_str(v.get()).map_err(|e| bad(e.to_string()))?;
    let payload = match (raw.payload, raw.data) {
        (Some(p), _) => p.get(),
        (None, Some(d)) => d.get(),
        (None, None) => "null",
    };
    let f = Field::of_raw;
    validate_item(
        i,
        [
            f(raw.queue),
            f(raw.partition),
            f(raw.transaction_id),
            f(raw.trace_id),
        ],
        payload.as_bytes().to_vec(),
    )
}

/// The rules of an item's fields: [queue, partition, transactionId, traceId].
fn validate_item(i: usize, fields: [Field<'_>; 4], payload: Vec<u8>) -> ApiResult<Item> {
    let bad = |m: &str| ApiError::bad(format!("items[{i}]: {m}"));
    let [queue, partition, txn, trace] = fields;
    let queue = match queue {
        Field::Str(s) => s.into_owned(),
        _ => return Err(bad("queue must be a non-empty string")),
    };
    check_queue_name(&queue).map_err(|e| bad(&e.to_string()))?;
    let partition = match partition {
        Field::Absent => "Default".to_string(),
        Field::Str(s) if s.is_empty() => "Default".to_string(),
        Field::Str(s) => s.into_owned(),
        Field::Other => return Err(bad("partition must be a string")),
    };
    check_name(NameKind::Partition, &partition).map_err(|e| bad(&e.to_string()))?;
    let message_id = Uuid::now_v7();
    let txn = match txn {
        Field::Absent => message_id.to_string(),
        Field::Str(s) if s.is_empty() => message_id.to_string(),
        Field::Str(s) if s.len() <= usize::from(u16::MAX) => s.into_owned(),
        Field::Str(_) => return Err(bad("transactionId longer than 65535 bytes")),
        Field::Other => return Err(bad("transactionId must be a string")),
    };
    let trace = match trace {
        Field::Absent => None,
        Field::Str(s) if s.is_empty() => None,
        Field::Str(s) => Some(
            *Uuid::parse_str(&s)
                .map_err(|_| bad("traceId must be a UUID"))?
                .as_bytes(),
        ),
        Field::Other => return Err(bad("traceId must be a UUID string")),
    };
    Ok(Item {
        queue,
        partition,
        txn,
        trace,
        payload,
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

/// The partition id of every group whose partition exists already, and its queue's
/// dedup window now (seconds; the cache checks it, dedup.rs): one query per request,
/// before pushing.
async fn known_partitions(
    db: &deadpool_postgres::Object,
    tenant: Uuid,
    groups: &[&Group],
) -> ApiResult<HashMap<usize, (Uuid, i32)>> {
    let qs: Vec<&str> = groups.iter().map(|g| g.queue.as_str()).collect();
    let ps: Vec<&str> = groups.iter().map(|g| g.partition.as_str()).collect();
    let rows = db
        .query(
            &db.prepare_cached(
                "SELECT t.i::int, p.id, q.dedup_window_seconds
                   FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(qn, pn, i)
                   JOIN queen.queues q ON q.tenant_id = $1 AND q.name = t.qn
                   JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = t.pn",
            )
            .await?,
            &[&tenant, &qs, &ps],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get::<_, i32>(0) as usize - 1, (r.get(1), r.get(2))))
        .collect())
}

/// Known partitions with a dedup window, each loaded into the dedup cache if it was not
/// (see dedup.rs). New partitions and window-0 queues are not cached: their pushes
/// probe with -1, which is cheap for them.
async fn dedup_targets(
    db: &deadpool_postgres::Object,
    cache: &DedupCache,
    known: &HashMap<usize, (Uuid, i32)>,
) -> ApiResult<HashMap<usize, Uuid>> {
    if !cache.enabled() {
        return Ok(HashMap::new());
    }
    let mut out = HashMap::new();
    for (&g, &(pid, window)) in known.iter().filter(|(_, (_, window))| *window > 0) {
        if cache.wants_load(pid, window) {
            cache.load_window(db, pid).await?;
        }
        out.insert(g, pid);
    }
    Ok(out)
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

/// (queue, partition) → id of every group pushed to. Known partitions come from the
/// lookup before the push; only partitions this push created are looked up again.
async fn partition_ids<'a>(
    db: &deadpool_postgres::Object,
    tenant: Uuid,
    groups: &'a [Group],
    known: &HashMap<usize, (Uuid, i32)>,
) -> ApiResult<PartitionIds<'a>> {
    let key = |g: &'a Group| (g.queue.as_str(), g.partition.as_str());
    let mut out: PartitionIds<'a> = HashMap::new();
    let mut new: Vec<&'a Group> = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        match known.get(&i) {
            Some(&(pid, _)) => {
                out.insert(key(g), pid);
            }
            None => new.push(g),
        }
    }
    if new.is_empty() {
        return Ok(out);
    }
    for (i, (pid, _)) in known_partitions(db, tenant, &new).await? {
        out.insert(key(new[i]), pid);
    }
    Ok(out)
}

/// Partition ids by (queue, partition) name.
type PartitionIds<'a> = HashMap<(&'a str, &'a str), Uuid>;

/// A database duplicate answers with the ORIGINAL message id: read it from the frame at
/// the original offset (unknown if that segment was retained away). In-request
/// duplicates then copy whatever their first item ended up with.
async fn resolve_originals(
    db: &deadpool_postgres::Object,
    items: &mut [Item],
    outcomes: &[Outcome],
    pids: &PartitionIds<'_>,
) -> ApiResult<()> {
    let mut want: Vec<(usize, Uuid, i64)> = Vec::new();
    for (i, (it, o)) in items.iter().zip(outcomes).enumerate() {
        let pid = pids.get(&(it.queue.as_str(), it.partition.as_str()));
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

/// One item of the push answer.
#[derive(Serialize)]
struct Pushed<'a> {
    index: usize,
    message_id: Uuid,
    transaction_id: &'a str,
    #[serde(rename = "queueName")]
    queue_name: &'a str,
    partition_id: Option<Uuid>,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
}

fn render<'a>(items: &'a [Item], outcomes: &[Outcome], pids: &PartitionIds<'_>) -> Vec<Pushed<'a>> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let o = outcomes[it.dup_of.unwrap_or(i)];
            Pushed {
                index: i,
                message_id: it.message_id,
                transaction_id: &it.txn,
                queue_name: &it.queue,
                partition_id: pids
                    .get(&(it.queue.as_str(), it.partition.as_str()))
                    .copied(),
                status: if outcomes[i].queued {
                    "queued"
                } else {
                    "duplicate"
                },
                offset: o.offset.or(o.original_off),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both item readers (raw for push, `Value` for transactions) apply the same rules.
    fn both(src: &str) -> (ApiResult<Item>, ApiResult<Item>) {
        let raw: &RawValue = serde_json::from_str(src).unwrap();
        let val: Value = serde_json::from_str(src).unwrap();
        (parse_raw_item(3, raw), parse_item(3, &val))
    }

    /// What an item reader made of an item: (queue, partition, trace, payload) or the error.
    type Read = Result<(String, String, Option<[u8; 16]>, Value), String>;

    fn fields(r: &ApiResult<Item>) -> Read {
        match r {
            Ok(it) => Ok((
                it.queue.clone(),
                it.partition.clone(),
                it.trace,
                serde_json::from_slice(&it.payload).unwrap(),
            )),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    #[test]
    fn raw_and_value_items_follow_the_same_rules() {
        let cases = [
            r#"{"queue":"q","payload":{"a":[1,2]}}"#,
            r#"{"queue":"q","partition":"p\u00e9","transactionId":"t\"x","payload":1}"#,
            r#"{"queue":"q","partition":null,"payload":null,"data":{"d":true}}"#,
            r#"{"queue":"q","partition":"","transactionId":"","traceId":""}"#,
            r#"{"queue":"q","traceId":"0190d6a8-8b2c-7cc1-9b1e-3f3c0a6a1e01","extra":[1]}"#,
            r#"{"payload":1}"#,
            r#"{"queue":7}"#,
            r#"{"queue":""}"#,
            r#"{"queue":"q","partition":5}"#,
            r#"{"queue":"q","transactionId":{"x":1}}"#,
            r#"{"queue":"q","traceId":"not-a-uuid"}"#,
            r#"{"queue":"q","traceId":12}"#,
            r#"[1,2]"#,
            r#""q""#,
        ];
        for src in cases {
            let (raw, val) = both(src);
            assert_eq!(fields(&raw), fields(&val), "{src}");
            if let (Ok(r), Ok(v)) = (&raw, &val) {
                assert_eq!(r.txn.is_empty(), v.txn.is_empty(), "{src}");
            }
        }
    }

    #[test]
    fn raw_payload_is_stored_as_written() {
        let src =
            r#"{"queue":"q","transactionId":"t","payload":{"big":123456789012345678901234567890}}"#;
        let (raw, _) = both(src);
        let it = raw.unwrap();
        assert_eq!(it.txn, "t");
        assert_eq!(
            std::str::from_utf8(&it.payload).unwrap(),
            r#"{"big":123456789012345678901234567890}"#,
            "no float rounding of a big integer"
        );
    }
}
