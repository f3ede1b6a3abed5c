//! Every knob of the broker, read once from the environment at startup.
//!
//! Parsing is strict: a value that does not parse stops the broker with a message naming
//! the variable, because silently falling back to a default would hide a typo in a
//! deployment.

use std::fmt;

use queen_log::encryption;

/// Which token signatures are accepted (Queen's `JWT_ALGORITHM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwtAlgorithm {
    Hs256,
    Rs256,
    EdDsa,
    /// Any of the three the configuration has a key for.
    Auto,
}

/// Bearer-token authentication (docs/decisions.md, "Tokens and roles"), read from Queen's
/// variables (server/ENV_VARIABLES.md, "JWT Authentication Configuration") so that a
/// Queen deployment's environment works unchanged, plus `QUEEN_JWT_SECRET` and
/// `QUEEN_JWT_TENANT_REQUIRED` of this project's tenancy.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    pub algorithm: JwtAlgorithm,
    /// HS256 secret (`JWT_SECRET`, or `QUEEN_JWT_SECRET`).
    pub secret: Option<String>,
    /// `JWT_PUBLIC_KEY`: a PEM public key (RSA for RS256, Ed25519 for EdDSA).
    pub public_key: Option<String>,
    /// `JWT_JWKS_URL`: keys by `kid`, fetched at start, every refresh interval, and when
    /// a token names a key not seen yet.
    pub jwks_url: Option<String>,
    pub jwks_refresh_s: u64,
    pub jwks_timeout_ms: u64,
    /// `JWT_ISSUER` / `JWT_AUDIENCE`: the `iss` / `aud` a token must carry (None = any).
    pub issuer: Option<String>,
    pub audience: Option<String>,
    /// `JWT_CLOCK_SKEW`: seconds of leeway on `exp` and `nbf`.
    pub clock_skew_s: u64,
    /// `JWT_ROLES_CLAIM` (a single role) and `JWT_ROLES_ARRAY_CLAIM` (an array).
    pub role_claim: String,
    pub roles_array_claim: String,
    /// The role values of Queen's three levels (`JWT_ROLE_ADMIN`, ...).
    pub role_admin: String,
    pub role_read_write: String,
    pub role_read_only: String,
    /// A token must carry a `tenant` claim (403 otherwise); when false a token without
    /// one is the default tenant. `QUEEN_JWT_TENANT_REQUIRED`, default: on with
    /// `QUEEN_JWT_SECRET` (multi-tenant), off with Queen's `JWT_ENABLED` alone.
    pub tenant_required: bool,
}

/// Queen's default `JWT_SKIP_PATHS`: the only value accepted (see from_lookup).
const QUEEN_SKIP_PATHS: &str = "/health,/metrics/prometheus,/metrics,/";

impl AuthConfig {
    /// HS256 with `secret` and the `tenant` claim required: what `QUEEN_JWT_SECRET` alone
    /// configures (and the tests use).
    pub fn hs256(secret: &str) -> AuthConfig {
        AuthConfig::from_lookup(&|k: &str| (k == "QUEEN_JWT_SECRET").then(|| secret.to_string()))
            .expect("an HS256 configuration parses")
            .expect("a secret turns authentication on")
    }

    fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Option<AuthConfig>, String> {
        let text = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let ours = text("QUEEN_JWT_SECRET");
        if !flag(get, "JWT_ENABLED", false)? && ours.is_none() {
            return Ok(None);
        }
        let secret = match (ours.clone(), text("JWT_SECRET")) {
            (Some(a), Some(b)) if a != b => {
                return Err(
                    "QUEEN_JWT_SECRET and JWT_SECRET are both set, to different values".into(),
                )
            }
            (a, b) => a.or(b),
        };
        let algorithm = match text("JWT_ALGORITHM").as_deref().unwrap_or("HS256") {
            a if a.eq_ignore_ascii_case("HS256") => JwtAlgorithm::Hs256,
            a if a.eq_ignore_ascii_case("RS256") => JwtAlgorithm::Rs256,
            a if a.eq_ignore_ascii_case("EdDSA") => JwtAlgorithm::EdDsa,
            a if a.eq_ignore_ascii_case("auto") => JwtAlgorithm::Auto,
            other => {
                return Err(format!(
                    "JWT_ALGORITHM={other} is not one of HS256, RS256, EdDSA, auto"
                ))
            }
        };
        if let Some(p) = text("JWT_SKIP_PATHS").filter(|p| p != QUEEN_SKIP_PATHS) {
            return Err(format!(
                "JWT_SKIP_PATHS={p} is not supported: /health and /metrics never need a token \
                 and every /api/v1 route does (unset it, or set Queen's default {QUEEN_SKIP_PATHS})"
            ));
        }
        let cfg = AuthConfig {
            algorithm,
            secret,
            public_key: text("JWT_PUBLIC_KEY").map(|k| k.replace("\\n", "\n")),
            jwks_url: text("JWT_JWKS_URL"),
            jwks_refresh_s: num(get, "JWT_JWKS_REFRESH_INTERVAL", 3600)?.max(1),
            jwks_timeout_ms: num(get, "JWT_JWKS_TIMEOUT_MS", 5000)?.max(1),
            issuer: text("JWT_ISSUER"),
            audience: text("JWT_AUDIENCE"),
            clock_skew_s: num(get, "JWT_CLOCK_SKEW", 30)?,
            role_claim: text("JWT_ROLES_CLAIM").unwrap_or("role".into()),
            roles_array_claim: text("JWT_ROLES_ARRAY_CLAIM").unwrap_or("roles".into()),
            role_admin: text("JWT_ROLE_ADMIN").unwrap_or("admin".into()),
            role_read_write: text("JWT_ROLE_READ_WRITE").unwrap_or("read-write".into()),
            role_read_only: text("JWT_ROLE_READ_ONLY").unwrap_or("read-only".into()),
            tenant_required: flag(get, "QUEEN_JWT_TENANT_REQUIRED", ours.is_some())?,
        };
        cfg.check()?;
        Ok(Some(cfg))
    }

    /// Every algorithm accepted needs its key: refused at startup, not at the first token.
    fn check(&self) -> Result<(), String> {
        let asym = self.public_key.is_some() || self.jwks_url.is_some();
        match self.algorithm {
            JwtAlgorithm::Hs256 if self.secret.is_none() => {
                Err("JWT_ALGORITHM=HS256 needs JWT_SECRET (or QUEEN_JWT_SECRET)".into())
            }
            JwtAlgorithm::Rs256 | JwtAlgorithm::EdDsa if !asym => Err(format!(
                "JWT_ALGORITHM={:?} needs JWT_PUBLIC_KEY or JWT_JWKS_URL",
                self.algorithm
            )),
            JwtAlgorithm::Auto if !asym && self.secret.is_none() => {
                Err("JWT_ALGORITHM=auto needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL".into())
            }
            _ => Ok(()),
        }
    }
}

/// The payload key's bytes; never printed (Debug and the startup line say only whether
/// there is one).
#[derive(Clone)]
pub struct EncryptionKey(pub [u8; encryption::KEY_LEN]);

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncryptionKey(****)")
    }
}

/// The effective configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// `QUEEN_DATABASE_URL`: where the extension lives.
    pub database_url: String,
    /// `QUEEN_LISTEN`: socket address to bind.
    pub listen: String,
    /// `QUEEN_POOL_SIZE`: maximum pooled database connections.
    pub pool_size: usize,
    /// `QUEEN_BODY_LIMIT_MB`: request body cap; push bodies of several MiB are normal.
    pub body_limit_mb: usize,
    /// `QUEEN_STATEMENT_TIMEOUT_MS`: per-statement cap set on every connection (0 = none).
    pub statement_timeout_ms: u64,
    /// `QUEEN_ACK_REGISTRY`: enable the process-local ack registry (fast path).
    pub ack_registry: bool,
    /// `QUEEN_ACK_REGISTRY_MB`: memory cap of the registry before LRU eviction.
    pub ack_registry_mb: usize,
    /// `QUEEN_ACK_FUSION`: batch fast-path acks into `log_ack_multi_v1` flushes.
    pub ack_fusion: bool,
    /// `QUEEN_ACK_FUSION_SHARDS`: number of fusion shards.
    pub ack_fusion_shards: usize,
    /// `QUEEN_ACK_FUSION_MAX_INFLIGHT`: fusion flushes running at once across all shards
    /// (default: the CPU count; see engine/fusion.rs for why).
    pub ack_fusion_max_inflight: usize,
    /// `QUEEN_ACK_FUSION_HOLD_MS`: the fusion liveness backstop tick
    /// (docs/broker-contract.md §4; see engine/fusion.rs), not a latency floor.
    pub ack_fusion_hold_ms: u64,
    /// `QUEEN_PUSH_FUSION`: concurrent push rounds fused into one `log_push_multi_v1`
    /// transaction (crate::engine::push_fusion). On by default: with many connections pushing
    /// one message each it cut PostgreSQL's CPU per message by a third or more
    /// (docs/decisions.md, "Broker"; docs/benchmarks.md, "Versus Queen's server").
    pub push_fusion: bool,
    /// `QUEEN_POOL_TIMEOUT_MS`: how long a request waits for a free pooled connection
    /// before it is answered 503 with `Retry-After`.
    pub pool_timeout_ms: u64,
    /// Bearer-token authentication: `QUEEN_JWT_SECRET` (ours: HS256, a `tenant` claim
    /// required) or Queen's `JWT_ENABLED` with its `JWT_*` variables ([`AuthConfig`]).
    /// None = off: every request runs as the default tenant (http/auth.rs).
    pub auth: Option<AuthConfig>,
    /// `QUEEN_ENCRYPTION_KEY`: 64 hex digits (Queen's variable and format); payloads of
    /// queues with `encryptionEnabled` are sealed with it (crate::engine::sealing). A key
    /// that does not parse stops the broker: Queen would run on without encryption.
    pub encryption_key: Option<EncryptionKey>,
    /// `QUEEN_MAX_BATCH`: largest accepted pop `batch` (and `partitions`); above → 400.
    pub max_batch: i32,
    /// `QUEEN_MAX_PUSH_ITEMS`: most items accepted by one push (or one transaction's
    /// push operations together); above → 400.
    pub max_push_items: usize,
    /// `QUEEN_DEDUP_CACHE_MB`: memory for the push dedup watermark cache (engine/dedup.rs);
    /// 0 = off (every push probes its whole dedup window).
    pub dedup_cache_mb: usize,
    /// `QUEEN_LOOKUP_CACHE_MS`: how long a push remembers what its lookup found of a
    /// partition (engine/lookups.rs); 0 = off (every push looks its partitions up).
    pub lookup_cache_ms: u64,
    /// `QUEEN_METRICS_QUEUE_SERIES`: most label sets of each per-queue and per-(queue,
    /// group) gauge at `/metrics`; the rest are added up under `queue="__other__"`.
    /// 0 = no queue gauges (the statistics are never read for /metrics).
    pub metrics_queue_series: usize,
    /// `QUEEN_MAX_LEASE_SECONDS`: longest lease a request may ask for (pop
    /// `leaseSeconds`, lease extend `seconds`, configure `leaseTime`); above → 400.
    pub max_lease_seconds: i32,
    /// `QUEEN_HEADER_READ_TIMEOUT_MS`: a connection must deliver a request's complete
    /// header within this time of the broker starting to wait for it, else it is closed
    /// (also bounds idle keep-alive connections); 0 = no limit.
    pub header_read_timeout_ms: u64,
    /// `QUEEN_BODY_READ_TIMEOUT_MS`: a request body must arrive completely within this
    /// time after its header, else 408 and the connection is closed; 0 = no limit.
    pub body_read_timeout_ms: u64,
    /// `QUEEN_MAX_CONNECTIONS`: open client connections at most; one more is answered
    /// 503 and closed at once; 0 = no cap.
    pub max_connections: usize,
    /// `QUEEN_SHUTDOWN_DRAIN_MS`: on SIGTERM/ctrl-c, longest wait for in-flight requests
    /// (parked long-polls answer 204 at once) before the remaining connections are cut.
    pub shutdown_drain_ms: u64,
    /// `QUEEN_MAINTENANCE_INTERVAL_MS`: how often the broker runs `CALL
    /// queen.run_maintenance()` on a connection of its own; 0 = never (pg_cron or an
    /// operator runs it instead).
    pub maintenance_interval_ms: u64,
    /// `QUEEN_MAINTENANCE_BUDGET_MS`: one run's time budget (`p_time_budget_ms`).
    pub maintenance_budget_ms: u64,
    /// `QUEEN_MAINTENANCE_MAX_ROWS`: rows per step (`p_max_rows`).
    pub maintenance_max_rows: u32,
    /// `QUEEN_TIMER_SWEEP_MS`: the longest the timer sweeper sleeps between two sweeps
    /// (it wakes earlier for the next due timer, and at once for one scheduled through
    /// this broker); 0 = no sweeper in this broker (docs/operations.md, "Timers").
    pub timer_sweep_ms: u64,
    /// `QUEEN_EPHEMERAL_MAX_BYTES`: the payload bytes all ephemeral queues of this broker
    /// may hold together; past it a push answers 503 (docs/operations.md, "Ephemeral
    /// queues").
    pub ephemeral_max_bytes: u64,
    /// `QUEEN_EPHEMERAL_MAX_QUEUES`: how many ephemeral queues this broker holds at most
    /// (each push or pop of a new name makes one); past it 429.
    pub ephemeral_max_queues: usize,
    /// `QUEEN_EPHEMERAL_PEERS`: every broker's base URL (comma-separated), the same list
    /// on each, when several brokers share a database: each ephemeral queue lives on one
    /// of them (rendezvous hashing) and the others forward to it. Empty: this broker
    /// owns every queue.
    pub ephemeral_peers: Vec<String>,
    /// `QUEEN_EPHEMERAL_SELF`: this broker's own URL in `ephemeral_peers`.
    pub ephemeral_self: Option<usize>,
    /// `QUEEN_CORS_ORIGINS`: which browser origins may call the broker.
    pub cors: Cors,
    /// `QUEEN_SPOOL_DIR`: the push spool's directory (docs/availability.md); unset = no
    /// spool: a push the database cannot take is answered 503.
    pub spool_dir: Option<std::path::PathBuf>,
    /// `QUEEN_SPOOL_MAX_BYTES`: what the spool may hold before a push is answered 503.
    pub spool_max_bytes: u64,
    /// `QUEEN_SPOOL_REPLAY_BATCH`: records per replay transaction.
    pub spool_replay_batch: usize,
    /// `QUEEN_SHARED_STATE_MS`: how often the broker reads the maintenance modes every
    /// broker of the database shares (`queen.system_state_v1`).
    pub shared_state_ms: u64,
    /// `QUEEN_HISTORY_SAMPLE_MS`: how often the broker adds its counters to the sampled
    /// history of the status and analytics routes (crate::ops::history); 0 = never.
    pub history_sample_ms: u64,
    /// `QUEEN_WEBAPP_ROOT` (or Queen's `WEBAPP_ROOT`): a built web app the broker serves
    /// at `/` (crate::http::static_files); unset = none. Must be a directory.
    pub webapp_root: Option<std::path::PathBuf>,
}

/// Cross-origin access (docs/http-api.md, "CORS"): `*` (Queen's default, any origin),
/// a comma-separated list of origins (each answered by name, with `Vary: Origin`), or
/// `off` (no CORS headers, no preflight answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cors {
    Any,
    Only(Vec<String>),
    Off,
}

impl Cors {
    fn parse(v: Option<String>) -> Result<Cors, String> {
        let v = v.unwrap_or_default();
        match v.trim() {
            "" | "*" => Ok(Cors::Any),
            "off" => Ok(Cors::Off),
            list => {
                let origins: Vec<String> = list
                    .split(',')
                    .map(|o| o.trim().to_string())
                    .filter(|o| !o.is_empty())
                    .collect();
                match origins.iter().find(|o| !is_origin(o)) {
                    Some(bad) => Err(format!(
                        "QUEEN_CORS_ORIGINS: {bad:?} is not an origin (scheme://host[:port], no \
                         path); give *, off, or a comma-separated list of origins"
                    )),
                    None => Ok(Cors::Only(origins)),
                }
            }
        }
    }

    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if any.
    pub fn allow(&self, origin: Option<&str>) -> Option<&str> {
        match self {
            Cors::Any => Some("*"),
            Cors::Only(list) => origin
                .and_then(|o| list.iter().find(|l| *l == o))
                .map(String::as_str),
            Cors::Off => None,
        }
    }
}

/// `http(s)://host[:port]`, nothing after it.
fn is_origin(o: &str) -> bool {
    let rest = o
        .strip_prefix("https://")
        .or_else(|| o.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.contains('/'))
}

/// The in-flight cap when `QUEEN_ACK_FUSION_MAX_INFLIGHT` is not set: the CPU count.
pub fn default_max_inflight() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads through any lookup function, so tests need not touch the process environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let text = |k: &str, d: &str| get(k).filter(|v| !v.is_empty()).unwrap_or(d.into());
        Ok(Config {
            database_url: text(
                "QUEEN_DATABASE_URL",
                "postgres://postgres@127.0.0.1:5499/queen",
            ),
            listen: text("QUEEN_LISTEN", "0.0.0.0:6632"),
            pool_size: num(&get, "QUEEN_POOL_SIZE", 16)?.max(1),
            body_limit_mb: num(&get, "QUEEN_BODY_LIMIT_MB", 64)?.max(1),
            statement_timeout_ms: num(&get, "QUEEN_STATEMENT_TIMEOUT_MS", 30_000)?,
            ack_registry: flag(&get, "QUEEN_ACK_REGISTRY", true)?,
            ack_registry_mb: num(&get, "QUEEN_ACK_REGISTRY_MB", 64)?,
            ack_fusion: flag(&get, "QUEEN_ACK_FUSION", true)?,
            ack_fusion_shards: num(&get, "QUEEN_ACK_FUSION_SHARDS", 8)?.max(1),
            ack_fusion_max_inflight: num(
                &get,
                "QUEEN_ACK_FUSION_MAX_INFLIGHT",
                default_max_inflight(),
            )?
            .max(1),
            ack_fusion_hold_ms: num(&get, "QUEEN_ACK_FUSION_HOLD_MS", 3)?,
            push_fusion: flag(&get, "QUEEN_PUSH_FUSION", true)?,
            pool_timeout_ms: num(&get, "QUEEN_POOL_TIMEOUT_MS", 5_000)?.max(1),
            auth: AuthConfig::from_lookup(&get)?,
            encryption_key: get(encryption::KEY_VAR)
                .filter(|v| !v.trim().is_empty())
                .map(|v| encryption::parse_key(&v).map(EncryptionKey))
                .transpose()
                .map_err(|e| e.to_string())?,
            max_batch: num::<u32>(&get, "QUEEN_MAX_BATCH", 10_000)?.clamp(1, i32::MAX as u32)
                as i32,
            max_push_items: num(&get, "QUEEN_MAX_PUSH_ITEMS", 10_000)?.max(1),
            dedup_cache_mb: num(&get, "QUEEN_DEDUP_CACHE_MB", 128)?,
            lookup_cache_ms: num(&get, "QUEEN_LOOKUP_CACHE_MS", 1000)?,
            metrics_queue_series: num(&get, "QUEEN_METRICS_QUEUE_SERIES", 200)?,
            max_lease_seconds: num::<u32>(&get, "QUEEN_MAX_LEASE_SECONDS", 86_400)?
                .clamp(1, i32::MAX as u32) as i32,
            header_read_timeout_ms: num(&get, "QUEEN_HEADER_READ_TIMEOUT_MS", 30_000)?,
            body_read_timeout_ms: num(&get, "QUEEN_BODY_READ_TIMEOUT_MS", 60_000)?,
            max_connections: num(&get, "QUEEN_MAX_CONNECTIONS", 1024)?,
            shutdown_drain_ms: num(&get, "QUEEN_SHUTDOWN_DRAIN_MS", 10_000)?,
            maintenance_interval_ms: num(&get, "QUEEN_MAINTENANCE_INTERVAL_MS", 10_000)?,
            maintenance_budget_ms: num(&get, "QUEEN_MAINTENANCE_BUDGET_MS", 5_000)?
                .clamp(1, i32::MAX as u64),
            maintenance_max_rows: num(&get, "QUEEN_MAINTENANCE_MAX_ROWS", 1_000)?
                .clamp(1, i32::MAX as u32),
            timer_sweep_ms: num(&get, "QUEEN_TIMER_SWEEP_MS", 1_000)?,
            ephemeral_max_bytes: num(&get, "QUEEN_EPHEMERAL_MAX_BYTES", 256 * 1024 * 1024)?,
            ephemeral_max_queues: num(&get, "QUEEN_EPHEMERAL_MAX_QUEUES", 10_000)?.max(1),
            ephemeral_peers: peers(&get)?,
            ephemeral_self: own_place(&get)?,
            cors: Cors::parse(get("QUEEN_CORS_ORIGINS"))?,
            spool_dir: get("QUEEN_SPOOL_DIR")
                .filter(|v| !v.trim().is_empty())
                .map(std::path::PathBuf::from),
            spool_max_bytes: num(&get, "QUEEN_SPOOL_MAX_BYTES", 1 << 30)?.max(1 << 20),
            spool_replay_batch: num(&get, "QUEEN_SPOOL_REPLAY_BATCH", 1_000)?.clamp(1, 10_000),
            shared_state_ms: num(&get, "QUEEN_SHARED_STATE_MS", 1_000)?.max(50),
            history_sample_ms: match num(&get, "QUEEN_HISTORY_SAMPLE_MS", 10_000)? {
                0 => 0,
                ms => ms.max(100),
            },
            webapp_root: webapp_root(&get)?,
        })
    }

    /// A configuration for a given database with every other knob at its default.
    pub fn for_database(url: &str) -> Self {
        let mut c = Self::from_lookup(|_| None).expect("defaults parse");
        c.database_url = url.to_string();
        c
    }

    /// Whether tenancy (JWT authentication) is on.
    pub fn tenancy(&self) -> bool {
        self.auth.is_some()
    }

    /// Request body cap in bytes.
    pub fn body_limit_bytes(&self) -> usize {
        self.body_limit_mb.saturating_mul(1024 * 1024)
    }
}

impl fmt::Display for Config {
    /// The startup log line: every effective value, the database password masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "database_url={} listen={} pool_size={} body_limit_mb={} statement_timeout_ms={} \
             ack_registry={} ack_registry_mb={} ack_fusion={} ack_fusion_shards={} \
             ack_fusion_max_inflight={} ack_fusion_hold_ms={} push_fusion={} pool_timeout_ms={} tenancy={} max_batch={} \
             max_push_items={} dedup_cache_mb={} lookup_cache_ms={} metrics_queue_series={} max_lease_seconds={} \
             header_read_timeout_ms={} body_read_timeout_ms={} max_connections={} shutdown_drain_ms={} \
             maintenance_interval_ms={} maintenance_budget_ms={} maintenance_max_rows={} \
             timer_sweep_ms={} ephemeral_max_bytes={} ephemeral_max_queues={} ephemeral_peers={:?} \
             encryption={} cors={:?} spool_dir={:?} spool_max_bytes={} spool_replay_batch={} \
             shared_state_ms={} history_sample_ms={} webapp_root={:?}",
            mask_password(&self.database_url),
            self.listen,
            self.pool_size,
            self.body_limit_mb,
            self.statement_timeout_ms,
            self.ack_registry,
            self.ack_registry_mb,
            self.ack_fusion,
            self.ack_fusion_shards,
            self.ack_fusion_max_inflight,
            self.ack_fusion_hold_ms,
            self.push_fusion,
            self.pool_timeout_ms,
            // Never the secret itself.
            if self.tenancy() { "on" } else { "off" },
            self.max_batch,
            self.max_push_items,
            self.dedup_cache_mb,
            self.lookup_cache_ms,
            self.metrics_queue_series,
            self.max_lease_seconds,
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.max_connections,
            self.shutdown_drain_ms,
            self.maintenance_interval_ms,
            self.maintenance_budget_ms,
            self.maintenance_max_rows,
            self.timer_sweep_ms,
            self.ephemeral_max_bytes,
            self.ephemeral_max_queues,
            self.ephemeral_peers,
            if self.encryption_key.is_some() { "key set" } else { "no key" },
            self.cors,
            self.spool_dir,
            self.spool_max_bytes,
            self.spool_replay_batch,
            self.shared_state_ms,
            self.history_sample_ms,
            self.webapp_root
        )
    }
}

/// `QUEEN_WEBAPP_ROOT`, else Queen's `WEBAPP_ROOT`: an existing directory, or an error
/// naming the variable (a dashboard that silently is not served would look like a bug).
fn webapp_root(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<std::path::PathBuf>, String> {
    let Some((var, v)) = ["QUEEN_WEBAPP_ROOT", "WEBAPP_ROOT"]
        .iter()
        .find_map(|k| get(k).filter(|v| !v.trim().is_empty()).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    let p = std::path::PathBuf::from(v.trim());
    if !p.is_dir() {
        return Err(format!("{var}: {} is not a directory", p.display()));
    }
    Ok(Some(p))
}

fn peer_list(v: &str) -> Vec<String> {
    v.split(',')
        .map(|p| p.trim().trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn peers(get: &impl Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
    let list = peer_list(&get("QUEEN_EPHEMERAL_PEERS").unwrap_or_default());
    for p in &list {
        if !(p.starts_with("http://") || p.starts_with("https://")) {
            return Err(format!(
                "QUEEN_EPHEMERAL_PEERS: {p:?} is not an http(s) URL"
            ));
        }
    }
    Ok(list)
}

/// Where `QUEEN_EPHEMERAL_SELF` sits in `QUEEN_EPHEMERAL_PEERS`; a peer list without
/// this broker in it is refused (it would forward every request away, itself included).
fn own_place(get: &impl Fn(&str) -> Option<String>) -> Result<Option<usize>, String> {
    let list = peers(get)?;
    if list.is_empty() {
        return Ok(None);
    }
    let me = get("QUEEN_EPHEMERAL_SELF").unwrap_or_default();
    let me = me.trim().trim_end_matches('/');
    list.iter().position(|p| p == me).map(Some).ok_or_else(|| {
        format!("QUEEN_EPHEMERAL_SELF {me:?} must be one of QUEEN_EPHEMERAL_PEERS {list:?}")
    })
}

fn num<T: std::str::FromStr>(
    get: &impl Fn(&str) -> Option<String>,
    key: &str,
    default: T,
) -> Result<T, String> {
    match get(key).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{key}: expected a non-negative integer, got {v:?}")),
    }
}

fn flag(get: &impl Fn(&str) -> Option<String>, key: &str, default: bool) -> Result<bool, String> {
    match get(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v.is_empty() => Ok(default),
        Some(v) if ["1", "true", "on", "yes"].contains(&v.as_str()) => Ok(true),
        Some(v) if ["0", "false", "off", "no"].contains(&v.as_str()) => Ok(false),
        Some(v) => Err(format!("{key}: expected 0/1/true/false, got {v:?}")),
    }
}

/// Hides the password of a URL (`scheme://user:secret@host`) or of a key=value
/// connection string (`password=secret`), so the config can be logged.
pub fn mask_password(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let at = rest.find('@');
        let colon = rest.find(':');
        if let (Some(at), Some(colon)) = (at, colon) {
            if colon < at {
                let head = &url[..scheme_end + 3 + colon + 1];
                return format!("{head}****{}", &rest[at..]);
            }
        }
        return url.to_string();
    }
    url.split_whitespace()
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=****"),
            _ => kv.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Config, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn ephemeral_peers_name_this_broker_or_are_refused() {
        let c = with(&[
            ("QUEEN_EPHEMERAL_PEERS", "http://a:6632/, http://b:6632"),
            ("QUEEN_EPHEMERAL_SELF", "http://b:6632/"),
        ])
        .unwrap();
        assert_eq!(c.ephemeral_peers, ["http://a:6632", "http://b:6632"]);
        assert_eq!(c.ephemeral_self, Some(1));
        assert_eq!(
            with(&[]).unwrap().ephemeral_self,
            None,
            "no peers: every queue is here"
        );
        let e = with(&[("QUEEN_EPHEMERAL_PEERS", "http://a,http://b")]).unwrap_err();
        assert!(e.contains("QUEEN_EPHEMERAL_SELF"), "{e}");
        let e = with(&[
            ("QUEEN_EPHEMERAL_PEERS", "a:6632"),
            ("QUEEN_EPHEMERAL_SELF", "a:6632"),
        ])
        .unwrap_err();
        assert!(e.contains("not an http(s) URL"), "{e}");
    }

    #[test]
    fn cors_origins_are_any_a_list_or_off() {
        assert_eq!(with(&[]).unwrap().cors, Cors::Any, "Queen's default");
        let c = with(&[(
            "QUEEN_CORS_ORIGINS",
            "https://ops.example, http://localhost:5173",
        )])
        .unwrap()
        .cors;
        assert_eq!(
            c.allow(Some("https://ops.example")),
            Some("https://ops.example")
        );
        assert_eq!(c.allow(Some("https://evil.example")), None);
        assert_eq!(c.allow(None), None);
        assert_eq!(Cors::Any.allow(None), Some("*"));
        assert_eq!(
            with(&[("QUEEN_CORS_ORIGINS", "off")])
                .unwrap()
                .cors
                .allow(Some("x")),
            None
        );
        for bad in ["ops.example", "https://ops.example/path", "https://"] {
            let e = with(&[("QUEEN_CORS_ORIGINS", bad)]).unwrap_err();
            assert!(e.contains("QUEEN_CORS_ORIGINS"), "{bad}: {e}");
        }
    }

    #[test]
    fn defaults_and_masking() {
        let c = Config::from_lookup(|_| None).unwrap();
        assert_eq!(c.listen, "0.0.0.0:6632");
        assert_eq!(c.body_limit_mb, 64);
        assert!(c.ack_registry);
        assert_eq!(c.pool_timeout_ms, 5_000);
        assert_eq!(c.max_batch, 10_000);
        assert_eq!(c.max_push_items, 10_000);
        assert_eq!(c.ack_fusion_shards, 8, "docs/broker-contract.md §4 default");
        assert_eq!(c.max_lease_seconds, 86_400);
        assert_eq!(
            (c.header_read_timeout_ms, c.body_read_timeout_ms),
            (30_000, 60_000)
        );
        assert_eq!((c.max_connections, c.shutdown_drain_ms), (1024, 10_000));
        assert_eq!(
            c.ack_fusion_max_inflight,
            std::thread::available_parallelism().unwrap().get()
        );
        let capped =
            Config::from_lookup(|k| (k == "QUEEN_ACK_FUSION_MAX_INFLIGHT").then(|| "0".into()));
        assert_eq!(
            capped.unwrap().ack_fusion_max_inflight,
            1,
            "at least one flush"
        );
        assert!(!c.tenancy());
        assert!(c.push_fusion, "push fusion is on by default (measured)");
        let off = Config::from_lookup(|k| (k == "QUEEN_PUSH_FUSION").then(|| "0".into()));
        assert!(!off.unwrap().push_fusion);
        let c =
            Config::from_lookup(|k| (k == "QUEEN_JWT_SECRET").then(|| "s3cret".into())).unwrap();
        assert!(c.tenancy());
        assert!(!c.to_string().contains("s3cret"));
        let key = "00".repeat(31) + "ab";
        let c =
            Config::from_lookup(|k| (k == "QUEEN_ENCRYPTION_KEY").then(|| key.clone())).unwrap();
        assert_eq!(c.encryption_key.as_ref().unwrap().0[31], 0xab);
        assert!(
            !format!("{c:?} {c}").contains(&key),
            "the key is never printed"
        );
        let e = Config::from_lookup(|k| (k == "QUEEN_ENCRYPTION_KEY").then(|| "abc".into()));
        assert!(
            e.unwrap_err().contains("QUEEN_ENCRYPTION_KEY"),
            "a bad key stops the broker"
        );
        assert_eq!(
            mask_password("postgres://u:secret@h:5/db"),
            "postgres://u:****@h:5/db"
        );
        assert_eq!(mask_password("postgres://u@h:5/db"), "postgres://u@h:5/db");
        assert_eq!(
            mask_password("host=h password=x user=u"),
            "host=h password=**** user=u"
        );
    }

    #[test]
    fn bad_values_are_errors() {
        let e = Config::from_lookup(|k| (k == "QUEEN_POOL_SIZE").then(|| "many".into()));
        assert!(e.unwrap_err().contains("QUEEN_POOL_SIZE"));
        let e = Config::from_lookup(|k| (k == "QUEEN_ACK_FUSION").then(|| "maybe".into()));
        assert!(e.unwrap_err().contains("QUEEN_ACK_FUSION"));
        let e = Config::from_lookup(|k| (k == "QUEEN_MAX_BATCH").then(|| "-5".into()));
        assert!(e.unwrap_err().contains("QUEEN_MAX_BATCH"));
        for bad in ["-1", "1s", "100000000000000000000000000000"] {
            let e = Config::from_lookup(|k| (k == "QUEEN_LOOKUP_CACHE_MS").then(|| bad.into()));
            assert!(e.unwrap_err().contains("QUEEN_LOOKUP_CACHE_MS"), "{bad}");
        }
    }
}
