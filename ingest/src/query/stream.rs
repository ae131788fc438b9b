//! The live stream's reads for one subscriber (`GET /v1/stream`): where to start, and the backlog after
//! a position — the reader's tenant (and user) only, and only deliverable rows (see [`crate::stream`]).

use super::ReadDb;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::stream::{Cursor, RowSql, StreamRow, DELIVERABLE, PAGE, ROW_COLUMNS};

/// Where a subscriber starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// After this position (the one asked for, or the head when none was).
    After(Cursor),
    /// The stream no longer holds (or never held) what follows the position asked for: reload, then go
    /// on after the head.
    Reset { head: Cursor },
}

/// Decides where a subscriber asking to resume after `asked` (None: from now) starts: right after it
/// when the stream holds everything that followed it, else [`Start::Reset`] — the position was pruned
/// (older than the window), or this database never gave it (ahead of the head: a position from another
/// database, or from one restored from a backup). That is the agent's rule for its own stream: every
/// well-formed position is answered, `reset` when it cannot be resumed from. A position this stream gave
/// is never ahead of the head: it was at or below a head when it was sent, and heads only move forward
/// (see [`crate::stream`]).
pub async fn start(db: &ReadDb, r: &TenantRead, asked: Option<Cursor>) -> Result<Start, ApiError> {
    let xmin: i64 =
        sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            .fetch_one(&db.pool)
            .await?;
    let head = Cursor { xid: xmin, id: 0 };
    let Some(asked) = asked else {
        return Ok(Start::After(head));
    };
    if asked > head {
        return Ok(Start::Reset { head });
    }
    let pruned: Option<(i64, i64)> =
        sqlx::query_as("SELECT xid, id FROM stream_horizon WHERE tenant_id = $1")
            .bind(r.tenant_id())
            .fetch_optional(&db.pool)
            .await?;
    Ok(match pruned {
        Some((xid, id)) if asked < (Cursor { xid, id }) => Start::Reset { head },
        _ => Start::After(asked),
    })
}

/// The reader's deliverable rows after `after`, oldest first, at most [`PAGE`].
pub async fn after(db: &ReadDb, r: &TenantRead, after: Cursor) -> Result<Vec<StreamRow>, ApiError> {
    let below = crate::stream::head(&db.pool).await?;
    let rows: Vec<RowSql> = sqlx::query_as(&format!(
        "SELECT {ROW_COLUMNS} FROM stream_events
         WHERE tenant_id = $2 AND ($3::text IS NULL OR user_id = $3) AND (xid, id) > ($4, $5)
           AND {DELIVERABLE}
         ORDER BY xid, id LIMIT $6"
    ))
    .bind(below.xid)
    .bind(r.tenant_id())
    .bind(r.user())
    .bind(after.xid)
    .bind(after.id)
    .bind(PAGE)
    .fetch_all(&db.pool)
    .await?;
    Ok(rows.into_iter().map(StreamRow::from).collect())
}
