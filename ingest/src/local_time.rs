//! Local wall times in an IANA zone read the way Postgres reads them (`timestamp AT TIME ZONE tz`), for
//! the usage buckets ([`crate::query::buckets`]) and the budgets' periods ([`crate::budgets`]) alike. A
//! leaf: it uses nothing else of the crate.

use chrono::{DateTime, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;

/// Postgres' reading of a local wall time: repeated → later offset; skipped → offset before the gap.
pub fn resolve(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&local) {
        chrono::LocalResult::Single(t) => t.with_timezone(&Utc),
        chrono::LocalResult::Ambiguous(_, later) => later.with_timezone(&Utc),
        chrono::LocalResult::None => {
            // The offset in force a day before (no zone has two changes within a day).
            let before = tz
                .offset_from_local_datetime(&(local - TimeDelta::days(1)))
                .earliest()
                .map(|o| o.fix().local_minus_utc())
                .unwrap_or(0);
            Utc.from_utc_datetime(&(local - TimeDelta::seconds(i64::from(before))))
        }
    }
}
