//! `GET /api/v1/pop/queue/{queue}[/partition/{partition}]`: a leasing (or auto-ack) pop,
//! with segments decoded here and an optional long-poll. `GET /api/v1/pop?namespace=&task=`
//! (Queen 2.x): the same pop over every queue of a namespace and/or task, each request
//! starting at the next queue in turn (docs/decisions.md, "Pops across a namespace").
//!
//! The long-poll re-polls with backoff until its timeout and is woken early by a push to
//! the same queue. It never holds a pooled connection while parked.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use queen_log::conventions::requested_lease;
use queen_log::payload;
use queen_log::pop::{conflation_echo, conflation_refusal, ConflationEcho};
use queen_log::served::{decode_served_here, ServedSlice};
use serde::Serialize;
use tokio::time::Instant;
use uuid::Uuid;

use crate::db::{PopArgs, PopSlice as Slice};
use crate::engine::registry::Delivered;
use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::http::input::{bool_param, check_name, check_queue_name, int_query, Param};
use crate::ops::metrics::Metrics;
use crate::state::AppState;
use crate::util::{group_or_queue_mode, iso_ms, named_group};
use queen_log::names::NameKind;

/// Default long-poll timeout when `wait=true` comes without `timeout`.
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Longest accepted long-poll `timeout` (one hour); above → 400.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// First and largest pause between re-polls; the cap keeps lease-expiry redelivery prompt.
const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// A validated pop request.
#[derive(Clone)]
struct PopReq {
    queue: String,
    partition: Option<String>,
    batch: i32,
    wait: bool,
    timeout: Duration,
    group: Option<String>,
    auto_ack: bool,
    sub_mode: String,
    sub_from: String,
    lease_seconds: Option<i32>,
    max_partitions: i32,
    lease_id: String,
    tenant: Uuid,
    /// `conflation=true`: last-value delivery asked for (docs/decisions.md, "Conflation").
    conflation: bool,
}

pub async fn pop_queue(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path(queue): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let req = parse(&state, tenant, queue, None, &q)?;
    if state.modes.pop_maintenance() {
        return Ok(paused());
    }
    run(state, req).await
}

/// Pop maintenance mode (crate::http::routes::maintenance): every pop answers 204, as
/// Queen's does, after its parameters are checked (bad input is still a 400).
fn paused() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// `GET /api/v1/pop?namespace=&task=`: the queue pop's parameters, over the caller's
/// queues whose namespace and task match (at least one of the two is required).
pub async fn pop_across(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let (namespace, task) = (get("namespace"), get("task"));
    if namespace.is_none() && task.is_none() {
        return Err(ApiError::BadParameter {
            name: "namespace".into(),
            message: "a pop without a queue needs namespace or task (or both)".into(),
        });
    }
    for (kind, v) in [(NameKind::Queue, namespace), (NameKind::Queue, task)] {
        v.map_or(Ok(()), |n| check_name(kind, n))?;
    }
    let req = parse_params(&state, tenant, &q)?;
    if state.modes.pop_maintenance() {
        return Ok(paused());
    }
    let mut queues: Vec<(i64, String)> = state
        .db
        .conn()
        .await?
        .queue_list(Some(tenant), None)
        .await?
        .into_iter()
        .filter(|m| namespace.is_none_or(|n| m.namespace.as_deref() == Some(n)))
        .filter(|m| task.is_none_or(|t| m.task.as_deref() == Some(t)))
        .map(|m| (priority(&m.options), m.name))
        .collect();
    // Higher `priority` first (docs/decisions.md, "Queue options"), by name within one.
    queues.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    run_across(state, req, tiers(queues)).await
}

pub async fn pop_partition(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((queue, partition)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let req = parse(&state, tenant, queue, Some(partition), &q)?;
    if state.modes.pop_maintenance() {
        return Ok(paused());
    }
    run(state, req).await
}

fn parse(
    state: &AppState,
    tenant: Uuid,
    queue: String,
    partition: Option<String>,
    q: &HashMap<String, String>,
) -> ApiResult<PopReq> {
    check_queue_name(&queue)?;
    if let Some(p) = &partition {
        check_name(NameKind::Partition, p)?;
    }
    Ok(PopReq {
        queue,
        partition,
        ..parse_params(state, tenant, q)?
    })
}

/// Every parameter of a pop but its queue and partition.
fn parse_params(state: &AppState, tenant: Uuid, q: &HashMap<String, String>) -> ApiResult<PopReq> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let cfg = &state.config;
    let batch = Param::new("batch", 1, i64::from(cfg.max_batch)).max_is("QUEEN_MAX_BATCH");
    let batch = int_query(q, &batch)?.unwrap_or(1) as i32;
    let partitions =
        Param::new("partitions", 1, i64::from(cfg.max_batch)).max_is("QUEEN_MAX_BATCH");
    let max_partitions = int_query(q, &partitions)?.unwrap_or(1) as i32;
    let timeout =
        Param::new("timeout", 0, MAX_TIMEOUT_MS as i64).max_is("the long-poll cap, milliseconds");
    let timeout_ms = int_query(q, &timeout)?.unwrap_or(DEFAULT_TIMEOUT_MS as i64) as u64;
    // ≤ 0 (or absent) means the queue's lease_time (docs/broker-contract.md §1), never an
    // error; above QUEEN_MAX_LEASE_SECONDS is one (a clamp would hand out a shorter lease
    // than asked for without saying).
    let lease = Param::new(
        "leaseSeconds",
        i64::from(i32::MIN),
        i64::from(cfg.max_lease_seconds),
    )
    .max_is("QUEEN_MAX_LEASE_SECONDS; 0 or less means the queue's leaseTime");
    let lease_seconds = int_query(q, &lease)?.map(|n| n.max(0) as i32);
    let group = named_group(get("consumerGroup"));
    if let Some(g) = group {
        check_name(NameKind::ConsumerGroup, g)?;
    }
    let auto_ack = bool_param(get("autoAck"), "autoAck", false)?;
    let conflation = bool_param(get("conflation"), "conflation", false)?;
    if let Some(why) = conflation
        .then(|| conflation_refusal(group.is_some(), auto_ack))
        .flatten()
    {
        return Err(ApiError::BadParameter {
            name: "conflation".into(),
            message: why.into(),
        });
    }
    Ok(PopReq {
        queue: String::new(),
        partition: None,
        batch,
        wait: bool_param(get("wait"), "wait", false)?,
        timeout: Duration::from_millis(timeout_ms),
        group: group.map(str::to_string),
        auto_ack,
        // Unknown modes pass through: the extension treats them as "all" (never a 4xx).
        sub_mode: get("subscriptionMode").unwrap_or("all").to_string(),
        sub_from: get("subscriptionFrom").unwrap_or("").to_string(),
        // ≤ 0 or absent → the queue's lease_time, looked up in the pop statement.
        lease_seconds: requested_lease(lease_seconds),
        max_partitions,
        lease_id: if auto_ack {
            String::new()
        } else {
            Uuid::now_v7().to_string()
        },
        tenant,
        conflation,
    })
}

async fn run(state: AppState, req: PopReq) -> ApiResult<Response> {
    let deadline = Instant::now() + req.timeout;
    let waker = state.waker(req.tenant, &req.queue, req.partition.as_deref());
    let mut backoff = BACKOFF_START;
    let mut seen = 0;
    let mut pop_now = true;
    loop {
        // Registered before polling, so a push landing mid-poll still wakes us.
        let notified = waker.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Never answer empty without a last pop.
        pop_now |= Instant::now() >= deadline;
        if pop_now {
            // Read before popping: an append the pop misses is one it counts.
            seen = state.hints.worth_a_pop(req.tenant, &req.queue, seen).1;
            let slices = pop_once(&state, &req).await?;
            if !slices.is_empty() {
                return respond(&state, &req, slices).await;
            }
        }
        let now = Instant::now();
        if !req.wait || now >= deadline || state.is_stopping() {
            return empty(&state, &req, std::slice::from_ref(&req.queue)).await;
        }
        let woken = tokio::select! {
            _ = &mut notified => true,
            _ = tokio::time::sleep(backoff.min(deadline - now)) => false,
            // Shutdown: answer now, the drain must not wait out the long-poll.
            _ = state.stopping() => return empty(&state, &req, std::slice::from_ref(&req.queue)).await,
        };
        // A queue long-poll woken by an append that a pop of this broker has served
        // since waits on (crate::engine::hints); a timer wake-up, a partition long-poll
        // and the deadline always pop.
        pop_now = !woken
            || req.partition.is_some()
            || state.hints.worth_a_pop(req.tenant, &req.queue, seen).0;
        if pop_now {
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// A queue's `priority` option as configure stored it (queen_log::options: an integer
/// >= 0); 0 when absent.
fn priority(options: &serde_json::Value) -> i64 {
    queen_log::options::priority(options)
}

/// Queues sorted by priority (highest first) into tiers of equal priority.
fn tiers(sorted: Vec<(i64, String)>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut last = None;
    for (p, name) in sorted {
        match out.last_mut() {
            Some(tier) if last == Some(p) => tier.push(name),
            _ => out.push(vec![name]),
        }
        last = Some(p);
    }
    out
}

/// The long-poll over several queues: each round tries the tiers in priority order and,
/// within a tier, every queue once, starting at the next one in turn (so concurrent
/// consumers of a namespace spread over its queues of one priority); a lower tier is
/// served only when every queue above it had nothing. Parks until a push into any of
/// them or the backoff.
async fn run_across(state: AppState, req: PopReq, tiers: Vec<Vec<String>>) -> ApiResult<Response> {
    let deadline = Instant::now() + req.timeout;
    let wakers: Vec<_> = tiers
        .iter()
        .flatten()
        .map(|q| state.waker(req.tenant, q, None))
        .collect();
    let mut backoff = BACKOFF_START;
    loop {
        let mut notified: Vec<_> = wakers.iter().map(|w| Box::pin(w.notified())).collect();
        notified.iter_mut().for_each(|n| {
            n.as_mut().enable();
        });
        let start = state.next_pop_turn();
        for queues in &tiers {
            for k in 0..queues.len() {
                let one = PopReq {
                    queue: queues[(start + k) % queues.len()].clone(),
                    ..req.clone()
                };
                let slices = pop_once(&state, &one).await?;
                if !slices.is_empty() {
                    return respond(&state, &one, slices).await;
                }
            }
        }
        let now = Instant::now();
        let all: Vec<String> = tiers.iter().flatten().cloned().collect();
        if !req.wait || now >= deadline || state.is_stopping() || tiers.is_empty() {
            return empty(&state, &req, &all).await;
        }
        tokio::select! {
            _ = futures_util::future::select_all(notified) => {}
            _ = tokio::time::sleep(backoff.min(deadline - now)) => {}
            _ = state.stopping() => return empty(&state, &req, &all).await,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// One pop, one statement, one round trip (`broker_pop_v1`): a partition pop when a
/// partition is named, else up to `partitions` ready ones; the queue's lease_time when
/// no positive leaseSeconds was asked for.
async fn pop_once(state: &AppState, req: &PopReq) -> ApiResult<Vec<Slice>> {
    let args = PopArgs {
        tenant: req.tenant,
        queue: &req.queue,
        partition: req.partition.as_deref(),
        group: group_or_queue_mode(req.group.as_deref()),
        batch: req.batch,
        lease_seconds: req.lease_seconds,
        worker: &req.lease_id,
        auto_ack: req.auto_ack,
        sub_mode: &req.sub_mode,
        sub_from: &req.sub_from,
        max_partitions: req.max_partitions,
        conflation: req.conflation.then_some(true),
        hints: match req.partition {
            None => state.hints.for_pop(req.tenant, &req.queue),
            Some(_) => Vec::new(),
        },
    };
    let slices = state.db.conn().await?.broker_pop(&args).await?;
    if req.partition.is_none() && !slices.is_empty() {
        let served: Vec<Uuid> = slices.iter().map(|s| s.pid).collect();
        state.hints.served(req.tenant, &req.queue, &served);
    }
    Ok(slices)
}

/// What the answer to a pop that asked for conflation says about it, from the group's
/// stored policy on the queues it popped (queen_log::pop::conflation_echo); None (no key,
/// the answer unchanged) for a pop that did not ask.
async fn echo(
    state: &AppState,
    req: &PopReq,
    queues: &[String],
) -> ApiResult<Option<ConflationEcho>> {
    let Some(group) = named_group(req.group.as_deref()).filter(|_| req.conflation) else {
        return Ok(None);
    };
    let conn = state.db.conn().await?;
    let mut stored = Vec::with_capacity(queues.len());
    for q in queues {
        stored.push(conn.group_conflation(req.tenant, q, group).await?);
    }
    Ok(Some(conflation_echo(stored)))
}

/// An empty pop's answer: 204, or, when the pop asked for conflation, a 200 body that
/// carries the echo (Queen's SDK reads it on empty pops too).
async fn empty(state: &AppState, req: &PopReq, queues: &[String]) -> ApiResult<Response> {
    let Some(e) = echo(state, req, queues).await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    Ok(Json(PopResponse {
        success: true,
        queue: &req.queue,
        partition: None,
        partition_id: None,
        lease_id: &req.lease_id,
        consumer_group: named_group(req.group.as_deref()),
        partitions_claimed: 0,
        messages: Vec::new(),
        conflation: (e == ConflationEcho::Conflating).then_some(true),
        conflation_conflict: (e == ConflationEcho::Conflict).then_some(true),
    })
    .into_response())
}

/// One decoded message, ready to render.
struct Msg {
    pid: Uuid,
    partition: String,
    offset: i64,
    created_at: DateTime<Utc>,
    attempt: i32,
    frame: queen_log::frame::Frame,
}

/// The served slices' frames, by the extension's decode loop (`queen_log::served`).
fn decode(slices: Vec<Slice>) -> ApiResult<Vec<Msg>> {
    Ok(decode_served_here(
        &slices,
        |s| {
            ServedSlice::of(
                *s.pid.as_bytes(),
                s.base,
                s.start_idx,
                s.take,
                s.msg_count,
                &s.blob,
            )
        },
        |s, offset, frame| Msg {
            pid: s.pid,
            partition: s.partition.clone(),
            offset,
            created_at: s.created_at,
            attempt: s.attempt,
            frame: frame.clone(),
        },
    )?)
}

async fn respond(state: &AppState, req: &PopReq, slices: Vec<Slice>) -> ApiResult<Response> {
    let msgs = tokio::task::spawn_blocking(move || decode(slices))
        .await
        .map_err(|e| ApiError::Internal(format!("decoder task failed: {e}")))??;
    if !req.auto_ack {
        state.registry.record(deliveries(req, &msgs));
    }
    Metrics::add(&state.metrics.messages_popped, msgs.len() as u64);
    let group = named_group(req.group.as_deref());
    let messages: Vec<WireMsg<'_>> = msgs
        .iter()
        .map(|m| render_msg(m, req, group, state))
        .collect();
    let mut claimed: Vec<Uuid> = msgs.iter().map(|m| m.pid).collect();
    claimed.dedup();
    let first = msgs.first();
    let echo = echo(state, req, std::slice::from_ref(&req.queue)).await?;
    Ok(Json(PopResponse {
        success: true,
        queue: &req.queue,
        partition: first.map(|m| m.partition.as_str()),
        partition_id: first.map(|m| m.pid),
        lease_id: &req.lease_id,
        consumer_group: group,
        partitions_claimed: claimed.len(),
        messages,
        conflation: (echo == Some(ConflationEcho::Conflating)).then_some(true),
        conflation_conflict: (echo == Some(ConflationEcho::Conflict)).then_some(true),
    })
    .into_response())
}

/// The pop response, typed for the same reason as [`WireMsg`] and because a `json!`
/// tree would re-read every payload `RawValue` as a number-rounding `Value`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PopResponse<'a> {
    success: bool,
    queue: &'a str,
    partition: Option<&'a str>,
    partition_id: Option<Uuid>,
    lease_id: &'a str,
    consumer_group: Option<&'a str>,
    partitions_claimed: usize,
    messages: Vec<WireMsg<'a>>,
    /// Only on the answer to a pop that asked for conflation (queen_log::pop::ConflationEcho).
    #[serde(skip_serializing_if = "Option::is_none")]
    conflation: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    conflation_conflict: Option<bool>,
}

/// What the ack registry learns from this pop: per partition, the batch end and hashes.
fn deliveries(req: &PopReq, msgs: &[Msg]) -> Vec<Delivered> {
    let mut out: Vec<Delivered> = Vec::new();
    for m in msgs {
        match out.last_mut() {
            Some(d) if d.partition_id == m.pid => {
                d.batch_end = m.offset;
                d.txns.push(m.frame.transaction_id.clone());
            }
            _ => out.push(Delivered {
                partition_id: m.pid,
                group: group_or_queue_mode(req.group.as_deref()).to_string(),
                worker: req.lease_id.clone(),
                batch_end: m.offset,
                lease_seconds: req.lease_seconds,
                txns: vec![m.frame.transaction_id.clone()],
            }),
        }
    }
    out
}

/// One delivered message on the wire. A typed struct, not a `json!` Value: a pop of
/// hundreds of messages otherwise builds (and frees) a map per message, the broker's
/// largest CPU cost in the end-to-end profile.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireMsg<'a> {
    id: Uuid,
    transaction_id: &'a str,
    trace_id: Option<Uuid>,
    /// The payload by queen_log::payload's one rule (the same in psql and over HTTP).
    data: std::borrow::Cow<'a, serde_json::value::RawValue>,
    producer_sub: Option<&'a str>,
    created_at: String,
    partition_id: Uuid,
    partition: &'a str,
    lease_id: &'a str,
    consumer_group: Option<&'a str>,
    delivery_attempt: i32,
    offset: i64,
}

/// A sealed payload (frame flag 4) is opened for the client (crate::engine::sealing).
fn render_msg<'a>(
    m: &'a Msg,
    req: &'a PopReq,
    group: Option<&'a str>,
    state: &AppState,
) -> WireMsg<'a> {
    let f = &m.frame;
    WireMsg {
        id: Uuid::from_bytes(f.message_id),
        transaction_id: &f.transaction_id,
        trace_id: f.trace_id.map(Uuid::from_bytes),
        data: if f.encrypted {
            state.sealer.open(payload::json_raw_of(&f.payload))
        } else {
            payload::json_raw_of(&f.payload)
        },
        producer_sub: f.producer_sub.as_deref(),
        created_at: iso_ms(m.created_at),
        partition_id: m.pid,
        partition: &m.partition,
        lease_id: &req.lease_id,
        consumer_group: group,
        delivery_attempt: m.attempt.max(1),
        offset: m.offset,
    }
}
