//! Rules of Queen 2.x's ephemeral queues (docs/decisions.md, "Ephemeral queues") that
//! both halves need: the declared options (`configure`'s seven knobs: read, bounded,
//! defaulted; the extension stores them, the broker enforces them), the opaque message
//! id (which broker incarnation and which ring generation delivered it, so an ack after
//! a restart or a reset answers `stale`), the owner of a queue among N brokers
//! (rendezvous hashing), and the ack statuses.

use std::fmt;

use serde_json::{json, Map, Value};
use uuid::Uuid;
use xxhash_rust::xxh3::xxh3_64;

/// What a full queue does with a push (`policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// The push is refused whole (429), nothing is written.
    Reject,
    /// The oldest messages are dropped (counted) until the push fits: feed semantics.
    DropOldest,
}

impl Overflow {
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::Reject => "reject",
            Overflow::DropOldest => "drop_oldest",
        }
    }
}

/// `windowBuffer`: a waiting pop that got fewer than `count` messages waits up to `ms`
/// more for the batch to fatten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub ms: u64,
    pub count: u32,
}

/// A queue's declared bounds, every one enforced by the broker that owns the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub max_bytes: u64,
    pub max_length: u64,
    pub policy: Overflow,
    /// 0 = messages do not age out.
    pub ttl_seconds: u64,
    pub lease_seconds: u64,
    /// Failed deliveries a message may have before it is dropped (a message is delivered
    /// at most `retry_limit + 1` times without a completed ack).
    pub retry_limit: u32,
    pub window: Option<Window>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_bytes: 64 * 1024 * 1024,
            max_length: 100_000,
            policy: Overflow::Reject,
            ttl_seconds: 0,
            lease_seconds: 30,
            retry_limit: 3,
            window: None,
        }
    }
}

/// Upper bounds of the knobs (the lower bound is 1 unless said).
pub const MAX_QUEUE_BYTES: u64 = 1024 * 1024 * 1024;
pub const MAX_QUEUE_LENGTH: u64 = 10_000_000;
pub const MAX_TTL_SECONDS: u64 = 7 * 24 * 3600;
pub const MAX_LEASE_SECONDS: u64 = 3600;
pub const MAX_RETRY_LIMIT: u64 = 100;
pub const MAX_WINDOW_MS: u64 = 10_000;
pub const MAX_WINDOW_COUNT: u64 = 10_000;

/// An option refused: the wire name of the field (`options.maxBytes`) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn refuse(field: &str, message: impl Into<String>) -> OptionError {
    OptionError {
        field: format!("options.{field}"),
        message: message.into(),
    }
}

fn bounded(v: &Value, field: &str, lo: u64, hi: u64) -> Result<u64, OptionError> {
    match v.as_u64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(refuse(
            field,
            format!("must be an integer from {lo} to {hi}, got {v}"),
        )),
    }
}

impl Options {
    /// Reads `configure`'s `options` object: the seven wire names only (anything else is
    /// refused, never dropped), each in its range; what is absent keeps its default.
    pub fn from_wire(options: &Value) -> Result<Options, OptionError> {
        let Some(map) = options.as_object() else {
            return Err(OptionError {
                field: "options".into(),
                message: format!("must be an object, got {options}"),
            });
        };
        let mut o = Options::default();
        for (k, v) in map {
            // null is the knob's default (what an SDK sends for an option not set).
            if v.is_null() {
                continue;
            }
            match k.as_str() {
                "maxBytes" => o.max_bytes = bounded(v, k, 1, MAX_QUEUE_BYTES)?,
                "maxLength" => o.max_length = bounded(v, k, 1, MAX_QUEUE_LENGTH)?,
                "ttlSeconds" => o.ttl_seconds = bounded(v, k, 0, MAX_TTL_SECONDS)?,
                "leaseSeconds" => o.lease_seconds = bounded(v, k, 1, MAX_LEASE_SECONDS)?,
                "retryLimit" => o.retry_limit = bounded(v, k, 0, MAX_RETRY_LIMIT)? as u32,
                "policy" => {
                    o.policy = match v.as_str() {
                        Some("reject") => Overflow::Reject,
                        Some("drop_oldest") => Overflow::DropOldest,
                        _ => {
                            return Err(refuse(
                                k,
                                format!("must be \"reject\" or \"drop_oldest\", got {v}"),
                            ))
                        }
                    }
                }
                "windowBuffer" => o.window = Some(window(v)?),
                other => {
                    return Err(refuse(
                        other,
                        "unknown option; known: maxBytes, maxLength, policy, ttlSeconds, \
                         leaseSeconds, retryLimit, windowBuffer",
                    ))
                }
            }
        }
        Ok(o)
    }

    /// The effective options in wire spelling, every knob present (what `configure`
    /// answers and the extension stores).
    pub fn to_wire(&self) -> Value {
        let mut m = Map::new();
        m.insert("maxBytes".into(), json!(self.max_bytes));
        m.insert("maxLength".into(), json!(self.max_length));
        m.insert("policy".into(), json!(self.policy.as_str()));
        m.insert("ttlSeconds".into(), json!(self.ttl_seconds));
        m.insert("leaseSeconds".into(), json!(self.lease_seconds));
        m.insert("retryLimit".into(), json!(self.retry_limit));
        m.insert(
            "windowBuffer".into(),
            self.window
                .map_or(Value::Null, |w| json!({"ms": w.ms, "count": w.count})),
        );
        Value::Object(m)
    }
}

fn window(v: &Value) -> Result<Window, OptionError> {
    let Some(m) = v.as_object() else {
        return Err(refuse(
            "windowBuffer",
            format!("must be {{\"ms\", \"count\"}}, got {v}"),
        ));
    };
    if let Some(k) = m.keys().find(|k| !matches!(k.as_str(), "ms" | "count")) {
        return Err(refuse(
            &format!("windowBuffer.{k}"),
            "unknown field; known: ms, count",
        ));
    }
    let ms = m
        .get("ms")
        .map_or(Ok(0), |v| bounded(v, "windowBuffer.ms", 0, MAX_WINDOW_MS))?;
    let count = m.get("count").map_or(Ok(1), |v| {
        bounded(v, "windowBuffer.count", 1, MAX_WINDOW_COUNT)
    })?;
    Ok(Window {
        ms,
        count: count as u32,
    })
}

/// One delivery of one message: which broker incarnation and ring generation issued it,
/// to which consumer group, where the message sits, and which delivery of it this is.
/// An ack must name the current delivery to the group it names: an older one (its lease
/// expired and the message went out again) fences itself out, and an id of one group
/// never settles another group's delivery of the same message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageId {
    pub incarnation: u64,
    pub generation: u32,
    /// [`group_tag`] of the group it was delivered to.
    pub group: u32,
    pub partition: u32,
    pub seq: u64,
    pub delivery: u32,
}

/// The short tag of a consumer group's name carried in its ids.
pub fn group_tag(group: &str) -> u32 {
    xxh3_64(group.as_bytes()) as u32
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "e1-{:x}-{:x}-{:x}-{:x}-{:x}-{:x}",
            self.incarnation, self.generation, self.group, self.partition, self.seq, self.delivery
        )
    }
}

impl MessageId {
    /// Reads an id this scheme wrote; `None` for anything else (the ack answers
    /// `unknown`).
    pub fn parse(s: &str) -> Option<MessageId> {
        let mut it = s.strip_prefix("e1-")?.split('-');
        let mut next = || u64::from_str_radix(it.next()?, 16).ok();
        let id = MessageId {
            incarnation: next()?,
            generation: u32::try_from(next()?).ok()?,
            group: u32::try_from(next()?).ok()?,
            partition: u32::try_from(next()?).ok()?,
            seq: next()?,
            delivery: u32::try_from(next()?).ok()?,
        };
        it.next().is_none().then_some(id)
    }
}

/// The broker (an index into `peers`) that owns `queue` of `tenant`: the highest
/// xxh3 of (peer, tenant, queue), so adding or removing a broker moves only the queues
/// of that broker. Every broker computes the same owner from the same peer list.
pub fn owner(peers: &[String], tenant: Uuid, queue: &str) -> usize {
    let score = |peer: &str| {
        let mut key = Vec::with_capacity(peer.len() + 17 + queue.len());
        key.extend_from_slice(peer.as_bytes());
        key.push(0);
        key.extend_from_slice(tenant.as_bytes());
        key.extend_from_slice(queue.as_bytes());
        xxh3_64(&key)
    };
    peers
        .iter()
        .enumerate()
        .max_by_key(|(_, p)| score(p))
        .map_or(0, |(i, _)| i)
}

/// What an ack asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckStatus {
    Completed,
    /// `failed` or `retry`: the message comes back with one more attempt, or is dropped
    /// past `retryLimit`.
    Failed,
}

impl AckStatus {
    /// `completed` (also the default), `failed`, `retry`; anything else is refused.
    pub fn parse(s: Option<&str>) -> Option<AckStatus> {
        match s {
            None | Some("completed") => Some(AckStatus::Completed),
            Some("failed") | Some("retry") => Some(AckStatus::Failed),
            _ => None,
        }
    }
}

/// Whether a message that has failed `attempts` times (this failure included) is
/// dropped rather than delivered again.
pub fn exhausted(attempts: u32, retry_limit: u32) -> bool {
    attempts > retry_limit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_options_keep_their_defaults_and_the_wire_shows_every_knob() {
        let o = Options::from_wire(&json!({})).unwrap();
        assert_eq!(o, Options::default());
        assert_eq!(
            Options::from_wire(&o.to_wire()).unwrap(),
            o,
            "the wire reads back"
        );
        assert_eq!(Options::from_wire(&json!({"ttlSeconds": null})).unwrap(), o);
        let w = o.to_wire();
        assert_eq!(w.as_object().unwrap().len(), 7);
        assert_eq!(
            Options::from_wire(&json!({"maxBytes": 10, "policy": "drop_oldest",
            "windowBuffer": {"ms": 5, "count": 3}}))
            .unwrap()
            .to_wire()["windowBuffer"],
            json!({"ms": 5, "count": 3})
        );
    }

    #[test]
    fn an_unknown_or_out_of_range_option_is_refused_naming_it() {
        let e = Options::from_wire(&json!({"ttl_second": 5})).unwrap_err();
        assert_eq!(e.field, "options.ttl_second");
        let e = Options::from_wire(&json!({"maxLength": 0})).unwrap_err();
        assert_eq!(e.field, "options.maxLength");
        let e = Options::from_wire(&json!({"policy": "drop"})).unwrap_err();
        assert_eq!(e.field, "options.policy");
        let e = Options::from_wire(&json!({"windowBuffer": {"ms": 1, "size": 2}})).unwrap_err();
        assert_eq!(e.field, "options.windowBuffer.size");
        let e = Options::from_wire(&json!({"leaseSeconds": 1.5})).unwrap_err();
        assert_eq!(e.field, "options.leaseSeconds");
        assert!(Options::from_wire(&json!([])).is_err());
    }

    #[test]
    fn a_message_id_reads_back_and_nothing_else_reads() {
        let id = MessageId {
            incarnation: u64::MAX,
            generation: 3,
            group: group_tag("workers"),
            partition: 0,
            seq: 77,
            delivery: 2,
        };
        assert_eq!(MessageId::parse(&id.to_string()), Some(id));
        for bad in [
            "",
            "e1-1-2-3-4-5",
            "e1-1-2-3-4-5-6-7",
            "e2-1-2-3-4-5-6",
            "e1-x-2-3-4-5-6",
        ] {
            assert_eq!(MessageId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_owner_is_stable_and_moves_only_off_a_removed_broker() {
        let peers: Vec<String> = ["http://a", "http://b", "http://c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let t = Uuid::nil();
        let mut counts = [0; 3];
        for i in 0..300 {
            let q = format!("q{i}");
            let o = owner(&peers, t, &q);
            assert_eq!(o, owner(&peers, t, &q));
            counts[o] += 1;
            let without_c = &peers[..2];
            if o < 2 {
                assert_eq!(
                    owner(without_c, t, &q),
                    o,
                    "{q} moved though its owner stayed"
                );
            }
        }
        assert!(counts.iter().all(|&c| c > 50), "{counts:?}");
        assert_eq!(owner(&[], t, "q"), 0);
    }

    #[test]
    fn statuses_and_the_retry_budget() {
        assert_eq!(AckStatus::parse(None), Some(AckStatus::Completed));
        assert_eq!(AckStatus::parse(Some("retry")), Some(AckStatus::Failed));
        assert_eq!(AckStatus::parse(Some("done")), None);
        assert!(!exhausted(3, 3));
        assert!(exhausted(4, 3));
        assert!(exhausted(1, 0));
    }
}
