//! Pop hints: per (tenant, queue), the partitions this broker pushed to lately and no pop
//! of it has served since (the oldest go first when there are too many). A queue-level pop passes them to
//! `broker_pop_v1` (`p_hints`), which tries them before it reads a page of candidates
//! (docs/decisions.md, "Which partitions a queue pop tries"). Only a hint: the extension
//! claims each with its own checks and drops any that is not the queue's, so a stale or
//! wrong one costs a failed claim, never a wrong delivery. What it saves: while a queue
//! is pushed to and popped one message at a time, each pop's page of candidates (a join
//! over every partition of the queue) was most of what PostgreSQL spent on it, since the
//! page drains as fast as it is read.
//!
//! Fairness: hints are the partitions pushed to lately, not those waiting longest, so a
//! queue pushed to without pause could keep its pops on its hinted partitions while
//! others wait with older messages. Every [`FAIR_EVERY`]th pop of a queue goes without
//! hints and serves in the page's order, least recently leased first: no ready partition
//! waits for ever, and the page is read by one pop in eight.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use uuid::Uuid;

/// Hints kept per queue: the extension tries at most this many (src/pop.rs, MAX_HINTS).
pub const PER_QUEUE: usize = 32;
/// Past this many queues, the queues without hints are dropped, then all.
const MAX_QUEUES: usize = 4096;
/// One pop in this many of a queue goes without hints (see the module docs).
pub const FAIR_EVERY: u64 = 8;

#[derive(Default)]
struct Queue {
    hints: VecDeque<Uuid>,
    pops: u64,
    /// Appends woken without a partition id (a transaction's pushes, a DLQ requeue, ...):
    /// no hint stands for them.
    unhinted: u64,
}

#[derive(Default)]
pub struct Hints {
    queues: Mutex<HashMap<(Uuid, String), Queue>>,
}

impl Hints {
    /// A push to `pid` committed: a hint, unless it is one already (it keeps its place).
    pub fn pushed(&self, tenant: Uuid, queue: &str, pid: Uuid) {
        let mut map = self.queues.lock().expect("hints lock");
        if map.len() >= MAX_QUEUES && !map.contains_key(&(tenant, queue.to_string())) {
            map.retain(|_, q| !q.hints.is_empty());
            if map.len() >= MAX_QUEUES {
                map.clear();
            }
        }
        let hints = &mut map.entry((tenant, queue.to_string())).or_default().hints;
        if !hints.contains(&pid) {
            if hints.len() == PER_QUEUE {
                hints.pop_front();
            }
            hints.push_back(pid);
        }
    }

    /// The hints for a pop of a queue, oldest first; none for one pop in [`FAIR_EVERY`].
    pub fn for_pop(&self, tenant: Uuid, queue: &str) -> Vec<Uuid> {
        let mut map = self.queues.lock().expect("hints lock");
        let Some(q) = map.get_mut(&(tenant, queue.to_string())) else {
            return Vec::new();
        };
        q.pops += 1;
        if q.pops % FAIR_EVERY == 0 {
            return Vec::new();
        }
        q.hints.iter().copied().collect()
    }

    /// Messages were appended to `queue` that no hint stands for.
    pub fn unhinted(&self, tenant: Uuid, queue: &str) {
        let mut map = self.queues.lock().expect("hints lock");
        if map.len() < MAX_QUEUES || map.contains_key(&(tenant, queue.to_string())) {
            map.entry((tenant, queue.to_string())).or_default().unhinted += 1;
        }
    }

    /// Whether a long-poll of `queue` woken by an append should pop again: a hint stands,
    /// or an append no hint stands for came since `seen` (what this returned last; 0 at
    /// first). Without either, every append since has been served by a pop of this
    /// broker, and popping again would only read a page to answer nothing (eight waiters
    /// woken by one push, seven such pops). Returns the new `seen`.
    pub fn worth_a_pop(&self, tenant: Uuid, queue: &str, seen: u64) -> (bool, u64) {
        let map = self.queues.lock().expect("hints lock");
        match map.get(&(tenant, queue.to_string())) {
            Some(q) => (!q.hints.is_empty() || q.unhinted != seen, q.unhinted),
            None => (true, seen),
        }
    }

    /// The hints of a queue as they stand, oldest first.
    pub fn of(&self, tenant: Uuid, queue: &str) -> Vec<Uuid> {
        let map = self.queues.lock().expect("hints lock");
        map.get(&(tenant, queue.to_string()))
            .map(|q| q.hints.iter().copied().collect())
            .unwrap_or_default()
    }

    /// A pop of this broker served these partitions: they are leased or drained now.
    pub fn served(&self, tenant: Uuid, queue: &str, pids: &[Uuid]) {
        let mut map = self.queues.lock().expect("hints lock");
        if let Some(q) = map.get_mut(&(tenant, queue.to_string())) {
            q.hints.retain(|p| !pids.contains(p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_are_oldest_first_kept_once_bounded_and_dropped_when_served() {
        let h = Hints::default();
        let t = Uuid::nil();
        let p: Vec<Uuid> = (0..PER_QUEUE + 2).map(|_| Uuid::new_v4()).collect();
        h.pushed(t, "q", p[0]);
        h.pushed(t, "q", p[1]);
        h.pushed(t, "q", p[0]);
        assert_eq!(
            h.of(t, "q"),
            [p[0], p[1]],
            "a second push keeps the first place"
        );
        assert!(h.of(t, "other").is_empty() && h.of(Uuid::new_v4(), "q").is_empty());
        h.served(t, "q", &[p[0]]);
        assert_eq!(h.of(t, "q"), [p[1]]);
        for id in &p[2..] {
            h.pushed(t, "q", *id);
        }
        let now = h.of(t, "q");
        assert_eq!(now.len(), PER_QUEUE, "bounded");
        assert_eq!(now[0], p[2], "the oldest went first");
    }

    #[test]
    fn a_woken_long_poll_pops_for_a_hint_or_an_append_no_hint_stands_for() {
        let h = Hints::default();
        let (t, p) = (Uuid::nil(), Uuid::new_v4());
        assert_eq!(h.worth_a_pop(t, "q", 0), (true, 0), "unknown queue: pop");
        h.pushed(t, "q", p);
        let (worth, seen) = h.worth_a_pop(t, "q", 0);
        assert!(worth, "a hint stands");
        h.served(t, "q", &[p]);
        assert_eq!(
            h.worth_a_pop(t, "q", seen),
            (false, seen),
            "served since: no pop"
        );
        h.unhinted(t, "q");
        let (worth, seen2) = h.worth_a_pop(t, "q", seen);
        assert!(worth && seen2 == seen + 1, "an append no hint stands for");
        assert!(!h.worth_a_pop(t, "q", seen2).0);
    }

    #[test]
    fn one_pop_in_eight_goes_without_hints() {
        let h = Hints::default();
        let t = Uuid::nil();
        h.pushed(t, "q", Uuid::new_v4());
        let empties = (0..24).filter(|_| h.for_pop(t, "q").is_empty()).count();
        assert_eq!(empties as u64, 24 / FAIR_EVERY);
        assert!(h.for_pop(t, "unknown").is_empty());
    }
}
