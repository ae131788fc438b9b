//! What a session is working on: its tasks, its triggers and the operation in flight, folded from its
//! `task.changed`, `trigger.changed`, `tool.call` and lifecycle events. One rule for both binaries: the
//! agent folds its new events into the state it keeps per session (`session_work`), the ingest folds a
//! batch's new events into `sessions.work`; both answer [`Work::view`].
//!
//! ## Order and duplicates
//! The fold is a merge of per-key facts, each kept by a rule that does not depend on arrival order
//! (earliest, latest, or last-writer-wins by the event's `(time, event id)` [`Stamp`]), so any
//! permutation or duplication of the same events gives the same state (tested by property).
//!
//! ## Tasks (`task.changed`, key: `task_id`; Hive's ids are per-list integers, never reused)
//! - `created_at` = the earliest event of the task, `updated_at` = the latest; `state` = `data.status` of
//!   the latest event that carries one (Hive: `pending | in_progress | completed`).
//! - `deleted` hides the task for good (ids are never reused); it stays as a tombstone so a late update
//!   cannot bring it back.
//! - `list_reset` at T hides every task not changed after T (the latest reset counts).
//! - At most [`MAX_TASKS`] tasks (tombstones included) are kept: those with the greatest ids (numeric
//!   order; Hive's newest). Beyond that the smallest ids are forgotten and `truncated` is set for good.
//!   Subjects and descriptions never reach this fold: the policy drops them before disk.
//!
//! ## Triggers (`trigger.changed`, key: `trigger_id`)
//! - `state` is last-writer-wins over `available | activated | deactivated | removed`; a `fired` event
//!   counts as `activated` (a trigger that fires is active).
//! - `last_fired_at` = the latest of `data.last_fired_at` and the times of `fired` events; `fire_count`
//!   the greatest seen; `next_fire_at` the one of the latest event that carries it (Hive: `trigger_fired`
//!   and the SSE route's `trigger_activated`, epoch ms).
//! - `next_wake_at` = the earliest `next_fire_at` of the `activated` triggers. At most [`MAX_TRIGGERS`]
//!   (the smallest ids); beyond, `truncated`.
//!
//! ## Activity (`tool.call`)
//! A call is keyed by `tool_use_id`, else by execution + `tool_index` + `tool_name`, else by the name
//! alone. It is in flight when its `started` is known, its `completed` is not, and it started after the
//! session's last end (`execution` completed/failed, `worker.finished`). The activity is the in-flight call
//! that started last, with how many are in flight. At most [`MAX_CALLS`] calls are remembered (the
//! latest); forgetting one moves a horizon, and tool events at or before it are ignored, so a late start
//! whose completion was forgotten does not come back as in flight.
//! LLM calls in flight cannot be told: the only events before a Hive turn completes are the streaming
//! deltas, which the adapter filters on the device; `llm.turn` arrives when the turn is over.

#[cfg(feature = "testing")]
pub mod arb;
mod view;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::{CanonicalEvent, EventKind};
use crate::status::input::{run_of, Run};

pub use view::{Activity, TaskCounts, TaskView, TriggerView, WorkSummary, WorkView};

/// Tasks kept per session (tombstones included).
pub const MAX_TASKS: usize = 500;
/// Triggers kept per session.
pub const MAX_TRIGGERS: usize = 100;
/// Tool calls remembered per session (in flight or finished).
pub const MAX_CALLS: usize = 32;

/// Orders two writes of one fact: the event's time, then its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Stamp {
    #[serde(serialize_with = "crate::timefmt::time")]
    pub at: DateTime<Utc>,
    pub id: Uuid,
}

/// A last-writer-wins value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lww<T> {
    pub v: T,
    pub s: Stamp,
}

fn put<T>(slot: &mut Option<Lww<T>>, v: T, s: Stamp) {
    if slot.as_ref().is_none_or(|old| s > old.s) {
        *slot = Some(Lww { v, s });
    }
}

fn min_at(slot: &mut Option<DateTime<Utc>>, at: DateTime<Utc>) {
    *slot = Some(slot.map_or(at, |t| t.min(at)));
}

fn max_at(slot: &mut Option<DateTime<Utc>>, at: DateTime<Utc>) {
    *slot = Some(slot.map_or(at, |t| t.max(at)));
}

/// One task's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskEntry {
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub first: Option<DateTime<Utc>>,
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub last: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Lww<String>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
}

/// One trigger's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_type: Option<Lww<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Lww<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub last_fired_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire_at: Option<Lww<DateTime<Utc>>>,
}

/// One tool call's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(serialize_with = "crate::timefmt::opt_time")]
    pub completed_at: Option<DateTime<Utc>>,
}

impl CallEntry {
    /// The latest time known of the call (what eviction orders by).
    fn latest(&self) -> Option<DateTime<Utc>> {
        self.started_at.max(self.completed_at)
    }
}

/// A session's work state: what the agent keeps in `session_work` and the ingest in `sessions.work`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// Tasks by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tasks: BTreeMap<String, TaskEntry>,
    /// Set once a task was forgotten past [`MAX_TASKS`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tasks_truncated: bool,
    /// The latest `list_reset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<DateTime<Utc>>,
    /// Triggers by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub triggers: BTreeMap<String, TriggerEntry>,
    /// Set once a trigger was left out past [`MAX_TRIGGERS`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub triggers_truncated: bool,
    /// Tool calls by pairing key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calls: BTreeMap<String, CallEntry>,
    /// Tool events at or before this time are ignored (a call this old was forgotten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_horizon: Option<DateTime<Utc>>,
    /// The session's latest end (execution completed or failed, worker finished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
}

/// True for the events [`Work::fold`] reads (the others leave the state as it is).
pub fn reads(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::TaskChanged
            | EventKind::TriggerChanged
            | EventKind::ToolCall
            | EventKind::Execution
            | EventKind::WorkerFinished
    )
}

/// What the fold reads of an event.
#[derive(Debug, Clone, Copy)]
pub struct Fact<'a> {
    pub kind: EventKind,
    pub id: Uuid,
    pub execution_id: Option<&'a str>,
    pub data: &'a serde_json::Map<String, serde_json::Value>,
}

/// An owned copy of what the fold reads of one session event, at its effective time (the agent's writer
/// folds it once the commit knows the event is new, and journals it until the fold is written back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnedFact {
    pub kind: EventKind,
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    pub data: serde_json::Map<String, serde_json::Value>,
    #[serde(serialize_with = "crate::timefmt::time")]
    pub at: DateTime<Utc>,
}

impl OwnedFact {
    /// The fact of a session event the fold reads; None for other events.
    pub fn of(e: &CanonicalEvent, at: DateTime<Utc>) -> Option<OwnedFact> {
        (e.session_id.is_some() && reads(e.kind)).then(|| OwnedFact {
            kind: e.kind,
            id: e.event_id,
            execution_id: e.execution_id.clone(),
            data: e.data.clone(),
            at,
        })
    }

    /// Borrowed, for [`Work::fold_parts`].
    pub fn fact(&self) -> Fact<'_> {
        Fact {
            kind: self.kind,
            id: self.id,
            execution_id: self.execution_id.as_deref(),
            data: &self.data,
        }
    }
}

impl Fact<'_> {
    fn data_str(&self, key: &str) -> Option<&str> {
        self.data.get(key).and_then(serde_json::Value::as_str)
    }

    /// An epoch-milliseconds timestamp field (the policy's `timestamp` kind).
    fn epoch_ms(&self, key: &str) -> Option<DateTime<Utc>> {
        let ms = self.data.get(key)?.as_u64()?;
        DateTime::from_timestamp_millis(i64::try_from(ms).ok()?)
    }
}

impl Work {
    /// Folds one event at its effective time (truncated to microseconds like the health model, so every
    /// side computes with the same instants). Events of other kinds are ignored.
    pub fn fold(&mut self, e: &CanonicalEvent, at: DateTime<Utc>) {
        self.fold_parts(
            &Fact {
                kind: e.kind,
                id: e.event_id,
                execution_id: e.execution_id.as_deref(),
                data: &e.data,
            },
            at,
        );
    }

    /// [`Work::fold`] from the parts of an event that it reads (a stored event row).
    pub fn fold_parts(&mut self, e: &Fact<'_>, at: DateTime<Utc>) {
        let at = at.trunc_subsecs(6);
        let s = Stamp { at, id: e.id };
        match e.kind {
            EventKind::TaskChanged => self.fold_task(e, s),
            EventKind::TriggerChanged => self.fold_trigger(e, s),
            EventKind::ToolCall => self.fold_call(e, at),
            EventKind::Execution | EventKind::WorkerFinished => {
                if matches!(run_of(e.kind, e.data), Some(Run::Completed | Run::Failed)) {
                    max_at(&mut self.ended_at, at);
                }
            }
            _ => {}
        }
    }

    fn fold_task(&mut self, e: &Fact<'_>, s: Stamp) {
        if e.data_str("action") == Some("list_reset") {
            max_at(&mut self.reset_at, s.at);
            return;
        }
        let Some(id) = e.data_str("task_id") else {
            return;
        };
        let t = self.tasks.entry(id.to_string()).or_default();
        min_at(&mut t.first, s.at);
        max_at(&mut t.last, s.at);
        if e.data_str("action") == Some("deleted") {
            t.deleted = true;
        } else if let Some(state) = e.data_str("status") {
            put(&mut t.state, state.to_string(), s);
        }
        while self.tasks.len() > MAX_TASKS {
            let smallest = self.tasks.keys().min_by(|a, b| task_order(a, b)).cloned();
            if let Some(k) = smallest {
                self.tasks.remove(&k);
            }
            self.tasks_truncated = true;
        }
    }

    fn fold_trigger(&mut self, e: &Fact<'_>, s: Stamp) {
        let Some(id) = e.data_str("trigger_id") else {
            return;
        };
        if !self.triggers.contains_key(id) && self.triggers.len() >= MAX_TRIGGERS {
            // Keep the smallest ids, whatever order they came in.
            match self.triggers.keys().next_back() {
                Some(last) if last.as_str() > id => {
                    let last = last.clone();
                    self.triggers.remove(&last);
                }
                _ => {
                    self.triggers_truncated = true;
                    return;
                }
            }
            self.triggers_truncated = true;
        }
        let t = self.triggers.entry(id.to_string()).or_default();
        if let Some(ty) = e.data_str("trigger_type") {
            put(&mut t.trigger_type, ty.to_string(), s);
        }
        let action = e.data_str("action");
        let state = match action {
            Some(a @ ("available" | "activated" | "deactivated" | "removed")) => Some(a),
            Some("fired") => Some("activated"),
            _ => None,
        };
        if let Some(state) = state {
            put(&mut t.state, state.to_string(), s);
        }
        let fired = e
            .epoch_ms("last_fired_at")
            .or((action == Some("fired")).then_some(s.at));
        if let Some(f) = fired {
            max_at(&mut t.last_fired_at, f);
        }
        if let Some(n) = e.data.get("fire_count").and_then(serde_json::Value::as_u64) {
            t.fire_count = Some(t.fire_count.map_or(n, |c| c.max(n)));
        }
        if let Some(next) = e.epoch_ms("next_fire_at") {
            put(&mut t.next_fire_at, next, s);
        }
    }

    fn fold_call(&mut self, e: &Fact<'_>, at: DateTime<Utc>) {
        if self.calls_horizon.is_some_and(|h| at <= h) {
            return;
        }
        let name = e.data_str("tool_name");
        let key = call_key(e.data, e.execution_id).text();
        let c = self.calls.entry(key).or_default();
        match e.data_str("status") {
            Some("started") => min_at(&mut c.started_at, at),
            Some("completed") => min_at(&mut c.completed_at, at),
            _ => {}
        }
        // Only a call in flight shows its name: a finished one keeps just its times (the state is
        // rewritten by every batch that has a tool event, so it stays small). The smallest name wins,
        // whatever the order.
        if c.completed_at.is_some() {
            c.tool_name = None;
        } else if let Some(n) = name.filter(|n| c.tool_name.as_deref().is_none_or(|old| *n < old)) {
            c.tool_name = Some(n.to_string());
        }
        while self.calls.len() > MAX_CALLS {
            let oldest = self
                .calls
                .iter()
                .min_by_key(|(k, c)| (c.latest(), k.as_str()))
                .map(|(k, c)| (k.clone(), c.latest()));
            if let Some((k, t)) = oldest {
                self.calls.remove(&k);
                if let Some(t) = t {
                    max_at(&mut self.calls_horizon, t);
                }
            }
            if let Some(h) = self.calls_horizon {
                self.calls.retain(|_, c| c.latest().is_none_or(|t| t > h));
            }
        }
    }
}

/// How a tool call's start and completion are paired: by `tool_use_id`; else by execution,
/// `tool_index` and tool name; else by the name alone (ambiguous: parallel calls of one tool cannot be
/// told apart, so the agent's duration pairing ([`CallKey::pairs`]) does not use it). The activity and
/// the agent's tool-call durations share this rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CallKey {
    /// `tool_use_id`.
    Id(String),
    /// Execution id (or `""`), `tool_index` (as JSON text), tool name (or `""`).
    Index(String, String, String),
    /// The tool name alone (or `""`).
    Name(String),
}

impl CallKey {
    /// The key as the stored state spells it (`id:…`, `ix:exec:index:name`, `name:…`).
    pub fn text(&self) -> String {
        match self {
            CallKey::Id(id) => format!("id:{id}"),
            CallKey::Index(exec, i, name) => format!("ix:{exec}:{i}:{name}"),
            CallKey::Name(name) => format!("name:{name}"),
        }
    }

    /// True when the key tells one call from another, so a start and a completion with it are one
    /// call's (an id, or execution + index + name).
    pub fn pairs(&self) -> bool {
        !matches!(self, CallKey::Name(_))
    }
}

/// The pairing key of a `tool.call` event from its `data` and execution id.
pub fn call_key(
    data: &serde_json::Map<String, serde_json::Value>,
    execution_id: Option<&str>,
) -> CallKey {
    let text = |k: &str| data.get(k).and_then(serde_json::Value::as_str);
    let name = text("tool_name").unwrap_or("").to_string();
    match (text("tool_use_id"), data.get("tool_index")) {
        (Some(id), _) => CallKey::Id(id.to_string()),
        (None, Some(i)) => {
            CallKey::Index(execution_id.unwrap_or("").to_string(), i.to_string(), name)
        }
        (None, None) => CallKey::Name(name),
    }
}

/// Task ids in numeric order when they are numbers (Hive's), numbers after anything else.
fn task_order(a: &str, b: &str) -> std::cmp::Ordering {
    let n = |s: &str| s.parse::<u64>().ok();
    (n(a), a).cmp(&(n(b), b))
}
