//! Colonies: the tenant's colony secret, the colony runs and session forks a batch's `colony.created`
//! events name, and the admins' display labels.
//!
//! - The **secret** (`colony_secrets`) is created on first use by `INSERT … ON CONFLICT DO NOTHING` and
//!   read back, so concurrent first uses on any replica agree on one secret, which never changes.
//! - **Runs** (`colony_runs`) and **forks** (`session_forks`) are written in the batch's transaction from
//!   its *new* events only, sorted by session id (after the session rows, before the events: the global
//!   lock order of [`super::batch`]). Of two events naming the same session, the earliest by (effective
//!   time, event id) wins whatever the arrival order, so a replay or a late event changes nothing.
//! - A `colony.created` event's colony key is recorded only when it has the shape the device derives
//!   ([`apiary_schema::colony::is_colony_key`]); anything else names no colony. Its `colony_name` is
//!   recorded with the run: it reaches this point only for a tenant whose choice is `names` (the intake
//!   drops it for every other, `crate::intake`).

use std::collections::{BTreeMap, HashMap};

use apiary_schema::colony::{is_colony_key, KEY_FIELD, NAME_FIELD};
use apiary_schema::EventKind;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::intake::ReadyEvent;

/// The tenant's colony secret as 64 hex digits, created on first use.
pub async fn secret_of(pool: &PgPool, tenant_id: Uuid) -> Result<String, sqlx::Error> {
    use rand::RngCore;
    let mut fresh = [0u8; apiary_schema::colony::SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut fresh);
    sqlx::query(
        "INSERT INTO colony_secrets (tenant_id, secret) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(tenant_id)
    .bind(&fresh[..])
    .execute(pool)
    .await?;
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT secret FROM colony_secrets WHERE tenant_id = $1")
            .bind(tenant_id)
            .fetch_one(pool)
            .await?;
    Ok(hex::encode(stored))
}

/// One fact a `colony.created` event states: `session` is a run of colony `key` (and/or a fork of
/// `parent`).
#[derive(Debug, Clone, PartialEq)]
struct Fact {
    at: DateTime<Utc>,
    event_id: Uuid,
    key: Option<String>,
    /// The colony's name, when the event carried it (a `names` tenant's consenting device).
    name: Option<String>,
    parent: Option<String>,
    user: String,
}

impl Fact {
    fn earlier(&self, other: &Fact) -> bool {
        (self.at, self.event_id) < (other.at, other.event_id)
    }
}

/// The session a `colony.created` event names as the colony's, and the session that made it.
fn run_of(e: &apiary_schema::CanonicalEvent) -> Option<(String, Option<String>)> {
    let own = e.session_id.clone()?;
    let run = e
        .data_str("forked_session_id")
        .or_else(|| e.data_str("queen_session_id"))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| own.clone());
    let parent = (run != own).then_some(own);
    Some((run, parent))
}

/// Records the runs and forks the batch's new `colony.created` events name (see the module notes).
/// `owner` gives each session's user.
pub async fn record(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    events: &[&ReadyEvent],
    owner: &HashMap<String, (String, String)>,
) -> Result<(), sqlx::Error> {
    let mut runs: BTreeMap<String, Fact> = BTreeMap::new();
    let mut forks: BTreeMap<String, Fact> = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.event.kind == EventKind::ColonyCreated)
    {
        let Some((run, parent)) = run_of(&e.event) else {
            continue;
        };
        let key = e
            .event
            .data_str(KEY_FIELD)
            .filter(|k| is_colony_key(k))
            .map(str::to_string);
        let user = e
            .event
            .session_id
            .as_ref()
            .and_then(|s| owner.get(s))
            .map(|(u, _)| u.clone())
            .unwrap_or_default();
        let name = e
            .event
            .data_str(NAME_FIELD)
            .filter(|n| !n.is_empty() && n.chars().count() <= 128)
            .map(str::to_string);
        let fact = Fact {
            at: e.effective_at,
            event_id: e.event.event_id,
            key,
            name,
            parent,
            user,
        };
        if fact.parent.is_some() && e.event.data_str("forked_session_id").is_some() {
            keep_earliest(&mut forks, &run, &fact);
        }
        if fact.key.is_some() {
            keep_earliest(&mut runs, &run, &fact);
        }
    }
    if !runs.is_empty() {
        upsert_runs(tx, tenant_id, &runs).await?;
    }
    if !forks.is_empty() {
        upsert_forks(tx, tenant_id, &forks).await?;
    }
    Ok(())
}

fn keep_earliest(map: &mut BTreeMap<String, Fact>, session: &str, fact: &Fact) {
    match map.get(session) {
        Some(have) if !fact.earlier(have) => {}
        _ => {
            map.insert(session.to_string(), fact.clone());
        }
    }
}

async fn upsert_runs(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    runs: &BTreeMap<String, Fact>,
) -> Result<(), sqlx::Error> {
    let sessions: Vec<&str> = runs.keys().map(String::as_str).collect();
    let keys: Vec<&str> = runs
        .values()
        .map(|f| f.key.as_deref().unwrap_or(""))
        .collect();
    let parents: Vec<Option<&str>> = runs.values().map(|f| f.parent.as_deref()).collect();
    let users: Vec<&str> = runs.values().map(|f| f.user.as_str()).collect();
    let ats: Vec<DateTime<Utc>> = runs.values().map(|f| f.at).collect();
    let ids: Vec<Uuid> = runs.values().map(|f| f.event_id).collect();
    let names: Vec<Option<&str>> = runs.values().map(|f| f.name.as_deref()).collect();
    sqlx::query(
        "INSERT INTO colony_runs AS c (tenant_id, session_id, colony_key, parent_session_id, user_id,
            created_at, event_id, colony_name)
         SELECT $1, u.s, u.k, u.p, u.u, u.t, u.e, u.n
         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::uuid[],
            $8::text[]) AS u(s, k, p, u, t, e, n)
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET
            colony_key = EXCLUDED.colony_key, parent_session_id = EXCLUDED.parent_session_id,
            user_id = EXCLUDED.user_id, created_at = EXCLUDED.created_at, event_id = EXCLUDED.event_id,
            colony_name = EXCLUDED.colony_name
         WHERE (EXCLUDED.created_at, EXCLUDED.event_id) < (c.created_at, c.event_id)",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .bind(&keys)
    .bind(&parents)
    .bind(&users)
    .bind(&ats)
    .bind(&ids)
    .bind(&names)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_forks(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    forks: &BTreeMap<String, Fact>,
) -> Result<(), sqlx::Error> {
    let sessions: Vec<&str> = forks.keys().map(String::as_str).collect();
    let parents: Vec<&str> = forks
        .values()
        .map(|f| f.parent.as_deref().unwrap_or(""))
        .collect();
    let ats: Vec<DateTime<Utc>> = forks.values().map(|f| f.at).collect();
    let ids: Vec<Uuid> = forks.values().map(|f| f.event_id).collect();
    sqlx::query(
        "INSERT INTO session_forks AS f (tenant_id, session_id, parent_session_id, forked_at, event_id)
         SELECT $1, u.s, u.p, u.t, u.e
         FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::uuid[]) AS u(s, p, t, e)
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET
            parent_session_id = EXCLUDED.parent_session_id, forked_at = EXCLUDED.forked_at,
            event_id = EXCLUDED.event_id
         WHERE (EXCLUDED.forked_at, EXCLUDED.event_id) < (f.forked_at, f.event_id)",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .bind(&parents)
    .bind(&ats)
    .bind(&ids)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Sets (or replaces) a colony's display label.
pub async fn set_label(
    pool: &PgPool,
    tenant_id: Uuid,
    key: &str,
    label: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO colony_labels (tenant_id, colony_key, label, updated_at) VALUES ($1, $2, $3, now())
         ON CONFLICT (tenant_id, colony_key) DO UPDATE SET label = EXCLUDED.label,
             updated_at = EXCLUDED.updated_at",
    )
    .bind(tenant_id)
    .bind(key)
    .bind(label)
    .execute(pool)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: serde_json::Value) -> apiary_schema::CanonicalEvent {
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "event_id": "6a1f5c2e-9b3d-4e7a-8c10-2f4bd5e6a701",
            "type": "colony.created", "occurred_at": "2026-11-03T10:00:00Z", "runtime": "hive",
            "session_id": "queen1", "agent_role": "queen", "native_type": "colony_created", "data": data
        }))
        .unwrap()
    }

    #[test]
    fn a_colony_run_is_the_forked_session_else_the_named_queen_session_else_the_event_s_own() {
        let forked = event(serde_json::json!({"forked_session_id": "c1", "queen_session_id": "x"}));
        assert_eq!(run_of(&forked), Some(("c1".into(), Some("queen1".into()))));
        let named = event(serde_json::json!({"queen_session_id": "c2"}));
        assert_eq!(run_of(&named), Some(("c2".into(), Some("queen1".into()))));
        let own = event(serde_json::json!({"queen_session_id": "queen1"}));
        assert_eq!(run_of(&own), Some(("queen1".into(), None)));
    }
}
