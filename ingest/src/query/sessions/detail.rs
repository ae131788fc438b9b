//! One session with its task list and triggers (`GET /v1/sessions/{id}`): the session's body
//! ([`super::body`]) and the lists of its stored work ([`super::work`]).

use apiary_schema::work::Work;
use serde::Serialize;
use utoipa::ToSchema;

use super::body::SessionBody;
use super::work::{TaskBody, TriggerBody};

/// A session with its task list and triggers (`GET /v1/sessions/{id}`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionDetail {
    #[serde(flatten)]
    pub session: SessionBody,
    /// The topmost session of the tree this one belongs to (its queen, up through colonies and forks,
    /// at most 8 levels): `GET /v1/sessions/{root_session_id}/tree` shows this session in place. The
    /// session's own id when nothing is above it.
    pub root_session_id: String,
    /// The tasks by id (at most 500: the greatest ids).
    pub task_list: Vec<TaskBody>,
    /// True once more than 500 tasks were seen (the smallest ids are forgotten).
    pub tasks_truncated: bool,
    pub triggers: Vec<TriggerBody>,
    /// True once more than 100 triggers were seen.
    pub triggers_truncated: bool,
}

impl SessionDetail {
    /// The session body with the lists of its stored work.
    pub fn new(session: SessionBody, w: &Work) -> SessionDetail {
        let v = w.view();
        SessionDetail {
            root_session_id: session.session_id.clone(),
            session,
            task_list: v
                .task_list
                .into_iter()
                .map(|t| TaskBody {
                    task_id: t.task_id,
                    state: t.state,
                    created_at: t.created_at,
                    updated_at: t.updated_at,
                })
                .collect(),
            tasks_truncated: v.tasks_truncated,
            triggers: v
                .triggers
                .into_iter()
                .map(|t| TriggerBody {
                    trigger_id: t.trigger_id,
                    trigger_type: t.trigger_type,
                    state: t.state,
                    last_fired_at: t.last_fired_at,
                    fire_count: t.fire_count,
                    next_fire_at: t.next_fire_at,
                })
                .collect(),
            triggers_truncated: v.triggers_truncated,
        }
    }
}
