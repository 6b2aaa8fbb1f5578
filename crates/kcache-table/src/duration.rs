//! Ages and durations as the apiserver prints them: Kubernetes' `HumanDuration`, RFC 3339
//! timestamps (`metav1.Time`, `metav1.MicroTime`) and "time since" with a given `now`.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

const NANOS_PER_SEC: i128 = 1_000_000_000;
const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// Nanoseconds since the Unix epoch (negative before it).
pub(crate) fn unix_nanos(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// Kubernetes' `duration.HumanDuration` of a Go `time.Duration` (nanoseconds): `45s`, `3m12s`,
/// `10m`, `3h45m`, `2d3h`, `15d`, `2y10d`, `12y`; `0s` for up to 2 s in the future,
/// `<invalid>` beyond.
pub fn human_duration(nanos: i64) -> String {
    let seconds = nanos / SECOND;
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = nanos / MINUTE;
    if minutes < 10 {
        let s = seconds % 60;
        if s == 0 {
            return format!("{minutes}m");
        }
        return format!("{minutes}m{s}s");
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = nanos / HOUR;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            return format!("{hours}h");
        }
        return format!("{hours}h{m}m");
    } else if hours < 48 {
        return format!("{hours}h");
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            return format!("{}d", hours / 24);
        }
        return format!("{}d{h}h", hours / 24);
    } else if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            return format!("{}y", hours / 24 / 365);
        }
        return format!("{}y{dy}d", hours / 24 / 365);
    }
    format!("{}y", hours / 24 / 365)
}

/// Go's `t.Sub(u)`: the difference saturates at the limits of `time.Duration`.
pub(crate) fn sub(t: i128, u: i128) -> i64 {
    let d = t - u;
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `translateTimestampSince`: `<unknown>` for a zero (absent) time, else the human duration
/// from `ts` to `now`. Inside [`unchanged_until`], also notes when that text changes.
pub(crate) fn since(ts: Option<i128>, now: i128) -> String {
    match ts {
        None => "<unknown>".to_string(),
        Some(t) => {
            let d = sub(now, t);
            UNTIL.with(|u| {
                if let Some(until) = u.get() {
                    u.set(Some(until.min(now + i128::from(next_change(d)))));
                }
            });
            human_duration(d)
        }
    }
}

thread_local! {
    /// Inside [`unchanged_until`]: the earliest time a [`since`] called so far would print
    /// otherwise. A row is printed on one thread without awaiting, so the calls of one row are
    /// exactly those made on this thread meanwhile.
    static UNTIL: Cell<Option<i128>> = const { Cell::new(None) };
}

/// Run `f` (printing at `now`), and tell until when everything it printed with [`since`]
/// stays the same: `i128::MAX` when it printed no age.
pub(crate) fn unchanged_until<T>(f: impl FnOnce() -> T) -> (T, i128) {
    let outer = UNTIL.with(|u| u.replace(Some(i128::MAX)));
    let out = f();
    let until = UNTIL.with(|u| u.replace(outer)).unwrap_or(i128::MAX);
    (out, until)
}

/// Nanoseconds from an age of `d` until its [`human_duration`] may read otherwise: the next
/// multiple of the smallest unit it prints at that age. Each band's unit divides the bounds
/// of the bands after it, so a change of band also falls on such a multiple. A time in the
/// future (a clock ahead of kcache's) is printed again each time.
fn next_change(d: i64) -> i64 {
    const DAY: i64 = 24 * HOUR;
    let unit = match d {
        _ if d < 0 => return 1,
        _ if d < 10 * MINUTE => SECOND,
        _ if d < 8 * HOUR => MINUTE,
        _ if d < 8 * DAY => HOUR,
        _ if d < 8 * 365 * DAY => DAY,
        _ => 365 * DAY,
    };
    unit - d.rem_euclid(unit)
}

/// Parses an RFC 3339 timestamp (`2026-11-22T09:58:07Z`, optional fraction, `Z` or `±hh:mm`)
/// into nanoseconds since the epoch. `None` for Go's zero time (`0001-01-01T00:00:00Z`) and
/// for anything that does not parse.
pub(crate) fn parse_time(s: &str) -> Option<i128> {
    let t = parse_rfc3339(s)?;
    // Go's zero time.Time is year 1, January 1, 00:00:00 UTC.
    if t == ZERO_TIME {
        return None;
    }
    Some(t)
}

/// Go's zero `time.Time` in Unix nanoseconds.
const ZERO_TIME: i128 = -62_135_596_800 * NANOS_PER_SEC;

/// Whether `s` is an RFC 3339 timestamp Go's `time.Parse(time.RFC3339, s)` accepts.
pub(crate) fn parse_rfc3339(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let year = num(0, 4)?;
    let month = num(5, 2)?;
    let day = num(8, 2)?;
    let hour = num(11, 2)?;
    let minute = num(14, 2)?;
    let second = num(17, 2)?;
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    // The calendar (month lengths, leap years) is jiff's; the grammar above and below is Go's,
    // since what Go's `time.Parse` accepts decides what a Table cell shows.
    let date = jiff::civil::Date::new(
        i16::try_from(year).ok()?,
        i8::try_from(month).ok()?,
        i8::try_from(day).ok()?,
    )
    .ok()?;
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut i = 19;
    let mut frac: i128 = 0;
    if b.get(i) == Some(&b'.') || b.get(i) == Some(&b',') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i];
        let mut scale: i128 = NANOS_PER_SEC;
        for d in digits.bytes().take(9) {
            scale /= 10;
            frac += i128::from(d - b'0') * scale;
        }
    }
    let offset_secs: i64 = match &b[i..] {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let h = i64::from(h1 - b'0') * 10 + i64::from(h2 - b'0');
            let m = i64::from(m1 - b'0') * 10 + i64::from(m2 - b'0');
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    let midnight = date.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    let secs = midnight.as_second() + hour * 3600 + minute * 60 + second - offset_secs;
    Some(i128::from(secs) * NANOS_PER_SEC + frac)
}

/// Formats Unix nanoseconds as RFC 3339 in UTC with second precision (`metav1.Time`); a time
/// outside jiff's years (±9999) is clamped to its ends, which Go would not print either.
pub(crate) fn format_rfc3339(nanos: i128) -> String {
    let secs = nanos.div_euclid(NANOS_PER_SEC);
    let secs = i64::try_from(secs).unwrap_or(if secs < 0 { i64::MIN } else { i64::MAX });
    let t = secs.clamp(
        jiff::Timestamp::MIN.as_second(),
        jiff::Timestamp::MAX.as_second(),
    );
    let t = jiff::Timestamp::from_second(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{t:.0}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hd(secs: i64) -> String {
        human_duration(secs * SECOND)
    }

    #[test]
    fn human_duration_matches_kubernetes() {
        assert_eq!(human_duration(-2 * SECOND - 1), "<invalid>");
        assert_eq!(human_duration(-1_999_999_999), "0s");
        assert_eq!(hd(-1), "0s");
        assert_eq!(hd(0), "0s");
        assert_eq!(hd(45), "45s");
        assert_eq!(hd(103), "103s");
        assert_eq!(hd(119), "119s");
        assert_eq!(hd(120), "2m");
        assert_eq!(hd(127), "2m7s");
        assert_eq!(hd(3 * 60 + 12), "3m12s");
        assert_eq!(hd(9 * 60 + 59), "9m59s");
        assert_eq!(hd(10 * 60), "10m");
        assert_eq!(hd(10 * 60 + 30), "10m");
        assert_eq!(hd(179 * 60 + 59), "179m");
        assert_eq!(hd(3 * 3600), "3h");
        assert_eq!(hd(3 * 3600 + 45 * 60), "3h45m");
        assert_eq!(hd(7 * 3600 + 59 * 60), "7h59m");
        assert_eq!(hd(8 * 3600 + 59 * 60), "8h");
        assert_eq!(hd(47 * 3600), "47h");
        assert_eq!(hd(48 * 3600), "2d");
        assert_eq!(hd(51 * 3600), "2d3h");
        assert_eq!(hd(8 * 86_400 - 1), "7d23h");
        assert_eq!(hd(15 * 86_400 + 3600), "15d");
        assert_eq!(hd(729 * 86_400), "729d");
        assert_eq!(hd(730 * 86_400), "2y");
        assert_eq!(hd(740 * 86_400), "2y10d");
        assert_eq!(hd(8 * 365 * 86_400 + 5 * 86_400), "8y");
        assert_eq!(hd(12 * 365 * 86_400), "12y");
    }

    #[test]
    fn rfc3339_round_trip() {
        let t = parse_time("2026-11-22T09:58:07Z").unwrap();
        assert_eq!(format_rfc3339(t), "2026-11-22T09:58:07Z");
        assert_eq!(t, 1_795_341_487 * NANOS_PER_SEC);
        let off = parse_time("2026-11-22T10:58:07.5+01:00").unwrap();
        assert_eq!(off, t + NANOS_PER_SEC / 2);
        assert_eq!(parse_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_time("2026-02-30T00:00:00Z"), None);
        assert_eq!(parse_time("yesterday"), None);
        assert_eq!(
            format_rfc3339(parse_time("2000-02-29T23:59:59Z").unwrap()),
            "2000-02-29T23:59:59Z"
        );
    }

    /// Within the time [`next_change`] gives, an age prints the same; at its end it may not.
    #[test]
    fn an_age_prints_the_same_until_its_next_change() {
        let mut ages: Vec<i64> = vec![-3 * SECOND, -SECOND - 1, -1, 0, 1];
        for secs in [
            59, 119, 120, 121, 599, 600, 601, 3599, 10_799, 10_800, 28_799, 28_800,
        ] {
            ages.extend([secs * SECOND - 1, secs * SECOND, secs * SECOND + 7]);
        }
        for days in [1, 2, 7, 8, 364, 730, 2919, 2920, 4000] {
            ages.extend([
                days * 86_400 * SECOND - 1,
                days * 86_400 * SECOND + 5 * HOUR,
            ]);
        }
        for d in ages {
            let n = next_change(d);
            assert!(n > 0, "{d}");
            let printed = human_duration(d);
            for step in [0, n / 3, n / 2, n - 1] {
                assert_eq!(human_duration(d + step), printed, "{d} + {step} of {n}");
            }
        }
        // And the rows' clock: ages printed inside `unchanged_until` bound it.
        let created = parse_time("2026-11-22T09:58:07Z");
        let now = parse_time("2026-11-22T10:30:50Z").unwrap();
        let ((), until) = unchanged_until(|| {
            assert_eq!(since(created, now), "32m");
            assert_eq!(since(None, now), "<unknown>");
        });
        assert_eq!(until, parse_time("2026-11-22T10:31:07Z").unwrap());
        assert_eq!(unchanged_until(|| ()).1, i128::MAX);
    }

    #[test]
    fn since_uses_go_semantics() {
        let created = parse_time("2026-11-22T09:58:07Z");
        let now = parse_time("2026-11-22T09:59:50Z").unwrap();
        assert_eq!(since(created, now), "103s");
        assert_eq!(since(None, now), "<unknown>");
    }
}
