//! Budgets: `POST /v1/budgets`, `PUT`, `PATCH` and `DELETE /v1/budgets/{id}` (scope `admin`);
//! `GET /v1/budgets` and `GET /v1/budgets/{id}` (any read token of the tenant; a `read` token bound to a
//! user sees only the budgets scoped to that user, since it reads no one else's usage). Each
//! answer carries the current period's spend, what remains, the percent, a linear forecast to the
//! period's end, and the thresholds crossed (see [`crate::budgets`]).
//!
//! `PUT` replaces the whole budget: its body is what `POST` takes, and must name the `scope` (a body
//! without one would silently turn a user's, model's or colony's budget into the whole tenant's; it is
//! refused with 422 `missing_scope`). `PATCH` changes only the fields it sends
//! ([`crate::service::budgets::patch`]).
//!
//! The operations, their checks and their answers are [`crate::service::budgets`]'s; these handlers
//! check the token and speak HTTP. Bad input is a 400 (`invalid_budget`, naming the field); nothing is
//! stored. Another tenant's or an unknown id is a 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::docs::{EditErrors, ReadErrors};
use super::extract::Path;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::service::budgets::patch::BudgetPatch;
use crate::service::budgets::{self as service, invalid};
pub use crate::service::budgets::{BudgetBody, BudgetList, CrossingBody, NewBudget, ScopeBody};
use crate::state::AppState;

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
    let b = service::create(&state.pool, &state.reads, principal.tenant_id, asked).await?;
    Ok((StatusCode::CREATED, Json(b)))
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
    Ok(Json(
        service::replace(&state.pool, &state.reads, principal.tenant_id, id, asked).await?,
    ))
}

/// Changes only the fields the body sends (scope admin); see [`crate::service::budgets::patch`]. Thresholds
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
    let patch = service::patch::parse(&body)?;
    Ok(Json(
        service::apply_patch(&state.pool, &state.reads, principal.tenant_id, &id, &patch).await?,
    ))
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
    service::delete(&state.pool, principal.tenant_id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
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
        service::list(
            &state.pool,
            &state.reads,
            principal.tenant_id,
            principal.read_user(),
        )
        .await?,
    ))
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
    Ok(Json(
        service::get(&state.pool, &state.reads, principal.tenant_id, &id, user).await?,
    ))
}
