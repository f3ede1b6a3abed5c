//! Queen 2.x's versioned key/value (docs/decisions.md, "Key/value"): the rules both
//! halves apply. An op is read from the SDK's shape and checked ([`read_op`]); a write's
//! verdict is decided from the row it finds ([`decide`]), so the extension only reads
//! the row, writes what the decision says and renders the answer ([`Outcome::render`]).
//!
//! A row past its expiry is absent to every op, whether or not maintenance has removed
//! it yet. Versions only grow, by construction: a write's version is one past the row's
//! (a deleted row stays, expired, until maintenance removes it), or, where there is no
//! row, one past the namespace's high-water mark (the highest version maintenance
//! removed, [`HIGH_WATER_NS`]); and never below the write's clock in microseconds, read
//! under the key's lock.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Most ops in one call.
pub const MAX_OPS: usize = 1000;
/// Longest namespace and key, in bytes.
pub const MAX_NS_BYTES: usize = 128;
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value, as JSON text.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Longest `ttlSeconds`: ten years.
pub const MAX_TTL_SECONDS: i64 = 10 * 366 * 24 * 3600;
/// A `getPrefix` page's default and largest size (clamped, never refused).
pub const PREFIX_DEFAULT: i64 = 100;
pub const PREFIX_MAX: i64 = 1000;
/// Most keys of one `getMany`.
pub const MANY_MAX: usize = 1000;

/// An op as the SDK sends it (`queen/kv/ops.py`); any other key is refused.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawOp {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_only: Option<bool>,
    /// Present (even as JSON null) for the writes that take one.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forever: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<Value>,
}

/// `"value": null` is a value (Some(Null)); only an absent key is None.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// How long a write lives: `ttlSeconds` or `forever`, exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expiry {
    Seconds(i64),
    Forever,
}

/// A checked op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum KvOp {
    Get {
        ns: String,
        key: String,
    },
    GetMany {
        ns: String,
        keys: Vec<String>,
    },
    GetPrefix {
        ns: String,
        prefix: String,
        after: Option<String>,
        limit: i64,
        keys_only: bool,
    },
    Put {
        ns: String,
        key: String,
        value: Value,
        expiry: Expiry,
        /// 0 = must not exist; N = must be at version N.
        expect: Option<i64>,
        required: bool,
    },
    Delete {
        ns: String,
        key: String,
        expect: Option<i64>,
        required: bool,
    },
    Incr {
        ns: String,
        key: String,
        delta: i64,
        min: Option<i64>,
        max: Option<i64>,
        expiry: Expiry,
        required: bool,
    },
    Check {
        ns: String,
        key: String,
        expect: i64,
        required: bool,
    },
}

/// A refused op: the SDK's `kv_bad_request`, with a stable `reason` and prose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadOp {
    pub reason: &'static str,
    pub detail: String,
}

fn bad(reason: &'static str, detail: impl Into<String>) -> BadOp {
    BadOp {
        reason,
        detail: detail.into(),
    }
}

/// A namespace: 1 to 128 bytes of letters, digits and `_ . : -`.
pub fn check_ns(ns: &str) -> Result<(), BadOp> {
    let ok = !ns.is_empty()
        && ns.len() <= MAX_NS_BYTES
        && ns
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(bad(
            "kv_namespace_invalid",
            format!(
                "namespace {ns:?}: 1 to {MAX_NS_BYTES} bytes of letters, digits, '_', '.', ':' or '-'"
            ),
        ))
    }
}

/// A key: 1 to 1024 bytes, no NUL (PostgreSQL text cannot hold one).
pub fn check_key(key: &str) -> Result<(), BadOp> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES || key.contains('\0') {
        return Err(bad(
            "kv_key_invalid",
            format!("a key is 1 to {MAX_KEY_BYTES} bytes without NUL"),
        ));
    }
    Ok(())
}

fn expiry(raw: &RawOp) -> Result<Expiry, BadOp> {
    match (raw.ttl_seconds, raw.forever) {
        (Some(s), None) if (1..=MAX_TTL_SECONDS).contains(&s) => Ok(Expiry::Seconds(s)),
        (Some(_), None) => Err(bad(
            "kv_ttl_invalid",
            format!("ttlSeconds must be 1 to {MAX_TTL_SECONDS}"),
        )),
        (None, Some(true)) => Ok(Expiry::Forever),
        (None, Some(false)) => Err(bad("kv_ttl_invalid", "forever must be true when given")),
        _ => Err(bad(
            "kv_expiry_not_specified",
            "every put, putIfAbsent and incr carries exactly one of ttlSeconds and forever",
        )),
    }
}

fn integer(name: &str, v: &Option<Value>) -> Result<Option<i64>, BadOp> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| {
            bad(
                "kv_incr_invalid",
                format!("{name} must be an integer within 64 bits (got {n})"),
            )
        }),
        Some(_) => Err(bad("kv_incr_invalid", format!("{name} must be a number"))),
    }
}

/// Refuses fields the op does not take (the SDK never sends them; a hand-made body
/// that does asks for something this op would not do).
fn only(raw: &RawOp, op: &str, allowed: &[&str]) -> Result<(), BadOp> {
    let set: [(&str, bool); 14] = [
        ("key", raw.key.is_some()),
        ("keys", raw.keys.is_some()),
        ("prefix", raw.prefix.is_some()),
        ("after", raw.after.is_some()),
        ("limit", raw.limit.is_some()),
        ("keysOnly", raw.keys_only.is_some()),
        ("value", raw.value.is_some()),
        ("ttlSeconds", raw.ttl_seconds.is_some()),
        ("forever", raw.forever.is_some()),
        ("expect", raw.expect.is_some()),
        ("required", raw.required.is_some()),
        ("delta", raw.delta.is_some()),
        ("min", raw.min.is_some()),
        ("max", raw.max.is_some()),
    ];
    match set.iter().find(|(f, on)| *on && !allowed.contains(f)) {
        Some((f, _)) => Err(bad(
            "kv_field_not_allowed",
            format!("{op} does not take {f}"),
        )),
        None => Ok(()),
    }
}

fn expect(raw: &RawOp) -> Result<Option<i64>, BadOp> {
    match raw.expect {
        Some(e) if e < 0 => Err(bad("kv_expect_invalid", "expect must be >= 0")),
        e => Ok(e),
    }
}

/// Reads one op. `in_transaction`: a transaction rider, where `getPrefix` (read work
/// the caller does not bound) is refused.
pub fn read_op(raw: &RawOp, in_transaction: bool) -> Result<KvOp, BadOp> {
    let op = raw
        .op
        .as_deref()
        .ok_or_else(|| bad("kv_op_missing", "an op needs \"op\""))?;
    let ns = raw
        .ns
        .clone()
        .ok_or_else(|| bad("kv_namespace_invalid", "an op needs \"ns\""))?;
    check_ns(&ns)?;
    let key = || -> Result<String, BadOp> {
        let k = raw
            .key
            .clone()
            .ok_or_else(|| bad("kv_key_invalid", format!("{op} needs \"key\"")))?;
        check_key(&k)?;
        Ok(k)
    };
    let required = raw.required.unwrap_or(false);
    let checked = match op {
        "get" => {
            only(raw, op, &["key"])?;
            KvOp::Get { ns, key: key()? }
        }
        "getMany" => {
            only(raw, op, &["keys"])?;
            let keys = raw.keys.clone().unwrap_or_default();
            if keys.is_empty() || keys.len() > MANY_MAX {
                return Err(bad(
                    "kv_keys_invalid",
                    format!("getMany takes 1 to {MANY_MAX} keys"),
                ));
            }
            keys.iter().try_for_each(|k| check_key(k))?;
            KvOp::GetMany { ns, keys }
        }
        "getPrefix" => {
            if in_transaction {
                return Err(bad(
                    "kv_prefix_in_transaction",
                    "getPrefix is not a transaction op: read the prefix with POST /api/v1/kv",
                ));
            }
            only(raw, op, &["prefix", "after", "limit", "keysOnly"])?;
            let prefix = raw.prefix.clone().unwrap_or_default();
            if prefix.is_empty() {
                return Err(bad(
                    "kv_prefix_required",
                    "getPrefix needs a non-empty prefix: a namespace is not a table to enumerate",
                ));
            }
            KvOp::GetPrefix {
                ns,
                prefix,
                after: raw.after.clone(),
                limit: raw
                    .limit
                    .unwrap_or(PREFIX_DEFAULT)
                    .clamp(1, PREFIX_MAX),
                keys_only: raw.keys_only.unwrap_or(false),
            }
        }
        "put" | "putIfAbsent" => {
            let allowed: &[&str] = if op == "put" {
                &["key", "value", "ttlSeconds", "forever", "expect", "required"]
            } else {
                &["key", "value", "ttlSeconds", "forever", "required"]
            };
            only(raw, op, allowed)?;
            let value = raw
                .value
                .clone()
                .ok_or_else(|| bad("kv_value_missing", format!("{op} needs \"value\"")))?;
            if value.to_string().len() > MAX_VALUE_BYTES {
                return Err(bad(
                    "kv_value_too_large",
                    format!("a value is at most {MAX_VALUE_BYTES} bytes of JSON"),
                ));
            }
            KvOp::Put {
                ns,
                key: key()?,
                value,
                expiry: expiry(raw)?,
                expect: if op == "put" { expect(raw)? } else { Some(0) },
                required,
            }
        }
        "delete" => {
            only(raw, op, &["key", "expect", "required"])?;
            KvOp::Delete {
                ns,
                key: key()?,
                expect: expect(raw)?,
                required,
            }
        }
        "incr" => {
            only(
                raw,
                op,
                &["key", "delta", "min", "max", "ttlSeconds", "forever", "required"],
            )?;
            KvOp::Incr {
                ns,
                key: key()?,
                delta: integer("delta", &raw.delta)?.unwrap_or(1),
                min: integer("min", &raw.min)?,
                max: integer("max", &raw.max)?,
                expiry: expiry(raw)?,
                required,
            }
        }
        "check" => {
            only(raw, op, &["key", "expect", "required"])?;
            KvOp::Check {
                ns,
                key: key()?,
                expect: expect(raw)?.ok_or_else(|| {
                    bad(
                        "kv_expect_required",
                        "check needs expect: the version the key must be at, or 0 for absent",
                    )
                })?,
                required,
            }
        }
        other => {
            return Err(bad(
                "kv_op_unknown",
                format!("unknown op {other:?}: get, getMany, getPrefix, put, putIfAbsent, delete, incr or check"),
            ))
        }
    };
    check_writable(&checked)?;
    Ok(checked)
}

/// Namespaces whose rows only their own ops write: `queen-locks` holds the lock permits
/// (crate::locks), whose owner and token a kv put or delete would rewrite behind the
/// holder's back; [`HIGH_WATER_NS`] the version marks. Read and `check` them (a
/// transaction's fencing guard is a `check`), never write them through kv
/// (docs/decisions.md, "Locks"). [`check_writable`] names each.
pub const RESERVED_NAMESPACES: &[&str] = &[crate::locks::NAMESPACE, HIGH_WATER_NS];

/// Where the extension keeps each namespace's high-water mark (a row per (tenant,
/// namespace), keyed by the namespace's name): the highest version of a row that
/// maintenance removed, above which a new row's version starts. Written by the
/// extension only.
pub const HIGH_WATER_NS: &str = "queen-kv-high-water";

/// A write op (put, putIfAbsent, delete, incr) into a reserved namespace is refused:
/// `kv_namespace_reserved`. Both halves ask: the broker when it reads a request, the
/// extension before it applies any op (a kv rider reaching it by another path included).
pub fn check_writable(op: &KvOp) -> Result<(), BadOp> {
    let ns = match op {
        KvOp::Put { ns, .. } | KvOp::Delete { ns, .. } | KvOp::Incr { ns, .. } => ns,
        KvOp::Get { .. } | KvOp::GetMany { .. } | KvOp::GetPrefix { .. } | KvOp::Check { .. } => {
            return Ok(())
        }
    };
    let whose = match ns.as_str() {
        crate::locks::NAMESPACE => {
            "its rows are the lock permits, written only by the lock ops (POST /api/v1/locks)"
        }
        HIGH_WATER_NS => "its rows are the namespaces' version marks, written only by the database",
        _ => return Ok(()),
    };
    Err(bad(
        "kv_namespace_reserved",
        format!("namespace {ns:?} is reserved: {whose}; kv may read and check it, not write it"),
    ))
}

/// Reads a call's ops; the first refusal names its index.
pub fn read_ops(raw: &[RawOp], in_transaction: bool) -> Result<Vec<KvOp>, (usize, BadOp)> {
    if raw.len() > MAX_OPS {
        return Err((
            MAX_OPS,
            bad("kv_too_many_ops", format!("at most {MAX_OPS} ops per call")),
        ));
    }
    raw.iter()
        .enumerate()
        .map(|(i, r)| read_op(r, in_transaction).map_err(|e| (i, e)))
        .collect()
}

/// A live row as an op finds it (an expired row is passed as None).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub value: Value,
    pub version: i64,
}

/// What a write op does to its key.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Nothing,
    /// Insert or replace; `expiry` None keeps the live row's expiry (incr's TTL is
    /// create-only).
    Upsert {
        value: Value,
        expiry: Option<Expiry>,
    },
    Delete,
}

/// A write op's verdict before it is carried out.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub write: Write,
    pub applied: bool,
    /// Why not: `exists`, `absent`, `version`, `limit`, `type`.
    pub reason: Option<&'static str>,
    pub required: bool,
}

fn refuse(reason: &'static str, required: bool) -> Decision {
    Decision {
        write: Write::Nothing,
        applied: false,
        reason: Some(reason),
        required,
    }
}

/// The version precondition: `expect` 0 = no live row; N = a live row at version N.
fn precondition(expect: Option<i64>, row: Option<&Row>) -> Option<&'static str> {
    match (expect, row) {
        (None, _) => None,
        (Some(0), Some(_)) => Some("exists"),
        (Some(0), None) => None,
        (Some(_), None) => Some("absent"),
        (Some(n), Some(r)) if r.version != n => Some("version"),
        _ => None,
    }
}

/// The verdict of a write op (put, delete, incr, check) on the live row it found.
pub fn decide(op: &KvOp, row: Option<&Row>) -> Decision {
    match op {
        KvOp::Put {
            value,
            expiry,
            expect,
            required,
            ..
        } => match precondition(*expect, row) {
            Some(r) => refuse(r, *required),
            None => Decision {
                write: Write::Upsert {
                    value: value.clone(),
                    expiry: Some(*expiry),
                },
                applied: true,
                reason: None,
                required: *required,
            },
        },
        KvOp::Delete {
            expect, required, ..
        } => match (row, precondition(*expect, row)) {
            (_, Some(r)) => refuse(r, *required),
            (None, None) => refuse("absent", *required),
            (Some(_), None) => Decision {
                write: Write::Delete,
                applied: true,
                reason: None,
                required: *required,
            },
        },
        KvOp::Check {
            expect, required, ..
        } => match precondition(Some(*expect), row) {
            Some(r) => refuse(r, *required),
            None => Decision {
                write: Write::Nothing,
                applied: true,
                reason: None,
                required: *required,
            },
        },
        KvOp::Incr {
            delta,
            min,
            max,
            expiry,
            required,
            ..
        } => {
            let old = match row.map(|r| &r.value) {
                None => 0,
                Some(v) => match v.as_i64() {
                    Some(n) => n,
                    None => return refuse("type", *required),
                },
            };
            let Some(new) = old.checked_add(*delta) else {
                return refuse("limit", *required);
            };
            if max.is_some_and(|m| new > m) || min.is_some_and(|m| new < m) {
                return refuse("limit", *required);
            }
            Decision {
                write: Write::Upsert {
                    value: json!(new),
                    // The TTL is create-only: a live counter keeps its window.
                    expiry: if row.is_some() { None } else { Some(*expiry) },
                },
                applied: true,
                reason: None,
                required: *required,
            }
        }
        KvOp::Get { .. } | KvOp::GetMany { .. } | KvOp::GetPrefix { .. } => Decision {
            write: Write::Nothing,
            applied: true,
            reason: None,
            required: false,
        },
    }
}

/// The next version of a key: one past the row's (live or expired), and never below the
/// write's clock in microseconds.
pub fn next_version(old: Option<i64>, now_us: i64) -> i64 {
    old.map_or(now_us, |v| v.saturating_add(1).max(now_us))
        .max(1)
}

/// A key as the answer shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub key: String,
    pub value: Value,
    pub version: i64,
    /// ISO-8601 UTC, None = forever.
    pub expires_at: Option<String>,
    pub updated_at: String,
}

impl Shown {
    /// `{key, value, version, expiresAt, updatedAt}` (no value when `keys_only`).
    pub fn row(&self, keys_only: bool) -> Value {
        let mut m = Map::new();
        m.insert("key".into(), json!(self.key));
        if !keys_only {
            m.insert("value".into(), self.value.clone());
        }
        m.insert("version".into(), json!(self.version));
        m.insert("expiresAt".into(), json!(self.expires_at));
        m.insert("updatedAt".into(), json!(self.updated_at));
        Value::Object(m)
    }
}

/// A write op's answer: `{index, applied, key, reason?, value, version, expiresAt}`.
/// `now` is the row after the op (the written one, or the one that refused it).
pub fn write_result(index: usize, key: &str, d: &Decision, now: Option<&Shown>) -> Value {
    let mut m = Map::new();
    m.insert("index".into(), json!(index));
    m.insert("applied".into(), json!(d.applied));
    m.insert("key".into(), json!(key));
    if let Some(r) = d.reason {
        m.insert("reason".into(), json!(r));
    }
    let (value, version) = shown_value_version(d, now);
    m.insert("value".into(), value);
    m.insert("version".into(), json!(version));
    m.insert(
        "expiresAt".into(),
        json!(now.and_then(|s| s.expires_at.as_ref())),
    );
    Value::Object(m)
}

/// The value and version a write's answer shows (and a refused precondition reports):
/// the row's, or with no row version 0 and a null value, except an incr refused on an
/// absent key, whose value is the counter's zero.
pub fn shown_value_version(d: &Decision, now: Option<&Shown>) -> (Value, i64) {
    match now {
        Some(s) => (s.value.clone(), s.version),
        None => {
            let zero = matches!(d.reason, Some("limit")).then(|| json!(0));
            (zero.unwrap_or(Value::Null), 0)
        }
    }
}

/// A get's answer: `{index, found, key, value, version, expiresAt, updatedAt}`.
pub fn get_result(index: usize, key: &str, row: Option<&Shown>) -> Value {
    match row {
        Some(s) => {
            let mut v = s.row(false);
            v["index"] = json!(index);
            v["found"] = json!(true);
            v
        }
        None => json!({"index": index, "found": false, "key": key}),
    }
}

/// What a `required` op that did not apply makes of the call: everything rolls back and
/// the answer says which op and why (the SDK's `kv_precondition`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Precondition {
    /// The op's index in the call's (or the rider's) ops.
    pub failed_index: usize,
    pub kv_reason: String,
    pub version: i64,
    pub value: Value,
}

/// Message prefix of the error a lost `required` precondition raises (its detail is the
/// [`Precondition`] as JSON).
pub const QKV_PRECONDITION: &str = "QKV precondition";

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(v: Value) -> RawOp {
        serde_json::from_value(v).unwrap()
    }

    fn put(expect: Option<i64>) -> KvOp {
        KvOp::Put {
            ns: "n".into(),
            key: "k".into(),
            value: json!(1),
            expiry: Expiry::Seconds(60),
            expect,
            required: false,
        }
    }

    fn row(v: Value, version: i64) -> Row {
        Row { value: v, version }
    }

    #[test]
    fn the_lock_namespace_is_read_and_checked_never_written_through_kv() {
        let ns = crate::locks::NAMESPACE;
        for op in [
            json!({"op":"put","ns":ns,"key":"L#0","value":{"owner":"x"},"ttlSeconds":60}),
            json!({"op":"putIfAbsent","ns":ns,"key":"L#0","value":1,"forever":true}),
            json!({"op":"delete","ns":ns,"key":"L#0"}),
            json!({"op":"incr","ns":ns,"key":"L#0","forever":true}),
        ] {
            for in_transaction in [false, true] {
                let e = read_op(&raw(op.clone()), in_transaction).unwrap_err();
                assert_eq!(e.reason, "kv_namespace_reserved", "{op}");
            }
        }
        for op in [
            json!({"op":"get","ns":ns,"key":"L#0"}),
            json!({"op":"getMany","ns":ns,"keys":["L#0"]}),
            json!({"op":"getPrefix","ns":ns,"prefix":"L#"}),
            json!({"op":"check","ns":ns,"key":"L#0","expect":7}),
        ] {
            assert!(read_op(&raw(op.clone()), false).is_ok(), "{op}");
        }
        // A namespace that only looks like it is an ordinary one.
        let op = json!({"op":"put","ns":"queen-locks2","key":"a","value":1,"forever":true});
        assert!(read_op(&raw(op), false).is_ok());
    }

    #[test]
    fn ops_read_as_the_sdk_writes_them() {
        let op = read_op(
            &raw(json!({"op":"put","ns":"test-kv-py","key":"a","value":null,"ttlSeconds":60})),
            false,
        )
        .unwrap();
        assert!(matches!(
            op,
            KvOp::Put {
                value: Value::Null,
                expect: None,
                ..
            }
        ));
        let op = read_op(
            &raw(json!({"op":"putIfAbsent","ns":"n","key":"a","value":1,"forever":true})),
            false,
        )
        .unwrap();
        assert!(matches!(
            op,
            KvOp::Put {
                expect: Some(0),
                expiry: Expiry::Forever,
                ..
            }
        ));
        let p = read_op(
            &raw(json!({"op":"getPrefix","ns":"n","prefix":"a","limit":5000})),
            false,
        );
        assert!(matches!(p, Ok(KvOp::GetPrefix { limit: 1000, .. })));
    }

    #[test]
    fn an_op_travels_as_it_came() {
        let v = json!({"op":"put","ns":"n","key":"k","value":null,"ttlSeconds":5});
        assert_eq!(serde_json::to_value(raw(v.clone())).unwrap(), v);
        let g = json!({"op":"get","ns":"n","key":"k"});
        assert_eq!(serde_json::to_value(raw(g.clone())).unwrap(), g);
    }

    #[test]
    fn bad_ops_are_refused_with_a_reason() {
        let cases = [
            (
                json!({"op":"put","ns":"NOT A NAMESPACE","key":"k","value":1,"ttlSeconds":1}),
                "kv_namespace_invalid",
            ),
            (
                json!({"op":"put","ns":"n","key":"k","value":1}),
                "kv_expiry_not_specified",
            ),
            (
                json!({"op":"put","ns":"n","key":"k","value":1,"ttlSeconds":1,"forever":true}),
                "kv_expiry_not_specified",
            ),
            (
                json!({"op":"put","ns":"n","key":"k","ttlSeconds":1}),
                "kv_value_missing",
            ),
            (
                json!({"op":"putIfAbsent","ns":"n","key":"k","value":1,"ttlSeconds":1,"expect":3}),
                "kv_field_not_allowed",
            ),
            (
                json!({"op":"check","ns":"n","key":"k"}),
                "kv_expect_required",
            ),
            (
                json!({"op":"incr","ns":"n","key":"k","delta":1.5,"ttlSeconds":1}),
                "kv_incr_invalid",
            ),
            (
                json!({"op":"getPrefix","ns":"n","prefix":""}),
                "kv_prefix_required",
            ),
            (json!({"op":"get","ns":"n","key":""}), "kv_key_invalid"),
            (json!({"op":"nope","ns":"n"}), "kv_op_unknown"),
            (
                json!({"op":"get","ns":"n","key":"k","ttlSeconds":1}),
                "kv_field_not_allowed",
            ),
        ];
        for (v, reason) in cases {
            assert_eq!(
                read_op(&raw(v.clone()), false).unwrap_err().reason,
                reason,
                "{v}"
            );
        }
        let p = raw(json!({"op":"getPrefix","ns":"n","prefix":"a"}));
        assert_eq!(
            read_op(&p, true).unwrap_err().reason,
            "kv_prefix_in_transaction"
        );
        assert!(serde_json::from_value::<RawOp>(json!({"op":"get","bogus":1})).is_err());
    }

    #[test]
    fn put_preconditions() {
        let live = row(json!(1), 7);
        assert!(decide(&put(None), Some(&live)).applied);
        assert_eq!(decide(&put(Some(0)), Some(&live)).reason, Some("exists"));
        assert!(
            decide(&put(Some(0)), None).applied,
            "absent (or expired) is free"
        );
        assert_eq!(decide(&put(Some(42)), None).reason, Some("absent"));
        assert_eq!(decide(&put(Some(6)), Some(&live)).reason, Some("version"));
        assert!(decide(&put(Some(7)), Some(&live)).applied);
        assert_eq!(
            decide(&put(Some(42)), None).write,
            Write::Nothing,
            "an expect creates nothing"
        );
    }

    #[test]
    fn incr_refuses_instead_of_saturating() {
        let inc = |delta, max| KvOp::Incr {
            ns: "n".into(),
            key: "k".into(),
            delta,
            min: None,
            max,
            expiry: Expiry::Seconds(60),
            required: false,
        };
        let d = decide(&inc(10, Some(5)), None);
        assert_eq!(
            (d.applied, d.reason),
            (false, Some("limit")),
            "the first shot is guarded"
        );
        let d = decide(&inc(1, Some(3)), Some(&row(json!(2), 1)));
        assert_eq!(
            d.write,
            Write::Upsert {
                value: json!(3),
                expiry: None
            },
            "TTL create-only"
        );
        assert_eq!(
            decide(&inc(1, Some(3)), Some(&row(json!(3), 1))).reason,
            Some("limit")
        );
        assert_eq!(
            decide(&inc(1, None), Some(&row(json!({"c":0}), 1))).reason,
            Some("type")
        );
        let fresh = decide(&inc(1, None), None);
        assert_eq!(
            fresh.write,
            Write::Upsert {
                value: json!(1),
                expiry: Some(Expiry::Seconds(60))
            }
        );
    }

    #[test]
    fn delete_and_check() {
        let del = |expect| KvOp::Delete {
            ns: "n".into(),
            key: "k".into(),
            expect,
            required: true,
        };
        assert_eq!(decide(&del(None), None).reason, Some("absent"));
        assert_eq!(
            decide(&del(None), Some(&row(json!(1), 2))).write,
            Write::Delete
        );
        assert_eq!(
            decide(&del(Some(1)), Some(&row(json!(1), 2))).reason,
            Some("version")
        );
        let chk = |expect| KvOp::Check {
            ns: "n".into(),
            key: "k".into(),
            expect,
            required: true,
        };
        assert!(decide(&chk(0), None).applied);
        assert_eq!(
            decide(&chk(0), Some(&row(json!(1), 2))).reason,
            Some("exists")
        );
        assert!(decide(&chk(2), Some(&row(json!(1), 2))).applied);
        assert!(decide(&chk(2), None).required);
    }

    #[test]
    fn versions_only_grow() {
        assert_eq!(next_version(None, 1000), 1000);
        assert_eq!(next_version(Some(5000), 1000), 5001);
        assert_eq!(next_version(Some(5), 1000), 1000);
    }
}
