//! ISO 8601 UTC timestamps to and from Unix seconds, with `jiff` (the calendar arithmetic is
//! its, not ours). The API's own `created_at`/`updated_at` come from SQLite, not from here.

use jiff::Timestamp;

/// Seconds since the epoch, now (0 if the clock is before 1970).
pub fn now_unix() -> u64 {
    u64::try_from(Timestamp::now().as_second()).unwrap_or(0)
}

/// `2026-11-30T10:37:41Z` for a Unix time; times past jiff's last instant
/// (`9999-12-30T22:00:00Z`) print as it.
pub fn format_unix(secs: u64) -> String {
    let timestamp = i64::try_from(secs)
        .ok()
        .and_then(|secs| Timestamp::from_second(secs).ok())
        .unwrap_or(Timestamp::MAX);
    // Precision 0: whole seconds, never a fraction.
    format!("{timestamp:.0}")
}

/// Seconds since the epoch from `2015-11-07T02:58:43.578887Z` (fraction cut; `Z`, `+00:00` or
/// another offset, or none, read as UTC); `None` for anything else or a time before 1970.
pub fn parse_iso8601(text: &str) -> Option<u64> {
    let timestamp =
        text.parse::<Timestamp>().or_else(|_| format!("{text}Z").parse::<Timestamp>()).ok()?;
    u64::try_from(timestamp.as_second()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_known_values() {
        assert_eq!(parse_iso8601("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_iso8601("2015-11-07T02:58:43.578887Z"), Some(1_446_865_123));
        assert_eq!(parse_iso8601("2015-11-07T02:58:43+00:00"), Some(1_446_865_123));
        assert_eq!(format_unix(1_446_865_123), "2015-11-07T02:58:43Z");
        for secs in [0, 951_782_400, 1_709_164_800, 4_102_444_799] {
            assert_eq!(parse_iso8601(&format_unix(secs)), Some(secs));
        }
        assert_eq!(parse_iso8601("2015-13-07T02:58:43Z"), None);
        assert_eq!(parse_iso8601("yesterday"), None);
    }

    #[test]
    fn calendar_edges() {
        // Leap days: 2000 and 2024 have one, 2100 has none.
        assert_eq!(format_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_unix(1_709_164_800), "2024-02-29T00:00:00Z");
        assert_eq!(format_unix(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(parse_iso8601("2100-02-29T00:00:00Z"), None);
        assert_eq!(parse_iso8601("2015-02-31T00:00:00Z"), None);
        assert_eq!(format_unix(4_102_444_799), "2099-12-31T23:59:59Z");
        // jiff's last instant; later times print as it.
        assert_eq!(format_unix(253_402_207_200), "9999-12-30T22:00:00Z");
        assert_eq!(format_unix(253_402_207_201), "9999-12-30T22:00:00Z");
        assert_eq!(format_unix(u64::MAX), "9999-12-30T22:00:00Z");
    }

    #[test]
    fn offsets_and_their_absence() {
        // No offset: read as UTC.
        assert_eq!(parse_iso8601("2015-11-07T02:58:43"), Some(1_446_865_123));
        assert_eq!(parse_iso8601("2015-11-07T02:58:43.5"), Some(1_446_865_123));
        // Another offset is converted, not refused.
        assert_eq!(parse_iso8601("2015-11-07T03:58:43+01:00"), Some(1_446_865_123));
        assert_eq!(parse_iso8601("1969-12-31T23:59:59Z"), None);
        assert_eq!(parse_iso8601(""), None);
        assert_eq!(parse_iso8601("2015-11-07"), None);
        assert_eq!(parse_iso8601("2015-11-07T25:00:00Z"), None);
    }

    #[test]
    fn now_is_the_system_clock() {
        use std::time::{SystemTime, UNIX_EPOCH};
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        let now = now_unix();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert!((before..=after).contains(&now), "{before} <= {now} <= {after}");
    }
}
