//! `QUEEN_BODY_READ_TIMEOUT_MS`: a request body must arrive
//! completely within this time after its header. The body is wrapped in a deadline; when
//! it passes, the body fails, whatever handler was reading it gives up, and the answer
//! is replaced by 408 `{"error":...}` with `Connection: close`, so hyper closes the
//! connection instead of waiting for the rest of a body that trickles in.
//!
//! A total deadline rather than an idle timeout between chunks: a client sending one
//! byte a second never goes idle, yet holds its connection and request forever.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body::{Frame, SizeHint};
use serde_json::json;
use tokio::time::Sleep;

use crate::ops::metrics::Metrics;
use crate::state::AppState;

/// The middleware: only requests that carry a body are wrapped (GETs pay nothing).
pub async fn body_deadline(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let ms = state.config.body_read_timeout_ms;
    if ms == 0 || http_body::Body::is_end_stream(req.body()) {
        return next.run(req).await;
    }
    let fired = Arc::new(AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let body = Body::new(DeadlineBody {
        inner: body,
        sleep: Box::pin(tokio::time::sleep(Duration::from_millis(ms))),
        fired: fired.clone(),
    });
    let resp = next.run(Request::from_parts(parts, body)).await;
    if !fired.load(Ordering::Relaxed) {
        return resp;
    }
    Metrics::add(&state.metrics.body_timeouts, 1);
    let error = format!("request body not received within {ms} ms (QUEEN_BODY_READ_TIMEOUT_MS)");
    let mut resp = (StatusCode::REQUEST_TIMEOUT, Json(json!({ "error": error }))).into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// A body that fails once its deadline passes, remembering that it did.
struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    fired: Arc<AtomicBool>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            this.fired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new("request body read timeout"))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
