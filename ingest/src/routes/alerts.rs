//! Alerts: destinations (`POST/GET /v1/alerts/destinations`, `DELETE /v1/alerts/destinations/{id}`,
//! scope `admin`), rules (`POST /v1/alerts/rules` and `DELETE /v1/alerts/rules/{id}`, scope `admin`;
//! `GET /v1/alerts/rules`, any read token not bound to a user), and what fired (`GET /v1/alerts`, same),
//! with each alert's notifications and their delivery state. The operations, their checks and their
//! answers are [`crate::service::alerts`]'s; these handlers check the token and speak HTTP. See
//! [`crate::alerts`].
//!
//! Bad input is a 400 (`invalid_alert`, naming the field); nothing is stored. Another tenant's or an
//! unknown id is a 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use super::docs::ReadErrors;
use super::extract::{Path, Query};
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::service::alerts as service;
use crate::service::alerts::invalid;
pub use crate::service::alerts::{
    AlertBody, AlertList, AlertParams, CreatedDestination, DestinationBody, DestinationList,
    NewDestination, NewRule, NotificationBody, RuleBody, RuleList,
};
use crate::state::AppState;

/// Alerts are tenant-wide: a read token bound to a user may not list them (they name other users'
/// sessions and devices).
fn tenant_reader(p: &Principal) -> Result<(), ApiError> {
    p.require(Scope::Read)?;
    if p.read_user().is_some() {
        return Err(ApiError::Forbidden(
            "alerts are tenant-wide: use a read token that is not bound to a user".into(),
        ));
    }
    Ok(())
}

/// Adds a destination (scope admin).
#[utoipa::path(
    post,
    path = "/v1/alerts/destinations",
    request_body(content = NewDestination, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 201, description = "The destination, with its URL and (when the server made it) its secret: shown this once.", body = CreatedDestination), ReadErrors)
)]
pub async fn post_destination(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedDestination>), ApiError> {
    principal.require(Scope::Admin)?;
    let asked: NewDestination = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("the body is not a destination: {e}")))?;
    let d = service::create_destination(
        &state.pool,
        principal.tenant_id,
        asked,
        state.settings.alerts.allow_private_destinations,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(d)))
}

/// The tenant's destinations (scope admin): host and URL fingerprint, never the URL nor the secret.
#[utoipa::path(
    get,
    path = "/v1/alerts/destinations",
    security(("bearer" = [])),
    responses((status = 200, description = "Destinations.", body = DestinationList), ReadErrors)
)]
pub async fn list_destinations(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<DestinationList>, ApiError> {
    principal.require(Scope::Admin)?;
    Ok(Json(
        service::destinations(&state.pool, principal.tenant_id).await?,
    ))
}

/// Deletes a destination (scope admin); 400 while rules send to it.
#[utoipa::path(
    delete,
    path = "/v1/alerts/destinations/{id}",
    params(("id" = String, Path, description = "destination id")),
    security(("bearer" = [])),
    responses((status = 204, description = "Deleted."), ReadErrors)
)]
pub async fn delete_destination(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.require(Scope::Admin)?;
    service::delete_destination(&state.pool, principal.tenant_id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds a rule (scope admin).
#[utoipa::path(
    post,
    path = "/v1/alerts/rules",
    request_body(content = NewRule, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 201, description = "The rule.", body = RuleBody), ReadErrors)
)]
pub async fn post_rule(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<RuleBody>), ApiError> {
    principal.require(Scope::Admin)?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("the body is not a rule: {e}")))?;
    let asked = NewRule::parse(body)?;
    Ok((
        StatusCode::CREATED,
        Json(service::create_rule(&state.pool, principal.tenant_id, asked).await?),
    ))
}

/// The tenant's rules (any read token not bound to a user).
#[utoipa::path(
    get,
    path = "/v1/alerts/rules",
    security(("bearer" = [])),
    responses((status = 200, description = "Rules.", body = RuleList), ReadErrors)
)]
pub async fn list_rules(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<RuleList>, ApiError> {
    tenant_reader(&principal)?;
    Ok(Json(
        service::rules(&state.pool, principal.tenant_id).await?,
    ))
}

/// Deletes a rule with its alerts and their notifications (scope admin).
#[utoipa::path(
    delete,
    path = "/v1/alerts/rules/{id}",
    params(("id" = String, Path, description = "rule id")),
    security(("bearer" = [])),
    responses((status = 204, description = "Deleted."), ReadErrors)
)]
pub async fn delete_rule(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.require(Scope::Admin)?;
    service::delete_rule(&state.pool, principal.tenant_id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Fired alerts, newest first, with their notifications (any read token not bound to a user).
#[utoipa::path(
    get,
    path = "/v1/alerts",
    params(AlertParams),
    security(("bearer" = [])),
    responses((status = 200, description = "Alerts.", body = AlertList), ReadErrors)
)]
pub async fn list_alerts(
    State(state): State<AppState>,
    principal: Principal,
    Query(params): Query<AlertParams>,
) -> Result<Json<AlertList>, ApiError> {
    tenant_reader(&principal)?;
    Ok(Json(
        service::alerts(&state.pool, principal.tenant_id, &params).await?,
    ))
}
