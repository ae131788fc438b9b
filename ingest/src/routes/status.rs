//! `GET /v1/status/transitions` (scope `read`): the tenant's status transitions in a time range — "what
//! went wrong today". Same tenant and user scoping as every read ([`TenantRead`]).

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::extract::Query;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::history::{self, TransitionFilter, MAX_TRANSITIONS};
use crate::startup::AppState;

const PARAMS: [&str; 4] = ["from", "to", "status", "limit"];
const DEFAULT_LIMIT: usize = 1000;

fn time(p: &BTreeMap<String, String>, k: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
    p.get(k)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::bad_param(k, "must be an RFC 3339 time"))
        })
        .transpose()
}

/// Parses the parameters: `from` (default `to` minus 24 h), `to` (exclusive, default now), `status`
/// (comma-separated: only transitions into these), `limit` (1 to 10,000, default 1,000).
fn filter(p: &BTreeMap<String, String>, now: DateTime<Utc>) -> Result<TransitionFilter, ApiError> {
    if let Some(k) = p.keys().find(|k| !PARAMS.contains(&k.as_str())) {
        return Err(ApiError::bad_param(k, "unknown parameter"));
    }
    let to = time(p, "to")?.unwrap_or(now);
    let from = time(p, "from")?.unwrap_or(to - Duration::hours(24));
    if from >= to {
        return Err(ApiError::bad_param("from", "must be before `to`"));
    }
    let limit = match p.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_TRANSITIONS).contains(n))
            .ok_or_else(|| {
                ApiError::bad_param(
                    "limit",
                    format!("must be a whole number from 1 to {MAX_TRANSITIONS}"),
                )
            })?,
    };
    let statuses = p
        .get("status")
        .map(|v| crate::status::parse_statuses(v))
        .transpose()?;
    Ok(TransitionFilter {
        from,
        to,
        statuses,
        limit,
    })
}

/// The tenant's transitions `{session_id, at, from, to, cause}` with `from <= at < to`, oldest first;
/// `truncated` when more than `limit` matched.
pub async fn get_transitions(
    State(state): State<AppState>,
    reader: TenantRead,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let now = Utc::now();
    let f = filter(&params, now)?;
    Ok(Json(
        history::tenant_transitions(&state.pool, &reader, &f, now, state.status_rules()).await?,
    ))
}
