//! Ephemeral queues (Queen 2.x's `client.ephemeral`; docs/decisions.md, "Ephemeral
//! queues"): rings of messages in this broker's memory, never in the database. Contents
//! survive nothing (a restart answers every older id `stale`); the declared options are
//! the extension's (`queen.ephemeral_configure_v1`) and only read here.
//!
//! A ring has partitions (FIFO each) and one cursor per consumer group and partition,
//! as on the durable engine: the same group competes, another group fans out, no group
//! is queue mode. A message leaves the ring once every group's cursor is past it, or
//! when its queue's bounds say so (ttl, overflow, retry budget); every such drop is
//! counted by its reason.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use queen_log::conventions::QUEUE_MODE;
use queen_log::ephemeral::{exhausted, group_tag, AckStatus, MessageId, Options, Overflow, Window};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Notify;
use uuid::Uuid;

/// The partition a push without one goes to (Queen's default partition name).
pub const DEFAULT_PARTITION: &str = "Default";
/// Partitions one ring may have: a partition, once named, keeps its slot until the
/// ring is reset or deleted.
pub const MAX_PARTITIONS: usize = 10_000;
/// A group that has not popped for this long and holds no lease is forgotten, so a
/// departed fan-out subscriber does not pin the ring until its bounds refuse pushes.
pub const GROUP_IDLE: Duration = Duration::from_secs(600);

type Key = (Uuid, String);

/// Counters of what the store did, by event (for `/metrics`).
#[derive(Default)]
pub struct EphemeralStats {
    pub pushed: AtomicU64,
    pub delivered: AtomicU64,
    pub acked: AtomicU64,
    pub redelivered: AtomicU64,
    pub dropped_retry: AtomicU64,
    pub dropped_overflow: AtomicU64,
    pub dropped_ttl: AtomicU64,
    pub dropped_reset: AtomicU64,
    /// Pushes refused (bounds, memory, limits).
    pub rejected: AtomicU64,
    /// Requests this broker passed on to the queue's owner.
    pub forwarded: AtomicU64,
}

impl EphemeralStats {
    /// (event label, counter) of `queen_ephemeral_messages_total`.
    pub fn events(&self) -> [(&'static str, &AtomicU64); 8] {
        [
            ("pushed", &self.pushed),
            ("delivered", &self.delivered),
            ("acked", &self.acked),
            ("redelivered", &self.redelivered),
            ("dropped_retry", &self.dropped_retry),
            ("dropped_overflow", &self.dropped_overflow),
            ("dropped_ttl", &self.dropped_ttl),
            ("dropped_reset", &self.dropped_reset),
        ]
    }
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Why a push (or an implicit creation) was refused; nothing was written.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The queue is at `maxLength`/`maxBytes` and its policy is `reject` (429).
    Full { length: u64, bytes: u64 },
    /// One request larger than the queue's bounds: it can never fit (400).
    TooLarge(String),
    /// The broker-wide budget `QUEEN_EPHEMERAL_MAX_BYTES` is spent (503).
    Memory,
    /// `QUEEN_EPHEMERAL_MAX_QUEUES` rings exist already (429).
    QueueLimit,
    /// The ring has [`MAX_PARTITIONS`] partitions already (429).
    PartitionLimit,
}

/// One message handed out by a pop.
pub struct Delivered {
    pub id: String,
    pub partition: String,
    /// The payload as pushed (JSON text).
    pub payload: Arc<str>,
    /// Failed deliveries before this one (0 the first time).
    pub attempts: u32,
}

/// What an ack of one id came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    /// Failed past `retryLimit`: the ack is taken and the message dropped (counted).
    AckedDropped,
    Redelivered,
    Stale,
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acked | Outcome::AckedDropped => "acked",
            Outcome::Redelivered => "redelivered",
            Outcome::Stale => "stale",
            Outcome::Unknown => "unknown",
        }
    }
}

/// A pop's request, past parsing.
pub struct PopAsk<'a> {
    pub partition: Option<&'a str>,
    pub group: Option<&'a str>,
    pub batch: usize,
    /// Commit at delivery: no lease, nothing to ack.
    pub auto_ack: bool,
}

struct Msg {
    payload: Arc<str>,
    at: Instant,
    /// Push order across the ring's partitions (drop_oldest takes the smallest).
    stamp: u64,
}

struct Part {
    name: String,
    /// Sequence number of `msgs[0]`.
    base: u64,
    msgs: VecDeque<Msg>,
}

impl Part {
    fn end(&self) -> u64 {
        self.base + self.msgs.len() as u64
    }
}

struct Pending {
    attempts: u32,
    delivery: u32,
    /// None: its lease expired or it failed, and it waits for redelivery.
    deadline: Option<Instant>,
}

#[derive(Default)]
struct Cursor {
    /// The first sequence number never delivered to this group.
    next: u64,
    /// Delivered, not yet done.
    pending: BTreeMap<u64, Pending>,
    /// The part of `pending` waiting for redelivery.
    ready: BTreeSet<u64>,
}

impl Cursor {
    fn floor(&self) -> u64 {
        self.pending
            .keys()
            .next()
            .map_or(self.next, |s| (*s).min(self.next))
    }

    /// Forgets what sits below `base` (dropped from the ring).
    fn raise(&mut self, base: u64) {
        self.next = self.next.max(base);
        while let Some((&s, _)) = self.pending.first_key_value() {
            if s >= base {
                break;
            }
            self.pending.remove(&s);
            self.ready.remove(&s);
        }
    }
}

struct Group {
    cursors: HashMap<u32, Cursor>,
    last_pop: Instant,
}

impl Group {
    fn leases(&self) -> usize {
        self.cursors
            .values()
            .map(|c| c.pending.len() - c.ready.len())
            .sum()
    }
}

/// A queue as `GET /api/v1/ephemeral/queues` lists it (also what a peer answers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueSummary {
    pub queue: String,
    pub declared: bool,
    pub length: u64,
    pub bytes: u64,
    pub partitions: usize,
    pub groups: usize,
    pub options: Value,
}

/// A peer's answer to `GET /api/v1/ephemeral/queues`: its queues (the rest unread).
#[derive(Debug, Default, Deserialize)]
pub struct QueueList {
    #[serde(default)]
    pub queues: Vec<QueueSummary>,
}

struct RingState {
    options: Options,
    declared: bool,
    generation: u32,
    parts: Vec<Part>,
    part_index: HashMap<String, u32>,
    groups: HashMap<String, Group>,
    length: u64,
    bytes: u64,
    stamp: u64,
    /// Where the next partition-less pop starts.
    turn: usize,
    /// The earliest lease deadline, if any may be pending (a hint: scans start there).
    next_expiry: Option<Instant>,
    created: Instant,
    touched: Instant,
}

/// One queue's ring and the wake-up of its long-polls.
pub struct Ring {
    state: Mutex<RingState>,
    pub notify: Notify,
}

/// Every ring of this broker.
pub struct Store {
    incarnation: u64,
    generations: AtomicU32,
    rings: Mutex<HashMap<Key, Arc<Ring>>>,
    declared: Mutex<HashMap<Key, Options>>,
    bytes: AtomicU64,
    budget: u64,
    max_queues: usize,
    pub stats: EphemeralStats,
}

/// Memory gauges of the store.
pub struct Gauges {
    pub queues: u64,
    pub messages: u64,
    pub bytes: u64,
}

impl Store {
    /// An empty store whose ids carry a fresh incarnation (so no id of an earlier
    /// process, or another broker, matches), with a broker-wide byte budget and a cap on
    /// the number of rings.
    pub fn new(budget: u64, max_queues: usize) -> Store {
        Store {
            incarnation: Uuid::new_v4().as_u64_pair().0,
            generations: AtomicU32::new(1),
            rings: Mutex::default(),
            declared: Mutex::default(),
            bytes: AtomicU64::new(0),
            budget,
            max_queues,
            stats: EphemeralStats::default(),
        }
    }

    fn rings(&self) -> MutexGuard<'_, HashMap<Key, Arc<Ring>>> {
        self.rings.lock().expect("ephemeral rings poisoned")
    }

    fn declared(&self) -> MutexGuard<'_, HashMap<Key, Options>> {
        self.declared
            .lock()
            .expect("ephemeral declarations poisoned")
    }

    /// The ring of `queue`, created (with its declared options or the defaults) when
    /// `create` is set.
    pub fn ring(
        &self,
        tenant: Uuid,
        queue: &str,
        create: bool,
    ) -> Result<Option<Arc<Ring>>, Refusal> {
        let key = (tenant, queue.to_string());
        let mut rings = self.rings();
        if let Some(r) = rings.get(&key) {
            return Ok(Some(r.clone()));
        }
        if !create {
            return Ok(None);
        }
        if rings.len() >= self.max_queues {
            add(&self.stats.rejected, 1);
            return Err(Refusal::QueueLimit);
        }
        let declared = self.declared().get(&key).cloned();
        let ring = Arc::new(Ring {
            state: Mutex::new(RingState::new(
                declared.clone().unwrap_or_default(),
                declared.is_some(),
                self.generations.fetch_add(1, Ordering::Relaxed),
            )),
            notify: Notify::new(),
        });
        rings.insert(key, ring.clone());
        Ok(Some(ring))
    }

    /// A declaration (configure, or loaded from the database at start): the options
    /// apply to the ring now and to any ring made later.
    pub fn declare(&self, tenant: Uuid, queue: &str, options: Options) {
        self.declared()
            .insert((tenant, queue.to_string()), options.clone());
        if let Ok(Some(ring)) = self.ring(tenant, queue, false) {
            let mut s = ring.lock();
            s.options = options;
            s.declared = true;
        }
        self.sweep_one(tenant, queue);
    }

    /// Delete: contents, cursors and declaration. Whether there was anything to delete.
    pub fn delete(&self, tenant: Uuid, queue: &str) -> bool {
        let key = (tenant, queue.to_string());
        let was_declared = self.declared().remove(&key).is_some();
        let ring = self.rings().remove(&key);
        if let Some(r) = &ring {
            let dropped = r.lock().clear(self);
            add(&self.stats.dropped_reset, dropped);
            r.notify.notify_waiters();
        }
        was_declared || ring.is_some()
    }

    /// Reset: drop every message, void every lease, rewind every group (a new
    /// generation, so every earlier id answers `stale`). The declaration stays.
    pub fn reset(&self, tenant: Uuid, queue: &str) -> u64 {
        let Ok(Some(ring)) = self.ring(tenant, queue, false) else {
            return 0;
        };
        let mut s = ring.lock();
        let dropped = s.clear(self);
        s.generation = self.generations.fetch_add(1, Ordering::Relaxed);
        add(&self.stats.dropped_reset, dropped);
        dropped
    }

    /// Appends `payloads` (JSON texts) to one partition, all or nothing.
    pub fn push(
        &self,
        tenant: Uuid,
        queue: &str,
        partition: Option<&str>,
        payloads: Vec<Arc<str>>,
    ) -> Result<usize, Refusal> {
        let ring = self.ring(tenant, queue, true)?.expect("created");
        let now = Instant::now();
        let n = payloads.len();
        let result = {
            let mut s = ring.lock();
            s.expire_ttl(now, self);
            s.push(self, partition.unwrap_or(DEFAULT_PARTITION), payloads, now)
        };
        match &result {
            Ok(_) => {
                add(&self.stats.pushed, n as u64);
                ring.notify.notify_waiters();
            }
            Err(_) => add(&self.stats.rejected, 1),
        }
        result.map(|()| n)
    }

    /// One non-waiting pop (the route loops on the ring's `notify` for long-polls).
    pub fn pop(&self, ring: &Ring, ask: &PopAsk<'_>) -> Vec<Delivered> {
        let now = Instant::now();
        let mut s = ring.lock();
        s.expire_ttl(now, self);
        s.expire_leases(now, &self.stats);
        let out = s.pop(self.incarnation, ask, now, self);
        add(&self.stats.delivered, out.len() as u64);
        out
    }

    /// Acks of one request, each answered on its own.
    pub fn ack(
        &self,
        tenant: Uuid,
        queue: &str,
        group: Option<&str>,
        acks: &[(Option<MessageId>, AckStatus)],
    ) -> Vec<Outcome> {
        let ring = self.ring(tenant, queue, false).ok().flatten();
        let Some(ring) = ring else {
            return acks
                .iter()
                .map(|(id, _)| match id {
                    Some(_) => Outcome::Stale,
                    None => Outcome::Unknown,
                })
                .collect();
        };
        let now = Instant::now();
        let out: Vec<Outcome> = {
            let mut s = ring.lock();
            s.expire_leases(now, &self.stats);
            let out = acks
                .iter()
                .map(|(id, status)| match id {
                    None => Outcome::Unknown,
                    Some(id) if id.incarnation != self.incarnation => Outcome::Stale,
                    Some(id) => s.ack(id, group, *status, self),
                })
                .collect();
            let mut touched: Vec<usize> = acks
                .iter()
                .filter_map(|(id, _)| id.map(|id| id.partition as usize))
                .filter(|&p| p < s.parts.len())
                .collect();
            touched.sort_unstable();
            touched.dedup();
            for p in touched {
                s.trim(p, self);
            }
            out
        };
        if out.contains(&Outcome::Redelivered) {
            ring.notify.notify_waiters();
        }
        out
    }

    /// Depth gauges of one queue (None: no such queue, declared or live).
    pub fn depth(&self, tenant: Uuid, queue: &str) -> Option<Value> {
        match self.ring(tenant, queue, false).ok().flatten() {
            Some(r) => Some(r.lock().depth(queue)),
            None => self
                .declared()
                .get(&(tenant, queue.to_string()))
                .map(|o| RingState::new(o.clone(), true, 0).depth(queue)),
        }
    }

    /// The queues of `tenant` this broker holds (live or declared) that `keep` admits
    /// (the route keeps those it owns), as `queues` lists them.
    pub fn list(&self, tenant: Uuid, keep: impl Fn(&str) -> bool) -> Vec<QueueSummary> {
        let mut out: BTreeMap<String, QueueSummary> = BTreeMap::new();
        for ((t, q), r) in self.rings().iter() {
            if *t == tenant && keep(q) {
                out.insert(q.clone(), r.lock().summary(q));
            }
        }
        for ((t, q), o) in self.declared().iter() {
            if *t == tenant && keep(q) && !out.contains_key(q) {
                out.insert(q.clone(), RingState::new(o.clone(), true, 0).summary(q));
            }
        }
        out.into_values().collect()
    }

    /// Ages out messages past their ttl, expires leases, forgets idle groups and idle
    /// empty undeclared rings (the server's sweeper calls this every second).
    pub fn sweep(&self) {
        let keys: Vec<Key> = self.rings().keys().cloned().collect();
        for (t, q) in keys {
            self.sweep_one(t, &q);
        }
    }

    fn sweep_one(&self, tenant: Uuid, queue: &str) {
        let Ok(Some(ring)) = self.ring(tenant, queue, false) else {
            return;
        };
        let now = Instant::now();
        let idle = {
            let mut s = ring.lock();
            s.expire_ttl(now, self);
            let redelivered = s.expire_leases(now, &self.stats);
            s.forget_idle_groups(now);
            s.trim_all(self);
            if redelivered {
                ring.notify.notify_waiters();
            }
            !s.declared && s.length == 0 && s.groups.is_empty() && now - s.touched > GROUP_IDLE
        };
        if idle {
            let mut rings = self.rings();
            let key = (tenant, queue.to_string());
            // Only if nobody took it up again in between (a long-poll holds an Arc).
            if rings.get(&key).is_some_and(|r| Arc::strong_count(r) <= 2) {
                rings.remove(&key);
            }
        }
    }

    pub fn gauges(&self) -> Gauges {
        let rings = self.rings();
        Gauges {
            queues: rings.len() as u64,
            messages: rings.values().map(|r| r.lock().length).sum(),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    fn charge(&self, bytes: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                (b + bytes <= self.budget).then_some(b + bytes)
            })
            .is_ok()
    }

    fn release(&self, bytes: u64) {
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }
}

impl Ring {
    fn lock(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().expect("ephemeral ring poisoned")
    }

    /// The queue's `windowBuffer`, if declared.
    pub fn window(&self) -> Option<Window> {
        self.lock().options.window
    }
}

impl RingState {
    fn new(options: Options, declared: bool, generation: u32) -> RingState {
        let now = Instant::now();
        RingState {
            options,
            declared,
            generation,
            parts: Vec::new(),
            part_index: HashMap::new(),
            groups: HashMap::new(),
            length: 0,
            bytes: 0,
            stamp: 0,
            turn: 0,
            next_expiry: None,
            created: now,
            touched: now,
        }
    }

    /// Drops everything; the number of messages dropped.
    fn clear(&mut self, store: &Store) -> u64 {
        let dropped = self.length;
        store.release(self.bytes);
        self.parts.clear();
        self.part_index.clear();
        self.groups.clear();
        self.length = 0;
        self.bytes = 0;
        self.next_expiry = None;
        dropped
    }

    fn push(
        &mut self,
        store: &Store,
        partition: &str,
        payloads: Vec<Arc<str>>,
        now: Instant,
    ) -> Result<(), Refusal> {
        let n = payloads.len() as u64;
        let size: u64 = payloads.iter().map(|p| p.len() as u64).sum();
        let o = &self.options;
        if n > o.max_length || size > o.max_bytes {
            return Err(Refusal::TooLarge(format!(
                "{n} messages of {size} bytes can never fit this queue \
                 (maxLength {}, maxBytes {})",
                o.max_length, o.max_bytes
            )));
        }
        let p = match self.part_index.get(partition) {
            Some(&p) => p,
            None if self.parts.len() >= MAX_PARTITIONS => return Err(Refusal::PartitionLimit),
            None => u32::MAX,
        };
        let overflow = (self.length + n).saturating_sub(o.max_length);
        let over_bytes = (self.bytes + size).saturating_sub(o.max_bytes);
        let (drop_count, freed) = if overflow == 0 && over_bytes == 0 {
            (0, 0)
        } else if o.policy == Overflow::Reject {
            return Err(Refusal::Full {
                length: self.length,
                bytes: self.bytes,
            });
        } else {
            self.oldest_to_drop(overflow, over_bytes)
        };
        // The budget is charged net of what drop_oldest frees, before anything changes.
        if size > freed && !store.charge(size - freed) {
            return Err(Refusal::Memory);
        }
        for _ in 0..drop_count {
            self.drop_oldest(store, &store.stats.dropped_overflow, true);
        }
        if freed > size {
            store.release(freed - size);
        }
        let p = if p == u32::MAX {
            self.parts.push(Part {
                name: partition.to_string(),
                base: 0,
                msgs: VecDeque::new(),
            });
            let p = (self.parts.len() - 1) as u32;
            self.part_index.insert(partition.to_string(), p);
            p
        } else {
            p
        };
        for payload in payloads {
            self.stamp += 1;
            self.parts[p as usize].msgs.push_back(Msg {
                payload,
                at: now,
                stamp: self.stamp,
            });
        }
        self.length += n;
        self.bytes += size;
        self.touched = now;
        Ok(())
    }

    /// How many of the oldest messages (across partitions) must go for `count` fewer
    /// messages and `bytes` fewer bytes, and the bytes they free; nothing is changed.
    fn oldest_to_drop(&self, count: u64, bytes: u64) -> (u64, u64) {
        let mut heads: Vec<usize> = vec![0; self.parts.len()];
        let (mut dropped, mut freed) = (0u64, 0u64);
        while dropped < count || freed < bytes {
            let next = (0..self.parts.len())
                .filter_map(|i| self.parts[i].msgs.get(heads[i]).map(|m| (m.stamp, i)))
                .min();
            let Some((_, i)) = next else { break };
            freed += self.parts[i].msgs[heads[i]].payload.len() as u64;
            heads[i] += 1;
            dropped += 1;
        }
        (dropped, freed)
    }

    /// Drops the oldest message of the ring, counting it under `reason`; `freed_already`
    /// when the caller settles the byte budget itself.
    fn drop_oldest(&mut self, store: &Store, reason: &AtomicU64, freed_already: bool) {
        let oldest = (0..self.parts.len())
            .filter_map(|i| self.parts[i].msgs.front().map(|m| (m.stamp, i)))
            .min();
        if let Some((_, i)) = oldest {
            self.drop_front(i, store, reason, freed_already);
        }
    }

    fn drop_front(&mut self, i: usize, store: &Store, reason: &AtomicU64, freed_already: bool) {
        let Some(m) = self.parts[i].msgs.pop_front() else {
            return;
        };
        let size = m.payload.len() as u64;
        self.parts[i].base += 1;
        self.length -= 1;
        self.bytes -= size;
        if !freed_already {
            store.release(size);
        }
        add(reason, 1);
        let base = self.parts[i].base;
        for g in self.groups.values_mut() {
            if let Some(c) = g.cursors.get_mut(&(i as u32)) {
                c.raise(base);
            }
        }
    }

    fn expire_ttl(&mut self, now: Instant, store: &Store) {
        if self.options.ttl_seconds == 0 {
            return;
        }
        let ttl = Duration::from_secs(self.options.ttl_seconds);
        for i in 0..self.parts.len() {
            while self.parts[i]
                .msgs
                .front()
                .is_some_and(|m| now.duration_since(m.at) >= ttl)
            {
                self.drop_front(i, store, &store.stats.dropped_ttl, false);
            }
        }
    }

    /// Leases past their deadline come back with one more attempt, or are dropped past
    /// the retry budget. Whether any message became ready again.
    fn expire_leases(&mut self, now: Instant, stats: &EphemeralStats) -> bool {
        if self.next_expiry.is_none_or(|t| t > now) {
            return false;
        }
        let limit = self.options.retry_limit;
        let mut next: Option<Instant> = None;
        let mut back = false;
        for g in self.groups.values_mut() {
            for c in g.cursors.values_mut() {
                let mut gone = Vec::new();
                for (&seq, pe) in c.pending.iter_mut() {
                    match pe.deadline {
                        Some(d) if d <= now => {
                            pe.deadline = None;
                            pe.attempts += 1;
                            if exhausted(pe.attempts, limit) {
                                gone.push(seq);
                            } else {
                                c.ready.insert(seq);
                                add(&stats.redelivered, 1);
                                back = true;
                            }
                        }
                        Some(d) => next = Some(next.map_or(d, |n| n.min(d))),
                        None => {}
                    }
                }
                for seq in gone {
                    c.pending.remove(&seq);
                    add(&stats.dropped_retry, 1);
                }
            }
        }
        self.next_expiry = next;
        back
    }

    fn forget_idle_groups(&mut self, now: Instant) {
        self.groups
            .retain(|_, g| g.leases() > 0 || now.duration_since(g.last_pop) < GROUP_IDLE);
    }

    fn pop(
        &mut self,
        incarnation: u64,
        ask: &PopAsk<'_>,
        now: Instant,
        store: &Store,
    ) -> Vec<Delivered> {
        self.touched = now;
        let order: Vec<usize> = match ask.partition {
            Some(name) => self
                .part_index
                .get(name)
                .map(|&p| p as usize)
                .into_iter()
                .collect(),
            None => {
                let n = self.parts.len();
                let start = if n == 0 { 0 } else { self.turn % n };
                self.turn = self.turn.wrapping_add(1);
                (0..n).map(|k| (start + k) % n).collect()
            }
        };
        let group_name = ask.group.unwrap_or(QUEUE_MODE).to_string();
        let tag = group_tag(&group_name);
        let lease = Duration::from_secs(self.options.lease_seconds);
        let deadline = now + lease;
        let mut out = Vec::new();
        let g = self.groups.entry(group_name).or_insert_with(|| Group {
            cursors: HashMap::new(),
            last_pop: now,
        });
        g.last_pop = now;
        let mut visited = Vec::new();
        for p in order {
            if out.len() >= ask.batch {
                break;
            }
            visited.push(p);
            let part = &self.parts[p];
            let c = g.cursors.entry(p as u32).or_insert_with(|| Cursor {
                next: part.base,
                ..Cursor::default()
            });
            c.raise(part.base);
            let id = |seq: u64, delivery: u32| MessageId {
                incarnation,
                generation: self.generation,
                group: tag,
                partition: p as u32,
                seq,
                delivery,
            };
            let payload = |seq: u64| part.msgs[(seq - part.base) as usize].payload.clone();
            // Redeliveries first: FIFO per partition.
            while out.len() < ask.batch {
                let Some(seq) = c.ready.pop_first() else {
                    break;
                };
                let pe = c.pending.get_mut(&seq).expect("ready is part of pending");
                pe.delivery += 1;
                out.push(Delivered {
                    id: id(seq, pe.delivery).to_string(),
                    partition: part.name.clone(),
                    payload: payload(seq),
                    attempts: pe.attempts,
                });
                if ask.auto_ack {
                    c.pending.remove(&seq);
                } else {
                    pe.deadline = Some(deadline);
                }
            }
            while out.len() < ask.batch && c.next < part.end() {
                let seq = c.next;
                c.next += 1;
                out.push(Delivered {
                    id: id(seq, 1).to_string(),
                    partition: part.name.clone(),
                    payload: payload(seq),
                    attempts: 0,
                });
                if !ask.auto_ack {
                    c.pending.insert(
                        seq,
                        Pending {
                            attempts: 0,
                            delivery: 1,
                            deadline: Some(deadline),
                        },
                    );
                }
            }
        }
        if !ask.auto_ack && !out.is_empty() {
            self.next_expiry = Some(self.next_expiry.map_or(deadline, |t| t.min(deadline)));
        }
        for p in visited {
            self.trim(p, store);
        }
        out
    }

    fn ack(
        &mut self,
        id: &MessageId,
        group: Option<&str>,
        status: AckStatus,
        store: &Store,
    ) -> Outcome {
        if id.generation != self.generation {
            return Outcome::Stale;
        }
        let limit = self.options.retry_limit;
        let group = group.unwrap_or(QUEUE_MODE);
        if id.group != group_tag(group) {
            return Outcome::Unknown;
        }
        let Some(c) = self
            .groups
            .get_mut(group)
            .and_then(|g| g.cursors.get_mut(&id.partition))
        else {
            return Outcome::Unknown;
        };
        let Some(pe) = c.pending.get_mut(&id.seq) else {
            return Outcome::Unknown;
        };
        if pe.delivery != id.delivery {
            // A newer delivery of the message is out: this id no longer names it.
            return Outcome::Stale;
        }
        let stats = &store.stats;
        match status {
            AckStatus::Completed => {
                c.pending.remove(&id.seq);
                c.ready.remove(&id.seq);
                add(&stats.acked, 1);
                Outcome::Acked
            }
            // Its lease expired already and it waits for redelivery: charged once.
            AckStatus::Failed if pe.deadline.is_none() => Outcome::Redelivered,
            AckStatus::Failed => {
                pe.deadline = None;
                pe.attempts += 1;
                if exhausted(pe.attempts, limit) {
                    c.pending.remove(&id.seq);
                    add(&stats.dropped_retry, 1);
                    Outcome::AckedDropped
                } else {
                    c.ready.insert(id.seq);
                    add(&stats.redelivered, 1);
                    Outcome::Redelivered
                }
            }
        }
    }

    /// Drops, from the front of each partition, what every group is past.
    /// Drops, from the front of every partition, what every group is past (the sweep).
    fn trim_all(&mut self, store: &Store) {
        for i in 0..self.parts.len() {
            self.trim(i, store);
        }
    }

    /// Drops, from the front of partition `i`, what every group is past. Only a pop or
    /// an ack of that partition moves its floor, so they trim just the ones they touched.
    fn trim(&mut self, i: usize, store: &Store) {
        if self.groups.is_empty() {
            return;
        }
        let base = self.parts[i].base;
        let floor = self
            .groups
            .values()
            .map(|g| g.cursors.get(&(i as u32)).map_or(base, Cursor::floor))
            .min()
            .unwrap_or(base);
        let n = floor
            .saturating_sub(base)
            .min(self.parts[i].msgs.len() as u64);
        for _ in 0..n {
            let m = self.parts[i].msgs.pop_front().expect("counted");
            let size = m.payload.len() as u64;
            self.length -= 1;
            self.bytes -= size;
            store.release(size);
        }
        self.parts[i].base += n;
    }

    fn summary(&self, queue: &str) -> QueueSummary {
        QueueSummary {
            queue: queue.to_string(),
            declared: self.declared,
            length: self.length,
            bytes: self.bytes,
            partitions: self.parts.len(),
            groups: self.groups.len(),
            options: self.options.to_wire(),
        }
    }

    fn depth(&self, queue: &str) -> Value {
        /// One group's row of a queue's depth.
        #[derive(Serialize)]
        struct GroupDepth<'a> {
            group: Option<&'a str>,
            leased: usize,
            redeliveries: usize,
            undelivered: u64,
        }

        let partitions: Vec<Value> = self
            .parts
            .iter()
            .map(|p| {
                json!({
                    "partition": p.name,
                    "length": p.msgs.len(),
                    "bytes": p.msgs.iter().map(|m| m.payload.len()).sum::<usize>(),
                })
            })
            .collect();
        let mut groups: Vec<GroupDepth> = self
            .groups
            .iter()
            .map(|(name, g)| {
                let (mut leased, mut waiting, mut undelivered) = (0usize, 0usize, 0u64);
                for (p, part) in self.parts.iter().enumerate() {
                    match g.cursors.get(&(p as u32)) {
                        Some(c) => {
                            leased += c.pending.len() - c.ready.len();
                            waiting += c.ready.len();
                            undelivered += part.end().saturating_sub(c.next);
                        }
                        None => undelivered += part.msgs.len() as u64,
                    }
                }
                GroupDepth {
                    group: (name != QUEUE_MODE).then_some(name.as_str()),
                    leased,
                    redeliveries: waiting,
                    undelivered,
                }
            })
            .collect();
        // Named groups by name, queue mode (null) last.
        groups.sort_by(|a, b| (a.group.is_none(), a.group).cmp(&(b.group.is_none(), b.group)));
        let mut v = json!(self.summary(queue));
        v["partitions"] = Value::Array(partitions);
        v["groups"] = json!(groups);
        v["ageSeconds"] = json!(self.created.elapsed().as_secs());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> Store {
        Store::new(1 << 30, 100)
    }

    fn msgs(n: usize) -> Vec<Arc<str>> {
        (0..n)
            .map(|i| Arc::from(format!("{{\"i\":{i}}}")))
            .collect()
    }

    fn pop(s: &Store, q: &str, group: Option<&str>, batch: usize) -> Vec<Delivered> {
        let ring = s.ring(Uuid::nil(), q, true).unwrap().unwrap();
        s.pop(
            &ring,
            &PopAsk {
                partition: None,
                group,
                batch,
                auto_ack: false,
            },
        )
    }

    fn ack(
        s: &Store,
        q: &str,
        group: Option<&str>,
        ids: &[&str],
        status: AckStatus,
    ) -> Vec<Outcome> {
        let acks: Vec<_> = ids.iter().map(|i| (MessageId::parse(i), status)).collect();
        s.ack(Uuid::nil(), q, group, &acks)
    }

    #[test]
    fn depth_lists_named_groups_by_name_and_queue_mode_last() {
        let s = store();
        s.push(Uuid::nil(), "q", None, msgs(3)).unwrap();
        pop(&s, "q", None, 1);
        pop(&s, "q", Some("zeta"), 2);
        pop(&s, "q", Some("alpha"), 3);
        let d = s.depth(Uuid::nil(), "q").unwrap();
        assert_eq!(
            d["groups"],
            json!([
                {"group": "alpha", "leased": 3, "redeliveries": 0, "undelivered": 0},
                {"group": "zeta", "leased": 2, "redeliveries": 0, "undelivered": 1},
                {"group": null, "leased": 1, "redeliveries": 0, "undelivered": 2},
            ])
        );
        assert_eq!(s.list(Uuid::nil(), |_| true)[0].queue, "q");
    }

    #[test]
    fn competing_within_a_group_fanning_out_across_groups() {
        let s = store();
        s.push(Uuid::nil(), "q", None, msgs(4)).unwrap();
        let a = pop(&s, "q", Some("w"), 2);
        let b = pop(&s, "q", Some("w"), 10);
        assert_eq!((a.len(), b.len()), (2, 2));
        assert_eq!(&*b[0].payload, "{\"i\":2}");
        assert_eq!(pop(&s, "q", Some("tail"), 10).len(), 4);
        assert_eq!(pop(&s, "q", None, 10).len(), 4);
        let ids: Vec<&str> = a.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(
            ack(&s, "q", None, &ids, AckStatus::Completed),
            [Outcome::Unknown; 2],
            "another group's ids"
        );
        assert_eq!(
            ack(&s, "q", Some("w"), &ids, AckStatus::Completed),
            [Outcome::Acked; 2]
        );
    }

    #[test]
    fn a_message_leaves_the_ring_once_every_group_is_past_it() {
        let s = store();
        s.push(Uuid::nil(), "q", None, msgs(3)).unwrap();
        let a = pop(&s, "q", Some("a"), 3);
        let b = pop(&s, "q", Some("b"), 1);
        let ids: Vec<&str> = a.iter().map(|d| d.id.as_str()).collect();
        assert!(ack(&s, "q", Some("a"), &ids, AckStatus::Completed)
            .iter()
            .all(|o| *o == Outcome::Acked));
        assert_eq!(s.gauges().messages, 3, "b has not consumed them");
        ack(&s, "q", Some("b"), &[&b[0].id], AckStatus::Completed);
        assert_eq!(s.gauges().messages, 2);
        assert_eq!(s.gauges().bytes, 14);
    }

    #[test]
    fn a_failure_redelivers_with_one_more_attempt_until_the_budget_drops_it() {
        let s = store();
        s.declare(
            Uuid::nil(),
            "q",
            Options {
                retry_limit: 1,
                ..Options::default()
            },
        );
        s.push(Uuid::nil(), "q", None, msgs(1)).unwrap();
        let d = pop(&s, "q", None, 1);
        assert_eq!(
            ack(&s, "q", None, &[&d[0].id], AckStatus::Failed),
            [Outcome::Redelivered]
        );
        let d2 = pop(&s, "q", None, 1);
        assert_eq!(d2[0].attempts, 1);
        assert_eq!(
            ack(&s, "q", None, &[&d[0].id], AckStatus::Completed),
            [Outcome::Stale]
        );
        assert_eq!(
            ack(&s, "q", None, &[&d2[0].id], AckStatus::Failed),
            [Outcome::AckedDropped]
        );
        assert_eq!(s.stats.dropped_retry.load(Ordering::Relaxed), 1);
        assert!(pop(&s, "q", None, 1).is_empty());
        assert_eq!(s.gauges().messages, 0);
        assert_eq!(
            ack(&s, "q", None, &[&d2[0].id], AckStatus::Completed),
            [Outcome::Unknown]
        );
    }

    #[test]
    fn reject_refuses_whole_and_drop_oldest_feeds() {
        let s = store();
        let o = Options {
            max_length: 3,
            ..Options::default()
        };
        s.declare(Uuid::nil(), "r", o.clone());
        s.push(Uuid::nil(), "r", None, msgs(2)).unwrap();
        assert!(matches!(
            s.push(Uuid::nil(), "r", None, msgs(2)),
            Err(Refusal::Full { .. })
        ));
        assert!(matches!(
            s.push(Uuid::nil(), "r", None, msgs(4)),
            Err(Refusal::TooLarge(_))
        ));
        assert_eq!(s.gauges().messages, 2);
        s.declare(
            Uuid::nil(),
            "d",
            Options {
                policy: Overflow::DropOldest,
                ..o
            },
        );
        s.push(Uuid::nil(), "d", Some("a"), msgs(2)).unwrap();
        s.push(Uuid::nil(), "d", Some("b"), msgs(2)).unwrap();
        assert_eq!(s.stats.dropped_overflow.load(Ordering::Relaxed), 1);
        let got = pop(&s, "d", None, 10);
        assert_eq!(got.len(), 3);
        assert_eq!(got.iter().filter(|d| d.partition == "a").count(), 1);
    }

    #[test]
    fn the_memory_budget_refuses_before_anything_changes() {
        let s = Store::new(20, 100);
        s.push(Uuid::nil(), "q", None, msgs(2)).unwrap();
        assert_eq!(
            s.push(Uuid::nil(), "q", None, msgs(1)),
            Err(Refusal::Memory)
        );
        assert_eq!(s.gauges().messages, 2);
        assert_eq!(s.gauges().bytes, 14);
        assert_eq!(s.reset(Uuid::nil(), "q"), 2);
        assert_eq!(s.gauges().bytes, 0);
    }

    #[test]
    fn reset_and_delete_make_earlier_ids_stale() {
        let s = store();
        s.push(Uuid::nil(), "q", None, msgs(1)).unwrap();
        let d = pop(&s, "q", None, 1);
        s.reset(Uuid::nil(), "q");
        assert_eq!(
            ack(&s, "q", None, &[&d[0].id], AckStatus::Completed),
            [Outcome::Stale]
        );
        assert!(s.delete(Uuid::nil(), "q"));
        assert!(!s.delete(Uuid::nil(), "q"));
        assert_eq!(
            ack(&s, "q", None, &[&d[0].id, "x"], AckStatus::Completed),
            [Outcome::Stale, Outcome::Unknown]
        );
        let other = store();
        other.push(Uuid::nil(), "q", None, msgs(1)).unwrap();
        let d = pop(&other, "q", None, 1);
        assert_eq!(
            ack(&s, "q", None, &[&d[0].id], AckStatus::Completed),
            [Outcome::Stale]
        );
    }

    #[test]
    fn auto_ack_leaves_nothing_to_ack() {
        let s = store();
        s.push(Uuid::nil(), "q", None, msgs(2)).unwrap();
        let ring = s.ring(Uuid::nil(), "q", false).unwrap().unwrap();
        let ask = PopAsk {
            partition: Some("Default"),
            group: None,
            batch: 5,
            auto_ack: true,
        };
        let d = s.pop(&ring, &ask);
        assert_eq!(d.len(), 2);
        assert_eq!(s.gauges().messages, 0);
        assert_eq!(
            ack(&s, "q", None, &[&d[0].id], AckStatus::Completed),
            [Outcome::Unknown]
        );
    }
}
