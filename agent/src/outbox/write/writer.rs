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
//!   nobody writes; after a full disk, a commit that wrote no events clears it only once the disk has
//!   room again, see [`Writer::record_success`]);
//! - any other SQL error fails the group too, and then each op is retried alone in its own transaction, so
//!   one bad op cannot fail its neighbours.
//!
//! An op may therefore be applied twice; the [`super::op::Replying`] adaptor forgets an earlier run's
//! answer. In-memory state shared between ops of a group ([`Delta`]) is merged into [`WriterState`]
//! only after a successful commit.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rusqlite::{Connection, ErrorCode, TransactionBehavior};
use serde::{Deserialize, Serialize};

use super::checkpointer::{self, WalControl};
use super::durations;
use super::op::{Ctx, Op};
use super::store;
use crate::outbox::error::OutboxError;
use crate::outbox::record::journal;
use crate::outbox::record::memory::{Delta, WriterState};
use crate::outbox::settings::OutboxSettings;

/// A group stops draining the queue once it holds this many events.
pub const GROUP_MAX_EVENTS: usize = 20_000;
/// How often the writer wakes up when idle (housekeeping, health probe).
const IDLE_TICK: Duration = Duration::from_secs(5);
/// How often it wakes while usage rows of the live stream are due.
const STREAM_TICK: Duration = Duration::from_millis(200);

/// Whether the writer's last write committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthState {
    /// The last group committed.
    #[default]
    Ok,
    /// The last group hit SQLITE_FULL (ENOSPC or the page cap).
    DiskFull,
    /// The last group failed for another database reason.
    Error,
}

impl HealthState {
    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Ok => "ok",
            HealthState::DiskFull => "disk_full",
            HealthState::Error => "error",
        }
    }
}

/// The writer's health, readable without going through the queue.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Health {
    pub state: HealthState,
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
    /// Ops carried by those commits.
    pub ops_committed: u64,
}

pub(crate) type SharedHealth = Arc<Mutex<Health>>;

/// The writer thread's own data.
pub(crate) struct Writer {
    /// The only writing connection.
    pub conn: Connection,
    /// What the writer keeps across groups.
    pub state: WriterState,
    pub settings: OutboxSettings,
    /// Shared with the handle, which reads it without going through the queue.
    pub health: SharedHealth,
    /// Checkpoint requests from the checkpointer thread.
    pub wal: Arc<WalControl>,
    /// Bumped after every commit: the local live stream's subscribers look for new rows then.
    pub live: Arc<tokio::sync::watch::Sender<u64>>,
    /// Usage rows of the live stream wait for their second ([`crate::outbox::record::live::flush`]): wake up
    /// for them.
    pub stream_due: bool,
    /// Frees the answered ops and what is left of their groups' deltas.
    pub reaper: Reaper,
}

/// Frees answered ops on a thread of its own. A submission's items (thousands of owned strings, made
/// on the producers' threads) took 8% of the writer's time to free on a backfill of interleaved
/// sessions, where the writer is the bottleneck; the reaper does it beside it, and frees what is left of
/// each committed group's [`Delta`] (the events' health inputs and work facts, usage maps). Bounded: when it falls
/// behind by [`Reaper::BACKLOG`] groups, the writer waits for it.
pub(crate) struct Reaper(Option<std::sync::mpsc::SyncSender<Box<dyn Send>>>);

impl Reaper {
    const BACKLOG: usize = 4;

    /// Starts the thread; without one (it could not be spawned), ops are freed on the writer.
    pub fn spawn() -> Reaper {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Box<dyn Send>>(Self::BACKLOG);
        let spawned = std::thread::Builder::new()
            .name("outbox-reaper".into())
            .spawn(move || rx.into_iter().for_each(drop));
        match spawned {
            Ok(_) => Reaper(Some(tx)),
            Err(e) => {
                tracing::debug!(error = %e, "no reaper thread; the writer frees its ops");
                Reaper(None)
            }
        }
    }

    /// Frees `garbage` (answered ops, a committed group's leftovers) on the reaper's thread.
    fn discard<T: Send + 'static>(&self, garbage: T) {
        if let Some(tx) = &self.0 {
            // A gone reaper hands it back: freed here.
            let _ = tx.send(Box::new(garbage));
        }
    }
}

pub(crate) type Job = Box<dyn Op>;

impl Writer {
    /// Runs until every sender is gone or a close op was processed.
    pub fn run(mut self, rx: Receiver<Job>) {
        let mut last_prune = Instant::now();
        loop {
            let tick = if self.stream_due {
                STREAM_TICK
            } else {
                IDLE_TICK
            };
            let first = match rx.recv_timeout(tick) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if self.stream_due {
                        self.try_commit_jobs(vec![Box::new(Probe)]);
                    }
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
                // Answered before the writer's own bookkeeping: the state is the writer's alone (every
                // read goes to the database), and a producer answered now has its next op queued behind it.
                for job in &mut jobs {
                    job.finish(Ok(()));
                }
                let rest = self.state.merge(delta);
                self.reaper.discard((jobs, rest));
            }
            Err(e) if is_fatal(&e) || jobs.len() == 1 => {
                self.reload_journal();
                let err = self.record_failure(e);
                for job in &mut jobs {
                    job.finish(Err(err.clone()));
                }
                self.reaper.discard(jobs);
            }
            Err(e) => {
                self.reload_journal();
                tracing::warn!(error = %e, ops = jobs.len(), "group failed; retrying its ops one by one");
                for job in jobs {
                    self.try_commit_jobs(vec![job]);
                }
            }
        }
    }

    /// A failed group may have counted journal rows it rolled back: count them again.
    fn reload_journal(&mut self) {
        self.state.journal = journal::JournalState::load(&self.conn).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the fold journal's size; compacting it at the next group");
            journal::JournalState {
                rows: journal::COMPACT_ROWS,
                ..Default::default()
            }
        });
    }

    /// One transaction over `jobs`.
    fn try_group(&mut self, jobs: &mut [Job]) -> rusqlite::Result<Delta> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut delta = Delta::default();
        let sync_enabled = store::sync_enabled(&tx)?;
        let now_ms = Utc::now().timestamp_millis();
        let mut ctx = Ctx {
            conn: &tx,
            state: &self.state,
            delta: &mut delta,
            settings: &self.settings,
            now_ms,
            sync_enabled,
        };
        for job in jobs.iter_mut() {
            job.apply(&mut ctx)?;
        }
        store::flush_delta(
            &tx,
            &mut delta,
            &mut self.state.folds,
            &mut self.state.journal,
        )?;
        let touched: std::collections::BTreeSet<&str> =
            delta.usage.keys().map(String::as_str).collect();
        self.stream_due =
            crate::outbox::record::live::flush(&tx, touched, &delta.trackers, now_ms)?;
        let used = store::used_bytes(&tx)?;
        let wrote_events = jobs.iter().any(|j| j.writes_events());
        #[cfg(any(test, feature = "test-hooks"))]
        if wrote_events {
            super::commit_hook::park_before_commit();
        }
        tx.commit()?;
        self.record_success(used, jobs.len(), wrote_events);
        Ok(delta)
    }

    /// Records a commit. A commit without events (a probe, a push's claim) clears `disk_full` only once
    /// the disk has room again ([`crate::outbox::disk::LOW_FREE_BYTES`], where `doctor` stops calling it
    /// full): such a commit's few
    /// bytes still fit on a disk that refuses every batch of events, and health would flip to ok
    /// between two refused requests. A commit that wrote events clears it at any free space.
    fn record_success(&self, used_bytes: u64, ops: usize, wrote_events: bool) {
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let still_full = !wrote_events
            && h.state == HealthState::DiskFull
            && self
                .free_bytes()
                .is_some_and(|free| free < crate::outbox::disk::LOW_FREE_BYTES);
        if !still_full {
            if h.state != HealthState::Ok {
                tracing::info!(was = h.state.as_str(), "outbox writes recovered");
            }
            h.state = HealthState::Ok;
            h.since = None;
            h.last_error = None;
        }
        h.used_bytes = used_bytes;
        h.last_commit_at = Some(Utc::now());
        h.commits += 1;
        h.ops_committed += ops as u64;
        drop(h);
        self.live.send_modify(|g| *g = g.wrapping_add(1));
    }

    /// Free space on the outbox's file system (`None`: unknown, or an in-memory database).
    fn free_bytes(&self) -> Option<u64> {
        let path = self.conn.path().filter(|p| !p.is_empty())?;
        crate::outbox::disk::free_bytes(std::path::Path::new(path).parent()?)
    }

    fn record_failure(&self, e: rusqlite::Error) -> OutboxError {
        let err = OutboxError::from_sqlite(e);
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let state = match err {
            OutboxError::DiskFull => HealthState::DiskFull,
            _ => HealthState::Error,
        };
        let detailed = err.detailed();
        if h.state != state {
            tracing::error!(error = %detailed, "outbox write failed");
            h.since = Some(Utc::now());
        }
        h.state = state;
        h.last_error = Some(detailed);
        err
    }

    /// Idle work: a write probe while unhealthy, tombstone pruning now and then.
    fn try_housekeeping(&mut self, last_prune: &mut Instant) {
        let unhealthy = self
            .health
            .lock()
            .map(|h| h.state != HealthState::Ok)
            .unwrap_or(true);
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
            match crate::outbox::record::live::prune(&self.conn, Utc::now().timestamp_millis()) {
                Ok(n) if n > 0 => tracing::info!(pruned = n, "old live stream rows pruned"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "live stream pruning failed"),
            }
            let started_before = Utc::now().timestamp_millis() - durations::START_TTL_MS;
            match durations::expire(&self.conn, started_before) {
                Ok(left) => self.state.open_tool_starts = left,
                Err(e) => tracing::warn!(error = %e, "expiring open tool-call starts failed"),
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
    fn finish(&mut self, _: Result<(), OutboxError>) {}
}

/// Asks the writer to stop after the group it is in.
pub(crate) struct Close(pub Option<tokio::sync::oneshot::Sender<()>>);

impl Op for Close {
    fn apply(&mut self, _: &mut Ctx<'_>) -> rusqlite::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: Result<(), OutboxError>) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
    fn is_close(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use crate::identity::IdentityDefaults;
    use crate::outbox::{Item, Outbox, OutboxSettings, PreparedEvent};
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
            work: None,
            tool: None,
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
