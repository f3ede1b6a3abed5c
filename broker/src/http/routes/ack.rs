//! `POST /api/v1/ack` and `POST /api/v1/ack/batch` (docs/broker-contract.md §2): the
//! items read (crate::http::items), acked by crate::engine::ack (grouping, the fast-path
//! decision, the by-hash authority), and answered per item in request order.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::engine::ack::{acknowledge, AckOutcome};
use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::parse_json;
use crate::http::items::{read_ack_item, AckAt, AckItem};
use crate::state::AppState;

/// Each acknowledgment stays raw JSON until crate::http::items reads it: no `Value` tree.
/// Any other top-level key is refused naming it (docs/http-api.md, "Strict bodies").
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BatchIn<'a> {
    consumer_group: Option<String>,
    #[serde(borrow)]
    acknowledgments: Vec<&'a RawValue>,
}

pub async fn ack_one(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Vec<Answer>>> {
    let v: &RawValue = parse_json(&body)?;
    let items = vec![read_ack_item(0, v, None, AckAt::Body)?];
    let outs = acknowledge(&state.engine(), tenant, &items).await?;
    Ok(Json(render(items, outs)))
}

pub async fn ack_batch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    body: Bytes,
) -> ApiResult<Json<Vec<Answer>>> {
    let b: BatchIn<'_> = parse_json(&body)?;
    let items = b
        .acknowledgments
        .iter()
        .enumerate()
        .map(|(i, v)| read_ack_item(i, v, b.consumer_group.as_deref(), AckAt::Batch))
        .collect::<ApiResult<Vec<_>>>()?;
    let outs = acknowledge(&state.engine(), tenant, &items).await?;
    Ok(Json(render(items, outs)))
}

/// One item of an ack answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    index: usize,
    transaction_id: String,
    success: bool,
    error: Option<String>,
    lease_released: bool,
    dlq: bool,
    noop: bool,
    /// The message is delivered again: this ack released the lease with it above the
    /// cursor (a nack, or anything above the batch's head signal). Only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    redelivered: bool,
    /// A nack's delay held the redelivery back until then (only when it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    redeliver_at: Option<String>,
}

fn render(items: Vec<AckItem>, outs: Vec<AckOutcome>) -> Vec<Answer> {
    items
        .into_iter()
        .zip(outs)
        .enumerate()
        .map(|(index, (it, o))| Answer {
            index,
            transaction_id: it.txn,
            success: o.success,
            error: o.error,
            lease_released: o.lease_released,
            dlq: o.dlq,
            noop: o.noop,
            redelivered: o.redelivered,
            redeliver_at: o.redeliver_at,
        })
        .collect()
}
