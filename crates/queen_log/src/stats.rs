//! Lag and queue statistics: what `queen.queue_stats_v1` reports per (partition, consumer
//! group) rolled up per partition, per group and per queue, with Queen's arithmetic for
//! its admin views (total, pending, processing, completed, deadLetter). The broker reads
//! the SQL rows into these types and renders Queen's shapes and the Prometheus gauges
//! from the same roll-ups, so every view counts alike.

use crate::conventions::QUEUE_MODE;

/// One (partition, group) cursor as `queue_stats_v1` reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cursor {
    pub group: String,
    pub committed: i64,
    /// Messages still to deliver: `last_offset − max(committed, log_start − 1)`.
    pub lag: i64,
    /// Created_at of the first message the group has not consumed (UTC text), if lagging.
    pub oldest_unconsumed_at: Option<String>,
    /// Its age in seconds (the database's clock).
    pub oldest_unconsumed_age_s: Option<f64>,
    /// A live lease is held.
    pub leased: bool,
    /// Messages under that lease: `batch_end − committed`.
    pub leased_messages: i64,
    /// The live lease's worker (leaseId).
    pub worker: Option<String>,
    /// Retry budget spent on the batch at the cursor (`batch_retry_count`).
    pub retries: i64,
    pub total_consumed: i64,
    /// Messages retention took before the group consumed them.
    pub evicted: i64,
    /// Messages forward seeks moved the cursor over unconsumed.
    pub skipped: i64,
    /// A nack's delay: the group's next pop of the partition waits until then (UTC text).
    pub redeliver_at: Option<String>,
    /// DLQ rows the group filed on this partition.
    pub dlq: i64,
}

/// One partition with its cursors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Partition {
    pub log_start: i64,
    pub last_offset: i64,
    pub cursors: Vec<Cursor>,
    /// Without any cursor: the oldest retained message (everything is unconsumed).
    pub oldest_at: Option<String>,
    pub oldest_age_s: Option<f64>,
}

/// Queen's message figures of a partition, or of many added up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Figures {
    /// Retained messages: `last_offset − log_start + 1`.
    pub total: i64,
    /// Not consumed by the slowest reader (leased ones included).
    pub pending: i64,
    /// Under a live lease (capped at pending).
    pub processing: i64,
    /// `total − pending − deadLetter`, never negative.
    pub completed: i64,
    pub dead_letter: i64,
}

impl Figures {
    pub fn add(&mut self, o: &Figures) {
        self.total += o.total;
        self.pending += o.pending;
        self.processing += o.processing;
        self.completed += o.completed;
        self.dead_letter += o.dead_letter;
    }

    /// Pending and not leased: what a pop could take now (delays aside).
    pub fn ready(&self) -> i64 {
        (self.pending - self.processing).max(0)
    }
}

impl Partition {
    /// The cursors that define the slowest reader, as Queen counts it: the named groups,
    /// or the queue-mode cursor when there is no named group.
    fn readers(&self) -> impl Iterator<Item = &Cursor> {
        let named = self.cursors.iter().any(|c| c.group != QUEUE_MODE);
        self.cursors
            .iter()
            .filter(move |c| !named || c.group != QUEUE_MODE)
    }

    /// The slowest reader's committed offset; −1 (nothing consumed) without cursors.
    pub fn floor(&self) -> i64 {
        self.readers().map(|c| c.committed).min().unwrap_or(-1)
    }

    pub fn figures(&self) -> Figures {
        let total = (self.last_offset - self.log_start + 1).max(0);
        let pending = (self.last_offset - self.floor().max(self.log_start - 1)).max(0);
        let leased: i64 = self.cursors.iter().map(|c| c.leased_messages).sum();
        let dead_letter: i64 = self.cursors.iter().map(|c| c.dlq).sum();
        Figures {
            total,
            pending,
            processing: leased.min(pending),
            completed: (total - pending - dead_letter).max(0),
            dead_letter,
        }
    }

    /// The oldest message the slowest reader has not consumed: (UTC text, age seconds).
    pub fn oldest_unconsumed(&self) -> Option<(&str, f64)> {
        if self.cursors.is_empty() {
            return self.oldest_at.as_deref().zip(self.oldest_age_s);
        }
        self.readers()
            .filter_map(|c| {
                c.oldest_unconsumed_at
                    .as_deref()
                    .zip(c.oldest_unconsumed_age_s)
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// One consumer group's cursors of a queue, added up.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupTotals {
    /// Partitions the group has a cursor on.
    pub partitions: usize,
    pub partitions_with_lag: usize,
    pub lag: i64,
    /// The oldest unconsumed message's age over its partitions, seconds.
    pub max_age_s: Option<f64>,
    pub leased_partitions: usize,
    pub leased_messages: i64,
    /// Distinct workers holding a live lease.
    pub workers: usize,
    pub retries: i64,
    pub total_consumed: i64,
    pub evicted: i64,
    pub skipped: i64,
    pub dlq: i64,
}

impl GroupTotals {
    pub fn of<'a>(cursors: impl IntoIterator<Item = &'a Cursor>) -> GroupTotals {
        let mut t = GroupTotals::default();
        let mut workers = std::collections::BTreeSet::new();
        for c in cursors {
            t.partitions += 1;
            t.partitions_with_lag += usize::from(c.lag > 0);
            t.lag += c.lag;
            t.max_age_s = match (t.max_age_s, c.oldest_unconsumed_age_s) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            t.leased_partitions += usize::from(c.leased);
            t.leased_messages += c.leased_messages;
            if let Some(w) = c.worker.as_deref().filter(|_| c.leased) {
                workers.insert(w);
            }
            t.retries += c.retries;
            t.total_consumed += c.total_consumed;
            t.evicted += c.evicted;
            t.skipped += c.skipped;
            t.dlq += c.dlq;
        }
        t.workers = workers.len();
        t
    }

    /// Queen's consumer-group state: Lagging when its oldest unconsumed message is older
    /// than five minutes, else Stable once it consumed anything, else Dead.
    pub fn state(&self) -> &'static str {
        if self.max_age_s.is_some_and(|a| a > LAGGING_AFTER_S) {
            "Lagging"
        } else if self.total_consumed > 0 {
            "Stable"
        } else {
            "Dead"
        }
    }
}

/// Queen's threshold for a Lagging consumer group, seconds.
pub const LAGGING_AFTER_S: f64 = 300.0;

/// Nearest-rank median of some figures (0 when there are none).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[(v.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(group: &str, committed: i64, leased_messages: i64, dlq: i64) -> Cursor {
        Cursor {
            group: group.into(),
            committed,
            leased: leased_messages > 0,
            leased_messages,
            dlq,
            ..Cursor::default()
        }
    }

    fn partition(log_start: i64, last_offset: i64, cursors: Vec<Cursor>) -> Partition {
        Partition {
            log_start,
            last_offset,
            cursors,
            ..Partition::default()
        }
    }

    #[test]
    fn the_slowest_named_group_defines_pending_and_queue_mode_only_without_one() {
        let p = partition(
            0,
            9,
            vec![
                cursor(QUEUE_MODE, 1, 0, 0),
                cursor("a", 6, 2, 1),
                cursor("b", 4, 0, 0),
            ],
        );
        assert_eq!(p.floor(), 4, "queue mode ignored beside named groups");
        let f = p.figures();
        assert_eq!((f.total, f.pending, f.processing), (10, 5, 2));
        assert_eq!((f.dead_letter, f.completed, f.ready()), (1, 4, 3));
        let q = partition(0, 9, vec![cursor(QUEUE_MODE, 1, 0, 0)]);
        assert_eq!((q.floor(), q.figures().pending), (1, 8));
    }

    #[test]
    fn without_cursors_everything_retained_is_pending() {
        let p = partition(5, 9, Vec::new());
        let f = p.figures();
        assert_eq!((f.total, f.pending, f.completed), (5, 5, 0));
        assert_eq!(partition(0, -1, Vec::new()).figures(), Figures::default());
        // A cursor below the log start (retention took what it had not read).
        let p = partition(5, 9, vec![cursor("a", 2, 0, 0)]);
        assert_eq!(p.figures().pending, 5);
    }

    #[test]
    fn processing_is_capped_at_pending_and_completed_never_negative() {
        let p = partition(0, 3, vec![cursor("a", 3, 0, 9), cursor("b", 2, 5, 0)]);
        let f = p.figures();
        assert_eq!((f.pending, f.processing, f.completed), (1, 1, 0));
    }

    #[test]
    fn the_oldest_unconsumed_is_the_slowest_readers() {
        let mut a = cursor("a", 1, 0, 0);
        a.oldest_unconsumed_at = Some("t1".into());
        a.oldest_unconsumed_age_s = Some(50.0);
        let mut b = cursor("b", 3, 0, 0);
        b.oldest_unconsumed_at = Some("t3".into());
        b.oldest_unconsumed_age_s = Some(10.0);
        let mut qm = cursor(QUEUE_MODE, 0, 0, 0);
        qm.oldest_unconsumed_at = Some("t0".into());
        qm.oldest_unconsumed_age_s = Some(90.0);
        let p = partition(0, 9, vec![a, b, qm]);
        assert_eq!(p.oldest_unconsumed(), Some(("t1", 50.0)));
        let empty = Partition {
            oldest_at: Some("t".into()),
            oldest_age_s: Some(3.0),
            ..partition(0, 0, Vec::new())
        };
        assert_eq!(empty.oldest_unconsumed(), Some(("t", 3.0)));
    }

    #[test]
    fn group_totals_add_up_and_count_distinct_live_workers() {
        let mut a = cursor("g", 1, 2, 1);
        a.lag = 4;
        a.worker = Some("w1".into());
        a.retries = 1;
        a.oldest_unconsumed_age_s = Some(400.0);
        let mut b = cursor("g", 5, 1, 0);
        b.lag = 0;
        b.worker = Some("w1".into());
        let mut c = cursor("g", 5, 0, 2);
        c.worker = Some("stale".into());
        c.total_consumed = 3;
        let t = GroupTotals::of([&a, &b, &c]);
        assert_eq!((t.partitions, t.partitions_with_lag, t.lag), (3, 1, 4));
        assert_eq!(
            (t.leased_partitions, t.leased_messages, t.workers),
            (2, 3, 1)
        );
        assert_eq!((t.dlq, t.retries, t.total_consumed), (3, 1, 3));
        assert_eq!(t.max_age_s, Some(400.0));
        assert_eq!(t.state(), "Lagging");
        assert_eq!(GroupTotals::of([&c]).state(), "Stable");
        assert_eq!(GroupTotals::of([&b]).state(), "Dead");
    }

    #[test]
    fn median_of_figures() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0]), 1.0);
    }
}
