//! Budgets: a tenant's limits on spend (USD) or tokens per day, week (Monday start) or month in an IANA
//! zone, scoped to the whole tenant or narrowed by a user, a model and a colony key; and the thresholds
//! (percent of the limit, default 50/80/100) each crossed, once per period.
//!
//! - **Spend is read, never kept**: the sum of the usage rollups in the period (the `cost_nanos` that
//!   `/v1/usage` answers as `cost_usd`, or input + output tokens), so a budget's spend equals the usage
//!   API's answer for the same range and filter, through replays and re-pricing ([`crate::query::budgets`]).
//! - **A crossing happens once** per (budget, period, threshold): it is a row of `budget_crossings`
//!   inserted with `ON CONFLICT DO NOTHING`, by whichever replica sees the spend first
//!   ([`crate::store::budgets`]). Alerts on budgets read those rows.
//! - **Off the batch path**: a stored batch only marks its tenant ([`crate::budget_watch`]); a background
//!   task evaluates marked tenants at most every second and every tenant with
//!   budgets every minute (re-pricing, a period's end). A batch whose agent asked for its quota gets the
//!   state of the budgets that apply to its user, read at most every 10 seconds per user.
//! - **Advisory**: nothing refuses a batch because a budget is spent. The events happened; dropping them
//!   would make every later number wrong, and a device cannot be trusted to stop anyway. A runtime or the
//!   desktop reads the quota (`GET /v1/quota` on the agent) and decides.

use apiary_schema::quota::{BudgetScope, BudgetState};
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeDelta, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use utoipa::ToSchema;

/// The most budgets a tenant keeps (each is evaluated after the tenant's batches).
pub const MAX_BUDGETS: i64 = 100;

/// Thresholds when none are given (percent).
pub const DEFAULT_THRESHOLDS: [u32; 3] = [50, 80, 100];

/// A budget's period, in its zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    /// Monday to Monday.
    Week,
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }

    pub fn parse(s: &str) -> Option<Period> {
        Some(match s {
            "day" => Period::Day,
            "week" => Period::Week,
            "month" => Period::Month,
            _ => return None,
        })
    }

    /// The period `[start, end)` that holds `now`, in `tz`: local midnights read the way `/v1/usage`
    /// reads them (`date_trunc` in the zone; a midnight skipped by a DST change is the offset before the
    /// gap), so a budget's period is exactly a `granularity=day|month` bucket of the usage API (a week,
    /// seven day buckets from a Monday).
    pub fn bounds(self, tz: Tz, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let today = now.with_timezone(&tz).date_naive();
        let (start, end) = match self {
            Period::Day => (today, today + TimeDelta::days(1)),
            Period::Week => {
                let monday =
                    today - TimeDelta::days(i64::from(today.weekday().num_days_from_monday()));
                (monday, monday + TimeDelta::days(7))
            }
            Period::Month => {
                let first = today.with_day(1).expect("day 1 exists");
                let next = first
                    .checked_add_months(chrono::Months::new(1))
                    .expect("in range");
                (first, next)
            }
        };
        let midnight = |d: NaiveDate| crate::local_time::resolve(tz, d.and_time(NaiveTime::MIN));
        (midnight(start), midnight(end))
    }
}

/// What a budget's limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Nano-USD of `cost_nanos` (each turn's reported cost, else the catalog's estimate).
    Usd,
    /// Input + output tokens (cached and cache-creation tokens are inside input).
    Tokens,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Usd => "usd",
            Unit::Tokens => "tokens",
        }
    }

    pub fn parse(s: &str) -> Option<Unit> {
        match s {
            "usd" => Some(Unit::Usd),
            "tokens" => Some(Unit::Tokens),
            _ => None,
        }
    }
}

/// A budget as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub budget_id: String,
    pub name: Option<String>,
    pub scope: BudgetScope,
    pub period: Period,
    pub tz: Tz,
    pub unit: Unit,
    /// In the unit: nano-USD or tokens; positive.
    pub limit: i64,
    /// Ascending, distinct, 1..=1000.
    pub thresholds: Vec<u32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Budget {
    /// Whether the budget counts usage of `user` (a budget without a user counts everyone's).
    pub fn applies_to_user(&self, user: Option<&str>) -> bool {
        match (&self.scope.user, user) {
            (None, _) => true,
            (Some(u), Some(v)) => u == v,
            (Some(_), None) => false,
        }
    }
}

/// Whether `spent` has reached `threshold` percent of `limit`: `spent * 100 >= threshold * limit`, in
/// integers (exact at the boundary: 80% of 100 USD is reached at 80.000000000 USD, not a nano before).
pub fn reached(spent: i64, limit: i64, threshold: u32) -> bool {
    i128::from(spent) * 100 >= i128::from(threshold) * i128::from(limit)
}

/// The linear forecast of the period's spend: the rate so far carried to the period's end (the spend
/// itself once the period is over or before any of it has passed).
pub fn forecast(spent: i64, start: DateTime<Utc>, end: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    let elapsed = (now.min(end) - start).num_milliseconds();
    let total = (end - start).num_milliseconds();
    if elapsed <= 0 || elapsed >= total {
        return spent;
    }
    let f = i128::from(spent) * i128::from(total) / i128::from(elapsed);
    i64::try_from(f).unwrap_or(i64::MAX)
}

/// A budget in its current period: the spend read now and the thresholds crossed.
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub budget: Budget,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub spent: i64,
    /// (threshold, when it was crossed), ascending.
    pub crossed: Vec<(u32, DateTime<Utc>)>,
    /// The crossings this evaluation recorded (none seen before).
    pub new_crossings: Vec<u32>,
    pub now: DateTime<Utc>,
}

impl Evaluated {
    pub fn percent(&self) -> f64 {
        percent(self.spent, self.budget.limit)
    }

    /// The state a device sees.
    pub fn state(&self) -> BudgetState {
        BudgetState {
            budget_id: self.budget.budget_id.clone(),
            name: self.budget.name.clone(),
            scope: self.budget.scope.clone(),
            period: self.budget.period.as_str().into(),
            tz: self.budget.tz.name().into(),
            period_start: self.period_start,
            period_end: self.period_end,
            unit: self.budget.unit.as_str().into(),
            limit: self.budget.limit,
            spent: self.spent,
            percent: self.percent(),
            thresholds: self.budget.thresholds.clone(),
            crossed: self.crossed.iter().map(|c| c.0).collect(),
        }
    }
}

/// `spent / limit` in percent, rounded to 0.01 (display only).
pub fn percent(spent: i64, limit: i64) -> f64 {
    if limit <= 0 {
        return 0.0;
    }
    // Basis points in integers, then one division: exact to the second decimal.
    let bp = i128::from(spent) * 10_000 / i128::from(limit);
    bp as f64 / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn periods_are_local_days_weeks_and_months() {
        let kolkata: Tz = "Asia/Kolkata".parse().unwrap();
        let (s, e) = Period::Month.bounds(kolkata, at("2026-11-30T20:00:00Z"));
        // 01:30 on 1 December in Kolkata is already December there.
        assert_eq!(
            (s, e),
            (at("2026-11-30T18:30:00Z"), at("2026-12-31T18:30:00Z"))
        );
        let ny: Tz = "America/New_York".parse().unwrap();
        // The week of Sunday 1 November 2026 (DST ends that night): Monday 26 October EDT to Monday
        // 2 November EST — 169 hours.
        let (s, e) = Period::Week.bounds(ny, at("2026-11-01T12:00:00Z"));
        assert_eq!(
            (s, e),
            (at("2026-10-26T04:00:00Z"), at("2026-11-02T05:00:00Z"))
        );
        let (s, e) = Period::Day.bounds(Tz::UTC, at("2026-11-26T23:59:59Z"));
        assert_eq!(
            (s, e),
            (at("2026-11-26T00:00:00Z"), at("2026-11-27T00:00:00Z"))
        );
        // Every bound falls on the rollups' 15-minute grain, in a 45-minute zone too.
        let chatham: Tz = "Pacific/Chatham".parse().unwrap();
        for p in [Period::Day, Period::Week, Period::Month] {
            let (s, e) = p.bounds(chatham, Utc.with_ymd_and_hms(2026, 4, 5, 1, 2, 3).unwrap());
            assert_eq!(s.timestamp() % 900, 0, "{p:?}");
            assert_eq!(e.timestamp() % 900, 0, "{p:?}");
            assert!(s < e);
        }
    }

    #[test]
    fn thresholds_are_reached_exactly_and_forecasts_are_linear() {
        let limit = 100_000_000_000; // 100 USD
        assert!(!reached(79_999_999_999, limit, 80));
        assert!(reached(80_000_000_000, limit, 80));
        assert!(reached(i64::MAX, i64::MAX, 100));
        assert!(!reached(i64::MAX - 1, i64::MAX, 100));
        assert_eq!(percent(80_000_000_000, limit), 80.0);
        assert_eq!(percent(1, 3), 33.33);
        let (s, e) = (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"));
        assert_eq!(forecast(10, s, e, at("2026-11-16T00:00:00Z")), 20);
        assert_eq!(forecast(10, s, e, at("2026-12-05T00:00:00Z")), 10);
        assert_eq!(forecast(10, s, e, s), 10);
    }

    #[test]
    fn periods_and_units_read_back_the_words_they_are_stored_as() {
        for p in [Period::Day, Period::Week, Period::Month] {
            assert_eq!(Period::parse(p.as_str()), Some(p));
        }
        assert_eq!(
            [Period::Day, Period::Week, Period::Month].map(Period::as_str),
            ["day", "week", "month"]
        );
        for u in [Unit::Usd, Unit::Tokens] {
            assert_eq!(Unit::parse(u.as_str()), Some(u));
        }
        assert_eq!(
            [Unit::Usd, Unit::Tokens].map(Unit::as_str),
            ["usd", "tokens"]
        );
        for no in ["", "Day", "year", "usd ", "USD"] {
            assert_eq!((Period::parse(no), Unit::parse(no)), (None, None), "{no:?}");
        }
    }

    fn budget(user: Option<&str>) -> Budget {
        Budget {
            budget_id: "bu_1".into(),
            name: Some("team".into()),
            scope: BudgetScope {
                user: user.map(str::to_string),
                ..BudgetScope::default()
            },
            period: Period::Week,
            tz: "Europe/Paris".parse().unwrap(),
            unit: Unit::Tokens,
            limit: 3,
            thresholds: vec![50, 100],
            created_at: at("2026-11-01T00:00:00Z"),
            updated_at: at("2026-11-01T00:00:00Z"),
        }
    }

    #[test]
    fn a_budget_of_one_user_counts_only_that_user_and_one_without_counts_everyone() {
        let everyone = budget(None);
        assert!(everyone.applies_to_user(None));
        assert!(everyone.applies_to_user(Some("ana")));
        let ana = budget(Some("ana"));
        assert!(ana.applies_to_user(Some("ana")));
        assert!(!ana.applies_to_user(Some("bob")));
        assert!(!ana.applies_to_user(None));
    }

    #[test]
    fn the_state_a_device_sees_is_the_evaluation_in_the_wire_words() {
        let e = Evaluated {
            budget: budget(Some("ana")),
            period_start: at("2026-11-01T23:00:00Z"),
            period_end: at("2026-11-08T23:00:00Z"),
            spent: 2,
            crossed: vec![(50, at("2026-11-03T10:00:00Z"))],
            new_crossings: vec![],
            now: at("2026-11-04T00:00:00Z"),
        };
        assert_eq!(e.percent(), 66.66);
        let s = e.state();
        assert_eq!(
            (
                s.budget_id.as_str(),
                s.name.as_deref(),
                s.scope.user.as_deref()
            ),
            ("bu_1", Some("team"), Some("ana"))
        );
        assert_eq!(
            (s.period.as_str(), s.tz.as_str(), s.unit.as_str()),
            ("week", "Europe/Paris", "tokens")
        );
        assert_eq!(
            (s.period_start, s.period_end),
            (e.period_start, e.period_end)
        );
        assert_eq!((s.limit, s.spent, s.percent), (3, 2, 66.66));
        assert_eq!((s.thresholds, s.crossed), (vec![50, 100], vec![50]));
    }
}
