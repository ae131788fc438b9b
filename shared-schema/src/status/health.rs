//! The state machine of one session: [`Health`] folds [`Input`]s in `(at, id)` order and emits a
//! [`Transition`] whenever the derived status changes. Time passing is an input too: [`Health::advance`]
//! fires the no-progress rule at the exact instant it becomes true (`last progress + stall_after`), so the
//! time of a time-driven transition depends on the events alone, never on when someone looked.
//!
//! The rules are in the module notes of [`super`] (and the table of docs/session-status.md); this file is their code.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::input::{Input, Run, What};
use super::{Rules, Status, Transition};

/// Signals that mean "stuck": they set the stall alarm.
pub const STALL_SIGNALS: [&str; 4] = ["stalled", "doom_loop", "inactive", "ttft_exceeded"];
/// Signals that ask a person to look: they set the attention alarm.
pub const ATTENTION_SIGNALS: [&str; 2] = ["escalation_requested", "input_blocked"];

/// A standing condition and when it was raised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Alarm {
    pub cause: String,
    #[serde(serialize_with = "crate::timefmt::time")]
    pub at: DateTime<Utc>,
}

/// The health of one session after the inputs folded so far. Serialisable: the agent and the ingest store
/// it per session and fold new inputs into it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// The derived status; None before the first input.
    pub status: Option<Status>,
    /// When the current status began.
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub since: Option<DateTime<Utc>>,
    /// Why it began (a signal, a rule or the input that made progress).
    pub cause: Option<String>,
    /// Transitions emitted so far: the next one's `seq`.
    pub transitions: u64,
    /// The first input's time: the progress clock starts here.
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub first_at: Option<DateTime<Utc>>,
    /// The key of the last input folded.
    #[serde(serialize_with = "crate::timefmt::opt_key")]
    pub last_key: Option<(DateTime<Utc>, Uuid)>,
    /// The last time the session made progress (see [`Health::apply`]).
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub progress_at: Option<DateTime<Utc>>,
    /// The latest lifecycle (`Step` is never kept here).
    pub run: Option<Run>,
    /// Standing stall alarm (stalled, doom_loop, inactive, ttft_exceeded): only progress clears it.
    pub stall: Option<Alarm>,
    /// While a doom loop stands: the looping tool (from the signal, else the last tool seen), whose
    /// further calls are not progress. `Some("")` when the tool is unknown: then no tool call is progress.
    pub doom_tool: Option<String>,
    /// Standing attention alarm (escalation_requested, input_blocked).
    pub attention: Option<Alarm>,
    /// A pending request for the user's input (requested, credentials_required, ...).
    pub waiting: Option<Alarm>,
    /// The queen's phase is `independent` (talking with the user; quiet there is idle, not stalled).
    pub independent: bool,
    /// The session is interactive (its events come from an interactive runtime, see
    /// [`super::input::Input::interactive`]): quiet there is idle, not stalled.
    #[serde(default)]
    pub interactive: bool,
    /// The tool of the latest tool call seen.
    pub last_tool: Option<String>,
    /// The last `window` units of work, oldest first: `o` ok, `e` tool error, `r` retry, `p` replay.
    pub recent: String,
    /// Milliseconds spent in each status, for the intervals already closed.
    pub time_in: BTreeMap<Status, i64>,
}

impl Health {
    /// The instant the no-progress rule fires if nothing else happens: last progress (or the first
    /// input) plus `stall_after`; quiet means strictly later than that.
    fn quiet_deadline(&self, rules: &Rules) -> Option<DateTime<Utc>> {
        let from = self.progress_at.or(self.first_at)?;
        Some(from + Duration::seconds(rules.stall_after_secs))
    }

    fn degraded(&self, rules: &Rules) -> Option<&'static str> {
        let n = |c: char| self.recent.chars().filter(|x| *x == c).count();
        if n('e') >= rules.max_tool_errors {
            Some("tool_errors")
        } else if n('r') >= rules.max_retries {
            Some("retries")
        } else if n('p') >= rules.max_replays {
            Some("replays")
        } else {
            None
        }
    }

    /// The status the facts give at time `t` (only the no-progress rule looks at `t`), with its cause.
    pub fn derive(&self, t: DateTime<Utc>, rules: &Rules) -> Option<(Status, &str)> {
        self.first_at?;
        match self.run {
            Some(Run::Completed) => return Some((Status::Completed, "completed")),
            Some(Run::Failed) => return Some((Status::Failed, "failed")),
            _ => {}
        }
        for (alarm, status) in [
            (&self.stall, Status::Stalled),
            (&self.attention, Status::NeedsAttention),
            (&self.waiting, Status::Waiting),
        ] {
            if let Some(a) = alarm {
                return Some((status, a.cause.as_str()));
            }
        }
        if self.run == Some(Run::Paused) {
            return Some((Status::Idle, "paused"));
        }
        if self.quiet_deadline(rules).is_some_and(|d| t > d) {
            return Some(if self.independent {
                (Status::Idle, "quiet_independent")
            } else if self.interactive {
                (Status::Idle, "quiet_interactive")
            } else {
                (Status::Stalled, "no_progress")
            });
        }
        if let Some(why) = self.degraded(rules) {
            return Some((Status::Degraded, why));
        }
        Some((Status::Active, "progress"))
    }

    /// How the session ended: its status while that is `completed` or `failed` (no time passing and no
    /// overlay moves it; only a new input can), None while it is open (`sessions.ended` stores it).
    pub fn end(&self) -> Option<Status> {
        self.status.filter(|s| s.is_terminal())
    }

    /// When the no-progress rule will change the status if no input arrives first.
    pub fn due(&self, rules: &Rules) -> Option<DateTime<Utc>> {
        let d = self.quiet_deadline(rules)?;
        let after = self.derive(d + Duration::milliseconds(1), rules)?.0;
        (Some(after) != self.status).then_some(d)
    }

    /// Lets time pass up to `t`: emits the no-progress transition if it fires before `t`.
    pub fn advance(&mut self, t: DateTime<Utc>, rules: &Rules, out: &mut Vec<Transition>) {
        let Some(d) = self.due(rules) else { return };
        if t > d {
            let (status, cause) = self.derive(t, rules).expect("has inputs");
            let cause = cause.to_string();
            let at = self.since.map_or(d, |s| s.max(d));
            self.set(at, status, cause, out);
        }
    }

    fn set(&mut self, at: DateTime<Utc>, to: Status, cause: String, out: &mut Vec<Transition>) {
        if self.status == Some(to) {
            return;
        }
        if let (Some(s), Some(since)) = (self.status, self.since) {
            *self.time_in.entry(s).or_default() += (at - since).num_milliseconds().max(0);
        }
        out.push(Transition {
            seq: self.transitions,
            at,
            from: self.status,
            to,
            cause: cause.clone(),
        });
        self.transitions += 1;
        self.status = Some(to);
        self.since = Some(at);
        self.cause = Some(cause);
    }

    fn note(&mut self, unit: char, rules: &Rules) {
        self.recent.push(unit);
        while self.recent.len() > rules.window {
            self.recent.remove(0);
        }
    }

    /// Folds one input (after letting time pass up to it). Inputs must come in `(at, id)` order; one
    /// that is older than the last is folded at the last one's time.
    pub fn apply(&mut self, input: &Input, rules: &Rules, out: &mut Vec<Transition>) {
        let at = self.last_key.map_or(input.at, |(t, _)| t.max(input.at));
        self.advance(at, rules, out);
        self.first_at.get_or_insert(at);
        self.interactive |= input.interactive;
        let in_doom = self.doom_tool.is_some();
        let progress = match &input.what {
            What::Llm { ends_turn } => {
                self.note('o', rules);
                !in_doom || *ends_turn
            }
            What::ToolStarted { tool } => {
                if tool.is_some() {
                    self.last_tool.clone_from(tool);
                }
                false
            }
            What::ToolDone { tool, error } => {
                if tool.is_some() {
                    self.last_tool.clone_from(tool);
                }
                self.note(if *error { 'e' } else { 'o' }, rules);
                match (&self.doom_tool, tool) {
                    (None, _) => true,
                    (Some(d), Some(t)) => !d.is_empty() && d != t,
                    (Some(_), None) => false,
                }
            }
            What::Run { run } => {
                match run {
                    Run::Step => {}
                    Run::Started | Run::Completed | Run::Failed => {
                        self.run = Some(*run);
                        self.clear_alarms();
                    }
                    Run::Paused => self.run = Some(Run::Paused),
                }
                *run != Run::Paused
            }
            What::UserInput { state, waiting } => {
                if *waiting {
                    self.waiting = Some(Alarm {
                        cause: state.clone(),
                        at,
                    });
                } else {
                    self.attention = None;
                }
                !*waiting
            }
            What::Signal { signal, tool } => {
                let s = signal.as_str();
                if STALL_SIGNALS.contains(&s) {
                    if s == "doom_loop" {
                        self.doom_tool = Some(
                            tool.clone()
                                .or_else(|| self.last_tool.clone())
                                .unwrap_or_default(),
                        );
                    }
                    // An alarm already standing keeps its cause: a second alarm is not news.
                    self.stall.get_or_insert(Alarm {
                        cause: signal.clone(),
                        at,
                    });
                } else if ATTENTION_SIGNALS.contains(&s) {
                    self.attention.get_or_insert(Alarm {
                        cause: signal.clone(),
                        at,
                    });
                } else if s == "retry" {
                    self.note('r', rules);
                } else if s == "replay_detected" {
                    self.note('p', rules);
                }
                false
            }
            What::Phase { independent } => {
                self.independent = *independent;
                true
            }
            What::Work => true,
            What::Other => false,
        };
        if progress {
            self.progress_at = Some(at);
            self.stall = None;
            self.doom_tool = None;
            self.waiting = None;
            let answers = matches!(
                input.what,
                What::Llm { .. } | What::UserInput { .. } | What::Run { .. }
            );
            if answers {
                self.attention = None;
            }
        }
        self.last_key = Some(self.last_key.map_or(input.key(), |k| k.max((at, input.id))));
        if let Some((status, cause)) = self.derive(at, rules) {
            if Some(status) != self.status {
                let cause = if status == Status::Active {
                    cause_of(&input.what)
                } else {
                    cause.to_string()
                };
                self.set(at, status, cause, out);
            }
        }
    }

    fn clear_alarms(&mut self) {
        self.stall = None;
        self.doom_tool = None;
        self.attention = None;
        self.waiting = None;
    }
}

/// The cause word of a transition into `active`: the input that made progress.
fn cause_of(w: &What) -> String {
    match w {
        What::Llm { .. } => "llm_turn",
        What::ToolStarted { .. } => "tool_started",
        What::ToolDone { .. } => "tool_call",
        What::Run { run } => match run {
            Run::Started => "run_started",
            Run::Step => "run_step",
            Run::Paused => "paused",
            Run::Completed => "completed",
            Run::Failed => "failed",
        },
        What::UserInput { .. } => "input_received",
        What::Signal { signal, .. } => return signal.clone(),
        What::Phase { .. } => "phase_changed",
        What::Work => "work",
        What::Other => "event",
    }
    .to_string()
}
