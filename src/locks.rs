//! Queen 2.x's locks and semaphores (docs/decisions.md, "Locks"; the rules in
//! queen_log::locks): `queen.locks_apply_v1(ops, tenant)`. A permit is a key/value row
//! (namespace `queen-locks`, key `<name>#<slot>`) written through src/kv.rs, so its
//! token is the row's version and a transaction guards with a plain kv `check`. Each op
//! answers on its own; they commit together. Tokens only grow, by construction: a new
//! token is computed under the permit's lock from the one before (a released permit's
//! row stays, expired, with its token; one maintenance removed is remembered by the
//! namespace's high-water mark), never from a clock read before the lock. The kv ops
//! cannot write this namespace (queen_log::kv::check_writable).

use pgrx::datum::{TimestampWithTimeZone, Uuid};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::JsonB;
use queen_log::kv::{Expiry, Shown};
use queen_log::locks::{
    guard, may_renew, plan_acquire, read_ops, slot_key, slot_of, AcquirePlan, Holder, LockOp,
    Permit, RawLockOp, NAMESPACE,
};
use queen_log::wire::OpResults;
use serde_json::{json, Value};

use crate::db::{bad_param, clock_plus, col, default_tenant, iso_ms, jsonb, q, required, OrRaise};
use crate::kv::{find_locked, shown, tombstone, upsert, Found};

fn holder(slot: i64, s: &Shown) -> Holder {
    let Permit { owner, since } = Permit::of(&s.value);
    Holder {
        slot,
        owner,
        token: s.version,
        since,
        expires_at: s.expires_at.clone(),
        renewed_at: s.updated_at.clone(),
    }
}

/// The live permits of a lock, by slot.
fn holders(
    client: &SpiClient<'_>,
    tenant: Uuid,
    name: &str,
    now: TimestampWithTimeZone,
) -> Vec<Holder> {
    let prefix = format!("{name}#");
    let mut out: Vec<Holder> = q(
        client,
        "SELECT value::text, version, expires_at, updated_at, key FROM queen.kv
          WHERE tenant_id = $1 AND ns = $2 AND starts_with(key, $3)
            AND (expires_at IS NULL OR expires_at > $4)",
        &[
            tenant.into(),
            NAMESPACE.into(),
            prefix.as_str().into(),
            now.into(),
        ],
    )
    .or_raise()
    .filter_map(|r| {
        let key: String = col(&r, 5, "kv.key");
        slot_of(name, &key).map(|slot| holder(slot, &shown(&key, &r)))
    })
    .collect();
    out.sort_by_key(|h| h.slot);
    out
}

fn holders_json(hs: &[Holder]) -> Vec<Value> {
    hs.iter().map(Holder::json).collect()
}

/// The permit's row under `slot`, locked, and the clock read under its lock (so a new
/// token is computed from the previous one under the lock: crate::kv::find_locked).
fn permit(
    client: &SpiClient<'_>,
    tenant: Uuid,
    name: &str,
    slot: i64,
) -> (Option<Found>, TimestampWithTimeZone) {
    find_locked(client, tenant, NAMESPACE, &slot_key(name, slot))
}

/// Writes the permit: a new token (version) and lifetime, the owner and since kept.
fn write_permit(
    client: &SpiClient<'_>,
    tenant: Uuid,
    (name, slot): (&str, i64),
    old: Option<&Found>,
    value: &Value,
    ttl: i64,
    now: TimestampWithTimeZone,
) -> Option<Shown> {
    let key = slot_key(name, slot);
    upsert(
        client,
        tenant,
        NAMESPACE,
        &key,
        old,
        value,
        Some(Expiry::Seconds(ttl)),
        now,
    )
}

fn granted(i: usize, name: &str, slot: i64, s: &Shown, already: bool) -> Value {
    let mut v = json!({"index": i, "acquired": true, "slot": slot, "token": s.version,
                       "owner": Permit::of(&s.value).owner, "guard": guard(name, slot, s.version)});
    if already {
        v["already"] = json!(true);
    }
    v
}

fn acquire(client: &SpiClient<'_>, tenant: Uuid, i: usize, op: &LockOp) -> Value {
    let LockOp::Acquire {
        name,
        ttl_seconds,
        owner,
        limit,
    } = op
    else {
        unreachable!()
    };
    let owner = owner
        .clone()
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let now = clock_plus(client, 0.0).0;
    let found = holders(client, tenant, name, now);
    let free = match plan_acquire(&found, &owner, *limit) {
        AcquirePlan::Already(slot) => {
            let (row, _) = permit(client, tenant, name, slot);
            if let Some(f) = row.filter(|f| f.live && Permit::of(&f.shown.value).owner == owner) {
                return granted(i, name, slot, &f.shown, true);
            }
            vec![slot]
        }
        AcquirePlan::Held => {
            return json!({"index": i, "acquired": false, "reason": "held",
                          "holders": holders_json(&found)})
        }
        AcquirePlan::TryFree(free) => free,
    };
    for slot in free {
        let (row, now) = permit(client, tenant, name, slot);
        if row.as_ref().is_some_and(|f| f.live) {
            continue; // taken since the look
        }
        let value = Permit {
            owner: owner.clone(),
            since: json!(iso_ms(now)),
        }
        .value();
        if let Some(s) = write_permit(
            client,
            tenant,
            (name, slot),
            row.as_ref(),
            &value,
            *ttl_seconds,
            now,
        ) {
            return granted(i, name, slot, &s, false);
        }
    }
    let now = clock_plus(client, 0.0).0;
    let after = holders(client, tenant, name, now);
    let reason = if after.len() as i64 >= *limit {
        "held"
    } else {
        "contended"
    };
    json!({"index": i, "acquired": false, "reason": reason, "holders": holders_json(&after)})
}

fn lost(client: &SpiClient<'_>, tenant: Uuid, i: usize, name: &str, verdict: &str) -> Value {
    let now = clock_plus(client, 0.0).0;
    json!({"index": i, verdict: false, "reason": "lost",
           "holders": holders_json(&holders(client, tenant, name, now))})
}

fn renew(client: &SpiClient<'_>, tenant: Uuid, i: usize, op: &LockOp) -> Value {
    let LockOp::Renew {
        name,
        token,
        ttl_seconds,
        slot,
        owner,
    } = op
    else {
        unreachable!()
    };
    let (row, now) = permit(client, tenant, name, *slot);
    let Some(f) = row.filter(|f| f.live) else {
        return lost(client, tenant, i, name, "renewed");
    };
    if !may_renew(&holder(*slot, &f.shown), *token, owner.as_deref()) {
        return lost(client, tenant, i, name, "renewed");
    }
    match write_permit(
        client,
        tenant,
        (name, *slot),
        Some(&f),
        &f.shown.value,
        *ttl_seconds,
        now,
    ) {
        Some(s) => json!({"index": i, "renewed": true, "slot": slot, "token": s.version,
                          "guard": guard(name, *slot, s.version)}),
        None => lost(client, tenant, i, name, "renewed"),
    }
}

fn release(client: &SpiClient<'_>, tenant: Uuid, i: usize, op: &LockOp) -> Value {
    let LockOp::Release { name, token, slot } = op else {
        unreachable!()
    };
    let (row, now) = permit(client, tenant, name, *slot);
    match row.filter(|f| f.live && f.shown.version == *token) {
        Some(_) => {
            // The row stays (expired) with its token: the next holder's is higher.
            tombstone(client, tenant, NAMESPACE, &slot_key(name, *slot), now);
            json!({"index": i, "released": true})
        }
        None => json!({"index": i, "released": false, "reason": "lost"}),
    }
}

pub fn apply(client: &SpiClient<'_>, tenant: Uuid, ops: &[LockOp]) -> Vec<Value> {
    ops.iter()
        .enumerate()
        .map(|(i, op)| match op {
            LockOp::Acquire { .. } => acquire(client, tenant, i, op),
            LockOp::Renew { .. } => renew(client, tenant, i, op),
            LockOp::Release { .. } => release(client, tenant, i, op),
            LockOp::Get { name } => {
                let now = clock_plus(client, 0.0).0;
                let hs = holders(client, tenant, name, now);
                json!({"index": i, "held": !hs.is_empty(), "holders": holders_json(&hs)})
            }
        })
        .collect()
}

/// `queen.locks_apply_v1(ops, tenant)`: the SDK's `POST /api/v1/locks` from SQL. `ops`
/// is the JSON array of ops as the SDK writes them; the answer `{results: [...]}` is
/// index-aligned, each op's verdict its own. A refused op is 22023 naming its index.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn locks_apply_v1(
    p_ops: Option<JsonB>,
    p_tenant: default!(Option<Uuid>, "queen.default_tenant()"),
) -> JsonB {
    let raw: Vec<RawLockOp> = serde_json::from_value(required(p_ops, "p_ops").0)
        .unwrap_or_else(|e| bad_param(format!("QLOCK p_ops: {e}")));
    let ops = read_ops(&raw)
        .unwrap_or_else(|(i, e)| bad_param(format!("QLOCK {}: op {i}: {}", e.reason, e.detail)));
    let tenant = p_tenant.unwrap_or_else(default_tenant);
    jsonb(&OpResults {
        results: Spi::connect(|c| apply(c, tenant, &ops)),
    })
}
