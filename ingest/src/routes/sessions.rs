//! Session and colony reads (scope `read`): `/v1/sessions/{id}`, `/v1/sessions/{id}/usage`,
//! `/v1/sessions/{id}/tree`, `/v1/colonies/{id}/usage`. Unknown and other-tenant ids are both 404.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::extract::{Path, Query};
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::query::sessions;
use crate::query::usage::{self, UsageQuery};
use crate::startup::AppState;

fn check_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 200 {
        return Err(ApiError::bad_param("id", "must have 1 to 200 characters"));
    }
    Ok(())
}

/// Usage parameters with defaults for a single session or colony: all time, totals, by `group_by`.
fn usage_params(mut p: BTreeMap<String, String>, group_by: &str) -> Result<UsageQuery, ApiError> {
    p.entry("from".into())
        .or_insert_with(|| "2000-01-01T00:00:00Z".into());
    p.entry("group_by".into())
        .or_insert_with(|| group_by.into());
    let q = UsageQuery::parse(&p, chrono::Utc::now())?;
    if q.group_by.contains(&usage::Dim::Tenant) {
        return Err(ApiError::bad_param(
            "group_by",
            "tenant is not available here",
        ));
    }
    Ok(q)
}

/// One session: identity, phase, derived status, health, last event, totals.
pub async fn get_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    check_id(&id)?;
    let row = sessions::get(&state.pool, principal.tenant_id, principal.read_user(), &id).await?;
    let totals =
        sessions::totals(&state.pool, principal.tenant_id, std::slice::from_ref(&id)).await?;
    let t = totals.get(&id).copied().unwrap_or_default();
    Ok(Json(row.to_json(
        chrono::Utc::now(),
        state.thresholds(),
        &t,
    )))
}

/// A session's usage (default: all time, by model).
pub async fn get_session_usage(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    check_id(&id)?;
    let q = usage_params(params, "model")?;
    sessions::get(&state.pool, principal.tenant_id, principal.read_user(), &id).await?;
    let rows = usage::run(
        &state.pool,
        principal.tenant_id,
        &usage::Scope::Sessions(vec![id.clone()]),
        principal.read_user(),
        &q,
    )
    .await?;
    let mut body = usage::response_json(&q, &rows);
    body["session_id"] = id.into();
    Ok(Json(body))
}

/// The session and its colonies and workers, usage rolled up the tree.
pub async fn get_session_tree(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    check_id(&id)?;
    let rows =
        sessions::subtree(&state.pool, principal.tenant_id, principal.read_user(), &id).await?;
    let ids: Vec<String> = rows.iter().map(|r| r.session_id.clone()).collect();
    let usage = sessions::totals(&state.pool, principal.tenant_id, &ids).await?;
    Ok(Json(sessions::tree_json(
        &id,
        &rows,
        &usage,
        chrono::Utc::now(),
        state.thresholds(),
    )))
}

/// A colony's usage: its workers' events (default: all time, by session).
pub async fn get_colony_usage(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    principal.require(Scope::Read)?;
    check_id(&id)?;
    let q = usage_params(params, "session")?;
    if !sessions::colony_exists(&state.pool, principal.tenant_id, principal.read_user(), &id)
        .await?
    {
        return Err(ApiError::NotFound("colony"));
    }
    let rows = usage::run(
        &state.pool,
        principal.tenant_id,
        &usage::Scope::Colony(id.clone()),
        principal.read_user(),
        &q,
    )
    .await?;
    let mut body = usage::response_json(&q, &rows);
    body["colony_id"] = id.into();
    Ok(Json(body))
}
