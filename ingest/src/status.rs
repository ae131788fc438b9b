//! Session status: the shared health model ([`apiary_schema::status`]) as the ingest uses it.
//!
//! The ingest keeps each session's [`Tracker`] (the model's state plus its re-order window) in
//! `sessions.health`, folds every batch's new events into it in event-time order inside the batch's
//! transaction ([`crate::store::health`]), and stores every transition in `status_transitions`. On read
//! it lets time pass up to `now` and applies the device's liveness ([`view`]); nothing about the clock is
//! stored, so every replica answers the same.

use apiary_schema::status::{Durations, Rules, Tracker};
use chrono::{DateTime, Utc};

pub use apiary_schema::status::{view, Liveness, Status, Transition, View};

use crate::config::IngestSettings;

/// The model's thresholds from the settings (`stall_after_secs`, `offline_after_secs`).
pub fn rules(s: &IngestSettings) -> Rules {
    Rules {
        stall_after_secs: s.stall_after_secs,
        offline_after_secs: s.offline_after_secs,
        ..Rules::default()
    }
}

/// A stored tracker read as text (the batch path: no JSON value in between); None, logged, when it cannot
/// be read (only a hand-edited row can do that): the batch then rebuilds it from the stored events.
pub fn tracker_from_text(text: &str) -> Option<Tracker> {
    serde_json::from_str(text)
        .map_err(|e| tracing::warn!(error = %e, "unreadable sessions.health; rebuilding it"))
        .ok()
}

/// A stored tracker (`sessions.health`); an absent one is empty. An unreadable one (which only a
/// hand-edited row can produce) is logged and read as empty rather than failing every read of the tenant.
pub fn tracker(stored: Option<&serde_json::Value>) -> Tracker {
    // Deserialised from the value where it lies (a clone of it first cost a copy of every session's
    // tracker on every read).
    match stored.map(<Tracker as serde::Deserialize>::deserialize) {
        None => Tracker::default(),
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "unreadable sessions.health; reading it as empty");
            Tracker::default()
        }
    }
}

/// A session's status at `now` from its stored tracker, its device's last-heard time and when its
/// runtime was reported gone (`sessions.runtime_gone_at`, from the device's heartbeat).
pub fn session_view(
    stored: Option<&serde_json::Value>,
    device_heard_at: Option<DateTime<Utc>>,
    runtime_gone_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    rules: &Rules,
) -> View {
    session_view_and_durations(stored, device_heard_at, runtime_gone_at, now, rules).0
}

/// [`session_view`] and the session's wall-clock and active time at `now` (the shared rule,
/// [`apiary_schema::status::durations`]).
pub fn session_view_and_durations(
    stored: Option<&serde_json::Value>,
    device_heard_at: Option<DateTime<Utc>>,
    runtime_gone_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    rules: &Rules,
) -> (View, Durations) {
    let live = Liveness {
        device_heard_at,
        runtime_gone_at,
    };
    let health = tracker(stored).current(rules);
    let v = view(&health, now, &live, rules);
    let d = Durations::of(&health, &v, now);
    (v, d)
}

/// Every status, as the API spells it (for error messages).
pub fn all_names() -> String {
    Status::ALL
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses a comma-separated `status` parameter; an unknown name is a 400 listing the known ones.
pub fn parse_statuses(v: &str) -> Result<Vec<Status>, crate::error::ApiError> {
    v.split(',')
        .map(|s| {
            Status::parse(s.trim()).ok_or_else(|| {
                crate::error::ApiError::bad_param("status", format!("use any of {}", all_names()))
            })
        })
        .collect()
}
