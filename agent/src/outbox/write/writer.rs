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
    pub fn run(self, rx: Receiver<Job>) {
        self.run_pruned_at(rx, Instant::now());
    }

    /// [`Self::run`], the last tombstone pruning taken as done at `last_prune` (a test starts it ten
    /// minutes back, to see a busy writer prune).
    fn run_pruned_at(mut self, rx: Receiver<Job>, mut last_prune: Instant) {
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
        if !stays_full(wrote_events, h.state, || self.free_bytes()) {
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

/// Whether a commit leaves `disk_full` standing (see [`Writer::record_success`]): it wrote no events,
/// and the disk is still short of room (`free_bytes`, asked only then: unknown counts as room).
fn stays_full(
    wrote_events: bool,
    state: HealthState,
    free_bytes: impl FnOnce() -> Option<u64>,
) -> bool {
    !wrote_events
        && state == HealthState::DiskFull
        && free_bytes().is_some_and(|free| free < crate::outbox::disk::LOW_FREE_BYTES)
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
    use super::*;
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

    /// What the test ops were answered, in the order they were answered: (name, committed).
    type Answers = Arc<Mutex<Vec<(&'static str, bool)>>>;

    /// A test op: writes `value` under its name in `meta` (after a statement on a missing table when
    /// `fails`: an SQL error that is not about the database), and notes its answer.
    struct Noted {
        name: &'static str,
        value: String,
        weight: usize,
        fails: bool,
        answers: Answers,
    }

    impl Noted {
        fn new(name: &'static str, answers: &Answers) -> Noted {
            Noted {
                name,
                value: "applied".into(),
                weight: 1,
                fails: false,
                answers: answers.clone(),
            }
        }
        fn boxed(self) -> Job {
            Box::new(self)
        }
    }

    impl Op for Noted {
        fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
            if self.fails {
                ctx.conn
                    .execute("INSERT INTO no_such_table VALUES (1)", [])?;
            }
            store::set_meta(ctx.conn, self.name, &self.value)
        }
        fn finish(&mut self, committed: Result<(), OutboxError>) {
            self.answers
                .lock()
                .unwrap()
                .push((self.name, committed.is_ok()));
        }
        fn weight(&self) -> usize {
            self.weight
        }
    }

    /// A writer over a new outbox file in `dir`, without its thread: a test hands it ops directly, or
    /// fills its queue and runs it to the end on the test's thread.
    fn writer_in(dir: &std::path::Path) -> Writer {
        let settings = OutboxSettings::default();
        let mut conn = store::open_writer(&dir.join("o.db"), &settings).unwrap();
        crate::outbox::record::schema::migrate(&mut conn).unwrap();
        Writer {
            conn,
            state: WriterState::default(),
            settings,
            health: SharedHealth::default(),
            wal: Arc::new(WalControl::default()),
            live: Arc::new(tokio::sync::watch::Sender::new(0)),
            stream_due: false,
            reaper: Reaper::spawn(),
        }
    }

    fn meta_in(dir: &std::path::Path, key: &str) -> Option<String> {
        let conn = rusqlite::Connection::open(dir.join("o.db")).unwrap();
        store::get_meta(&conn, key).unwrap()
    }

    fn answers_of(answers: &Answers) -> Vec<(&'static str, bool)> {
        answers.lock().unwrap().clone()
    }

    #[test]
    fn a_health_state_reads_as_its_name_in_the_status() {
        for state in [HealthState::Ok, HealthState::DiskFull, HealthState::Error] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.as_str()),
                "{state:?}"
            );
        }
        assert_eq!(HealthState::DiskFull.as_str(), "disk_full");
    }

    #[test]
    fn a_group_stops_draining_the_queue_once_it_holds_the_most_events() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_in(dir.path());
        let health = writer.health.clone();
        let answers = Answers::default();
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        for (name, weight) in [("a", 1), ("b", GROUP_MAX_EVENTS - 1), ("c", 1)] {
            let op = Noted {
                weight,
                ..Noted::new(name, &answers)
            };
            tx.send(op.boxed()).unwrap();
        }
        drop(tx);
        writer.run(rx);
        assert_eq!(
            answers_of(&answers),
            [("a", true), ("b", true), ("c", true)]
        );
        let h = health.lock().unwrap();
        assert_eq!(
            (h.commits, h.ops_committed),
            (2, 3),
            "a and b hold {GROUP_MAX_EVENTS} events: c waits for the next group"
        );
    }

    #[test]
    fn the_writer_stops_after_the_group_that_closes_it_and_applies_nothing_queued_behind() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_in(dir.path());
        let answers = Answers::default();
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let (closed_tx, mut closed) = tokio::sync::oneshot::channel();
        tx.send(Noted::new("before", &answers).boxed()).unwrap();
        tx.send(Box::new(Close(Some(closed_tx)))).unwrap();
        tx.send(Noted::new("behind", &answers).boxed()).unwrap();
        drop(tx);
        writer.run(rx);
        assert!(closed.try_recv().is_ok(), "the close was answered");
        assert_eq!(answers_of(&answers), [("before", true)]);
        assert_eq!(meta_in(dir.path(), "before").as_deref(), Some("applied"));
        assert_eq!(
            meta_in(dir.path(), "behind"),
            None,
            "applied after the close"
        );
    }

    #[test]
    fn a_failing_op_fails_alone_its_neighbours_commit_and_the_failure_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_in(dir.path());
        let health = writer.health.clone();
        let answers = Answers::default();
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        tx.send(Noted::new("a", &answers).boxed()).unwrap();
        tx.send(Noted::new("b", &answers).boxed()).unwrap();
        let bad = Noted {
            fails: true,
            ..Noted::new("bad", &answers)
        };
        tx.send(bad.boxed()).unwrap();
        drop(tx);
        writer.run(rx);
        assert_eq!(
            answers_of(&answers),
            [("a", true), ("b", true), ("bad", false)],
            "retried one by one, only the bad op fails"
        );
        assert_eq!(meta_in(dir.path(), "a").as_deref(), Some("applied"));
        assert_eq!(meta_in(dir.path(), "b").as_deref(), Some("applied"));
        assert_eq!(meta_in(dir.path(), "bad"), None);
        let h = health.lock().unwrap();
        assert_eq!(h.state, HealthState::Error, "until a later commit succeeds");
        assert!(h.since.is_some(), "{h:?}");
        assert!(
            h.last_error
                .as_deref()
                .is_some_and(|e| e.contains("no_such_table")),
            "{h:?}"
        );
    }

    #[test]
    fn a_full_database_fails_the_whole_group_and_a_probe_clears_it_once_the_disk_has_room() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            crate::outbox::disk::free_bytes(dir.path())
                .is_some_and(|free| free >= crate::outbox::disk::LOW_FREE_BYTES),
            "the test needs room on the temporary directory's disk"
        );
        let mut writer = writer_in(dir.path());
        let pages: i64 = writer
            .conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        // Room for one op's value (60 pages), not for two.
        writer
            .conn
            .pragma_update(None, "max_page_count", pages + 100)
            .unwrap();
        let answers = Answers::default();
        let big = |name| Noted {
            value: "x".repeat(60 * store::PAGE_SIZE as usize),
            ..Noted::new(name, &answers)
        };
        writer.try_commit_jobs(vec![big("a").boxed(), big("b").boxed()]);
        assert_eq!(
            answers_of(&answers),
            [("a", false), ("b", false)],
            "a full disk fails the whole group: no op is retried alone"
        );
        let first = writer.health.lock().unwrap().clone();
        assert_eq!(first.state, HealthState::DiskFull);
        assert!(
            first.since.is_some() && first.last_error.is_some(),
            "{first:?}"
        );
        writer.try_commit_jobs(vec![big("a").boxed(), big("b").boxed()]);
        let again = writer.health.lock().unwrap().clone();
        assert_eq!(again.state, HealthState::DiskFull);
        assert_eq!(again.since, first.since, "full since the first failure");
        // Nobody writes; the idle probe's few bytes fit, and the disk has room: healthy again.
        writer.try_housekeeping(&mut Instant::now());
        let h = writer.health.lock().unwrap().clone();
        assert_eq!(h.state, HealthState::Ok, "{h:?}");
        assert_eq!((h.since, h.last_error), (None, None));
    }

    #[test]
    fn a_database_that_refuses_writes_stays_unhealthy_until_a_probe_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        writer.conn.pragma_update(None, "query_only", true).unwrap();
        let answers = Answers::default();
        writer.try_commit_jobs(vec![Noted::new("a", &answers).boxed()]);
        assert_eq!(answers_of(&answers), [("a", false)]);
        let first = writer.health.lock().unwrap().clone();
        assert_eq!(first.state, HealthState::Error);
        assert!(first.since.is_some(), "{first:?}");
        // The idle probe cannot write either.
        writer.try_housekeeping(&mut Instant::now());
        let probed = writer.health.lock().unwrap().clone();
        assert_eq!(probed.state, HealthState::Error, "{probed:?}");
        assert_eq!(probed.since, first.since);
        assert_eq!(meta_in(dir.path(), "last_probe_at"), None);
        writer
            .conn
            .pragma_update(None, "query_only", false)
            .unwrap();
        writer.try_housekeeping(&mut Instant::now());
        let h = writer.health.lock().unwrap().clone();
        assert_eq!(h.state, HealthState::Ok, "{h:?}");
        assert!(meta_in(dir.path(), "last_probe_at").is_some());
    }

    #[test]
    fn a_failed_group_leaves_the_journal_counted_as_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        // The journal takes session a's row and refuses b's: the group fails after counting a's.
        writer
            .conn
            .execute_batch(
                "CREATE TEMP TRIGGER refuse_b BEFORE INSERT ON fold_journal WHEN NEW.session_id = 'b'
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .unwrap();
        let answers = Answers::default();
        writer.try_commit_jobs(vec![Box::new(Pushes {
            sessions: &["a", "b"],
            answers: answers.clone(),
        })]);
        assert_eq!(answers_of(&answers), [("pushes", false)]);
        assert_eq!(writer.state.journal.rows, 0, "a's row was rolled back");
        assert!(writer.state.journal.per_session.is_empty());
    }

    #[test]
    fn a_journal_whose_size_cannot_be_read_after_a_failed_group_is_compacted_next() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        // A view of this connection in front of the table: the journal can be neither written nor read.
        writer
            .conn
            .execute_batch("CREATE TEMP VIEW fold_journal AS SELECT 1 AS unrelated")
            .unwrap();
        let answers = Answers::default();
        writer.try_commit_jobs(vec![Box::new(Pushes {
            sessions: &["a"],
            answers: answers.clone(),
        })]);
        assert_eq!(answers_of(&answers), [("pushes", false)]);
        assert!(writer.state.journal.due(), "{:?}", writer.state.journal);
    }

    /// A test op that pushes one health input to each of its sessions (journaled at the group's end).
    struct Pushes {
        sessions: &'static [&'static str],
        answers: Answers,
    }

    impl Op for Pushes {
        fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
            for (n, session) in self.sessions.iter().enumerate() {
                let input = apiary_schema::status::Input {
                    at: Utc::now(),
                    id: Uuid::from_u128(n as u128),
                    what: apiary_schema::status::What::Llm { ends_turn: true },
                    interactive: false,
                };
                ctx.delta
                    .status
                    .entry(session.to_string())
                    .or_default()
                    .push(Arc::new(input));
            }
            Ok(())
        }
        fn finish(&mut self, committed: Result<(), OutboxError>) {
            self.answers
                .lock()
                .unwrap()
                .push(("pushes", committed.is_ok()));
        }
    }

    #[test]
    fn housekeeping_forgets_old_tombstones_and_tool_starts_every_ten_minutes() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer_in(dir.path());
        let now = Utc::now().timestamp_millis();
        let hour = 3_600_000;
        let retention = writer.settings.dedup_retention_hours as i64 * hour;
        for (n, done_at) in [
            (1, now - 60_000),
            (2, now - retention / 2),
            (3, now - retention - hour),
        ] {
            tombstone(&writer.conn, n, done_at);
        }
        for (call, recorded_at) in [
            ("fresh", now - 60_000),
            ("old", now - durations::START_TTL_MS - hour),
        ] {
            writer
                .conn
                .execute(
                    "INSERT INTO tool_starts (session_id, call_key, started_at, recorded_at)
                     VALUES ('s', ?1, 0, ?2)",
                    rusqlite::params![call, recorded_at],
                )
                .unwrap();
        }
        writer.state.open_tool_starts = 2;
        let done_ats = |w: &Writer| -> Vec<i64> {
            let mut s = w
                .conn
                .prepare("SELECT done_at FROM events ORDER BY done_at DESC")
                .unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        let calls = |w: &Writer| -> Vec<String> {
            let mut s = w
                .conn
                .prepare("SELECT call_key FROM tool_starts ORDER BY 1")
                .unwrap();
            s.query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        // Pruned five minutes ago: not yet again.
        let mut last_prune = ago(300);
        writer.try_housekeeping(&mut last_prune);
        assert_eq!(done_ats(&writer).len(), 3);
        assert_eq!(calls(&writer), ["fresh", "old"]);
        // Eleven minutes ago: what is past its age goes, the rest stays.
        let mut last_prune = ago(660);
        writer.try_housekeeping(&mut last_prune);
        assert_eq!(
            done_ats(&writer),
            [now - 60_000, now - retention / 2],
            "tombstones are kept for the dedup retention"
        );
        assert_eq!(calls(&writer), ["fresh"]);
        assert_eq!(writer.state.open_tool_starts, 1);
        assert!(
            last_prune.elapsed() < Duration::from_secs(60),
            "the next prune is ten minutes away"
        );
    }

    /// The instant `secs` seconds ago.
    fn ago(secs: u64) -> Instant {
        Instant::now()
            .checked_sub(Duration::from_secs(secs))
            .expect("the monotonic clock reads more than the test goes back")
    }

    /// Inserts a delivered event's tombstone, finished at `done_at` (Unix ms).
    fn tombstone(conn: &rusqlite::Connection, n: u128, done_at: i64) {
        conn.execute(
            "INSERT INTO events (event_id, state, kind, occurred_at, received_at, policy_id, bytes,
                done_at)
             VALUES (?1, 1, 'tool.call', 0, 0, 1, 0, ?2)",
            rusqlite::params![Uuid::from_u128(n).as_bytes().as_slice(), done_at],
        )
        .unwrap();
    }

    #[test]
    fn a_writer_that_is_never_idle_still_prunes_every_ten_minutes() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_in(dir.path());
        let old = Utc::now().timestamp_millis()
            - (writer.settings.dedup_retention_hours as i64 + 1) * 3_600_000;
        tombstone(&writer.conn, 1, old);
        let answers = Answers::default();
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        tx.send(Noted::new("a", &answers).boxed()).unwrap();
        drop(tx);
        // Last pruned eleven minutes ago; the queue never leaves the writer idle for its tick.
        writer.run_pruned_at(rx, ago(660));
        assert_eq!(answers_of(&answers), [("a", true)]);
        let conn = rusqlite::Connection::open(dir.path().join("o.db")).unwrap();
        let tombstones: i64 = conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            tombstones, 0,
            "the old tombstone was pruned after the group"
        );
    }

    #[test]
    fn a_commit_without_events_leaves_disk_full_standing_only_while_the_disk_is_short_of_room() {
        use crate::outbox::disk::LOW_FREE_BYTES;
        let short = || Some(LOW_FREE_BYTES - 1);
        assert!(stays_full(false, HealthState::DiskFull, short));
        assert!(stays_full(false, HealthState::DiskFull, || Some(0)));
        assert!(
            !stays_full(true, HealthState::DiskFull, short),
            "a commit that wrote events clears it at any free space"
        );
        assert!(
            !stays_full(false, HealthState::DiskFull, || Some(LOW_FREE_BYTES)),
            "room again"
        );
        assert!(
            !stays_full(false, HealthState::DiskFull, || None),
            "unknown"
        );
        assert!(
            !stays_full(false, HealthState::Error, short),
            "only disk_full stays"
        );
        assert!(!stays_full(false, HealthState::Ok, short));
    }

    #[test]
    fn the_writer_reads_the_free_space_of_its_databases_disk() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer_in(dir.path());
        assert!(writer.free_bytes().is_some_and(|free| free > 0));
        let in_memory = Writer {
            conn: rusqlite::Connection::open_in_memory().unwrap(),
            ..writer
        };
        assert_eq!(in_memory.free_bytes(), None, "no disk");
    }
}
