//! `POST /api/v1/push`: the body read (JSON, or the SDK's binary one,
//! crate::http::binary_body; items by crate::http::items), pushed by crate::engine::push
//! (spool or database, rounds, dedup), answered per item: 201 with one object per item,
//! `queued`, `duplicate` or `buffered` (in the push spool, docs/availability.md).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::engine::items::stamp_subject;
use crate::engine::push::{push as push_items, Outcome, Pushed};
use crate::error::ApiResult;
use crate::http::auth::{Subject, Tenant};
use crate::http::binary_body::{is_binary, read_push, BinaryPush, PUSH_MAGIC};
use crate::http::input::parse_json;
use crate::http::items::{check_item_count, read_push_item, PushItem};
use crate::state::AppState;

/// The body with each item left as raw JSON (read by crate::http::items); any other
/// top-level key is refused naming it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PushBody<'a> {
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

pub async fn push(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    subject: Subject,
    body: Bytes,
) -> ApiResult<Response> {
    let BinaryPush {
        mut items,
        mut ready,
        counts,
    } = read_body(&state, &body)?;
    if items.is_empty() {
        return Ok(answer(counts, &[], &[]));
    }
    // The producer subject is the token's (docs/security.md, "Producer identity"); the
    // client's compressed frames carry none, so they are encoded again with it.
    stamp_subject(&mut items, subject.0.as_ref());
    if subject.0.is_some() {
        ready.clear();
    }
    let Pushed { items, outcomes } = push_items(&state.engine(), tenant, items, ready).await?;
    Ok(answer(counts, &items, &outcomes))
}

/// The JSON body, or the SDK's binary one (crate::http::binary_body), as push items.
fn read_body(state: &AppState, body: &[u8]) -> ApiResult<BinaryPush> {
    let read = if is_binary(body, PUSH_MAGIC) {
        read_push(body, state.config.body_limit_bytes())?
    } else {
        let json: PushBody<'_> = parse_json(body)?;
        check_item_count(json.items.len(), state.config.max_push_items)?;
        BinaryPush {
            items: json
                .items
                .iter()
                .enumerate()
                .map(|(i, v)| read_push_item(i, v))
                .collect::<ApiResult<Vec<_>>>()?,
            ready: Vec::new(),
            counts: false,
        }
    };
    check_item_count(read.items.len(), state.config.max_push_items)?;
    Ok(read)
}

/// 201 with one object per item, or (the binary body's flag 2) the counts only.
fn answer(counts: bool, items: &[PushItem], outcomes: &[Outcome]) -> Response {
    if counts {
        let queued = outcomes.iter().filter(|o| o.queued).count();
        let buffered = outcomes.iter().filter(|o| o.buffered).count();
        let mut body = serde_json::json!({
            "count": items.len(),
            "queued": queued,
            "duplicate": items.len() - queued - buffered,
            "error": 0,
        });
        // Ours, and only when there is something to say: the SDK's shape otherwise.
        if buffered > 0 {
            body["buffered"] = buffered.into();
        }
        return (StatusCode::CREATED, Json(body)).into_response();
    }
    (StatusCode::CREATED, Json(render(items, outcomes))).into_response()
}

/// One item of the push answer.
#[derive(Serialize)]
struct Answer<'a> {
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

fn render<'a>(items: &'a [PushItem], outcomes: &[Outcome]) -> Vec<Answer<'a>> {
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let o = outcomes[it.dup_of.unwrap_or(i)];
            Answer {
                index: i,
                message_id: it.message_id,
                transaction_id: &it.txn,
                queue_name: &it.queue,
                partition_id: outcomes[i].partition_id,
                status: if outcomes[i].queued {
                    "queued"
                } else if outcomes[i].buffered {
                    "buffered"
                } else {
                    "duplicate"
                },
                offset: o.offset.or(o.original_off),
            }
        })
        .collect()
}
