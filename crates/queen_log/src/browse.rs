//! Message browsing (docs/decisions.md, "Browsing messages"): what a message's status is
//! for each consumer group of its partition and overall, from the cursors alone (a cursor
//! is an offset, so a status is a comparison, never a per-message row), and how a listing
//! walks its segments newest first, skipping and taking by offsets before it decodes
//! anything. The extension reads the rows and decodes only the segments this selects.

use serde::Serialize;

use crate::conventions::QUEUE_MODE;

/// Most messages one listing returns (SQL `list_messages_v1` and the broker's `limit`).
pub const MAX_PAGE: i64 = 1000;

/// One group's cursor on the partition, as far as a status needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CursorAt {
    pub group: String,
    pub committed: i64,
    /// The last offset of a live lease (None: no live lease).
    pub leased_to: Option<i64>,
}

/// A message's status: Queen's four words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    Processing,
    Completed,
    DeadLetter,
}

impl Status {
    /// The word of a `status` filter, or None for one that is not Queen's.
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "pending" => Some(Status::Pending),
            "processing" => Some(Status::Processing),
            "completed" => Some(Status::Completed),
            "dead_letter" => Some(Status::DeadLetter),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Processing => "processing",
            Status::Completed => "completed",
            Status::DeadLetter => "dead_letter",
        }
    }
}

/// The message at `offset` for one group: consumed once its cursor is at or past it,
/// processing while a live lease covers it, else pending.
pub fn group_status(offset: i64, c: &CursorAt) -> Status {
    if offset <= c.committed {
        Status::Completed
    } else if c.leased_to.is_some_and(|end| offset <= end) {
        Status::Processing
    } else {
        Status::Pending
    }
}

/// The message's overall status over every group of its partition: dead_letter when any
/// group filed it; completed when every group consumed it (a partition nobody reads
/// leaves it pending); processing when some group holds it under a live lease; else
/// pending. For a single reader this is Queen's queue-mode status, for many its
/// "consumed by all" rule.
pub fn status(offset: i64, cursors: &[CursorAt], dead_lettered: bool) -> Status {
    if dead_lettered {
        return Status::DeadLetter;
    }
    let each: Vec<Status> = cursors.iter().map(|c| group_status(offset, c)).collect();
    if !each.is_empty() && each.iter().all(|s| *s == Status::Completed) {
        Status::Completed
    } else if each.contains(&Status::Processing) {
        Status::Processing
    } else {
        Status::Pending
    }
}

/// How many groups have consumed the message (Queen's `busStatus.consumedBy`).
pub fn consumed_by(offset: i64, cursors: &[CursorAt]) -> usize {
    cursors.iter().filter(|c| offset <= c.committed).count()
}

/// Queen's `mode` of a set of cursors: whether queue mode reads, how many named groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mode {
    pub has_queue_mode: bool,
    pub bus_groups_count: usize,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

pub fn mode<'a>(groups: impl IntoIterator<Item = &'a str>) -> Mode {
    let mut named = std::collections::BTreeSet::new();
    let mut queue = false;
    for g in groups {
        if g == QUEUE_MODE {
            queue = true;
        } else {
            named.insert(g);
        }
    }
    let kind = match (queue, named.is_empty()) {
        (false, false) => "bus",
        (true, true) => "queue",
        (true, false) => "hybrid",
        (false, true) => "none",
    };
    Mode {
        has_queue_mode: queue,
        bus_groups_count: named.len(),
        kind,
    }
}

/// A stored segment as a listing sees it: which partition (an index into the caller's
/// partitions), its offsets, and the partition's log start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRef {
    pub partition: usize,
    pub base: i64,
    pub end: i64,
    pub log_start: i64,
}

/// One listed message: the segment (index into the walked list) and its offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    pub segment: usize,
    pub offset: i64,
    pub status: Status,
}

/// Walk `segments` (newest first) and their offsets (highest first, none below the log
/// start), keep those whose status `status_of` accepts under `want`, skip `skip` of them
/// and take at most `limit`. Nothing is decoded here: the caller decodes only the segments
/// of what is picked.
pub fn pick(
    segments: &[SegmentRef],
    want: Option<Status>,
    skip: usize,
    limit: usize,
    mut status_of: impl FnMut(usize, i64) -> Status,
) -> Vec<Picked> {
    let mut out = Vec::new();
    if limit == 0 {
        return out;
    }
    let mut to_skip = skip;
    for (i, s) in segments.iter().enumerate() {
        let low = s.base.max(s.log_start);
        if low > s.end {
            continue;
        }
        if want.is_none() && to_skip as i64 > s.end - low {
            to_skip -= (s.end - low + 1) as usize;
            continue;
        }
        for offset in (low..=s.end).rev() {
            let st = status_of(s.partition, offset);
            if want.is_some_and(|w| w != st) {
                continue;
            }
            if to_skip > 0 {
                to_skip -= 1;
                continue;
            }
            out.push(Picked {
                segment: i,
                offset,
                status: st,
            });
            if out.len() == limit {
                return out;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(group: &str, committed: i64, leased_to: Option<i64>) -> CursorAt {
        CursorAt {
            group: group.into(),
            committed,
            leased_to,
        }
    }

    #[test]
    fn a_group_status_is_a_comparison_with_its_cursor_and_lease() {
        let g = c("g", 4, Some(7));
        assert_eq!(group_status(4, &g), Status::Completed);
        assert_eq!(group_status(5, &g), Status::Processing);
        assert_eq!(group_status(7, &g), Status::Processing);
        assert_eq!(group_status(8, &g), Status::Pending);
        assert_eq!(group_status(5, &c("g", 4, None)), Status::Pending);
    }

    #[test]
    fn overall_status_needs_every_group_and_dead_letter_wins() {
        let cs = [c("a", 10, None), c("b", 3, Some(6))];
        assert_eq!(status(2, &cs, false), Status::Completed);
        assert_eq!(status(5, &cs, false), Status::Processing);
        assert_eq!(status(8, &cs, false), Status::Pending);
        assert_eq!(status(2, &cs, true), Status::DeadLetter);
        assert_eq!(
            status(0, &[], false),
            Status::Pending,
            "nobody reads it yet"
        );
        assert_eq!(consumed_by(5, &cs), 1);
    }

    #[test]
    fn modes_are_queens() {
        assert_eq!(mode([QUEUE_MODE]).kind, "queue");
        assert_eq!(mode(["a", "b", "a"]).bus_groups_count, 2);
        assert_eq!(mode(["a", QUEUE_MODE]).kind, "hybrid");
        assert_eq!(mode([]).kind, "none");
        assert_eq!(mode(["a"]).kind, "bus");
    }

    fn seg(partition: usize, base: i64, end: i64) -> SegmentRef {
        SegmentRef {
            partition,
            base,
            end,
            log_start: 0,
        }
    }

    #[test]
    fn pick_walks_newest_first_skips_then_takes() {
        let segs = [seg(0, 5, 9), seg(1, 0, 2), seg(0, 0, 4)];
        let offs = |p: Vec<Picked>| p.iter().map(|x| (x.segment, x.offset)).collect::<Vec<_>>();
        let all = pick(&segs, None, 0, 100, |_, _| Status::Pending);
        assert_eq!(all.len(), 13);
        assert_eq!(offs(all)[..3], [(0, 9), (0, 8), (0, 7)]);
        // A skip past a whole segment does not look at its offsets.
        let mut looked = 0;
        let p = pick(&segs, None, 6, 2, |_, _| {
            looked += 1;
            Status::Pending
        });
        assert_eq!(offs(p), [(1, 1), (1, 0)]);
        assert_eq!(looked, 3, "only the segment it takes from");
    }

    #[test]
    fn pick_filters_by_status_and_respects_the_log_start() {
        let segs = [SegmentRef {
            partition: 0,
            base: 0,
            end: 9,
            log_start: 4,
        }];
        let p = pick(&segs, Some(Status::Completed), 1, 10, |_, o| {
            if o <= 6 {
                Status::Completed
            } else {
                Status::Pending
            }
        });
        assert_eq!(p.iter().map(|x| x.offset).collect::<Vec<_>>(), [5, 4]);
        assert!(pick(&segs, None, 0, 0, |_, _| Status::Pending).is_empty());
    }
}
