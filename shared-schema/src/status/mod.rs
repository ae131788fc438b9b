//! # The health model: a session's status with memory
//!
//! One pure state machine, used by the agent (local status, also air-gapped) and by the ingest, so both
//! derive the same status from the same events. Fed a session's canonical events in `(time, event_id)`
//! order ([`Input`]), plus time passing (the no-progress rule) and liveness (overlays), it keeps standing
//! alarms instead of only the newest signal, so a later, milder signal never erases an alarming one.
//!
//! ## Vocabulary
//! `active`, `waiting` (for the user: input, credentials, payment), `idle` (nothing to do: paused, or a
//! quiet queen in its `independent` phase), `degraded` (progress, but with repeated trouble), `stalled`,
//! `needs_attention`, `failed`, `completed`, and two overlays from liveness: `offline` (the device is not
//! heard from) and `crashed` (the runtime process is gone without an end event).
//!
//! ## Progress
//! Progress restarts the no-progress clock and clears the stall alarm and a pending input request:
//! - an LLM turn — except while a doom loop stands, when only a turn whose `stop_reason` is known and
//!   is not a tool call (`tool_use`, `tool_calls`, `function_call`) counts: the loop's own turns call the
//!   looping tool again;
//! - a completed tool call (error or not) — except while a doom loop stands, when only a call of *another*
//!   tool counts (the looping tool comes from the signal's `tool_name`, else the last tool seen; when it is
//!   unknown no tool call counts). Hive's loop fingerprint also covers the arguments, which never leave the
//!   device, so a call of the same tool with other arguments does not count either;
//! - the user's input received or committed; an execution started, resumed, resurrected, completed or
//!   failed, or a stream or node loop step; a phase change; a task change; a colony created or loaded;
//!   a trigger fired.
//!
//! Not progress: a tool call *starting*, any health signal (`nudge_sent`, `retry`, `escalation_requested`,
//! `compaction_started`, ...), an input request, a pause, other trigger changes.
//!
//! ## Rules (first match wins)
//! | status | when | cleared by |
//! |---|---|---|
//! | `completed` / `failed` | the last lifecycle event: execution completed/failed, worker finished | execution started/resumed/resurrected |
//! | `stalled` | stall alarm: `stalled`, `doom_loop`, `inactive`, `ttft_exceeded` | progress (doom loop: see above), a new or ended run |
//! | `needs_attention` | attention alarm: `escalation_requested`, `input_blocked` | input received, a progressing LLM turn, a new or ended run |
//! | `waiting` | an input request (`requested`, `credentials_required`, `credential_form_requested`, `payment_required`) | progress, a new or ended run |
//! | `idle` | the execution is paused | execution resumed/started |
//! | `idle` / `stalled` | no progress for more than `stall_after` (300 s): `idle` in the `independent` phase (cause `quiet_independent`) or in an interactive runtime's session (`quiet_interactive`, see [`input::INTERACTIVE_RUNTIMES`]), else `stalled` (cause `no_progress`) | progress |
//! | `degraded` | in the last `window` (20) units of work (LLM turns, tool results, retries, replays): ≥ 3 tool errors, ≥ 3 retries or ≥ 2 replays | the trouble sliding out of the window |
//! | `active` | otherwise | |
//!
//! A standing alarm keeps its cause when another alarm of the same class arrives, and a milder signal
//! (`retry`, `nudge_sent`, `escalation_requested` after a stall) leaves it standing. Overlays apply on read
//! to a non-terminal status: `crashed` when the runtime is known to be gone, else `offline` when the
//! device has not been heard from for `offline_after`.
//!
//! ## Transitions and time
//! Every change of status is a [`Transition`] `{seq, at, from, to, cause}`: `cause` is the signal or rule
//! that put the session in `to` (for `active`, the input that made progress). The no-progress rule fires
//! at `last progress + stall_after` exactly ([`Health::advance`]), whether the next input or a reader
//! notices it, so every replica computes the same transition at the same time. See [`tracker`] for how
//! late events are put in their place.

pub mod durations;
pub mod health;
pub mod input;
pub mod stream;
pub mod tracker;
pub mod view;

#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use durations::Durations;
pub use health::Health;
pub use input::{Input, Run, What};
pub use stream::StreamStatus;
pub use tracker::{Tracker, Update, REORDER_WINDOW};
pub use view::{view, Liveness, View};

/// A session's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Active,
    Waiting,
    Idle,
    Degraded,
    Stalled,
    NeedsAttention,
    Failed,
    Completed,
    Offline,
    Crashed,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 10] = [
        Status::Active,
        Status::Waiting,
        Status::Idle,
        Status::Degraded,
        Status::Stalled,
        Status::NeedsAttention,
        Status::Failed,
        Status::Completed,
        Status::Offline,
        Status::Crashed,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Waiting => "waiting",
            Status::Idle => "idle",
            Status::Degraded => "degraded",
            Status::Stalled => "stalled",
            Status::NeedsAttention => "needs_attention",
            Status::Failed => "failed",
            Status::Completed => "completed",
            Status::Offline => "offline",
            Status::Crashed => "crashed",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// `completed` and `failed`: no overlay applies.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed)
    }

    /// How much the status calls for a person's look, higher is worse: `crashed`, `failed`,
    /// `stalled`, `needs_attention`, `offline`, `degraded`, `waiting`, then `idle`, `active`,
    /// `completed`. Pages use it to name the worst status among many (a queen's workers).
    pub fn severity(self) -> u8 {
        match self {
            Status::Crashed => 9,
            Status::Failed => 8,
            Status::Stalled => 7,
            Status::NeedsAttention => 6,
            Status::Offline => 5,
            Status::Degraded => 4,
            Status::Waiting => 3,
            Status::Idle => 2,
            Status::Active => 1,
            Status::Completed => 0,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Thresholds of the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// No progress for longer than this is `stalled` (or `idle` in the independent phase). Hive's own
    /// "stale while executing" rule uses 300 s.
    pub stall_after_secs: i64,
    /// A device not heard from for longer than this makes its open sessions `offline`.
    pub offline_after_secs: i64,
    /// Units of work the `degraded` counts look back over.
    pub window: usize,
    pub max_tool_errors: usize,
    pub max_retries: usize,
    pub max_replays: usize,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            stall_after_secs: 300,
            offline_after_secs: 180,
            window: 20,
            max_tool_errors: 3,
            max_retries: 3,
            max_replays: 2,
        }
    }
}

/// One change of status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// Position in the session's history, from 0.
    pub seq: u64,
    #[serde(serialize_with = "crate::timefmt::time")]
    pub at: DateTime<Utc>,
    /// None for the session's first status.
    pub from: Option<Status>,
    pub to: Status,
    pub cause: String,
}
