//! The local session reads for the desktop: `GET /v1/sessions` (a listing) and
//! `GET /v1/sessions/{id}/tree` (queen → colonies → workers), in the ingest's body shapes, derived from
//! the outbox ([`crate::outbox::ListFilter`]) with the runtime liveness overlay; they answer with sync
//! off and air-gapped. Either token may read them.

use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, AppState};
use crate::outbox::{ListCursor, ListFilter, SessionBody, TreeNode};
use apiary_schema::status::Status;

/// Default page size.
pub const DEFAULT_LIMIT: usize = 100;
/// Largest page size.
pub const MAX_LIMIT: usize = 1000;

/// The query string of `GET /v1/sessions`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Comma-separated statuses.
    status: Option<String>,
    /// 1 to 1000 (default 100).
    limit: Option<String>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
}

impl ListQuery {
    fn filter(self) -> Result<ListFilter, ApiError> {
        let statuses = match self.status {
            None => None,
            Some(v) => Some(
                v.split(',')
                    .map(|s| {
                        Status::parse(s.trim()).ok_or_else(|| {
                            let names: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
                            ApiError::BadRequest(format!("status: use any of {}", names.join(", ")))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
        };
        let limit = match self.limit {
            None => DEFAULT_LIMIT,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| ApiError::BadRequest(format!("limit: must be 1 to {MAX_LIMIT}")))?,
        };
        let after = match self.cursor {
            None => None,
            Some(c) => Some(ListCursor::decode(&c).ok_or_else(|| {
                ApiError::BadRequest("cursor: is not a cursor this endpoint returned".into())
            })?),
        };
        Ok(ListFilter {
            statuses,
            limit,
            after,
        })
    }
}

/// The body of `GET /v1/sessions`: one page.
#[derive(Debug, Clone, Serialize)]
pub struct SessionPage {
    /// Most recently active first.
    pub sessions: Vec<SessionBody>,
    /// The `cursor` of the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

/// `GET /v1/sessions`: this device's sessions, most recently active first; `next_cursor` (null at the
/// end) gives the next page; with a status filter a page may come back short with a cursor.
pub async fn list_sessions(
    State(state): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Json<SessionPage>, ApiError> {
    let filter = q.filter()?;
    let (sessions, next) = state
        .outbox
        .session_list(filter, chrono::Utc::now(), state.runtimes.gone())
        .await?;
    Ok(Json(SessionPage {
        sessions,
        next_cursor: next.map(|c| c.encode()),
    }))
}

/// `GET /v1/sessions/{id}/tree`: the session, its colonies (by queen) and their workers, each with its
/// own `usage` and `totals` of everything below it.
pub async fn get_tree(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<TreeNode>, ApiError> {
    match state
        .outbox
        .session_tree(&id, chrono::Utc::now(), state.runtimes.gone())
        .await?
    {
        Some(t) => Ok(Json(t)),
        None => Err(ApiError::NotFound(format!(
            "session {id} is not known here"
        ))),
    }
}
