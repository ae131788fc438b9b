//! [`Outbox`]: the cloneable async handle over the writer thread and a read connection.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiary_schema::{BatchResponse, Policy, SessionBinding};
use chrono::Utc;
use rusqlite::Connection;
use serde::Serialize;
use uuid::Uuid;

use super::checkpointer::WalControl;
use super::consent::SetSync;
use super::delivery::{Claim, Settle, SettleKind};
use super::drops::DropReport;
use super::export::{self, MarkExported};
use super::intake::Submit;
use super::read::{self, SessionUsage, StoredStatus};
use super::sessions::Register;
use super::writer::{Close, Health, Job, Op, Reply, SharedHealth, Writer, WriterState};
use super::*;
use crate::identity::SessionRegistration;
use crate::tail::sink::Checkpoint;

/// The outbox handle. Cheap to clone; the writer thread stops when [`Outbox::close`] is called or the
/// last clone is dropped.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

struct Inner {
    tx: Mutex<Option<Sender<Job>>>,
    reader: Arc<Mutex<Connection>>,
    health: SharedHealth,
    path: PathBuf,
    settings: OutboxSettings,
    policy_hash: String,
    device_id: String,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    checkpointer: Mutex<Option<std::thread::JoinHandle<()>>>,
    wal: Arc<WalControl>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.wal.stop.store(true, Ordering::Relaxed);
    }
}

/// `GET /v1/status` and `apiary-agent status`: what is stored plus the writer's live health.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    #[serde(flatten)]
    pub stored: StoredStatus,
    pub max_bytes: u64,
    pub overflow: Overflow,
    pub policy_hash: String,
    pub health: Health,
}

impl Outbox {
    /// Opens (creating and migrating) the outbox at `path` and starts its writer thread.
    pub fn open(
        path: &Path,
        settings: OutboxSettings,
        identity: IdentityDefaults,
        policy: &Policy,
    ) -> Result<Outbox, OutboxError> {
        let open_err = |e: &dyn std::fmt::Display| OutboxError::Open {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::private::ensure_dir(dir).map_err(|e| open_err(&e))?;
        }
        crate::private::prepare_database(path).map_err(|e| open_err(&e))?;
        let mut conn = store::open_writer(path, &settings).map_err(|e| open_err(&e))?;
        schema::migrate(&mut conn).map_err(|e| OutboxError::Migrate(e.to_string()))?;
        let now = Utc::now().timestamp_millis();
        let device_id = try_device_id(&conn, identity.device_id.as_deref())?;
        let policy_id =
            store::ensure_policy(&conn, policy.hash(), policy.name(), policy.version(), now)?;
        let state = WriterState {
            policy_id,
            policy_hash: policy.hash().to_string(),
            defaults: IdentityDefaults {
                device_id: Some(device_id.clone()),
                ..identity
            },
            ..WriterState::default()
        };
        let health: SharedHealth = Arc::new(Mutex::new(Health {
            state: "ok",
            used_bytes: store::used_bytes(&conn)?,
            ..Health::default()
        }));
        let reader = store::open_reader(path).map_err(|e| open_err(&e))?;
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let wal = Arc::new(WalControl::default());
        let writer = Writer {
            conn,
            state,
            settings: settings.clone(),
            health: health.clone(),
            wal: wal.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("outbox-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| open_err(&e))?;
        let (db, control) = (path.to_path_buf(), wal.clone());
        let checkpointer = std::thread::Builder::new()
            .name("outbox-checkpointer".into())
            .spawn(move || super::checkpointer::run(&db, control))
            .map_err(|e| open_err(&e))?;
        Ok(Outbox {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
                reader: Arc::new(Mutex::new(reader)),
                health,
                path: path.to_path_buf(),
                settings,
                policy_hash: policy.hash().to_string(),
                device_id,
                thread: Mutex::new(Some(thread)),
                checkpointer: Mutex::new(Some(checkpointer)),
                wal,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// This device's id (configured, or generated at first open).
    pub fn device_id(&self) -> &str {
        &self.inner.device_id
    }

    /// The hash of the policy events are redacted under now.
    pub fn policy_hash(&self) -> &str {
        &self.inner.policy_hash
    }

    fn send(&self, job: Job) -> Result<(), OutboxError> {
        let guard = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .ok_or(OutboxError::Closed)?
            .send(job)
            .map_err(|_| OutboxError::Closed)
    }

    pub(super) async fn run<T, O: Op + 'static>(
        &self,
        make: impl FnOnce(Reply<T>) -> O,
    ) -> Result<T, OutboxError> {
        let (reply, rx) = Reply::new();
        self.send(Box::new(make(reply)))?;
        rx.await.map_err(|_| OutboxError::Closed)?
    }

    /// Commits processed items; resolves once they are durable.
    pub async fn submit(&self, items: Vec<Item>) -> Result<SubmitReport, OutboxError> {
        self.run(|reply| Submit {
            items,
            checkpoint: None,
            reply,
        })
        .await
    }

    /// Commits items and the tailer's checkpoint in one transaction.
    pub async fn submit_with_checkpoint(
        &self,
        items: Vec<Item>,
        checkpoint: Checkpoint,
    ) -> Result<SubmitReport, OutboxError> {
        self.run(|reply| Submit {
            items,
            checkpoint: Some(checkpoint),
            reply,
        })
        .await
    }

    /// `POST /v1/sessions`.
    pub async fn register_session(
        &self,
        registration: SessionRegistration,
    ) -> Result<SessionBinding, OutboxError> {
        self.run(|reply| Register {
            registration,
            reply,
        })
        .await
    }

    /// Switches sync (consent) on or off, or pauses it.
    pub async fn set_sync(&self, change: SyncChange) -> Result<SyncReport, OutboxError> {
        self.run(|reply| SetSync { change, reply }).await
    }

    /// Claims a batch of uploadable events (see [`delivery`]).
    pub async fn claim(&self, limits: ClaimLimits) -> Result<Claimed, OutboxError> {
        self.run(|reply| Claim { limits, reply }).await
    }

    /// The ingest stored (or already had) these events.
    pub async fn ack(&self, acks: Vec<(Uuid, Delivery)>) -> Result<SettleReport, OutboxError> {
        self.settle(SettleKind::Ack(acks)).await
    }

    /// The ingest refused these events: dead-letter them with the reason.
    pub async fn reject(
        &self,
        rejections: Vec<(Uuid, String)>,
    ) -> Result<SettleReport, OutboxError> {
        self.settle(SettleKind::Reject(rejections)).await
    }

    /// Sending failed: count an attempt and retry no sooner than `delay` from now.
    pub async fn fail(
        &self,
        ids: Vec<Uuid>,
        delay: Duration,
        error: impl Into<String>,
    ) -> Result<SettleReport, OutboxError> {
        let error = error.into();
        self.settle(SettleKind::Fail { ids, delay, error }).await
    }

    /// Gives claimed events back untouched (e.g. shutdown before sending).
    pub async fn release(&self, ids: Vec<Uuid>) -> Result<SettleReport, OutboxError> {
        self.settle(SettleKind::Release(ids)).await
    }

    /// Applies an ingest response to the batch `sent`: rejected ids are dead-lettered, every other id is
    /// delivered (the response counts duplicates but does not name them).
    pub async fn settle_response(
        &self,
        sent: &[Uuid],
        response: &BatchResponse,
    ) -> Result<SettleReport, OutboxError> {
        let rejected: std::collections::HashMap<Uuid, String> = response
            .rejected
            .iter()
            .map(|r| (r.event_id, r.reason.clone()))
            .collect();
        let acks = sent
            .iter()
            .filter(|id| !rejected.contains_key(id))
            .map(|id| (*id, Delivery::Delivered))
            .collect();
        let mut report = self.ack(acks).await?;
        let rejections: Vec<(Uuid, String)> = rejected
            .into_iter()
            .filter(|(id, _)| sent.contains(id))
            .collect();
        if !rejections.is_empty() {
            let r = self.reject(rejections).await?;
            report.settled += r.settled;
            report.not_pending += r.not_pending;
        }
        Ok(report)
    }

    async fn settle(&self, kind: SettleKind) -> Result<SettleReport, OutboxError> {
        self.run(|reply| Settle { kind, reply }).await
    }

    /// Turns unreported evictions and dead letters into `outbox.dropped` events (pending, uploaded like
    /// any other). Returns their ids.
    pub async fn enqueue_drop_report(&self) -> Result<Vec<Uuid>, OutboxError> {
        self.run(|reply| DropReport { reply }).await
    }

    /// Stores the push loop's last result (shown by `status` as `last_push`).
    pub async fn record_push(&self, result: serde_json::Value) -> Result<(), OutboxError> {
        self.run(|reply| SetMeta {
            key: "last_push",
            value: result.to_string(),
            reply,
        })
        .await
    }

    /// Writes every pending event to a bundle at `out` and marks them exported (see [`super::export`]:
    /// the bundle comes from a read snapshot, and the rows are marked in chunks, so intake goes on).
    pub async fn export(&self, out: &Path) -> Result<ExportReport, OutboxError> {
        self.export_with(out, std::future::ready(())).await
    }

    /// [`Outbox::export`], awaiting `between` after the bundle is written and before any row is marked
    /// (only tests pass anything but a ready future: see `test_hooks`).
    pub(super) async fn export_with(
        &self,
        out: &Path,
        between: impl std::future::Future<Output = ()>,
    ) -> Result<ExportReport, OutboxError> {
        let (path, out) = (self.inner.path.clone(), out.to_path_buf());
        let (device, policy) = (self.inner.device_id.clone(), self.inner.policy_hash.clone());
        let snapshot = tokio::task::spawn_blocking(move || {
            let conn = store::open_reader(&path).map_err(OutboxError::from)?;
            export::write_snapshot(&conn, &out, &device, &policy)
        })
        .await
        .map_err(|e| OutboxError::Export(e.to_string()))??;
        between.await;
        let mut report = snapshot.report;
        let (mut after, last) = (0, snapshot.last_seq);
        loop {
            let step = self
                .run(|reply| MarkExported { after, last, reply })
                .await?;
            report.marked += step.marked;
            if step.done {
                break;
            }
            after = step.upto;
        }
        Ok(report)
    }

    /// The writer's live health.
    pub fn health(&self) -> Health {
        self.inner
            .health
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default()
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, OutboxError> {
        let reader = self.inner.reader.clone();
        tokio::task::spawn_blocking(move || {
            let conn = reader.lock().unwrap_or_else(|p| p.into_inner());
            f(&conn).map_err(OutboxError::from)
        })
        .await
        .map_err(|e| OutboxError::Database(e.to_string()))?
    }

    /// Stored status plus live health.
    pub async fn status(&self) -> Result<Status, OutboxError> {
        let stored = self.read(read::stored_status).await?;
        Ok(Status {
            stored,
            max_bytes: self.inner.settings.max_bytes,
            overflow: self.inner.settings.overflow,
            policy_hash: self.inner.policy_hash.clone(),
            health: self.health(),
        })
    }

    /// Local usage of a session and its workers; `None` if never seen.
    pub async fn session_usage(&self, session: &str) -> Result<Option<SessionUsage>, OutboxError> {
        let session = session.to_string();
        self.read(move |c| read::session_usage(c, &session)).await
    }

    /// Local status of a session (the shared health model) at `now`; `None` if never seen.
    pub async fn session_status(
        &self,
        session: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<super::health::SessionStatus>, OutboxError> {
        let session = session.to_string();
        self.read(move |c| super::health::session_status(c, &session, now))
            .await
    }

    /// Every tailer checkpoint.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, OutboxError> {
        self.read(read::checkpoints).await
    }

    /// Runs any read-only query on the read connection.
    pub async fn read_with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, OutboxError> {
        self.read(f).await
    }

    /// Finishes the queued work, stops the writer thread and waits for it.
    pub async fn close(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.send(Box::new(Close(tx))).is_ok() {
            let _ = rx.await;
        }
        self.inner
            .tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let thread = self
            .inner
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        self.inner.wal.stop.store(true, Ordering::Relaxed);
        let checkpointer = self
            .inner
            .checkpointer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = checkpointer {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

/// The configured device id, else the one stored at first open, else a new one (stored).
fn try_device_id(conn: &Connection, configured: Option<&str>) -> Result<String, OutboxError> {
    if let Some(id) = configured {
        store::set_meta(conn, "device_id", id)?;
        return Ok(id.to_string());
    }
    if let Some(id) = store::get_meta(conn, "device_id")? {
        return Ok(id);
    }
    let id = format!("dev-{}", Uuid::new_v4().simple());
    store::set_meta(conn, "device_id", &id)?;
    Ok(id)
}

struct SetMeta {
    key: &'static str,
    value: String,
    reply: Reply<()>,
}

impl Op for SetMeta {
    fn apply(&mut self, ctx: &mut writer::Ctx<'_>) -> rusqlite::Result<()> {
        store::set_meta(ctx.conn, self.key, &self.value)?;
        self.reply.set(Ok(()));
        Ok(())
    }
    fn finish(mut self: Box<Self>, committed: Result<(), OutboxError>) {
        self.reply.send(committed);
    }
}
