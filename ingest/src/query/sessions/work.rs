//! A session's work as the API answers it: the compact form in every [`super::SessionBody`] (task counts,
//! `next_wake_at`, the activity) and the lists in the session detail ([`super::detail::SessionDetail`]).
//! The rule is the shared one ([`apiary_schema::work`]); these types give it its OpenAPI schema.

use apiary_schema::work::{self, Work};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Tasks by state.
#[derive(Debug, Clone, Copy, Default, Serialize, ToSchema)]
pub struct TaskCountsBody {
    pub pending: u64,
    pub in_progress: u64,
    pub completed: u64,
    /// Tasks in any other (or no known) state.
    pub other: u64,
}

/// The operation in flight: a tool call started and not completed (LLM calls in flight cannot be told
/// from the events).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActivityBody {
    /// `tool_call`.
    pub kind: String,
    pub tool_name: Option<String>,
    /// When the call started.
    pub since: DateTime<Utc>,
    /// Tool calls in flight.
    pub in_flight: u64,
}

/// The compact work of a session (in every session body).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct WorkSummaryBody {
    /// Task counts by state (deleted tasks and tasks before a list reset left out).
    pub tasks: TaskCountsBody,
    /// The earliest next fire time of the session's activated triggers.
    pub next_wake_at: Option<DateTime<Utc>>,
    /// What it is doing now; null when nothing is in flight.
    pub activity: Option<ActivityBody>,
}

/// One task: never its subject or description.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskBody {
    pub task_id: String,
    /// `pending`, `in_progress`, `completed` (Hive) or another word.
    pub state: Option<String>,
    /// The first event of the task.
    pub created_at: DateTime<Utc>,
    /// The latest event of the task.
    pub updated_at: DateTime<Utc>,
}

/// One trigger: never its payload, name or task.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TriggerBody {
    pub trigger_id: String,
    /// `timer` or `webhook` (Hive).
    pub trigger_type: Option<String>,
    /// `available`, `activated`, `deactivated` or `removed`.
    pub state: Option<String>,
    pub last_fired_at: Option<DateTime<Utc>>,
    pub fire_count: Option<u64>,
    /// While activated.
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// The stored work (`sessions.work`); empty when absent or unreadable.
pub fn stored(v: Option<&Value>) -> Work {
    v.and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

impl From<&work::WorkSummary> for WorkSummaryBody {
    fn from(s: &work::WorkSummary) -> WorkSummaryBody {
        let t = &s.tasks;
        WorkSummaryBody {
            tasks: TaskCountsBody {
                pending: t.pending,
                in_progress: t.in_progress,
                completed: t.completed,
                other: t.other,
            },
            next_wake_at: s.next_wake_at,
            activity: s.activity.as_ref().map(|a| ActivityBody {
                kind: a.kind.clone(),
                tool_name: a.tool_name.clone(),
                since: a.since,
                in_flight: a.in_flight,
            }),
        }
    }
}
