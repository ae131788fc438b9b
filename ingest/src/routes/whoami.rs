//! `GET /v1/whoami` (any scope): what the presented token is — its tenant, scopes, and the user and
//! device it is bound to. The agent asks it at `sync enable`, at start and in `doctor`, so that a device
//! without a configured identity takes the token's, and a configured one that contradicts the token is
//! named at once instead of pausing sync later.

use apiary_schema::identity::TokenIdentity;
use axum::Json;

use super::docs::{AuthErrors, TokenIdentityBody};
use crate::auth::Principal;

/// What the presented token is: tenant_id, scopes, and the user_id and device_id it is bound to (null
/// when unbound). Any scope. The answer is the shared contract type, so the agent reads what this writes.
#[utoipa::path(
    get,
    path = "/v1/whoami",
    security(("bearer" = [])),
    responses((status = 200, description = "The token's identity.", body = TokenIdentityBody), AuthErrors)
)]
pub async fn get_whoami(principal: Principal) -> Json<TokenIdentity> {
    Json(TokenIdentity {
        tenant_id: principal.tenant_id.to_string(),
        scopes: principal
            .scopes
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
        user_id: principal.user_id.clone(),
        device_id: principal.device_id.clone(),
    })
}
