//! Queen 2.x's versioned key/value (docs/decisions.md, "Key/value"; the rules in
//! queen_log::kv): `queen.kv_apply_v1(ops, tenant)` runs a call's ops in order in one
//! transaction, and the transaction wire runs its `kv` rider the same way. Each write
//! locks its key's row (an expired one included: its version carries on), decides from
//! the live row, and writes what the decision says; a `required` op that did not apply
//! raises `QKV precondition`, so nothing of the call commits. Every statement names
//! (tenant, namespace, key): one shard on Citus, where `queen.kv` is distributed by key.

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::kv::{
    check_writable, decide, get_result, next_version, read_ops, shown_value_version, write_result,
    Decision, Expiry, KvOp, Precondition, RawOp, Row, Shown, Write, HIGH_WATER_NS,
    QKV_PRECONDITION,
};
use queen_log::wire::OpResults;
use serde_json::{json, Value};

use crate::db::{
    bad_param, clock_plus, col, default_tenant, iso_ms, jsonb, micros, q, raise_detail, required,
    OrRaise,
};

/// The row under a key, whether live, and its version (live or not).
pub(crate) struct Found {
    pub shown: Shown,
    pub live: bool,
}

pub(crate) fn shown(key: &str, r: &pgrx::spi::SpiHeapTupleData<'_>) -> Shown {
    let text: String = col(r, 1, "kv.value");
    let expires: Option<TimestampWithTimeZone> = r.get(3).or_raise();
    Shown {
        key: key.to_string(),
        value: serde_json::from_str(&text).unwrap_or(Value::Null),
        version: col(r, 2, "kv.version"),
        expires_at: expires.map(iso_ms),
        updated_at: iso_ms(col(r, 4, "kv.updated_at")),
    }
}

/// The row under (tenant, ns, key); `now` decides liveness.
pub(crate) fn find(
    client: &SpiClient<'_>,
    tenant: Uuid,
    ns: &str,
    key: &str,
    now: TimestampWithTimeZone,
) -> Option<Found> {
    select(client, tenant, ns, key, now, false)
}

/// What a write of (tenant, ns, key) starts with: the key's lock, held to the commit;
/// the clock, read under that lock (so it is later than every write of the key that
/// committed before: their writers held the lock until their commit); and the row,
/// locked. Every writer of a key takes the lock before it looks, so an absent key has
/// one inserter at a time (an INSERT never meets a concurrent one: on Citus an insert
/// that loses ON CONFLICT breaks SPI's row count). The broker and psql reach kv through
/// the coordinator, so the lock is cluster-wide.
pub(crate) fn find_locked(
    client: &SpiClient<'_>,
    tenant: Uuid,
    ns: &str,
    key: &str,
) -> (Option<Found>, TimestampWithTimeZone) {
    q(
        client,
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2 || chr(31) || $3, 7))",
        &[tenant.to_string().as_str().into(), ns.into(), key.into()],
    )
    .or_raise();
    let now = clock_plus(client, 0.0).0;
    (select(client, tenant, ns, key, now, true), now)
}

fn select(
    client: &SpiClient<'_>,
    tenant: Uuid,
    ns: &str,
    key: &str,
    now: TimestampWithTimeZone,
    lock: bool,
) -> Option<Found> {
    let sql: &'static str = if lock {
        "SELECT value::text, version, expires_at, updated_at, (expires_at IS NULL OR expires_at > $4)
           FROM queen.kv WHERE tenant_id = $1 AND ns = $2 AND key = $3 FOR UPDATE"
    } else {
        "SELECT value::text, version, expires_at, updated_at, (expires_at IS NULL OR expires_at > $4)
           FROM queen.kv WHERE tenant_id = $1 AND ns = $2 AND key = $3"
    };
    q(
        client,
        sql,
        &[tenant.into(), ns.into(), key.into(), now.into()],
    )
    .or_raise()
    .next()
    .map(|r| Found {
        shown: shown(key, &r),
        live: col(&r, 5, "live"),
    })
}

/// The highest version a removed row of (tenant, ns) had (kv_expire_step_v1 folds each
/// row it removes into it): a row written where none is starts above it, so a key's
/// versions only grow even across its removal (docs/decisions.md, "Locks": fencing
/// tokens). Read, not locked: the step that removes a row and raises the mark commits
/// both at once, and a writer that waited for that row reads the mark after it.
fn high_water(client: &SpiClient<'_>, tenant: Uuid, ns: &str) -> Option<i64> {
    q(
        client,
        "SELECT version FROM queen.kv WHERE tenant_id = $1 AND ns = $2 AND key = $3",
        &[tenant.into(), HIGH_WATER_NS.into(), ns.into()],
    )
    .or_raise()
    .next()
    .map(|r| col(&r, 1, "kv.version"))
}

/// Raises (tenant, ns)'s high-water mark to `version` (never lowers it).
fn raise_high_water(client: &SpiClient<'_>, tenant: Uuid, ns: &str, version: i64) {
    let (found, now) = find_locked(client, tenant, HIGH_WATER_NS, ns);
    let sql: &'static str = match &found {
        Some(f) if f.shown.version >= version => return,
        Some(_) => {
            "UPDATE queen.kv SET version = $4, updated_at = $5
              WHERE tenant_id = $1 AND ns = $2 AND key = $3"
        }
        None => {
            "INSERT INTO queen.kv (tenant_id, ns, key, value, version, expires_at, updated_at)
             SELECT $1, $2, $3, 'null'::jsonb, $4, NULL, $5"
        }
    };
    q(
        client,
        sql,
        &[
            tenant.into(),
            HIGH_WATER_NS.into(),
            ns.into(),
            version.into(),
            now.into(),
        ],
    )
    .or_raise();
}

/// Removes a key's value for every reader, keeping its row (and so its version) until
/// maintenance removes it and folds the version into the namespace's high-water mark:
/// the value is dropped and the row expires now. The next write of the key continues
/// from its version (a released lock's next token is higher).
pub(crate) fn tombstone(
    client: &SpiClient<'_>,
    tenant: Uuid,
    ns: &str,
    key: &str,
    now: TimestampWithTimeZone,
) {
    q(
        client,
        "UPDATE queen.kv SET value = 'null'::jsonb, expires_at = $4, updated_at = $4
          WHERE tenant_id = $1 AND ns = $2 AND key = $3",
        &[tenant.into(), ns.into(), key.into(), now.into()],
    )
    .or_raise();
}

fn live(f: Option<Found>) -> Option<Shown> {
    f.filter(|f| f.live).map(|f| f.shown)
}

fn expiry_at(client: &SpiClient<'_>, e: Expiry) -> Option<TimestampWithTimeZone> {
    match e {
        Expiry::Forever => None,
        Expiry::Seconds(s) => Some(clock_plus(client, s as f64).1),
    }
}

/// Carries out an upsert: UPDATE of the row there, else INSERT (the key's advisory lock,
/// taken by [`find_locked`] with `now` read under it, makes this insert the only one).
#[allow(clippy::too_many_arguments)]
pub(crate) fn upsert(
    client: &SpiClient<'_>,
    tenant: Uuid,
    ns: &str,
    key: &str,
    old: Option<&Found>,
    value: &Value,
    expiry: Option<Expiry>,
    now: TimestampWithTimeZone,
) -> Option<Shown> {
    // Under the key's lock (find_locked): one past the row's version, or past the
    // namespace's high-water mark when there is no row; never below the clock.
    let previous = match old {
        Some(f) => Some(f.shown.version),
        None => high_water(client, tenant, ns),
    };
    let version = next_version(previous, micros(now));
    let set_expiry = expiry.is_some();
    let at = expiry.and_then(|e| expiry_at(client, e));
    let text = value.to_string();
    let args = [
        tenant.into(),
        ns.into(),
        key.into(),
        text.as_str().into(),
        version.into(),
        set_expiry.into(),
        at.into(),
        now.into(),
    ];
    let sql: &'static str = if old.is_some() {
        "UPDATE queen.kv SET value = $4::jsonb, version = $5,
                expires_at = CASE WHEN $6 THEN $7 ELSE expires_at END, updated_at = $8
          WHERE tenant_id = $1 AND ns = $2 AND key = $3
         RETURNING value::text, version, expires_at, updated_at"
    } else {
        "INSERT INTO queen.kv (tenant_id, ns, key, value, version, expires_at, updated_at)
         SELECT $1, $2, $3, $4::jsonb, $5, CASE WHEN $6 THEN $7 END, $8
         RETURNING value::text, version, expires_at, updated_at"
    };
    q(client, sql, &args)
        .or_raise()
        .next()
        .map(|r| shown(key, &r))
}

fn key_of(op: &KvOp) -> (&str, &str) {
    match op {
        KvOp::Put { ns, key, .. }
        | KvOp::Delete { ns, key, .. }
        | KvOp::Incr { ns, key, .. }
        | KvOp::Check { ns, key, .. }
        | KvOp::Get { ns, key } => (ns, key),
        KvOp::GetMany { ns, .. } | KvOp::GetPrefix { ns, .. } => (ns, ""),
    }
}

/// A write op (put, delete, incr, check): its decision and answer.
/// The write's verdict, the row its answer shows, and that answer.
fn write(
    client: &SpiClient<'_>,
    tenant: Uuid,
    i: usize,
    op: &KvOp,
) -> (Decision, Option<Shown>, Value) {
    let (ns, key) = key_of(op);
    // The key's lock is held from the look to the commit, the clock read under it.
    let (found, now) = find_locked(client, tenant, ns, key);
    let current = found.as_ref().filter(|f| f.live).map(|f| Row {
        value: f.shown.value.clone(),
        version: f.shown.version,
    });
    let d = decide(op, current.as_ref());
    // What the answer shows: the row after the write, or the one that refused it (a
    // delete shows the version it removed).
    let after = match &d.write {
        Write::Nothing => live(found),
        Write::Delete => {
            tombstone(client, tenant, ns, key, now);
            found.map(|f| Shown {
                value: Value::Null,
                ..f.shown
            })
        }
        Write::Upsert { value, expiry } => {
            let written = upsert(client, tenant, ns, key, found.as_ref(), value, *expiry, now);
            Some(written.unwrap_or_else(|| {
                crate::db::raise_internal(format!("kv: the write of {key:?} changed no row"))
            }))
        }
    };
    let result = write_result(i, key, &d, after.as_ref());
    (d, after, result)
}

fn read(client: &SpiClient<'_>, tenant: Uuid, i: usize, op: &KvOp) -> Value {
    let now = clock_plus(client, 0.0).0;
    match op {
        KvOp::Get { ns, key } => {
            get_result(i, key, live(find(client, tenant, ns, key, now)).as_ref())
        }
        KvOp::GetMany { ns, keys } => {
            let mut rows = Vec::new();
            let mut missing = Vec::new();
            for k in keys {
                match live(find(client, tenant, ns, k, now)) {
                    Some(s) => rows.push(s.row(false)),
                    None => missing.push(k.clone()),
                }
            }
            json!({"index": i, "rows": rows, "missing": missing, "truncated": false})
        }
        KvOp::GetPrefix {
            ns,
            prefix,
            after,
            limit,
            keys_only,
        } => prefix_page(
            client,
            tenant,
            i,
            (ns, prefix, after.as_deref()),
            *limit,
            *keys_only,
            now,
        ),
        _ => unreachable!("writes go through write()"),
    }
}

/// One page of a prefix, by key (byte order); one row past the page says whether more
/// follow.
fn prefix_page(
    client: &SpiClient<'_>,
    tenant: Uuid,
    i: usize,
    (ns, prefix, after): (&str, &str, Option<&str>),
    limit: i64,
    keys_only: bool,
    now: TimestampWithTimeZone,
) -> Value {
    let rows: Vec<Shown> = q(
        client,
        "SELECT value::text, version, expires_at, updated_at, key FROM queen.kv
          WHERE tenant_id = $1 AND ns = $2 AND starts_with(key, $3)
            AND ($4::text IS NULL OR key > $4) AND (expires_at IS NULL OR expires_at > $5)
          ORDER BY key LIMIT $6",
        &[
            tenant.into(),
            ns.into(),
            prefix.into(),
            after.into(),
            now.into(),
            (limit + 1).into(),
        ],
    )
    .or_raise()
    .map(|r| {
        let key: String = col(&r, 5, "kv.key");
        shown(&key, &r)
    })
    .collect();
    let truncated = rows.len() as i64 > limit;
    let page: Vec<Value> = rows
        .iter()
        .take(limit as usize)
        .map(|s| s.row(keys_only))
        .collect();
    let next = truncated.then(|| rows[limit as usize - 1].key.clone());
    json!({"index": i, "rows": page, "truncated": truncated, "nextAfter": next})
}

/// Runs ops in order; a `required` op that did not apply raises (nothing commits), its
/// index shifted by `index_base` (the rider's place in the transaction's results).
pub fn apply(client: &SpiClient<'_>, tenant: Uuid, ops: &[KvOp]) -> Vec<Value> {
    // The lock namespace is written by the lock ops only (queen_log::kv::check_writable),
    // whichever way the ops came (kv_apply_v1, or a transaction wire's kv rider).
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = check_writable(op) {
            bad_param(format!("QKV {}: op {i}: {}", e.reason, e.detail));
        }
    }
    let mut out = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let result = match op {
            KvOp::Get { .. } | KvOp::GetMany { .. } | KvOp::GetPrefix { .. } => {
                read(client, tenant, i, op)
            }
            _ => {
                let (d, after, result) = write(client, tenant, i, op);
                if d.required && !d.applied {
                    let (value, version) = shown_value_version(&d, after.as_ref());
                    let p = Precondition {
                        failed_index: i,
                        kv_reason: d.reason.unwrap_or("precondition").to_string(),
                        version,
                        value,
                    };
                    raise_detail(
                        PgSqlErrorCode::ERRCODE_RAISE_EXCEPTION,
                        format!("{QKV_PRECONDITION}: op {i} did not apply ({})", p.kv_reason),
                        serde_json::to_string(&p).unwrap_or_default(),
                    );
                }
                result
            }
        };
        out.push(result);
    }
    out
}

/// `queen.kv_apply_v1(ops, tenant)`: the SDK's `POST /api/v1/kv` from SQL. `ops` is the
/// JSON array of ops as the SDK writes them; the answer `{results: [...]}` is
/// index-aligned. A refused op is 22023 naming its index and reason; a `required` op
/// that did not apply raises `QKV precondition` (P0001, its DETAIL the JSON verdict).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn kv_apply_v1(
    p_ops: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let raw: Vec<RawOp> = serde_json::from_value(required(p_ops, "p_ops").0)
        .unwrap_or_else(|e| bad_param(format!("QKV p_ops: {e}")));
    let ops = read_ops(&raw, false)
        .unwrap_or_else(|(i, e)| bad_param(format!("QKV {}: op {i}: {}", e.reason, e.detail)));
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&OpResults {
        results: Spi::connect(|c| apply(c, tenant, &ops)),
    })
}

/// `queen.kv_expire_step_v1(max_rows)`: removes up to `max_rows` rows past their expiry
/// (run_maintenance's kv step): `{removed, done}`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn kv_expire_step_v1(p_max_rows: default!(Option<i32>, "1000")) -> JsonB {
    let max = p_max_rows.unwrap_or(1000);
    if max < 1 {
        bad_param("kv_expire_step_v1: p_max_rows must be >= 1");
    }
    Spi::connect(|client| {
        let now = clock_plus(client, 0.0).0;
        let doomed: Vec<(Uuid, String, String)> = q(
            client,
            "SELECT tenant_id, ns, key FROM queen.kv WHERE expires_at <= $1
              ORDER BY expires_at LIMIT $2",
            &[now.into(), max.into()],
        )
        .or_raise()
        .map(|r| (col(&r, 1, "tenant_id"), col(&r, 2, "ns"), col(&r, 3, "key")))
        .collect();
        let mut removed = 0i64;
        // The highest version removed per (tenant, ns), raised into its high-water mark
        // in this same transaction, after the rows (so a writer waiting on a removed
        // row reads the raised mark).
        let mut highest: std::collections::HashMap<(Uuid, &str), i64> = Default::default();
        // By key, re-checked: a row renewed since the scan stays.
        for (t, ns, key) in &doomed {
            let gone: Vec<i64> = q(
                client,
                "DELETE FROM queen.kv WHERE tenant_id = $1 AND ns = $2 AND key = $3
                   AND expires_at <= $4 RETURNING version",
                &[
                    (*t).into(),
                    ns.as_str().into(),
                    key.as_str().into(),
                    now.into(),
                ],
            )
            .or_raise()
            .map(|r| col(&r, 1, "kv.version"))
            .collect();
            for v in gone {
                removed += 1;
                let h = highest.entry((*t, ns.as_str())).or_insert(v);
                *h = (*h).max(v);
            }
        }
        // In one order, so two steps never wait on each other's marks.
        let mut marks: Vec<((Uuid, &str), i64)> = highest.into_iter().collect();
        marks.sort_by_key(|((t, ns), _)| (t.to_string(), *ns));
        for ((t, ns), v) in marks {
            raise_high_water(client, t, ns, v);
        }
        jsonb(&json!({"removed": removed, "done": (doomed.len() as i32) < max}))
    })
}
