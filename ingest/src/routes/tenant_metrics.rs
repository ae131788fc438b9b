//! `GET /v1/metrics` (scope `read`): the tenant's usage as a Prometheus scrape (see [`crate::exports`]).
//! Not the operator's `/metrics` (the process's own metrics): this one is a tenant's, authenticated by
//! its token and scoped like every read (a user-bound `read` token scrapes its user's usage only).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use utoipa::IntoParams;

use super::docs::ReadErrors;
use super::extract::Query;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::exports::prometheus;
use crate::exports::snapshot::Snapshot;
use crate::query::params::parsed;
use crate::query::usage::GroupBy;
use crate::query::ReadDb;

/// The scrape's query string (a scrape config's `params`).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MetricsParams {
    /// Comma-separated labels of every series: user, model, colony, runtime, device (default: none, one
    /// series per metric). Each multiplies the series; a scrape of more than 2000 label sets is refused
    /// (400) and names the count.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub group_by: Option<GroupBy>,
}

/// The tenant's usage since its first event as cumulative counters (OpenMetrics text): tokens by type,
/// cost (USD, and exactly in nano-dollars), LLM calls, tool calls, errors and durations, events — the
/// same sums as `GET /v1/usage` over all time with the same `group_by`; tool call durations as a
/// histogram per tool (`GET /v1/usage?group_by=tool`); and two gauges of now: sessions by status (as
/// `GET /v1/sessions` derives it) and devices online (as `GET /v1/devices` says).
#[utoipa::path(
    get,
    path = "/v1/metrics",
    params(MetricsParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "OpenMetrics text format.", content_type = "application/openmetrics-text", body = String),
        ReadErrors
    )
)]
pub async fn get_tenant_metrics(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Query(p): Query<MetricsParams>,
) -> Result<Response, ApiError> {
    let dims = p.group_by.unwrap_or_default().0;
    if dims.iter().any(|d| crate::exports::label_of(*d).is_none()) {
        return Err(ApiError::bad_param(
            "group_by",
            "a scrape is labelled by user, model, colony, runtime or device only",
        ));
    }
    let snapshot = Snapshot::read(&db, &reader, &dims, Utc::now()).await?;
    let text = prometheus::render(&snapshot);
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}
