//! Queen 2.x's locks and semaphores (docs/decisions.md, "Locks"): a permit is one
//! key/value row in the namespace `queen-locks`, key `<name>#<slot>`, value `{owner,
//! since}`, its version the fencing token (queen_log::kv: it only grows) and its expiry
//! the lease. This module holds the rules both halves need: reading an op, the row's
//! key, the guard a transaction carries, and the answers.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::kv::{BadOp, MAX_TTL_SECONDS};

/// The namespace of every permit's row.
pub const NAMESPACE: &str = "queen-locks";
/// Longest lock name and owner, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
pub const MAX_OWNER_BYTES: usize = 256;
/// Most permits of a semaphore.
pub const MAX_LIMIT: i64 = 1024;
/// Most ops in one call.
pub const MAX_OPS: usize = 100;

/// An op as the SDK sends it (`queen/locks/locks.py`); any other key is refused.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawLockOp {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<i64>,
}

/// A checked op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockOp {
    Acquire {
        name: String,
        ttl_seconds: i64,
        /// None: the broker mints one (a call without an owner is its own holder).
        owner: Option<String>,
        limit: i64,
    },
    Renew {
        name: String,
        token: i64,
        ttl_seconds: i64,
        slot: i64,
        owner: Option<String>,
    },
    Release {
        name: String,
        token: i64,
        slot: i64,
    },
    Get {
        name: String,
    },
}

fn bad(reason: &'static str, detail: impl Into<String>) -> BadOp {
    BadOp {
        reason,
        detail: detail.into(),
    }
}

fn control(c: char) -> bool {
    let n = c as u32;
    n < 0x20 || (0x7F..=0x9F).contains(&n)
}

/// A name: 1 to 256 bytes, no control character, no `#` (it separates name and slot).
pub fn check_name(name: &str) -> Result<(), BadOp> {
    if name.is_empty()
        || name.len() > MAX_NAME_BYTES
        || name.chars().any(|c| control(c) || c == '#')
    {
        return Err(bad(
            "lock_name_invalid",
            format!(
                "a lock's name is 1 to {MAX_NAME_BYTES} bytes without control characters or '#'"
            ),
        ));
    }
    Ok(())
}

fn check_owner(owner: &str) -> Result<(), BadOp> {
    if owner.is_empty() || owner.len() > MAX_OWNER_BYTES || owner.chars().any(control) {
        return Err(bad(
            "lock_owner_invalid",
            format!("an owner is 1 to {MAX_OWNER_BYTES} bytes without control characters"),
        ));
    }
    Ok(())
}

fn ttl(raw: &RawLockOp) -> Result<i64, BadOp> {
    match raw.ttl_seconds {
        Some(s) if (1..=MAX_TTL_SECONDS).contains(&s) => Ok(s),
        _ => Err(bad(
            "lock_ttl_invalid",
            "a lock needs ttlSeconds above zero (there is no forever: a holder renews)",
        )),
    }
}

fn token(raw: &RawLockOp) -> Result<i64, BadOp> {
    match raw.token {
        Some(t) if t > 0 => Ok(t),
        _ => Err(bad(
            "lock_token_invalid",
            "renew and release need the permit's token",
        )),
    }
}

fn slot(raw: &RawLockOp) -> Result<i64, BadOp> {
    match raw.slot {
        None => Ok(0),
        Some(s) if (0..MAX_LIMIT).contains(&s) => Ok(s),
        Some(s) => Err(bad(
            "lock_slot_invalid",
            format!("slot {s} is not 0 to {}", MAX_LIMIT - 1),
        )),
    }
}

fn only(raw: &RawLockOp, op: &str, allowed: &[&str]) -> Result<(), BadOp> {
    let set = [
        ("ttlSeconds", raw.ttl_seconds.is_some()),
        ("owner", raw.owner.is_some()),
        ("limit", raw.limit.is_some()),
        ("token", raw.token.is_some()),
        ("slot", raw.slot.is_some()),
    ];
    match set.iter().find(|(f, on)| *on && !allowed.contains(f)) {
        Some((f, _)) => Err(bad(
            "lock_field_not_allowed",
            format!("{op} does not take {f}"),
        )),
        None => Ok(()),
    }
}

/// Reads one op.
pub fn read_op(raw: &RawLockOp) -> Result<LockOp, BadOp> {
    let op = raw
        .op
        .as_deref()
        .ok_or_else(|| bad("lock_op_missing", "an op needs \"op\""))?;
    let name = raw
        .name
        .clone()
        .ok_or_else(|| bad("lock_name_invalid", "an op needs \"name\""))?;
    check_name(&name)?;
    if let Some(o) = &raw.owner {
        check_owner(o)?;
    }
    Ok(match op {
        "acquire" => {
            only(raw, op, &["ttlSeconds", "owner", "limit"])?;
            let limit = raw.limit.unwrap_or(1);
            if !(1..=MAX_LIMIT).contains(&limit) {
                return Err(bad(
                    "lock_limit_invalid",
                    format!("limit is 1 (a lock) to {MAX_LIMIT}"),
                ));
            }
            LockOp::Acquire {
                name,
                ttl_seconds: ttl(raw)?,
                owner: raw.owner.clone(),
                limit,
            }
        }
        "renew" => {
            only(raw, op, &["ttlSeconds", "owner", "token", "slot"])?;
            LockOp::Renew {
                name,
                token: token(raw)?,
                ttl_seconds: ttl(raw)?,
                slot: slot(raw)?,
                owner: raw.owner.clone(),
            }
        }
        "release" => {
            only(raw, op, &["token", "slot"])?;
            LockOp::Release {
                name,
                token: token(raw)?,
                slot: slot(raw)?,
            }
        }
        "get" => {
            only(raw, op, &[])?;
            LockOp::Get { name }
        }
        other => {
            return Err(bad(
                "lock_op_unknown",
                format!("unknown op {other:?}: acquire, renew, release or get"),
            ))
        }
    })
}

/// Reads a call's ops; the first refusal names its index.
pub fn read_ops(raw: &[RawLockOp]) -> Result<Vec<LockOp>, (usize, BadOp)> {
    if raw.len() > MAX_OPS {
        return Err((
            MAX_OPS,
            bad(
                "lock_too_many_ops",
                format!("at most {MAX_OPS} ops per call"),
            ),
        ));
    }
    raw.iter()
        .enumerate()
        .map(|(i, r)| read_op(r).map_err(|e| (i, e)))
        .collect()
}

/// The key of a permit's row.
pub fn slot_key(name: &str, slot: i64) -> String {
    format!("{name}#{slot}")
}

/// The slot of a permit's key, if it is one of `name`'s.
pub fn slot_of(name: &str, key: &str) -> Option<i64> {
    key.strip_prefix(name)?.strip_prefix('#')?.parse().ok()
}

/// The guard a transaction carries while the permit is held: a required `check` of its
/// row at its token (the kv rider runs it; a renew moves the token, a takeover the row).
pub fn guard(name: &str, slot: i64, token: i64) -> Value {
    json!({"op": "check", "ns": NAMESPACE, "key": slot_key(name, slot), "expect": token,
           "required": true})
}

/// A permit row's value: who holds it and since when (ISO-8601 UTC, milliseconds), as
/// acquire writes it. Read leniently, once per row: a value without them reads as an
/// empty owner and a null `since`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Permit {
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub since: Value,
}

impl Permit {
    /// The permit a row's value holds.
    pub fn of(value: &Value) -> Permit {
        Permit::deserialize(value).unwrap_or_default()
    }

    /// The row value that stores it.
    pub fn value(&self) -> Value {
        json!({"owner": self.owner, "since": self.since})
    }
}

/// A live permit as `get` and a refusal show it.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub slot: i64,
    pub owner: String,
    pub token: i64,
    pub since: Value,
    pub expires_at: Option<String>,
    pub renewed_at: String,
}

impl Holder {
    pub fn json(&self) -> Value {
        json!({"slot": self.slot, "owner": self.owner, "token": self.token, "since": self.since,
               "expiresAt": self.expires_at, "renewedAt": self.renewed_at})
    }
}

/// Where an acquire goes, from the live permits it finds: the caller's own permit when
/// it holds one (a call sent again is the same permit), else the free slots in order,
/// else none (`held`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquirePlan {
    Already(i64),
    TryFree(Vec<i64>),
    Held,
}

pub fn plan_acquire(holders: &[Holder], owner: &str, limit: i64) -> AcquirePlan {
    if let Some(h) = holders.iter().find(|h| h.owner == owner && h.slot < limit) {
        return AcquirePlan::Already(h.slot);
    }
    let free: Vec<i64> = (0..limit)
        .filter(|s| !holders.iter().any(|h| h.slot == *s))
        .collect();
    if free.is_empty() {
        AcquirePlan::Held
    } else {
        AcquirePlan::TryFree(free)
    }
}

/// Whether a renew may rewrite the permit it finds: the token is the row's, or the
/// caller is the row's owner (a renew sent again after its answer was lost).
pub fn may_renew(h: &Holder, token: i64, owner: Option<&str>) -> bool {
    h.token == token || owner.is_some_and(|o| o == h.owner)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_permit_reads_back_as_written_and_a_foreign_value_as_nobody() {
        let p = super::Permit {
            owner: "w1".into(),
            since: serde_json::json!("2026-01-01T00:00:00.000Z"),
        };
        assert_eq!(super::Permit::of(&p.value()), p);
        assert_eq!(
            super::Permit::of(&serde_json::json!(7)),
            super::Permit::default()
        );
        assert_eq!(
            super::Permit::of(&serde_json::json!({"owner": 1})).owner,
            ""
        );
    }

    use super::*;

    fn raw(v: Value) -> RawLockOp {
        serde_json::from_value(v).unwrap()
    }

    fn holder(slot: i64, owner: &str, token: i64) -> Holder {
        Holder {
            slot,
            owner: owner.into(),
            token,
            since: Value::Null,
            expires_at: None,
            renewed_at: String::new(),
        }
    }

    #[test]
    fn ops_read_as_the_sdk_writes_them() {
        let a = read_op(&raw(
            json!({"op":"acquire","name":"daily","ttlSeconds":30,"owner":"me","limit":3}),
        ));
        assert_eq!(
            a.unwrap(),
            LockOp::Acquire {
                name: "daily".into(),
                ttl_seconds: 30,
                owner: Some("me".into()),
                limit: 3
            }
        );
        let r = read_op(&raw(
            json!({"op":"renew","name":"daily","token":5,"ttlSeconds":30}),
        ));
        assert!(matches!(r, Ok(LockOp::Renew { slot: 0, .. })));
        for (v, reason) in [
            (
                json!({"op":"acquire","name":"a#b","ttlSeconds":1}),
                "lock_name_invalid",
            ),
            (json!({"op":"acquire","name":"a"}), "lock_ttl_invalid"),
            (
                json!({"op":"acquire","name":"a","ttlSeconds":1,"limit":2000}),
                "lock_limit_invalid",
            ),
            (json!({"op":"release","name":"a"}), "lock_token_invalid"),
            (
                json!({"op":"get","name":"a","token":1}),
                "lock_field_not_allowed",
            ),
            (json!({"op":"steal","name":"a"}), "lock_op_unknown"),
        ] {
            assert_eq!(read_op(&raw(v.clone())).unwrap_err().reason, reason, "{v}");
        }
    }

    #[test]
    fn keys_and_guards() {
        assert_eq!(slot_key("daily", 2), "daily#2");
        assert_eq!(slot_of("daily", "daily#2"), Some(2));
        assert_eq!(slot_of("daily", "daily-x#2"), None);
        assert_eq!(guard("d", 0, 9)["expect"], 9);
    }

    #[test]
    fn acquire_plans() {
        let hs = [holder(0, "a", 1), holder(2, "b", 1)];
        assert_eq!(plan_acquire(&hs, "b", 3), AcquirePlan::Already(2));
        assert_eq!(plan_acquire(&hs, "c", 3), AcquirePlan::TryFree(vec![1]));
        assert_eq!(plan_acquire(&hs[..1], "c", 1), AcquirePlan::Held);
        assert_eq!(plan_acquire(&[], "c", 1), AcquirePlan::TryFree(vec![0]));
    }

    #[test]
    fn renew_by_token_or_owner() {
        let h = holder(0, "me", 7);
        assert!(may_renew(&h, 7, None));
        assert!(may_renew(&h, 3, Some("me")));
        assert!(!may_renew(&h, 3, Some("other")));
    }
}
