//! How a tenant-wide usage query divides its range between the rollups (see [`super`]'s notes): whole
//! UTC months from `usage_rollups_monthly`, whole UTC days from `usage_rollups_daily` (or both from the
//! colony rollups, where the grouping has no user), whole UTC hours from `usage_rollups_narrow` (or
//! `usage_rollups_hourly`), and the rest from the 15-minute `usage_rollups` — each unit taken at the
//! coarsest grain that no bucket boundary cuts.
//!
//! A UTC month that exactly one boundary cuts near one of its ends (a month of New York starts at 04:00
//! or 05:00 UTC on the first, a month of Kolkata at 18:30 UTC on the last day of the one before) is
//! still read whole: its row is *moved* to the bucket holding most of it, and the short side is read
//! twice from finer rows, once as itself (into its own bucket) and once negated into the bucket the
//! whole row went to ([`Moved`]). Sums are exact under subtraction, so every instant still counts once
//! in its own bucket; a group whose sums come out all zero in a bucket (it was busy only on the short
//! side) is dropped from the answer as any all-zero row is (`super::fetch`). A year of New York by month
//! then reads twelve monthly rows and a few hours per month instead of every day. Days are moved the
//! same way only where they come from rows without the user ([`Split::moving`]: a whole tenant's usage,
//! from the colony rollups; a year of New York by day then reads 15,900 pages instead of 28,500). Where
//! the daily rows keep the user they are nearly as many as the busy hours, and a day's short side read
//! through an index probe per hour cost more pages than the day row saved (measured: 2,418 pages
//! instead of 1,318 for 30 days of New York by day; see the performance docs).

use chrono::{DateTime, DurationRound, Months, TimeDelta, Utc};

use crate::rollups::month_of;

/// A rollup's time grain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grain {
    Month,
    Day,
    Hour,
    Quarter,
}

impl Grain {
    /// The first unit start at or after `t`.
    fn ceil(self, t: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Grain::Month => {
                let m = month_of(t);
                if m == t {
                    m
                } else {
                    m + Months::new(1)
                }
            }
            Grain::Day => t.duration_round_up(TimeDelta::days(1)).expect("in range"),
            Grain::Hour => t.duration_round_up(TimeDelta::hours(1)).expect("in range"),
            Grain::Quarter => t
                .duration_round_up(TimeDelta::minutes(15))
                .expect("in range"),
        }
    }

    /// The rollup holding this grain's rows: the narrow ones (no colony or session) when
    /// `narrow`, else the wide hourly one for hours. Months and days exist only narrow.
    pub fn table(self, narrow: bool) -> &'static str {
        match (self, narrow) {
            (Grain::Month, _) => "usage_rollups_monthly",
            (Grain::Day, _) => "usage_rollups_daily",
            (Grain::Hour, true) => "usage_rollups_narrow",
            (Grain::Hour, false) => "usage_rollups_hourly",
            (Grain::Quarter, _) => "usage_rollups",
        }
    }

    /// The rollup holding this grain's rows for a query grouped by colony: the colony ones for days
    /// and months (no device; the session only where it is a forked colony run), the wide ones for hours
    /// and quarters.
    pub fn colony_table(self) -> &'static str {
        match self {
            Grain::Month => "usage_rollups_colony_monthly",
            Grain::Day => "usage_rollups_colony_daily",
            Grain::Hour => "usage_rollups_hourly",
            Grain::Quarter => "usage_rollups",
        }
    }

    /// The tool rollup holding this grain's rows: for hours, days and months the narrow ones (no
    /// device, colony or session), or the tenant's (no user either) when `tenant`; the 15-minute
    /// `tool_rollups` for quarters.
    pub fn tool_table(self, tenant: bool) -> &'static str {
        match (self, tenant) {
            (Grain::Month, false) => "tool_rollups_monthly",
            (Grain::Day, false) => "tool_rollups_daily",
            (Grain::Hour, false) => "tool_rollups_hourly",
            (Grain::Month, true) => "tool_rollups_tenant_monthly",
            (Grain::Day, true) => "tool_rollups_tenant_daily",
            (Grain::Hour, true) => "tool_rollups_tenant_hourly",
            (Grain::Quarter, _) => "tool_rollups",
        }
    }

    /// The start of the unit after the one starting at `t`.
    pub fn next(self, t: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Grain::Month => t + Months::new(1),
            Grain::Day => t + TimeDelta::days(1),
            Grain::Hour => t + TimeDelta::hours(1),
            Grain::Quarter => t + TimeDelta::minutes(15),
        }
    }
}

/// A unit read into another bucket than its own: its rows are summed under `label` (an instant of
/// that bucket), times `sign` (1 for a whole unit moved to the bucket holding most of it, -1 for a
/// short side taken back out of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    pub unit: DateTime<Utc>,
    pub label: DateTime<Utc>,
    pub sign: i64,
}

/// The units of one grain a query reads: as themselves, in contiguous ranges `[from, to)` of unit
/// starts, in order; and moved ([`Moved`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    pub grain: Grain,
    pub ranges: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    pub moved: Vec<Moved>,
}

impl Level {
    /// The start of every unit read.
    pub fn units(&self) -> Vec<DateTime<Utc>> {
        let mut out = vec![];
        for (a, b) in &self.ranges {
            let mut t = *a;
            while t < *b {
                out.push(t);
                t = self.grain.next(t);
            }
        }
        out
    }

    /// The units between the first range's start and the last range's end that are *not* read (the
    /// gaps), for a statement that reads `[first, last) except these`.
    pub fn gaps(&self) -> Vec<DateTime<Utc>> {
        let gaps = Level {
            grain: self.grain,
            ranges: self.ranges.windows(2).map(|w| (w[0].1, w[1].0)).collect(),
            moved: vec![],
        };
        gaps.units()
    }

    /// Reads `[a, b)` (whole units) as themselves, and moved under `back` with sign -1 when given.
    fn read(&mut self, a: DateTime<Utc>, b: DateTime<Utc>, back: Option<DateTime<Utc>>) {
        if a >= b {
            return;
        }
        match self.ranges.last_mut() {
            Some(last) if last.1 == a => last.1 = b,
            _ => self.ranges.push((a, b)),
        }
        if let Some(label) = back {
            let mut t = a;
            while t < b {
                self.moved.push(Moved {
                    unit: t,
                    label,
                    sign: -1,
                });
                t = self.grain.next(t);
            }
        }
    }

    /// The span `[first, last)` the ranges lie in.
    pub fn span(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.ranges[0].0, self.ranges[self.ranges.len() - 1].1)
    }
}

/// How a tenant-wide query splits `[from, to)` between the rollups: the units of each grain it reads,
/// coarsest first; a unit is read at a grain only when no bucket boundary falls strictly inside it (e.g.
/// the 18:00 UTC hour of a day in Asia/Kolkata is read as quarters), and every instant of the range is
/// read exactly once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// The grains with units read, coarsest first (`Quarter` last when present).
    pub levels: Vec<Level>,
}

impl Split {
    /// The split of `[from, to)` (both on 15-minute boundaries) for bucket starts `starts` (sorted, the
    /// first at or before `from`), reading months and days too when `calendar` (a grouping the daily and
    /// monthly rollups keep), and then moving a month cut once near an end (see the module notes). None when the range has no whole hour no boundary cuts: quarter rows alone.
    pub fn of(
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        starts: &[DateTime<Utc>],
        calendar: bool,
    ) -> Option<Split> {
        Split::moving(from, to, starts, calendar, false)
    }

    /// [`Split::of`], moving a day cut once near an end as a month is when `move_days` (where the
    /// daily rows are few against the hours a day's short side reads twice: the rollups without the
    /// user, see the module notes).
    pub fn moving(
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        starts: &[DateTime<Utc>],
        calendar: bool,
        move_days: bool,
    ) -> Option<Split> {
        let grains: &[Grain] = if calendar {
            &[Grain::Month, Grain::Day, Grain::Hour]
        } else {
            &[Grain::Hour]
        };
        // The boundaries strictly inside [a, b): none, the one, or several.
        let inside = |a: DateTime<Utc>, b: DateTime<Utc>| {
            let i = starts.partition_point(|s| *s <= a);
            let j = starts.partition_point(|s| *s < b);
            &starts[i..j.max(i)]
        };
        // Pieces of the range not read yet, each with the label it is also taken back out of.
        type Piece = (DateTime<Utc>, DateTime<Utc>, Option<DateTime<Utc>>);
        let mut pieces: Vec<Piece> = vec![(from, to, None)];
        let mut levels = vec![];
        for &grain in grains {
            let mut level = Level {
                grain,
                ranges: vec![],
                moved: vec![],
            };
            let mut rest: Vec<Piece> = vec![];
            for (a, b, back) in pieces {
                let mut gap_from = a;
                let mut t = grain.ceil(a);
                while grain.next(t) <= b {
                    let end = grain.next(t);
                    let cuts = inside(t, end);
                    let movable = back.is_none()
                        && (grain == Grain::Month || (move_days && grain == Grain::Day));
                    match cuts {
                        [] => {
                            if gap_from < t {
                                rest.push((gap_from, t, back));
                            }
                            level.read(t, end, back);
                            gap_from = end;
                        }
                        [c] if movable && (*c - t).min(end - *c) * 3 <= end - t => {
                            if gap_from < t {
                                rest.push((gap_from, t, back));
                            }
                            if *c - t <= end - *c {
                                // The short side first: the unit goes to the bucket starting at c,
                                // and [t, c) is taken back out of it.
                                level.moved.push(Moved {
                                    unit: t,
                                    label: *c,
                                    sign: 1,
                                });
                                rest.push((t, *c, Some(*c)));
                            } else {
                                // The short side last: the unit stays in its own bucket (its start's),
                                // and [c, end) is taken back out of it.
                                level.read(t, end, None);
                                rest.push((*c, end, Some(t)));
                            }
                            gap_from = end;
                        }
                        _ => {}
                    }
                    t = end;
                }
                if gap_from < b {
                    rest.push((gap_from, b, back));
                }
            }
            pieces = rest;
            if !level.ranges.is_empty() || !level.moved.is_empty() {
                levels.push(level);
            }
        }
        if levels.is_empty() {
            return None;
        }
        let mut quarters = Level {
            grain: Grain::Quarter,
            ranges: vec![],
            moved: vec![],
        };
        for (a, b, back) in pieces {
            quarters.read(a, b, back);
        }
        if !quarters.ranges.is_empty() {
            levels.push(quarters);
        }
        Some(Split { levels })
    }

    /// The units of `grain` read (empty when none).
    pub fn level(&self, grain: Grain) -> Option<&Level> {
        self.levels.iter().find(|l| l.grain == grain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn whole_hours_come_from_the_hourly_rollup_and_cut_hours_from_quarters() {
        // Days in Asia/Kolkata start at 18:30 UTC: that hour is cut, the others are whole.
        let starts = [
            t("2026-11-01T10:15:00Z"),
            t("2026-11-01T18:30:00Z"),
            t("2026-11-02T18:30:00Z"),
        ];
        let s = Split::of(starts[0], t("2026-11-03T12:45:00Z"), &starts, false).unwrap();
        let hours = s.level(Grain::Hour).unwrap();
        assert_eq!(
            hours.span(),
            (t("2026-11-01T11:00:00Z"), t("2026-11-03T12:00:00Z"))
        );
        assert_eq!(
            hours.gaps(),
            vec![t("2026-11-01T18:00:00Z"), t("2026-11-02T18:00:00Z")]
        );
        let quarters = s.level(Grain::Quarter).unwrap().units();
        assert_eq!(quarters.len(), 3 + 4 + 4 + 3);
        assert_eq!(quarters[0], starts[0]);
        assert_eq!(s.level(Grain::Day), None, "not asked for");
        // Hour buckets of a half-hour zone cut every hour: quarter rows only.
        let halves: Vec<DateTime<Utc>> = (0..48)
            .map(|h| t("2026-11-01T00:30:00Z") + TimeDelta::hours(h))
            .collect();
        assert_eq!(
            Split::of(halves[0], t("2026-11-03T00:30:00Z"), &halves, true),
            None
        );
    }

    #[test]
    fn a_year_reads_whole_months_then_days_then_hours_at_its_edges() {
        // A year of months in UTC from a mid-day start: January 10:15 to the next January 1st.
        let from = t("2026-01-10T10:15:00Z");
        let to = t("2027-01-01T00:00:00Z");
        let mut starts = vec![from];
        let mut m = t("2026-02-01T00:00:00Z");
        while m < to {
            starts.push(m);
            m = m + Months::new(1);
        }
        let s = Split::of(from, to, &starts, true).unwrap();
        let grains: Vec<Grain> = s.levels.iter().map(|l| l.grain).collect();
        assert_eq!(
            grains,
            [Grain::Month, Grain::Day, Grain::Hour, Grain::Quarter]
        );
        assert_eq!(
            s.levels[0].ranges,
            vec![(t("2026-02-01T00:00:00Z"), to)],
            "February to December"
        );
        assert_eq!(
            s.levels[1].ranges,
            vec![(t("2026-01-11T00:00:00Z"), t("2026-02-01T00:00:00Z"))]
        );
        assert_eq!(
            s.levels[2].ranges,
            vec![(t("2026-01-10T11:00:00Z"), t("2026-01-11T00:00:00Z"))]
        );
        assert_eq!(
            s.levels[3].units(),
            vec![from, t("2026-01-10T10:30:00Z"), t("2026-01-10T10:45:00Z")]
        );
        // Months of New York start at 04:00 or 05:00 UTC: each UTC month is cut once, five hours after
        // its start, so it is moved to the New York month holding the rest of it and those hours are
        // taken back out.
        let ny = [
            t("2026-03-01T05:00:00Z"),
            t("2026-04-01T04:00:00Z"),
            t("2026-05-01T04:00:00Z"),
            t("2026-06-01T04:00:00Z"),
        ];
        let s = Split::of(ny[0], ny[3], &ny, true).unwrap();
        let months = s.level(Grain::Month).unwrap();
        assert!(months.ranges.is_empty());
        assert_eq!(
            months.moved,
            vec![
                Moved {
                    unit: t("2026-04-01T00:00:00Z"),
                    label: ny[1],
                    sign: 1
                },
                Moved {
                    unit: t("2026-05-01T00:00:00Z"),
                    label: ny[2],
                    sign: 1
                },
            ]
        );
        // March from its 2nd, whole; its 1st from 05:00 by the hour; and the four hours of each moved
        // month's first day, read as themselves and taken back out of the month they were moved with.
        let days = s.level(Grain::Day).unwrap();
        assert_eq!(
            days.ranges,
            vec![(t("2026-03-02T00:00:00Z"), t("2026-04-01T00:00:00Z"))]
        );
        let hours = s.level(Grain::Hour).unwrap();
        assert_eq!(hours.units().len(), 19 + 4 + 4 + 4);
        assert_eq!(hours.moved.len(), 4 + 4);
        assert!(hours.moved.iter().all(|m| m.sign == -1));
        assert_eq!(
            hours.moved[0],
            Moved {
                unit: t("2026-04-01T00:00:00Z"),
                label: ny[1],
                sign: -1
            }
        );
        // Days of New York, moved as months are where the daily rows are few: each UTC day goes to the
        // New York day holding its last 19 or 20 hours, and its first hours are read as themselves and
        // taken back out of that day.
        let days: Vec<DateTime<Utc>> = (0..4)
            .map(|d| t("2026-11-10T05:00:00Z") + TimeDelta::days(d))
            .collect();
        let s = Split::moving(days[0], days[3], &days, true, true).unwrap();
        let moved = s.level(Grain::Day).unwrap();
        assert!(moved.ranges.is_empty());
        assert_eq!(moved.moved.len(), 2, "the 11th and 12th");
        assert_eq!(
            (moved.moved[0].unit, moved.moved[0].label),
            (t("2026-11-11T00:00:00Z"), days[1])
        );
        let hours = s.level(Grain::Hour).unwrap();
        assert_eq!(
            hours.units().len(),
            19 + 5 + 5 + 5,
            "the 10th from 05:00, the first five of the 11th and 12th, the 13th to 05:00"
        );
        assert_eq!(hours.moved.len(), 5 + 5);
        assert!(hours.moved.iter().all(|m| m.sign == -1));
        assert_eq!(
            (hours.moved[0].unit, hours.moved[0].label),
            (t("2026-11-11T00:00:00Z"), days[1])
        );
        // Not moved (the daily rows keep the user): every hour of the moved days read as hours.
        let s = Split::of(days[0], days[3], &days, true).unwrap();
        assert_eq!(s.level(Grain::Day), None);
        assert_eq!(s.level(Grain::Hour).unwrap().units().len(), 3 * 24);
        // Days of Kolkata (18:30 UTC) cut every UTC day: read by the hour, the cut hours by the quarter.
        let kolkata: Vec<DateTime<Utc>> = (0..4)
            .map(|d| t("2026-11-01T18:30:00Z") + TimeDelta::days(d))
            .collect();
        let s = Split::of(kolkata[0], kolkata[3], &kolkata, true).unwrap();
        assert_eq!(s.level(Grain::Day), None);
        assert!(s.levels.iter().all(|l| l.moved.is_empty()));
        assert_eq!(
            s.level(Grain::Quarter).unwrap().units().len(),
            2 + 4 + 4 + 2
        );
    }

    proptest! {
        /// Whatever the range and the boundaries, every quarter hour of the range counts exactly once
        /// in its own bucket and nets to zero in every other (reads as themselves, moved and taken
        /// back), and each unit read lies in the range.
        #[test]
        fn every_quarter_of_the_range_counts_once_in_its_bucket(
            from_q in 0i64..4000,
            len_q in 1i64..12000,
            cuts in proptest::collection::vec(0i64..16000, 0..12),
            calendar in any::<bool>(),
            move_days in any::<bool>(),
        ) {
            let origin = t("2026-01-28T00:00:00Z");
            let q = |n: i64| origin + TimeDelta::minutes(15 * n);
            let (from, to) = (q(from_q), q(from_q + len_q));
            // Bucket starts: the range's start, then the boundaries after it.
            let mut starts: Vec<DateTime<Utc>> = cuts.into_iter().map(q).filter(|s| *s > from).collect();
            starts.push(from);
            starts.sort();
            starts.dedup();
            let bucket = |x: DateTime<Utc>| starts.partition_point(|s| *s <= x);
            // quarter -> bucket -> net count
            let mut net: std::collections::BTreeMap<(DateTime<Utc>, usize), i64> = Default::default();
            let mut add = |u: DateTime<Utc>, end: DateTime<Utc>, label: DateTime<Utc>, sign: i64| {
                let mut x = u;
                while x < end {
                    *net.entry((x, bucket(label))).or_default() += sign;
                    x += TimeDelta::minutes(15);
                }
            };
            match Split::moving(from, to, &starts, calendar, move_days) {
                None => add(from, to, from, 0),
                Some(split) => {
                    for level in &split.levels {
                        prop_assert!(calendar || (matches!(level.grain, Grain::Hour | Grain::Quarter) && level.moved.is_empty()));
                        prop_assert!(move_days || level.grain != Grain::Day || level.moved.iter().all(|m| m.sign == -1));
                        for u in level.units() {
                            let end = level.grain.next(u);
                            prop_assert!(from <= u && end <= to);
                            add(u, end, u, 1);
                        }
                        for m in &level.moved {
                            let end = level.grain.next(m.unit);
                            prop_assert!(from <= m.unit && end <= to && from <= m.label);
                            add(m.unit, end, m.label, m.sign);
                        }
                    }
                }
            }
            net.retain(|_, n| *n != 0);
            let want: std::collections::BTreeMap<(DateTime<Utc>, usize), i64> = match net.is_empty() {
                // Quarter rows alone: nothing was added above.
                true => Default::default(),
                false => (from_q..from_q + len_q).map(|n| ((q(n), bucket(q(n))), 1)).collect(),
            };
            prop_assert_eq!(net, want);
        }
    }
}
