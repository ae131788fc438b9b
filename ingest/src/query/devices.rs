//! The device listing (`GET /v1/devices`): the tenant's devices with liveness, the agent's last backlog
//! and the events it reported dropped. A `read` token bound to a user sees only that user's devices.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::ReadDb;
use crate::access::TenantRead;
use crate::error::ApiError;

/// Most devices one read returns.
const MAX_DEVICES: i64 = 10_000;

/// A stored device.
#[derive(Debug, sqlx::FromRow)]
struct DeviceRow {
    device_id: String,
    user_id: String,
    first_seen_at: DateTime<Utc>,
    last_seen_at: Option<DateTime<Utc>>,
    last_heartbeat_at: Option<DateTime<Utc>>,
    agent_version: Option<String>,
    backlog_events: Option<i64>,
    backlog_bytes: Option<i64>,
    oldest_pending_age_seconds: Option<f64>,
    sync_state: Option<String>,
    dropped_events: i64,
}

/// A device: when it was heard from (batches, heartbeats), whether it is online, its agent's version
/// and last reported backlog, and the events it reported dropped.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeviceBody {
    pub device_id: String,
    /// Null when the device has no user.
    pub user_id: Option<String>,
    pub first_seen_at: DateTime<Utc>,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// Heard from (a batch or a heartbeat) within `offline_after_secs`.
    pub online: bool,
    pub agent_version: Option<String>,
    pub backlog_events: Option<i64>,
    pub backlog_bytes: Option<i64>,
    pub oldest_pending_age_seconds: Option<f64>,
    pub sync_state: Option<String>,
    pub dropped_events: i64,
}

/// `GET /v1/devices`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeviceList {
    /// Most recently heard first.
    pub devices: Vec<DeviceBody>,
}

impl DeviceBody {
    fn new(r: DeviceRow, now: DateTime<Utc>, offline_after: chrono::Duration) -> DeviceBody {
        let heard = r.last_seen_at.max(r.last_heartbeat_at);
        DeviceBody {
            online: heard.is_some_and(|h| now - h <= offline_after),
            device_id: r.device_id,
            user_id: (!r.user_id.is_empty()).then_some(r.user_id),
            first_seen_at: r.first_seen_at,
            last_seen_at: r.last_seen_at,
            last_heartbeat_at: r.last_heartbeat_at,
            agent_version: r.agent_version,
            backlog_events: r.backlog_events,
            backlog_bytes: r.backlog_bytes,
            oldest_pending_age_seconds: r.oldest_pending_age_seconds,
            sync_state: r.sync_state,
            dropped_events: r.dropped_events,
        }
    }
}

/// Every device the reader may see, most recently heard first.
pub async fn list(db: &ReadDb, r: &TenantRead, now: DateTime<Utc>) -> Result<DeviceList, ApiError> {
    let rows: Vec<DeviceRow> = sqlx::query_as(
        "SELECT device_id, user_id, first_seen_at, last_seen_at, last_heartbeat_at, agent_version,
                backlog_events, backlog_bytes, oldest_pending_age_seconds, sync_state, dropped_events
         FROM devices WHERE tenant_id = $1 AND ($2::text IS NULL OR user_id = $2)
         ORDER BY GREATEST(last_heartbeat_at, last_seen_at) DESC NULLS LAST, device_id LIMIT $3",
    )
    .bind(r.tenant_id())
    .bind(r.user())
    .bind(MAX_DEVICES)
    .fetch_all(&db.pool)
    .await?;
    let offline_after = chrono::Duration::seconds(db.rules.offline_after_secs);
    Ok(DeviceList {
        devices: rows
            .into_iter()
            .map(|row| DeviceBody::new(row, now, offline_after))
            .collect(),
    })
}
