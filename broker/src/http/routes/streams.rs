//! Queen's streams (docs/decisions.md, "Streams"; docs/http-api.md): the three routes its
//! SDKs' streaming runtime calls, each a thin pass to the extension.
//!
//! - `POST /streams/v1/queries`: register a query (name, source, sink, config hash);
//!   200 with `{success, query_id, fresh, reset}`, 409 on a config-hash conflict.
//! - `POST /streams/v1/state/get`: a (query, partition)'s state rows.
//! - `POST /streams/v1/cycle`: state ops, sink pushes and the source ack in one database
//!   transaction; a refused cycle is 200 `{success: false, error}` with nothing written
//!   (Queen's answer), one fenced out by the state it read 200 `{success: true, fenced}`
//!   with nothing written, a database that is down is 503 with nothing written, and so is
//!   a cycle with sink items while the write gate is closed (crate::engine::write_gate).
//! - `DELETE /streams/v1/queries/{name}` (ours): the query with its state.
//!
//! Input is checked here as the extension checks it (queen_log::streams), so a bad
//! request is a 400 naming its field before a connection is taken. Sink items for a
//! queue that encrypts are sealed here (the extension cannot); the cycle's ack is the
//! extension's own cumulative commit, so the ack registry's entry of that lease is
//! dropped (it cannot be taken by a later ack of the same lease).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::streams::{check_cycle, CycleRequest, RegisterRequest, SinkItem, StateGetRequest};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::atomic::AtomicU64;
use uuid::Uuid;

use crate::engine::items::encrypting;
use crate::engine::write_gate::Targets;
use crate::error::{ApiError, ApiResult};
use crate::http::auth::{Subject, Tenant};
use crate::http::input::parse_json;
use crate::http::items::check_item_count;
use crate::ops::metrics::Metrics;
use crate::state::AppState;

/// What the metrics and the status read of a cycle's answer (an object; any other
/// answer, or a flag of another type, reads as neither).
#[derive(Deserialize, Default)]
struct Verdict {
    success: Option<bool>,
    replayed: Option<bool>,
    /// Any non-null value (null reads as None).
    fenced: Option<Value>,
}

fn verdict(v: &Value) -> Verdict {
    match v {
        Value::Object(_) => Verdict::deserialize(v).unwrap_or_default(),
        _ => Verdict::default(),
    }
}

/// `success: false` in an answer of the extension.
fn refused(v: &Value) -> bool {
    verdict(v).success == Some(false)
}

pub async fn register(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Response> {
    let r: RegisterRequest = parse_json(&body)?;
    r.check().map_err(ApiError::bad)?;
    let answer = state.db.conn().await?.streams_register(&r, tenant).await?;
    let status = if refused(&answer) {
        StatusCode::CONFLICT
    } else {
        StatusCode::OK
    };
    Ok((status, Json(answer)).into_response())
}

pub async fn state_get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Response> {
    let r: StateGetRequest = parse_json(&body)?;
    r.check().map_err(ApiError::bad)?;
    let answer = state.db.conn().await?.streams_state_get(&r, tenant).await?;
    Ok(Json(answer).into_response())
}

pub async fn cycle(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    subject: Subject,
    body: Bytes,
) -> ApiResult<Response> {
    let mut r: CycleRequest = parse_json(&body)?;
    r.idx = None;
    check_cycle(&r).map_err(ApiError::bad)?;
    check_item_count(r.items().len(), state.config.max_push_items)?;
    if let Some(items) = r.push_items.as_mut() {
        stamp_sink(items, &subject)?;
        seal_sink(&state, tenant, items).await?;
    }
    // Sinks cannot be spooled (the cycle commits its state, sinks and ack together): the
    // write gate admits the cycle or it is a 503 that wrote nothing (write_gate).
    let targets: Vec<(Uuid, &str, &str)> = r
        .items()
        .iter()
        .map(|i| {
            (
                tenant,
                i.queue.as_deref().unwrap_or_default(),
                i.partition_name(),
            )
        })
        .collect();
    state
        .gate
        .admit(
            "a stream cycle with sink items",
            Targets::Partitions(&targets),
        )
        .await?;
    let answer = state.db.conn().await?.streams_cycle(&r, tenant).await?;
    count(&state.metrics, &answer);
    if refused(&answer) || fenced(&answer) {
        return Ok(Json(answer).into_response());
    }
    if let (Some(a), Some(pid)) = (&r.ack, r.partition_id.as_deref()) {
        if let (Some(lease), Ok(pid)) = (a.lease(), pid.parse()) {
            state.registry.evict_if_worker(pid, r.group(), lease);
        }
    }
    let mut queues: Vec<&str> = r
        .items()
        .iter()
        .filter_map(|i| i.queue.as_deref())
        .collect();
    queues.sort_unstable();
    queues.dedup();
    for q in queues {
        state.wake_queue(tenant, q);
    }
    Ok(Json(answer).into_response())
}

pub async fn delete_query(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    let existed = state
        .db
        .conn()
        .await?
        .streams_delete_query(&name, tenant)
        .await?;
    Ok(Json(json!({"success": true, "deleted": existed, "name": name})).into_response())
}

/// `fenced` in an answer: a cycle fenced out by the state it read, nothing written.
fn fenced(v: &Value) -> bool {
    verdict(v).fenced.is_some()
}

/// The cycle counters of `queen_stream_cycles_total{result}`.
fn count(m: &Metrics, answer: &Value) {
    let replayed = verdict(answer).replayed == Some(true);
    let c: &AtomicU64 = match (refused(answer), replayed, fenced(answer)) {
        (true, _, _) => &m.stream_cycles_refused,
        (false, true, _) => &m.stream_cycles_replayed,
        (false, false, true) => &m.stream_cycles_fenced,
        (false, false, false) => &m.stream_cycles_committed,
    };
    Metrics::add(c, 1);
}

/// The producer subject of every sink item: the verified token's `sub`, as a push stamps
/// it (docs/security.md, "Producer identity"). A body's `producerSub` was dropped when
/// it was read; the extension's own field (`producer_sub`) is the broker's word only, so
/// a cycle that carries it is refused naming it.
fn stamp_sink(items: &mut [SinkItem], subject: &Subject) -> ApiResult<()> {
    if let Some(i) = items.iter().position(|it| it.producer_sub.is_some()) {
        return Err(ApiError::field(
            format!("push_items[{i}].producer_sub"),
            format!(
                "push_items[{i}].producer_sub is set by the broker only (the verified token's \
                 sub); nothing was written"
            ),
        ));
    }
    for it in items {
        it.producer_sub = subject.0.as_deref().map(str::to_owned);
    }
    Ok(())
}

/// The sink items bound for queues that encrypt (`encryptionEnabled`), sealed as a push
/// seals them: the payload becomes the envelope and `is_encrypted` is set. The flag is the
/// broker's word to the extension, never a client's (docs/security.md, "Only the broker
/// seals"): a cycle that carries it is refused naming it, before anything is looked up.
async fn seal_sink(state: &AppState, tenant: uuid::Uuid, items: &mut [SinkItem]) -> ApiResult<()> {
    if let Some(i) = items.iter().position(|it| it.is_encrypted.is_some()) {
        return Err(ApiError::field(
            format!("push_items[{i}].is_encrypted"),
            format!(
                "push_items[{i}].is_encrypted is set by the broker only: a payload for a \
                 queue that encrypts is sealed here, never taken as sealed; nothing was written"
            ),
        ));
    }
    if items.is_empty() {
        return Ok(());
    }
    let qs: Vec<&str> = items
        .iter()
        .map(|i| i.queue.as_deref().unwrap_or_default())
        .collect();
    let ps: Vec<&str> = items.iter().map(SinkItem::partition_name).collect();
    let sealed = encrypting(&state.db, tenant, &qs, &ps).await?;
    for i in sealed {
        let it = &mut items[i];
        let plain = it.payload.clone().unwrap_or_else(|| json!({})).to_string();
        let queue = it.queue.as_deref().unwrap_or_default();
        let envelope = state.sealer.seal_for(queue, plain.as_bytes())?;
        it.payload = Some(
            serde_json::from_slice(&envelope)
                .map_err(|e| ApiError::Internal(format!("sealed envelope: {e}")))?,
        );
        it.is_encrypted = Some(true);
    }
    Ok(())
}
