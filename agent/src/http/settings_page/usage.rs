//! The "Used on this device" section: tokens and cost of the events recorded here today and this
//! month, from the outbox's usage by quarter-hour ([`crate::outbox::UsageWindow`]), whether or not they
//! were shared. "Today" and "this month" are calendar spans in the configured `zone` (`local`: this
//! machine's zone).
//!
//! Hooks: `section#usage`, `dd[data-field=…]` (`usage_today_tokens`, `usage_today_cost`,
//! `usage_month_tokens`, `usage_month_cost`), `[data-field=usage_zone]`.

use apiary_schema::hive::Zone;
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone, Utc};
use maud::{html, Markup};

use crate::outbox::UsageWindow;
use crate::quota::amount;

/// The UTC bounds of the local day and month that hold `now`: `[day_start, day_end)`,
/// `[month_start, month_end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spans {
    pub day: (DateTime<Utc>, DateTime<Utc>),
    pub month: (DateTime<Utc>, DateTime<Utc>),
}

impl Spans {
    /// The spans of `now` in `zone`.
    pub(super) fn of(zone: Zone, now: DateTime<Utc>) -> Spans {
        match zone {
            Zone::Local => spans_in(&chrono::Local, now),
            Zone::Utc => spans_in(&Utc, now),
            Zone::Named(tz) => spans_in(&tz, now),
        }
    }
}

fn spans_in<Tz: TimeZone>(tz: &Tz, now: DateTime<Utc>) -> Spans {
    let today = now.with_timezone(tz).date_naive();
    let first = today.with_day(1).unwrap_or(today);
    let next_first = if first.month() == 12 {
        NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
    }
    .unwrap_or(first);
    let start = |d: NaiveDate| start_of(tz, d);
    Spans {
        day: (start(today), start(today.succ_opt().unwrap_or(today))),
        month: (start(first), start(next_first)),
    }
}

/// The first instant of local date `d` (a day that starts with a daylight-saving gap starts when the
/// gap ends: the first quarter-hour that exists).
fn start_of<Tz: TimeZone>(tz: &Tz, d: NaiveDate) -> DateTime<Utc> {
    let midnight = d.and_time(NaiveTime::MIN);
    (0..=12)
        .find_map(|q| {
            tz.from_local_datetime(&(midnight + chrono::Duration::minutes(15 * q)))
                .earliest()
        })
        .map_or_else(|| midnight.and_utc(), |t| t.with_timezone(&Utc))
}

/// The section.
pub(super) fn usage_section(zone: Zone, today: &UsageWindow, month: &UsageWindow) -> Markup {
    let zone = match zone {
        Zone::Local => "this computer's time zone",
        Zone::Utc => "UTC",
        Zone::Named(tz) => tz.name(),
    };
    html! {
        section #usage aria-labelledby="usage-title" {
            h2 #usage-title { "Used on this device" }
            dl.facts {
                (figure("Tokens today", "usage_today_tokens", &amount("tokens", today.tokens())))
                (figure("Cost today", "usage_today_cost", &amount("usd", today.cost_nanos)))
                (figure("Tokens this month", "usage_month_tokens", &amount("tokens", month.tokens())))
                (figure("Cost this month", "usage_month_cost", &amount("usd", month.cost_nanos)))
            }
            p.note { "Model calls recorded here (shared or not): " (today.llm_calls) " today, "
                (month.llm_calls) " this month. Days and months in " span data-field="usage_zone" { (zone) } "."
                @if month.unpriced_turns > 0 { " " (month.unpriced_turns) " calls this month had no known \
                    price, so the cost is a lower bound." } }
        }
    }
}

fn figure(label: &str, field: &str, value: &str) -> Markup {
    html! { div { dt { (label) } dd data-field=(field) { (value) } } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn days_and_months_follow_the_zone() {
        let s = Spans::of(Zone::Utc, t("2026-03-31T23:30:00Z"));
        assert_eq!(
            s.day,
            (t("2026-03-31T00:00:00Z"), t("2026-04-01T00:00:00Z"))
        );
        assert_eq!(
            s.month,
            (t("2026-03-01T00:00:00Z"), t("2026-04-01T00:00:00Z"))
        );
        // Half past one in the morning of 1 April in Kolkata (+5:30).
        let kolkata = Zone::Named("Asia/Kolkata".parse().unwrap());
        let s = Spans::of(kolkata, t("2026-03-31T20:00:00Z"));
        assert_eq!(
            s.day,
            (t("2026-03-31T18:30:00Z"), t("2026-04-01T18:30:00Z"))
        );
        assert_eq!(
            s.month,
            (t("2026-03-31T18:30:00Z"), t("2026-04-30T18:30:00Z"))
        );
        let dec = Spans::of(Zone::Utc, t("2026-12-15T12:00:00Z"));
        assert_eq!(dec.month.1, t("2027-01-01T00:00:00Z"));
        // A day that begins in a daylight-saving gap (Santiago, 2026-09-06 00:00 does not exist).
        let santiago = Zone::Named("America/Santiago".parse().unwrap());
        let s = Spans::of(santiago, t("2026-09-06T12:00:00Z"));
        assert_eq!(s.day.0, t("2026-09-06T04:00:00Z"));
    }
}
