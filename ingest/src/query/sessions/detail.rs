//! One session with its task list and triggers (`GET /v1/sessions/{id}`): the session's body
//! ([`super::body`]) and the lists of its stored work ([`super::work`]).

use apiary_schema::work::{TaskView, TriggerView, Work};
use serde::Serialize;
use utoipa::ToSchema;

use super::body::SessionBody;

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
    pub task_list: Vec<TaskView>,
    /// True once more than 500 tasks were seen (the smallest ids are forgotten).
    pub tasks_truncated: bool,
    pub triggers: Vec<TriggerView>,
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
            task_list: v.task_list,
            tasks_truncated: v.tasks_truncated,
            triggers: v.triggers,
            triggers_truncated: v.triggers_truncated,
        }
    }
}
