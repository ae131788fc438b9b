//! The tenant's own settings: `GET /v1/tenant/settings` (any scope of the tenant's tokens) and
//! `PUT /v1/tenant/settings` (scope `admin`). Today one setting, `colony_names`: `keys` (the default:
//! colony names never leave a device) or `names` (a device whose user consents sends them beside the
//! keys; see `apiary_schema::colony`). Devices learn it from `GET /v1/whoami`; the ingest applies a
//! change to batches within `token_cache_secs`.

use apiary_schema::colony::ColonyNames;
use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::ToSchema;

use super::docs::ReadErrors;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::admin::{self, AdminError, TenantSettings};

/// The schema of a colony names choice.
fn colony_names_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([
            ColonyNames::Keys.as_str(),
            ColonyNames::Names.as_str(),
        ]))
}

/// A tenant's settings, as read and as written (the whole of them: `PUT` requires every field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantSettingsBody {
    /// `keys`: colonies are known by their keys only, names never leave a device (the default).
    /// `names`: every device shows this on its settings page before sharing is turned on, and a device
    /// whose user turns sharing on then sends each colony's name beside its key.
    #[schema(schema_with = colony_names_schema)]
    pub colony_names: ColonyNames,
}

impl From<TenantSettings> for TenantSettingsBody {
    fn from(s: TenantSettings) -> TenantSettingsBody {
        TenantSettingsBody {
            colony_names: s.colony_names,
        }
    }
}

fn stored(e: AdminError) -> ApiError {
    match e {
        AdminError::NoSuchTenant(_) => ApiError::NotFound("tenant"),
        AdminError::Query(e) => e.into(),
        AdminError::Invalid(m) => ApiError::Invalid {
            message: m,
            details: vec![],
        },
    }
}

/// The token's tenant's settings (any scope).
#[utoipa::path(
    get,
    path = "/v1/tenant/settings",
    security(("bearer" = [])),
    responses((status = 200, description = "The tenant's settings.", body = TenantSettingsBody), ReadErrors)
)]
pub async fn get_tenant_settings(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<TenantSettingsBody>, ApiError> {
    let s = admin::tenant_settings(&state.pool, principal.tenant_id)
        .await
        .map_err(stored)?;
    Ok(Json(s.into()))
}

/// Replaces the tenant's settings (scope admin): `{"colony_names": "keys" | "names"}`.
#[utoipa::path(
    put,
    path = "/v1/tenant/settings",
    request_body(content = TenantSettingsBody, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 200, description = "The settings now in force.", body = TenantSettingsBody), ReadErrors)
)]
pub async fn put_tenant_settings(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<Json<TenantSettingsBody>, ApiError> {
    principal.require(Scope::Admin)?;
    let asked: TenantSettingsBody =
        serde_json::from_slice(&body).map_err(|e| ApiError::Invalid {
            message: "the body is not {\"colony_names\": \"keys\" | \"names\"}".into(),
            details: vec![e.to_string()],
        })?;
    let s = admin::set_colony_names(&state.pool, principal.tenant_id, asked.colony_names)
        .await
        .map_err(stored)?;
    Ok(Json(s.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_one_of_two_choices_and_nothing_else() {
        let ok: TenantSettingsBody = serde_json::from_str(r#"{"colony_names":"names"}"#).unwrap();
        assert_eq!(ok.colony_names, ColonyNames::Names);
        for bad in [
            r#"{"colony_names":"Names"}"#,
            r#"{"colony_names":"names","x":1}"#,
            r#"{}"#,
        ] {
            assert!(
                serde_json::from_str::<TenantSettingsBody>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
