//! How numbers, money, durations and times read on a page. Pure; the exact value of every rounded
//! number is also put in the element's `data-value` (and `title`) by the templates, so a test (or a
//! person hovering) can compare it with the API's answer digit for digit.

use chrono::{DateTime, Utc};

use crate::query::sums::Sum;

/// A path segment, percent-encoded (ids come from clients): `q-a+b` → `q-a%2Bb`.
pub fn path_segment(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// `1234567` → `1,234,567`.
pub fn count(n: i128) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A sum, with thousands separators.
pub fn sum(s: Sum) -> String {
    count(s.0)
}

/// Nano-dollars as dollars, rounded half away from zero: to cents from a dollar up (`$1,234.57`), to
/// four decimals below (`$0.0031`); amounts under $0.0001 that are not zero read `<$0.0001`.
pub fn money(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = nanos.abs();
    if abs == 0 || abs >= 1_000_000_000 {
        let cents = (abs + 5_000_000) / 10_000_000;
        return format!("{sign}${}.{:02}", count(cents / 100), cents % 100);
    }
    let units = (abs + 50_000) / 100_000;
    if units == 0 {
        return format!("{sign}<$0.0001");
    }
    if units >= 10_000 {
        return format!("{sign}$1.00");
    }
    format!("{sign}$0.{units:04}")
}

/// Nano-dollars as exact dollars (for a `title`): `$0.000001234`.
pub fn money_exact(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.abs();
    format!("{sign}${}.{:09}", n / 1_000_000_000, n % 1_000_000_000)
}

/// Seconds as `3h 04m`, `12m 05s` or `42s`.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "–".into();
    }
    let s = secs.round() as u64;
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h}h {m:02}m")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

/// Milliseconds as a duration (`850 ms`, `1.2 s`, `3m 10s`).
pub fn millis(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        duration(ms as f64 / 1000.0)
    }
}

/// A time in UTC, to the second: `2026-11-25 03:04:05 UTC`.
pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How long ago `t` was, from `now`: `5m ago`.
pub fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - t).num_milliseconds() as f64 / 1000.0;
    if secs < 0.0 {
        "just now".into()
    } else {
        format!("{} ago", duration(secs))
    }
}

/// The "Download CSV" link of a page: `path` (a download route of the dashboard) with the page's own
/// query string `raw` (its empty pairs are dropped by the download, as by the page).
pub fn csv_link(path: &str, raw: Option<&str>, what: &str) -> maud::Markup {
    let href = match raw.filter(|q| !q.is_empty()) {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    maud::html! {
        p.download {
            a href=(href) download aria-label={ "Download " (what) " as CSV" } { "Download CSV" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_money_read_like_people_write_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(-1_234_567), "-1,234,567");
        assert_eq!(money(0), "$0.00");
        assert_eq!(money(1), "<$0.0001");
        assert_eq!(money(4_999_999), "$0.0050");
        assert_eq!(money(123_456_789), "$0.1235");
        assert_eq!(money(999_990_000), "$1.00");
        assert_eq!(money(-5_000_000), "-$0.0050");
        assert_eq!(money(1_234_565_000_000), "$1,234.57");
        assert_eq!(money_exact(1_234_000_000_123), "$1234.000000123");
        assert_eq!(duration(3725.0), "1h 02m");
        assert_eq!(duration(65.0), "1m 05s");
        assert_eq!(millis(850), "850 ms");
        assert_eq!(millis(1_250), "1.2 s");
    }
}
