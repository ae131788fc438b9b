//! Cross-request group commit: concurrent `POST /v1/batches` requests are written together, in one
//! transaction per group ([`crate::store::batch::write_group`]), by a small set of writer tasks.
//!
//! - **Queue.** A request hands its checked batch to a bounded queue ([`GroupCommit::submit`]) and waits
//!   for its own answer. A full queue is answered 503 with `Retry-After` at once (back-pressure: the agent
//!   retries, nothing waits unbounded in memory).
//! - **Groups.** A writer takes the first queued batch, then whatever arrives within `group_commit_wait_ms`
//!   of it, until the group holds `group_commit_max_events` events and bindings. Only *disjoint* batches
//!   share a group ([`Keys`]: per tenant, no common session — as session, parent, colony or forked
//!   colony run — no common device, no common event id), so every batch's verdicts are exactly what it
//!   would get alone; a conflicting batch (a replay of a queued batch, another batch of the same device)
//!   is held back by the writer and starts its next group.
//! - **One tenant per group on Citus.** When the database is a Citus coordinator ([`Engine::Citus`],
//!   found once at start-up by [`Store::detect_engine`]), a group takes only batches of its first
//!   batch's tenant; another tenant's batch is held back like a conflicting one. A tenant's rows all
//!   live on one worker (`store::citus`), so every group's transaction is a single-worker (router)
//!   transaction: no two-phase commit across workers, whose commit on the workers just after the
//!   coordinator could let the live stream's "deliverable once its transaction ended" rule skip a row
//!   not yet visible (docs/scaling.md, "Citus"). On plain PostgreSQL a group mixes tenants. Until
//!   the engine is known (the database was down at start-up) the writers keep one tenant per group,
//!   which is correct on both.
//! - **Held-back batches** wait in the writer, in arrival order, and lead its next group: the oldest one
//!   always enters it (so the next group is the oldest held-back tenant's on Citus), and no batch enters
//!   a group ahead of an earlier held-back batch it conflicts with (the same device, session or event id
//!   of the same tenant), so a batch is neither starved nor overtaken by a later batch of its device in
//!   the writer that holds it. (Batches in flight at once in *different* writers are concurrent requests,
//!   unanswered both: their order is not defined, as without group commit.)
//! - **Answers.** Each request gets its own [`BatchResponse`] after the shared commit. If the group's
//!   transaction fails, its batches are written again one by one, so a batch that cannot be stored fails
//!   alone ([`crate::store::batch::write_group`]).
//! - **Cancellation.** The writers are tasks of their own: a client that goes away does not cut a
//!   transaction off half-way; its answer is simply dropped (a retry is a duplicate, harmless).
//! - **Shutdown.** The queue closes when the last handle ([`AppState`](crate::state::AppState)) is
//!   dropped; the writers finish the groups they hold and end.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use apiary_schema::BatchResponse;
use tokio::sync::{mpsc, oneshot, Mutex};
use uuid::Uuid;

use crate::config::IngestSettings;
use crate::error::ApiError;
use crate::intake::CheckedBatch;
use crate::store::batch::{self, Item, Sender};
use crate::store::{Engine, Store};

/// The handle requests submit batches through.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Job>,
}

/// A queued batch and where its answer goes.
#[derive(Debug)]
struct Job {
    item: Item,
    keys: Keys,
    /// Events plus bindings: the batch's weight against `group_commit_max_events`.
    size: usize,
    answer: oneshot::Sender<Result<BatchResponse, ApiError>>,
}

/// What a batch would lock, for the disjointness rule of a group (see the module notes). Conservative:
/// every id any event or binding names, whatever the sender may turn out to be allowed.
#[derive(Debug, Default)]
pub struct Keys {
    tenant: Uuid,
    sessions: Vec<String>,
    device: Option<String>,
    events: Vec<Uuid>,
}

impl Keys {
    pub fn of(tenant: Uuid, b: &CheckedBatch) -> Keys {
        let mut sessions: Vec<String> = Vec::new();
        for x in &b.bindings {
            sessions.push(x.session_id.clone());
            sessions.extend(x.parent_session_id.clone());
        }
        for e in &b.events {
            let ev = &e.event;
            for s in [&ev.session_id, &ev.parent_session_id, &ev.colony_id]
                .into_iter()
                .flatten()
            {
                sessions.push(s.clone());
            }
            sessions.extend(crate::store::colonies::forked_run_named(ev).map(str::to_string));
        }
        sessions.sort_unstable();
        sessions.dedup();
        Keys {
            tenant,
            sessions,
            device: b.device_id.clone(),
            events: b.events.iter().map(|e| e.event.event_id).collect(),
        }
    }
}

/// A set of keys per tenant: those a group took, or those of the batches held back before it.
#[derive(Default)]
struct Taken {
    sessions: HashSet<(Uuid, String)>,
    devices: HashSet<(Uuid, String)>,
    events: HashSet<(Uuid, Uuid)>,
}

impl Taken {
    /// Does the job name a key of this set (for its tenant)?
    fn clashes(&self, k: &Keys) -> bool {
        let t = k.tenant;
        k.sessions
            .iter()
            .any(|s| self.sessions.contains(&(t, s.clone())))
            || k.device
                .as_ref()
                .is_some_and(|d| self.devices.contains(&(t, d.clone())))
            || k.events.iter().any(|e| self.events.contains(&(t, *e)))
    }

    fn add(&mut self, k: &Keys) {
        let t = k.tenant;
        self.sessions
            .extend(k.sessions.iter().map(|s| (t, s.clone())));
        self.devices.extend(k.device.iter().map(|d| (t, d.clone())));
        self.events.extend(k.events.iter().map(|e| (t, *e)));
    }
}

/// Which batches a group being collected may take (see the module notes).
struct Admission {
    /// One tenant per group (Citus).
    one_tenant: bool,
    /// The tenant of the group's first batch.
    tenant: Option<Uuid>,
    /// The keys the group holds.
    taken: Taken,
    /// The keys of the batches held back so far, which a later batch must not overtake.
    held: Taken,
}

impl Admission {
    fn new(one_tenant: bool) -> Admission {
        Admission {
            one_tenant,
            tenant: None,
            taken: Taken::default(),
            held: Taken::default(),
        }
    }

    /// Takes the job into the group when the rule allows it; false (and nothing taken) otherwise.
    fn admit(&mut self, k: &Keys) -> bool {
        if self.one_tenant && self.tenant.is_some_and(|t| t != k.tenant) {
            return false;
        }
        if self.taken.clashes(k) || self.held.clashes(k) {
            return false;
        }
        self.taken.add(k);
        self.tenant.get_or_insert(k.tenant);
        true
    }

    /// Records a job held back (not admitted): no later job that conflicts with it may enter the group.
    fn hold(&mut self, k: &Keys) {
        self.held.add(k);
    }
}

/// The bounds of a group.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    wait: Duration,
    max_events: usize,
    /// Held-back batches a writer keeps at most before it stops collecting.
    max_held: usize,
}

impl GroupCommit {
    /// Starts `group_commit_writers` writer tasks on the current runtime.
    pub fn start(store: Arc<Store>, s: &IngestSettings) -> GroupCommit {
        let (queue, rx) = mpsc::channel(s.group_commit_queue.max(1));
        let rx = Arc::new(Mutex::new(rx));
        let bounds = Bounds {
            wait: Duration::from_millis(s.group_commit_wait_ms),
            max_events: s.group_commit_max_events.max(1),
            max_held: 64,
        };
        for _ in 0..s.group_commit_writers.max(1) {
            tokio::spawn(run_until_stopped(rx.clone(), store.clone(), bounds));
        }
        GroupCommit { queue }
    }

    /// Queues a batch and waits for its answer: 503 (retry) when the queue is full.
    pub async fn submit(
        &self,
        sender: Sender,
        batch: CheckedBatch,
    ) -> Result<BatchResponse, ApiError> {
        let keys = Keys::of(sender.tenant_id, &batch);
        let size = batch.events.len() + batch.bindings.len();
        let (answer, wait) = oneshot::channel();
        let job = Job {
            item: Item { sender, batch },
            keys,
            size,
            answer,
        };
        self.queue.try_send(job).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                ApiError::Unavailable(anyhow::anyhow!("the ingest's write queue is full; retry"))
            }
            mpsc::error::TrySendError::Closed(_) => {
                ApiError::Unavailable(anyhow::anyhow!("the ingest is shutting down; retry"))
            }
        })?;
        wait.await.map_err(|_| {
            ApiError::Internal(anyhow::anyhow!("the batch writer ended without an answer"))
        })?
    }
}

/// One writer: collects a group, writes it, answers; until the queue closes.
async fn run_until_stopped(rx: Arc<Mutex<mpsc::Receiver<Job>>>, store: Arc<Store>, b: Bounds) {
    let mut held: VecDeque<Job> = VecDeque::new();
    loop {
        let one_tenant = one_tenant(&store).await;
        let group = collect(&rx, &mut held, b, one_tenant).await;
        if group.is_empty() {
            return;
        }
        write(&store, group).await;
    }
}

/// Whether a group must keep to one tenant: on Citus, and while the engine is unknown (the first call
/// of each writer asks the database, at start-up; a failed answer is asked again before the next group).
async fn one_tenant(store: &Store) -> bool {
    match store.detect_engine().await {
        Ok(Engine::Postgres) => false,
        Ok(Engine::Citus) => true,
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell whether the database is Citus yet; one tenant per group until it answers");
            true
        }
    }
}

/// The next group: held-back batches first, then the queue (see the module notes). Empty when the
/// queue is closed and nothing is held.
async fn collect(
    rx: &Mutex<mpsc::Receiver<Job>>,
    held: &mut VecDeque<Job>,
    b: Bounds,
    one_tenant: bool,
) -> Vec<Job> {
    let mut group: Vec<Job> = Vec::new();
    let mut rule = Admission::new(one_tenant);
    let mut size = 0;
    let mut still_held = VecDeque::new();
    while let Some(j) = held.pop_front() {
        if size < b.max_events && rule.admit(&j.keys) {
            size += j.size;
            group.push(j);
        } else {
            rule.hold(&j.keys);
            still_held.push_back(j);
        }
    }
    *held = still_held;
    // A writer with held-back batches must not wait for the queue: another writer may be waiting in it
    // for a request that will not come before these are answered.
    let mut rx = if group.is_empty() {
        rx.lock().await
    } else {
        match rx.try_lock() {
            Ok(rx) => rx,
            Err(_) => return group,
        }
    };
    if group.is_empty() {
        match rx.recv().await {
            Some(j) => {
                rule.admit(&j.keys);
                size += j.size;
                group.push(j);
            }
            None => return group,
        }
    }
    let deadline = tokio::time::Instant::now() + b.wait;
    while size < b.max_events && held.len() < b.max_held {
        let next = match rx.try_recv() {
            Ok(j) => j,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(j)) => j,
                    _ => break,
                }
            }
        };
        if rule.admit(&next.keys) {
            size += next.size;
            group.push(next);
        } else {
            rule.hold(&next.keys);
            held.push_back(next);
        }
    }
    group
}

/// Writes a group (in a task of its own, so a panic fails its requests, not the writer) and answers.
async fn write(store: &Arc<Store>, group: Vec<Job>) {
    let (items, answers): (Vec<Item>, Vec<_>) =
        group.into_iter().map(|j| (j.item, j.answer)).unzip();
    let store = store.clone();
    let n = items.len();
    let results = tokio::spawn(async move { batch::write_group(&store, items).await })
        .await
        .unwrap_or_else(|e| {
            let why = format!("the batch writer failed: {e}");
            (0..n)
                .map(|_| Err(ApiError::Internal(anyhow::anyhow!(why.clone()))))
                .collect()
        });
    for (answer, r) in answers.into_iter().zip(results) {
        // A request that gave up (client gone, timeout) no longer listens: nothing to do.
        let _ = answer.send(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queued job of `tenant` from `device` naming `sessions`, with event ids `events`.
    fn job(tenant: u128, device: &str, sessions: &[&str], events: &[u128]) -> Job {
        let tenant = Uuid::from_u128(tenant);
        let (answer, _) = oneshot::channel();
        Job {
            item: Item {
                sender: Sender {
                    tenant_id: tenant,
                    user_id: None,
                    device_id: None,
                    live: true,
                },
                batch: CheckedBatch {
                    received_at: chrono::Utc::now(),
                    device_id: Some(device.into()),
                    agent_version: None,
                    bindings: vec![],
                    events: vec![],
                    rejected: vec![],
                },
            },
            keys: Keys {
                tenant,
                sessions: sessions.iter().map(|s| s.to_string()).collect(),
                device: Some(device.into()),
                events: events.iter().map(|e| Uuid::from_u128(*e)).collect(),
            },
            size: 1,
            answer,
        }
    }

    fn bounds() -> Bounds {
        Bounds {
            wait: Duration::from_millis(1),
            max_events: 1_000,
            max_held: 64,
        }
    }

    /// Queues `jobs`, then collects groups until none is left: each group as (tenant, device) pairs.
    async fn groups(jobs: Vec<Job>, one_tenant: bool) -> Vec<Vec<(u128, String)>> {
        let (tx, rx) = mpsc::channel(jobs.len().max(1));
        for j in jobs {
            tx.try_send(j).unwrap();
        }
        drop(tx);
        let rx = Mutex::new(rx);
        let mut held = VecDeque::new();
        let mut out = vec![];
        loop {
            let group = collect(&rx, &mut held, bounds(), one_tenant).await;
            if group.is_empty() {
                return out;
            }
            out.push(
                group
                    .iter()
                    .map(|j| (j.keys.tenant.as_u128(), j.keys.device.clone().unwrap()))
                    .collect(),
            );
        }
    }

    fn g(pairs: &[(u128, &str)]) -> Vec<(u128, String)> {
        pairs.iter().map(|(t, d)| (*t, d.to_string())).collect()
    }

    #[tokio::test]
    async fn on_citus_a_group_keeps_to_its_first_tenant_and_held_back_tenants_come_next_in_order() {
        let jobs = vec![
            job(1, "a", &["s1"], &[1]),
            job(2, "b", &["s2"], &[2]),
            job(1, "c", &["s3"], &[3]),
            job(3, "d", &["s4"], &[4]),
            job(2, "e", &["s5"], &[5]),
            job(1, "f", &["s6"], &[6]),
        ];
        assert_eq!(
            groups(jobs, true).await,
            vec![
                g(&[(1, "a"), (1, "c"), (1, "f")]),
                g(&[(2, "b"), (2, "e")]),
                g(&[(3, "d")]),
            ]
        );
    }

    #[tokio::test]
    async fn on_plain_postgres_a_group_still_mixes_tenants() {
        let jobs = vec![
            job(1, "a", &["s1"], &[1]),
            job(2, "b", &["s2"], &[2]),
            job(1, "c", &["s3"], &[3]),
            job(3, "d", &["s4"], &[4]),
        ];
        assert_eq!(
            groups(jobs, false).await,
            vec![g(&[(1, "a"), (2, "b"), (1, "c"), (3, "d")])]
        );
    }

    #[tokio::test]
    async fn on_citus_a_held_back_batch_is_not_overtaken_by_a_later_batch_of_its_device() {
        // b1 is held (another tenant); b2 (same tenant and device, later) must not enter a group first,
        // nor b1's group (one device per group): b1, then b2.
        let jobs = vec![
            job(1, "a", &["s1"], &[1]),
            job(2, "b", &["s2"], &[2]),
            job(2, "b", &["s3"], &[3]),
            job(1, "c", &["s4"], &[4]),
        ];
        assert_eq!(
            groups(jobs, true).await,
            vec![g(&[(1, "a"), (1, "c")]), g(&[(2, "b")]), g(&[(2, "b")])]
        );
    }

    #[tokio::test]
    async fn a_batch_held_back_for_a_conflict_is_not_overtaken_by_a_later_batch_of_its_device() {
        // x (device b) shares session s1 with a: held. y, later, from device b but with no key of the
        // group: it would fit the group, but it must not overtake x.
        for one_tenant in [false, true] {
            let jobs = vec![
                job(1, "a", &["s1"], &[1]),
                job(1, "b", &["s1", "s2"], &[2]),
                job(1, "b", &["s3"], &[3]),
                job(1, "c", &["s4"], &[4]),
            ];
            let got = groups(jobs, one_tenant).await;
            assert_eq!(
                got,
                vec![g(&[(1, "a"), (1, "c")]), g(&[(1, "b")]), g(&[(1, "b")])],
                "one_tenant = {one_tenant}"
            );
        }
    }

    #[tokio::test]
    async fn on_citus_the_oldest_held_back_tenant_leads_the_next_group_whatever_keeps_arriving() {
        // Tenant 1 keeps sending; tenant 2's batch, held back by the first group, leads the second.
        let (tx, rx) = mpsc::channel(64);
        let rx = Mutex::new(rx);
        let mut held = VecDeque::new();
        tx.try_send(job(1, "a0", &[], &[100])).unwrap();
        tx.try_send(job(2, "z", &[], &[200])).unwrap();
        tx.try_send(job(1, "a1", &[], &[101])).unwrap();
        let first = collect(&rx, &mut held, bounds(), true).await;
        assert!(first.iter().all(|j| j.keys.tenant.as_u128() == 1));
        assert_eq!(first.len(), 2);
        for i in 2..10 {
            tx.try_send(job(1, &format!("a{i}"), &[], &[100 + i]))
                .unwrap();
        }
        let second = collect(&rx, &mut held, bounds(), true).await;
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].keys.tenant.as_u128(), 2);
        assert_eq!(held.len(), 8, "tenant 1's batches wait for the next group");
        let third = collect(&rx, &mut held, bounds(), true).await;
        assert_eq!(third.len(), 8);
        assert!(third.iter().all(|j| j.keys.tenant.as_u128() == 1));
    }

    #[tokio::test]
    async fn the_same_keys_in_another_tenant_do_not_conflict_on_plain_postgres() {
        let jobs = vec![job(1, "a", &["s"], &[1]), job(2, "a", &["s"], &[1])];
        assert_eq!(groups(jobs, false).await, vec![g(&[(1, "a"), (2, "a")])]);
    }
}
