//! What the health model reads from a canonical event: a small, serialisable [`Input`] (the tracker keeps
//! the last few of them to re-order late arrivals, so they must be compact and carry no content).
//!
//! Everything here comes from allowlisted fields only (`data.status`, `data.signal`, `data.state`,
//! `data.tool_name`, `data.is_error`, `data.stop_reason`, `data.phase`, `data.action`), so the agent (before
//! upload) and the ingest (after the policy check) read the same input from the same event.

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{CanonicalEvent, EventKind};

/// One event, as far as status is concerned, at its effective time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// The event's time (the agent: `occurred_at`; the ingest: `effective_at`, the same unless the
    /// device clock was corrected). Inputs are folded in `(at, id)` order.
    #[serde(serialize_with = "crate::timefmt::time")]
    pub at: DateTime<Utc>,
    /// The event id: breaks ties between inputs of the same instant, the same way on every side.
    pub id: Uuid,
    /// What happened.
    pub what: What,
    /// The event comes from an interactive runtime ([`INTERACTIVE_RUNTIMES`]): a session driven by its
    /// user turn by turn, with no phases and no liveness signals of its own, so a quiet one is waiting for
    /// its user (`idle`), not stuck.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interactive: bool,
}

/// Runtimes whose sessions are interactive (see [`Input::interactive`]): Claude Code, and apps reporting
/// OpenTelemetry GenAI spans. Hive runs colonies on its own and says when it is waiting for its user.
pub const INTERACTIVE_RUNTIMES: [&str; 2] = ["claude_code", "otel"];

/// True when events of `runtime` come from interactive sessions.
pub fn is_interactive(runtime: &str) -> bool {
    INTERACTIVE_RUNTIMES.contains(&runtime)
}

/// What an event means for the health model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub enum What {
    /// An LLM turn completed. `ends_turn`: its `stop_reason` is known and is not a tool call
    /// (`tool_use`, `tool_calls`, `function_call`), so the model answered instead of calling a tool.
    Llm { ends_turn: bool },
    /// A tool call started (activity, not progress).
    ToolStarted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// A tool call completed; `error` from `is_error`.
    ToolDone {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        error: bool,
    },
    /// Lifecycle of the session's execution (or a worker's end).
    Run { run: Run },
    /// The session asked for (`waiting: true`, with the request's state) or received the user's input.
    UserInput { state: String, waiting: bool },
    /// A health signal (`data.signal`), with the tool it names if any.
    Signal {
        signal: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// The queen's phase changed; `independent` = talking with the user, no colony at work.
    Phase { independent: bool },
    /// Other real work: a task changed, a colony was created or loaded, a trigger fired.
    Work,
    /// Seen, but says nothing about health (a trigger registered, an unknown value...).
    Other,
}

/// Execution lifecycle, from `execution` and `worker.finished` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Run {
    /// `execution` started, resumed or resurrected: a (new) run is under way.
    Started,
    /// The execution was paused (by the user or the runtime).
    Paused,
    /// The execution completed, or the worker finished successfully.
    Completed,
    /// The execution failed, or the worker finished unsuccessfully (failed, timeout, stopped...).
    Failed,
    /// A step inside a run: a stream or node loop started or ended.
    Step,
}

/// Input states that mean "waiting for the user".
pub const WAITING_STATES: [&str; 4] = [
    "requested",
    "credentials_required",
    "credential_form_requested",
    "payment_required",
];

/// `stop_reason` values that mean the model called a tool.
const TOOL_STOPS: [&str; 3] = ["tool_use", "tool_calls", "function_call"];

impl Input {
    /// The input of a session event at `at` (truncated to microseconds, the precision Postgres and the
    /// agent's history keep, so every side computes with the same instants); None for device-level events.
    pub fn of(e: &CanonicalEvent, at: DateTime<Utc>) -> Option<Input> {
        e.session_id.as_ref()?;
        Some(Input {
            at: at.trunc_subsecs(6),
            id: e.event_id,
            what: What::of(e),
            interactive: is_interactive(&e.runtime),
        })
    }

    /// The order inputs are folded in.
    pub fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.at, self.id)
    }
}

type Data = serde_json::Map<String, serde_json::Value>;

fn text<'a>(data: &'a Data, key: &str) -> Option<&'a str> {
    data.get(key).and_then(serde_json::Value::as_str)
}

fn word(data: &Data, key: &str) -> Option<String> {
    text(data, key)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl What {
    /// Reads an event's meaning.
    pub fn of(e: &CanonicalEvent) -> What {
        What::from_data(e.kind, &e.data)
    }

    /// Reads the meaning of an event of `kind` with this (allowlisted) `data`, e.g. a stored event.
    pub fn from_data(kind: EventKind, data: &Data) -> What {
        let e = data;
        match kind {
            EventKind::LlmTurn => What::Llm {
                ends_turn: text(e, "stop_reason")
                    .is_some_and(|s| !s.is_empty() && !TOOL_STOPS.contains(&s)),
            },
            EventKind::ToolCall => match text(e, "status") {
                Some("started") => What::ToolStarted {
                    tool: word(e, "tool_name"),
                },
                Some("completed") => What::ToolDone {
                    tool: word(e, "tool_name"),
                    error: e.get("is_error").and_then(serde_json::Value::as_bool) == Some(true),
                },
                _ => What::Other,
            },
            EventKind::Execution | EventKind::WorkerFinished => match run_of(kind, e) {
                Some(run) => What::Run { run },
                None => What::Other,
            },
            EventKind::SessionInput => match text(e, "state") {
                Some(s) if WAITING_STATES.contains(&s) => What::UserInput {
                    state: s.to_string(),
                    waiting: true,
                },
                Some(s @ ("received" | "committed")) => What::UserInput {
                    state: s.to_string(),
                    waiting: false,
                },
                _ => What::Other,
            },
            EventKind::HealthSignal => match word(e, "signal") {
                Some(signal) => What::Signal {
                    signal,
                    tool: word(e, "tool_name"),
                },
                None => What::Other,
            },
            EventKind::SessionPhase => match text(e, "phase") {
                Some(p) => What::Phase {
                    independent: p == "independent",
                },
                None => What::Other,
            },
            EventKind::TaskChanged | EventKind::ColonyCreated => What::Work,
            EventKind::TriggerChanged if text(e, "action") == Some("fired") => What::Work,
            EventKind::TriggerChanged | EventKind::AgentHeartbeat | EventKind::OutboxDropped => {
                What::Other
            }
        }
    }
}

/// The lifecycle an `execution` or `worker.finished` event states.
pub fn run_of(kind: EventKind, data: &Data) -> Option<Run> {
    let e = data;
    match kind {
        EventKind::Execution => {
            let step = text(e, "scope").is_some_and(|s| s != "execution");
            Some(match text(e, "status")? {
                _ if step => Run::Step,
                "started" | "resumed" | "resurrected" => Run::Started,
                "paused" => Run::Paused,
                "completed" => Run::Completed,
                "failed" => Run::Failed,
                _ => return None,
            })
        }
        EventKind::WorkerFinished => {
            let status = text(e, "status").unwrap_or("");
            let failed_word = ["fail", "error", "cancel", "abort", "timeout", "killed"]
                .iter()
                .any(|w| status.contains(w));
            let success = e.get("success").and_then(serde_json::Value::as_bool);
            Some(if failed_word || success == Some(false) {
                Run::Failed
            } else {
                Run::Completed
            })
        }
        _ => None,
    }
}
