//! Session identity and state facts, folded from a batch's new events and upserted in session-id order.
//!
//! Identity (user, device) is bound when a session is first stored and never changes afterwards: the
//! binding sent with the batch, else the token's user and the sending device (claimed by
//! [`super::owners::claim`] before this upsert, which then only adds facts). Parent, colony, role and
//! worker fill in when first known. Each state fact (phase, input state, lifecycle status, last health
//! signal) carries the event time it came from; an upsert keeps whichever is newer, so events arriving
//! out of order never roll a session back.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::{CanonicalEvent, EventKind, SessionBinding};
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

type Fact = Option<(String, DateTime<Utc>)>;

/// A session's tracker after this batch ([`super::health::prepare`]), ready for the session upsert.
#[derive(Debug, Clone)]
pub struct Folded {
    /// The tracker as JSON text (`sessions.health`).
    pub health: String,
    /// `sessions.stall_due_at`.
    pub stall_due_at: Option<DateTime<Utc>>,
    /// `sessions.ended`: `completed` or `failed` while the tracker's current status is one of them.
    pub ended: Option<&'static str>,
}

/// What one batch says about one session.
#[derive(Debug, Clone)]
pub struct SessionUpdate {
    pub user_id: String,
    pub device_id: String,
    pub parent_session_id: Option<String>,
    pub colony_id: Option<String>,
    pub agent_role: Option<String>,
    pub worker_id: Option<String>,
    pub runtime: Option<String>,
    pub first_seen_at: DateTime<Utc>,
    pub last_event_at: Option<DateTime<Utc>>,
    pub last_progress_at: Option<DateTime<Utc>>,
    pub phase: Fact,
    pub input_state: Fact,
    pub status: Fact,
    pub health: Fact,
    pub events: i64,
    /// The health tracker after this batch ([`super::health::prepare`]); None leaves the stored one.
    pub tracker: Option<Folded>,
    /// The session's work after this batch as JSON ([`super::work::prepare`]); None leaves the stored one.
    pub work: Option<String>,
}

impl SessionUpdate {
    /// A session known only from its binding (or defaults).
    pub fn new(user_id: String, device_id: String, first_seen_at: DateTime<Utc>) -> SessionUpdate {
        SessionUpdate {
            user_id,
            device_id,
            parent_session_id: None,
            colony_id: None,
            agent_role: None,
            worker_id: None,
            runtime: None,
            first_seen_at,
            last_event_at: None,
            last_progress_at: None,
            phase: None,
            input_state: None,
            status: None,
            health: None,
            events: 0,
            tracker: None,
            work: None,
        }
    }

    /// Applies a binding's parent.
    pub fn bind(&mut self, b: &SessionBinding) {
        if self.parent_session_id.is_none() {
            self.parent_session_id = b.parent_session_id.clone();
        }
        self.first_seen_at = self.first_seen_at.min(b.first_seen_at);
    }

    /// Folds one new event (at its effective time) in.
    pub fn fold(&mut self, e: &CanonicalEvent, at: DateTime<Utc>) {
        self.events += 1;
        self.first_seen_at = self.first_seen_at.min(at);
        self.last_event_at = self.last_event_at.max(Some(at));
        fill(&mut self.parent_session_id, &e.parent_session_id);
        fill(&mut self.colony_id, &e.colony_id);
        fill(&mut self.worker_id, &e.worker_id);
        if self.agent_role.is_none() {
            self.agent_role = e.agent_role.map(|r| format!("{r:?}").to_lowercase());
        }
        if self.runtime.is_none() {
            self.runtime = Some(e.runtime.clone());
        }
        if is_progress(e.kind) {
            self.last_progress_at = self.last_progress_at.max(Some(at));
        }
        let (slot, value) = match e.kind {
            EventKind::SessionPhase => (&mut self.phase, e.data_str("phase").map(str::to_string)),
            EventKind::SessionInput => (
                &mut self.input_state,
                e.data_str("state").map(str::to_string),
            ),
            EventKind::HealthSignal => (&mut self.health, e.data_str("signal").map(str::to_string)),
            EventKind::Execution | EventKind::WorkerFinished => (&mut self.status, lifecycle_of(e)),
            _ => return,
        };
        if let Some(v) = value {
            if slot.as_ref().is_none_or(|(_, t)| at >= *t) {
                *slot = Some((v, at));
            }
        }
    }
}

fn fill(slot: &mut Option<String>, v: &Option<String>) {
    if slot.is_none() {
        slot.clone_from(v);
    }
}

/// Kinds that show the session is working.
fn is_progress(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::LlmTurn
            | EventKind::ToolCall
            | EventKind::Execution
            | EventKind::TaskChanged
            | EventKind::ColonyCreated
            | EventKind::WorkerFinished
    )
}

/// The lifecycle an execution or worker-finished event states (running | paused | completed | failed).
pub fn lifecycle_of(e: &CanonicalEvent) -> Option<String> {
    let s = match e.kind {
        EventKind::Execution => {
            if e.data_str("scope").is_some_and(|s| s != "execution") {
                return None;
            }
            match e.data_str("status")? {
                "started" | "resumed" | "resurrected" => "running",
                "paused" => "paused",
                "completed" => "completed",
                "failed" => "failed",
                _ => return None,
            }
        }
        EventKind::WorkerFinished => {
            let status = e.data_str("status").unwrap_or("");
            let failed_word = ["fail", "error", "cancel", "abort", "timeout", "killed"]
                .iter()
                .any(|w| status.contains(w));
            let success = e.data.get("success").and_then(serde_json::Value::as_bool);
            if failed_word || success == Some(false) {
                "failed"
            } else {
                "completed"
            }
        }
        _ => return None,
    };
    Some(s.to_string())
}

/// One tenant's session updates for [`upsert`]: its id, its batches' latest arrival, the updates
/// (sorted by session id).
pub type TenantUpdates<'u> = (Uuid, DateTime<Utc>, &'u BTreeMap<String, SessionUpdate>);

/// A session's stored identity: (user, device).
pub type Identity = HashMap<String, (String, String)>;

/// Upserts the sessions of all `tenants` (in tenant order) in one statement, rows in (tenant, session id)
/// order; returns each one's stored identity (user, device), per tenant.
pub async fn upsert(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[TenantUpdates<'_>],
) -> Result<HashMap<Uuid, Identity>, sqlx::Error> {
    let all = || tenants.iter().flat_map(|(_, _, u)| u.values());
    if all().next().is_none() {
        return Ok(HashMap::new());
    }
    let col = |f: fn(&SessionUpdate) -> Option<String>| all().map(f).collect::<Vec<_>>();
    let at = |f: fn(&SessionUpdate) -> Option<DateTime<Utc>>| all().map(f).collect::<Vec<_>>();
    let fact = |f: fn(&SessionUpdate) -> &Fact| {
        let v: Vec<Option<String>> = all().map(|u| f(u).as_ref().map(|x| x.0.clone())).collect();
        let t: Vec<Option<DateTime<Utc>>> = all().map(|u| f(u).as_ref().map(|x| x.1)).collect();
        (v, t)
    };
    let (mut ids, mut received) = (vec![], vec![]);
    for (tenant, received_at, u) in tenants {
        ids.extend(std::iter::repeat_n(*tenant, u.len()));
        received.extend(std::iter::repeat_n(*received_at, u.len()));
    }
    let (phase, phase_at) = fact(|u| &u.phase);
    let (input, input_at) = fact(|u| &u.input_state);
    let (status, status_at) = fact(|u| &u.status);
    let (health, health_at) = fact(|u| &u.health);
    let rows: Vec<(Uuid, String, String, String)> = sqlx::query_as(UPSERT_SQL)
        .bind(&ids)
        .bind(&received)
        .bind(
            tenants
                .iter()
                .flat_map(|(_, _, u)| u.keys().map(String::as_str))
                .collect::<Vec<_>>(),
        )
        .bind(col(|u| Some(u.user_id.clone())))
        .bind(col(|u| Some(u.device_id.clone())))
        .bind(col(|u| u.parent_session_id.clone()))
        .bind(col(|u| u.colony_id.clone()))
        .bind(col(|u| u.agent_role.clone()))
        .bind(col(|u| u.worker_id.clone()))
        .bind(col(|u| u.runtime.clone()))
        .bind(at(|u| Some(u.first_seen_at)))
        .bind(at(|u| u.last_event_at))
        .bind(at(|u| u.last_progress_at))
        .bind(phase)
        .bind(phase_at)
        .bind(input)
        .bind(input_at)
        .bind(status)
        .bind(status_at)
        .bind(health)
        .bind(health_at)
        .bind(all().map(|u| u.events).collect::<Vec<_>>())
        .bind(col(|u| u.tracker.as_ref().map(|t| t.health.clone())))
        .bind(at(|u| u.tracker.as_ref().and_then(|t| t.stall_due_at)))
        .bind(col(|u| u.work.clone()))
        .bind(
            all()
                .map(|u| u.tracker.as_ref().and_then(|t| t.ended))
                .collect::<Vec<_>>(),
        )
        .fetch_all(&mut **tx)
        .await?;
    let mut out: HashMap<Uuid, Identity> = HashMap::new();
    for (t, s, u, d) in rows {
        out.entry(t).or_default().insert(s, (u, d));
    }
    Ok(out)
}

/// Newer fact wins (`GREATEST` ignores NULLs); identity is kept from the first insert; the health
/// tracker (with its stall deadline and end) and the work are replaced when the batch folded them. A
/// session that had no events before this batch gets an empty work (`{}`), so NULL means "stored before
/// `sessions.work`, fold it from its events" ([`super::work`]).
const UPSERT_SQL: &str = "
INSERT INTO sessions AS s (tenant_id, last_received_at, session_id, user_id, device_id, parent_session_id,
    colony_id, agent_role, worker_id, runtime, first_seen_at, last_event_at, last_progress_at, phase, phase_at,
    input_state, input_at, status, status_at, health_signal, health_at, events, health, stall_due_at, work, ended)
SELECT u.tenant, u.received, u.id, u.user_id, u.device_id, u.parent, u.colony, u.role, u.worker, u.runtime, u.first_seen,
    u.last_event, u.last_progress, u.phase, u.phase_at, u.input, u.input_at, u.status, u.status_at, u.signal,
    u.signal_at, u.events, u.health::jsonb, u.due, u.work::jsonb, u.ended
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
    $9::text[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[], $14::text[],
    $15::timestamptz[], $16::text[], $17::timestamptz[], $18::text[], $19::timestamptz[], $20::text[],
    $21::timestamptz[], $22::int8[], $23::text[], $24::timestamptz[], $25::text[], $26::text[]) AS u(tenant, received,
    id, user_id, device_id, parent, colony, role, worker, runtime, first_seen, last_event, last_progress,
    phase, phase_at, input, input_at, status, status_at, signal, signal_at, events, health, due, work, ended)
ON CONFLICT (tenant_id, session_id) DO UPDATE SET
    parent_session_id = COALESCE(s.parent_session_id, EXCLUDED.parent_session_id),
    colony_id = COALESCE(s.colony_id, EXCLUDED.colony_id),
    agent_role = COALESCE(s.agent_role, EXCLUDED.agent_role),
    worker_id = COALESCE(s.worker_id, EXCLUDED.worker_id),
    runtime = COALESCE(s.runtime, EXCLUDED.runtime),
    first_seen_at = LEAST(s.first_seen_at, EXCLUDED.first_seen_at),
    last_event_at = GREATEST(s.last_event_at, EXCLUDED.last_event_at),
    last_received_at = GREATEST(s.last_received_at, EXCLUDED.last_received_at),
    last_progress_at = GREATEST(s.last_progress_at, EXCLUDED.last_progress_at),
    phase = CASE WHEN EXCLUDED.phase_at >= s.phase_at OR s.phase_at IS NULL
                 THEN COALESCE(EXCLUDED.phase, s.phase) ELSE s.phase END,
    phase_at = GREATEST(s.phase_at, EXCLUDED.phase_at),
    input_state = CASE WHEN EXCLUDED.input_at >= s.input_at OR s.input_at IS NULL
                 THEN COALESCE(EXCLUDED.input_state, s.input_state) ELSE s.input_state END,
    input_at = GREATEST(s.input_at, EXCLUDED.input_at),
    status = CASE WHEN EXCLUDED.status_at >= s.status_at OR s.status_at IS NULL
                 THEN COALESCE(EXCLUDED.status, s.status) ELSE s.status END,
    status_at = GREATEST(s.status_at, EXCLUDED.status_at),
    health_signal = CASE WHEN EXCLUDED.health_at >= s.health_at OR s.health_at IS NULL
                 THEN COALESCE(EXCLUDED.health_signal, s.health_signal) ELSE s.health_signal END,
    health_at = GREATEST(s.health_at, EXCLUDED.health_at),
    events = s.events + EXCLUDED.events,
    health = COALESCE(EXCLUDED.health, s.health),
    stall_due_at = CASE WHEN EXCLUDED.health IS NULL THEN s.stall_due_at ELSE EXCLUDED.stall_due_at END,
    ended = CASE WHEN EXCLUDED.health IS NULL THEN s.ended ELSE EXCLUDED.ended END,
    work = COALESCE(EXCLUDED.work, s.work, CASE WHEN s.events = 0 THEN '{}'::jsonb END)
RETURNING tenant_id, session_id, user_id, device_id";
