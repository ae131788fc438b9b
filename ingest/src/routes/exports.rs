//! Usage exports (scope `admin`): `POST /v1/exports` (an OTLP/HTTP destination, its headers, interval
//! and dimensions), `GET /v1/exports` (each with its send status; never its headers),
//! `DELETE /v1/exports/{id}`. See [`crate::exports`].
//!
//! Bad input is a 400 (`invalid_export`, naming the field); nothing is stored. Another tenant's or an
//! unknown id is a 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::docs::ReadErrors;
use super::extract::Path;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::exports::store::{self, CreatedExport, ExportList, NewExport};
use crate::state::AppState;

/// Adds an export (scope admin).
#[utoipa::path(
    post,
    path = "/v1/exports",
    request_body(content = NewExport, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 201, description = "The export, with its URL and headers: shown this once.", body = CreatedExport), ReadErrors)
)]
pub async fn post_export(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedExport>), ApiError> {
    principal.require(Scope::Admin)?;
    let asked: NewExport = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest {
        code: "invalid_export",
        message: format!("the body is not an export: {e}"),
    })?;
    let allow_private = state.settings.alerts.allow_private_destinations;
    let created = store::create(&state.pool, principal.tenant_id, asked, allow_private).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// The tenant's exports and how their sends went (scope admin).
#[utoipa::path(
    get,
    path = "/v1/exports",
    security(("bearer" = [])),
    responses((status = 200, description = "The exports.", body = ExportList), ReadErrors)
)]
pub async fn list_exports(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<ExportList>, ApiError> {
    principal.require(Scope::Admin)?;
    Ok(Json(store::list(&state.pool, principal.tenant_id).await?))
}

/// Deletes an export (scope admin).
#[utoipa::path(
    delete,
    path = "/v1/exports/{id}",
    params(("id" = String, Path, description = "export id")),
    security(("bearer" = [])),
    responses((status = 204, description = "Deleted."), ReadErrors)
)]
pub async fn delete_export(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.require(Scope::Admin)?;
    store::delete(&state.pool, principal.tenant_id, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
