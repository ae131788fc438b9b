//! [`Outbox`]: the cloneable async handle over the writer thread and a read connection.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiary_schema::colony::ColonyNames;
use apiary_schema::{BatchResponse, Policy, SessionBinding};
use chrono::{DateTime, Utc};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::deliver::consent::{SetSync, SyncChange, SyncReport};
use super::deliver::delivery::{
    Claim, ClaimLimits, Claimed, Delivery, Settle, SettleKind, SettleReport,
};
use super::deliver::export::{self, ExportReport, MarkExported};
use super::error::{ExportError, OutboxError};
use super::read::listing::{Cursor, ListFilter, SessionBody, TreeNode};
use super::read::queries::{DeadLetter, SessionUsage, StoredStatus, SyncStatus};
use super::read::quota::{supersedes, KeptQuota};
use super::read::reader::OutboxReader;
use super::read::sent::SentEvent;
use super::record::health::SessionStatus;
use super::record::item::Item;
use super::record::live::{LiveRow, Position, Start};
use super::record::memory::WriterState;
use super::record::schema;
use super::record::usage_time::UsageWindow;
use super::settings::{OutboxSettings, Overflow};
use super::write::checkpointer::{self, WalControl};
use super::write::drops::DropReport;
use super::write::durations;
use super::write::intake::{Submit, SubmitReport};
use super::write::op::{Ctx, Replying, Task};
use super::write::sessions::Register;
use super::write::store;
use super::write::writer::{Close, Health, HealthState, Job, SharedHealth, Writer};
use crate::identity::{IdentityDefaults, SessionRegistration};
use crate::tail::sink::Checkpoint;

/// The outbox handle. Cheap to clone; the writer thread stops when [`Outbox::close`] is called or the
/// last clone is dropped.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

struct Inner {
    /// The writer thread's queue; `None` once closed.
    tx: Mutex<Option<Sender<Job>>>,
    /// The read connection the handle's queries share (one at a time, on blocking threads).
    reader: Arc<Mutex<OutboxReader>>,
    /// The writer's live health (written by the writer thread).
    health: SharedHealth,
    /// The database file.
    path: PathBuf,
    settings: OutboxSettings,
    /// The hash of the policy events are redacted under now.
    policy_hash: String,
    /// This device's id (configured, or generated at first open, or adopted from the sync token while
    /// running: [`Outbox::adopt`]).
    device_id: std::sync::RwLock<String>,
    /// The user events without a session binding of their own are recorded for (configured, or the
    /// push token's), shown on the settings page.
    user_id: std::sync::RwLock<Option<String>>,
    /// The writer thread, joined by [`Outbox::close`].
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The WAL checkpointer thread, joined by [`Outbox::close`].
    checkpointer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Tells the checkpointer to stop (and the writer to restart the WAL).
    wal: Arc<WalControl>,
    /// The colony keyer in force ([`super::deliver::colony`]).
    colony: super::deliver::colony::ColonyKeys,
    /// The hash of the policy widened by colony names (`Policy::with_colony_names`): what a consent
    /// that agrees to the tenant's `names` records.
    policy_hash_with_names: String,
    /// Bumped by the writer after every commit (the live stream's wake-up).
    live: Arc<tokio::sync::watch::Sender<u64>>,
    /// The last budget state the ingest sent (loaded at open, then kept by [`Outbox::keep_quota`]):
    /// `GET /v1/quota` answers from here. Also the lock that orders quota writes (see `keep_quota`).
    quota: Mutex<Option<KeptQuota>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.wal.stop.store(true, Ordering::Relaxed);
    }
}

/// Appends the derived `crashed` transitions of sessions whose runtime was found gone to the live log.
struct RuntimeGone {
    gone: Vec<(String, chrono::DateTime<chrono::Utc>)>,
}

impl Task for RuntimeGone {
    type Output = ();

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<(), OutboxError>> {
        let now = Utc::now();
        for (session, at) in &self.gone {
            if let Some(t) = super::record::health::crashed(ctx.conn, session, *at, now)? {
                super::record::live::status(ctx.conn, session, &t, ctx.now_ms)?;
            }
        }
        Ok(Ok(()))
    }
}

/// `GET /v1/status` and `apiary-agent status`: what is stored plus the writer's live health.
/// Deserialized by `status` and `doctor` from a running agent that may be older: a field it does not
/// send reads as its default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
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
        let io_err = |e| OutboxError::open_io(path, e);
        let conn = try_open_database(path, &settings)?;
        let device_id = try_device_id(&conn, identity.device_id.as_deref())?;
        let defaults = IdentityDefaults {
            device_id: Some(device_id.clone()),
            user_id: match identity.user_id {
                Some(u) => Some(u),
                None => store::get_meta(&conn, TOKEN_USER_KEY)?,
            },
            ..identity
        };
        rebind(&conn, &defaults)?;
        let user_id = defaults.user_id.clone();
        let colony = super::deliver::colony::load(&conn)?;
        let quota = super::read::quota::load(&conn)?;
        let now = Utc::now().timestamp_millis();
        let policy_id =
            store::ensure_policy(&conn, policy.hash(), policy.name(), policy.version(), now)?;
        let state = WriterState {
            policy_id,
            attach_durations: durations::policy_allows(policy),
            open_tool_starts: durations::count(&conn)?,
            journal: super::record::journal::JournalState::load(&conn)?,
            defaults,
            ..WriterState::default()
        };
        let health: SharedHealth = Arc::new(Mutex::new(Health {
            state: HealthState::Ok,
            used_bytes: store::used_bytes(&conn)?,
            ..Health::default()
        }));
        let reader = OutboxReader::open(path)?;
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let wal = Arc::new(WalControl::default());
        let live = Arc::new(tokio::sync::watch::Sender::new(0u64));
        let writer = Writer {
            conn,
            state,
            settings: settings.clone(),
            health: health.clone(),
            wal: wal.clone(),
            live: live.clone(),
            stream_due: true,
            reaper: super::write::writer::Reaper::spawn(),
        };
        let thread = std::thread::Builder::new()
            .name("outbox-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(io_err)?;
        let (db, control) = (path.to_path_buf(), wal.clone());
        let checkpointer = std::thread::Builder::new()
            .name("outbox-checkpointer".into())
            .spawn(move || checkpointer::run(&db, control))
            .map_err(io_err)?;
        Ok(Outbox {
            inner: Arc::new(Inner {
                tx: Mutex::new(Some(tx)),
                reader: Arc::new(Mutex::new(reader)),
                health,
                path: path.to_path_buf(),
                settings,
                policy_hash: policy.hash().to_string(),
                device_id: std::sync::RwLock::new(device_id),
                user_id: std::sync::RwLock::new(user_id),
                thread: Mutex::new(Some(thread)),
                checkpointer: Mutex::new(Some(checkpointer)),
                wal,
                colony,
                policy_hash_with_names: policy.with_colony_names().hash().to_string(),
                live,
                quota: Mutex::new(quota),
            }),
        })
    }

    /// The colony keyer in force, shared (see [`super::deliver::colony`]).
    pub fn colony_keys(&self) -> super::deliver::colony::ColonyKeys {
        self.inner.colony.clone()
    }

    /// Puts the tenant's colony secret (from `GET /v1/whoami`) in force and stores it, unless a different
    /// secret of the same tenant is already stored (kept: keys never change) or it is malformed; both
    /// are logged. True when it changed the keys.
    pub async fn adopt_colony_secret(
        &self,
        tenant_id: &str,
        secret: &str,
    ) -> Result<bool, OutboxError> {
        match self.inner.colony.adopt(tenant_id, secret) {
            super::deliver::colony::Adoption::Store(value) => {
                self.run(SetMeta {
                    key: super::deliver::colony::TENANT_SECRET_KEY,
                    value,
                })
                .await?;
                tracing::info!(tenant_id, "colony keys are now the tenant's (ck_…)");
                Ok(true)
            }
            super::deliver::colony::Adoption::Same => Ok(false),
            super::deliver::colony::Adoption::Refused(why) => {
                tracing::warn!(tenant_id, "{why}");
                Ok(false)
            }
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// This device's id (configured, or generated at first open, or the sync token's).
    pub fn device_id(&self) -> String {
        self.inner
            .device_id
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The default user of this device's sessions (configured, or the push token's), if known.
    pub fn user_id(&self) -> Option<String> {
        self.inner
            .user_id
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts the identity the sync token's answer calls for in force while the agent runs
    /// ([`crate::identity::Adoption`]): the device id and the token's user are stored, sessions first
    /// seen from now on are bound to them, and sessions the ingest never accepted are rebound (as at
    /// open), in one transaction; then the tenant's colony secret. A setting left out keeps this
    /// device's id.
    pub async fn adopt(&self, adoption: &crate::identity::Adoption) -> Result<(), OutboxError> {
        let identity = &adoption.identity;
        let defaults = IdentityDefaults {
            device_id: Some(
                identity
                    .device_id
                    .clone()
                    .unwrap_or_else(|| self.device_id()),
            ),
            user_id: identity.user_id.clone(),
            tenant_id: identity.tenant_id.clone(),
        };
        let remember = adoption.token_user.clone();
        self.run(AdoptIdentity {
            defaults: defaults.clone(),
            token_user: remember,
        })
        .await?;
        if let Some(device) = defaults.device_id.clone() {
            *self
                .inner
                .device_id
                .write()
                .unwrap_or_else(|p| p.into_inner()) = device;
        }
        *self
            .inner
            .user_id
            .write()
            .unwrap_or_else(|p| p.into_inner()) = defaults.user_id.clone();
        if let Some((tenant, secret)) = &adoption.colony_secret {
            self.adopt_colony_secret(tenant, secret).await?;
        }
        if let Some(names) = adoption.colony_names {
            self.adopt_colony_names(names).await?;
        }
        tracing::info!(
            user_id = defaults.user_id.as_deref(),
            device_id = defaults.device_id.as_deref(),
            "identity adopted from the sync token"
        );
        Ok(())
    }

    /// The hash of the policy events are redacted under now.
    pub fn policy_hash(&self) -> &str {
        &self.inner.policy_hash
    }

    /// The hash of that policy widened by colony names: what a consent agreeing to them records.
    pub fn policy_hash_with_names(&self) -> &str {
        &self.inner.policy_hash_with_names
    }

    fn send(&self, job: Job) -> Result<(), OutboxError> {
        let guard = self.inner.tx.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .ok_or(OutboxError::Closed)?
            .send(job)
            .map_err(|_| OutboxError::Closed)
    }

    /// Queues `task` for the writer and waits for its answer (after its group committed).
    pub(super) async fn run<T: Task>(&self, task: T) -> Result<T::Output, OutboxError> {
        let (op, answer) = Replying::new(task);
        self.send(Box::new(op))?;
        answer.await.map_err(|_| OutboxError::Closed)?
    }

    /// Commits processed items; resolves once they are durable.
    pub async fn submit(&self, items: Vec<Item>) -> Result<SubmitReport, OutboxError> {
        self.run(Submit {
            items,
            checkpoint: None,
        })
        .await
    }

    /// Commits items and the tailer's checkpoint in one transaction.
    pub async fn submit_with_checkpoint(
        &self,
        items: Vec<Item>,
        checkpoint: Checkpoint,
    ) -> Result<SubmitReport, OutboxError> {
        self.run(Submit {
            items,
            checkpoint: Some(checkpoint),
        })
        .await
    }

    /// `POST /v1/sessions`.
    pub async fn register_session(
        &self,
        registration: SessionRegistration,
    ) -> Result<SessionBinding, OutboxError> {
        self.run(Register { registration }).await
    }

    /// Switches sync (consent) on or off, or pauses it. Turning it on also agrees to the tenant's colony
    /// names choice as last told (unless the user declined it, see [`super::deliver::colony`]): the consent
    /// records it, in its policy hash too.
    pub async fn set_sync(&self, change: SyncChange) -> Result<SyncReport, OutboxError> {
        let names = matches!(change, SyncChange::Enable { .. })
            .then(|| self.inner.colony.names().at_consent());
        let policy_hash = match names {
            Some(ColonyNames::Names) => self.inner.policy_hash_with_names.clone(),
            _ => self.inner.policy_hash.clone(),
        };
        let report = self
            .run(SetSync {
                change,
                colony_names: names,
                policy_hash,
            })
            .await?;
        if let Some(n) = names {
            self.inner.colony.set_names(|s| s.consent = n);
        }
        Ok(report)
    }

    /// Notes the tenant's colony names choice (from `GET /v1/whoami`): stored, and in force at once
    /// (a `keys` answer stops names leaving; see [`super::deliver::colony`]). True when it changed.
    pub async fn adopt_colony_names(&self, tenant: ColonyNames) -> Result<bool, OutboxError> {
        if self.inner.colony.names().tenant == tenant {
            return Ok(false);
        }
        self.run(SetMeta {
            key: super::deliver::colony::TENANT_NAMES_KEY,
            value: tenant.as_str().to_string(),
        })
        .await?;
        let now = self.inner.colony.set_names(|s| s.tenant = tenant);
        tracing::info!(
            tenant_choice = tenant.as_str(),
            names_leave_the_device = now.in_effect(),
            "the tenant's colony names choice"
        );
        Ok(true)
    }

    /// The user's choice on the settings page: `true` keeps colony names on this device at the next
    /// consent whatever the tenant's choice (and stops them now); `false` lets the next consent agree
    /// to the tenant's.
    pub async fn decline_colony_names(&self, declined: bool) -> Result<(), OutboxError> {
        self.run(SetMeta {
            key: super::deliver::colony::DECLINED_KEY,
            value: if declined { "1" } else { "0" }.to_string(),
        })
        .await?;
        if declined {
            self.run(SetMeta {
                key: super::deliver::colony::CONSENT_NAMES_KEY,
                value: ColonyNames::Keys.as_str().to_string(),
            })
            .await?;
        }
        self.inner.colony.set_names(|s| {
            s.declined = declined;
            if declined {
                s.consent = ColonyNames::Keys;
            }
        });
        Ok(())
    }

    /// Claims a batch of uploadable events (see [`delivery`]).
    pub async fn claim(&self, limits: ClaimLimits) -> Result<Claimed, OutboxError> {
        self.run(Claim { limits }).await
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
        self.run(Settle { kind }).await
    }

    /// Turns unreported evictions and dead letters into `outbox.dropped` events (pending, uploaded like
    /// any other). Returns their ids.
    pub async fn enqueue_drop_report(&self) -> Result<Vec<Uuid>, OutboxError> {
        self.run(DropReport).await
    }

    /// Stores the push loop's last result (shown by `status` as `last_push`).
    pub async fn record_push(&self, result: serde_json::Value) -> Result<(), OutboxError> {
        self.run(SetMeta {
            key: "last_push",
            value: result.to_string(),
        })
        .await
    }

    /// Keeps `quota`, from an ingest answer that just arrived, as the device's budget state (memory and
    /// the `quota` table) unless a later reading is already kept ([`super::read::quota`]). True when it was
    /// kept. The decision and the queueing of the write happen under one lock, so concurrent answers
    /// are written in the order they were decided.
    pub async fn keep_quota(
        &self,
        quota: apiary_schema::quota::Quota,
    ) -> Result<bool, OutboxError> {
        // Milliseconds, as stored: memory and disk answer the same.
        let now = Utc::now();
        let now = chrono::DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
        let answer = {
            let mut kept = self.inner.quota.lock().unwrap_or_else(|p| p.into_inner());
            if !supersedes(&quota, kept.as_ref(), now) {
                return Ok(false);
            }
            let new = KeptQuota {
                quota,
                received_at: now,
            };
            let (op, answer) = Replying::new(SetQuota { kept: new.clone() });
            self.send(Box::new(op))?;
            *kept = Some(new);
            answer
        };
        answer.await.map_err(|_| OutboxError::Closed)??;
        Ok(true)
    }

    /// The last budget state the ingest sent, and when it arrived; `None` until one did.
    pub fn quota(&self) -> Option<KeptQuota> {
        self.inner
            .quota
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Remembers the user the push token is bound to, for starts where `identity.user_id` is unset and
    /// the ingest cannot be asked (`crate::identity`).
    pub async fn remember_token_user(&self, user_id: String) -> Result<(), OutboxError> {
        self.run(SetMeta {
            key: TOKEN_USER_KEY,
            value: user_id,
        })
        .await
    }

    /// Writes every pending event to a bundle at `out` and marks them exported (see
    /// [`super::deliver::export`]: the bundle comes from a read snapshot, and the rows are marked in chunks,
    /// so intake goes on).
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
        let (device, policy) = (self.device_id(), self.inner.policy_hash.clone());
        let snapshot = tokio::task::spawn_blocking(move || {
            let conn = store::open_reader(&path).map_err(ExportError::read)?;
            export::write_snapshot(&conn, &out, &device, &policy)
        })
        .await
        .map_err(|e| OutboxError::Export(ExportError::Task(Arc::new(e))))??;
        between.await;
        let mut report = snapshot.report;
        let (mut after, last) = (0, snapshot.last_seq);
        loop {
            let step = self.run(MarkExported { after, last }).await?;
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

    /// Runs one of the reader's queries on a blocking thread.
    pub(super) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&OutboxReader) -> Result<T, OutboxError> + Send + 'static,
    ) -> Result<T, OutboxError> {
        let reader = self.inner.reader.clone();
        tokio::task::spawn_blocking(move || f(&reader.lock().unwrap_or_else(|p| p.into_inner())))
            .await
            .map_err(|e| OutboxError::ReadTask(Arc::new(e)))?
    }

    /// Stored status plus live health.
    pub async fn status(&self) -> Result<Status, OutboxError> {
        let mut stored = self.read(OutboxReader::stored_status).await?;
        // The quota as `GET /v1/quota` answers it: memory leads the disk by the writer's commit (see
        // `keep_quota`), so a status read just after a push must not show an older one.
        stored.quota = self.quota().into();
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
        self.read(move |r| r.session_usage(&session)).await
    }

    /// Local status of a session (the shared health model) at `now`; `None` if never seen.
    pub async fn session_status(
        &self,
        session: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<SessionStatus>, OutboxError> {
        let session = session.to_string();
        self.read(move |r| r.session_status(&session, now)).await
    }

    /// [`Self::session_status`] with the runtime liveness overlay (`crashed` since `runtime_gone_at`).
    pub async fn session_status_live(
        &self,
        session: &str,
        now: chrono::DateTime<chrono::Utc>,
        runtime_gone_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Option<SessionStatus>, OutboxError> {
        let session = session.to_string();
        self.read(move |r| r.session_status_live(&session, now, runtime_gone_at))
            .await
    }

    /// A page of the local session listing (see [`OutboxReader::session_list`]).
    pub async fn session_list(
        &self,
        f: ListFilter,
        now: chrono::DateTime<chrono::Utc>,
        gone: HashMap<String, chrono::DateTime<chrono::Utc>>,
    ) -> Result<(Vec<SessionBody>, Option<Cursor>), OutboxError> {
        self.read(move |r| r.session_list(&f, now, &gone)).await
    }

    /// The local tree under `root`; `None` if never seen.
    pub async fn session_tree(
        &self,
        root: &str,
        now: chrono::DateTime<chrono::Utc>,
        gone: HashMap<String, chrono::DateTime<chrono::Utc>>,
    ) -> Result<Option<TreeNode>, OutboxError> {
        let root = root.to_string();
        self.read(move |r| r.session_tree(&root, now, &gone)).await
    }

    /// Where a live stream resuming after `asked` starts.
    pub async fn live_start(&self, asked: Option<Position>) -> Result<Start, OutboxError> {
        self.read(move |r| r.live_start(asked.as_ref())).await
    }

    /// Live stream rows after `after`, oldest first, at most `limit`.
    pub async fn live_after(&self, after: i64, limit: i64) -> Result<Vec<LiveRow>, OutboxError> {
        self.read(move |r| r.live_after(after, limit)).await
    }

    /// Streams the `crashed` transition of sessions whose runtime was just found gone (the local live
    /// stream's view of runtime liveness; the transition is derived, not stored in the history).
    pub async fn stream_runtime_gone(
        &self,
        gone: Vec<(String, chrono::DateTime<chrono::Utc>)>,
    ) -> Result<(), OutboxError> {
        self.run(RuntimeGone { gone }).await
    }

    /// Changes after every commit: a live stream looks for new rows then.
    pub fn live_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.live.subscribe()
    }

    /// Every tailer checkpoint.
    pub async fn checkpoints(&self) -> Result<Vec<Checkpoint>, OutboxError> {
        self.read(OutboxReader::checkpoints).await
    }

    /// The sync switch as stored (another process may have changed it).
    pub async fn sync_status(&self) -> Result<SyncStatus, OutboxError> {
        self.read(OutboxReader::sync_status).await
    }

    /// The newest `limit` dead letters, newest first.
    pub async fn dead_letters(&self, limit: i64) -> Result<Vec<DeadLetter>, OutboxError> {
        self.read(move |r| r.dead_letters(limit)).await
    }

    /// Local usage of the events that occurred in `[from, to)` ([`OutboxReader::usage_between`]).
    pub async fn usage_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<UsageWindow, OutboxError> {
        self.read(move |r| r.usage_between(from, to)).await
    }

    /// The newest `limit` events the ingest acked, as they were sent, newest first.
    pub async fn sent_events(&self, limit: usize) -> Result<Vec<SentEvent>, OutboxError> {
        self.read(move |r| r.sent_events(limit)).await
    }

    /// How many times consent was changed (rows of the consent log).
    pub async fn consent_changes(&self) -> Result<u64, OutboxError> {
        self.read(OutboxReader::consent_changes).await
    }

    /// Finishes the queued work, stops the writer thread and waits for it.
    pub async fn close(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.send(Box::new(Close(Some(tx)))).is_ok() {
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

/// Meta key of the user adopted from the token (`crate::identity`), used when `identity.user_id` is unset.
const TOKEN_USER_KEY: &str = "token_user_id";

/// Rebinds the sessions whose binding never reached the ingest to `defaults`, in one transaction
/// ([`super::write::sessions::rebind_undelivered`]), and says what it did.
fn rebind(conn: &Connection, defaults: &IdentityDefaults) -> Result<(), OutboxError> {
    // IMMEDIATE: it reads, then writes; a deferred transaction whose snapshot a running agent's writer
    // moved past in between fails with SQLITE_BUSY_SNAPSHOT, which the busy timeout does not wait out
    // (the CLI opens the outbox while `run` writes).
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let r = super::write::sessions::rebind_undelivered(&tx, defaults)?;
    tx.commit()?;
    if r.rebound > 0 {
        tracing::info!(
            sessions = r.rebound,
            user_id = defaults.user_id.as_deref(),
            device_id = defaults.device_id.as_deref(),
            "sessions never delivered were rebound to this device's current identity"
        );
    }
    if r.kept > 0 {
        tracing::warn!(
            sessions = r.kept,
            "sessions the ingest already holds under another identity keep it; their new events are \
             refused by a token bound to another user or device (use a token without that binding to send them)"
        );
    }
    Ok(())
}

/// Creates the directory and file (private), opens the writing connection and migrates the schema.
fn try_open_database(path: &Path, settings: &OutboxSettings) -> Result<Connection, OutboxError> {
    let io_err = |e| OutboxError::open_io(path, e);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::private::ensure_dir(dir).map_err(io_err)?;
    }
    crate::private::prepare_database(path).map_err(io_err)?;
    let mut conn =
        store::open_writer(path, settings).map_err(|e| OutboxError::open_sqlite(path, e))?;
    schema::migrate(&mut conn).map_err(|e| OutboxError::Migrate(Arc::new(e)))?;
    // Windows: SQLite has now created `-wal` and `-shm` (private already, by the data directory's
    // inherited ACE); they get the same explicit protected DACL as the database file.
    #[cfg(windows)]
    crate::private::prepare_database(path).map_err(io_err)?;
    Ok(conn)
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

/// Stores the kept quota ([`Outbox::keep_quota`]).
struct SetQuota {
    kept: KeptQuota,
}

impl Task for SetQuota {
    type Output = ();

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<(), OutboxError>> {
        super::read::quota::store(ctx.conn, &self.kept).map(Ok)
    }
}

/// [`Outbox::adopt`] in the writer: stores the device id and the token's user, binds sessions first seen
/// from now on (later ops of this group included) to `defaults`, and rebinds undelivered sessions.
struct AdoptIdentity {
    defaults: IdentityDefaults,
    /// The token's user to remember; `None` forgets an earlier token's.
    token_user: Option<String>,
}

impl Task for AdoptIdentity {
    type Output = ();

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<(), OutboxError>> {
        if let Some(device) = &self.defaults.device_id {
            store::set_meta(ctx.conn, "device_id", device)?;
        }
        match &self.token_user {
            Some(user) => store::set_meta(ctx.conn, TOKEN_USER_KEY, user)?,
            None => {
                ctx.conn
                    .execute("DELETE FROM meta WHERE key = ?1", [TOKEN_USER_KEY])?;
            }
        }
        let r = super::write::sessions::rebind_undelivered(ctx.conn, &self.defaults)?;
        if r.rebound > 0 {
            tracing::info!(
                sessions = r.rebound,
                "sessions never delivered were rebound to the adopted identity"
            );
        }
        ctx.delta.defaults = Some(self.defaults.clone());
        Ok(Ok(()))
    }
}

/// Stores one `meta` value.
struct SetMeta {
    key: &'static str,
    value: String,
}

impl Task for SetMeta {
    type Output = ();

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<(), OutboxError>> {
        store::set_meta(ctx.conn, self.key, &self.value).map(Ok)
    }
}
