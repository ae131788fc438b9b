//! Runtime liveness from a heartbeat ([`apiary_schema::device::RuntimeLiveness`]): each reported session
//! of the sending device gets `runtime_gone_at` set (when gone; the first report's time is kept while it
//! stays gone) or cleared (alive), and `runtime_evidence`. Reading a session applies the `crashed`
//! overlay from it ([`crate::status::session_view`]); a later event of the session outranks it there, so
//! nothing is cleared here when events arrive.
//!
//! - Only the session's own device may report on it (`device_id` must match): a device cannot make
//!   another device's sessions read crashed. A sender bound to a user reports only on that user's
//!   sessions (two users may name the same device id, see [`super::device_owners`]). Unknown sessions
//!   are ignored.
//! - Lock order: runs before `devices` in a batch (sessions sorted by id), like the batch's own session
//!   step, so it never waits on a batch that waits on it.
//! - A session newly found crashed streams its transition (`event: status`, cause `runtime_gone`, the
//!   overlay's `seq`: the next one of the history; the next stored transition reuses it, which the
//!   stream's "a `seq` at or below one already seen replaces the history from there" covers).

use apiary_schema::device::RuntimeLiveness;
use apiary_schema::status::{view, Liveness, Rules, Status};
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::stream::StatusData;

/// A session whose status the report changed to `crashed`: what to stream, and the session's user.
#[derive(Debug)]
pub struct Crashed {
    pub status: StatusData,
    pub user_id: String,
}

/// Applies `reports` of `device` sent by `user`'s token (None: a sender bound to no user; sessions
/// sorted by id); returns the sessions newly read `crashed`.
#[allow(clippy::too_many_arguments)]
pub async fn apply(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    device: &str,
    user: Option<&str>,
    reports: &[RuntimeLiveness],
    rules: &Rules,
    now: DateTime<Utc>,
) -> Result<Vec<Crashed>, sqlx::Error> {
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    let mut sorted: Vec<&RuntimeLiveness> = reports.iter().collect();
    sorted.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    sorted.dedup_by(|a, b| a.session_id == b.session_id);
    let ids: Vec<&str> = sorted.iter().map(|r| r.session_id.as_str()).collect();
    // A gone report without a time is gone since now.
    let gone: Vec<Option<DateTime<Utc>>> = sorted
        .iter()
        .map(|r| (!r.alive).then(|| r.gone_time().unwrap_or(now).min(now)))
        .collect();
    let evidence: Vec<&str> = sorted.iter().map(|r| r.evidence.as_str()).collect();
    type Row = (
        String,
        String,
        Option<String>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
    );
    // Rows the report leaves as they are are locked but not rewritten (the usual heartbeat: alive, same
    // evidence). The tracker is read only for the sessions this report makes gone (the only ones judged
    // below).
    let rows: Vec<Row> = sqlx::query_as(
        "WITH old AS (
             SELECT s.session_id, s.runtime_gone_at FROM sessions s
             WHERE s.tenant_id = $1 AND s.device_id = $2 AND s.session_id = ANY($3)
               AND ($6::text IS NULL OR s.user_id = $6)
             ORDER BY s.session_id FOR UPDATE)
         UPDATE sessions s SET runtime_gone_at = CASE WHEN u.gone IS NULL THEN NULL
                 ELSE COALESCE(s.runtime_gone_at, u.gone) END,
             runtime_evidence = u.evidence
         FROM old, unnest($3::text[], $4::timestamptz[], $5::text[]) AS u(id, gone, evidence)
         WHERE s.tenant_id = $1 AND s.session_id = old.session_id AND u.id = old.session_id
             AND (s.runtime_evidence IS DISTINCT FROM u.evidence
                  OR (u.gone IS NULL) <> (s.runtime_gone_at IS NULL))
         RETURNING s.session_id, s.user_id,
             CASE WHEN old.runtime_gone_at IS NULL AND s.runtime_gone_at IS NOT NULL THEN s.health::text END,
             old.runtime_gone_at, s.runtime_gone_at",
    )
    .bind(tenant_id)
    .bind(device)
    .bind(&ids)
    .bind(&gone)
    .bind(&evidence)
    .bind(user)
    .fetch_all(&mut **tx)
    .await?;
    let mut out = Vec::new();
    for (session_id, user_id, health, before, after) in rows {
        let (None, Some(gone_at)) = (before, after) else {
            continue;
        };
        let tracker = health
            .as_deref()
            .and_then(crate::status::tracker_from_text)
            .unwrap_or_default();
        let live = Liveness {
            device_heard_at: Some(now),
            runtime_gone_at: Some(gone_at),
        };
        let v = view(&tracker.current(rules), now, &live, rules);
        if v.status != Status::Crashed {
            continue;
        }
        if let Some(t) = v.derived.into_iter().find(|t| t.to == Status::Crashed) {
            out.push(Crashed {
                status: StatusData {
                    session_id,
                    seq: t.seq as i64,
                    at: t.at,
                    from: t.from.map(Status::as_str),
                    to: t.to.as_str(),
                    cause: t.cause,
                },
                user_id,
            });
        }
    }
    Ok(out)
}
