//! `GET /v1/whoami` (any scope): what the presented token is — its tenant, scopes, and the user and
//! device it is bound to; for a token with the `ingest` scope also the tenant's colony secret (created on
//! first use, [`crate::store::colonies`]), from which the agent derives colony keys. The agent asks it at
//! `sync enable`, at start and in `doctor`, so that a device without a configured identity takes the
//! token's, and a configured one that contradicts the token is named at once instead of pausing sync
//! later; and the tenant's colony names choice (`colony_names`, see `/v1/tenant/settings`), which every
//! device's settings page shows before sharing is turned on.

use apiary_schema::identity::TokenIdentity;
use axum::extract::State;
use axum::Json;

use super::docs::{AuthErrors, TokenIdentityBody};
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::state::AppState;

/// What the presented token is: tenant_id, scopes, and the user_id and device_id it is bound to (null
/// when unbound); colony_secret for tokens with the ingest scope. Any scope. The answer is the shared
/// contract type, so the agent reads what this writes.
#[utoipa::path(
    get,
    path = "/v1/whoami",
    security(("bearer" = [])),
    responses((status = 200, description = "The token's identity.", body = TokenIdentityBody), AuthErrors)
)]
pub async fn get_whoami(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<TokenIdentity>, ApiError> {
    let settings = crate::store::admin::tenant_settings(&state.pool, principal.tenant_id)
        .await
        .map_err(|e| match e {
            crate::store::admin::AdminError::Query(e) => ApiError::from(e),
            other => ApiError::Internal(other.into()),
        })?;
    let colony_secret = if principal.scopes.contains(&Scope::Ingest) {
        Some(crate::store::colonies::secret_of(&state.pool, principal.tenant_id).await?)
    } else {
        None
    };
    Ok(Json(TokenIdentity {
        tenant_id: principal.tenant_id.to_string(),
        scopes: principal
            .scopes
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
        user_id: principal.user_id.clone(),
        device_id: principal.device_id.clone(),
        colony_secret,
        colony_names: Some(settings.colony_names),
    }))
}
