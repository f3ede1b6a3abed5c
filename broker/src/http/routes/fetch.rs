//! `POST /api/v1/fetch` (Queen 2.x, `queue(...).fetch(...)` of its SDKs): reads by offset,
//! no lease, no cursor, no ack (docs/decisions.md, "Reads by offset").
//!
//! Body `{entries: [{queue, partition, offset, maxBytes}], maxBytes}` (offset default 0,
//! an entry's maxBytes default 8 MiB, the call's default 8 MiB); answer `{entries: [...]}`,
//! one per asked in order: `{queue, partition, records: [{offset, transactionId, payload,
//! ts}], highWatermark, logStartOffset, nextOffset}` plus `error` (`OFFSET_OUT_OF_RANGE`,
//! `UNKNOWN_TOPIC_OR_PARTITION`) when nothing could be read. Through `queen.fetch_v1`;
//! sealed payloads are opened for the reader (crate::engine::sealing).

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use queen_log::fetch::{check, EntryIn, FetchOut, MAX_ENTRY_BYTES};
use queen_log::names::NameKind;
use serde::Deserialize;

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
    let mut out = state
        .db
        .conn()
        .await?
        .fetch(&entries, call, tenant)
        .await?;
    for r in out.entries.iter_mut().flat_map(|e| e.records.iter_mut()) {
        let stored = std::mem::replace(&mut r.payload, serde_json::value::RawValue::NULL.to_owned());
        r.payload = state.sealer.open_raw(stored, &state.metrics);
    }
    Ok(Json(out))
}
