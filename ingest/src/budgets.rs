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
//! - **Off the batch path**: a stored batch only marks its tenant ([`BudgetWatch::mark`]); a background
//!   task ([`BudgetWatch::run`]) evaluates marked tenants at most every second and every tenant with
//!   budgets every minute (re-pricing, a period's end). A batch whose agent asked for its quota gets the
//!   state of the budgets that apply to its user, read at most every 10 seconds per user.
//! - **Advisory**: nothing refuses a batch because a budget is spent. The events happened; dropping them
//!   would make every later number wrong, and a device cannot be trusted to stop anyway. A runtime or the
//!   desktop reads the quota (`GET /v1/quota` on the agent) and decides.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiary_schema::quota::{BudgetScope, BudgetState, Quota};
use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeDelta, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::ReadDb;

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
        let midnight =
            |d: NaiveDate| crate::query::buckets::resolve(tz, d.and_time(NaiveTime::MIN));
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

/// Reads the spend of each budget in its current period, records the thresholds it has reached (once
/// per period, whoever sees it first) and answers each budget's state. `budgets` are the tenant's.
pub async fn evaluate(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    budgets: Vec<Budget>,
    now: DateTime<Utc>,
) -> Result<Vec<Evaluated>, ApiError> {
    let read = TenantRead::tenant_wide(tenant_id);
    let mut out = Vec::with_capacity(budgets.len());
    for budget in budgets {
        let (start, end) = budget.period.bounds(budget.tz, now);
        let spent = crate::query::budgets::spent(db, &read, &budget, start, end).await?;
        let reached: Vec<u32> = budget
            .thresholds
            .iter()
            .copied()
            .filter(|t| self::reached(spent, budget.limit, *t))
            .collect();
        let new_crossings = if reached.is_empty() {
            vec![]
        } else {
            crate::store::budgets::record_crossings(
                pool, tenant_id, &budget, start, end, spent, &reached,
            )
            .await?
        };
        let crossed = if reached.is_empty() {
            vec![]
        } else {
            crate::store::budgets::crossings(pool, tenant_id, &budget.budget_id, start).await?
        };
        for t in &new_crossings {
            tracing::info!(%tenant_id, budget_id = %budget.budget_id, threshold = t, spent, limit = budget.limit, "budget threshold crossed");
        }
        out.push(Evaluated {
            budget,
            period_start: start,
            period_end: end,
            spent,
            crossed,
            new_crossings,
            now,
        });
    }
    Ok(out)
}

/// How often a tenant's budgets are evaluated at most, after its batches (each evaluation sums the
/// period's rollup rows of every budget: a bound on that cost under a stream of batches).
const MIN_GAP: Duration = Duration::from_secs(1);
/// How often every tenant with budgets is evaluated (periods end, prices are corrected).
const SWEEP: Duration = Duration::from_secs(60);
/// How old a quota a batch answer carries may be.
const QUOTA_STALE: Duration = Duration::from_secs(10);
/// Most cached quotas (tenant, user) kept.
const QUOTA_CACHE_MAX: usize = 100_000;

/// Recently read quotas by (tenant, user), with when they were read.
type QuotaCache = HashMap<(Uuid, Option<String>), (Instant, Arc<Quota>)>;

/// Budgets (tenant, id) spent out: (the period's start, the definition's `updated_at`).
type SpentOut = HashMap<(Uuid, String), (DateTime<Utc>, DateTime<Utc>)>;

/// The tenants with new usage since their budgets were last evaluated, and the quotas recently read.
#[derive(Default)]
pub struct BudgetWatch {
    dirty: Mutex<HashSet<Uuid>>,
    wake: tokio::sync::Notify,
    quotas: Mutex<QuotaCache>,
    /// Budgets whose every threshold is crossed in the period starting at the instant kept (as of the
    /// definition updated at the other): nothing more can happen to them until the period ends or the
    /// budget changes, so the background evaluation skips them.
    spent_out: Mutex<SpentOut>,
}

impl BudgetWatch {
    pub fn new() -> BudgetWatch {
        BudgetWatch::default()
    }

    /// A batch with new usage of `tenant_id` committed: evaluate its budgets soon. Cheap (a set insert).
    pub fn mark(&self, tenant_id: Uuid) {
        let first = self.dirty.lock().expect("not poisoned").insert(tenant_id);
        if first {
            self.wake.notify_one();
        }
    }

    /// The budgets that apply to `user` (all the tenant's budgets without a user, and `user`'s own) in
    /// their current period, read at most every 10 seconds per (tenant, user).
    pub async fn quota(
        &self,
        pool: &PgPool,
        db: &ReadDb,
        tenant_id: Uuid,
        user: Option<&str>,
    ) -> Result<Arc<Quota>, ApiError> {
        let key = (tenant_id, user.map(str::to_string));
        if let Some((at, q)) = self.quotas.lock().expect("not poisoned").get(&key) {
            if at.elapsed() < QUOTA_STALE {
                return Ok(q.clone());
            }
        }
        let now = Utc::now();
        let budgets: Vec<Budget> = crate::store::budgets::list(pool, tenant_id)
            .await?
            .into_iter()
            .filter(|b| b.applies_to_user(user))
            .collect();
        let states = evaluate(pool, db, tenant_id, budgets, now).await?;
        let quota = Arc::new(Quota {
            as_of: now,
            budgets: states.iter().map(Evaluated::state).collect(),
        });
        let mut cache = self.quotas.lock().expect("not poisoned");
        if cache.len() >= QUOTA_CACHE_MAX {
            cache.retain(|_, (at, _)| at.elapsed() < QUOTA_STALE);
            if cache.len() >= QUOTA_CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), quota.clone()));
        Ok(quota)
    }

    /// The budgets that may still cross a threshold in their current period.
    fn still_open(&self, tenant_id: Uuid, budgets: Vec<Budget>, now: DateTime<Utc>) -> Vec<Budget> {
        let spent_out = self.spent_out.lock().expect("not poisoned");
        budgets
            .into_iter()
            .filter(|b| {
                let start = b.period.bounds(b.tz, now).0;
                spent_out.get(&(tenant_id, b.budget_id.clone())) != Some(&(start, b.updated_at))
            })
            .collect()
    }

    /// Remembers the budgets that have crossed every threshold in their current period.
    fn note_spent_out(&self, tenant_id: Uuid, done: &[Evaluated]) {
        let mut spent_out = self.spent_out.lock().expect("not poisoned");
        if spent_out.len() > QUOTA_CACHE_MAX {
            spent_out.clear();
        }
        for e in done {
            if e.budget
                .thresholds
                .iter()
                .all(|t| e.crossed.iter().any(|c| c.0 == *t))
            {
                spent_out.insert(
                    (tenant_id, e.budget.budget_id.clone()),
                    (e.period_start, e.budget.updated_at),
                );
            }
        }
    }

    /// Evaluates marked tenants (at most every second) and every tenant with budgets each minute, until
    /// the process stops. Errors are logged and the tenant is tried again on the next round.
    pub async fn run(self: Arc<Self>, pool: PgPool, db: ReadDb) {
        let mut last_sweep = Instant::now();
        loop {
            let sweep = last_sweep.elapsed() >= SWEEP;
            if !sweep {
                let wait = SWEEP.saturating_sub(last_sweep.elapsed());
                let _ = tokio::time::timeout(wait, self.wake.notified()).await;
            }
            let mut tenants: HashSet<Uuid> =
                std::mem::take(&mut *self.dirty.lock().expect("not poisoned"));
            if last_sweep.elapsed() >= SWEEP {
                last_sweep = Instant::now();
                match crate::store::budgets::tenants_with_budgets(&pool).await {
                    Ok(all) => tenants.extend(all),
                    Err(e) => tracing::warn!(error = %e, "could not list the tenants with budgets"),
                }
            }
            let mut sorted: Vec<Uuid> = tenants.into_iter().collect();
            sorted.sort();
            for tenant_id in sorted {
                let now = Utc::now();
                let result = match crate::store::budgets::list(&pool, tenant_id).await {
                    Ok(b) => {
                        let open = self.still_open(tenant_id, b, now);
                        if open.is_empty() {
                            Ok(vec![])
                        } else {
                            evaluate(&pool, &db, tenant_id, open, now).await
                        }
                    }
                    Err(e) => Err(e.into()),
                };
                match result {
                    Ok(done) => self.note_spent_out(tenant_id, &done),
                    Err(e) => {
                        tracing::warn!(%tenant_id, error = %e, "budget evaluation failed; retrying");
                        self.dirty.lock().expect("not poisoned").insert(tenant_id);
                    }
                }
            }
            tokio::time::sleep(MIN_GAP).await;
        }
    }
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
}
