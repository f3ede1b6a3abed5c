//! The broker process's own resident memory and CPU time, as Queen's JSON `/metrics`
//! reports them: read from `/proc/self` (Linux); zeros where there is no such file.

/// Resident set size in bytes and CPU time in microseconds (user, system).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub rss_bytes: u64,
    pub user_us: u64,
    pub system_us: u64,
}

/// `/proc` counts CPU time in USER_HZ ticks, 100 a second on every Linux build.
const TICK_US: u64 = 10_000;
const PAGE_BYTES: u64 = 4096;

pub fn usage() -> Usage {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    parse(&statm, &stat)
}

/// `statm`'s second field is resident pages; `stat`'s fields 14 and 15 (after the
/// parenthesised command name, which may hold spaces) are utime and stime.
fn parse(statm: &str, stat: &str) -> Usage {
    let rss_pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let field = |n: usize| -> u64 {
        after_name
            .split_whitespace()
            .nth(n)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    // After ")": state is field 3, so utime (14) and stime (15) are the 12th and 13th.
    Usage {
        rss_bytes: rss_pages * PAGE_BYTES,
        user_us: field(11) * TICK_US,
        system_us: field(12) * TICK_US,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_cpu_times() {
        let stat = "4242 (queen broker) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 12 0 0 20 0";
        let u = parse("1000 250 100 1 0 200 0", stat);
        assert_eq!(
            u,
            Usage {
                rss_bytes: 250 * 4096,
                user_us: 370_000,
                system_us: 120_000
            }
        );
        assert_eq!(parse("", ""), Usage::default());
    }

    #[test]
    fn this_process_has_some() {
        let u = usage();
        assert!(u.rss_bytes > 0);
    }
}
