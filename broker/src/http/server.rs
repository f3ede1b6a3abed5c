//! The connection loop: hyper's HTTP/1 server over each accepted connection, with what
//! `axum::serve` cannot be configured to do:
//!
//! - a header read timeout (`QUEEN_HEADER_READ_TIMEOUT_MS`): a connection that does not
//!   deliver a complete request header in time — a slow-loris client sending one byte a
//!   second, or an idle keep-alive connection — is closed by hyper;
//! - a connection cap (`QUEEN_MAX_CONNECTIONS`): one connection over it is answered 503
//!   (`Retry-After: 1`) and closed at once, so slow clients cannot hold every file
//!   descriptor; the body read timeout is the `body_deadline` middleware of `routes`;
//! - a bounded drain on shutdown (`QUEEN_SHUTDOWN_DRAIN_MS`): stop accepting, answer
//!   every parked long-poll 204 (`AppState::begin_shutdown`), let in-flight requests
//!   finish and close idle connections, then cut whatever is still open.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::ops::metrics::Metrics;
use crate::state::AppState;

/// Connections over the cap that are being answered 503 at once; beyond this many the
/// socket is simply closed (a flood must not turn into unbounded answer tasks).
const MAX_REJECTING: usize = 64;
/// How long a rejected connection may take to receive its 503.
const REJECT_LINGER: Duration = Duration::from_secs(1);

const OVER_CAP: &str = "{\"error\":\"too many connections (QUEEN_MAX_CONNECTIONS); retry later\"}";

/// Serves `state` on `listener` until `shutdown` resolves, then drains (bounded). The
/// maintenance loop, the timer sweeper, the ephemeral sweeper, the maintenance-mode poll
/// and the push spool's replay run while it serves.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = crate::http::router(state.clone());
    let cfg = &state.config;
    let stopping = state.clone();
    crate::ops::maintenance::start(cfg, state.maintenance.clone(), async move {
        stopping.stopping().await
    });
    let (waking, stopping) = (state.clone(), state.clone());
    crate::ops::timers::start(
        &cfg.database_url,
        cfg.timer_sweep_ms,
        state.timers.clone(),
        state.gate.clone(),
        move |d| waking.wake_queue(d.tenant, &d.queue),
        async move { stopping.stopping().await },
    );
    let stopping = state.clone();
    crate::ops::shared_state::start(
        state.db.clone(),
        state.modes.clone(),
        Duration::from_millis(cfg.shared_state_ms),
        async move { stopping.stopping().await },
    );
    crate::http::spool_replay::start(state.clone());
    let (sampled, stopping) = (state.clone(), state.clone());
    crate::ops::history::start(
        state.db.clone(),
        cfg.history_sample_ms,
        // The bound address, not QUEEN_LISTEN: port 0 binds a port of the system's choice.
        crate::ops::history::broker_name(
            &listener
                .local_addr()
                .map_or_else(|_| cfg.listen.clone(), |a| a.to_string()),
        ),
        move || {
            let parked = sampled.parked_by_queue();
            (
                crate::ops::history::counters(&sampled.metrics),
                crate::ops::history::gauges(&sampled.db, parked),
            )
        },
        async move { stopping.stopping().await },
    );
    let stopping = state.clone();
    crate::ops::ephemeral::start(state.db.clone(), state.ephemeral.clone(), async move {
        stopping.stopping().await
    });
    let cap = (cfg.max_connections > 0).then(|| Arc::new(Semaphore::new(cfg.max_connections)));
    let rejecting = Arc::new(Semaphore::new(MAX_REJECTING));
    let header_timeout = millis(cfg.header_read_timeout_ms);
    let (close_tx, close_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Finished connections are reaped here, so the set holds only open ones.
        while conns.try_join_next().is_some() {}
        let permit = match &cap {
            None => None,
            Some(cap) => match cap.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    Metrics::add(&state.metrics.connections_rejected, 1);
                    if let Ok(slot) = rejecting.clone().try_acquire_owned() {
                        conns.spawn(reject(tcp, slot));
                    }
                    continue;
                }
            },
        };
        let svc = TowerToHyperService::new(app.clone());
        conns.spawn(connection(
            tcp,
            svc,
            header_timeout,
            close_rx.clone(),
            permit,
        ));
    }
    drop(listener);
    drain(&state, conns, close_tx).await;
    // Every request has been answered or cut; finish any ack or push flush still in
    // flight (a cut handler's push still commits, as a push whose client went away).
    if let Some(f) = &state.fusion {
        f.shutdown().await;
    }
    if let Some(f) = &state.push_fusion {
        f.shutdown().await;
    }
    Ok(())
}

fn millis(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// One HTTP/1 connection until it closes, or is told to shut down gracefully.
async fn connection(
    tcp: TcpStream,
    svc: TowerToHyperService<axum::Router>,
    header_timeout: Option<Duration>,
    mut close: watch::Receiver<bool>,
    _permit: Option<OwnedSemaphorePermit>,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new());
    builder.header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(tcp), svc);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            changed = close.changed(), if !closing => {
                // An error means the server is gone: close as well.
                let _ = changed;
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Over the cap: a complete 503 answer, then close. The client's unread request is
/// drained briefly so the close does not turn into a reset that discards the answer.
async fn reject(mut tcp: TcpStream, _slot: OwnedSemaphorePermit) {
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{OVER_CAP}",
        OVER_CAP.len()
    );
    let _ = tokio::time::timeout(REJECT_LINGER, async {
        tcp.write_all(answer.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 1024];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Accept errors other than a refused/aborted connection usually mean the process ran
/// out of file descriptors: wait a little for some to close instead of spinning.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!("accept error: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Parked long-polls answer 204 now; every connection finishes its request in flight
/// and closes; after `QUEEN_SHUTDOWN_DRAIN_MS` the rest is cut.
async fn drain(state: &AppState, mut conns: JoinSet<()>, close: watch::Sender<bool>) {
    state.begin_shutdown();
    let _ = close.send(true);
    let bound = Duration::from_millis(state.config.shutdown_drain_ms);
    let open = conns.len();
    let all_closed = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(bound, all_closed).await.is_err() {
        tracing::warn!(
            open_at_shutdown = open,
            still_open = conns.len(),
            "shutdown drain exceeded QUEEN_SHUTDOWN_DRAIN_MS; closing the remaining connections"
        );
        conns.shutdown().await;
    }
}
