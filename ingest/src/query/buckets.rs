//! Local hour / day / month buckets of a time range in an IANA zone, computed in Rust so the usage query
//! only compares each rollup row's 15-minute `bucket` against a sorted array (`width_bucket`, a binary
//! search on int64 instants) instead of calling Postgres' zone-aware `date_trunc(unit, bucket, tz)` on
//! every row (≈ 2.5 µs a row, which was most of a day or month query's time).
//!
//! ## Semantics (the same as `date_trunc(unit, t, tz)`, which the exactness tests scan raw events with)
//! - A bucket is the set of instants with the same `date_trunc` answer. `starts[i]` is the first
//!   15-minute instant of bucket i within the range (what rows are compared with); `labels[i]` is the
//!   instant `date_trunc` names it by (what the API prints). They differ only for the first bucket (which
//!   may start before `from`) and in odd zones (a day whose midnight is repeated or skipped).
//! - hour: the local wall time truncated to the hour, at the offset of the instant itself (so the
//!   repeated hour of a fall-back change is two buckets, as in Postgres);
//! - day / month: the local midnight of the day (of the first day of the month), resolved like Postgres
//!   resolves a wall time: a repeated one at the later offset, a skipped one at the offset before the gap.
//!
//! Every UTC offset in use is a multiple of 15 minutes and the range is on 15-minute boundaries, so
//! bucket membership changes only on 15-minute instants: stepping there finds every boundary. To keep a
//! long range cheap, the next boundary is first guessed (the next local unit start) and verified; the
//! 15-minute walk is the fallback around DST changes and odd offsets.

use chrono::{
    DateTime, Datelike, Months, NaiveDate, NaiveTime, Offset, TimeDelta, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use crate::local_time::resolve;

/// A local calendar unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Hour,
    Day,
    Month,
}

/// The buckets covering a range, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// First instant of each bucket within the range; sorted, starts[0] = the range's start.
    pub starts: Vec<DateTime<Utc>>,
    /// What `date_trunc(unit, t, tz)` answers for the instants of each bucket.
    pub labels: Vec<DateTime<Utc>>,
}

const QUARTER: TimeDelta = TimeDelta::minutes(15);

/// `date_trunc(unit, t, tz)`.
pub fn trunc(unit: Unit, tz: Tz, t: DateTime<Utc>) -> DateTime<Utc> {
    let off = tz.offset_from_utc_datetime(&t.naive_utc()).fix();
    let local = t.naive_utc() + TimeDelta::seconds(i64::from(off.local_minus_utc()));
    let midnight = |d: NaiveDate| d.and_time(NaiveTime::MIN);
    match unit {
        Unit::Hour => {
            let h = local
                .with_minute(0)
                .and_then(|l| l.with_second(0))
                .and_then(|l| l.with_nanosecond(0))
                .expect("valid wall time");
            Utc.from_utc_datetime(&(h - TimeDelta::seconds(i64::from(off.local_minus_utc()))))
        }
        Unit::Day => resolve(tz, midnight(local.date())),
        Unit::Month => resolve(
            tz,
            midnight(local.date().with_day(1).expect("day 1 exists")),
        ),
    }
}

/// The first instant of the next local unit after the one `t` is in (a guess the caller verifies).
fn next_guess(unit: Unit, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let local = t.with_timezone(&tz).naive_local();
    let next = match unit {
        Unit::Hour => return Some(trunc(Unit::Hour, tz, t) + TimeDelta::hours(1)),
        Unit::Day => local.date().succ_opt()?,
        Unit::Month => local
            .date()
            .with_day(1)?
            .checked_add_months(Months::new(1))?,
    };
    tz.from_local_datetime(&next.and_time(NaiveTime::MIN))
        .earliest()
        .map(|x| x.with_timezone(&Utc))
}

/// The buckets of `[from, to)` (both on 15-minute boundaries, from < to).
pub fn buckets(unit: Unit, tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Buckets {
    let mut out = Buckets {
        starts: vec![from],
        labels: vec![trunc(unit, tz, from)],
    };
    let mut at = from;
    while at < to {
        let current = *out.labels.last().expect("one bucket at least");
        // Fast path: the guessed next boundary is one when the quarter before it is still in this
        // bucket and it is not.
        let guess = next_guess(unit, tz, at).filter(|g| {
            *g > at
                && g.timestamp() % 900 == 0
                && trunc(unit, tz, *g - QUARTER) == current
                && trunc(unit, tz, *g) != current
        });
        let next = match guess {
            Some(g) => g,
            None => {
                let mut q = at + QUARTER;
                while q < to && trunc(unit, tz, q) == current {
                    q += QUARTER;
                }
                q
            }
        };
        if next >= to {
            break;
        }
        out.starts.push(next);
        out.labels.push(trunc(unit, tz, next));
        at = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// The slow definition: walk every quarter and start a bucket where `trunc` changes.
    fn walk(unit: Unit, tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Buckets {
        let mut b = Buckets {
            starts: vec![],
            labels: vec![],
        };
        let mut q = from;
        while q < to {
            let l = trunc(unit, tz, q);
            if b.labels.last() != Some(&l) {
                b.starts.push(q);
                b.labels.push(l);
            }
            q += QUARTER;
        }
        b
    }

    #[test]
    fn the_fast_path_finds_the_same_buckets_as_the_quarter_walk() {
        let zones = [
            "UTC",
            "America/New_York",
            "Asia/Kolkata",
            "Asia/Kathmandu",
            "Pacific/Chatham",
            "Australia/Lord_Howe",
            "America/Santiago",
            "America/Havana",
            "Asia/Tehran",
            "Europe/London",
        ];
        for z in zones {
            let tz: Tz = z.parse().unwrap();
            for unit in [Unit::Hour, Unit::Day, Unit::Month] {
                let (from, to) = (t("2025-12-31T23:45:00Z"), t("2027-01-02T00:15:00Z"));
                assert_eq!(
                    buckets(unit, tz, from, to),
                    walk(unit, tz, from, to),
                    "{z} {unit:?}"
                );
            }
        }
    }

    #[test]
    fn fall_back_days_are_25_hours_and_the_repeated_hour_is_two_buckets() {
        let tz: Tz = "America/New_York".parse().unwrap();
        let b = buckets(
            Unit::Day,
            tz,
            t("2026-11-01T04:00:00Z"),
            t("2026-11-03T05:00:00Z"),
        );
        assert_eq!(
            b.starts,
            vec![
                t("2026-11-01T04:00:00Z"),
                t("2026-11-02T05:00:00Z"),
                t("2026-11-03T05:00:00Z")
            ][..2]
        );
        let h = buckets(
            Unit::Hour,
            tz,
            t("2026-11-01T05:00:00Z"),
            t("2026-11-01T07:00:00Z"),
        );
        assert_eq!(
            h.labels,
            vec![t("2026-11-01T05:00:00Z"), t("2026-11-01T06:00:00Z")]
        );
    }

    #[test]
    fn half_and_quarter_hour_zones_start_their_buckets_off_the_utc_hour() {
        let tz: Tz = "Asia/Kathmandu".parse().unwrap();
        let b = buckets(
            Unit::Hour,
            tz,
            t("2026-11-01T18:00:00Z"),
            t("2026-11-01T19:30:00Z"),
        );
        assert_eq!(
            b.starts,
            vec![
                t("2026-11-01T18:00:00Z"),
                t("2026-11-01T18:15:00Z"),
                t("2026-11-01T19:15:00Z")
            ]
        );
        assert_eq!(b.labels[0], t("2026-11-01T17:15:00Z"));
    }
}
