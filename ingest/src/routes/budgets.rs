//! Budgets: `POST /v1/budgets`, `PUT`, `PATCH` and `DELETE /v1/budgets/{id}` (scope `admin`);
//! `GET /v1/budgets` and `GET /v1/budgets/{id}` (any read token of the tenant; a `read` token bound to a
//! user sees only the budgets scoped to that user, since it reads no one else's usage). Each
//! answer carries the current period's spend, what remains, the percent, a linear forecast to the
//! period's end, and the thresholds crossed (see [`crate::budgets`]).
//!
//! `PUT` replaces the whole budget: its body is what `POST` takes, and must name the `scope` (a body
//! without one would silently turn a user's, model's or colony's budget into the whole tenant's; it is
//! refused with 422 `missing_scope`). `PATCH` changes only the fields it sends ([`super::budget_patch`]).
//!
//! Bad input is a 400 (`invalid_budget`, naming the field); nothing is stored. Another tenant's or an
//! unknown id is a 404.

use apiary_schema::quota::BudgetScope;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::budget_body::invalid;
pub use super::budget_body::{NewBudget, ScopeBody};
use super::budget_patch::BudgetPatch;
use super::docs::{EditErrors, ReadErrors};
use super::extract::Path;
use crate::auth::{Principal, Scope};
use crate::budgets::{self, Budget, Evaluated, Period, Unit, MAX_BUDGETS};
use crate::error::ApiError;
use crate::query::ReadDb;
use crate::state::AppState;

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

fn parse_body(body: &[u8]) -> Result<NewBudget, ApiError> {
    // serde's message names the field and never quotes a value back for these types.
    serde_json::from_slice(body).map_err(|e| invalid(format!("the body is not a budget: {e}")))
}

/// Creates a budget (scope admin); answers it with its current period.
#[utoipa::path(
    post,
    path = "/v1/budgets",
    request_body(content = NewBudget, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 201, description = "The budget as stored, with its current period.", body = BudgetBody), ReadErrors)
)]
pub async fn post_budget(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<BudgetBody>), ApiError> {
    principal.require(Scope::Admin)?;
    let asked = parse_body(&body)?;
    let b = create(&state.pool, &state.reads, principal.tenant_id, asked).await?;
    Ok((StatusCode::CREATED, Json(b)))
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

/// Replaces a budget's definition, whole (scope admin): the body is what `POST` takes and must name the
/// `scope` (422 `missing_scope` otherwise; `PATCH` changes some fields only). Thresholds already crossed
/// in the current period are not announced again.
#[utoipa::path(
    put,
    path = "/v1/budgets/{id}",
    params(("id" = String, Path, description = "budget id")),
    request_body(content = NewBudget, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 200, description = "The budget as stored.", body = BudgetBody), EditErrors)
)]
pub async fn put_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<BudgetBody>, ApiError> {
    principal.require(Scope::Admin)?;
    let asked = parse_body(&body)?;
    if asked.scope.is_none() {
        return Err(ApiError::Unprocessable {
            code: "missing_scope",
            message:
                "PUT replaces the whole budget, and this body has no `scope`: send the scope too \
                      ({} for the whole tenant), or change only the fields you send with PATCH \
                      /v1/budgets/{id}"
                    .into(),
        });
    }
    let Some(old) = crate::store::budgets::get(&state.pool, principal.tenant_id, &id).await? else {
        return Err(ApiError::NotFound("budget"));
    };
    let mut budget = asked.check(principal.tenant_id, id)?;
    budget.created_at = old.created_at;
    if !crate::store::budgets::update(&state.pool, principal.tenant_id, &budget).await? {
        return Err(ApiError::NotFound("budget"));
    }
    stored(&state, principal.tenant_id, &budget.budget_id).await
}

/// Changes only the fields the body sends (scope admin); see [`super::budget_patch`]. Thresholds
/// already crossed in the current period are not announced again.
#[utoipa::path(
    patch,
    path = "/v1/budgets/{id}",
    params(("id" = String, Path, description = "budget id")),
    request_body(content = BudgetPatch, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 200, description = "The budget as stored.", body = BudgetBody), EditErrors)
)]
pub async fn patch_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<BudgetBody>, ApiError> {
    principal.require(Scope::Admin)?;
    let patch = super::budget_patch::parse(&body)?;
    let tenant_id = principal.tenant_id;
    // Read, apply, store if unchanged since the read; another writer in between: read again.
    for _ in 0..PATCH_ATTEMPTS {
        let Some(old) = crate::store::budgets::get(&state.pool, tenant_id, &id).await? else {
            return Err(ApiError::NotFound("budget"));
        };
        let mut budget = patch.clone().apply(&old)?.check(tenant_id, id.clone())?;
        budget.created_at = old.created_at;
        if crate::store::budgets::update_if_unchanged(
            &state.pool,
            tenant_id,
            &budget,
            old.updated_at,
        )
        .await?
        {
            return stored(&state, tenant_id, &id).await;
        }
    }
    Err(ApiError::Busy(format!(
        "budget {id} was changed by others {PATCH_ATTEMPTS} times while this patch was applied; retry"
    )))
}

/// How often `PATCH` reads the budget again when another writer changed it meanwhile.
const PATCH_ATTEMPTS: usize = 5;

/// The budget as stored now, with its current period.
async fn stored(state: &AppState, tenant_id: Uuid, id: &str) -> Result<Json<BudgetBody>, ApiError> {
    let b = crate::store::budgets::get(&state.pool, tenant_id, id)
        .await?
        .ok_or(ApiError::NotFound("budget"))?;
    Ok(Json(one(&state.pool, &state.reads, tenant_id, b).await?))
}

/// Deletes a budget and its crossings (scope admin).
#[utoipa::path(
    delete,
    path = "/v1/budgets/{id}",
    params(("id" = String, Path, description = "budget id")),
    security(("bearer" = [])),
    responses((status = 204, description = "Deleted."), ReadErrors)
)]
pub async fn delete_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.require(Scope::Admin)?;
    if crate::store::budgets::delete(&state.pool, principal.tenant_id, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("budget"))
    }
}

/// The budgets the token may see, each with its current period (any read token; a `read` token bound to
/// a user sees the budgets scoped to that user).
#[utoipa::path(
    get,
    path = "/v1/budgets",
    security(("bearer" = [])),
    responses((status = 200, description = "Budgets.", body = BudgetList), ReadErrors)
)]
pub async fn list_budgets(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<BudgetList>, ApiError> {
    principal.require(Scope::Read)?;
    Ok(Json(
        list(
            &state.pool,
            &state.reads,
            principal.tenant_id,
            principal.read_user(),
        )
        .await?,
    ))
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

/// One budget with its current period.
#[utoipa::path(
    get,
    path = "/v1/budgets/{id}",
    params(("id" = String, Path, description = "budget id")),
    security(("bearer" = [])),
    responses((status = 200, description = "The budget.", body = BudgetBody), ReadErrors)
)]
pub async fn get_budget(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<BudgetBody>, ApiError> {
    principal.require(Scope::Read)?;
    let user = principal.read_user();
    let b = crate::store::budgets::get(&state.pool, principal.tenant_id, &id)
        .await?
        .filter(|b| user.is_none() || b.scope.user.as_deref() == user)
        .ok_or(ApiError::NotFound("budget"))?;
    Ok(Json(
        one(&state.pool, &state.reads, principal.tenant_id, b).await?,
    ))
}
