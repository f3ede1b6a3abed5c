//! Small helpers every room uses: constants of the contract, the group-name rule,
//! timestamp rendering, and the memory accounting of hash tables.

use chrono::{DateTime, Utc};

/// The queue-mode consumer group and the default tenant (every request's tenant while
/// tenancy is off): the contract's conventions (docs/contract.md), defined once in
/// queen_log.
pub use queen_log::conventions::{DEFAULT_TENANT, QUEUE_MODE};

/// Heap bytes of a std `HashMap`/`HashSet` table whose `capacity()` is `capacity`, with
/// `slot` bytes per entry: hashbrown allocates a power-of-two number of buckets (7/8 of
/// them usable, all of them for tables under 8), one slot and one control byte each, plus
/// a 16-byte group of trailing control bytes. Memory caps charge this, not the entries.
pub fn table_bytes(capacity: usize, slot: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        capacity + 1
    } else {
        capacity / 7 * 8
    };
    buckets * (slot + 1) + 16
}

/// The `capacity()` of a std `HashMap::with_capacity(n)` (hashbrown: buckets are the next
/// power of two holding `n` at 7/8 load, at least 4), without allocating one.
pub fn capacity_for(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let buckets = if n < 4 {
        4
    } else if n < 8 {
        8
    } else {
        (n * 8 / 7).next_power_of_two()
    };
    if buckets < 8 {
        buckets - 1
    } else {
        buckets / 8 * 7
    }
}

/// UTC with milliseconds, the timestamp form of every HTTP answer.
pub fn iso_ms(t: DateTime<Utc>) -> String {
    queen_log::time::iso_ms(t.timestamp_micros())
}

/// A SQL result's timestamp (UTC with microseconds) in the HTTP form (milliseconds);
/// passed through unchanged if it does not parse.
pub fn micros_to_ms(text: &str) -> String {
    DateTime::parse_from_rfc3339(text)
        .map(|t| iso_ms(t.with_timezone(&Utc)))
        .unwrap_or_else(|_| text.to_string())
}

/// The group name stored in the database for an optional client group.
pub fn group_or_queue_mode(g: Option<&str>) -> &str {
    match g {
        Some(g) if !g.is_empty() => g,
        _ => QUEUE_MODE,
    }
}

/// A client's consumer group as a named group: `None` for queue mode, which a client
/// selects by omitting the group, sending "" or sending the reserved literal
/// `__QUEUE_MODE__` itself (clients echo it back in acks; docs/decisions.md, "Payloads and names").
pub fn named_group(g: Option<&str>) -> Option<&str> {
    g.filter(|g| !g.is_empty() && *g != QUEUE_MODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_timestamps_render_with_milliseconds() {
        assert_eq!(
            micros_to_ms("2026-01-02T03:04:05.678901Z"),
            "2026-01-02T03:04:05.678Z"
        );
        assert_eq!(micros_to_ms("not a time"), "not a time");
    }

    #[test]
    fn queue_mode_spellings() {
        for g in [None, Some(""), Some(QUEUE_MODE)] {
            assert_eq!(named_group(g), None, "{g:?}");
            assert_eq!(group_or_queue_mode(named_group(g)), QUEUE_MODE);
        }
        assert_eq!(named_group(Some("g")), Some("g"));
        assert_eq!(named_group(Some("__queue_mode__")), Some("__queue_mode__"));
    }

    #[test]
    fn table_bytes_follow_the_real_bucket_count() {
        assert_eq!(table_bytes(0, 24), 0);
        for n in [1usize, 3, 7, 8, 14, 15, 100, 1000, 100_000] {
            let m: std::collections::HashMap<u64, u64> = (0..n as u64).map(|i| (i, i)).collect();
            let bytes = table_bytes(m.capacity(), 16);
            let buckets = (bytes - 16) / 17;
            assert!(buckets.is_power_of_two(), "{n}: {buckets}");
            assert!(buckets >= n && buckets <= 4 * n.max(2), "{n}: {buckets}");
        }
    }

    #[test]
    fn capacity_for_matches_the_real_table() {
        for n in (0..5000).chain([28_672, 57_344, 100_000, 114_688, 114_689]) {
            let m: std::collections::HashMap<[u8; 16], i64> =
                std::collections::HashMap::with_capacity(n);
            assert_eq!(capacity_for(n), m.capacity(), "{n}");
        }
    }

    #[test]
    fn default_tenant_literal() {
        assert_eq!(
            DEFAULT_TENANT.to_string(),
            "00000000-0000-0000-0000-000000000001"
        );
    }
}
