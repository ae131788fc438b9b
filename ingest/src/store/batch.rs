//! Stores a checked batch in ONE transaction, in a fixed table order with sorted keys in each step:
//!
//! 1. `sessions` (sorted by session_id): every session the batch names is claimed — inserted with its
//!    owner when new, locked otherwise — and its owner decides which events the sender may write
//!    ([`owners`]: an event into another user's or device's session, or under another user's parent,
//!    is rejected with a reason).
//! 2. `event_keys` (sorted by event_id): `INSERT … ON CONFLICT DO NOTHING RETURNING event_id` for the
//!    allowed events — the returned ids are the new events; everything else is a duplicate and goes no
//!    further.
//! 3. `sessions` again (the rows locked in step 1): state facts from the new events and the allowed
//!    bindings, and each session's health tracker with the new events folded in, in event-time order;
//!    then `status_transitions` (by session id): the transitions they change ([`super::health`]). The
//!    same upsert writes each session's work (tasks, triggers, tool call in flight; [`super::work`]).
//!    Then `colony_runs` and `session_forks` (by session id): the colony runs and forks the new
//!    `colony.created` events name ([`super::colonies`]).
//! 4. `events`: the new events, with the identity the session row holds and each LLM turn's estimated
//!    cost (`COPY`, see [`EventRows`]); the tenant's prices are read first (`tenant_prices`, only when
//!    the batch holds a turn with a model), and the estimates go into the rollups too
//!    ([`rollups::estimate_of`], [`Usage::with_estimate`]).
//! 5. `usage_rollups` (sorted by key; then `usage_rollups_hourly`): the new *runtime* events
//!    pre-aggregated per rollup key, plus the active time the sessions' new histories add or take away
//!    ([`super::active`]); then `tool_rollups` (sorted by key): the completed tool calls per tool name
//!    ([`crate::tool_rollups`]).
//! 6. `devices` (sorted by device_id): liveness, the latest heartbeat and the reported drops.
//! 7. the live stream ([`super::stream`]): the transitions, the sessions' new usage totals and the
//!    device's liveness, in `stream_sessions` (sorted by session_id) then `stream_devices` order.
//!
//! Device-level events (`EventKind::is_device_level`: `agent.heartbeat`, `outbox.dropped`) are stored in
//! `events` (so they dedup like any other) but never reach the usage rollups: usage counts what the agent
//! runtimes did, not the agent's own bookkeeping. They update `devices` only: a heartbeat its liveness and
//! backlog, an `outbox.dropped` its `dropped_events` counter (summed over new events only, so exact).
//!
//! Rollup rows are bigints: events that would push a row past that are rejected one by one
//! ([`headroom`]); finding them may take another attempt of the whole transaction (see [`write`]).
//!
//! Every transaction takes its row locks in that same global order, so concurrent batches (two replicas
//! receiving the same batch at the same moment included) wait for each other and never deadlock; the
//! loser of a race on an event key sees the winner's commit and counts the event as a duplicate, and
//! the loser of a race to create a session sees the winner's owner.

use std::collections::{BTreeMap, HashSet};

use apiary_schema::device::{DropReport, Heartbeat};
use apiary_schema::{BatchResponse, EventKind, Rejection};
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::headroom::{self, Bases, Fit};
pub use super::owners::Sender;
use super::owners::{self, Verdict};
use super::sessions::{self, SessionUpdate};
use super::Store;
use crate::error::ApiError;
use crate::intake::{CheckedBatch, ReadyEvent};
use crate::rollups::{self, bucket_of, RollupKey, Usage};
use crate::tool_rollups::ToolRows;

/// Attempts of one batch's transaction before giving up with a retryable 503 (overflowing rows found
/// on the second, a concurrent batch growing the same rows meanwhile may take more).
const ATTEMPTS: usize = 4;

/// Why an attempt of [`write_once`] did not commit.
enum Retry {
    /// These events do not fit their rollup rows: reject them, try again.
    Overflow(Vec<Uuid>),
    /// A row overflowed in the database: read these rows' totals, try again.
    Stale(Vec<RollupKey>),
    Failed(ApiError),
}

impl From<ApiError> for Retry {
    fn from(e: ApiError) -> Retry {
        Retry::Failed(e)
    }
}

impl From<sqlx::Error> for Retry {
    fn from(e: sqlx::Error) -> Retry {
        Retry::Failed(e.into())
    }
}

/// Stores a batch; returns the verdicts. Nothing is stored when it fails.
pub async fn write(
    store: &Store,
    sender: &Sender,
    mut batch: CheckedBatch,
) -> Result<BatchResponse, ApiError> {
    let mut bases = Bases::default();
    for _ in 0..ATTEMPTS {
        match write_once(store, sender, &batch, &bases).await {
            Ok(r) => return Ok(r),
            Err(Retry::Overflow(ids)) => {
                let ids: HashSet<Uuid> = ids.into_iter().collect();
                batch.events.retain(|e| !ids.contains(&e.event.event_id));
                batch
                    .rejected
                    .extend(ids.into_iter().map(|event_id| Rejection {
                        event_id,
                        reason: headroom::REASON.into(),
                    }));
            }
            Err(Retry::Stale(keys)) => {
                bases = headroom::fetch(&store.pool, sender.tenant_id, &keys).await?;
            }
            Err(Retry::Failed(e)) => return Err(missing_partition(store, e)),
        }
    }
    Err(ApiError::Unavailable(anyhow::anyhow!(
        "usage rows kept changing under the batch; retry"
    )))
}

/// 23514 on insert into a partitioned table: no partition for the row (dropped by retention on another
/// replica, or a stale cache). Forget the cache; the client's retry re-creates it.
fn missing_partition(store: &Store, e: ApiError) -> ApiError {
    if let ApiError::Internal(inner) = &e {
        let missing_partition = inner
            .downcast_ref::<sqlx::Error>()
            .and_then(|s| s.as_database_error())
            .is_some_and(|d| d.code().as_deref() == Some("23514"));
        if missing_partition {
            store.forget_partitions();
            return ApiError::Unavailable(anyhow::anyhow!("event partition missing; retry"));
        }
    }
    e
}

async fn write_once(
    store: &Store,
    sender: &Sender,
    batch: &CheckedBatch,
    bases: &Bases,
) -> Result<BatchResponse, Retry> {
    let CheckedBatch {
        received_at,
        device_id,
        agent_version,
        bindings,
        events,
        rejected,
    } = batch;
    let (received_at, device_id, agent_version) =
        (*received_at, device_id.clone(), agent_version.clone());
    let mut rejected = rejected.clone();
    let total = events.len();
    let mut seen = HashSet::with_capacity(total);
    let mut events: Vec<&ReadyEvent> = events
        .iter()
        .filter(|e| seen.insert(e.event.event_id))
        .collect();
    events.sort_by_key(|e| e.event.event_id);
    store
        .ensure_days(events.iter().map(|e| e.effective_at.date_naive()))
        .await?;

    let mut tx = store.pool.begin().await?;
    let default_device = device_id.clone().unwrap_or_default();
    let mut claims = owners::wanted(sender, &default_device, bindings, &events);
    if !sender.is_bound() {
        owners::inherit(&mut tx, sender.tenant_id, &mut claims).await?;
    }
    let owner_of = owners::claim(&mut tx, sender.tenant_id, received_at, &claims).await?;
    let mut verdict = Verdict::new(sender, &owner_of, bindings);
    events.retain(|e| match verdict.event(sender, &owner_of, e) {
        None => true,
        Some(reason) => {
            rejected.push(Rejection {
                event_id: e.event.event_id,
                reason,
            });
            false
        }
    });
    owners::drop_unused(
        &mut tx,
        sender.tenant_id,
        &verdict.unused_inserted(&owner_of),
    )
    .await?;
    let refused = seen.len() - events.len();

    let ids: Vec<Uuid> = events.iter().map(|e| e.event.event_id).collect();
    let times: Vec<DateTime<Utc>> = events.iter().map(|e| e.effective_at).collect();
    let new_ids: HashSet<Uuid> = sqlx::query_scalar(
        "INSERT INTO event_keys (tenant_id, event_id, effective_at) \
         SELECT $1, u.id, u.t FROM unnest($2::uuid[], $3::timestamptz[]) AS u(id, t) \
         ON CONFLICT DO NOTHING RETURNING event_id",
    )
    .bind(sender.tenant_id)
    .bind(&ids)
    .bind(&times)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    events.retain(|e| new_ids.contains(&e.event.event_id));

    let mut updates: BTreeMap<String, SessionUpdate> = BTreeMap::new();
    for b in bindings.iter().filter(|b| verdict.allows_binding(b)) {
        session_update(&mut updates, &owner_of, &b.session_id, b.first_seen_at).bind(b);
    }
    for e in &events {
        if let Some(sid) = &e.event.session_id {
            session_update(&mut updates, &owner_of, sid, e.effective_at)
                .fold(&e.event, e.effective_at);
        }
    }
    let health = super::health::prepare(
        &mut tx,
        sender.tenant_id,
        &store.status_rules,
        super::health::inputs(&events),
        &updates,
    )
    .await?;
    let active = health.active.clone();
    for (sid, f) in &health.sessions {
        if let Some(u) = updates.get_mut(sid) {
            u.tracker = Some(f.clone());
        }
    }
    for (sid, w) in super::work::prepare(&mut tx, sender.tenant_id, &events).await? {
        if let Some(u) = updates.get_mut(&sid) {
            u.work = Some(w);
        }
    }
    let identity = sessions::upsert(&mut tx, sender.tenant_id, received_at, &updates).await?;
    super::colonies::record(&mut tx, sender.tenant_id, &events, &identity).await?;
    let mut live = super::stream::BatchStream {
        transitions: health.streamed(),
        ..Default::default()
    };
    super::health::store_transitions(&mut tx, sender.tenant_id, health).await?;

    let default_user = sender.user_id.clone().unwrap_or_default();
    let priced = events.iter().any(|e| {
        e.event.kind == EventKind::LlmTurn
            && e.event.data_str("model").is_some_and(|m| !m.is_empty())
    });
    let tenant_prices = if priced {
        super::prices::tenant_entries(&mut tx, sender.tenant_id).await?
    } else {
        Vec::new()
    };
    let mut rows = EventRows::new(sender.tenant_id, received_at, events.len());
    let mut rollup = Fit::new(bases);
    let mut tools = ToolRows::default();
    for e in &events {
        let (user, device) = match &e.event.session_id {
            Some(s) => identity.get(s).cloned().unwrap_or_default(),
            None => (default_user.clone(), default_device.clone()),
        };
        let model = if e.event.kind == EventKind::LlmTurn {
            e.event.data_str("model").unwrap_or("").to_string()
        } else {
            String::new()
        };
        if e.event.kind.is_device_level() {
            rows.push(e, user, device, model, None);
            continue;
        }
        let estimate = rollups::estimate_of(&tenant_prices, &model, e.effective_at, &e.usage);
        let usage = e.usage.with_estimate(estimate);
        let key = RollupKey {
            bucket: bucket_of(e.effective_at),
            user_id: user.clone(),
            device_id: device.clone(),
            colony_id: e.event.colony_id.clone().unwrap_or_default(),
            session_id: e.event.session_id.clone().unwrap_or_default(),
            model: model.clone(),
            runtime: e.event.runtime.clone(),
        };
        tools.add(&key, &e.event);
        rollup.add(key, &usage, e.event.event_id);
        rows.push(e, user, device, model, estimate);
        if let Some(sid) = &e.event.session_id {
            live.usage.push(sid);
        }
    }
    let mut rollup = rollup.finish().map_err(Retry::Overflow)?;
    for sid in add_active(&mut rollup, &active) {
        live.usage.push(sid);
    }
    rows.insert(&mut tx).await?;
    match rollups::upsert(&mut tx, sender.tenant_id, &rollup).await {
        Err(e) if headroom::is_out_of_range(&e) => {
            return Err(Retry::Stale(rollup.into_keys().collect()))
        }
        r => r?,
    }
    tools.upsert(&mut tx, sender.tenant_id).await?;
    let live_device = device_id.clone().filter(|_| sender.live);
    let crashed = match (&device_id, latest_heartbeat(&events)) {
        (Some(device), Some(beat)) => {
            super::runtime::apply(
                &mut tx,
                sender.tenant_id,
                device,
                &beat.runtimes,
                &store.status_rules,
                received_at,
            )
            .await?
        }
        _ => Vec::new(),
    };
    upsert_device(
        &mut tx,
        sender,
        received_at,
        device_id,
        agent_version,
        &events,
    )
    .await?;
    live.usage.sort_unstable();
    live.usage.dedup();
    live.device = live_device.as_deref();
    let mut owners: BTreeMap<&str, &str> = identity
        .iter()
        .map(|(s, (u, _))| (s.as_str(), u.as_str()))
        .collect();
    for c in &crashed {
        owners.insert(c.status.session_id.as_str(), c.user_id.as_str());
    }
    live.transitions
        .extend(crashed.iter().map(|c| c.status.clone()));
    super::stream::write_batch(&mut tx, sender.tenant_id, &owners, &live).await?;
    tx.commit().await?;

    let accepted = events.len() as u64;
    Ok(BatchResponse {
        accepted,
        duplicates: (total - refused) as u64 - accepted,
        rejected,
        quota: None,
    })
}

/// Adds the active-time changes to the batch's 15-minute rollup rows (removed stretches negative, under
/// the key they were added with); drops rows the batch leaves unchanged. Returns the sessions whose usage
/// changed. A row's active time is at most its 15 minutes, so this cannot overflow it.
fn add_active<'a>(
    rollup: &mut BTreeMap<RollupKey, Usage>,
    changes: &'a [super::health::ActiveChange],
) -> Vec<&'a str> {
    let mut touched = BTreeMap::new();
    for c in changes {
        let signed = [(&c.old_key, &c.removed, -1i128), (&c.new_key, &c.added, 1)];
        for (key, stretches, sign) in signed {
            for (bucket, ms) in stretches.iter().flat_map(|s| super::active::pieces(*s)) {
                let (user_id, device_id, colony_id, runtime) = key.clone();
                let k = RollupKey {
                    bucket,
                    user_id,
                    device_id,
                    colony_id,
                    session_id: c.session.clone(),
                    model: String::new(),
                    runtime,
                };
                rollup.entry(k.clone()).or_default().active_ms += sign * i128::from(ms);
                touched.insert(k, c.session.as_str());
            }
        }
    }
    let mut sessions = vec![];
    for (k, sid) in touched {
        if rollup.get(&k).is_some_and(Usage::is_zero) {
            rollup.remove(&k);
        } else {
            sessions.push(sid);
        }
    }
    sessions
}

/// The facts update of a session this batch writes, created with the owner [`owners::claim`] returned.
fn session_update<'a>(
    updates: &'a mut BTreeMap<String, SessionUpdate>,
    owner_of: &std::collections::HashMap<String, owners::Owner>,
    sid: &str,
    at: DateTime<Utc>,
) -> &'a mut SessionUpdate {
    updates.entry(sid.to_string()).or_insert_with(|| {
        let (user, device) = owner_of
            .get(sid)
            .map(|o| (o.user_id.clone(), o.device_id.clone()))
            .unwrap_or_default();
        SessionUpdate::new(user, device, at)
    })
}

/// The new events as `COPY … FROM STDIN` text rows (tab-separated, `\N` for NULL, see [`copy_field`]).
///
/// COPY rather than `INSERT … SELECT FROM unnest(…)`: the events insert was the largest statement of a
/// batch (median 16.5 ms of ≈ 50 ms of database time for 900 new events, ingest benchmark); COPY skips
/// building and unnesting twenty arrays. It runs inside the batch's transaction like the other steps.
struct EventRows {
    /// `tenant_id` and `received_at`, the same for every row of the batch.
    prefix: String,
    text: String,
    count: usize,
}

/// Appends one COPY text-format field: `\N` for NULL, else the value with backslash, tab, newline and
/// carriage return escaped; then the separator (tab, or newline after the last field).
fn copy_field(out: &mut String, v: Option<&str>, last: bool) {
    match v {
        None => out.push_str("\\N"),
        Some(v) => {
            for c in v.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\t' => out.push_str("\\t"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    c => out.push(c),
                }
            }
        }
    }
    out.push(if last { '\n' } else { '\t' });
}

impl EventRows {
    fn new(tenant_id: Uuid, received_at: DateTime<Utc>, capacity: usize) -> EventRows {
        EventRows {
            prefix: format!(
                "{tenant_id}\t{}\t",
                received_at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ),
            text: String::with_capacity(capacity * 512),
            count: 0,
        }
    }

    fn push(
        &mut self,
        e: &ReadyEvent,
        user: String,
        device: String,
        model: String,
        estimate: Option<i64>,
    ) {
        use std::fmt::Write;
        let ev = &e.event;
        let role = ev.agent_role.map(|r| match r {
            apiary_schema::AgentRole::Queen => "queen",
            apiary_schema::AgentRole::Worker => "worker",
        });
        let estimate = estimate.map(|n| n.to_string());
        let out = &mut self.text;
        out.push_str(&self.prefix);
        // Times and the id are written in formats that need no escaping.
        let _ = write!(
            out,
            "{}\t{}\t{}\t",
            e.effective_at
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            ev.event_id,
            ev.occurred_at
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        );
        let fields = [
            Some(ev.kind.as_str()),
            Some(ev.runtime.as_str()),
            Some(ev.native_type.as_str()),
            Some(ev.session_id.as_deref().unwrap_or("")),
            Some(ev.colony_id.as_deref().unwrap_or("")),
            ev.parent_session_id.as_deref(),
            ev.worker_id.as_deref(),
            role,
            ev.node_id.as_deref(),
            ev.execution_id.as_deref(),
            ev.trace_id.as_deref(),
            Some(user.as_str()),
            Some(device.as_str()),
            Some(model.as_str()),
            Some(e.data_json.as_str()),
            estimate.as_deref(),
        ];
        let n = fields.len();
        for (i, f) in fields.into_iter().enumerate() {
            copy_field(out, f, i + 1 == n);
        }
        self.count += 1;
    }

    async fn insert(
        self,
        tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    ) -> Result<(), sqlx::Error> {
        if self.count == 0 {
            return Ok(());
        }
        let mut copy = tx.copy_in_raw(COPY_EVENTS_SQL).await?;
        copy.send(self.text.into_bytes()).await?;
        copy.finish().await?;
        Ok(())
    }
}

const COPY_EVENTS_SQL: &str = "COPY events (tenant_id, received_at, effective_at, event_id, occurred_at, kind,
    runtime, native_type, session_id, colony_id, parent_session_id, worker_id, agent_role, node_id, execution_id,
    trace_id, user_id, device_id, model, data, cost_estimated_nanos) FROM STDIN";

/// The batch's latest heartbeat (by event time), read.
fn latest_heartbeat(events: &[&ReadyEvent]) -> Option<Heartbeat> {
    events
        .iter()
        .filter(|e| e.event.kind == EventKind::AgentHeartbeat)
        .max_by_key(|e| e.effective_at)
        .map(|b| Heartbeat::from_data(&b.event.data))
}

/// Liveness of the sending device and its latest heartbeat (by event time).
async fn upsert_device(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    sender: &Sender,
    received_at: DateTime<Utc>,
    device_id: Option<String>,
    agent_version: Option<String>,
    events: &[&ReadyEvent],
) -> Result<(), sqlx::Error> {
    let Some(device_id) = device_id else {
        return Ok(());
    };
    let beat = events
        .iter()
        .filter(|e| e.event.kind == EventKind::AgentHeartbeat)
        .max_by_key(|e| e.effective_at);
    let payload = beat
        .map(|b| Heartbeat::from_data(&b.event.data))
        .unwrap_or_default();
    // A drop counter, not usage: it saturates at the bigint maximum instead of failing the batch.
    let dropped: i128 = events
        .iter()
        .filter(|e| e.event.kind == EventKind::OutboxDropped)
        .filter_map(|e| DropReport::from_data(&e.event.data))
        .map(|r| i128::from(r.count))
        .sum();
    let dropped = i64::try_from(dropped).unwrap_or(i64::MAX);
    let live = sender.live.then_some(received_at);
    let num = |n: Option<u64>| n.and_then(|n| i64::try_from(n).ok());
    let version = payload.agent_version.clone().or(agent_version);
    sqlx::query(
        "INSERT INTO devices AS d (tenant_id, device_id, user_id, first_seen_at, last_seen_at,
            last_heartbeat_at, heartbeat_event_at, agent_version, backlog_events, backlog_bytes,
            oldest_pending_age_seconds, sync_state, dropped_events)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (tenant_id, device_id) DO UPDATE SET
            dropped_events = LEAST(d.dropped_events::numeric + EXCLUDED.dropped_events, 9223372036854775807)::bigint,
            last_seen_at = GREATEST(d.last_seen_at, EXCLUDED.last_seen_at),
            last_heartbeat_at = GREATEST(d.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
            agent_version = COALESCE(EXCLUDED.agent_version, d.agent_version),
            backlog_events = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
                OR d.heartbeat_event_at IS NULL THEN COALESCE(EXCLUDED.backlog_events, d.backlog_events)
                ELSE d.backlog_events END,
            backlog_bytes = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
                OR d.heartbeat_event_at IS NULL THEN COALESCE(EXCLUDED.backlog_bytes, d.backlog_bytes)
                ELSE d.backlog_bytes END,
            oldest_pending_age_seconds = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
                OR d.heartbeat_event_at IS NULL
                THEN COALESCE(EXCLUDED.oldest_pending_age_seconds, d.oldest_pending_age_seconds)
                ELSE d.oldest_pending_age_seconds END,
            sync_state = CASE WHEN EXCLUDED.heartbeat_event_at >= d.heartbeat_event_at
                OR d.heartbeat_event_at IS NULL THEN COALESCE(EXCLUDED.sync_state, d.sync_state)
                ELSE d.sync_state END,
            heartbeat_event_at = GREATEST(d.heartbeat_event_at, EXCLUDED.heartbeat_event_at)",
    )
    .bind(sender.tenant_id)
    .bind(&device_id)
    .bind(sender.user_id.clone().unwrap_or_default())
    .bind(received_at)
    .bind(live)
    .bind(beat.and(live))
    .bind(beat.map(|b| b.effective_at))
    .bind(version)
    .bind(num(payload.backlog_events))
    .bind(num(payload.backlog_bytes))
    .bind(payload.oldest_pending_age_seconds)
    .bind(payload.sync_state)
    .bind(dropped)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::copy_field;

    #[test]
    fn copy_fields_escape_what_the_text_format_would_misread() {
        let mut out = String::new();
        copy_field(&mut out, Some("a\tb\\c\nd\re"), false);
        copy_field(&mut out, None, false);
        copy_field(&mut out, Some(r#"{"k":"q\"uo\\te"}"#), true);
        assert_eq!(
            out,
            "a\\tb\\\\c\\nd\\re\t\\N\t{\"k\":\"q\\\\\"uo\\\\\\\\te\"}\n"
        );
    }
}
