//! Who may write into a session: its owner is fixed by the first authenticated sender.
//!
//! ## The rule
//! A session's owner — `(user_id, device_id)` — is set when its row is first inserted: from the binding
//! the batch carries for it, else the sending token's user and the batch's device. It never changes. A
//! sender bound to a user (and/or a device) may write only into sessions owned by that user (and device):
//! an event whose session, parent session or colony belongs to another user or device is rejected with a
//! reason and never stored, rolled up or folded into session state; a binding for such a session changes
//! nothing. So a token bound to user X cannot add usage to, change the status of, hang a worker under,
//! or take over a session of user Y — and being first to use an id makes the session the first user's,
//! so Y's later events for it are refused, never silently counted as X's. A sender bound to a user also
//! claims the parent and colony sessions its events name when they are new (for that user), so a parent
//! created later by another user cannot adopt them. Senders bound to no user or device (an unbound
//! ingest token, `apiary-ingest import`) are tenant-wide trusted senders: they may write any session of
//! the tenant and name any user in bindings; a session they send without a binding inherits its parent's
//! user and device ([`inherit`]).
//!
//! ## Concurrency
//! [`claim`] decides ownership in the batch's transaction, in one statement over the sorted (tenant,
//! session id) pairs of a group's tenants: new sessions are inserted with their owner, existing ones are locked and their owner returned
//! (`ON CONFLICT DO UPDATE` with a no-op set). Of two batches racing to be first with the same new id,
//! the second waits on the first's uncommitted row and then sees its owner. The locks are taken in key
//! order before any other lock of the batch, and a batch touches no session it did not claim, so
//! concurrent batches still never deadlock.

use std::collections::{BTreeMap, HashMap, HashSet};

use apiary_schema::SessionBinding;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::intake::ReadyEvent;

/// Who sent the batch, as far as storing it is concerned.
#[derive(Debug, Clone)]
pub struct Sender {
    pub tenant_id: Uuid,
    /// The token's user binding: owner of the sessions it creates, and the only user whose sessions it
    /// may write. None with no device either: a tenant-wide trusted sender.
    pub user_id: Option<String>,
    /// The token's device binding: likewise for devices.
    pub device_id: Option<String>,
    /// False for imports: they say nothing about whether the device is alive now.
    pub live: bool,
}

impl Sender {
    /// Bound to a user or a device: its writes are checked against session owners.
    pub fn is_bound(&self) -> bool {
        self.user_id.is_some() || self.device_id.is_some()
    }

    /// Whom `owner` belongs to, from this sender's point of view, when it may not write there.
    fn refuses(&self, owner: &Owner) -> Option<&'static str> {
        if self.user_id.as_ref().is_some_and(|u| *u != owner.user_id) {
            return Some("another user");
        }
        if self
            .device_id
            .as_ref()
            .is_some_and(|d| *d != owner.device_id)
        {
            return Some("another device");
        }
        None
    }
}

/// The owner a session would get if this batch creates it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub user_id: String,
    pub device_id: String,
    pub first_seen_at: DateTime<Utc>,
    /// The parent (binding's, else the first event's parent or colony), for inheritance.
    parent: Option<String>,
    /// The batch binds this session itself (no inheritance then).
    bound: bool,
}

/// A session's stored owner, after [`claim`].
#[derive(Debug, Clone)]
pub struct Owner {
    pub user_id: String,
    pub device_id: String,
    /// Inserted by this transaction.
    inserted: bool,
}

/// The sessions a batch names and the owner each would get: every bound session, every event's session
/// and every forked colony run a `colony.created` names and, for a bound sender, the parents and
/// colonies they name (claimed for it when new).
pub fn wanted(
    sender: &Sender,
    device: &str,
    bindings: &[SessionBinding],
    events: &[&ReadyEvent],
) -> BTreeMap<String, Claim> {
    let user = sender.user_id.clone().unwrap_or_default();
    let new = |at, parent: Option<&String>, bound| Claim {
        user_id: user.clone(),
        device_id: device.to_string(),
        first_seen_at: at,
        parent: parent.cloned(),
        bound,
    };
    let mut out: BTreeMap<String, Claim> = BTreeMap::new();
    for b in bindings {
        let c = out
            .entry(b.session_id.clone())
            .or_insert_with(|| new(b.first_seen_at, b.parent_session_id.as_ref(), true));
        c.user_id = b.user_id.clone().unwrap_or_else(|| user.clone());
        c.device_id = b.device_id.clone().unwrap_or_else(|| device.to_string());
        c.first_seen_at = c.first_seen_at.min(b.first_seen_at);
    }
    for e in events {
        let ev = &e.event;
        let Some(sid) = &ev.session_id else { continue };
        let parent = ev.parent_session_id.as_ref().or(ev.colony_id.as_ref());
        let c = out
            .entry(sid.clone())
            .or_insert_with(|| new(e.effective_at, parent, false));
        c.first_seen_at = c.first_seen_at.min(e.effective_at);
        if c.parent.is_none() {
            c.parent = parent.cloned();
        }
    }
    // A forked colony run a `colony.created` names is claimed (locked, or inserted and then dropped as
    // unused) so that no batch with the run's own usage is written beside this one: which colony row
    // that usage goes to depends on the run (`super::colonies::forked_run_named`).
    for e in events {
        if let Some(run) = super::colonies::forked_run_named(&e.event) {
            let c = out
                .entry(run.to_string())
                .or_insert_with(|| new(e.effective_at, None, false));
            c.first_seen_at = c.first_seen_at.min(e.effective_at);
        }
    }
    if sender.is_bound() {
        let parents: Vec<(String, DateTime<Utc>)> = bindings
            .iter()
            .filter_map(|b| Some((b.parent_session_id.clone()?, b.first_seen_at)))
            .chain(events.iter().flat_map(|e| {
                let ev = &e.event;
                [&ev.parent_session_id, &ev.colony_id]
                    .into_iter()
                    .flatten()
                    .filter(|p| Some(*p) != ev.session_id.as_ref())
                    .map(|p| (p.clone(), e.effective_at))
            }))
            .collect();
        for (p, at) in parents {
            let c = out.entry(p).or_insert_with(|| new(at, None, false));
            c.first_seen_at = c.first_seen_at.min(at);
        }
    }
    out
}

/// A session of a trusted (unbound) sender with no binding of its own (a worker, usually) takes the
/// user and device of its parent (or colony's queen): from this batch's bindings, else the stored
/// parent. A bound sender's sessions are its own and inherit nothing.
pub async fn inherit(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    claims: &mut BTreeMap<String, Claim>,
) -> Result<(), sqlx::Error> {
    let orphans: Vec<(String, String)> = claims
        .iter()
        .filter(|(id, c)| !c.bound && c.parent.as_ref().is_some_and(|p| p != *id))
        .filter_map(|(id, c)| Some((id.clone(), c.parent.clone()?)))
        .collect();
    if orphans.is_empty() {
        return Ok(());
    }
    let mut known: HashMap<String, (String, String)> = claims
        .iter()
        .filter(|(_, c)| c.bound)
        .map(|(id, c)| (id.clone(), (c.user_id.clone(), c.device_id.clone())))
        .collect();
    let missing: Vec<&str> = orphans
        .iter()
        .map(|o| o.1.as_str())
        .filter(|p| !known.contains_key(*p))
        .collect();
    if !missing.is_empty() {
        let rows: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT session_id, user_id, device_id FROM sessions WHERE tenant_id = $1 AND session_id = ANY($2)",
        )
        .bind(tenant_id)
        .bind(&missing)
        .fetch_all(&mut **tx)
        .await?;
        known.extend(rows.into_iter().map(|(s, u, d)| (s, (u, d))));
    }
    for (id, parent) in orphans {
        if let (Some((user, device)), Some(c)) = (known.get(&parent), claims.get_mut(&id)) {
            if !user.is_empty() {
                c.user_id.clone_from(user);
            }
            if !device.is_empty() {
                c.device_id.clone_from(device);
            }
        }
    }
    Ok(())
}

/// One tenant's claims for [`claim`]: its id, its batches' latest arrival, the sessions (sorted by id).
pub type TenantClaims<'c> = (Uuid, DateTime<Utc>, &'c BTreeMap<String, Claim>);

/// Inserts the new sessions with their owner and locks the existing ones, for all `tenants` (in tenant
/// order) in one statement, rows in (tenant, session id) order; returns every claimed session's stored
/// owner, per tenant.
pub async fn claim(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[TenantClaims<'_>],
) -> Result<HashMap<Uuid, HashMap<String, Owner>>, sqlx::Error> {
    let n: usize = tenants.iter().map(|t| t.2.len()).sum();
    if n == 0 {
        return Ok(HashMap::new());
    }
    let (mut ids, mut received, mut sessions) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut users, mut devices, mut firsts) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (tenant, received_at, claims) in tenants {
        for (s, c) in claims.iter() {
            ids.push(*tenant);
            received.push(*received_at);
            sessions.push(s.as_str());
            users.push(c.user_id.as_str());
            devices.push(c.device_id.as_str());
            firsts.push(c.first_seen_at);
        }
    }
    let rows: Vec<(Uuid, String, String, String, bool)> = sqlx::query_as(
        "INSERT INTO sessions AS s (tenant_id, last_received_at, session_id, user_id, device_id, first_seen_at)
         SELECT u.* FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[],
             $6::timestamptz[]) AS u
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET user_id = s.user_id
         RETURNING tenant_id, session_id, user_id, device_id, xmax = 0",
    )
    .bind(&ids)
    .bind(&received)
    .bind(&sessions)
    .bind(&users)
    .bind(&devices)
    .bind(&firsts)
    .fetch_all(&mut **tx)
    .await?;
    let mut out: HashMap<Uuid, HashMap<String, Owner>> = HashMap::new();
    for (tenant, s, user_id, device_id, inserted) in rows {
        out.entry(tenant).or_default().insert(
            s,
            Owner {
                user_id,
                device_id,
                inserted,
            },
        );
    }
    Ok(out)
}

/// What the sender may write, given the owners [`claim`] returned.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Sessions the sender may not write, with the reason (bindings for them are ignored).
    refused: HashMap<String, String>,
    /// Sessions an allowed event or binding names (as its session, parent or colony).
    used: HashSet<String>,
}

impl Verdict {
    /// Judges the bindings; events are judged one by one with [`Verdict::event`].
    pub fn new(
        sender: &Sender,
        owners: &HashMap<String, Owner>,
        bindings: &[SessionBinding],
    ) -> Verdict {
        let mut v = Verdict::default();
        let why = |id: &str| owners.get(id).and_then(|o| sender.refuses(o));
        for (id, o) in owners {
            if let Some(whom) = sender.refuses(o) {
                v.refused.insert(
                    id.clone(),
                    format!("session {id:?} belongs to {whom} than this token's"),
                );
            }
        }
        for b in bindings {
            if let Some(whom) = b.parent_session_id.as_deref().and_then(why) {
                v.refused.entry(b.session_id.clone()).or_insert_with(|| {
                    format!(
                        "the binding of session {:?} names parent {:?}, which belongs to {whom} than this token's",
                        b.session_id,
                        b.parent_session_id.as_deref().unwrap_or_default()
                    )
                });
            }
        }
        for b in bindings {
            if !v.refused.contains_key(&b.session_id) {
                v.used.insert(b.session_id.clone());
                v.used.extend(b.parent_session_id.clone());
            }
        }
        v
    }

    /// Why this event may not be stored, if it may not; else notes the sessions it names as used.
    pub fn event(
        &mut self,
        sender: &Sender,
        owners: &HashMap<String, Owner>,
        e: &ReadyEvent,
    ) -> Option<String> {
        let ev = &e.event;
        let sid = ev.session_id.as_ref()?;
        if let Some(why) = self.refused.get(sid) {
            return Some(why.clone());
        }
        if sender.is_bound() {
            for (what, id) in [
                ("parent session", &ev.parent_session_id),
                ("colony", &ev.colony_id),
            ] {
                let Some(id) = id.as_ref().filter(|p| *p != sid) else {
                    continue;
                };
                if let Some(whom) = owners.get(id).and_then(|o| sender.refuses(o)) {
                    return Some(format!("{what} {id:?} belongs to {whom} than this token's"));
                }
            }
        }
        self.used.insert(sid.clone());
        self.used.extend(ev.parent_session_id.clone());
        self.used.extend(ev.colony_id.clone());
        None
    }

    /// Whether a binding is to be applied.
    pub fn allows_binding(&self, b: &SessionBinding) -> bool {
        !self.refused.contains_key(&b.session_id)
    }

    /// Sessions this transaction inserted that nothing allowed names (a refused event's own new session,
    /// or a parent only a refused event named): they are removed again before commit.
    pub fn unused_inserted(&self, owners: &HashMap<String, Owner>) -> Vec<String> {
        owners
            .iter()
            .filter(|(id, o)| o.inserted && !self.used.contains(*id))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Deletes sessions this transaction inserted and then found unused (see [`Verdict::unused_inserted`]).
pub async fn drop_unused(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    ids: &[String],
) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM sessions WHERE tenant_id = $1 AND session_id = ANY($2)")
        .bind(tenant_id)
        .bind(ids)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
