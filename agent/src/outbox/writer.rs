//! The single writer thread and its group commit.
//!
//! Every change to the outbox is an [`Op`] sent over one channel to one OS thread that owns the only
//! writing connection. The thread blocks for the first op, then drains whatever else queued up while the
//! previous commit was in flight (up to [`GROUP_MAX_EVENTS`] events), applies all of them inside **one**
//! `BEGIN IMMEDIATE … COMMIT`, and only then resolves every op's future. So a producer is answered only
//! after its events are durable, and under load one fsync is shared by many producers.
//!
//! Failure handling:
//! - an SQL error that is about the *database* (full disk, I/O error, busy, read-only) fails the whole
//!   group: the transaction is rolled back, every op gets the error, and the [`Health`] records it until a
//!   later commit succeeds (a probe runs every few seconds while unhealthy, so the state also clears when
//!   nobody writes);
//! - any other SQL error fails the group too, and then each op is retried alone in its own transaction, so
//!   one bad op cannot fail its neighbours.
//!
//! Ops keep their own results (`apply` may run twice, so it must reset them); in-memory state shared
//! between ops of a group ([`Delta`]) is merged into [`WriterState`] only after a successful commit.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use serde::Serialize;
use uuid::Uuid;

use super::checkpointer::{self, WalControl};
use super::item::UsageAgg;
use super::{store, OutboxError, OutboxSettings};

/// A group stops draining the queue once it holds this many events.
pub const GROUP_MAX_EVENTS: usize = 20_000;
/// How often the writer wakes up when idle (housekeeping, health probe).
const IDLE_TICK: Duration = Duration::from_secs(5);
/// A claim not settled within this long is considered abandoned and its rows become claimable again.
pub const CLAIM_LEASE: Duration = Duration::from_secs(300);

/// One change to the outbox, applied inside a group transaction.
pub(crate) trait Op: Send {
    /// Applies the op. May run more than once (a failed group is retried op by op): reset outputs first.
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()>;
    /// Delivers the result once the group's fate is known (`Ok` = committed and durable).
    fn finish(self: Box<Self>, committed: Result<(), OutboxError>);
    /// Events this op carries, for sizing groups.
    fn weight(&self) -> usize {
        1
    }
    /// True for the op that asks the writer to stop after this group.
    fn is_close(&self) -> bool {
        false
    }
}

/// What an op can see and change.
pub(crate) struct Ctx<'a> {
    pub conn: &'a Connection,
    pub state: &'a WriterState,
    pub delta: &'a mut Delta,
    pub settings: &'a OutboxSettings,
    /// Unix milliseconds at the start of the group.
    pub now_ms: i64,
    /// Sync enabled, read at the start of the group (another process may have changed it).
    pub sync_enabled: bool,
}

impl Ctx<'_> {
    /// Adds `n` to a persisted counter (flushed at the end of the group).
    pub fn count(&mut self, name: &str, n: i64) {
        if n == 0 {
            return;
        }
        match self.delta.counters.get_mut(name) {
            Some(v) => *v += n,
            None => {
                self.delta.counters.insert(name.to_string(), n);
            }
        }
    }
}

/// In-memory state shared by the ops of one group; merged into [`WriterState`] after commit.
#[derive(Default)]
pub(crate) struct Delta {
    pub counters: BTreeMap<String, i64>,
    pub usage: HashMap<(String, String), UsageAgg>,
    /// New events' health inputs per session, folded at the end of the group ([`super::health`]).
    pub status: BTreeMap<String, Vec<apiary_schema::status::Input>>,
    pub new_sessions: HashSet<String>,
    /// Claimed in this group.
    pub claimed: HashMap<Uuid, ClaimedRow>,
    pub settled: Vec<Uuid>,
    /// Where the next claim's scan starts, after a claim in this group.
    pub claim_cursor: Option<i64>,
    /// Set by a full claim scan in this group: the next routine full rescan (Unix ms).
    pub rescan_reset: Option<i64>,
    /// Rows behind the cursor become claimable at this time (Unix ms) at the latest: a retry falls due, a
    /// claim is released or its lease runs out, held rows are let go.
    pub rescan_at: Option<i64>,
}

impl Delta {
    /// Asks for a full claim scan from `at_ms` on.
    pub fn rescan_from(&mut self, at_ms: i64) {
        self.rescan_at = Some(self.rescan_at.map_or(at_ms, |t| t.min(at_ms)));
    }
}

/// A claimed row: where it is and the body bytes it holds (settling subtracts them from the pending
/// bytes without reading the row back).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimedRow {
    pub seq: i64,
    pub bytes: i64,
}

/// Claims scan the uploadable rows from a cursor (`seq` above the last row looked at) instead of from
/// the start, so a claim does not walk past the rows still in flight or waiting for a retry. Rows behind
/// the cursor become claimable again through a retry falling due, a release or consent letting held rows
/// go; each of those schedules a full scan ([`Delta::rescan_from`]). A full scan also runs every
/// [`FULL_SCAN_EVERY`], which covers expired leases ([`CLAIM_LEASE`] is far longer) and changes made by
/// another process (e.g. `sync enable --include-backlog` from the CLI).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ClaimCursor {
    pub after_seq: i64,
    /// A claim at or after this time (Unix ms) scans from the start.
    pub rescan_at: i64,
}

impl ClaimCursor {
    /// This cursor with a group's changes applied (what the writer keeps after the group commits, and
    /// what a later claim in the same group starts from).
    pub fn with(self, delta: &Delta) -> ClaimCursor {
        let rescan_at = delta.rescan_reset.unwrap_or(self.rescan_at);
        ClaimCursor {
            after_seq: delta.claim_cursor.unwrap_or(self.after_seq),
            rescan_at: delta.rescan_at.map_or(rescan_at, |t| t.min(rescan_at)),
        }
    }
}

/// The longest a claimable row behind the cursor can wait for its full scan.
pub const FULL_SCAN_EVERY: Duration = Duration::from_secs(10);

/// State owned by the writer thread across groups.
#[derive(Default)]
pub(crate) struct WriterState {
    /// Sessions already in the registry (a cache; the table is the truth).
    pub known_sessions: HashSet<String>,
    /// Rows handed to the push loop and not yet settled: event id → (row, when claimed). Settling finds
    /// its rows through this map (there is no index on `event_id` alone; see `schema`).
    pub in_flight: HashMap<Uuid, (ClaimedRow, Instant)>,
    /// The `policies.id` of the policy events are redacted under now.
    pub policy_id: i64,
    /// That policy's hash (recorded with consent).
    pub policy_hash: String,
    /// Identity defaults for sessions first seen here.
    pub defaults: super::IdentityDefaults,
    pub claims: ClaimCursor,
}

impl WriterState {
    pub fn is_in_flight(&self, id: &Uuid, delta: &Delta) -> bool {
        if delta.claimed.contains_key(id) {
            return true;
        }
        self.in_flight
            .get(id)
            .is_some_and(|(_, at)| at.elapsed() < CLAIM_LEASE)
    }

    /// The row of a claimed (in-flight) event, whatever the age of its claim.
    pub fn claimed_row(&self, id: &Uuid, delta: &Delta) -> Option<ClaimedRow> {
        delta
            .claimed
            .get(id)
            .copied()
            .or_else(|| self.in_flight.get(id).map(|(row, _)| *row))
    }

    fn merge(&mut self, delta: Delta) {
        self.claims = self.claims.with(&delta);
        self.known_sessions.extend(delta.new_sessions);
        let now = Instant::now();
        for id in delta.settled {
            self.in_flight.remove(&id);
        }
        for (id, row) in delta.claimed {
            self.in_flight.insert(id, (row, now));
        }
        if self.in_flight.len() > 100_000 {
            self.in_flight
                .retain(|_, (_, at)| at.elapsed() < CLAIM_LEASE * 4);
        }
    }
}

/// The writer's health, readable without going through the queue.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Health {
    /// `ok`, `disk_full` or `error`.
    pub state: &'static str,
    /// Since when the current error state holds.
    pub since: Option<DateTime<Utc>>,
    /// The last database error, if the writer is unhealthy.
    pub last_error: Option<String>,
    /// Bytes used by the database (used pages × page size) after the last commit.
    pub used_bytes: u64,
    /// Whether the last submission was refused because the cap was reached.
    pub at_cap: bool,
    /// When the last group committed.
    pub last_commit_at: Option<DateTime<Utc>>,
    /// Group commits since start, and the ops they carried (ops / commits = the grouping factor).
    pub commits: u64,
    pub ops_committed: u64,
}

pub(crate) type SharedHealth = Arc<Mutex<Health>>;

pub(crate) struct Writer {
    pub conn: Connection,
    pub state: WriterState,
    pub settings: OutboxSettings,
    pub health: SharedHealth,
    pub wal: Arc<WalControl>,
}

pub(crate) type Job = Box<dyn Op>;

impl Writer {
    /// Runs until every sender is gone or a close op was processed.
    pub fn run(mut self, rx: Receiver<Job>) {
        let mut last_prune = Instant::now();
        loop {
            let first = match rx.recv_timeout(IDLE_TICK) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    self.try_housekeeping(&mut last_prune);
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut jobs = vec![first];
            let mut weight = jobs[0].weight();
            while weight < GROUP_MAX_EVENTS && !jobs.last().is_some_and(|j| j.is_close()) {
                match rx.try_recv() {
                    Ok(job) => {
                        weight += job.weight();
                        jobs.push(job);
                    }
                    Err(_) => break,
                }
            }
            let close = jobs.iter().any(|j| j.is_close());
            self.try_commit_jobs(jobs);
            if close {
                break;
            }
            checkpointer::try_restart(&self.conn, &self.wal);
            if last_prune.elapsed() > Duration::from_secs(600) {
                self.try_housekeeping(&mut last_prune);
            }
        }
        tracing::debug!("outbox writer stopped");
    }

    fn try_commit_jobs(&mut self, mut jobs: Vec<Job>) {
        match self.try_group(&mut jobs) {
            Ok(delta) => {
                self.state.merge(delta);
                for job in jobs {
                    job.finish(Ok(()));
                }
            }
            Err(e) if is_fatal(&e) || jobs.len() == 1 => {
                let err = self.record_failure(e);
                for job in jobs {
                    job.finish(Err(err.clone()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, ops = jobs.len(), "group failed; retrying its ops one by one");
                for job in jobs {
                    self.try_commit_jobs(vec![job]);
                }
            }
        }
    }

    /// One transaction over `jobs`.
    fn try_group(&mut self, jobs: &mut [Job]) -> rusqlite::Result<Delta> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut delta = Delta::default();
        let sync_enabled = store::sync_enabled(&tx)?;
        let mut ctx = Ctx {
            conn: &tx,
            state: &self.state,
            delta: &mut delta,
            settings: &self.settings,
            now_ms: Utc::now().timestamp_millis(),
            sync_enabled,
        };
        for job in jobs.iter_mut() {
            job.apply(&mut ctx)?;
        }
        store::flush_delta(&tx, &delta)?;
        let used = store::used_bytes(&tx)?;
        tx.commit()?;
        self.record_success(used, jobs.len());
        Ok(delta)
    }

    fn record_success(&self, used_bytes: u64, ops: usize) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if h.state != "ok" {
            tracing::info!(was = h.state, "outbox writes recovered");
        }
        h.state = "ok";
        h.since = None;
        h.last_error = None;
        h.used_bytes = used_bytes;
        h.last_commit_at = Some(Utc::now());
        h.commits += 1;
        h.ops_committed += ops as u64;
    }

    fn record_failure(&self, e: rusqlite::Error) -> OutboxError {
        let err = OutboxError::from_sqlite(e);
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let state = match err {
            OutboxError::DiskFull => "disk_full",
            _ => "error",
        };
        if h.state != state {
            tracing::error!(error = %err, "outbox write failed");
            h.since = Some(Utc::now());
        }
        h.state = state;
        h.last_error = Some(err.to_string());
        err
    }

    /// Idle work: a write probe while unhealthy, tombstone pruning now and then.
    fn try_housekeeping(&mut self, last_prune: &mut Instant) {
        let unhealthy = self.health.lock().map(|h| h.state != "ok").unwrap_or(true);
        if unhealthy {
            let mut probe: Vec<Job> = vec![Box::new(Probe)];
            self.try_commit_jobs(std::mem::take(&mut probe));
        }
        if last_prune.elapsed() > Duration::from_secs(600) {
            *last_prune = Instant::now();
            let cutoff = Utc::now().timestamp_millis()
                - self.settings.dedup_retention_hours as i64 * 3_600_000;
            match store::prune_tombstones_before(&self.conn, cutoff, 50_000) {
                Ok(n) if n > 0 => tracing::info!(pruned = n, "old tombstones pruned"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "tombstone pruning failed"),
            }
        }
    }
}

/// True for errors about the database as a whole (retrying op by op would not help).
fn is_fatal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(
            ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::ReadOnly
                | ErrorCode::CannotOpen
                | ErrorCode::DatabaseCorrupt
                | ErrorCode::NotADatabase
                | ErrorCode::OutOfMemory
        )
    )
}

/// A tiny write that tells whether the database accepts writes again.
struct Probe;

impl Op for Probe {
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
        store::set_meta(ctx.conn, "last_probe_at", &ctx.now_ms.to_string())
    }
    fn finish(self: Box<Self>, _: Result<(), OutboxError>) {}
}

/// Asks the writer to stop after the group it is in.
pub(crate) struct Close(pub tokio::sync::oneshot::Sender<()>);

impl Op for Close {
    fn apply(&mut self, _: &mut Ctx<'_>) -> rusqlite::Result<()> {
        Ok(())
    }
    fn finish(self: Box<Self>, _: Result<(), OutboxError>) {
        let _ = self.0.send(());
    }
    fn is_close(&self) -> bool {
        true
    }
}

/// An op's result and the channel it goes back on: set during `apply`, sent in `finish`.
pub(crate) struct Reply<T> {
    result: Option<Result<T, OutboxError>>,
    tx: Option<tokio::sync::oneshot::Sender<Result<T, OutboxError>>>,
}

impl<T> Reply<T> {
    pub fn new() -> (
        Reply<T>,
        tokio::sync::oneshot::Receiver<Result<T, OutboxError>>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (
            Reply {
                result: None,
                tx: Some(tx),
            },
            rx,
        )
    }

    /// Forgets the result of an earlier run (ops may be applied twice).
    pub fn reset(&mut self) {
        self.result = None;
    }

    pub fn set(&mut self, result: Result<T, OutboxError>) {
        self.result = Some(result);
    }

    /// Sends the op's result if the group committed, else the group's error.
    pub fn send(&mut self, committed: Result<(), OutboxError>) {
        let result =
            committed.and_then(|()| self.result.take().unwrap_or(Err(OutboxError::Closed)));
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::outbox::{IdentityDefaults, Item, Outbox, OutboxSettings, PreparedEvent};
    use apiary_schema::{EventKind, Policy};
    use uuid::Uuid;

    fn item(n: u128) -> Item {
        Item::Kept(PreparedEvent {
            event_id: Uuid::from_u128(n),
            kind: EventKind::ToolCall,
            session_id: Some("s".into()),
            parent_session_id: None,
            occurred_at_ms: 0,
            body: format!("{{\"n\":{n}}}"),
            usage: None,
            status: None,
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_submissions_share_commits_and_all_resolve_after_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let policy = Policy::default_policy();
        let outbox = Outbox::open(
            &dir.path().join("o.db"),
            OutboxSettings::default(),
            IdentityDefaults::default(),
            &policy,
        )
        .unwrap();
        let tasks: Vec<_> = (0..400u128)
            .map(|n| {
                let o = outbox.clone();
                tokio::spawn(async move { o.submit(vec![item(n)]).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap().accepted, 1);
        }
        let h = outbox.health();
        assert_eq!(h.ops_committed, 400);
        assert!(
            h.commits < 400,
            "no grouping happened: {} commits",
            h.commits
        );
        let st = outbox.status().await.unwrap().stored;
        assert_eq!(st.pending_events, 400);
        outbox.close().await;
        assert!(outbox.submit(vec![item(1)]).await.is_err(), "closed");
    }
}
