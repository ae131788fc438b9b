//! `GET /v1/whoami` (any scope): what the presented token is — its tenant, scopes, and the user and
//! device it is bound to. The agent asks it at `sync enable`, at start and in `doctor`, so that a device
//! without a configured identity takes the token's, and a configured one that contradicts the token is
//! named at once instead of pausing sync later.

use axum::Json;
use serde::Serialize;
use uuid::Uuid;

use crate::auth::Principal;

/// The answer of `GET /v1/whoami`.
#[derive(Debug, Serialize)]
pub struct WhoAmI {
    pub tenant_id: Uuid,
    /// `ingest`, `read`, `admin`.
    pub scopes: Vec<&'static str>,
    /// The user every session this token sends belongs to, if bound.
    pub user_id: Option<String>,
    /// The device every batch this token sends comes from, if bound.
    pub device_id: Option<String>,
}

pub async fn get_whoami(principal: Principal) -> Json<WhoAmI> {
    Json(WhoAmI {
        tenant_id: principal.tenant_id,
        scopes: principal.scopes.iter().map(|s| s.as_str()).collect(),
        user_id: principal.user_id.clone(),
        device_id: principal.device_id.clone(),
    })
}
