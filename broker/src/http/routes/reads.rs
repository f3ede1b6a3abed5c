//! Queen 2.x's reads of the log, neither taking a lease nor moving a cursor:
//!
//! `POST /api/v1/fetch` (`queue(...).fetch(...)` of its SDKs): reads by offset
//! (docs/decisions.md, "Reads by offset"). Body `{entries: [{queue, partition, offset, maxBytes}], maxBytes}` (offset default 0,
//! an entry's maxBytes default 8 MiB, the call's default 8 MiB); answer `{entries: [...]}`,
//! one per asked in order: `{queue, partition, records: [{offset, transactionId, payload,
//! ts}], highWatermark, logStartOffset, nextOffset}` plus `error` (`OFFSET_OUT_OF_RANGE`,
//! `UNKNOWN_TOPIC_OR_PARTITION`) when nothing could be read. Through `queen.fetch_v1`;
//! sealed payloads are opened for the reader (crate::engine::sealing).
//!
//! `POST /api/v1/partitions/changed` (`queue(...).changed_since(t)`): partition discovery
//! (docs/decisions.md, "Partition discovery"). Body `{entries: [{queue, since?, after?,
//! limit?}]}`; answer `{entries: [{queue, partitions: [{name, id, lastOffset, logStart,
//! lastWriteAt}], next, error?}], safeTime}` through `queen.partitions_changed_v1`.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use queen_log::fetch::{check, EntryIn, FetchOut, MAX_ENTRY_BYTES};
use queen_log::names::NameKind;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{check_name, parse_json};
use crate::state::AppState;

/// The body; any other key is refused naming it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FetchBody {
    entries: Vec<EntryBody>,
    max_bytes: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EntryBody {
    queue: String,
    partition: Option<String>,
    offset: Option<i64>,
    max_bytes: Option<i64>,
}

pub async fn fetch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<FetchOut>> {
    let body: FetchBody = parse_json(&body)?;
    let entries: Vec<EntryIn> = body
        .entries
        .into_iter()
        .map(|e| EntryIn {
            queue: e.queue,
            partition: e.partition.unwrap_or_else(|| "Default".into()),
            offset: e.offset.unwrap_or(0),
            max_bytes: e.max_bytes.unwrap_or(MAX_ENTRY_BYTES),
        })
        .collect();
    let call = body.max_bytes.unwrap_or(MAX_ENTRY_BYTES);
    check(&entries, call).map_err(ApiError::bad)?;
    for e in &entries {
        check_name(NameKind::Queue, &e.queue)?;
        check_name(NameKind::Partition, &e.partition)?;
    }
    let mut out = state.db.conn().await?.fetch(&entries, call, tenant).await?;
    for r in out.entries.iter_mut().flat_map(|e| e.records.iter_mut()) {
        let stored =
            std::mem::replace(&mut r.payload, serde_json::value::RawValue::NULL.to_owned());
        r.payload = state.sealer.open_raw(stored);
    }
    Ok(Json(out))
}

/// Discovery's body; any other key is refused naming it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangedBody {
    entries: Vec<ChangedEntry>,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct ChangedEntry {
    queue: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<i64>,
}

pub async fn partitions_changed(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let body: ChangedBody = parse_json(&body)?;
    if body.entries.len() > queen_log::fetch::MAX_ENTRIES {
        return Err(ApiError::bad(format!(
            "entries: at most {} in one call",
            queen_log::fetch::MAX_ENTRIES
        )));
    }
    for e in &body.entries {
        check_name(NameKind::Queue, &e.queue)?;
        if e.limit.is_some_and(|l| !(1..=1000).contains(&l)) {
            return Err(ApiError::bad("limit must be 1 to 1000"));
        }
    }
    let entries = serde_json::to_value(&body.entries)
        .map_err(|e| ApiError::Internal(format!("entries: {e}")))?;
    let answer = state
        .db
        .conn()
        .await?
        .partitions_changed(&entries, tenant)
        .await?;
    Ok(Json(answer))
}
