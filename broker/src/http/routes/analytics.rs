//! Queen's status and analytics routes over the sampled history (docs/observability.md;
//! the shapes are crate::ops::analytics):
//!
//! - `GET /api/v1/status?from=&to=&queue=&namespace=&task=`: the dashboard's overview;
//! - `GET /api/v1/status/analytics?from=&to=&queue=&namespace=&task=&interval=`;
//! - `GET /api/v1/analytics/{system-metrics, worker-metrics}?from=&to=&hostname=&workerId=`;
//! - `GET /api/v1/analytics/{queue-ops, queue-lag, queue-parked-replicas}?from=&to=&queue=`;
//! - `GET /api/v1/analytics/retention?from=&to=`, `GET /api/v1/analytics/postgres-stats`;
//! - `POST /api/v1/stats/refresh`: files the queues' snapshot now (admin);
//! - `GET /api/v1/system/shared-state`: what the brokers share, and how (admin).
//!
//! Every answer reads bounded rows: the history of the range (one row per broker and
//! minute, one per queue and minute), never the messages. The brokers' rows are the
//! whole system's traffic, so a tenant (tenancy on) sees its queues' snapshots only.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

use crate::db::history::{QueueBucket, Range};
use crate::error::{ApiError, ApiResult};
use crate::http::auth::Tenant;
use crate::ops::analytics as shape;
use crate::state::AppState;
use crate::util::iso_ms;

/// The longest range a request may ask for (the history keeps 7 days by default).
const MAX_RANGE_DAYS: i64 = 366;

type Params = HashMap<String, String>;

fn param<'a>(p: &'a Params, k: &str) -> Option<&'a str> {
    p.get(k).map(String::as_str).filter(|v| !v.is_empty())
}

fn instant(p: &Params, k: &str) -> ApiResult<Option<DateTime<Utc>>> {
    param(p, k)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::BadParameter {
                    name: k.into(),
                    message: format!("{k} must be an ISO 8601 timestamp with a zone, got {v:?}"),
                })
        })
        .transpose()
}

/// `from`/`to` (default: the `default` before now, and now), checked, with Queen's
/// bucket width for them.
fn range(p: &Params, default: Duration) -> ApiResult<Range> {
    let to = instant(p, "to")?.unwrap_or_else(Utc::now);
    let from = instant(p, "from")?.unwrap_or(to - default);
    if from > to {
        return Err(ApiError::BadParameter {
            name: "from".into(),
            message: "from must not be after to".into(),
        });
    }
    if to - from > Duration::days(MAX_RANGE_DAYS) {
        return Err(ApiError::BadParameter {
            name: "from".into(),
            message: format!("the range may span at most {MAX_RANGE_DAYS} days"),
        });
    }
    Ok(Range {
        from,
        to,
        bucket_minutes: shape::bucket_minutes(from, to),
    })
}

/// A queue, namespace or task filter is given.
fn filtered(p: &Params) -> bool {
    ["queue", "namespace", "task"]
        .iter()
        .any(|k| param(p, k).is_some())
}

/// The tenant whose queues a request sees: every tenant's without tenancy.
fn scope(state: &AppState, tenant: Tenant) -> Option<uuid::Uuid> {
    state.config.tenancy().then_some(tenant.0)
}

/// The queue snapshots of `r` seen by `tenant`, narrowed by `queue`, `namespace` and
/// `task` as Queen's filters do.
async fn queue_rows(
    state: &AppState,
    r: Range,
    tenant: Option<uuid::Uuid>,
    p: &Params,
) -> ApiResult<Vec<QueueBucket>> {
    let rows = state
        .db
        .conn()
        .await?
        .history_queues_series(r, tenant, param(p, "queue"))
        .await?;
    let ns = param(p, "namespace");
    let task = param(p, "task");
    Ok(rows
        .into_iter()
        .filter(|q| ns.is_none_or(|n| q.namespace.as_deref() == Some(n)))
        .filter(|q| task.is_none_or(|t| q.task.as_deref() == Some(t)))
        .collect())
}

/// `GET /api/v1/status`: throughput per bucket (newest first), the active queues, the
/// message and request totals, leases, the dead-letter counts, the brokers seen in the
/// last two minutes and the age of the newest snapshot (`statsAge`, -1 without one).
pub async fn status(
    State(state): State<AppState>,
    tenant: Tenant,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let scope = scope(&state, tenant);
    let whole_system = scope.is_none() && !filtered(&p);
    let brokers = if scope.is_none() {
        state.db.conn().await?.history_brokers(r).await?
    } else {
        Vec::new()
    };
    // The whole system's traffic is the brokers' rows: the queues' snapshots are read
    // per queue only when asked for some (measured at 1,000 queues: docs/benchmarks.md).
    let throughput = if whole_system {
        let lag = state.db.conn().await?.history_lag_series(r, None).await?;
        shape::system_throughput(&brokers, &lag, r.bucket_minutes)
    } else {
        let queues = queue_rows(&state, r, scope, &p).await?;
        shape::queue_throughput(&queues, r.bucket_minutes)
    };
    // The newest snapshot is read from the last two minutes whatever the range, so the
    // current figures do not depend on it.
    let now = Utc::now();
    let recent = Range {
        from: now - Duration::minutes(2),
        to: now,
        bucket_minutes: 1,
    };
    let latest_rows = queue_rows(&state, recent, scope, &p).await?;
    let latest = shape::latest_per_queue(&latest_rows);
    let recent_brokers: Vec<_> = if scope.is_none() {
        state.db.conn().await?.history_brokers(recent).await?
    } else {
        Vec::new()
    };
    let req = shape::request_totals(&brokers);
    let sum_i32 =
        |f: fn(&QueueBucket) -> Option<i32>| latest.iter().filter_map(|q| f(q)).sum::<i32>();
    let dlq: i64 = latest.iter().filter_map(|q| q.dlq).sum();
    let newest = latest.iter().map(|q| q.bucket).max();
    Ok(Json(json!({
        "timeRange": shape::time_range(r.from, r.to),
        "bucketMinutes": r.bucket_minutes,
        "pointCount": throughput.len(),
        "throughput": throughput,
        // Queen lists the queues holding messages.
        "queues": latest.iter().filter(|q| q.pushed_total.unwrap_or(0) > 0).map(|q| json!({
                "name": q.queue, "namespace": q.namespace, "task": q.task,
                "partitions": q.partitions, "totalConsumed": q.consumed_total,
                "lag": q.lag, "messages": q.messages,
            })).collect::<Vec<_>>(),
        "messages": shape::status_messages(&latest, &req),
        "leases": {
            "active": sum_i32(|q| q.leases),
            "partitionsWithLeases": sum_i32(|q| q.leased_partitions),
            "totalBatchSize": latest.iter().filter_map(|q| q.leased_messages).sum::<i64>(),
            "totalAcked": 0,
        },
        "deadLetterQueue": {
            "totalMessages": dlq,
            "affectedPartitions": sum_i32(|q| q.dlq_partitions),
            "topErrors": [],
        },
        "workers": shape::status_workers(&recent_brokers),
        "errors": {"dbErrors": req.db_errors, "ackFailed": req.ack_failed, "dlqMessages": req.dlq},
        "statsAge": newest.map_or(-1, |t| (now - t).num_seconds().max(0)),
    })))
}

/// `GET /api/v1/status/analytics`: messages pushed per bucket (`interval` minute, hour
/// or day; default hour) over the range (default the last 24 hours).
pub async fn status_analytics(
    State(state): State<AppState>,
    tenant: Tenant,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let interval = param(&p, "interval").unwrap_or("hour");
    let minutes = match interval {
        "minute" => 1,
        "hour" => 60,
        "day" => 1440,
        other => {
            return Err(ApiError::BadParameter {
                name: "interval".into(),
                message: format!("interval must be minute, hour or day, got {other:?}"),
            })
        }
    };
    let mut r = range(&p, Duration::hours(24))?;
    r.bucket_minutes = minutes;
    if (r.to - r.from).num_minutes() / i64::from(minutes) > 10_000 {
        return Err(ApiError::BadParameter {
            name: "interval".into(),
            message: "more than 10000 buckets: widen the interval or narrow the range".into(),
        });
    }
    let scope = scope(&state, tenant);
    let pushed = if scope.is_none() && !filtered(&p) {
        shape::pushed_by_brokers(&state.db.conn().await?.history_brokers(r).await?)
    } else {
        shape::pushed_into_queues(&queue_rows(&state, r, scope, &p).await?)
    };
    Ok(Json(json!({
        "dataPoints": shape::pushed_points(&pushed, r.from, r.to, minutes),
        "interval": interval,
        "from": iso_ms(r.from),
        "to": iso_ms(r.to),
    })))
}

/// The brokers' rows of a range, narrowed by `hostname` and `workerId` (a broker's
/// `hostname:port`).
async fn broker_rows(
    state: &AppState,
    r: Range,
    p: &Params,
) -> ApiResult<Vec<crate::db::history::BrokerBucket>> {
    let rows = state.db.conn().await?.history_brokers(r).await?;
    let host = param(p, "hostname");
    let worker = param(p, "workerId");
    Ok(rows
        .into_iter()
        .filter(|b| host.is_none_or(|h| b.hostname == h))
        .filter(|b| worker.is_none_or(|w| b.broker == w))
        .collect())
}

/// `GET /api/v1/analytics/system-metrics`: each broker's CPU, memory, pool and parked
/// long-polls per bucket.
pub async fn system_metrics(
    State(state): State<AppState>,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let rows = broker_rows(&state, r, &p).await?;
    let replicas = shape::system_replicas(&rows, r.bucket_minutes);
    Ok(Json(json!({
        "timeRange": shape::time_range(r.from, r.to),
        "replicaCount": replicas.len(),
        "replicas": replicas,
        "bucketMinutes": r.bucket_minutes,
        "pointCount": rows.len(),
    })))
}

/// `GET /api/v1/analytics/worker-metrics`: request and message counts per bucket over
/// every broker, the brokers seen in the last five minutes, per-queue consumption (the
/// caller's queues), and the range's totals.
pub async fn worker_metrics(
    State(state): State<AppState>,
    tenant: Tenant,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let rows = broker_rows(&state, r, &p).await?;
    let series = shape::worker_series(&rows, r.bucket_minutes);
    let now = Utc::now();
    let recent: Vec<_> = rows
        .iter()
        .filter(|b| b.bucket >= now - Duration::minutes(5))
        .cloned()
        .collect();
    let totals = state
        .db
        .conn()
        .await?
        .history_queue_totals(r, scope(&state, tenant))
        .await?;
    let queue_list: Vec<Value> = totals
        .iter()
        .map(|q| {
            json!({"queueName": q.queue, "popCount": q.consumed, "avgLagMs": Value::Null,
                   "maxLagMs": q.max_age_s.map(|s| s * 1000)})
        })
        .collect();
    Ok(Json(json!({
        "timeRange": shape::time_range(r.from, r.to),
        "bucketMinutes": r.bucket_minutes,
        "pointCount": series.len(),
        "timeSeries": series,
        "workers": shape::status_workers(&recent),
        "queues": queue_list,
        "summary": shape::worker_summary(&rows),
    })))
}

/// `GET /api/v1/analytics/queue-ops`: per queue and bucket, pushes, consumptions,
/// partitions, lag and DLQ depth.
pub async fn queue_ops(
    State(state): State<AppState>,
    tenant: Tenant,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let scope = scope(&state, tenant);
    let rows = queue_rows(&state, r, scope, &p).await?;
    let parked_rows = parked_rows(&state, r, scope, &p).await?;
    let parked = shape::parked_per_queue(&parked_rows);
    let mut names: Vec<&str> = rows.iter().map(|q| q.queue.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    Ok(Json(json!({
        "timeRange": shape::time_range(r.from, r.to),
        "bucketMinutes": r.bucket_minutes,
        "series": shape::queue_ops_series(&rows, &parked, r.bucket_minutes),
        "queues": names,
    })))
}

/// The long-polls parked per queue and broker in `r` that `tenant` may see.
async fn parked_rows(
    state: &AppState,
    r: Range,
    tenant: Option<uuid::Uuid>,
    p: &Params,
) -> ApiResult<Vec<crate::db::history::ParkedBucket>> {
    Ok(state
        .db
        .conn()
        .await?
        .history_parked_series(r, tenant, param(p, "queue"))
        .await?)
}

/// `GET /api/v1/analytics/queue-parked-replicas`: per bucket, queue and broker, the
/// long-polls parked (the average over the broker's samples), and the brokers seen.
pub async fn queue_parked_replicas(
    State(state): State<AppState>,
    tenant: Tenant,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let rows = parked_rows(&state, r, scope(&state, tenant), &p).await?;
    let (series, replicas) = shape::parked_replicas(&rows);
    Ok(Json(json!({
        "timeRange": shape::time_range(r.from, r.to),
        "bucketMinutes": r.bucket_minutes,
        "series": series,
        "replicas": replicas,
    })))
}

/// `GET /api/v1/analytics/queue-lag`: per queue and bucket, what was consumed and the
/// age of the oldest unconsumed message (an array, as Queen's).
pub async fn queue_lag(
    State(state): State<AppState>,
    tenant: Tenant,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let rows = queue_rows(&state, r, scope(&state, tenant), &p).await?;
    Ok(Json(Value::Array(shape::queue_lag(&rows))))
}

/// `GET /api/v1/analytics/retention`: what run_maintenance removed per bucket.
pub async fn retention(
    State(state): State<AppState>,
    Query(p): Query<Params>,
) -> ApiResult<Json<Value>> {
    let r = range(&p, Duration::hours(1))?;
    let rows = state.db.conn().await?.history_lifecycle_series(r).await?;
    let (series, totals) = shape::retention(&rows);
    Ok(Json(json!({
        "timeRange": shape::time_range(r.from, r.to),
        "bucketMinutes": r.bucket_minutes,
        "series": series,
        "totals": totals,
    })))
}

/// `GET /api/v1/analytics/postgres-stats`: PostgreSQL's statistics of the extension's
/// tables (`queen.postgres_stats_v1`).
pub async fn postgres_stats(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    Ok(Json(state.db.conn().await?.postgres_stats().await?))
}

/// `POST /api/v1/stats/refresh`: the queues' snapshot of this minute, filed now (over
/// one already filed), so the status figures are current.
pub async fn refresh(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let started = std::time::Instant::now();
    crate::ops::history::snapshot(&state.db, true).await?;
    Ok(Json(json!({
        "success": true,
        "refreshed": ["queues"],
        "durationMs": started.elapsed().as_millis() as u64,
    })))
}

/// `GET /api/v1/system/shared-state`: Queen's UDP sync does not exist here; the brokers
/// share the maintenance modes and the history through the database.
pub async fn shared_state(State(state): State<AppState>) -> Json<Value> {
    let m = state.modes.get();
    Json(json!({
        "enabled": true,
        "transport": "database",
        "refreshMs": state.config.shared_state_ms,
        "historySampleMs": state.config.history_sample_ms,
        "maintenanceMode": m.maintenance_mode,
        "popMaintenanceMode": m.pop_maintenance_mode,
        "failedReads": state.modes.failed_reads.load(std::sync::atomic::Ordering::Relaxed),
    }))
}
