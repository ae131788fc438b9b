//! Session and colony reads (scope `read`): `/v1/sessions` (a listing), `/v1/sessions/{id}`,
//! `/v1/sessions/{id}/usage`, `/v1/sessions/{id}/tree`, `/v1/sessions/{id}/history`,
//! `/v1/colonies/{id}/usage`. Every handler takes a
//! [`TenantRead`] (the token's tenant, and its user for a user-bound `read` token). Unknown and
//! other-tenant ids are both 404.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::extract::{Path, Query};
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::usage::{self, Part, UsageQuery, Within};
use crate::query::{history, sessions};
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

const LIST_PARAMS: [&str; 6] = ["status", "user", "device", "since", "limit", "cursor"];
const LIST_DEFAULT_LIMIT: usize = 100;
const LIST_MAX_LIMIT: usize = 1000;

/// Parses the listing's parameters; an unknown one, or a bad value, is a 400 naming it.
fn list_filter(p: &BTreeMap<String, String>) -> Result<sessions::ListFilter, ApiError> {
    if let Some(k) = p.keys().find(|k| !LIST_PARAMS.contains(&k.as_str())) {
        return Err(ApiError::bad_param(k, "unknown parameter"));
    }
    let text = |k: &str| -> Result<Option<String>, ApiError> {
        match p.get(k) {
            Some(v) if v.is_empty() || v.len() > 200 => {
                Err(ApiError::bad_param(k, "must have 1 to 200 characters"))
            }
            v => Ok(v.cloned()),
        }
    };
    let limit = match p.get("limit") {
        None => LIST_DEFAULT_LIMIT,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=LIST_MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_param(
                    "limit",
                    format!("must be a whole number from 1 to {LIST_MAX_LIMIT}"),
                )
            })?,
    };
    let statuses = p
        .get("status")
        .map(|v| crate::status::parse_statuses(v))
        .transpose()?;
    let since = match p.get("since") {
        None => None,
        Some(v) => Some(
            chrono::DateTime::parse_from_rfc3339(v)
                .map_err(|_| ApiError::bad_param("since", "must be an RFC 3339 time"))?
                .with_timezone(&chrono::Utc),
        ),
    };
    let after = match p.get("cursor") {
        None => None,
        Some(v) => Some(sessions::Cursor::decode(v).ok_or_else(|| {
            ApiError::bad_param("cursor", "is not a cursor this endpoint returned")
        })?),
    };
    Ok(sessions::ListFilter {
        user: text("user")?,
        device: text("device")?,
        since,
        statuses,
        limit,
        after,
    })
}

/// The tenant's sessions, most recently active first, a page at a time (`next_cursor` continues).
/// Filters: `status` (comma-separated derived statuses), `user`, `device`, `since`. A `read` token bound
/// to a user sees only that user's sessions.
pub async fn list_sessions(
    State(state): State<AppState>,
    reader: TenantRead,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let filter = list_filter(&params)?;
    let now = chrono::Utc::now();
    let (rows, next) =
        sessions::list(&state.pool, &reader, &filter, now, state.status_rules()).await?;
    let ids: Vec<String> = rows.iter().map(|r| r.session_id.clone()).collect();
    let totals = sessions::totals(&state.pool, &reader, &ids).await?;
    let list: Vec<Value> = rows
        .iter()
        .map(|r| {
            let t = totals.get(&r.session_id).copied().unwrap_or_default();
            r.to_json(now, state.status_rules(), &t)
        })
        .collect();
    Ok(Json(serde_json::json!({
        "sessions": list,
        "next_cursor": next.map(|c| c.encode()),
    })))
}

/// One session: identity, phase, derived status, health, last event, totals.
pub async fn get_session(
    State(state): State<AppState>,
    reader: TenantRead,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let row = sessions::get(&state.pool, &reader, &id).await?;
    let totals = sessions::totals(&state.pool, &reader, std::slice::from_ref(&id)).await?;
    let t = totals.get(&id).copied().unwrap_or_default();
    Ok(Json(row.to_json(
        chrono::Utc::now(),
        state.status_rules(),
        &t,
    )))
}

/// A session's status history: every transition `{at, from, to, cause}` oldest first, those derived
/// since its last event (no progress, offline), and its time in each status.
pub async fn get_session_history(
    State(state): State<AppState>,
    reader: TenantRead,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let row = sessions::get(&state.pool, &reader, &id).await?;
    let now = chrono::Utc::now();
    Ok(Json(
        history::session_history(&state.pool, &reader, &row, now, state.status_rules()).await?,
    ))
}

/// A session's usage (default: all time, by model).
pub async fn get_session_usage(
    State(state): State<AppState>,
    reader: TenantRead,
    Path(id): Path<String>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let q = usage_params(params, "model")?;
    sessions::get(&state.pool, &reader, &id).await?;
    let part = Part::Sessions(vec![id.clone()]);
    let rows = usage::run(&state.pool, Within::Tenant(&reader, &part), &q).await?;
    let mut body = usage::response_json(&q, &rows);
    body["session_id"] = id.into();
    Ok(Json(body))
}

/// The session and its colonies and workers, usage rolled up the tree.
pub async fn get_session_tree(
    State(state): State<AppState>,
    reader: TenantRead,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let rows = sessions::subtree(&state.pool, &reader, &id).await?;
    let ids: Vec<String> = rows.iter().map(|r| r.session_id.clone()).collect();
    let usage = sessions::totals(&state.pool, &reader, &ids).await?;
    Ok(Json(sessions::tree_json(
        &id,
        &rows,
        &usage,
        chrono::Utc::now(),
        state.status_rules(),
    )))
}

/// A colony's usage: its workers' events (default: all time, by session).
pub async fn get_colony_usage(
    State(state): State<AppState>,
    reader: TenantRead,
    Path(id): Path<String>,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let q = usage_params(params, "session")?;
    if !sessions::colony_exists(&state.pool, &reader, &id).await? {
        return Err(ApiError::NotFound("colony"));
    }
    let part = Part::Colony(id.clone());
    let rows = usage::run(&state.pool, Within::Tenant(&reader, &part), &q).await?;
    let mut body = usage::response_json(&q, &rows);
    body["colony_id"] = id.into();
    Ok(Json(body))
}
