//! A session's clock: its wall-clock and its active time, from the same health model as its status, so
//! the agent and the ingest show the same numbers for the same events.
//!
//! - `started_at`: the session's first event (the model's first input: every durable session event
//!   counts), which for a Hive queen or worker is its run starting.
//! - `ended_at`: when the session ended — the time of its current `completed` or `failed` status (the
//!   latest execution completed/failed or worker finished); null while it is open (not ended, or a run
//!   started again after the end).
//! - `wall_clock_seconds`: `ended_at` (or now, while open) minus `started_at`. For a worker session this
//!   is the worker's wall-clock, for a queen its execution's; paused and waiting time are part of it.
//! - `active_seconds`: the time spent in status `active` — the status model's time in state
//!   (`time_in_state.active`), up to now; never a second notion of "working".

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::health::Health;
use super::view::View;
use super::Status;

/// A session's wall-clock and active time at the moment of a [`View`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Durations {
    /// The session's first event; null for a session without events.
    pub started_at: Option<DateTime<Utc>>,
    /// When the session completed or failed; null while it is open.
    pub ended_at: Option<DateTime<Utc>>,
    /// From `started_at` to `ended_at`, or to now while open.
    pub wall_clock_seconds: f64,
    /// Time in status `active`, up to now (`time_in_state.active`).
    pub active_seconds: f64,
}

impl Durations {
    /// The durations of the session whose health is `h` (before time was let pass: the view does that),
    /// as seen by `view` at `now`.
    pub fn of(h: &Health, view: &View, now: DateTime<Utc>) -> Durations {
        let ended_at = view.since.filter(|_| view.status.is_terminal());
        let started_at = h.first_at;
        let wall_ms = started_at.map_or(0, |s| {
            (ended_at.unwrap_or(now) - s).num_milliseconds().max(0)
        });
        Durations {
            started_at,
            ended_at,
            wall_clock_seconds: wall_ms as f64 / 1000.0,
            active_seconds: view
                .time_in_state
                .get(&Status::Active)
                .copied()
                .unwrap_or(0.0),
        }
    }
}
