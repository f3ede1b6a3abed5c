//! The operator console at `/console` (docs/console.md): server-rendered HTML pages over
//! the same reads and operations as the API, every asset embedded in the binary, no
//! build step. Views: queues, one queue, consumer groups, dead letters, throughput,
//! lifecycle, maintenance. Actions (HTML forms, answered with a redirect back): redrive
//! and delete a dead letter, delete a group on a queue, switch a maintenance mode.
//!
//! Authentication is the API's (http/auth.rs): with tokens on, a page needs the token a
//! client would send, as `Authorization: Bearer` or as the `queen_token` cookie that
//! `/console/login` sets (HttpOnly, SameSite=Strict, path `/console`), and shows that
//! token's tenant only; the levels are the API's (views read-only, DLQ actions
//! read-write, groups and maintenance admin: http/access.rs). A form post from another
//! origin is refused (403), whether or not authentication is on.

mod chart;
mod pages;

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use chrono::{Duration, Utc};
use maud::Markup;
use serde::Deserialize;
use uuid::Uuid;

use crate::db::history::Range;
use crate::db::system::Mode;
use crate::error::ApiError;
use crate::http::auth::{self, Tenant};
use crate::http::dlq_ops;
use crate::ops::queue_stats::load;
use crate::ops::queue_views::queue_figures;
use crate::state::AppState;

const CSS: &str = include_str!("console.css");
const JS: &str = include_str!("console.js");
/// The cookie `/console/login` sets.
const COOKIE: &str = "queen_token";
/// Dead letters per page.
const DLQ_PAGE: i32 = 50;
/// Queues per page of the queue list.
const QUEUE_PAGE: usize = 100;

/// The console's routes, authenticated as the API is.
pub fn routes(state: AppState) -> Router<AppState> {
    let pages = Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/queues") }),
        )
        .route("/console/queues", get(queues))
        .route("/console/queues/{queue}", get(queue))
        .route("/console/groups", get(groups))
        .route("/console/groups/delete", post(delete_group))
        .route("/console/dlq", get(dlq))
        .route("/console/dlq/redrive", post(dlq_redrive))
        .route("/console/dlq/delete", post(dlq_delete))
        .route("/console/throughput", get(throughput))
        .route("/console/lifecycle", get(lifecycle))
        .route(
            "/console/maintenance",
            get(maintenance).post(set_maintenance),
        )
        .route_layer(middleware::from_fn_with_state(state, authenticate));
    Router::new()
        .merge(pages)
        .route("/console/login", get(login_form).post(login))
        .route(
            "/console/assets/console.css",
            get(|| async { asset("text/css", CSS) }),
        )
        .route(
            "/console/assets/console.js",
            get(|| async { asset("text/javascript", JS) }),
        )
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// An HTML answer with `status`.
fn page(status: StatusCode, m: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        m.into_string(),
    )
        .into_response()
}

/// A page that could not be served: its status and why, answered as an HTML page.
struct Failed(StatusCode, String);

impl IntoResponse for Failed {
    fn into_response(self) -> Response {
        page(self.0, pages::error_page(self.0.as_u16(), &self.1))
    }
}

type PageResult = Result<Response, Failed>;

/// The API's error as a page with its status (nothing was changed).
fn or_page<T>(r: Result<T, impl Into<ApiError>>) -> Result<T, Failed> {
    r.map_err(|e| {
        let status = e.into().into_response().status();
        Failed(
            status,
            status.canonical_reason().unwrap_or("error").to_string(),
        )
    })
}

/// The cookie's token as the request's `Authorization` when it has none; then the API's
/// authentication. A page asked for without a valid token goes to the sign-in form; a
/// form posted from another origin is refused.
async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !same_origin(req.headers()) {
        return foreign_form();
    }
    if !req.headers().contains_key(header::AUTHORIZATION) {
        if let Some(token) = cookie(&req, COOKIE) {
            if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
                req.headers_mut().insert(header::AUTHORIZATION, v);
            }
        }
    }
    let get = req.method() == Method::GET;
    let resp = auth::authenticate(State(state), req, next).await;
    match resp.status() {
        StatusCode::UNAUTHORIZED if get => Redirect::to("/console/login").into_response(),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            let s = resp.status();
            page(
                s,
                pages::error_page(s.as_u16(), "this token may not do that"),
            )
        }
        _ => resp,
    }
}

/// The answer to a form posted from another origin: 403, nothing run.
fn foreign_form() -> Response {
    page(
        StatusCode::FORBIDDEN,
        pages::error_page(403, "a form posted from another origin"),
    )
}

/// A POST whose `Origin` (or, without one, `Referer`) names this host; a request with
/// neither is a client's own (curl), not a browser's cross-site form. Every console form
/// takes it, the sign-in form included (docs/console.md): a page of another site that
/// signs a browser in would sign it into the attacker's tenant.
fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let from = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|h| h.to_str().ok());
    match (from, host) {
        (None, _) => true,
        (Some(f), Some(h)) => f
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next() == Some(h))
            .unwrap_or(false),
        (Some(_), None) => false,
    }
}

fn cookie<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// The tenant to show in the header: only with tenancy on.
fn shown(state: &AppState, t: Tenant) -> Option<Uuid> {
    state.config.tenancy().then_some(t.0)
}

async fn login_form() -> Response {
    page(StatusCode::OK, pages::login(None))
}

#[derive(Deserialize)]
struct LoginIn {
    token: String,
}

/// Checks the token as the API would, then keeps it in the console's cookie.
/// A form from another origin is refused first, as every console form is.
async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(f): Form<LoginIn>,
) -> Response {
    if !same_origin(&headers) {
        return foreign_form();
    }
    let token = f.token.trim();
    let ok = match (&state.config.auth, &state.keys) {
        (Some(cfg), Some(keys)) => auth::verify(cfg, keys, token).await.is_ok(),
        _ => true,
    };
    if !ok || token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return page(
            StatusCode::UNAUTHORIZED,
            pages::login(Some("That token is not valid here.")),
        );
    }
    let c = format!("{COOKIE}={token}; Path=/console; HttpOnly; SameSite=Strict");
    let mut r = Redirect::to("/console/queues").into_response();
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// What an action did, carried to the page it redirects to.
#[derive(Deserialize, Default)]
struct Notice {
    notice: Option<String>,
    queue: Option<String>,
    offset: Option<i64>,
    range: Option<String>,
    page: Option<usize>,
}

async fn queues(State(state): State<AppState>, t: Tenant, Query(n): Query<Notice>) -> PageResult {
    let all = or_page(load(&state.db, Some(t.0), None).await)?;
    let pages_n = all.len().div_ceil(QUEUE_PAGE).max(1);
    let at = n.page.unwrap_or(1).clamp(1, pages_n);
    let qs = &all[(at - 1) * QUEUE_PAGE..(at * QUEUE_PAGE).min(all.len())];
    let now = Utc::now();
    let hour = Range {
        from: now - Duration::hours(1),
        to: now,
        bucket_minutes: 1,
    };
    // The sparklines of this page's queues only: one index range each.
    let ids: Vec<Uuid> = qs.iter().map(|q| q.meta.id).collect();
    let conn = or_page(state.db.conn().await)?;
    let series = or_page(conn.history_pushed(hour, &ids).await)?;
    let mut pushed: HashMap<Uuid, Vec<f64>> = HashMap::new();
    for (id, n) in &series {
        pushed.entry(*id).or_default().push(*n as f64);
    }
    let lines: Vec<pages::QueueLine> = qs
        .iter()
        .map(|q| {
            let f = queue_figures(q);
            let ages = q.cursors().filter_map(|(_, c)| c.oldest_unconsumed_age_s);
            pages::QueueLine {
                name: q.meta.name.clone(),
                namespace: q.meta.namespace.clone(),
                partitions: q.partitions.len(),
                messages: f.total,
                pending: f.pending,
                processing: f.processing,
                dead_letter: f.dead_letter,
                lag: q.cursors().map(|(_, c)| c.lag).sum(),
                oldest_age_s: ages.fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a)))),
                pushed_per_minute: pushed.remove(&q.meta.id).unwrap_or_default(),
            }
        })
        .collect();
    let body = pages::queues(&lines, all.len(), at, pages_n);
    Ok(page(
        StatusCode::OK,
        pages::layout("Queues", "/console/queues", shown(&state, t), body),
    ))
}

/// Every (queue, group) of `qs`, in queue then group order.
fn group_lines(qs: &[crate::ops::queue_stats::QueueStats]) -> Vec<pages::GroupLine> {
    let mut out = Vec::new();
    for q in qs {
        let mut per: BTreeMap<&str, pages::GroupLine> = BTreeMap::new();
        for (_, c) in q.cursors() {
            let g = per.entry(&c.group).or_insert_with(|| pages::GroupLine {
                queue: q.meta.name.clone(),
                group: c.group.clone(),
                partitions: 0,
                lag: 0,
                oldest_age_s: None,
                leased: 0,
            });
            g.partitions += 1;
            g.lag += c.lag;
            g.leased += usize::from(c.leased);
            if let Some(a) = c.oldest_unconsumed_age_s {
                g.oldest_age_s = Some(g.oldest_age_s.map_or(a, |m| m.max(a)));
            }
        }
        out.extend(per.into_values());
    }
    out
}

async fn queue(State(state): State<AppState>, t: Tenant, Path(name): Path<String>) -> PageResult {
    let qs = or_page(load(&state.db, Some(t.0), Some(&name)).await)?;
    let Some(q) = qs.first() else {
        return Err(Failed(StatusCode::NOT_FOUND, "no such queue".into()));
    };
    let parts: Vec<pages::PartitionLine> = q
        .partitions
        .iter()
        .map(|p| pages::PartitionLine {
            name: p.name.clone(),
            messages: p.stats.figures().total,
            log_start: p.stats.log_start,
            last_offset: p.stats.last_offset,
            cursors: p
                .stats
                .cursors
                .iter()
                .map(|c| (c.group.clone(), c.committed, c.lag, c.leased))
                .collect(),
        })
        .collect();
    let mut options = q.meta.options.clone();
    if !options.is_object() {
        options = serde_json::json!({});
    }
    options["leaseTime"] = serde_json::json!(q.meta.lease_time);
    options["retryLimit"] = serde_json::json!(q.meta.retry_limit);
    options["deadLetterQueue"] = serde_json::json!(q.meta.dead_letter_queue);
    options["delayedProcessing"] = serde_json::json!(q.meta.delayed_processing);
    options["retentionSeconds"] = serde_json::json!(q.meta.retention_seconds);
    // Every enforced option shows, 0 (off) where configure never named it
    // (docs/decisions.md, "Queue options").
    for k in [
        "priority",
        "windowBuffer",
        "maxSize",
        "maxWaitTimeSeconds",
        "retryDelay",
        "ttl",
    ] {
        if options.get(k).is_none_or(serde_json::Value::is_null) {
            options[k] = serde_json::json!(0);
        }
    }
    let body = pages::queue(&name, &options, &parts, &group_lines(&qs));
    Ok(page(
        StatusCode::OK,
        pages::layout(&name, "/console/queues", shown(&state, t), body),
    ))
}

async fn groups(State(state): State<AppState>, t: Tenant, Query(n): Query<Notice>) -> PageResult {
    let qs = or_page(load(&state.db, Some(t.0), None).await)?;
    let body =
        maud::html! { (pages::notice(n.notice.as_deref())) (pages::groups(&group_lines(&qs))) };
    Ok(page(
        StatusCode::OK,
        pages::layout("Consumer groups", "/console/groups", shown(&state, t), body),
    ))
}

#[derive(Deserialize)]
struct GroupIn {
    group: String,
    queue: String,
}

async fn delete_group(
    State(state): State<AppState>,
    t: Tenant,
    Form(f): Form<GroupIn>,
) -> PageResult {
    let conn = or_page(state.db.conn().await)?;
    let d = or_page(
        conn.delete_consumer_group(&f.group, Some(&f.queue), true, t.0)
            .await,
    )?;
    let text = format!("Deleted group {} on {}: {:?}", f.group, f.queue, d);
    Ok(back("/console/groups", &text, None))
}

/// A 303 to `to` with a notice (and the queue filter kept).
fn back(to: &str, notice: &str, queue: Option<&str>) -> Response {
    let q = queue
        .map(|q| format!("&queue={}", pages::urlencode(q)))
        .unwrap_or_default();
    Redirect::to(&format!("{to}?notice={}{q}", pages::urlencode(notice))).into_response()
}

async fn dlq(State(state): State<AppState>, t: Tenant, Query(n): Query<Notice>) -> PageResult {
    let queue = n.queue.as_deref().filter(|q| !q.is_empty());
    let offset = n.offset.unwrap_or(0).clamp(0, i32::MAX as i64);
    let conn = or_page(state.db.conn().await)?;
    let mut p = or_page(
        conn.dlq_list(queue, None, DLQ_PAGE, offset as i32, t.0)
            .await,
    )?;
    // Sealed payloads are opened for the reader, as the API's listing does.
    for m in &mut p.messages {
        if let Some(d) = m.data.take() {
            m.data = Some(state.sealer.open_raw(d));
        }
    }
    let body = maud::html! {
        (pages::notice(n.notice.as_deref()))
        (pages::dlq(queue, p.total, &p.messages, offset))
    };
    Ok(page(
        StatusCode::OK,
        pages::layout("Dead letters", "/console/dlq", shown(&state, t), body),
    ))
}

#[derive(Deserialize)]
struct DlqIn {
    id: String,
    queue: Option<String>,
}

fn dlq_id(f: &DlqIn) -> Result<Uuid, Failed> {
    Uuid::parse_str(&f.id)
        .map_err(|_| Failed(StatusCode::BAD_REQUEST, "not a dead-letter id".into()))
}

async fn dlq_redrive(State(state): State<AppState>, t: Tenant, Form(f): Form<DlqIn>) -> PageResult {
    let id = dlq_id(&f)?;
    let r = or_page(dlq_ops::redrive(&state, t.0, &[id]).await)?;
    let text = match r.results.first() {
        Some(m) => format!("Redrive of {id}: {:?}", m.result).to_lowercase(),
        None => format!("Redrive of {id}: nothing to do"),
    };
    Ok(back("/console/dlq", &text, f.queue.as_deref()))
}

async fn dlq_delete(State(state): State<AppState>, t: Tenant, Form(f): Form<DlqIn>) -> PageResult {
    let id = dlq_id(&f)?;
    let d = or_page(dlq_ops::delete(&state, t.0, &[id]).await)?;
    let text = format!("Deleted {} dead letter(s)", d.deleted);
    Ok(back("/console/dlq", &text, f.queue.as_deref()))
}

async fn throughput(
    State(state): State<AppState>,
    t: Tenant,
    Query(n): Query<Notice>,
) -> PageResult {
    let day = n.range.as_deref() == Some("24h");
    let now = Utc::now();
    let r = Range {
        from: now
            - if day {
                Duration::hours(24)
            } else {
                Duration::hours(1)
            },
        to: now,
        bucket_minutes: if day { 15 } else { 1 },
    };
    let conn = or_page(state.db.conn().await)?;
    // Under tenancy the brokers' rows count every tenant: the tenant's queues instead.
    let (labels, pushed, acked, per) = if state.config.tenancy() {
        let rows = or_page(conn.history_queues_series(r, Some(t.0), None).await)?;
        let mut by: BTreeMap<chrono::DateTime<Utc>, (f64, f64)> = BTreeMap::new();
        for b in &rows {
            let e = by.entry(b.bucket).or_default();
            e.0 += b.pushed as f64;
            e.1 += b.consumed as f64;
        }
        series(by, r.bucket_minutes, Vec::new())
    } else {
        let rows = or_page(conn.history_brokers(r).await)?;
        let mut by: BTreeMap<chrono::DateTime<Utc>, (f64, f64)> = BTreeMap::new();
        let mut per: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for b in &rows {
            let e = by.entry(b.bucket).or_default();
            e.0 += b.push_messages as f64;
            e.1 += b.ack_messages as f64;
            let p = per.entry(b.broker.clone()).or_default();
            p.0 += b.push_messages;
            p.1 += b.ack_messages;
        }
        series(
            by,
            r.bucket_minutes,
            per.into_iter().map(|(b, (p, a))| (b, p, a)).collect(),
        )
    };
    let body = pages::throughput(
        if day { "24 hours" } else { "hour" },
        &labels,
        pushed,
        acked,
        &per,
    );
    Ok(page(
        StatusCode::OK,
        pages::layout("Throughput", "/console/throughput", shown(&state, t), body),
    ))
}

type Series = (Vec<String>, Vec<f64>, Vec<f64>, Vec<(String, i64, i64)>);

/// Buckets into per-minute rates and their labels.
fn series(
    by: BTreeMap<chrono::DateTime<Utc>, (f64, f64)>,
    bucket_minutes: i32,
    per: Vec<(String, i64, i64)>,
) -> Series {
    let m = f64::from(bucket_minutes);
    let labels = by.keys().map(|t| t.format("%H:%M").to_string()).collect();
    let pushed = by.values().map(|v| v.0 / m).collect();
    let acked = by.values().map(|v| v.1 / m).collect();
    (labels, pushed, acked, per)
}

async fn lifecycle(State(state): State<AppState>, t: Tenant) -> PageResult {
    use std::sync::atomic::Ordering;
    let s = &state.maintenance;
    let last = s.last.lock().ok().and_then(|l| *l).map(|l| {
        let at = chrono::DateTime::<Utc>::from_timestamp(l.unix_seconds as i64, 0)
            .map(crate::util::iso_ms)
            .unwrap_or_default();
        (at, l.duration_seconds, l.more)
    });
    let now = Utc::now();
    let day = Range {
        from: now - Duration::hours(24),
        to: now,
        bucket_minutes: 60,
    };
    let conn = or_page(state.db.conn().await)?;
    // The lifecycle's reports are database-wide: an admin's under tenancy (access.rs).
    let removed = if state.config.tenancy() {
        Vec::new()
    } else {
        or_page(conn.history_lifecycle_series(day).await)?
            .iter()
            .map(|b| {
                (
                    b.bucket.format("%Y-%m-%d %H:00").to_string(),
                    b.runs,
                    b.messages,
                    b.expired_messages,
                    b.evicted,
                )
            })
            .collect()
    };
    let qs = or_page(load(&state.db, Some(t.0), None).await)?;
    let storage = qs
        .iter()
        .map(|q| {
            (
                q.meta.name.clone(),
                q.partitions.len(),
                queue_figures(q).total,
                q.meta.retention_seconds,
            )
        })
        .collect();
    let v = pages::LifecycleView {
        runs: s.runs.load(Ordering::Relaxed),
        failed: s.failed.load(Ordering::Relaxed),
        last,
        removed,
        storage,
    };
    Ok(page(
        StatusCode::OK,
        pages::layout(
            "Lifecycle",
            "/console/lifecycle",
            shown(&state, t),
            pages::lifecycle(&v),
        ),
    ))
}

async fn maintenance(
    State(state): State<AppState>,
    t: Tenant,
    Query(n): Query<Notice>,
) -> Response {
    let m = crate::http::mode_ops::fresh_modes(&state).await;
    let v = pages::MaintenanceView {
        push: m.maintenance_mode,
        pop: m.pop_maintenance_mode,
        spool: state.spool.as_ref().map(|s| {
            let st = s.stats();
            (st.pending_records, st.pending_bytes, st.max_bytes)
        }),
    };
    let body = maud::html! { (pages::notice(n.notice.as_deref())) (pages::maintenance(&v)) };
    page(
        StatusCode::OK,
        pages::layout(
            "Maintenance",
            "/console/maintenance",
            shown(&state, t),
            body,
        ),
    )
}

#[derive(Deserialize)]
struct ModeIn {
    mode: String,
    enabled: String,
}

async fn set_maintenance(State(state): State<AppState>, Form(f): Form<ModeIn>) -> PageResult {
    let mode = match f.mode.as_str() {
        "push" => Mode::Push,
        "pop" => Mode::Pop,
        _ => {
            return Err(Failed(
                StatusCode::BAD_REQUEST,
                "mode is push or pop".into(),
            ))
        }
    };
    let enabled = match f.enabled.as_str() {
        "true" => true,
        "false" => false,
        _ => {
            return Err(Failed(
                StatusCode::BAD_REQUEST,
                "enabled is true or false".into(),
            ))
        }
    };
    or_page(crate::http::mode_ops::switch(&state, mode, enabled).await)?;
    let text = format!(
        "{} maintenance {}",
        f.mode,
        if enabled { "on" } else { "off" }
    );
    Ok(back("/console/maintenance", &text, None))
}
