//! Queen 2.x's ephemeral queues (`client.ephemeral`; docs/decisions.md, "Ephemeral
//! queues"): eight verbs under `/api/v1/ephemeral/`. The rings are the owning broker's
//! (crate::engine::ephemeral); a request for a queue another broker owns is passed on
//! to it (crate::peers). Declarations are stored through the extension first, then
//! applied, so a configure that answered 200 survives a restart.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::ephemeral::{AckStatus, MessageId, Options};
use queen_log::names::NameKind;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::engine::ephemeral::{Delivered, PopAsk, QueueList, Refusal};
use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{
    bool_param, check_name, check_queue_name, int_query, parse_json, part_error, Param,
};
use crate::http::routes::pop::MAX_TIMEOUT_MS;
use crate::peers::{Route, FORWARDED, FORWARD_TIMEOUT};
use crate::state::AppState;

/// The long-poll's default when `wait=true` comes without `timeout` (the SDK's).
const DEFAULT_WAIT_MS: u64 = 30_000;

/// What a request needs to be passed on as it came.
pub struct Hop {
    method: Method,
    uri: String,
    headers: HeaderMap,
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Hop {
    type Rejection = std::convert::Infallible;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        let uri = parts
            .extensions
            .get::<OriginalUri>()
            .map_or(&parts.uri, |o| &o.0);
        Ok(Hop {
            method: parts.method.clone(),
            uri: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string()),
            headers: parts.headers.clone(),
        })
    }
}

impl Hop {
    fn forwarded(&self) -> bool {
        self.headers.contains_key(FORWARDED)
    }
}

/// Serves here, or answers what the owner answered: `Ok(None)` = serve here.
async fn pass_on(
    state: &AppState,
    tenant: Uuid,
    queue: &str,
    hop: &Hop,
    body: &Bytes,
    timeout: Duration,
) -> ApiResult<Option<Response>> {
    match state.peers.route(tenant, queue, hop.forwarded())? {
        Route::Here => Ok(None),
        Route::There(peer) => {
            crate::ops::metrics::Metrics::add(&state.ephemeral.stats.forwarded, 1);
            let resp = state
                .peers
                .forward(
                    peer,
                    hop.method.clone(),
                    &hop.uri,
                    &hop.headers,
                    body.clone(),
                    timeout,
                )
                .await?;
            Ok(Some(resp))
        }
    }
}

fn refusal(r: Refusal) -> ApiError {
    match r {
        Refusal::Full { length, bytes } => ApiError::Coded {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "ephemeral_queue_full",
            message: format!(
                "the queue is full ({length} messages, {bytes} bytes) and its policy is \
                 reject; nothing was pushed"
            ),
        },
        Refusal::TooLarge(m) => ApiError::field("messages", m),
        Refusal::Memory => ApiError::Coded {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "ephemeral_memory_full",
            message: "this broker's ephemeral memory (QUEEN_EPHEMERAL_MAX_BYTES) is spent; \
                      nothing was pushed"
                .into(),
        },
        Refusal::QueueLimit => ApiError::Coded {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "ephemeral_queue_limit",
            message: "this broker holds QUEEN_EPHEMERAL_MAX_QUEUES ephemeral queues already".into(),
        },
        Refusal::PartitionLimit => ApiError::Coded {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "ephemeral_partition_limit",
            message: format!(
                "the queue has {} partitions already",
                crate::engine::ephemeral::MAX_PARTITIONS
            ),
        },
    }
}

fn not_found(queue: &str) -> ApiError {
    ApiError::Coded {
        status: StatusCode::NOT_FOUND,
        code: "ephemeral_queue_not_found",
        message: format!("ephemeral queue {queue:?} does not exist"),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigureBody {
    queue: String,
    #[serde(default)]
    options: Option<Value>,
}

/// `POST /api/v1/ephemeral/configure {queue, options}`: declares the queue (stored
/// through the extension), answers `{queue, options, created}` with every knob.
pub async fn configure(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    body: Bytes,
) -> ApiResult<Response> {
    let b: ConfigureBody = parse_json(&body)?;
    check_queue_name(&b.queue)?;
    let options = Options::from_wire(b.options.as_ref().unwrap_or(&json!({})))
        .map_err(|e| ApiError::field(e.field.clone(), e.to_string()))?;
    if let Some(r) = pass_on(&state, tenant, &b.queue, &hop, &body, FORWARD_TIMEOUT).await? {
        return Ok(r);
    }
    let created = state
        .db
        .conn()
        .await?
        .ephemeral_configure(tenant, &b.queue, &options)
        .await?;
    let wire = options.to_wire();
    state.ephemeral.declare(tenant, &b.queue, options);
    Ok(Json(json!({"queue": b.queue, "options": wire, "created": created})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueBody {
    queue: String,
}

/// `POST /api/v1/ephemeral/reset {queue}`: drops the contents, voids every lease,
/// rewinds every group; answers `{queue, dropped}` (0 for a queue that is not there).
pub async fn reset(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    body: Bytes,
) -> ApiResult<Response> {
    let b: QueueBody = parse_json(&body)?;
    check_queue_name(&b.queue)?;
    if let Some(r) = pass_on(&state, tenant, &b.queue, &hop, &body, FORWARD_TIMEOUT).await? {
        return Ok(r);
    }
    let dropped = state.ephemeral.reset(tenant, &b.queue);
    Ok(Json(json!({"queue": b.queue, "dropped": dropped})).into_response())
}

/// `DELETE /api/v1/ephemeral/queue/{queue}`: contents, cursors and declaration;
/// answers `{queue, deleted}` (false when there was nothing).
pub async fn delete_queue(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    Path(queue): Path<String>,
) -> ApiResult<Response> {
    check_queue_name(&queue)?;
    if let Some(r) = pass_on(&state, tenant, &queue, &hop, &Bytes::new(), FORWARD_TIMEOUT).await? {
        return Ok(r);
    }
    let stored = state
        .db
        .conn()
        .await?
        .ephemeral_delete(tenant, &queue)
        .await?;
    let live = state.ephemeral.delete(tenant, &queue);
    Ok(Json(json!({"queue": queue, "deleted": stored || live})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushBody<'a> {
    queue: String,
    #[serde(default)]
    partition: Option<String>,
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushItem<'a> {
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// `POST /api/v1/ephemeral/push {queue, partition?, messages: [{payload}]}`: all or
/// nothing; answers `{queue, partition, pushed}`.
pub async fn push(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    body: Bytes,
) -> ApiResult<Response> {
    let b: PushBody<'_> = parse_json(&body)?;
    check_queue_name(&b.queue)?;
    if let Some(p) = &b.partition {
        check_name(NameKind::Partition, p)?;
    }
    let payloads = b
        .messages
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            serde_json::from_str::<PushItem<'_>>(raw.get())
                .map(|m| std::sync::Arc::<str>::from(m.payload.get()))
                .map_err(|e| part_error(e, &format!("messages[{i}]"), &format!("messages[{i}]: ")))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    if let Some(r) = pass_on(&state, tenant, &b.queue, &hop, &body, FORWARD_TIMEOUT).await? {
        return Ok(r);
    }
    let partition = b
        .partition
        .as_deref()
        .unwrap_or(crate::engine::ephemeral::DEFAULT_PARTITION);
    let pushed = if payloads.is_empty() {
        0
    } else {
        state
            .ephemeral
            .push(tenant, &b.queue, Some(partition), payloads)
            .map_err(refusal)?
    };
    Ok(Json(json!({"queue": b.queue, "partition": partition, "pushed": pushed})).into_response())
}

/// `GET /api/v1/ephemeral/pop?queue&partition&batch&wait&timeout&group&autoAck`:
/// answers `{queue, messages: [{id, partition, payload, attempts}]}`, the list empty
/// (never absent) when nothing came within the wait.
pub async fn pop(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let queue = get("queue")
        .ok_or_else(|| ApiError::BadParameter {
            name: "queue".into(),
            message: "queue is required".into(),
        })?
        .to_string();
    check_queue_name(&queue)?;
    let partition = get("partition");
    if let Some(p) = partition {
        check_name(NameKind::Partition, p)?;
    }
    let group = get("group");
    if let Some(g) = group {
        check_name(NameKind::ConsumerGroup, g)?;
    }
    let cap = i64::from(state.config.max_batch);
    let batch = int_query(&q, &Param::new("batch", 1, cap).max_is("QUEEN_MAX_BATCH"))?.unwrap_or(1);
    let wait = bool_param(get("wait"), "wait", false)?;
    let timeout =
        Param::new("timeout", 0, MAX_TIMEOUT_MS as i64).max_is("the long-poll cap, milliseconds");
    let timeout_ms = int_query(&q, &timeout)?.map_or(DEFAULT_WAIT_MS, |t| t as u64);
    let auto_ack = bool_param(get("autoAck"), "autoAck", false)?;
    let hop_timeout = FORWARD_TIMEOUT
        + if wait {
            Duration::from_millis(timeout_ms)
        } else {
            Duration::ZERO
        };
    if let Some(r) = pass_on(&state, tenant, &queue, &hop, &Bytes::new(), hop_timeout).await? {
        return Ok(r);
    }
    let ask = PopAsk {
        partition,
        group,
        batch: batch as usize,
        auto_ack,
    };
    let wait = wait.then(|| Duration::from_millis(timeout_ms));
    let got = long_poll(&state, tenant, &queue, ask, wait).await?;
    Ok(messages_answer(&queue, &got))
}

/// Pops until the batch is full, the wait ends or shutdown begins; a queue with a
/// `windowBuffer` keeps a waiting pop open up to `ms` past its first message for up to
/// `count` messages.
async fn long_poll(
    state: &AppState,
    tenant: Uuid,
    queue: &str,
    mut ask: PopAsk<'_>,
    wait: Option<Duration>,
) -> ApiResult<Vec<Delivered>> {
    let start = Instant::now();
    let deadline = start + wait.unwrap_or_default();
    let mut window_end: Option<Instant> = None;
    let batch = ask.batch;
    let mut got = Vec::new();
    loop {
        // Taken again each round: a delete or an idle sweep may have replaced the ring.
        let ring = state
            .ephemeral
            .ring(tenant, queue, true)
            .map_err(refusal)?
            .expect("created");
        let notified = ring.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        ask.batch = batch - got.len();
        got.extend(state.ephemeral.pop(&ring, &ask));
        if got.len() >= batch || wait.is_none() || state.is_stopping() {
            return Ok(got);
        }
        let until = if got.is_empty() {
            deadline
        } else {
            match (window_end, ring.window()) {
                (Some(end), _) => end,
                (None, Some(w)) if (got.len() as u64) < u64::from(w.count) => {
                    let end = Instant::now() + Duration::from_millis(w.ms);
                    window_end = Some(end);
                    end
                }
                _ => return Ok(got),
            }
        };
        let now = Instant::now();
        if now >= until {
            return Ok(got);
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep(until - now) => {}
            _ = state.stopping() => return Ok(got),
        }
    }
}

/// `{queue, messages}` written out with each payload as it was pushed (JSON text).
fn messages_answer(queue: &str, got: &[Delivered]) -> Response {
    let mut out =
        String::with_capacity(64 + got.iter().map(|d| d.payload.len() + 96).sum::<usize>());
    let text = |s: &str| serde_json::to_string(s).expect("strings serialize");
    let _ = write!(out, "{{\"queue\":{},\"messages\":[", text(queue));
    for (i, d) in got.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"id\":{},\"partition\":{},\"payload\":{},\"attempts\":{}}}",
            if i == 0 { "" } else { "," },
            text(&d.id),
            text(&d.partition),
            d.payload,
            d.attempts
        );
    }
    out.push_str("]}");
    ([(header::CONTENT_TYPE, "application/json")], out).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckBody {
    queue: String,
    #[serde(default)]
    group: Option<String>,
    acks: Vec<AckItem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckItem {
    id: String,
    #[serde(default)]
    status: Option<String>,
    /// Accepted for the SDK's sake; ephemeral queues keep no error history.
    #[serde(default)]
    #[allow(dead_code)]
    error: Option<Value>,
}

/// `POST /api/v1/ephemeral/ack {queue, group?, acks: [{id, status?, error?}]}`: each id
/// answered on its own, `{results: [{id, outcome}]}` with outcome `acked`,
/// `redelivered`, `stale` or `unknown` (and `dropped: true` when a failure spent the
/// retry budget). A bad status refuses the whole request before any ack is taken.
pub async fn ack(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    body: Bytes,
) -> ApiResult<Response> {
    let b: AckBody = parse_json(&body)?;
    check_queue_name(&b.queue)?;
    if let Some(g) = &b.group {
        check_name(NameKind::ConsumerGroup, g)?;
    }
    let acks = b
        .acks
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let status = AckStatus::parse(a.status.as_deref()).ok_or_else(|| {
                ApiError::field(
                    format!("acks[{i}].status"),
                    format!(
                        "acks[{i}].status must be completed, failed or retry, got {:?}",
                        a.status.as_deref().unwrap_or_default()
                    ),
                )
            })?;
            Ok((MessageId::parse(&a.id), status))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    if let Some(r) = pass_on(&state, tenant, &b.queue, &hop, &body, FORWARD_TIMEOUT).await? {
        return Ok(r);
    }
    let outcomes = state
        .ephemeral
        .ack(tenant, &b.queue, b.group.as_deref(), &acks);
    let results: Vec<Value> = b
        .acks
        .iter()
        .zip(outcomes)
        .map(|(a, o)| match o {
            crate::engine::ephemeral::Outcome::AckedDropped => {
                json!({"id": a.id, "outcome": o.as_str(), "dropped": true})
            }
            _ => json!({"id": a.id, "outcome": o.as_str()}),
        })
        .collect();
    Ok(Json(json!({"queue": b.queue, "results": results})).into_response())
}

/// `GET /api/v1/ephemeral/queues`: this tenant's queues, declared and implicit, on every
/// broker (each lists the ones it owns; a peer that does not answer is named in
/// `unreachable` and its queues are missing from the list).
pub async fn queues(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
) -> ApiResult<Response> {
    let mut list = state
        .ephemeral
        .list(tenant, |q| state.peers.owns(tenant, q));
    let mut unreachable = Vec::new();
    if !hop.forwarded() {
        for peer in state.peers.others() {
            match state
                .peers
                .get_json(peer, "/api/v1/ephemeral/queues", &hop.headers)
                .await
            {
                // An answer of another shape lists nothing, as an empty one.
                Ok(v) => list.extend(QueueList::deserialize(&v).unwrap_or_default().queues),
                Err(e) => unreachable.push(json!({"peer": peer, "error": e})),
            }
        }
    }
    list.sort_by(|a, b| a.queue.cmp(&b.queue));
    Ok(Json(json!({"queues": list, "unreachable": unreachable})).into_response())
}

/// `GET /api/v1/ephemeral/queues/{queue}/depth`: ring length, bytes, partitions and
/// the per-group cursors; 404 `ephemeral_queue_not_found` for a queue that is neither
/// declared nor live (the only verb that says so).
pub async fn depth(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    hop: Hop,
    Path(queue): Path<String>,
) -> ApiResult<Response> {
    check_queue_name(&queue)?;
    if let Some(r) = pass_on(&state, tenant, &queue, &hop, &Bytes::new(), FORWARD_TIMEOUT).await? {
        return Ok(r);
    }
    let depth = state
        .ephemeral
        .depth(tenant, &queue)
        .ok_or_else(|| not_found(&queue))?;
    Ok(Json(depth).into_response())
}
