//! `GET /v1/devices` (scope `read`): the tenant's devices with liveness, the agent's last backlog and the
//! events it reported dropped. A `read` token bound to a user sees only that user's devices.

use axum::extract::State;
use axum::Json;

use super::docs::ReadErrors;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::devices::{self, DeviceList};
use crate::query::ReadDb;

/// Devices: last heartbeat, backlog, agent version, online.
#[utoipa::path(
    get,
    path = "/v1/devices",
    security(("bearer" = [])),
    responses((status = 200, description = "Devices, most recently heard first.", body = DeviceList), ReadErrors)
)]
pub async fn get_devices(
    State(db): State<ReadDb>,
    reader: TenantRead,
) -> Result<Json<DeviceList>, ApiError> {
    Ok(Json(devices::list(&db, &reader, chrono::Utc::now()).await?))
}
