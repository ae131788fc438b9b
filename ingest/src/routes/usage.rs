//! `GET /v1/usage` (scope `read`; `group_by=tenant` needs `admin` and spans every tenant). A `read`
//! token bound to a user sees only that user's usage.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::extract::Query;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::query::usage::{self, Dim, UsageQuery};
use crate::startup::AppState;

/// Usage rows and totals for the token's tenant.
pub async fn get_usage(
    State(state): State<AppState>,
    principal: Principal,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    let q = UsageQuery::parse(&params, chrono::Utc::now())?;
    let all_tenants = q.group_by.contains(&Dim::Tenant);
    if all_tenants && !principal.has(Scope::Admin) {
        return Err(ApiError::Forbidden(
            "group_by=tenant needs the `admin` scope".into(),
        ));
    }
    let scope = usage::Scope::Tenant { all_tenants };
    let rows = usage::run(
        &state.pool,
        principal.tenant_id,
        &scope,
        principal.read_user(),
        &q,
    )
    .await?;
    Ok(Json(usage::response_json(&q, &rows)))
}
