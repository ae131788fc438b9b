//! `GET /v1/usage` (scope `read`). A tenant's token reads its own tenant only — `group_by=tenant`
//! answers that one tenant's row, whatever the token's scopes — and a `read` token bound to a user only
//! that user's usage. An operator token (made by `apiary-ingest operator-token create`) reads every
//! tenant's usage, grouped by tenant and optionally by model.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;

use super::docs::UsageErrors;
use super::extract::Query;
use super::negotiate::{usage_answer, wants_csv};
use crate::access::UsageReader;
use crate::error::ApiError;
use crate::query::usage::{self, Part, UsageParams, UsageQuery, UsageResponse, Within};
use crate::query::ReadDb;

/// Usage rows (bucket, group keys, sums) and totals; exact sums of the stored events. The one route an
/// operator token may read (per tenant). `format=csv` (or `Accept: text/csv`) answers the rows as CSV.
#[utoipa::path(
    get,
    path = "/v1/usage",
    params(UsageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Usage (as CSV with `format=csv` or `Accept: text/csv`).",
        headers(("X-Next-Cursor" = String, description = "CSV of a page (`limit`): the next page's `cursor`; absent after the last.")),
        content(
            (UsageResponse = "application/json"),
            (String = "text/csv")
        )),
        UsageErrors
    )
)]
pub async fn get_usage(
    State(db): State<ReadDb>,
    reader: UsageReader,
    headers: HeaderMap,
    Query(params): Query<UsageParams>,
) -> Result<Response, ApiError> {
    let csv = wants_csv(params.format, &headers);
    let Json(answer) = usage_json(State(db), reader, Query(params)).await?;
    Ok(usage_answer(csv, answer, "usage"))
}

/// The JSON answer of [`get_usage`] (the dashboard's pages call it too).
pub async fn usage_json(
    State(db): State<ReadDb>,
    reader: UsageReader,
    Query(params): Query<UsageParams>,
) -> Result<Json<UsageResponse>, ApiError> {
    let logged = format!("{params:?}");
    let paging = params.paging()?;
    let q = UsageQuery::from_params(params, chrono::Utc::now())?;
    let within = match &reader {
        UsageReader::Tenant(r) => Within::Tenant(r, &Part::Whole),
        UsageReader::Operator(o) => {
            // Cross-tenant reads are rare and powerful: leave a trace of each.
            tracing::info!(operator_token = %o.token_id(), query = %logged, "operator usage read");
            Within::AllTenants(o)
        }
    };
    Ok(Json(usage::answer(&db, within, &q, paging.as_ref()).await?))
}
