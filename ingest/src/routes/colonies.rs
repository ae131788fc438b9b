//! Colonies by key: `GET /v1/colonies` (scope `read`, scoped like every read) and
//! `PUT /v1/colonies/{key}/label` (scope `admin`): a display label stored only here. Another tenant's or
//! an unknown key answers 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::docs::{ReadErrors, UsageErrors};
use super::extract::{Path, Query};
use super::negotiate::{csv_answer, wants_csv};
use crate::access::TenantRead;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::query::colonies::{self, ColonyLabel, ColonyList, ColonyParams};
use crate::query::{listings_csv, ReadDb};
use crate::state::AppState;

/// The tenant's colonies by key, most recently seen first: their runs (sessions and workers across
/// days), usage per day in `tz` over `[from, to)` (exact; the rule of `/v1/usage`) and labels. A `read`
/// token bound to a user sees only the colonies that user ran, with that user's usage. `format=csv` (or
/// `Accept: text/csv`) answers one line per colony.
#[utoipa::path(
    get,
    path = "/v1/colonies",
    params(ColonyParams),
    security(("bearer" = [])),
    responses((status = 200, description = "Colonies by key (as CSV with `format=csv` or `Accept: text/csv`).", content(
            (ColonyList = "application/json"),
            (String = "text/csv")
        )), UsageErrors)
)]
pub async fn list_colonies(
    State(db): State<ReadDb>,
    reader: TenantRead,
    headers: HeaderMap,
    Query(params): Query<ColonyParams>,
) -> Result<Response, ApiError> {
    let csv = wants_csv(params.format, &headers);
    let list = colonies::list(&db, &reader, params.into()).await?;
    if csv {
        return Ok(csv_answer(
            listings_csv::colonies(&list),
            &listings_csv::colonies_file_name(&list),
        ));
    }
    Ok(Json(list).into_response())
}

fn check_key(key: &str) -> Result<(), ApiError> {
    if apiary_schema::colony::is_colony_key(key) {
        Ok(())
    } else {
        Err(ApiError::bad_param(
            "key",
            "a colony key is ck_ or dk_ and 32 lowercase hexadecimal digits",
        ))
    }
}

/// Sets a colony's display label (scope admin). 404 for a key the tenant has no run of.
#[utoipa::path(
    put,
    path = "/v1/colonies/{key}/label",
    params(("key" = String, Path, description = "colony key", max_length = 35)),
    request_body(content = ColonyLabel, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 200, description = "The label as stored.", body = ColonyLabel), ReadErrors)
)]
pub async fn put_colony_label(
    State(state): State<AppState>,
    principal: Principal,
    Path(key): Path<String>,
    body: Bytes,
) -> Result<Json<ColonyLabel>, ApiError> {
    principal.require(Scope::Admin)?;
    check_key(&key)?;
    let asked: ColonyLabel = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest {
        code: "invalid_json",
        message: format!(
            "the body is not {{\"label\": \"…\"}}: {}",
            e.classify_name()
        ),
    })?;
    let label = asked.checked().map_err(|why| ApiError::Invalid {
        message: "invalid label".into(),
        details: vec![format!("label: {why}")],
    })?;
    let reader = TenantRead::of(&principal)?;
    if !colonies::visible(&state.reads, &reader, &key).await? {
        return Err(ApiError::NotFound("colony"));
    }
    crate::store::colonies::set_label(&state.pool, principal.tenant_id, &key, &label).await?;
    Ok(Json(ColonyLabel { label }))
}

/// serde_json's error category, which never quotes the input.
trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "wrong or missing fields",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}
