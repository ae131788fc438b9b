//! Budgets as the API, the dashboard and the command line manage them: create, replace, patch, delete,
//! read and list, each answer with the current period's spend, what remains, the percent, a linear
//! forecast to the period's end, and the thresholds crossed (see [`crate::budgets`]). The body a budget
//! is made from is [`body`]'s, a patch's merge [`patch`]'s.
//!
//! Each operation takes the pool (and the read side, for the spend) and a typed input and answers a
//! typed result or the one [`ApiError`]; authorization is the caller's. Bad input is a 400
//! (`invalid_budget`, naming the field); nothing is stored. Another tenant's or an unknown id is a 404.

pub mod body;
pub mod patch;

use apiary_schema::quota::BudgetScope;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::budgets::{self, Budget, Evaluated, Period, Unit, MAX_BUDGETS};
use crate::error::ApiError;
use crate::query::ReadDb;
pub use body::{invalid, NewBudget, ScopeBody};
use patch::BudgetPatch;

/// A threshold reached in the current period.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CrossingBody {
    pub threshold: u32,
    /// RFC 3339.
    pub crossed_at: String,
}

/// A budget and its current period. Amounts are exact integers in the budget's unit (`limit`, `spent`,
/// `remaining`, `forecast`: nano-USD or tokens), also given as USD (floats, for display) or tokens.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetBody {
    pub budget_id: String,
    pub name: Option<String>,
    pub scope: BudgetScope,
    pub period: Period,
    pub tz: String,
    pub unit: Unit,
    pub thresholds: Vec<u32>,
    pub limit: i64,
    pub spent: i64,
    /// `limit - spent`, never below zero.
    pub remaining: i64,
    /// `spent / limit` in percent (two decimals).
    pub percent: f64,
    /// The spend at the period's end if it goes on at the rate so far.
    pub forecast: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forecast_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent_tokens: Option<i64>,
    /// The current period, RFC 3339 (UTC).
    pub period_start: String,
    pub period_end: String,
    pub crossed: Vec<CrossingBody>,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /v1/budgets`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BudgetList {
    pub budgets: Vec<BudgetBody>,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn usd(nanos: i64) -> f64 {
    apiary_schema::usage::nanos_to_usd(nanos)
}

impl From<&Evaluated> for BudgetBody {
    fn from(e: &Evaluated) -> BudgetBody {
        let b = &e.budget;
        let forecast = budgets::forecast(e.spent, e.period_start, e.period_end, e.now);
        let remaining = (b.limit - e.spent).max(0);
        let is_usd = b.unit == Unit::Usd;
        let money = |n: i64| is_usd.then(|| usd(n));
        BudgetBody {
            budget_id: b.budget_id.clone(),
            name: b.name.clone(),
            scope: b.scope.clone(),
            period: b.period,
            tz: b.tz.name().to_string(),
            unit: b.unit,
            thresholds: b.thresholds.clone(),
            limit: b.limit,
            spent: e.spent,
            remaining,
            percent: e.percent(),
            forecast,
            limit_usd: money(b.limit),
            spent_usd: money(e.spent),
            remaining_usd: money(remaining),
            forecast_usd: money(forecast),
            limit_tokens: (!is_usd).then_some(b.limit),
            spent_tokens: (!is_usd).then_some(e.spent),
            period_start: rfc3339(e.period_start),
            period_end: rfc3339(e.period_end),
            crossed: e
                .crossed
                .iter()
                .map(|(t, at)| CrossingBody {
                    threshold: *t,
                    crossed_at: rfc3339(*at),
                })
                .collect(),
            created_at: rfc3339(b.created_at),
            updated_at: rfc3339(b.updated_at),
        }
    }
}

/// Checks and stores a new budget under a new id (`bu_` + 32 hex digits); the API's and the command
/// line's one way in.
pub async fn create(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    asked: NewBudget,
) -> Result<BudgetBody, ApiError> {
    let id = format!("bu_{}", Uuid::new_v4().simple());
    let budget = asked.check(tenant_id, id)?;
    if !crate::store::budgets::insert(pool, tenant_id, &budget).await? {
        return Err(invalid(format!(
            "the tenant already has {MAX_BUDGETS} budgets, the most it may keep"
        )));
    }
    // Answered as stored (its times are the database's, as every later read gives them).
    let stored = crate::store::budgets::get(pool, tenant_id, &budget.budget_id)
        .await?
        .ok_or(ApiError::NotFound("budget"))?;
    one(pool, db, tenant_id, stored).await
}

async fn one(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    b: Budget,
) -> Result<BudgetBody, ApiError> {
    let e = crate::budget_watch::evaluate(pool, db, tenant_id, vec![b], Utc::now()).await?;
    Ok(BudgetBody::from(&e[0]))
}

/// Replaces a budget's definition, whole, keeping its id and creation time; answers it as stored.
/// Thresholds already crossed in the current period are not announced again.
pub async fn replace(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    id: String,
    asked: NewBudget,
) -> Result<BudgetBody, ApiError> {
    let Some(old) = crate::store::budgets::get(pool, tenant_id, &id).await? else {
        return Err(ApiError::NotFound("budget"));
    };
    let mut budget = asked.check(tenant_id, id)?;
    budget.created_at = old.created_at;
    if !crate::store::budgets::update(pool, tenant_id, &budget).await? {
        return Err(ApiError::NotFound("budget"));
    }
    stored(pool, db, tenant_id, &budget.budget_id).await
}

/// Changes only the fields `patch` sends ([`patch`]); answers the budget as stored. Thresholds already
/// crossed in the current period are not announced again.
pub async fn apply_patch(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    id: &str,
    patch: &BudgetPatch,
) -> Result<BudgetBody, ApiError> {
    // Read, apply, store if unchanged since the read; another writer in between: read again.
    for _ in 0..PATCH_ATTEMPTS {
        let Some(old) = crate::store::budgets::get(pool, tenant_id, id).await? else {
            return Err(ApiError::NotFound("budget"));
        };
        let mut budget = patch
            .clone()
            .apply(&old)?
            .check(tenant_id, id.to_string())?;
        budget.created_at = old.created_at;
        if crate::store::budgets::update_if_unchanged(pool, tenant_id, &budget, old.updated_at)
            .await?
        {
            return stored(pool, db, tenant_id, id).await;
        }
    }
    Err(ApiError::Busy(format!(
        "budget {id} was changed by others {PATCH_ATTEMPTS} times while this patch was applied; retry"
    )))
}

/// How often a patch reads the budget again when another writer changed it meanwhile.
const PATCH_ATTEMPTS: usize = 5;

/// The budget as stored now, with its current period.
async fn stored(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    id: &str,
) -> Result<BudgetBody, ApiError> {
    let b = crate::store::budgets::get(pool, tenant_id, id)
        .await?
        .ok_or(ApiError::NotFound("budget"))?;
    one(pool, db, tenant_id, b).await
}

/// Deletes a budget and its crossings; 404 when the tenant has no such budget.
pub async fn delete(pool: &PgPool, tenant_id: Uuid, id: &str) -> Result<(), ApiError> {
    if crate::store::budgets::delete(pool, tenant_id, id).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound("budget"))
    }
}

/// The tenant's budgets (only those scoped to `user`, for a read limited to a user), evaluated now:
/// the API's, the dashboard's and the command line's one way in.
pub async fn list(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    user: Option<&str>,
) -> Result<BudgetList, ApiError> {
    let visible: Vec<Budget> = crate::store::budgets::list(pool, tenant_id)
        .await?
        .into_iter()
        .filter(|b| user.is_none() || b.scope.user.as_deref() == user)
        .collect();
    let e = crate::budget_watch::evaluate(pool, db, tenant_id, visible, Utc::now()).await?;
    Ok(BudgetList {
        budgets: e.iter().map(BudgetBody::from).collect(),
    })
}

/// One budget with its current period (404 unless it is scoped to `user`, for a read limited to a user).
pub async fn get(
    pool: &PgPool,
    db: &ReadDb,
    tenant_id: Uuid,
    id: &str,
    user: Option<&str>,
) -> Result<BudgetBody, ApiError> {
    let b = crate::store::budgets::get(pool, tenant_id, id)
        .await?
        .filter(|b| user.is_none() || b.scope.user.as_deref() == user)
        .ok_or(ApiError::NotFound("budget"))?;
    one(pool, db, tenant_id, b).await
}
