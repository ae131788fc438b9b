//! The session registry: identity bound per session, the first time the session is seen.
//!
//! - **First sight** (an event of an unknown session is committed): the session is bound to the
//!   configured defaults (`identity.user_id`, `identity.tenant_id`, the device id). A worker's event names
//!   its queen as `parent_session_id` (the Hive adapter sets it from `colony_id`): the worker is bound to
//!   that parent and inherits the parent's user, tenant and device when the parent is already bound.
//! - **Explicit registration** (`POST /v1/sessions`): binds the session with its own user, tenant, device
//!   and parent. It may refine an implicit binding (fields it names win, the others stay), but a second
//!   explicit registration that contradicts the first is refused ([`OutboxError::SessionConflict`]).
//!
//! Bindings travel with every batch (and export bundle) whose events reference the session.

use super::op::{Ctx, Task};
use crate::identity::SessionRegistration;
use crate::outbox::error::OutboxError;
use apiary_schema::SessionBinding;
use chrono::{TimeZone, Utc};
use rusqlite::{params, Connection, OptionalExtension};

/// Binds `session` if this is the first time it is seen.
pub(crate) fn try_bind_on_first_sight(
    ctx: &mut Ctx<'_>,
    session: &str,
    parent: Option<&str>,
) -> rusqlite::Result<()> {
    if ctx.state.known_sessions.contains(session) || ctx.delta.new_sessions.contains(session) {
        return Ok(());
    }
    let d = ctx.defaults().clone();
    let d = &d;
    let inherited = match parent {
        Some(p) => load(ctx.conn, p)?,
        None => None,
    };
    let (user, tenant, device) = match &inherited {
        Some(b) => (
            b.user_id.clone().or(d.user_id.clone()),
            b.tenant_id.clone().or(d.tenant_id.clone()),
            b.device_id.clone().or(d.device_id.clone()),
        ),
        None => (d.user_id.clone(), d.tenant_id.clone(), d.device_id.clone()),
    };
    ctx.conn
        .prepare_cached(
            "INSERT OR IGNORE INTO sessions
                (session_id, user_id, tenant_id, device_id, parent_session_id, first_seen_at, registered)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)",
        )?
        .execute(params![session, user, tenant, device, parent, ctx.now_ms])?;
    if parent.is_some() {
        ctx.conn
            .prepare_cached(
                "UPDATE sessions SET parent_session_id = ?2
                 WHERE session_id = ?1 AND parent_session_id IS NULL",
            )?
            .execute(params![session, parent])?;
    }
    ctx.delta.new_sessions.insert(session.to_string());
    Ok(())
}

/// One session's binding, if bound.
pub fn load(conn: &Connection, session: &str) -> rusqlite::Result<Option<SessionBinding>> {
    conn.prepare_cached(
        "SELECT session_id, user_id, tenant_id, device_id, parent_session_id, first_seen_at
         FROM sessions WHERE session_id = ?1",
    )?
    .query_row([session], row_to_binding)
    .optional()
}

fn row_to_binding(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionBinding> {
    let ms: i64 = r.get(5)?;
    Ok(SessionBinding {
        session_id: r.get(0)?,
        user_id: r.get(1)?,
        tenant_id: r.get(2)?,
        device_id: r.get(3)?,
        parent_session_id: r.get(4)?,
        first_seen_at: Utc.timestamp_millis_opt(ms).single().unwrap_or_default(),
    })
}

/// Bindings of `sessions` and of their parents, sorted by session id.
pub fn bindings_for<'a>(
    conn: &Connection,
    sessions: impl IntoIterator<Item = &'a str>,
) -> rusqlite::Result<Vec<SessionBinding>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo: Vec<String> = sessions.into_iter().map(str::to_string).collect();
    while let Some(s) = todo.pop() {
        if out.contains_key(&s) {
            continue;
        }
        if let Some(b) = load(conn, &s)? {
            if let Some(p) = &b.parent_session_id {
                todo.push(p.clone());
            }
            out.insert(s, b);
        }
    }
    Ok(out.into_values().collect())
}

/// `POST /v1/sessions`: explicit registration.
pub(crate) struct Register {
    pub registration: SessionRegistration,
}

impl Task for Register {
    type Output = SessionBinding;

    fn apply(
        &mut self,
        ctx: &mut Ctx<'_>,
    ) -> rusqlite::Result<Result<SessionBinding, OutboxError>> {
        let r = &self.registration;
        let existing = load(ctx.conn, &r.session_id)?;
        let explicit: Option<i64> = ctx
            .conn
            .query_row(
                "SELECT registered FROM sessions WHERE session_id = ?1",
                [&r.session_id],
                |row| row.get(0),
            )
            .optional()?;
        if let (Some(b), Some(1)) = (&existing, explicit) {
            let differs = |new: &Option<String>, old: &Option<String>| new.is_some() && new != old;
            if differs(&r.user_id, &b.user_id)
                || differs(&r.tenant_id, &b.tenant_id)
                || differs(&r.device_id, &b.device_id)
                || differs(&r.parent_session_id, &b.parent_session_id)
            {
                return Ok(Err(OutboxError::SessionConflict(r.session_id.clone())));
            }
        }
        let d = ctx.defaults().clone();
        let d = &d;
        let pick =
            |new: &Option<String>, old: Option<&Option<String>>, default: &Option<String>| {
                new.clone()
                    .or_else(|| old.cloned().flatten())
                    .or_else(|| default.clone())
            };
        let old = existing.as_ref();
        let user = pick(&r.user_id, old.map(|b| &b.user_id), &d.user_id);
        let tenant = pick(&r.tenant_id, old.map(|b| &b.tenant_id), &d.tenant_id);
        let device = pick(&r.device_id, old.map(|b| &b.device_id), &d.device_id);
        let parent = pick(
            &r.parent_session_id,
            old.map(|b| &b.parent_session_id),
            &None,
        );
        ctx.conn.execute(
            "INSERT INTO sessions
                (session_id, user_id, tenant_id, device_id, parent_session_id, first_seen_at, registered)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1)
             ON CONFLICT(session_id) DO UPDATE SET user_id = ?2, tenant_id = ?3, device_id = ?4,
                 parent_session_id = ?5, registered = 1",
            params![r.session_id, user, tenant, device, parent, ctx.now_ms],
        )?;
        ctx.delta.new_sessions.insert(r.session_id.clone());
        let binding = load(ctx.conn, &r.session_id)?.expect("just written");
        Ok(Ok(binding))
    }
}

/// What [`rebind_undelivered`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebound {
    /// Sessions rebound to the current identity (their binding never reached the ingest).
    pub rebound: u64,
    /// Sessions bound to another identity that the ingest already holds: left as they are.
    pub kept: u64,
}

/// Rebinds every implicitly bound session (registered = 0) whose binding differs from the current
/// `defaults` and has never been accepted by the ingest (no event of it delivered, acknowledged as a
/// duplicate or exported) to what first sight would bind it to now: its parent's user and device, else
/// the defaults. A session the ingest already holds keeps its binding (rewriting it could not change the
/// cloud's, only make the two disagree); explicitly registered sessions are never touched. Run when the
/// outbox opens, so fixing `[identity]` (or adopting the token's) and restarting recovers every pending
/// event of sessions first seen under the wrong identity.
pub(crate) fn rebind_undelivered(
    conn: &Connection,
    defaults: &crate::identity::IdentityDefaults,
) -> rusqlite::Result<Rebound> {
    type Row = (Option<String>, Option<String>, Option<String>, bool);
    let mut rows: std::collections::BTreeMap<String, Row> = std::collections::BTreeMap::new();
    let mut stmt = conn.prepare(
        "SELECT session_id, user_id, device_id, parent_session_id, registered FROM sessions",
    )?;
    let mut q = stmt.query([])?;
    while let Some(r) = q.next()? {
        rows.insert(
            r.get(0)?,
            (r.get(1)?, r.get(2)?, r.get(3)?, r.get::<_, i64>(4)? == 1),
        );
    }
    // What first sight would bind now: sessions without a bound parent first, then children from their
    // (possibly rebound) parent.
    let mut want: Vec<(String, Option<String>, Option<String>)> = vec![];
    for pass in [false, true] {
        for (id, (user, device, parent, registered)) in &rows {
            let bound_parent = parent.as_ref().and_then(|p| rows.get(p).map(|r| (p, r)));
            if *registered || bound_parent.is_some() != pass {
                continue;
            }
            let (u, d) = match bound_parent {
                Some((p, (pu, pd, ..))) => match want.iter().find(|w| &w.0 == p) {
                    Some((_, wu, wd)) => (wu.clone(), wd.clone()),
                    None => (pu.clone(), pd.clone()),
                },
                None => (None, None),
            };
            let u = u.or(defaults.user_id.clone());
            let d = d.or(defaults.device_id.clone());
            if (&u, &d) != (user, device) {
                want.push((id.clone(), u, d));
            }
        }
    }
    if want.is_empty() {
        return Ok(Rebound::default());
    }
    let held = held_by_ingest(conn)?;
    let mut out = Rebound::default();
    let mut update =
        conn.prepare("UPDATE sessions SET user_id = ?2, device_id = ?3 WHERE session_id = ?1")?;
    for (id, u, d) in want {
        if held.contains(&id) {
            out.kept += 1;
        } else {
            update.execute(params![id, u, d])?;
            out.rebound += 1;
        }
    }
    Ok(out)
}

/// Sessions the ingest holds a binding of: one of their events was delivered, acknowledged as a
/// duplicate, or exported (a bundle carries the bindings). One scan of `events` (it has no session
/// index): only run when some binding differs from the current identity.
fn held_by_ingest(conn: &Connection) -> rusqlite::Result<std::collections::HashSet<String>> {
    use super::store::state::{DELIVERED, DUPLICATE, EXPORTED};
    let mut stmt = conn.prepare(
        "SELECT DISTINCT session_id FROM events WHERE session_id IS NOT NULL AND state IN (?1, ?2, ?3)",
    )?;
    let ids = stmt.query_map(params![DELIVERED, DUPLICATE, EXPORTED], |r| r.get(0))?;
    ids.collect()
}
