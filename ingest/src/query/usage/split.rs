//! How a tenant-wide usage query divides its range between the rollups (see [`super`]'s notes): whole
//! UTC months from `usage_rollups_monthly`, whole UTC days from `usage_rollups_daily`, whole UTC hours
//! from `usage_rollups_narrow` (or `usage_rollups_hourly`), and the rest from the 15-minute
//! `usage_rollups` — each unit taken at the coarsest grain that no bucket boundary cuts.

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

/// The units of one grain a query reads, as contiguous ranges `[from, to)` of unit starts, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    pub grain: Grain,
    pub ranges: Vec<(DateTime<Utc>, DateTime<Utc>)>,
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
        };
        gaps.units()
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
    /// The split of `[from, to)` (both on 15-minute boundaries) for bucket starts `starts` (sorted),
    /// reading months and days too when `calendar` (a grouping the daily and monthly rollups keep).
    /// None when the range has no whole hour no boundary cuts: quarter rows alone.
    pub fn of(
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        starts: &[DateTime<Utc>],
        calendar: bool,
    ) -> Option<Split> {
        let grains: &[Grain] = if calendar {
            &[Grain::Month, Grain::Day, Grain::Hour]
        } else {
            &[Grain::Hour]
        };
        // A boundary strictly inside [a, b) cuts the unit.
        let cut = |a: DateTime<Utc>, b: DateTime<Utc>| {
            let i = starts.partition_point(|s| *s <= a);
            starts.get(i).is_some_and(|s| *s < b)
        };
        let mut pieces = vec![(from, to)];
        let mut levels = vec![];
        for &grain in grains {
            let mut level = Level {
                grain,
                ranges: vec![],
            };
            let mut rest = vec![];
            for (a, b) in pieces {
                let mut gap_from = a;
                let mut t = grain.ceil(a);
                while grain.next(t) <= b {
                    let end = grain.next(t);
                    if !cut(t, end) {
                        if gap_from < t {
                            rest.push((gap_from, t));
                        }
                        match level.ranges.last_mut() {
                            Some(last) if last.1 == t => last.1 = end,
                            _ => level.ranges.push((t, end)),
                        }
                        gap_from = end;
                    }
                    t = end;
                }
                if gap_from < b {
                    rest.push((gap_from, b));
                }
            }
            pieces = rest;
            if !level.ranges.is_empty() {
                levels.push(level);
            }
        }
        if levels.is_empty() {
            return None;
        }
        if !pieces.is_empty() {
            levels.push(Level {
                grain: Grain::Quarter,
                ranges: pieces,
            });
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
        // Months of New York cut every UTC month (they start at 04:00 or 05:00 UTC) and day: the days
        // in between are whole, the cut ones read by the hour.
        let ny = [
            t("2026-03-01T05:00:00Z"),
            t("2026-04-01T04:00:00Z"),
            t("2026-05-01T04:00:00Z"),
        ];
        let s = Split::of(ny[0], ny[2], &ny, true).unwrap();
        assert_eq!(s.level(Grain::Month), None);
        assert_eq!(
            s.level(Grain::Day).unwrap().gaps(),
            vec![t("2026-04-01T00:00:00Z")]
        );
        // March 2–31 and April 2–30; March 1st starts at 05:00, April 1st is cut at 04:00.
        assert_eq!(s.level(Grain::Day).unwrap().units().len(), 30 + 29);
        assert_eq!(s.level(Grain::Hour).unwrap().units().len(), 19 + 24 + 4);
        assert_eq!(s.level(Grain::Quarter), None);
    }

    proptest! {
        /// Whatever the range and the boundaries, every quarter hour of the range is read exactly once,
        /// each unit read lies in the range, and no boundary falls strictly inside a unit read.
        #[test]
        fn every_quarter_of_the_range_is_read_once_and_no_unit_is_cut(
            from_q in 0i64..4000,
            len_q in 1i64..12000,
            cuts in proptest::collection::vec(0i64..16000, 0..12),
            calendar in any::<bool>(),
        ) {
            let origin = t("2026-01-28T00:00:00Z");
            let q = |n: i64| origin + TimeDelta::minutes(15 * n);
            let (from, to) = (q(from_q), q(from_q + len_q));
            let mut starts: Vec<DateTime<Utc>> = cuts.into_iter().map(q).collect();
            starts.sort();
            starts.dedup();
            let mut seen: Vec<DateTime<Utc>> = vec![];
            match Split::of(from, to, &starts, calendar) {
                None => {
                    let mut t = from;
                    while t < to { seen.push(t); t += TimeDelta::minutes(15); }
                }
                Some(split) => {
                    for level in &split.levels {
                        prop_assert!(calendar || matches!(level.grain, Grain::Hour | Grain::Quarter));
                        for u in level.units() {
                            let end = level.grain.next(u);
                            prop_assert!(from <= u && end <= to);
                            prop_assert!(!starts.iter().any(|s| u < *s && *s < end), "{u} cut");
                            let mut t = u;
                            while t < end { seen.push(t); t += TimeDelta::minutes(15); }
                        }
                    }
                }
            }
            seen.sort();
            let all: Vec<DateTime<Utc>> = (from_q..from_q + len_q).map(q).collect();
            prop_assert_eq!(seen, all);
        }
    }
}
