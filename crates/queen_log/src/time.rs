//! Time formatting: the one form of an instant in an HTTP answer.
//!
//! `iso_ms` is the timestamp form of Queen's answers: UTC, milliseconds, truncated (not
//! rounded), `Z` suffix. The extension and the broker both call it; SQL's
//! `queen.iso_ms(timestamptz)` (sql/functions.sql) must produce the same text, which a
//! `#[pg_test]` of the extension compares for a few instants.

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 00:00:00 UTC): a
/// `timestamptz`'s integer value plus this is Unix microseconds.
pub const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// An instant given as microseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`
/// (UTC, milliseconds truncated toward the past, as PostgreSQL's `to_char(.., 'MS')`).
/// Years 1 to 9999 print as four digits, as `to_char`'s `YYYY` does.
pub fn iso_ms(unix_micros: i64) -> String {
    let secs = unix_micros.div_euclid(1_000_000);
    let ms = unix_micros.rem_euclid(1_000_000) / 1_000;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, exact for every i64 day count this module is given).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epochs() {
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_ms(PG_EPOCH_UNIX_MICROS), "2000-01-01T00:00:00.000Z");
    }

    #[test]
    fn milliseconds_truncate_toward_the_past() {
        assert_eq!(iso_ms(1_999), "1970-01-01T00:00:00.001Z");
        assert_eq!(iso_ms(999_999), "1970-01-01T00:00:00.999Z");
        assert_eq!(iso_ms(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(iso_ms(-1_000_001), "1969-12-31T23:59:58.999Z");
    }

    #[test]
    fn calendar_edges() {
        // 2024-02-29T12:34:56.789123Z, a leap day.
        assert_eq!(iso_ms(1_709_210_096_789_123), "2024-02-29T12:34:56.789Z");
        // 2100 is not a leap year; 2000 is.
        assert_eq!(iso_ms(4_107_542_400_000_000), "2100-03-01T00:00:00.000Z");
        assert_eq!(iso_ms(951_782_400_000_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso_ms(253_402_300_799_999_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(iso_ms(-62_135_596_800_000_000), "0001-01-01T00:00:00.000Z");
    }

    #[test]
    fn every_day_of_four_centuries_follows_the_last() {
        // Day by day from 1900 to 2300, the date advances by exactly one calendar day.
        let mut prev = civil_from_days(-25_567); // 1900-01-01
        assert_eq!(prev, (1900, 1, 1));
        for z in -25_566..120_000 {
            let (y, m, d) = civil_from_days(z);
            let (py, pm, pd) = prev;
            let leap = (py % 4 == 0 && py % 100 != 0) || py % 400 == 0;
            let len = match pm {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            let next = if pd < len {
                (py, pm, pd + 1)
            } else if pm < 12 {
                (py, pm + 1, 1)
            } else {
                (py + 1, 1, 1)
            };
            assert_eq!((y, m, d), next, "day {z}");
            prev = (y, m, d);
        }
    }
}
