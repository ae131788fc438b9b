//! `GET /v1/usage` (scope `read`). A tenant's token reads its own tenant only — `group_by=tenant`
//! answers that one tenant's row, whatever the token's scopes — and a `read` token bound to a user only
//! that user's usage. An operator token (made by `apiary-ingest operator-token create`) reads every
//! tenant's usage, grouped by tenant and optionally by model.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::extract::Query;
use crate::access::UsageReader;
use crate::error::ApiError;
use crate::query::usage::{self, Part, UsageQuery, Within};
use crate::startup::AppState;

/// Usage rows and totals for the token's tenant (or per tenant, for an operator token).
pub async fn get_usage(
    State(state): State<AppState>,
    reader: UsageReader,
    Query(params): Query<BTreeMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let q = UsageQuery::parse(&params, chrono::Utc::now())?;
    let within = match &reader {
        UsageReader::Tenant(r) => Within::Tenant(r, &Part::Whole),
        UsageReader::Operator(o) => {
            // Cross-tenant reads are rare and powerful: leave a trace of each.
            tracing::info!(operator_token = %o.token_id(), query = ?params, "operator usage read");
            Within::AllTenants(o)
        }
    };
    let rows = usage::run(&state.pool, within, &q).await?;
    Ok(Json(usage::response_json(&q, &rows)))
}
