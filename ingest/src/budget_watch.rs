//! Evaluating budgets ([`crate::budgets`] holds their definitions and rules): the spend of each budget
//! in its period read from the usage rollups ([`crate::query::budgets`]), the thresholds crossed recorded
//! once ([`crate::store::budgets`]), and the background watch that does it off the batch path
//! ([`BudgetWatch::mark`] after a batch, [`BudgetWatch::run`] every second for marked tenants and every
//! minute for all), with the quota a batch answer carries.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiary_schema::quota::Quota;
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::access::TenantRead;
use crate::budgets::{reached, Budget, Evaluated};
use crate::error::ApiError;
use crate::query::ReadDb;

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
    let bounds: Vec<_> = budgets.iter().map(|b| b.period.bounds(b.tz, now)).collect();
    let periods: Vec<_> = budgets
        .iter()
        .zip(&bounds)
        .map(|(b, (start, end))| (b, *start, *end))
        .collect();
    let spent_all = crate::query::budgets::spent_all(db, &read, &periods).await?;
    let mut out = Vec::with_capacity(budgets.len());
    for ((budget, (start, end)), spent) in budgets.into_iter().zip(bounds).zip(spent_all) {
        let reached: Vec<u32> = budget
            .thresholds
            .iter()
            .copied()
            .filter(|t| reached(spent, budget.limit, *t))
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
