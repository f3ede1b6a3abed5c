//! Maintenance mode, as Queen's server offers it (docs/availability.md):
//! `GET/POST /api/v1/system/maintenance` (push maintenance: pushes go to the push spool,
//! the database is left alone), `GET/POST /api/v1/system/maintenance/pop` (pops answer
//! empty), and `GET /api/v1/status/buffers` (the spool). A mode is a row every broker of
//! the database reads (crate::ops::shared_state): switched through one broker, the others
//! follow within `QUEEN_SHARED_STATE_MS`. A switch the database cannot record is a 503
//! and changes nothing, so brokers never disagree for longer than that interval.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::db::system::Mode;
use crate::error::{ApiError, ApiResult};
use crate::http::input::parse_json;
use crate::http::mode_ops::{fresh_modes, switch};
use crate::state::AppState;

#[derive(Deserialize)]
struct Switch {
    enabled: Option<Value>,
}

/// `enabled` (boolean) of a switch body, Queen's 400 otherwise.
fn enabled_of(body: &[u8]) -> ApiResult<bool> {
    let s: Switch = parse_json(body)?;
    match s.enabled {
        Some(Value::Bool(b)) => Ok(b),
        _ => Err(ApiError::field("enabled", "enabled (boolean) is required")),
    }
}

/// `GET /api/v1/system/maintenance`.
pub async fn get_push(State(state): State<AppState>) -> Json<Value> {
    let m = fresh_modes(&state).await;
    let mut v = buffer_fields(&state);
    v["maintenanceMode"] = json!(m.maintenance_mode);
    v["popMaintenanceMode"] = json!(m.pop_maintenance_mode);
    v["bufferStats"] = buffer_stats(&state);
    Json(v)
}

/// `POST /api/v1/system/maintenance` with `{"enabled": bool}`.
pub async fn set_push(State(state): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let enabled = enabled_of(&body)?;
    let m = switch(&state, Mode::Push, enabled).await?;
    let mut v = buffer_fields(&state);
    v["maintenanceMode"] = json!(m.maintenance_mode);
    v["message"] = json!(if enabled {
        "Maintenance mode ENABLED. All PUSHes routing to file buffer."
    } else {
        "Maintenance mode DISABLED. Background processor will drain buffer to DB."
    });
    if enabled && state.spool.is_none() {
        v["warning"] = json!(
            "this broker has no push spool (QUEEN_SPOOL_DIR): its pushes answer 503 while \
             maintenance mode is on"
        );
    }
    Ok(Json(v))
}

/// `GET /api/v1/system/maintenance/pop`.
pub async fn get_pop(State(state): State<AppState>) -> Json<Value> {
    let m = fresh_modes(&state).await;
    Json(json!({
        "popMaintenanceMode": m.pop_maintenance_mode,
        "message": if m.pop_maintenance_mode {
            "Pop maintenance mode is ON. All POP operations return empty arrays."
        } else {
            "Pop maintenance mode is OFF. Normal operation."
        },
    }))
}

/// `POST /api/v1/system/maintenance/pop` with `{"enabled": bool}`.
pub async fn set_pop(State(state): State<AppState>, body: Bytes) -> ApiResult<Json<Value>> {
    let enabled = enabled_of(&body)?;
    let m = switch(&state, Mode::Pop, enabled).await?;
    Ok(Json(json!({
        "popMaintenanceMode": m.pop_maintenance_mode,
        "message": if enabled {
            "Pop maintenance mode ENABLED. All POP operations will return empty arrays."
        } else {
            "Pop maintenance mode DISABLED. Normal operation resumed."
        },
    })))
}

/// `GET /api/v1/status/buffers`: Queen's keys (`pending`, `failed`, `dbHealthy`,
/// `worker`) and the spool's own.
pub async fn buffers(State(state): State<AppState>) -> Json<Value> {
    let Some(spool) = &state.spool else {
        return Json(json!({
            "pending": 0, "failed": 0, "dbHealthy": true, "worker": 0, "enabled": false,
            "note": "no push spool (QUEEN_SPOOL_DIR unset): pushes the database cannot take answer 503",
        }));
    };
    let s = spool.stats();
    let c = &spool.counters;
    let l = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    Json(json!({
        "pending": s.pending_records,
        "failed": l(&c.refused_records),
        "dbHealthy": !spool.db_down(),
        "worker": 0,
        "enabled": true,
        "spoolId": s.id,
        "pendingBytes": s.pending_bytes,
        "maxBytes": s.max_bytes,
        "oldestPendingAgeMs": s.oldest_pending_age_ms,
        "files": s.files,
        "replayedThrough": s.replayed_through,
        "spooled": l(&c.spooled_records),
        "replayed": l(&c.replayed_records),
        "deduplicated": l(&c.deduplicated_records),
        "refused": l(&c.refused_records),
        "tornCuts": l(&c.torn_cuts),
        "damaged": l(&c.damaged),
        "maintenanceMode": state.modes.push_maintenance(),
    }))
}

/// `bufferedMessages` and `bufferHealthy` of Queen's maintenance answers.
fn buffer_fields(state: &AppState) -> Value {
    match &state.spool {
        Some(s) => json!({
            "bufferedMessages": s.stats().pending_records,
            "bufferHealthy": !s.db_down(),
        }),
        None => json!({ "bufferedMessages": 0, "bufferHealthy": true }),
    }
}

/// Queen's `bufferStats`.
fn buffer_stats(state: &AppState) -> Value {
    let (pending, failed, healthy) = match &state.spool {
        Some(s) => (
            s.stats().pending_records,
            s.counters
                .refused_records
                .load(std::sync::atomic::Ordering::Relaxed),
            !s.db_down(),
        ),
        None => (0, 0, true),
    };
    json!({
        "pendingCount": pending,
        "failedCount": failed,
        "dbHealthy": healthy,
    })
}
