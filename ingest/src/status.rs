//! Session status, derived at read time from the facts the events stored (see `store::sessions`), the
//! device's liveness, the clock, and two thresholds (`stall_after_secs`, `offline_after_secs`).
//!
//! First rule that matches wins:
//! 1. `failed` / `completed` — the latest lifecycle event (execution or worker finished) says so;
//! 2. `offline` — the session's device has not been heard from (heartbeat or batch) for `offline_after`;
//!    a session whose device was never heard from live (e.g. only imported) is offline too;
//! 3. `idle` — waiting for the user: the latest input event is a request (input, credentials, payment)
//!    newer than the last progress, or the execution is paused;
//! 4. `stalled` — a stall signal (`stalled`, `doom_loop`, `inactive`) newer than the last progress;
//! 5. `active` — progress (LLM turn, tool call, execution, task, colony, worker) within `stall_after`;
//! 6. `idle` — no recent progress but the queen is in its `independent` phase (talking with the user);
//! 7. `stalled` — no progress for `stall_after` otherwise.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// The status the API reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Idle,
    Stalled,
    Failed,
    Completed,
    Offline,
}

impl Status {
    /// Every status, as the API spells it.
    pub const ALL: [(&'static str, Status); 6] = [
        ("active", Status::Active),
        ("idle", Status::Idle),
        ("stalled", Status::Stalled),
        ("failed", Status::Failed),
        ("completed", Status::Completed),
        ("offline", Status::Offline),
    ];

    /// Parses the API spelling.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.iter().find(|(n, _)| *n == s).map(|(_, v)| *v)
    }
}

/// Health signals that mean "stuck".
pub const STALL_SIGNALS: [&str; 3] = ["stalled", "doom_loop", "inactive"];

/// Input states that mean "waiting for the user".
const WAITING_STATES: [&str; 4] = [
    "requested",
    "credentials_required",
    "credential_form_requested",
    "payment_required",
];

/// The stored facts of one session, as far as status is concerned.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub lifecycle: Option<String>,
    pub phase: Option<String>,
    pub input_state: Option<String>,
    pub input_at: Option<DateTime<Utc>>,
    pub health_signal: Option<String>,
    pub health_at: Option<DateTime<Utc>>,
    pub last_progress_at: Option<DateTime<Utc>>,
    pub last_event_at: Option<DateTime<Utc>>,
    /// Latest of the device's last heartbeat and last live batch (server clock).
    pub device_heard_at: Option<DateTime<Utc>>,
}

/// The thresholds.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    pub stall_after: Duration,
    pub offline_after: Duration,
}

/// Applies the rules in the module notes.
pub fn derive(f: &Facts, now: DateTime<Utc>, t: Thresholds) -> Status {
    match f.lifecycle.as_deref() {
        Some("failed") => return Status::Failed,
        Some("completed") => return Status::Completed,
        _ => {}
    }
    if f.device_heard_at.is_none_or(|h| now - h > t.offline_after) {
        return Status::Offline;
    }
    let progress = f.last_progress_at;
    let newer_than_progress =
        |at: Option<DateTime<Utc>>| at.is_some_and(|a| progress.is_none_or(|p| a >= p));
    let waiting = f
        .input_state
        .as_deref()
        .is_some_and(|s| WAITING_STATES.contains(&s));
    if (waiting && newer_than_progress(f.input_at)) || f.lifecycle.as_deref() == Some("paused") {
        return Status::Idle;
    }
    let stall_signal = f
        .health_signal
        .as_deref()
        .is_some_and(|s| STALL_SIGNALS.contains(&s));
    if stall_signal && newer_than_progress(f.health_at) {
        return Status::Stalled;
    }
    let recent = progress
        .or(f.last_event_at)
        .is_some_and(|p| now - p <= t.stall_after);
    if recent {
        Status::Active
    } else if f.phase.as_deref() == Some("independent") {
        Status::Idle
    } else {
        Status::Stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(mins: i64) -> DateTime<Utc> {
        "2026-11-03T10:00:00Z".parse::<DateTime<Utc>>().unwrap() + Duration::minutes(mins)
    }

    const TH: Thresholds = Thresholds {
        stall_after: Duration::minutes(10),
        offline_after: Duration::minutes(3),
    };

    fn working() -> Facts {
        Facts {
            last_progress_at: Some(t(0)),
            last_event_at: Some(t(0)),
            device_heard_at: Some(t(1)),
            ..Facts::default()
        }
    }

    #[test]
    fn recent_progress_is_active_and_old_progress_is_stalled() {
        assert_eq!(derive(&working(), t(2), TH), Status::Active);
        let f = Facts {
            device_heard_at: Some(t(20)),
            ..working()
        };
        assert_eq!(derive(&f, t(21), TH), Status::Stalled);
    }

    #[test]
    fn terminal_states_win_even_when_the_device_is_gone() {
        let f = Facts {
            lifecycle: Some("failed".into()),
            device_heard_at: None,
            ..working()
        };
        assert_eq!(derive(&f, t(100), TH), Status::Failed);
        let f = Facts {
            lifecycle: Some("completed".into()),
            ..working()
        };
        assert_eq!(derive(&f, t(2), TH), Status::Completed);
    }

    #[test]
    fn a_stale_heartbeat_makes_the_session_offline() {
        assert_eq!(derive(&working(), t(5), TH), Status::Offline);
        let f = Facts {
            device_heard_at: None,
            ..working()
        };
        assert_eq!(derive(&f, t(0), TH), Status::Offline);
    }

    #[test]
    fn waiting_for_input_is_idle_not_stalled_until_progress_resumes() {
        let f = Facts {
            input_state: Some("requested".into()),
            input_at: Some(t(0)),
            device_heard_at: Some(t(59)),
            ..working()
        };
        assert_eq!(derive(&f, t(60), TH), Status::Idle);
        let f = Facts {
            last_progress_at: Some(t(1)),
            ..f
        };
        assert_eq!(derive(&f, t(2), TH), Status::Active);
        let quiet_queen = Facts {
            phase: Some("independent".into()),
            device_heard_at: Some(t(59)),
            ..working()
        };
        assert_eq!(derive(&quiet_queen, t(60), TH), Status::Idle);
    }

    #[test]
    fn a_stall_signal_after_the_last_progress_is_stalled() {
        let f = Facts {
            health_signal: Some("doom_loop".into()),
            health_at: Some(t(1)),
            ..working()
        };
        assert_eq!(derive(&f, t(2), TH), Status::Stalled);
        let f = Facts {
            health_signal: Some("retry".into()),
            ..f
        };
        assert_eq!(derive(&f, t(2), TH), Status::Active);
    }

    // Added for mutants `cargo mutants` found surviving (see README, Tests).

    #[test]
    fn every_status_parses_from_its_api_spelling_and_nothing_else_does() {
        for (name, status) in Status::ALL {
            assert_eq!(Status::parse(name), Some(status), "{name}");
            assert_eq!(serde_json::to_value(status).unwrap(), name);
        }
        for bad in ["", "Active", "running", "active "] {
            assert_eq!(Status::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_device_silent_for_exactly_offline_after_is_still_online() {
        // Offline means silent for *more than* `offline_after`.
        let f = Facts {
            device_heard_at: Some(t(0)),
            ..working()
        };
        assert_eq!(derive(&f, t(3), TH), Status::Active);
        assert_eq!(
            derive(&f, t(3) + Duration::milliseconds(1), TH),
            Status::Offline
        );
    }
}
