//! What the APIs show of a session's [`Work`]: the full view (`GET /v1/sessions/{id}` on both sides) and
//! the compact summary (the ingest's session list).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{task_order, Work};

/// Task counts by state (Hive's three states; any other state under `other`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskCounts {
    pub pending: u64,
    pub in_progress: u64,
    pub completed: u64,
    /// Tasks in a state other than the three above, or with no known state.
    pub other: u64,
}

/// One task: id, state and times (never its subject or description: the policy drops them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskView {
    pub task_id: String,
    pub state: Option<String>,
    /// The earliest event of the task.
    pub created_at: DateTime<Utc>,
    /// The latest event of the task.
    pub updated_at: DateTime<Utc>,
}

/// One trigger (never its payload, name or task).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TriggerView {
    pub trigger_id: String,
    /// `timer` or `webhook` (Hive).
    pub trigger_type: Option<String>,
    /// `available`, `activated`, `deactivated` or `removed`.
    pub state: Option<String>,
    pub last_fired_at: Option<DateTime<Utc>>,
    pub fire_count: Option<u64>,
    /// The next fire time, while the trigger is activated.
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// The operation in flight: a tool call started and not completed (LLM calls in flight cannot be told
/// from the events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Activity {
    /// `tool_call` (the only kind the events tell).
    pub kind: String,
    pub tool_name: Option<String>,
    /// When the call started.
    pub since: DateTime<Utc>,
    /// Tool calls in flight (parallel calls).
    pub in_flight: u64,
}

/// The compact form (session list).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkSummary {
    pub tasks: TaskCounts,
    /// The earliest next fire time of the session's activated triggers.
    pub next_wake_at: Option<DateTime<Utc>>,
    pub activity: Option<Activity>,
}

/// The full view (session detail).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkView {
    #[serde(flatten)]
    pub summary: WorkSummary,
    /// Tasks by id (numeric order), deleted and reset ones left out.
    pub task_list: Vec<TaskView>,
    /// True once more than [`super::MAX_TASKS`] tasks were seen: the smallest ids were forgotten.
    pub tasks_truncated: bool,
    pub triggers: Vec<TriggerView>,
    /// True once more than [`super::MAX_TRIGGERS`] triggers were seen.
    pub triggers_truncated: bool,
}

impl Work {
    /// The visible tasks, in id order.
    fn task_views(&self) -> Vec<TaskView> {
        let mut list: Vec<TaskView> = self
            .tasks
            .iter()
            .filter(|(_, t)| !t.deleted)
            .filter_map(|(id, t)| {
                let (first, last) = (t.first?, t.last?);
                if self.reset_at.is_some_and(|r| last <= r) {
                    return None;
                }
                Some(TaskView {
                    task_id: id.clone(),
                    state: t.state.as_ref().map(|s| s.v.clone()),
                    created_at: first,
                    updated_at: last,
                })
            })
            .collect();
        list.sort_by(|a, b| task_order(&a.task_id, &b.task_id));
        list
    }

    fn trigger_views(&self) -> Vec<TriggerView> {
        self.triggers
            .iter()
            .map(|(id, t)| {
                let state = t.state.as_ref().map(|s| s.v.clone());
                let active = state.as_deref() == Some("activated");
                TriggerView {
                    trigger_id: id.clone(),
                    trigger_type: t.trigger_type.as_ref().map(|s| s.v.clone()),
                    state,
                    last_fired_at: t.last_fired_at,
                    fire_count: t.fire_count,
                    next_fire_at: t.next_fire_at.as_ref().filter(|_| active).map(|n| n.v),
                }
            })
            .collect()
    }

    fn activity(&self) -> Option<Activity> {
        let in_flight: Vec<(&String, &super::CallEntry, DateTime<Utc>)> = self
            .calls
            .iter()
            .filter(|(_, c)| c.completed_at.is_none())
            .filter_map(|(k, c)| Some((k, c, c.started_at?)))
            .filter(|(_, _, since)| self.ended_at.is_none_or(|end| *since > end))
            .collect();
        let (_, c, since) = in_flight.iter().max_by_key(|(k, _, since)| (*since, *k))?;
        Some(Activity {
            kind: "tool_call".into(),
            tool_name: c.tool_name.clone(),
            since: *since,
            in_flight: in_flight.len() as u64,
        })
    }

    fn summary_of(&self, tasks: &[TaskView], triggers: &[TriggerView]) -> WorkSummary {
        let mut counts = TaskCounts::default();
        for t in tasks {
            match t.state.as_deref() {
                Some("pending") => counts.pending += 1,
                Some("in_progress") => counts.in_progress += 1,
                Some("completed") => counts.completed += 1,
                _ => counts.other += 1,
            }
        }
        WorkSummary {
            tasks: counts,
            next_wake_at: triggers.iter().filter_map(|t| t.next_fire_at).min(),
            activity: self.activity(),
        }
    }

    /// The compact form.
    pub fn summary(&self) -> WorkSummary {
        self.summary_of(&self.task_views(), &self.trigger_views())
    }

    /// The full view.
    pub fn view(&self) -> WorkView {
        let (task_list, triggers) = (self.task_views(), self.trigger_views());
        WorkView {
            summary: self.summary_of(&task_list, &triggers),
            task_list,
            tasks_truncated: self.tasks_truncated,
            triggers,
            triggers_truncated: self.triggers_truncated,
        }
    }
}
