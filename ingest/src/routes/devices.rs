//! `GET /v1/devices` (scope `read`): the tenant's devices with liveness, the agent's last backlog and the
//! events it reported dropped. A `read` token bound to a user sees only that user's devices.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::access::TenantRead;
use crate::error::ApiError;
use crate::startup::AppState;

type DeviceRow = (
    String,
    String,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<f64>,
    Option<String>,
    i64,
);

/// Every device of the tenant, most recently heard first.
pub async fn get_devices(
    State(state): State<AppState>,
    reader: TenantRead,
) -> Result<Json<Value>, ApiError> {
    let rows: Vec<DeviceRow> = sqlx::query_as(
        "SELECT device_id, user_id, first_seen_at, last_seen_at, last_heartbeat_at, agent_version,
                backlog_events, backlog_bytes, oldest_pending_age_seconds, sync_state, dropped_events
         FROM devices WHERE tenant_id = $1 AND ($2::text IS NULL OR user_id = $2)
         ORDER BY GREATEST(last_heartbeat_at, last_seen_at) DESC NULLS LAST, device_id LIMIT 10000",
    )
    .bind(reader.tenant_id())
    .bind(reader.user())
    .fetch_all(&state.pool)
    .await?;
    let now = Utc::now();
    let offline_after = chrono::Duration::seconds(state.settings.offline_after_secs);
    let devices: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            let heard = r.3.max(r.4);
            let online = heard.is_some_and(|h| now - h <= offline_after);
            json!({
                "device_id": r.0, "user_id": if r.1.is_empty() { None } else { Some(r.1) },
                "first_seen_at": r.2, "last_seen_at": r.3, "last_heartbeat_at": r.4, "online": online,
                "agent_version": r.5, "backlog_events": r.6, "backlog_bytes": r.7,
                "oldest_pending_age_seconds": r.8, "sync_state": r.9, "dropped_events": r.10,
            })
        })
        .collect();
    Ok(Json(json!({ "devices": devices })))
}
