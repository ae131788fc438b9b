//! The durable outbox: a SQLite file (`DIR/outbox.db`, WAL) between intake and push.
//!
//! ## Invariants
//! - **Ack after commit.** Every producer future ([`Outbox::submit`], [`TailSink::commit`]) resolves only
//!   after the transaction holding its events committed with `synchronous = FULL` (see
//!   [`store::open_writer`] for why FULL and not NORMAL). One writer thread, group commit: see [`writer`].
//! - **Redacted before disk.** The outbox only ever receives [`Item`]s built from
//!   [`apiary_schema::process_value`] outcomes; raw input is never written (dead letters keep a reason and
//!   a position, or the already-redacted event).
//! - **One terminal outcome per received event**, counted in the same transaction that decides it:
//!   `received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending`
//!   ([`Counters::balanced`]). `duplicate` is a second copy of an event id already in the outbox (or
//!   acked as a duplicate by the ingest); `exported` is a row written to an air-gapped bundle.
//! - **Local dedup on `event_id`.** A settled row stays as a body-less tombstone for
//!   `dedup_retention_hours`, so a re-read or re-sent event is a `duplicate`, not a second upload.
//! - **Bounded disk.** `max_bytes` is measured as used pages ((page_count − freelist_count) × page_size);
//!   the overflow policy is `reject` (default: 503 + Retry-After, nothing silently lost) or `drop_oldest`
//!   (evictions counted and reported as `outbox.dropped`). See [`intake`].
//! - **A full disk is a state, not a crash.** SQLITE_FULL (which is how SQLite reports ENOSPC) rolls the
//!   group back, answers its producers with [`OutboxError::DiskFull`] (503), and shows in
//!   [`Health`]; the writer probes every few seconds and the state clears on the first successful commit.
//!   SQLite's journal guarantees the file is never left corrupt.
//! - **Consent.** Rows committed while sync is off are `held` and never claimed unless the backlog is
//!   included (see [`consent`]).
//!
//! ## For the push loop
//! [`Outbox::claim`] → send → [`Outbox::settle_response`] (or [`Outbox::ack`] / [`Outbox::reject`] /
//! [`Outbox::fail`] / [`Outbox::release`]). Call [`Outbox::enqueue_drop_report`] periodically and
//! [`Outbox::record_push`] after each attempt. See [`delivery`].

mod checkpointer;
pub mod consent;
pub mod delivery;
pub mod drops;
pub mod export;
mod handle;
pub mod health;
pub mod intake;
pub mod item;
pub mod read;
pub mod schema;
pub mod sessions;
mod sink;
pub mod store;
#[cfg(feature = "test-hooks")]
mod test_hooks;
pub mod writer;

use serde::{Deserialize, Serialize};

pub use consent::{SyncChange, SyncReport};
pub use delivery::{ClaimLimits, Claimed, ClaimedEvent, Delivery, Idle, SettleReport};
pub use export::{ExportReport, Manifest};
pub use handle::{Outbox, Status};
pub use item::{Item, PreparedEvent, UsageAgg};
pub use writer::Health;

pub use crate::identity::IdentityDefaults;

/// Outbox settings (config section `[outbox]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxSettings {
    /// Cap on the database's used bytes.
    pub max_bytes: u64,
    /// What happens at the cap.
    pub overflow: Overflow,
    /// How long settled rows are remembered for local dedup.
    pub dedup_retention_hours: u64,
    /// Retry-After (seconds) told to producers refused at the cap or on a full disk.
    pub retry_after_secs: u64,
    /// Testing aid: SQLite `max_page_count`, to simulate a full disk (SQLITE_FULL) without filling one.
    pub sqlite_max_page_count: Option<u32>,
}

impl Default for OutboxSettings {
    fn default() -> Self {
        OutboxSettings {
            max_bytes: 512 * 1024 * 1024,
            overflow: Overflow::Reject,
            dedup_retention_hours: 7 * 24,
            retry_after_secs: 5,
            sqlite_max_page_count: None,
        }
    }
}

/// The overflow policy at the cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// Refuse new submissions (HTTP 503 + Retry-After; the tailer retries later).
    #[default]
    Reject,
    /// Delete the oldest pending events to make room; count them as evicted.
    DropOldest,
}

/// Persisted outcome counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub received: u64,
    pub delivered: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub filtered: u64,
    pub evicted: u64,
    pub purged: u64,
    pub exported: u64,
    pub pending: u64,
    pub pending_bytes: u64,
    /// Events refused at the door (cap reached under `reject`). Not received: the producer retries.
    pub refused: u64,
}

impl Counters {
    /// The sum of the terminal outcomes plus pending.
    pub fn accounted(&self) -> u64 {
        self.delivered
            + self.duplicate
            + self.rejected
            + self.filtered
            + self.evicted
            + self.purged
            + self.exported
            + self.pending
    }

    /// received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending.
    pub fn balanced(&self) -> bool {
        self.received == self.accounted()
    }
}

/// What one submission did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SubmitReport {
    /// New pending events.
    pub accepted: u64,
    /// Event ids already in the outbox.
    pub duplicates: u64,
    /// Not durable.
    pub filtered: u64,
    /// Unreadable (dead-lettered).
    pub rejected: u64,
    /// Older events evicted to make room (`drop_oldest`).
    pub evicted: u64,
}

/// Outbox failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    #[error("cannot open the outbox at {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("cannot migrate the outbox: {0}")]
    Migrate(String),
    #[error("the outbox is full (cap reached); retry in {}s", retry_after.as_secs())]
    Full { retry_after: std::time::Duration },
    #[error("the disk is full: nothing was committed; retry later")]
    DiskFull,
    #[error("outbox database error: {0}")]
    Database(String),
    #[error("session {0} is already registered with a different identity")]
    SessionConflict(String),
    #[error("export failed: {0}")]
    Export(String),
    #[error("the outbox is closed")]
    Closed,
}

impl OutboxError {
    pub(crate) fn from_sqlite(e: rusqlite::Error) -> OutboxError {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => OutboxError::DiskFull,
            _ => OutboxError::Database(e.to_string()),
        }
    }

    /// True when the producer should retry the same submission later (HTTP 503).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            OutboxError::Full { .. }
                | OutboxError::DiskFull
                | OutboxError::Database(_)
                | OutboxError::Closed
        )
    }

    /// How long a producer should wait before retrying.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            OutboxError::Full { retry_after } => Some(*retry_after),
            e if e.is_retryable() => Some(std::time::Duration::from_secs(5)),
            _ => None,
        }
    }
}

impl From<rusqlite::Error> for OutboxError {
    fn from(e: rusqlite::Error) -> Self {
        OutboxError::from_sqlite(e)
    }
}
