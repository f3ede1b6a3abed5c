//! `GET /api/v1/dlq?queue=&consumerGroup=&limit=&offset=`: dead-lettered messages,
//! newest failure first, through `queen.dlq_list_v1` (scoped to the caller's tenant).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use queen_log::wire::DlqEntry;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::error::ApiResult;
use crate::http::auth::Tenant;
use crate::http::input::{check_name, int_query, Param, OFFSET};
use crate::state::AppState;
use crate::util::QUEUE_MODE;
use queen_log::names::NameKind;

/// `limit`: 1 to 1000 rows a page (page through with `offset`); default 100.
const LIMIT: Param<'static> = Param::new("limit", 1, 1000);

pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Response> {
    let get = |k: &str| q.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let limit = int_query(&q, &LIMIT)?.unwrap_or(100) as i32;
    let offset = int_query(&q, &OFFSET)?.unwrap_or(0) as i32;
    let queue = get("queue");
    let group = get("consumerGroup");
    for (kind, name) in [(NameKind::Queue, queue), (NameKind::ConsumerGroup, group)] {
        name.map_or(Ok(()), |n| check_name(kind, n))?;
    }
    let mut page = state
        .db
        .conn()
        .await?
        .dlq_list(queue, group, limit, offset, tenant)
        .await?;
    // Sealed payloads are opened for the reader (crate::engine::sealing).
    for m in &mut page.messages {
        if let Some(d) = m.data.take() {
            m.data = Some(state.sealer.open_raw(d));
        }
    }
    let messages: Vec<Listed<'_>> = page.messages.iter().map(render).collect();
    let pagination = json!({"limit": limit, "offset": offset, "total": page.total});
    Ok(Json(Listing {
        messages,
        pagination,
    })
    .into_response())
}

/// The listing, typed: a `json!` tree would re-read each payload as a rounding `Value`.
#[derive(Serialize)]
struct Listing<'a> {
    messages: Vec<Listed<'a>>,
    pagination: Value,
}

/// One DLQ row on the wire (docs/broker-contract.md §1).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed<'a> {
    id: Uuid,
    /// The DLQ row's own id: what replay and delete by id take.
    dlq_id: Uuid,
    transaction_id: Option<&'a str>,
    partition_id: Uuid,
    queue: &'a str,
    partition: &'a str,
    consumer_group: Option<&'a str>,
    error_message: Option<&'a str>,
    retry_count: Option<i32>,
    data: Option<&'a serde_json::value::RawValue>,
    producer_sub: Option<()>,
    created_at: Option<&'a str>,
    failed_at: &'a str,
}

/// A `dlq_list_v1` entry in the wire shape; the queue-mode group is rendered as null.
/// The frame's producer subject is not kept by the DLQ row: null.
fn render(m: &DlqEntry) -> Listed<'_> {
    Listed {
        id: m.id,
        dlq_id: m.dlq_id,
        transaction_id: m.transaction_id.as_deref(),
        partition_id: m.partition_id,
        queue: &m.queue,
        partition: &m.partition,
        consumer_group: Some(m.consumer_group.as_str()).filter(|g| *g != QUEUE_MODE),
        error_message: m.error_message.as_deref(),
        retry_count: m.retry_count,
        data: m.data.as_deref(),
        producer_sub: None,
        created_at: m.created_at.as_deref(),
        failed_at: &m.failed_at,
    }
}
