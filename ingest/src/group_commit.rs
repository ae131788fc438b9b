//! Cross-request group commit: concurrent `POST /v1/batches` requests are written together, in one
//! transaction per group ([`crate::store::batch::write_group`]), by a small set of writer tasks.
//!
//! - **Queue.** A request hands its checked batch to a bounded queue ([`GroupCommit::submit`]) and waits
//!   for its own answer. A full queue is answered 503 with `Retry-After` at once (back-pressure: the agent
//!   retries, nothing waits unbounded in memory).
//! - **Groups.** A writer takes the first queued batch, then whatever arrives within `group_commit_wait_ms`
//!   of it, until the group holds `group_commit_max_events` events and bindings. Only *disjoint* batches
//!   share a group ([`Keys`]: per tenant, no common session — as session, parent or colony — no common
//!   device, no common event id), so every batch's verdicts are exactly what it would get alone; a
//!   conflicting batch (a replay of a queued batch, another batch of the same device) is held back by the
//!   writer and starts its next group.
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
use crate::store::Store;

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

/// The keys a group holds so far.
#[derive(Default)]
struct Taken {
    sessions: HashSet<(Uuid, String)>,
    devices: HashSet<(Uuid, String)>,
    events: HashSet<(Uuid, Uuid)>,
}

impl Taken {
    /// Takes the job's keys when none is taken yet; false (and nothing taken) otherwise.
    fn take(&mut self, k: &Keys) -> bool {
        let t = k.tenant;
        let clash = k
            .sessions
            .iter()
            .any(|s| self.sessions.contains(&(t, s.clone())))
            || k.device
                .as_ref()
                .is_some_and(|d| self.devices.contains(&(t, d.clone())))
            || k.events.iter().any(|e| self.events.contains(&(t, *e)));
        if clash {
            return false;
        }
        self.sessions
            .extend(k.sessions.iter().map(|s| (t, s.clone())));
        self.devices.extend(k.device.iter().map(|d| (t, d.clone())));
        self.events.extend(k.events.iter().map(|e| (t, *e)));
        true
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
        let group = collect(&rx, &mut held, b).await;
        if group.is_empty() {
            return;
        }
        write(&store, group).await;
    }
}

/// The next group: held-back batches first, then the queue (see the module notes). Empty when the
/// queue is closed and nothing is held.
async fn collect(rx: &Mutex<mpsc::Receiver<Job>>, held: &mut VecDeque<Job>, b: Bounds) -> Vec<Job> {
    let mut group: Vec<Job> = Vec::new();
    let mut taken = Taken::default();
    let mut size = 0;
    let mut still_held = VecDeque::new();
    while let Some(j) = held.pop_front() {
        if size < b.max_events && taken.take(&j.keys) {
            size += j.size;
            group.push(j);
        } else {
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
                taken.take(&j.keys);
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
        if taken.take(&next.keys) {
            size += next.size;
            group.push(next);
        } else {
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
