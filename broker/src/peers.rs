//! The other brokers, for ephemeral queues (docs/decisions.md, "Ephemeral queues"): each
//! queue lives in one broker's memory, the owner that rendezvous hashing over
//! `QUEEN_EPHEMERAL_PEERS` names (`queen_log::ephemeral::owner`), and a broker that is
//! not the owner passes the request on as it came (its bearer token included: every
//! broker verifies the same tokens) and answers what the owner answered.
//!
//! A passed-on request carries [`FORWARDED`]: its receiver never passes it on again, so
//! two brokers whose peer lists disagree answer 503 instead of bouncing a request
//! between them, and a client that sets the header itself cannot make a non-owner keep
//! a second copy of a queue.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use crate::config::Config;
use crate::error::ApiError;

/// Set on a request one broker passes on to the owner of its queue.
pub const FORWARDED: &str = "x-queen-ephemeral-forwarded";

/// How long a passed-on request (other than a long-poll) may take.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The peer list and the HTTP client that reaches it.
pub struct Peers {
    list: Vec<String>,
    me: Option<usize>,
    client: reqwest::Client,
}

/// Where a request for a queue is served.
pub enum Route<'a> {
    /// By this broker.
    Here,
    /// By the owner at this base URL.
    There(&'a str),
}

impl Peers {
    pub fn new(config: &Config) -> Peers {
        Peers {
            list: config.ephemeral_peers.clone(),
            me: config.ephemeral_self,
            client: reqwest::Client::new(),
        }
    }

    /// Where `queue` of `tenant` is served; `forwarded` when the request came from a
    /// peer, which must then be this broker's own (else 503: the lists disagree).
    pub fn route(&self, tenant: Uuid, queue: &str, forwarded: bool) -> Result<Route<'_>, ApiError> {
        let Some(me) = self.me else {
            return Ok(Route::Here);
        };
        let owner = queen_log::ephemeral::owner(&self.list, tenant, queue);
        match (owner == me, forwarded) {
            (true, _) => Ok(Route::Here),
            (false, false) => Ok(Route::There(&self.list[owner])),
            (false, true) => Err(ApiError::Coded {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "ephemeral_owner_mismatch",
                message: format!(
                    "a peer passed on a request for ephemeral queue {queue:?} that this broker \
                     does not own: QUEEN_EPHEMERAL_PEERS differs between brokers"
                ),
            }),
        }
    }

    /// Every peer but this broker.
    pub fn others(&self) -> Vec<&str> {
        self.list
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != self.me)
            .map(|(_, p)| p.as_str())
            .collect()
    }

    /// Whether `queue` of `tenant` is this broker's (always, without peers).
    pub fn owns(&self, tenant: Uuid, queue: &str) -> bool {
        self.me
            .is_none_or(|me| queen_log::ephemeral::owner(&self.list, tenant, queue) == me)
    }

    /// Sends the request to `peer` as it came, and answers what `peer` answered; a peer
    /// that cannot be reached is a 503 (nothing was done here).
    pub async fn forward(
        &self,
        peer: &str,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response, ApiError> {
        let mut req = self
            .client
            .request(method, format!("{peer}{path_and_query}"))
            .timeout(timeout)
            .header(FORWARDED, "1")
            .body(body);
        for name in [header::AUTHORIZATION, header::CONTENT_TYPE] {
            if let Some(v) = headers.get(&name) {
                req = req.header(name, v);
            }
        }
        let resp = req.send().await.map_err(|e| unreachable(peer, &e))?;
        let status = resp.status();
        let kind = resp.headers().get(header::CONTENT_TYPE).cloned();
        let retry = resp.headers().get(header::RETRY_AFTER).cloned();
        let bytes = resp.bytes().await.map_err(|e| unreachable(peer, &e))?;
        let mut out = (status, bytes).into_response();
        for (name, v) in [(header::CONTENT_TYPE, kind), (header::RETRY_AFTER, retry)] {
            if let Some(v) = v {
                out.headers_mut().insert(name, v);
            }
        }
        Ok(out)
    }

    /// `GET path` on `peer` with the caller's token, read as JSON.
    pub async fn get_json(
        &self,
        peer: &str,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<serde_json::Value, String> {
        let mut req = self
            .client
            .get(format!("{peer}{path}"))
            .timeout(FORWARD_TIMEOUT)
            .header(FORWARDED, HeaderValue::from_static("1"));
        if let Some(v) = headers.get(header::AUTHORIZATION) {
            req = req.header(header::AUTHORIZATION, v);
        }
        let resp = req.send().await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{peer} answered {}", resp.status()));
        }
        resp.json().await.map_err(|e| e.to_string())
    }
}

fn unreachable(peer: &str, e: &reqwest::Error) -> ApiError {
    ApiError::Coded {
        status: StatusCode::SERVICE_UNAVAILABLE,
        code: "ephemeral_owner_unreachable",
        message: format!("the broker that owns this ephemeral queue ({peer}) did not answer: {e}"),
    }
}
