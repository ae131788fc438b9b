//! The `devices` step of a batch (or of a group of batches, [`super::batch`]): each sending device's
//! liveness, its latest heartbeat (by event time) and the drops it reported, in ONE statement for the
//! whole group, its tenants included (`unnest`, rows sorted by tenant, device id and user so concurrent
//! groups lock them in the same order). A row is the device *of the sender's user* (`''` for a sender
//! bound to no user): see [`super::device_owners`] for who may write which device.
//!
//! A group never holds two batches of one device (see [`crate::group_commit`]), so each device is one
//! row here and its drop counter adds exactly the new `outbox.dropped` events of its own batch.

use apiary_schema::device::{DropReport, Heartbeat};
use apiary_schema::EventKind;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::owners::Sender;
use crate::intake::ReadyEvent;

/// One device's row of the step: what its batch says about it.
#[derive(Debug)]
pub struct DeviceFacts {
    /// The sender's tenant (a group's devices are written in one statement across its tenants).
    pub tenant_id: Uuid,
    pub device_id: String,
    /// The token's user (`''` when it has none): the row written is this user's row of the device.
    pub user_id: String,
    /// When its batch arrived (first seen, for a new row).
    pub received_at: DateTime<Utc>,
    /// `received_at` when the batch came over HTTP (live); imports say nothing about liveness.
    pub live: Option<DateTime<Utc>>,
    /// The effective time of the batch's latest heartbeat, and its payload.
    pub beat: Option<(DateTime<Utc>, Heartbeat)>,
    pub agent_version: Option<String>,
    /// New `outbox.dropped` counts, summed (saturating: a drop counter, not usage).
    pub dropped: i64,
}

impl DeviceFacts {
    /// The facts of the device `device_id` from its batch's new events.
    pub fn of(
        sender: &Sender,
        device_id: String,
        received_at: DateTime<Utc>,
        agent_version: Option<String>,
        events: &[&ReadyEvent],
    ) -> DeviceFacts {
        let beat = events
            .iter()
            .filter(|e| e.event.kind == EventKind::AgentHeartbeat)
            .max_by_key(|e| e.effective_at)
            .map(|b| (b.effective_at, Heartbeat::from_data(&b.event.data)));
        let dropped: i128 = events
            .iter()
            .filter(|e| e.event.kind == EventKind::OutboxDropped)
            .filter_map(|e| DropReport::from_data(&e.event.data))
            .map(|r| i128::from(r.count))
            .sum();
        DeviceFacts {
            tenant_id: sender.tenant_id,
            device_id,
            user_id: sender.user_id.clone().unwrap_or_default(),
            received_at,
            live: sender.live.then_some(received_at),
            beat,
            agent_version,
            dropped: i64::try_from(dropped).unwrap_or(i64::MAX),
        }
    }
}

/// Upserts the devices (of any tenants; sorted by tenant, id and user here) in one statement.
pub async fn upsert(
    tx: &mut Transaction<'_, Postgres>,
    devices: &mut [DeviceFacts],
) -> Result<(), sqlx::Error> {
    if devices.is_empty() {
        return Ok(());
    }
    devices.sort_by(|a, b| {
        (a.tenant_id, &a.device_id, &a.user_id).cmp(&(b.tenant_id, &b.device_id, &b.user_id))
    });
    let num = |n: Option<u64>| n.and_then(|n| i64::try_from(n).ok());
    let col =
        |f: &dyn Fn(&DeviceFacts) -> Option<String>| devices.iter().map(f).collect::<Vec<_>>();
    let at = |f: &dyn Fn(&DeviceFacts) -> Option<DateTime<Utc>>| {
        devices.iter().map(f).collect::<Vec<_>>()
    };
    let int = |f: &dyn Fn(&DeviceFacts) -> Option<i64>| devices.iter().map(f).collect::<Vec<_>>();
    fn payload(d: &DeviceFacts) -> Option<&Heartbeat> {
        d.beat.as_ref().map(|b| &b.1)
    }
    sqlx::query(UPSERT_SQL)
        .bind(devices.iter().map(|d| d.tenant_id).collect::<Vec<_>>())
        .bind(col(&|d| Some(d.device_id.clone())))
        .bind(col(&|d| Some(d.user_id.clone())))
        .bind(at(&|d| Some(d.received_at)))
        .bind(at(&|d| d.live))
        .bind(at(&|d| d.beat.as_ref().and(d.live)))
        .bind(at(&|d| d.beat.as_ref().map(|b| b.0)))
        .bind(col(&|d| {
            payload(d)
                .and_then(|p| p.agent_version.clone())
                .or_else(|| d.agent_version.clone())
        }))
        .bind(int(&|d| num(payload(d).and_then(|p| p.backlog_events))))
        .bind(int(&|d| num(payload(d).and_then(|p| p.backlog_bytes))))
        .bind(
            devices
                .iter()
                .map(|d| payload(d).and_then(|p| p.oldest_pending_age_seconds))
                .collect::<Vec<_>>(),
        )
        .bind(col(&|d| payload(d).and_then(|p| p.sync_state.clone())))
        .bind(devices.iter().map(|d| d.dropped).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Liveness moves forward only; the backlog fields follow the latest heartbeat by event time; drops add
/// up (saturating at the bigint maximum instead of failing the batch).
const UPSERT_SQL: &str = "
INSERT INTO devices AS d (tenant_id, device_id, user_id, first_seen_at, last_seen_at, last_heartbeat_at,
    heartbeat_event_at, agent_version, backlog_events, backlog_bytes, oldest_pending_age_seconds, sync_state,
    dropped_events)
SELECT u.* FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::timestamptz[],
    $7::timestamptz[], $8::text[], $9::int8[], $10::int8[], $11::float8[], $12::text[], $13::int8[]) AS u
ON CONFLICT (tenant_id, device_id, user_id) DO UPDATE SET
    dropped_events = LEAST(d.dropped_events::numeric + EXCLUDED.dropped_events, 9223372036854775807)::bigint,
    last_seen_at = GREATEST(d.last_seen_at, EXCLUDED.last_seen_at),
    last_heartbeat_at = GREATEST(d.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
    agent_version = COALESCE(EXCLUDED.agent_version, d.agent_version),
    backlog_events = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
        OR d.heartbeat_event_at IS NULL THEN COALESCE(EXCLUDED.backlog_events, d.backlog_events)
        ELSE d.backlog_events END,
    backlog_bytes = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
        OR d.heartbeat_event_at IS NULL THEN COALESCE(EXCLUDED.backlog_bytes, d.backlog_bytes)
        ELSE d.backlog_bytes END,
    oldest_pending_age_seconds = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
        OR d.heartbeat_event_at IS NULL
        THEN COALESCE(EXCLUDED.oldest_pending_age_seconds, d.oldest_pending_age_seconds)
        ELSE d.oldest_pending_age_seconds END,
    sync_state = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
        OR d.heartbeat_event_at IS NULL THEN COALESCE(EXCLUDED.sync_state, d.sync_state)
        ELSE d.sync_state END,
    heartbeat_event_at = GREATEST(d.heartbeat_event_at, EXCLUDED.heartbeat_event_at)";
