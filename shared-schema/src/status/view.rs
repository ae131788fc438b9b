//! The status at a moment: a session's [`Health`] with time let pass up to `now` and the liveness
//! overlays (`offline`, `crashed`) applied. Nothing here is stored; both sides compute it on read.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::health::Health;
use super::{Rules, Status, Transition};

/// What is known about the session's device and runtime process, besides its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Liveness {
    /// When the device was last heard from (heartbeat or live batch). None: never heard live (e.g. only
    /// imported). The agent passes `now`: it is the device.
    pub device_heard_at: Option<DateTime<Utc>>,
    /// When the runtime process behind the session was found gone without an end event (the agent's
    /// runtime liveness: on the device directly, in the cloud from its heartbeat). Applies only while no
    /// event of the session is later than it: a later event means the runtime (or a resumed one) lives.
    pub runtime_gone_at: Option<DateTime<Utc>>,
}

impl Liveness {
    /// The agent's own view: the device is alive, the runtime unknown.
    pub fn local(now: DateTime<Utc>) -> Liveness {
        Liveness {
            device_heard_at: Some(now),
            runtime_gone_at: None,
        }
    }
}

/// The status of a session at `now`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct View {
    pub status: Status,
    /// When the current status began (None for a session with no events).
    pub since: Option<DateTime<Utc>>,
    pub cause: String,
    /// Transitions not stored because time or liveness caused them after the last event: the no-progress
    /// rule firing, and the `offline`/`crashed` overlay. Deterministic (their times follow from the events
    /// and the liveness times), so every reader sees the same ones.
    pub derived: Vec<Transition>,
    /// Seconds spent in each status, up to `now`.
    pub time_in_state: BTreeMap<Status, f64>,
}

/// The status at `now`.
pub fn view(h: &Health, now: DateTime<Utc>, live: &Liveness, rules: &Rules) -> View {
    let mut h = h.clone();
    let mut derived = Vec::new();
    h.advance(now, rules, &mut derived);
    let Some(status) = h.status else {
        return View {
            status: Status::Idle,
            since: None,
            cause: "no_events".into(),
            derived,
            time_in_state: BTreeMap::new(),
        };
    };
    let since = h.since.unwrap_or(now);
    let overlay = if status.is_terminal() {
        None
    } else if let Some(gone) = live
        .runtime_gone_at
        .filter(|g| h.last_key.is_none_or(|(last, _)| last <= *g))
    {
        Some((gone, Status::Crashed, "runtime_gone"))
    } else {
        let offline_after = Duration::seconds(rules.offline_after_secs);
        match live.device_heard_at {
            None => Some((since, Status::Offline, "device_never_heard")),
            Some(heard) if now - heard > offline_after => {
                Some((heard + offline_after, Status::Offline, "device_silent"))
            }
            Some(_) => None,
        }
    };
    let mut time_in = h.time_in.clone();
    let (status, since, cause) = match overlay {
        Some((at, to, cause)) => {
            let at = at.max(since).min(now.max(since));
            *time_in.entry(status).or_default() += (at - since).num_milliseconds().max(0);
            derived.push(Transition {
                seq: h.transitions,
                at,
                from: Some(status),
                to,
                cause: cause.to_string(),
            });
            (to, at, cause.to_string())
        }
        None => (status, since, h.cause.clone().unwrap_or_default()),
    };
    *time_in.entry(status).or_default() += (now - since).num_milliseconds().max(0);
    View {
        status,
        since: Some(since),
        cause,
        derived,
        time_in_state: time_in
            .into_iter()
            .map(|(s, ms)| (s, ms as f64 / 1000.0))
            .collect(),
    }
}
