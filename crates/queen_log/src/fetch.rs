//! Reads by offset (docs/decisions.md, "Reads by offset"): Queen 2.x's `POST
//! /api/v1/fetch`, a log's plain read. No lease, no cursor, no ack: the records of a
//! partition from an offset, bounded by a byte budget, with the partition's high
//! watermark (the next offset it will assign) and its log start (the oldest offset
//! retention kept). The rules both halves apply: the bounds of a request, where an
//! offset stands, and how many records a budget buys.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Most entries in one call (the SDK asks for at most 1000).
pub const MAX_ENTRIES: usize = 1024;
/// Most payload bytes one entry reads (the SDK's default budget).
pub const MAX_ENTRY_BYTES: i64 = 8 * 1024 * 1024;
/// Most payload bytes one call reads over all its entries.
pub const MAX_CALL_BYTES: i64 = 64 * 1024 * 1024;

/// The SDK's error codes (Kafka's names).
pub const OFFSET_OUT_OF_RANGE: &str = "OFFSET_OUT_OF_RANGE";
pub const UNKNOWN_TOPIC_OR_PARTITION: &str = "UNKNOWN_TOPIC_OR_PARTITION";

/// One entry of a fetch request, as the extension takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EntryIn {
    pub queue: String,
    pub partition: String,
    pub offset: i64,
    pub max_bytes: i64,
}

/// One record read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub offset: i64,
    pub transaction_id: String,
    /// The payload as pushed (queen_log::payload's rule), never re-encoded.
    pub payload: Box<RawValue>,
    /// When the push that wrote it was stored (UTC, microseconds).
    pub ts: String,
}

/// What one entry read.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryOut {
    pub queue: String,
    pub partition: String,
    pub records: Vec<Record>,
    /// Absent for an unknown partition.
    pub high_watermark: Option<i64>,
    pub log_start_offset: Option<i64>,
    /// One past the last record read (the offset asked when nothing was read).
    pub next_offset: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one partition read: `queen.fetch_partition_v1`'s answer, the half of a fetch
/// that runs where the partition lives (its worker on Citus). Text, not jsonb, between
/// the two halves, so a payload crosses byte for byte.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionRead {
    pub records: Vec<Record>,
    /// Absent when the partition does not exist.
    pub high_watermark: Option<i64>,
    pub log_start_offset: Option<i64>,
    pub next_offset: i64,
    /// Payload bytes read (charged to the call's budget).
    pub spent: i64,
    pub error: Option<String>,
}

/// A fetch's answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FetchOut {
    pub entries: Vec<EntryOut>,
}

/// Why a request is refused (the broker's 400, the extension's 22023).
pub fn check(entries: &[EntryIn], call_bytes: i64) -> Result<(), String> {
    if entries.len() > MAX_ENTRIES {
        return Err(format!(
            "entries: {} entries, at most {MAX_ENTRIES} in one call",
            entries.len()
        ));
    }
    if !(1..=MAX_CALL_BYTES).contains(&call_bytes) {
        return Err(format!("maxBytes must be 1 to {MAX_CALL_BYTES}"));
    }
    for (i, e) in entries.iter().enumerate() {
        if e.offset < 0 {
            return Err(format!(
                "entries[{i}].offset must be a non-negative integer"
            ));
        }
        if !(1..=MAX_ENTRY_BYTES).contains(&e.max_bytes) {
            return Err(format!(
                "entries[{i}].maxBytes must be 1 to {MAX_ENTRY_BYTES}"
            ));
        }
    }
    Ok(())
}

/// Where `offset` stands in a partition whose offsets kept are `[log_start, hw)`: an
/// offset below the log start (retention deleted it) or past the high watermark is out
/// of range; the high watermark itself is the end (nothing yet).
pub fn in_range(offset: i64, log_start: i64, hw: i64) -> bool {
    (log_start..=hw).contains(&offset)
}

/// How many of `sizes` (payload bytes of the records from the asked offset on) a read
/// takes with `budget` bytes left: whole records while they fit, and always the first
/// one when `must_progress` (the call has read nothing yet), so a record larger than
/// every budget is still readable, once, alone.
pub fn take(sizes: &[usize], budget: i64, must_progress: bool) -> usize {
    let mut left = budget;
    let mut n = 0;
    for &s in sizes {
        let s = s as i64;
        if s > left && !(n == 0 && must_progress) {
            break;
        }
        left -= s;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset: i64, max_bytes: i64) -> EntryIn {
        EntryIn {
            queue: "q".into(),
            partition: "p".into(),
            offset,
            max_bytes,
        }
    }

    #[test]
    fn requests_are_bounded() {
        assert!(check(&[entry(0, 1)], 1).is_ok());
        assert!(check(&[entry(-1, 1)], 1).unwrap_err().contains("offset"));
        assert!(check(&[entry(0, 0)], 1).unwrap_err().contains("maxBytes"));
        assert!(check(&[entry(0, MAX_ENTRY_BYTES + 1)], 1).is_err());
        assert!(check(&[], 0).is_err());
        let many = vec![entry(0, 1); MAX_ENTRIES + 1];
        assert!(check(&many, 1).unwrap_err().contains("at most"));
    }

    #[test]
    fn offsets_in_range() {
        assert!(in_range(3, 3, 10));
        assert!(
            in_range(10, 3, 10),
            "the high watermark is the end, not an error"
        );
        assert!(!in_range(2, 3, 10), "deleted by retention");
        assert!(!in_range(11, 3, 10), "past the end");
        assert!(in_range(0, 0, 0), "an empty partition");
    }

    #[test]
    fn a_budget_buys_whole_records_and_the_first_always() {
        assert_eq!(take(&[10, 10, 10], 25, false), 2);
        assert_eq!(take(&[10, 10, 10], 30, false), 3);
        assert_eq!(take(&[100, 1], 10, true), 1, "progress: the first, alone");
        assert_eq!(take(&[100, 1], 10, false), 0);
        assert_eq!(take(&[], 10, true), 0);
    }
}
