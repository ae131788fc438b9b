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
use sqlx::{PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::intake::ReadyEvent;
use crate::rollups::{ColonyMove, RollupKey, Usage, COLUMNS, SUM_COLUMNS};

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

/// The session a `colony.created` event names as the colony's (a forked run, [`forked_run_named`], else
/// the event's own session), and the session that made it when that is another.
fn run_of(e: &apiary_schema::CanonicalEvent) -> Option<(String, Option<String>)> {
    let own = e.session_id.clone()?;
    Some(match forked_run_named(e) {
        Some(run) => (run.to_string(), Some(own)),
        None => (own, None),
    })
}

/// The session a `colony.created` event names as a colony run when that is not the event's own session
/// (a forked run): whether its usage counts under the run's colony depends on this event
/// (`usage_rollups_colony_daily`'s `fork_session_id`), so a batch carrying the event claims that session
/// like its own ([`super::owners::wanted`]) and is never grouped with a batch naming it
/// (`crate::group_commit`).
pub fn forked_run_named(e: &apiary_schema::CanonicalEvent) -> Option<&str> {
    if e.kind != EventKind::ColonyCreated {
        return None;
    }
    let own = e.session_id.as_deref()?;
    e.data_str("forked_session_id")
        .or_else(|| e.data_str("queen_session_id"))
        .filter(|s| !s.is_empty() && *s != own)
}

/// Records the runs and forks the batch's new `colony.created` events name (see the module notes).
/// `owner` gives each session's user. Returns the sessions that became forked runs or stopped being
/// one (their run's parent came or went with an earlier event), with their usage already stored under
/// the colony key they had before: [`moves`].
pub async fn record(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    events: &[&ReadyEvent],
    owner: &HashMap<String, (String, String)>,
) -> Result<Vec<ColonyMove>, sqlx::Error> {
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
    let flips = match runs.is_empty() {
        true => vec![],
        false => upsert_runs(tx, tenant_id, &runs).await?,
    };
    if !forks.is_empty() {
        upsert_forks(tx, tenant_id, &forks).await?;
    }
    moves(tx, tenant_id, &flips).await
}

fn keep_earliest(map: &mut BTreeMap<String, Fact>, session: &str, fact: &Fact) {
    match map.get(session) {
        Some(have) if !fact.earlier(have) => {}
        _ => {
            map.insert(session.to_string(), fact.clone());
        }
    }
}

/// Upserts the runs (the earliest event of each wins) and returns the sessions whose forked state (a
/// run with a parent) the upsert changed, with the state they now have. The runs' sessions are claimed
/// by this transaction (`super::owners::wanted`), so no other transaction changes them in between.
async fn upsert_runs(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    runs: &BTreeMap<String, Fact>,
) -> Result<Vec<(String, bool)>, sqlx::Error> {
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
    // The runs' forked state before the upsert, read by a statement of its own (on Citus a CTE's read
    // beside the upsert's would see the upsert's rows).
    let before: Vec<(String, bool)> = sqlx::query_as(
        "SELECT session_id, parent_session_id IS NOT NULL FROM colony_runs
         WHERE tenant_id = $1 AND session_id = ANY($2)",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .fetch_all(&mut **tx)
    .await?;
    let before: HashMap<String, bool> = before.into_iter().collect();
    let after: Vec<(String, bool)> = sqlx::query_as(
        "INSERT INTO colony_runs AS c (tenant_id, session_id, colony_key, parent_session_id, user_id,
            created_at, event_id, colony_name)
         SELECT $1, u.s, u.k, u.p, u.u, u.t, u.e, u.n
         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::uuid[],
            $8::text[]) AS u(s, k, p, u, t, e, n)
         ON CONFLICT (tenant_id, session_id) DO UPDATE SET
            colony_key = EXCLUDED.colony_key, parent_session_id = EXCLUDED.parent_session_id,
            user_id = EXCLUDED.user_id, created_at = EXCLUDED.created_at, event_id = EXCLUDED.event_id,
            colony_name = EXCLUDED.colony_name
         WHERE (EXCLUDED.created_at, EXCLUDED.event_id) < (c.created_at, c.event_id)
         RETURNING session_id, parent_session_id IS NOT NULL",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .bind(&keys)
    .bind(&parents)
    .bind(&users)
    .bind(&ats)
    .bind(&ids)
    .bind(&names)
    .fetch_all(&mut **tx)
    .await?;
    let mut flips: Vec<(String, bool)> = after
        .into_iter()
        .filter(|(s, forked)| *forked != before.get(s).copied().unwrap_or(false))
        .collect();
    flips.sort();
    Ok(flips)
}

/// The usage stored for each session of `flips` before its forked state changed, per UTC day, colony
/// id, model and runtime, as [`ColonyMove`]s. Read from `usage_rollups_hourly` between the hour
/// of the session's first event and the later of its last event and its stall deadline: the span every
/// rollup row of a session lies in (its events' quarters; its active time, which runs from one of its
/// transitions to the next or to that deadline, `super::active`). Read before this batch's own rows are
/// written, so only what earlier transactions stored moves.
async fn moves(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    flips: &[(String, bool)],
) -> Result<Vec<ColonyMove>, sqlx::Error> {
    if flips.is_empty() {
        return Ok(vec![]);
    }
    let sessions: Vec<&str> = flips.iter().map(|(s, _)| s.as_str()).collect();
    let forked: HashMap<&str, bool> = flips.iter().map(|(s, f)| (s.as_str(), *f)).collect();
    let sums: Vec<String> = SUM_COLUMNS
        .iter()
        .map(|c| format!("sum(h.{c})::int8"))
        .collect();
    let rows = sqlx::query(&format!(
        "SELECT date_bin('1 day', h.bucket, '2000-01-01 00:00:00+00'), h.colony_id, h.session_id, h.model,
            h.runtime, {}
         FROM sessions s JOIN usage_rollups_hourly h ON h.tenant_id = s.tenant_id
            AND h.bucket >= date_bin('1 hour', s.first_seen_at, '2000-01-01 00:00:00+00')
            AND h.bucket <= GREATEST(s.last_event_at, s.stall_due_at)
            AND h.session_id = s.session_id
         WHERE s.tenant_id = $1 AND s.session_id = ANY($2)
         GROUP BY 1, 2, 3, 4, 5
         ORDER BY 1, 2, 3, 4, 5",
        sums.join(", ")
    ))
    .bind(tenant_id)
    .bind(&sessions)
    .fetch_all(&mut **tx)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let session_id: String = r.try_get(2)?;
        let mut columns = [0i128; COLUMNS];
        for (i, c) in columns.iter_mut().enumerate() {
            *c = i128::from(r.try_get::<i64, _>(5 + i)?);
        }
        // Stored under '' while it was not a forked run, under its own session while it was.
        let now = forked.get(session_id.as_str()).copied().unwrap_or(false);
        let stored_fork = if now {
            String::new()
        } else {
            session_id.clone()
        };
        out.push(ColonyMove {
            key: RollupKey {
                bucket: r.try_get(0)?,
                user_id: String::new(),
                device_id: String::new(),
                colony_id: r.try_get(1)?,
                session_id,
                model: r.try_get(3)?,
                runtime: r.try_get(4)?,
            },
            stored_fork,
            usage: Usage::from_columns(columns),
        });
    }
    Ok(out)
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

    #[test]
    fn the_run_a_batch_claims_is_the_forked_or_named_session_when_it_is_not_the_event_s_own() {
        let forked = event(serde_json::json!({"forked_session_id": "c1", "queen_session_id": "x"}));
        assert_eq!(forked_run_named(&forked), Some("c1"));
        let named = event(serde_json::json!({"queen_session_id": "c2"}));
        assert_eq!(forked_run_named(&named), Some("c2"));
        for own in [
            serde_json::json!({"queen_session_id": "queen1"}),
            serde_json::json!({"forked_session_id": ""}),
            serde_json::json!({}),
        ] {
            assert_eq!(forked_run_named(&event(own.clone())), None, "{own}");
        }
        let mut turn = forked.clone();
        turn.kind = EventKind::LlmTurn;
        assert_eq!(forked_run_named(&turn), None);
    }
}
