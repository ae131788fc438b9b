//! Stores checked batches: one batch, or a group of concurrent batches ([`crate::group_commit`]), in ONE
//! transaction, in a fixed table order with sorted keys in each step. Each step's statement serves all
//! the group's tenants at once (rows in (tenant, key) order; on Citus a group holds one tenant): the
//! session claims, the event keys, the trackers' read and the session upsert of step 1–3 as well as the
//! shared steps 4–7 ([`write_shared`], [`super::stream::write_batches`]). Only what few batches need —
//! an unbound sender's inheritance, the removal of unused sessions, colony runs, status transitions, a
//! heartbeat's runtime liveness — still runs per tenant, in tenant order, and only when there is some:
//!
//! 1. `sessions` (sorted by session_id): every session the batches name (and every forked colony run a
//!    `colony.created` of theirs names, [`super::colonies::forked_run_named`]) is claimed — inserted with
//!    its owner when new, locked otherwise — and its owner decides which events each sender may write
//!    ([`owners`]: an event into another user's or device's session, or under another user's parent,
//!    is rejected with a reason). Each batch is judged against the owners of its own claims only.
//! 2. `event_keys` (sorted by event_id): `INSERT … ON CONFLICT DO NOTHING RETURNING event_id` for the
//!    allowed events — the returned ids are the new events; everything else is a duplicate and goes no
//!    further.
//! 3. `sessions` again (the rows locked in step 1): state facts from the new events and the allowed
//!    bindings, and each session's health tracker with the new events folded in, in event-time order;
//!    then `status_transitions` (by session id): the transitions they change ([`super::health`]). The
//!    same upsert writes each session's work (tasks, triggers, tool call in flight; [`super::work`]).
//!    Then `colony_runs` and `session_forks` (by session id): the colony runs and forks the new
//!    `colony.created` events name ([`super::colonies`]), and the usage already stored for a session
//!    that became a forked run, or stopped being one, is read to be moved between colony rows in step
//!    5. The tenants' prices (`tenant_prices`, read once for the group, for the tenants with a turn with a model) give each LLM turn's estimated cost
//!    ([`rollups::estimate_of`], [`Usage::with_estimate`]), and the `sessions` of each heartbeat's
//!    device take its runtime liveness ([`super::runtime`], devices in order).
//! 4. `events`: the group's new events, with the identity the session row holds and each LLM turn's
//!    estimated cost (one `COPY`, see [`EventRows`]).
//! 5. `usage_rollups` (sorted by tenant and key; then `usage_rollups_hourly`, `usage_rollups_narrow`,
//!    `_daily` and `_monthly`, and one read per tenant of which of its sessions are forked colony runs,
//!    for step 8): the new *runtime* events pre-aggregated per rollup key, plus the active time the
//!    sessions' new histories add or take away ([`super::active`]); then `tool_rollups` and its hourly,
//!    daily and monthly sums (sorted by tenant and key): the completed tool calls per tool name
//!    ([`crate::tool_rollups`]).
//! 6. `devices` (sorted by tenant and device_id, one statement, [`super::devices`]): liveness, the latest
//!    heartbeat and the reported drops.
//! 7. the live stream ([`super::stream`]): the transitions, the sessions' new usage totals and the
//!    devices' liveness, in `stream_sessions` (sorted by tenant and session_id) then `stream_devices`
//!    order.
//! 8. the rows that sum every user of a tenant, which concurrent transactions of a tenant share: the
//!    colony days and months and the tenant's tool hours, days and months, by one statement, last, so
//!    their locks are held only for the commit ([`super::tenant_wide`]).
//!
//! Every step takes its locks in (tenant, key) order after the previous step's, so the locks of a
//! transaction come in (step, tenant, key) order: with 10 tenants in a group of small batches this is one
//! statement per step instead of one per tenant (fleet bench, `docs/scaling.md`, "Capacity").
//!
//! A group may only hold batches that are disjoint: no two of one tenant name the same session (as
//! session, parent or colony), the same device or the same event id ([`crate::group_commit`] holds a
//! conflicting batch back for a later group). So each batch's verdicts are what it would have got alone
//! — its events are new or duplicates of *committed* events only — and `accepted + duplicates +
//! rejected` stays exact per request. When a group's transaction fails for any other reason than the
//! rollup headroom below, each of its batches is written again alone ([`write_group`]), so one bad batch
//! fails alone. A session's `last_received_at` is the latest arrival of the tenant's batches in the
//! group (they arrived within the group's few milliseconds); each event keeps its own batch's.
//!
//! Device-level events (`EventKind::is_device_level`: `agent.heartbeat`, `outbox.dropped`) are stored in
//! `events` (so they dedup like any other) but never reach the usage rollups: usage counts what the agent
//! runtimes did, not the agent's own bookkeeping. They update `devices` only: a heartbeat its liveness and
//! backlog, an `outbox.dropped` its `dropped_events` counter (summed over new events only, so exact).
//!
//! Rollup rows are bigints: events that would push a row past that are rejected one by one
//! ([`headroom`]); finding them may take another attempt of the whole transaction (see [`write_group`]).
//!
//! Every transaction takes its row locks in that same global order ((step, tenant, key)), so concurrent
//! batches and groups (two replicas receiving the same batch at the same moment included) wait for each
//! other and never deadlock; the loser of a race on an event key sees the winner's commit and counts the
//! event as a duplicate, and the loser of a race to create a session sees the winner's owner.

use std::collections::{BTreeMap, HashMap, HashSet};

use apiary_schema::prices::PriceEntry;
use apiary_schema::{BatchResponse, EventKind, Rejection};
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::devices::{self, DeviceFacts};
use super::event_rows::EventRows;
use super::headroom::{self, Bases, Fit};
pub use super::owners::Sender;
use super::owners::{self, Claim, Owner, Verdict};
use super::sessions::{self, SessionUpdate};
use super::Store;
use crate::error::ApiError;
use crate::intake::{CheckedBatch, ReadyEvent};
use crate::rollups::ColonyRows;
use crate::rollups::{self, bucket_of, RollupKey, Usage};
use crate::tool_rollups::{TenantToolRows, ToolRows};

/// Attempts of one group's transaction before giving up with a retryable 503 (overflowing rows found
/// on the second, a concurrent batch growing the same rows meanwhile may take more).
const ATTEMPTS: usize = 4;

/// One request's batch: who sent it and what passed intake.
#[derive(Debug)]
pub struct Item {
    pub sender: Sender,
    pub batch: CheckedBatch,
}

/// Why an attempt of [`write_once`] did not commit.
enum Retry {
    /// These events do not fit their rollup rows: reject them, try again.
    Overflow(Vec<Uuid>),
    /// A row of one of these tenants overflowed in the database (the group's rollup statements serve
    /// all its tenants): read these rows' totals, try again.
    Stale(Vec<(Uuid, Vec<RollupKey>)>),
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

/// Stores a batch alone; returns the verdicts. Nothing is stored when it fails.
pub async fn write(
    store: &Store,
    sender: &Sender,
    batch: CheckedBatch,
) -> Result<BatchResponse, ApiError> {
    let mut one = [Item {
        sender: sender.clone(),
        batch,
    }];
    Ok(write_together(store, &mut one).await?.remove(0))
}

/// Stores a group of disjoint batches (see the module notes) in one transaction; answers each with its
/// own verdicts, in order. If the shared transaction fails, every batch is written alone (concurrently:
/// they are disjoint), so a batch that cannot be stored fails without the others.
pub async fn write_group(
    store: &Store,
    mut items: Vec<Item>,
) -> Vec<Result<BatchResponse, ApiError>> {
    let n = items.len();
    match write_together(store, &mut items).await {
        Ok(answers) => answers.into_iter().map(Ok).collect(),
        Err(e) if n == 1 => vec![Err(e)],
        Err(e) => {
            tracing::warn!(error = %e, batches = n, "a group's transaction failed; writing its batches alone");
            let alone = items.into_iter().map(|item| async move {
                let mut one = [item];
                Ok(write_together(store, &mut one).await?.remove(0))
            });
            futures::future::join_all(alone).await
        }
    }
}

/// The attempts of one transaction for `items` (rejecting the events that overflow their rollup rows).
async fn write_together(store: &Store, items: &mut [Item]) -> Result<Vec<BatchResponse>, ApiError> {
    let mut bases: HashMap<Uuid, Bases> = HashMap::new();
    for _ in 0..ATTEMPTS {
        match write_once(store, items, &bases).await {
            Ok(r) => return Ok(r),
            Err(Retry::Overflow(ids)) => {
                let ids: HashSet<Uuid> = ids.into_iter().collect();
                for item in items.iter_mut() {
                    let mut gone = vec![];
                    item.batch.events.retain(|e| {
                        let keep = !ids.contains(&e.event.event_id);
                        if !keep {
                            gone.push(e.event.event_id);
                        }
                        keep
                    });
                    gone.sort_unstable();
                    gone.dedup();
                    item.batch
                        .rejected
                        .extend(gone.into_iter().map(|event_id| Rejection {
                            event_id,
                            reason: headroom::REASON.into(),
                        }));
                }
            }
            Err(Retry::Stale(stale)) => {
                for (tenant, keys) in stale {
                    bases.insert(tenant, headroom::fetch(&store.pool, tenant, &keys).await?);
                }
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

/// One batch's part in an attempt.
struct Part<'a> {
    /// Its place in the group (answers go back in order).
    index: usize,
    item: &'a Item,
    /// Its events, distinct by id and sorted; narrowed to the allowed ones, then to the new ones.
    events: Vec<&'a ReadyEvent>,
    /// Events as sent (repeats of an id within the batch included: they answer as duplicates).
    total: usize,
    /// Distinct event ids.
    distinct: usize,
    /// Events the owners allowed (before dedup).
    allowed: usize,
    rejected: Vec<Rejection>,
    /// The sessions its claims name: its view of the group's owners.
    claimed: Vec<String>,
    verdict: Verdict,
}

impl<'a> Part<'a> {
    fn new(index: usize, item: &'a Item) -> Part<'a> {
        let b = &item.batch;
        let mut seen = HashSet::with_capacity(b.events.len());
        let mut events: Vec<&ReadyEvent> = b
            .events
            .iter()
            .filter(|e| seen.insert(e.event.event_id))
            .collect();
        events.sort_by_key(|e| e.event.event_id);
        Part {
            index,
            item,
            total: b.events.len(),
            distinct: events.len(),
            allowed: events.len(),
            events,
            rejected: b.rejected.clone(),
            claimed: vec![],
            verdict: Verdict::default(),
        }
    }

    fn answer(self) -> BatchResponse {
        let accepted = self.events.len() as u64;
        let refused = self.distinct - self.allowed;
        BatchResponse {
            accepted,
            duplicates: (self.total - refused) as u64 - accepted,
            rejected: self.rejected,
            quota: None,
            push_interval_ms: None,
        }
    }
}

async fn write_once(
    store: &Store,
    items: &[Item],
    bases: &HashMap<Uuid, Bases>,
) -> Result<Vec<BatchResponse>, Retry> {
    let mut parts: Vec<Part> = items
        .iter()
        .enumerate()
        .map(|(i, x)| Part::new(i, x))
        .collect();
    parts.sort_by_key(|p| p.item.sender.tenant_id);
    let mut days: Vec<chrono::NaiveDate> = parts
        .iter()
        .flat_map(|p| p.events.iter().map(|e| e.effective_at.date_naive()))
        .collect();
    days.sort_unstable();
    days.dedup();
    store.ensure_days(days).await?;
    let mut tx = store.pool.begin().await?;
    let empty = Bases::default();
    let mut priced: Vec<Uuid> = parts
        .iter()
        .filter(|p| p.events.iter().any(|e| priced(e)))
        .map(|p| p.item.sender.tenant_id)
        .collect();
    priced.dedup();
    let prices = super::prices::entries_of(&mut tx, &priced).await?;
    let tenants = tenant_ranges(&parts);
    let owners = claim_owners(&mut tx, &tenants, &mut parts).await?;
    insert_keys(&mut tx, &mut parts).await?;
    let mut folds: Vec<Fold> = tenants
        .iter()
        .zip(owners)
        .map(|((id, r), owner_of)| Fold::new(*id, &parts[r.clone()], owner_of))
        .collect();
    let mut stored = {
        let wanted: Vec<(Uuid, Vec<&str>)> = folds
            .iter()
            .map(|f| (f.tenant, super::health::wanted(&f.inputs, &f.work_keys())))
            .collect();
        super::health::read(&mut tx, &wanted).await?
    };
    let mut healths = Vec::with_capacity(folds.len());
    for f in &mut folds {
        let rows = stored.remove(&f.tenant).unwrap_or_default();
        healths.push(f.prepare(&mut tx, store, rows).await?);
    }
    let mut identities = {
        let all: Vec<sessions::TenantUpdates> = folds
            .iter()
            .map(|f| (f.tenant, f.received_at, &f.updates))
            .collect();
        sessions::upsert(&mut tx, &all).await?
    };
    let mut rows = EventRows::new(parts.iter().map(|p| p.events.len()).sum());
    let mut tails = Vec::new();
    for ((f, health), (id, r)) in folds.iter().zip(healths).zip(&tenants) {
        let identity = identities.remove(id).unwrap_or_default();
        let bases = bases.get(id).unwrap_or(&empty);
        let prices = prices.get(id).map_or(&[][..], Vec::as_slice);
        let parts = &parts[r.clone()];
        tails.push(
            write_tenant(
                &mut tx, &mut rows, store, f, parts, health, identity, bases, prices,
            )
            .await?,
        );
    }
    let (colony, tenant_tools) = write_shared(&mut tx, rows, &mut tails).await?;
    let mut stream = super::stream::TxStream::default();
    let live: Vec<super::stream::TenantStream> = tails.iter().map(Tail::stream).collect();
    super::stream::write_batches(&mut tx, &mut stream, &live).await?;
    stream.finish(&mut tx).await?;
    // Last: the rows every batch of a tenant adds to, locked only until the commit.
    match super::tenant_wide::upsert(&mut tx, &colony, &tenant_tools).await {
        Err(e) if headroom::is_out_of_range(&e) => return Err(stale(&tails)),
        r => r?,
    }
    tx.commit().await?;
    parts.sort_by_key(|p| p.index);
    Ok(parts.into_iter().map(Part::answer).collect())
}

/// Each tenant's batches as a range of `parts` (sorted by tenant), in tenant order.
fn tenant_ranges(parts: &[Part<'_>]) -> Vec<(Uuid, std::ops::Range<usize>)> {
    let mut out = vec![];
    let mut start = 0;
    for chunk in parts.chunk_by(|a, b| a.item.sender.tenant_id == b.item.sender.tenant_id) {
        out.push((chunk[0].item.sender.tenant_id, start..start + chunk.len()));
        start += chunk.len();
    }
    out
}

/// Step 1 for the group: each batch's claims (disjoint in a group), one claim statement for all its
/// tenants, then each batch judged against the owners of its own claims; the sessions inserted for
/// nothing allowed are removed again (per tenant, when there are any). Returns each tenant's owners, in
/// `tenants` order.
async fn claim_owners(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[(Uuid, std::ops::Range<usize>)],
    parts: &mut [Part<'_>],
) -> Result<Vec<HashMap<String, Owner>>, Retry> {
    let mut all: Vec<(Uuid, DateTime<Utc>, BTreeMap<String, Claim>)> = vec![];
    for (tenant, r) in tenants {
        let mut claims: BTreeMap<String, Claim> = BTreeMap::new();
        for p in parts[r.clone()].iter_mut() {
            let device = p.item.batch.device_id.clone().unwrap_or_default();
            let mut mine =
                owners::wanted(&p.item.sender, &device, &p.item.batch.bindings, &p.events);
            if !p.item.sender.is_bound() {
                owners::inherit(tx, *tenant, &mut mine).await?;
            }
            p.claimed = mine.keys().cloned().collect();
            claims.extend(mine);
        }
        all.push((*tenant, received_at(&parts[r.clone()]), claims));
    }
    let claims: Vec<owners::TenantClaims> = all.iter().map(|(t, at, c)| (*t, *at, c)).collect();
    let mut owner_of = owners::claim(tx, &claims).await?;
    let mut out = Vec::with_capacity(tenants.len());
    for (tenant, r) in tenants {
        let owner_of = owner_of.remove(tenant).unwrap_or_default();
        let mut unused = vec![];
        for p in parts[r.clone()].iter_mut() {
            let mine: HashMap<String, Owner> = p
                .claimed
                .iter()
                .filter_map(|s| Some((s.clone(), owner_of.get(s)?.clone())))
                .collect();
            let sender = &p.item.sender;
            let mut verdict = Verdict::new(sender, &mine, &p.item.batch.bindings);
            let rejected = &mut p.rejected;
            p.events.retain(|e| match verdict.event(sender, &mine, e) {
                None => true,
                Some(reason) => {
                    rejected.push(Rejection {
                        event_id: e.event.event_id,
                        reason,
                    });
                    false
                }
            });
            unused.extend(verdict.unused_inserted(&mine));
            p.allowed = p.events.len();
            p.verdict = verdict;
        }
        unused.sort_unstable();
        owners::drop_unused(tx, *tenant, &unused).await?;
        out.push(owner_of);
    }
    Ok(out)
}

/// The latest arrival of a tenant's batches in the group (its sessions' `last_received_at`).
fn received_at(parts: &[Part<'_>]) -> DateTime<Utc> {
    parts
        .iter()
        .map(|p| p.item.batch.received_at)
        .max()
        .expect("a tenant has a batch")
}

/// Step 2 for the group: the allowed events' keys in one insert (sorted by tenant and id); narrows each
/// batch to its new events.
async fn insert_keys(
    tx: &mut Transaction<'_, Postgres>,
    parts: &mut [Part<'_>],
) -> Result<(), sqlx::Error> {
    let mut keys: Vec<(Uuid, Uuid, DateTime<Utc>)> = parts
        .iter()
        .flat_map(|p| {
            let t = p.item.sender.tenant_id;
            p.events
                .iter()
                .map(move |e| (t, e.event.event_id, e.effective_at))
        })
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    keys.sort_unstable_by_key(|k| (k.0, k.1));
    let mut tenants = Vec::with_capacity(keys.len());
    let mut ids = Vec::with_capacity(keys.len());
    let mut times = Vec::with_capacity(keys.len());
    for (t, id, at) in keys {
        tenants.push(t);
        ids.push(id);
        times.push(at);
    }
    let new_ids: HashSet<(Uuid, Uuid)> = sqlx::query_as(
        "INSERT INTO event_keys (tenant_id, event_id, effective_at) \
         SELECT u.* FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[]) AS u \
         ON CONFLICT DO NOTHING RETURNING tenant_id, event_id",
    )
    .bind(&tenants)
    .bind(&ids)
    .bind(&times)
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .collect();
    for p in parts.iter_mut() {
        let t = p.item.sender.tenant_id;
        p.events
            .retain(|e| new_ids.contains(&(t, e.event.event_id)));
    }
    Ok(())
}

/// Step 3 for one tenant: its sessions' facts from the allowed bindings and the new events, folded
/// before the group's one session upsert.
struct Fold<'a> {
    tenant: Uuid,
    received_at: DateTime<Utc>,
    /// Its batches' new events, sorted by id.
    events: Vec<&'a ReadyEvent>,
    updates: BTreeMap<String, SessionUpdate>,
    inputs: BTreeMap<String, Vec<apiary_schema::status::Input>>,
    work_of: BTreeMap<&'a str, Vec<&'a ReadyEvent>>,
}

impl<'a> Fold<'a> {
    fn new(tenant: Uuid, parts: &[Part<'a>], owner_of: HashMap<String, Owner>) -> Fold<'a> {
        let mut events: Vec<&'a ReadyEvent> = parts
            .iter()
            .flat_map(|p| p.events.iter().copied())
            .collect();
        events.sort_by_key(|e| e.event.event_id);
        let mut updates: BTreeMap<String, SessionUpdate> = BTreeMap::new();
        for p in parts {
            let item: &'a Item = p.item;
            for b in item
                .batch
                .bindings
                .iter()
                .filter(|b| p.verdict.allows_binding(b))
            {
                session_update(&mut updates, &owner_of, &b.session_id, b.first_seen_at).bind(b);
            }
        }
        for e in &events {
            if let Some(sid) = &e.event.session_id {
                session_update(&mut updates, &owner_of, sid, e.effective_at)
                    .fold(&e.event, e.effective_at);
            }
        }
        Fold {
            tenant,
            received_at: received_at(parts),
            inputs: super::health::inputs(&events),
            work_of: super::work::touched(&events),
            events,
            updates,
        }
    }

    fn work_keys(&self) -> Vec<&'a str> {
        self.work_of.keys().copied().collect()
    }

    /// The trackers and work after the new events, from the stored `rows`, into [`Fold::updates`].
    async fn prepare(
        &mut self,
        tx: &mut Transaction<'_, Postgres>,
        store: &Store,
        rows: Vec<super::health::Stored>,
    ) -> Result<super::health::Prepared, Retry> {
        let mut health = super::health::prepare(
            tx,
            self.tenant,
            &store.status_rules,
            std::mem::take(&mut self.inputs),
            &self.updates,
            &self.work_keys(),
            rows,
        )
        .await?;
        for (sid, f) in &health.sessions {
            if let Some(u) = self.updates.get_mut(sid) {
                u.tracker = Some(f.clone());
            }
        }
        let works = std::mem::take(&mut health.works);
        for (sid, w) in super::work::prepare(tx, self.tenant, &self.work_of, works).await? {
            if let Some(u) = self.updates.get_mut(&sid) {
                u.work = Some(w);
            }
        }
        Ok(health)
    }
}

/// What one tenant's part of a group leaves for the steps the group's tenants share (4–6:
/// [`write_shared`]; 7: [`Tail::stream`]).
struct Tail {
    tenant: Uuid,
    /// Its 15-minute usage rows (pre-aggregated; the hourly and narrow ones are derived from them).
    rollup: BTreeMap<RollupKey, Usage>,
    /// Colony usage its new or changed colony runs move (`super::colonies::record`).
    colony_moves: Vec<rollups::ColonyMove>,
    tools: ToolRows,
    /// Its sending devices.
    facts: Vec<DeviceFacts>,
    /// Session → its user, for the stream rows.
    owners: BTreeMap<String, String>,
    transitions: Vec<super::stream::StatusData>,
    /// Sessions whose usage changed (sorted, distinct).
    usage: Vec<String>,
    /// Its live sending devices and their senders' users (the rows written; sorted, distinct).
    devices: Vec<(String, String)>,
}

impl Tail {
    /// What the tenant streams (step 7, after the shared steps: the usage totals it streams include this
    /// transaction's rollups).
    fn stream(&self) -> super::stream::TenantStream<'_> {
        super::stream::TenantStream {
            tenant_id: self.tenant,
            owners: self
                .owners
                .iter()
                .map(|(s, u)| (s.as_str(), u.as_str()))
                .collect(),
            stream: super::stream::BatchStream {
                transitions: self.transitions.clone(),
                usage: self.usage.iter().map(String::as_str).collect(),
                devices: self
                    .devices
                    .iter()
                    .map(|(d, u)| (d.as_str(), u.as_str()))
                    .collect(),
            },
        }
    }
}

/// Steps 4–6 in one statement each for all the group's tenants (`tails` in tenant order): the new
/// events (one `COPY`), the three usage rollups, the tool rollups, the devices. Every transaction takes
/// these rows' locks after all its per-tenant steps, in (step, tenant, key) order, and these tables are
/// written by no per-tenant step, so the lock order stays one global order.
async fn write_shared(
    tx: &mut Transaction<'_, Postgres>,
    rows: EventRows,
    tails: &mut [Tail],
) -> Result<(ColonyRows, TenantToolRows), Retry> {
    rows.insert(tx).await?;
    let rollups: Vec<rollups::TenantRows> = tails
        .iter()
        .map(|t| (t.tenant, &t.rollup, t.colony_moves.as_slice()))
        .collect();
    let colony = match rollups::upsert_many(tx, &rollups).await {
        Err(e) if headroom::is_out_of_range(&e) => return Err(stale(tails)),
        r => r?,
    };
    let tools: Vec<(Uuid, &ToolRows)> = tails.iter().map(|t| (t.tenant, &t.tools)).collect();
    let tenant_tools = match crate::tool_rollups::upsert(tx, &tools).await {
        Err(e) if headroom::is_out_of_range(&e) => return Err(stale(tails)),
        r => r?,
    };
    let mut facts: Vec<DeviceFacts> = tails
        .iter_mut()
        .flat_map(|t| std::mem::take(&mut t.facts))
        .collect();
    devices::upsert(tx, &mut facts).await?;
    Ok((colony, tenant_tools))
}

/// A rollup upsert met "out of range": only when a stored row was fuller than the first attempt assumed
/// (the tenant's tool and colony rows are bounded by its month, which headroom checks once it is read).
fn stale(tails: &[Tail]) -> Retry {
    Retry::Stale(
        tails
            .iter()
            .map(|t| (t.tenant, t.rollup.keys().cloned().collect()))
            .collect(),
    )
}

/// The rest of step 3 for one tenant of the group (after the group's session upsert returned its
/// sessions' `identity`): its colony runs and forks, its status transitions, its events' rows and
/// rollup rows (with its prices), and its heartbeats' runtime liveness; its new events go into `rows`,
/// and what the shared steps and its stream need into the [`Tail`].
#[allow(clippy::too_many_arguments)]
async fn write_tenant(
    tx: &mut Transaction<'_, Postgres>,
    rows: &mut EventRows,
    store: &Store,
    fold: &Fold<'_>,
    parts: &[Part<'_>],
    health: super::health::Prepared,
    identity: sessions::Identity,
    bases: &Bases,
    tenant_prices: &[PriceEntry],
) -> Result<Tail, Retry> {
    let tenant = fold.tenant;
    let active = health.active.clone();
    let colony_moves = super::colonies::record(tx, tenant, &fold.events, &identity).await?;
    let mut live = super::stream::BatchStream {
        transitions: health.streamed(),
        ..Default::default()
    };
    super::health::store_transitions(tx, tenant, health).await?;

    let mut rollup = Fit::new(bases);
    let mut tools = ToolRows::default();
    for p in parts.iter() {
        rows.batch(tenant, p.item.batch.received_at);
        let default_user = p.item.sender.user_id.clone().unwrap_or_default();
        let default_device = p.item.batch.device_id.clone().unwrap_or_default();
        for e in &p.events {
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
            let estimate = rollups::estimate_of(tenant_prices, &model, e.effective_at, &e.usage);
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
    }
    let mut rollup = rollup.finish().map_err(Retry::Overflow)?;
    for sid in add_active(&mut rollup, &active) {
        live.usage.push(sid);
    }

    let mut facts: Vec<DeviceFacts> = parts
        .iter()
        .filter_map(|p| {
            let b = &p.item.batch;
            let device = b.device_id.clone()?;
            let version = b.agent_version.clone();
            Some(DeviceFacts::of(
                &p.item.sender,
                device,
                b.received_at,
                version,
                &p.events,
            ))
        })
        .collect();
    facts.sort_by(|a, b| (&a.device_id, &a.user_id).cmp(&(&b.device_id, &b.user_id)));
    let mut crashed = Vec::new();
    for f in &facts {
        if let Some((_, beat)) = &f.beat {
            let rules = &store.status_rules;
            let found = super::runtime::apply(
                tx,
                tenant,
                &f.device_id,
                p_user(&f.user_id),
                &beat.runtimes,
                rules,
                f.received_at,
            )
            .await?;
            crashed.extend(found);
        }
    }

    live.usage.sort_unstable();
    live.usage.dedup();
    live.devices = parts
        .iter()
        .filter(|p| p.item.sender.live)
        .filter_map(|p| {
            let user = p.item.sender.user_id.as_deref().unwrap_or_default();
            Some((p.item.batch.device_id.as_deref()?, user))
        })
        .collect();
    live.devices.sort_unstable();
    live.devices.dedup();
    let mut owners: BTreeMap<&str, &str> = identity
        .iter()
        .map(|(s, (u, _))| (s.as_str(), u.as_str()))
        .collect();
    for c in &crashed {
        owners.insert(c.status.session_id.as_str(), c.user_id.as_str());
    }
    live.transitions
        .extend(crashed.iter().map(|c| c.status.clone()));
    Ok(Tail {
        tenant,
        rollup,
        colony_moves,
        tools,
        facts,
        owners: owners
            .into_iter()
            .map(|(s, u)| (s.to_string(), u.to_string()))
            .collect(),
        transitions: live.transitions,
        usage: live.usage.into_iter().map(str::to_string).collect(),
        devices: live
            .devices
            .into_iter()
            .map(|(d, u)| (d.to_string(), u.to_string()))
            .collect(),
    })
}

/// A device row's user as the runtime-liveness filter takes it (`''`: a sender bound to no user).
fn p_user(user: &str) -> Option<&str> {
    Some(user).filter(|u| !u.is_empty())
}

/// Whether the event is an LLM turn with a model: its tenant's prices are read for its estimate.
fn priced(e: &ReadyEvent) -> bool {
    e.event.kind == EventKind::LlmTurn && e.event.data_str("model").is_some_and(|m| !m.is_empty())
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
