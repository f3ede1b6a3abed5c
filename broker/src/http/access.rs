//! Who may call what (docs/http-api.md, "Access levels"): Queen's three roles and the
//! level each route needs, as Queen's `server/src/auth/auth_middleware.cpp`
//! (`get_route_access_level`) decides it, so a token works here exactly as on Queen.

use axum::http::Method;
use serde_json::Value;

use crate::config::AuthConfig;

/// The level a route needs (Queen's AccessLevel; PUBLIC routes sit outside `/api/v1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Any valid token with a role.
    ReadOnly,
    /// `read-write` or `admin`.
    ReadWrite,
    /// `admin` only.
    Admin,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::ReadOnly => "read-only",
            Level::ReadWrite => "read-write",
            Level::Admin => "admin",
        }
    }
}

/// The level of `method path` (a `/api/v1/...` or `/streams/v1/...` path): Queen's rules in
/// Queen's order.
/// Deleting queues and consumer groups, `/api/v1/system/*` (maintenance) and the stats
/// refresh are admin; GETs of status, analytics, resources, messages, consumer groups,
/// DLQ and traces are read-only; everything else (push, pop, ack, transaction, lease,
/// configure, seek, subscription, redrive, DLQ and message deletes, trace writes) is
/// read-write, as is any route Queen does not list.
pub fn level_of(method: &Method, path: &str) -> Level {
    let under = |prefix: &str| path.starts_with(prefix);
    let delete = method == Method::DELETE;
    if under("/api/v1/system/")
        || under("/internal/")
        || (delete && under("/api/v1/consumer-groups/"))
        || (delete && under("/api/v1/resources/queues/"))
        || path == "/api/v1/stats/refresh"
        // Broker-wide figures cross tenants (docs/observability.md): an admin's.
        || path == "/api/v1/analytics/system-metrics"
        || path == "/api/v1/analytics/worker-metrics"
        || path == "/api/v1/analytics/retention"
        || path == "/api/v1/analytics/postgres-stats"
        || (delete && under("/streams/v1/queries/"))
        || path == "/console/maintenance" && method == Method::POST
        || path == "/console/groups/delete"
    {
        return Level::Admin;
    }
    // The console (http/console): its pages read; its DLQ forms write.
    if under("/console") && method == Method::GET {
        return Level::ReadOnly;
    }
    const READABLE: [&str; 9] = [
        "/api/v1/status",
        "/api/v1/analytics",
        "/api/v1/resources",
        "/api/v1/messages",
        "/api/v1/consumer-groups",
        "/api/v1/dlq",
        "/api/v1/traces",
        // Not in Queen 0.15's table (2.x): a peek or a list reads like /messages.
        "/api/v1/timers",
        // Queen 2.x: the ephemeral queue list and depths (its pop takes, so it writes).
        "/api/v1/ephemeral/queues",
    ];
    // Queen's streams: reading a query's state is read-only though it is a POST.
    if (method == Method::GET && READABLE.iter().any(|p| under(p)))
        || path == "/streams/v1/state/get"
    {
        return Level::ReadOnly;
    }
    Level::ReadWrite
}

/// The roles a token's claims carry: the single-valued claim and the array claim (names
/// from `JWT_ROLES_CLAIM` / `JWT_ROLES_ARRAY_CLAIM`).
pub fn roles_of(claims: &Value, cfg: &AuthConfig) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(r) = claims.get(&cfg.role_claim).and_then(Value::as_str) {
        out.push(r.to_string());
    }
    if let Some(rs) = claims.get(&cfg.roles_array_claim).and_then(Value::as_array) {
        out.extend(rs.iter().filter_map(Value::as_str).map(str::to_string));
    }
    out
}

/// Whether `roles` reach `level` (Queen's `is_read_only` / `is_read_write` / `is_admin`):
/// admin ⊇ read-write ⊇ read-only; a token with none of the three roles reaches nothing.
pub fn allows(roles: &[String], level: Level, cfg: &AuthConfig) -> bool {
    let has = |r: &str| roles.iter().any(|x| x == r);
    let granted = if has(&cfg.role_admin) {
        Level::Admin
    } else if has(&cfg.role_read_write) {
        Level::ReadWrite
    } else if has(&cfg.role_read_only) {
        Level::ReadOnly
    } else {
        return false;
    };
    granted >= level
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queens_route_levels() {
        let cases = [
            ("DELETE", "/api/v1/resources/queues/q", Level::Admin),
            ("DELETE", "/api/v1/consumer-groups/g", Level::Admin),
            ("DELETE", "/api/v1/consumer-groups/g/queues/q", Level::Admin),
            ("POST", "/api/v1/system/maintenance", Level::Admin),
            ("GET", "/api/v1/system/maintenance", Level::Admin),
            ("GET", "/api/v1/status/queues", Level::ReadOnly),
            ("GET", "/api/v1/resources/queues", Level::ReadOnly),
            ("GET", "/api/v1/messages", Level::ReadOnly),
            ("GET", "/api/v1/dlq", Level::ReadOnly),
            ("GET", "/api/v1/traces/names", Level::ReadOnly),
            ("GET", "/api/v1/timers/q/k", Level::ReadOnly),
            ("DELETE", "/api/v1/timers/q/k", Level::ReadWrite),
            ("POST", "/api/v1/timers", Level::ReadWrite),
            ("POST", "/api/v1/kv", Level::ReadWrite),
            ("POST", "/streams/v1/state/get", Level::ReadOnly),
            ("POST", "/streams/v1/cycle", Level::ReadWrite),
            ("POST", "/streams/v1/queries", Level::ReadWrite),
            ("DELETE", "/streams/v1/queries/q", Level::Admin),
            ("POST", "/api/v1/locks", Level::ReadWrite),
            ("GET", "/api/v1/consumer-groups", Level::ReadOnly),
            ("GET", "/api/v1/pop/queue/q", Level::ReadWrite),
            ("POST", "/api/v1/push", Level::ReadWrite),
            ("POST", "/api/v1/ack/batch", Level::ReadWrite),
            (
                "POST",
                "/api/v1/consumer-groups/g/queues/q/seek",
                Level::ReadWrite,
            ),
            ("POST", "/api/v1/dlq/retry", Level::ReadWrite),
            ("DELETE", "/api/v1/messages/p/t", Level::ReadWrite),
            ("DELETE", "/api/v1/dlq/x", Level::ReadWrite),
            ("POST", "/api/v1/configure", Level::ReadWrite),
        ];
        for (m, p, want) in cases {
            assert_eq!(level_of(&m.parse().unwrap(), p), want, "{m} {p}");
        }
    }

    #[test]
    fn roles_nest_and_a_roleless_token_reaches_nothing() {
        let cfg = AuthConfig::hs256("x");
        let ro = roles_of(&json!({"role": "read-only"}), &cfg);
        let rw = roles_of(&json!({"roles": ["other", "read-write"]}), &cfg);
        let admin = roles_of(&json!({"role": "x", "roles": ["admin"]}), &cfg);
        let none = roles_of(&json!({"role": 5, "sub": "u"}), &cfg);
        for (roles, reach) in [(&ro, 1), (&rw, 2), (&admin, 3), (&none, 0)] {
            let got = [Level::ReadOnly, Level::ReadWrite, Level::Admin]
                .iter()
                .filter(|l| allows(roles, **l, &cfg))
                .count();
            assert_eq!(got, reach, "{roles:?}");
        }
    }
}
