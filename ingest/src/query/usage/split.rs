//! How a tenant-wide usage query divides its range between the two rollups (see [`super`]'s notes):
//! whole UTC hours from `usage_rollups_hourly`, the rest from the 15-minute `usage_rollups`.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};

/// How a tenant-wide query splits `[from, to)` between the two rollups: hourly rows for the whole UTC
/// hours `[hour_from, hour_to)` except `cut_hours` (hours a bucket boundary falls inside, e.g. the
/// 18:00 UTC hour of a day in Asia/Kolkata), and the 15-minute rows `quarters` for everything else (the
/// partial hours at both ends and the cut hours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub hour_from: DateTime<Utc>,
    pub hour_to: DateTime<Utc>,
    pub cut_hours: Vec<DateTime<Utc>>,
    pub quarters: Vec<DateTime<Utc>>,
}

impl Split {
    /// None when quarter rows alone are the better plan: no whole hour in the range, or boundaries
    /// cut more than a quarter of the hours (hour buckets in a half- or quarter-hour zone).
    pub fn of(from: DateTime<Utc>, to: DateTime<Utc>, starts: &[DateTime<Utc>]) -> Option<Split> {
        let hour = TimeDelta::hours(1);
        let hour_from = from.duration_round_up(hour).ok()?;
        let hour_to = to.duration_trunc(hour).ok()?;
        if hour_from >= hour_to {
            return None;
        }
        let hour_of = |t: DateTime<Utc>| t.duration_trunc(hour).expect("in range");
        let mut cut_hours: Vec<DateTime<Utc>> = starts
            .iter()
            .filter(|s| **s > hour_from && **s < hour_to && hour_of(**s) != **s)
            .map(|s| hour_of(*s))
            .collect();
        cut_hours.dedup();
        if cut_hours.len() as i64 * 4 > (hour_to - hour_from).num_hours() {
            return None;
        }
        let mut quarters = vec![];
        let mut push_range = |a: DateTime<Utc>, b: DateTime<Utc>| {
            let mut t = a;
            while t < b {
                quarters.push(t);
                t += TimeDelta::minutes(15);
            }
        };
        push_range(from, hour_from);
        for h in &cut_hours {
            push_range(*h, *h + hour);
        }
        push_range(hour_to, to);
        Some(Split {
            hour_from,
            hour_to,
            cut_hours,
            quarters,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = Split::of(starts[0], t("2026-11-03T12:45:00Z"), &starts).unwrap();
        assert_eq!(
            (s.hour_from, s.hour_to),
            (t("2026-11-01T11:00:00Z"), t("2026-11-03T12:00:00Z"))
        );
        assert_eq!(
            s.cut_hours,
            vec![t("2026-11-01T18:00:00Z"), t("2026-11-02T18:00:00Z")]
        );
        assert_eq!(s.quarters.len(), 3 + 4 + 4 + 3);
        assert_eq!(s.quarters[0], starts[0]);
        // Hour buckets of a half-hour zone cut every hour: quarter rows only.
        let halves: Vec<DateTime<Utc>> = (0..48)
            .map(|h| t("2026-11-01T00:30:00Z") + TimeDelta::hours(h))
            .collect();
        assert_eq!(
            Split::of(halves[0], t("2026-11-03T00:30:00Z"), &halves),
            None
        );
    }
}
