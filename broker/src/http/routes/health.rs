//! `GET /health`, `GET /metrics` and `GET /metrics/prometheus`.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::db::EXTENSION_VERSION;
use crate::ops::exposition;
use crate::state::AppState;

/// 200 when a round trip to the database works, else 503 with the reason. The round trip
/// reads the extension's installed version, so the answer also says whether it is the
/// SQL this broker speaks (a database not yet `ALTER EXTENSION queen_ack UPDATE`d answers
/// its requests 503 until it is).
pub async fn health(State(state): State<AppState>) -> impl IntoResponse {
    let probe = async {
        let version = state.db.conn().await?.extension_version().await?;
        Ok::<_, crate::error::ApiError>(version)
    };
    let (status, mut v) = match probe.await {
        Ok(installed) => (StatusCode::OK, healthy(installed.as_deref())),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({
                "status": "unhealthy",
                "database": "disconnected",
                "error": e.to_string(),
                "brokerVersion": BROKER_VERSION,
                "expectedExtensionVersion": EXTENSION_VERSION,
            }),
        ),
    };
    availability(&state, &mut v);
    (status, Json(v))
}

/// The maintenance modes in force and the push spool (docs/availability.md): while the
/// database is down, `pushes` says whether pushes are still accepted (`spooling`).
fn availability(state: &AppState, v: &mut Value) {
    let m = state.modes.get();
    v["maintenanceMode"] = json!(m.maintenance_mode);
    v["popMaintenanceMode"] = json!(m.pop_maintenance_mode);
    v["spool"] = match &state.spool {
        None => json!({ "enabled": false }),
        Some(s) => {
            let st = s.stats();
            json!({
                "enabled": true,
                "pendingRecords": st.pending_records,
                "pendingBytes": st.pending_bytes,
                "oldestPendingAgeMs": st.oldest_pending_age_ms,
                "spooling": s.db_down() || m.maintenance_mode,
            })
        }
    };
}

/// The healthy answer for the extension version the database has installed (None: the
/// extension is not created in this database).
fn healthy(installed: Option<&str>) -> Value {
    let matches = installed == Some(EXTENSION_VERSION);
    let mut v = json!({
        "status": "healthy",
        "database": "connected",
        "service": "queen-broker",
        "version": BROKER_VERSION,
        "brokerVersion": BROKER_VERSION,
        "extensionVersion": installed,
        "expectedExtensionVersion": EXTENSION_VERSION,
        "sqlVersionMatches": matches,
    });
    if !matches {
        v["warning"] = json!(format!(
            "this broker speaks the queen_ack {EXTENSION_VERSION} SQL but the database has {}; \
             run ALTER EXTENSION queen_ack UPDATE (or install the matching extension)",
            installed.unwrap_or("no queen_ack extension")
        ));
    }
    v
}

/// The broker crate's own version.
const BROKER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `GET /metrics`: Queen's JSON to a client that asks for JSON — an `Accept` naming
/// `application/json`, or a `Content-Type: application/json` on the GET, which Queen's
/// SDKs send and a Prometheus scraper never does — and the Prometheus text to anything
/// else (docs/http-api.md, "Metrics").
pub async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if wants_json(&headers) {
        let usage = crate::ops::process::usage();
        return Json(exposition::queen_json(&state.metric_sources(), usage)).into_response();
    }
    prometheus(State(state)).await.into_response()
}

/// `GET /metrics/prometheus` (Queen's path for the text): always the Prometheus text.
pub async fn prometheus(State(state): State<AppState>) -> impl IntoResponse {
    let mut text = exposition::render(&state.metric_sources());
    let max = state.config.metrics_queue_series;
    text.push_str(&exposition::queue_gauges(&state.db, &state.metrics, max).await);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

fn wants_json(headers: &HeaderMap) -> bool {
    let has = |name: header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| v.to_ascii_lowercase().contains("application/json"))
    };
    has(header::ACCEPT) || has(header::CONTENT_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_for_clients_that_ask_for_it() {
        let with = |pairs: &[(header::HeaderName, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(k.clone(), v.parse().unwrap());
            }
            wants_json(&h)
        };
        assert!(with(&[(header::CONTENT_TYPE, "application/json")]));
        assert!(with(&[(
            header::ACCEPT,
            "text/html, application/json;q=0.9"
        )]));
        assert!(!with(&[]));
        assert!(!with(&[(
            header::ACCEPT,
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )]));
        assert!(!with(&[(header::ACCEPT, "*/*")]));
    }

    #[test]
    fn health_says_when_the_sql_versions_differ() {
        let same = healthy(Some(EXTENSION_VERSION));
        assert_eq!(same["sqlVersionMatches"], true);
        assert_eq!(same["extensionVersion"], EXTENSION_VERSION);
        assert!(same.get("warning").is_none());
        for installed in [Some("0.1.0"), None] {
            let v = healthy(installed);
            assert_eq!(v["sqlVersionMatches"], false, "{v}");
            assert_eq!(v["status"], "healthy", "the database is reachable: {v}");
            assert_eq!(v["expectedExtensionVersion"], EXTENSION_VERSION);
            assert!(
                v["warning"].as_str().unwrap().contains("ALTER EXTENSION"),
                "{v}"
            );
        }
        assert_eq!(healthy(Some("0.1.0"))["extensionVersion"], "0.1.0");
        assert!(healthy(None)["extensionVersion"].is_null());
    }
}
