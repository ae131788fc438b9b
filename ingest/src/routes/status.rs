//! `GET /v1/status/transitions` (scope `read`): the tenant's status transitions in a time range — "what
//! went wrong today". Same tenant and user scoping as every read ([`TenantRead`]).

use axum::extract::State;
use axum::Json;
use chrono::Utc;

use super::docs::ReadErrors;
use super::extract::Query;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::history::{self, TransitionFilter, TransitionPage, TransitionParams};
use crate::query::ReadDb;

/// The tenant's transitions `{session_id, at, from, to, cause}` with `from <= at < to`, oldest first;
/// `truncated` when more than `limit` matched. A user-bound read token sees its user's sessions only.
#[utoipa::path(
    get,
    path = "/v1/status/transitions",
    params(TransitionParams),
    security(("bearer" = [])),
    responses((status = 200, description = "Transitions.", body = TransitionPage), ReadErrors)
)]
pub async fn get_transitions(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Query(params): Query<TransitionParams>,
) -> Result<Json<TransitionPage>, ApiError> {
    let now = Utc::now();
    let f = TransitionFilter::from_params(params, now)?;
    let page = history::tenant_transitions(&db, &reader, &f, now, db.rules()).await?;
    Ok(Json(page))
}
