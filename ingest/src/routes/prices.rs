//! Prices: `GET /v1/prices` (any read or admin token of the tenant) lists the tenant's own entries and
//! the shipped catalog; `POST /v1/prices` (scope `admin`) adds a tenant entry, effective-dated, which from
//! then on wins over the shipped catalog for the turns it matches (see [`apiary_schema::prices`]). An
//! entry is never edited: a correction is a new entry with a later `from` (or an `until` on the next),
//! and `POST /v1/prices/reprice` applies it to turns already stored.
//!
//! `POST /v1/prices/reprice?from=&to=` (scope `admin`) re-prices the turns already stored in a range with
//! the prices in force now, exactly, in bounded transactions, idempotently, with an audit row
//! (`price_reprices`; see [`crate::store::reprice`]).
//!
//! The operations, their checks and their answers are [`crate::service::prices`]'s; these handlers
//! check the token and speak HTTP. Bad input is a 400 (`invalid_price` naming the field,
//! `invalid_parameter` naming the parameter); nothing is stored.

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;

use super::docs::ReadErrors;
use super::extract::Query;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::service::prices::{self as service, invalid};
pub use crate::service::prices::{NewPrice, PriceItem, PriceList, PriceOwner};
use crate::state::AppState;
use crate::store::reprice::RepriceOutcome;

/// Adds a tenant price entry (scope admin). It prices the turns stored from now on that it matches;
/// re-price a past period to apply it to turns already stored.
#[utoipa::path(
    post,
    path = "/v1/prices",
    request_body(content = NewPrice, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 200, description = "The entry as stored.", body = PriceItem), ReadErrors)
)]
pub async fn post_price(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Json<PriceItem>, ApiError> {
    principal.require(Scope::Admin)?;
    let asked: NewPrice = serde_json::from_slice(&body).map_err(|e| {
        // serde's message names the field and never quotes a value back for these types.
        invalid(format!("the body is not a price entry: {e}"))
    })?;
    Ok(Json(
        service::add(&state.pool, principal.tenant_id, asked).await?,
    ))
}

/// The tenant's price entries (newest start first) and the shipped catalog (any read or admin token).
#[utoipa::path(
    get,
    path = "/v1/prices",
    security(("bearer" = [])),
    responses((status = 200, description = "Price entries.", body = PriceList), ReadErrors)
)]
pub async fn get_prices(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<PriceList>, ApiError> {
    principal.require(Scope::Read)?;
    Ok(Json(service::list(&state.pool, principal.tenant_id).await?))
}

/// The range to re-price.
#[derive(Debug, Clone, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RepriceParams {
    /// Start (included): `YYYY-MM-DD` (midnight UTC) or RFC 3339.
    pub from: String,
    /// End (excluded), same forms.
    pub to: String,
}

/// Re-prices the LLM turns stored in `[from, to)` (by their clock-corrected time) with the prices in
/// force now (scope admin): their estimates, and every rollup row they are in, change by exactly the
/// difference; running it again changes nothing. Answers what changed (also kept as an audit record).
#[utoipa::path(
    post,
    path = "/v1/prices/reprice",
    params(RepriceParams),
    security(("bearer" = [])),
    responses((status = 200, description = "What the run changed.", body = RepriceOutcome), ReadErrors)
)]
pub async fn post_reprice(
    State(state): State<AppState>,
    principal: Principal,
    Query(params): Query<RepriceParams>,
) -> Result<Json<RepriceOutcome>, ApiError> {
    principal.require(Scope::Admin)?;
    Ok(Json(
        service::reprice(&state.pool, principal.tenant_id, &params.from, &params.to).await?,
    ))
}
