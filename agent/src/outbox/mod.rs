//! The durable outbox: a SQLite file (`DIR/outbox.db`, WAL) between intake and push.
//!
//! ## Invariants
//! - **Ack after commit.** Every producer future ([`Outbox::submit`], [`TailSink::commit`]) resolves only
//!   after the transaction holding its events committed with `synchronous = FULL` (see
//!   `write::store::open_writer` for why FULL and not NORMAL). One writer thread, group commit: see
//!   `write::writer`.
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
//!   (evictions counted and reported as `outbox.dropped`). See [`write::intake`].
//! - **A full disk is a state, not a crash.** SQLITE_FULL (which is how SQLite reports ENOSPC) rolls the
//!   group back, answers its producers with [`OutboxError::DiskFull`] (503), and shows in
//!   [`Health`]; the writer probes every few seconds and the state clears on the first successful commit.
//!   SQLite's journal guarantees the file is never left corrupt.
//! - **Consent.** Rows committed while sync is off are `held` and never claimed unless the backlog is
//!   included (see [`deliver::consent`]).
//!
//! ## For the push loop
//! [`Outbox::claim`] → send → [`Outbox::settle_response`] (or [`Outbox::ack`] / [`Outbox::reject`] /
//! [`Outbox::fail`] / [`Outbox::release`]). Call [`Outbox::enqueue_drop_report`] periodically and
//! [`Outbox::record_push`] after each attempt, and [`Outbox::keep_quota`] with the budget state an
//! answer carries (see [`read::quota`]). See [`deliver::delivery`].
//!
//! ## Rooms (no import cycles)
//! The modules are grouped by role into rooms, each with its notes and the arrows between its modules.
//! A room uses only the rooms below it, never one above; `tests/tests/layering.rs` fails on any import
//! cycle between siblings, at every level.
//! ```text
//! handle (Outbox), sink (TailSink), test_hooks   the API, at this level: over every room
//! deliver   delivery, consent, export, colony    what leaves the device, and on what terms
//! read      reader (OutboxReader), queries,      the named reads, on a read connection
//!           listing, sent, quota
//! write     writer, checkpointer, commit_hook,   what one transaction of the writer does, and the SQL
//!           op, intake, durations, drops,        its ops share
//!           sessions, store
//! error     OutboxError, ExportError             names record::schema's MigrateError
//! record    schema, item, counters, meta,        what is stored: the tables, the rows, the folds, the
//!           snapshot, journal, health, work,     writer's memory
//!           live, usage_time, memory
//! settings, disk                                 leaves: import nothing of the outbox
//! ```
//! `write::store`, `write::writer`, `write::checkpointer` and `record::schema` are seen by the outbox
//! only: callers get [`Outbox`] (the writer's queue and a read connection) and [`OutboxReader`]
//! (read-only, for other processes), each with named methods, never a connection.

mod deliver;
pub mod disk;
mod error;
mod handle;
mod read;
mod record;
mod settings;
mod sink;
#[cfg(any(test, feature = "test-hooks"))]
mod test_hooks;
mod write;

pub use deliver::colony::{Adoption, ColonyKeys, Names as ColonyNamesState};
pub use deliver::consent::{SyncChange, SyncReport};
pub use deliver::delivery::{ClaimLimits, Claimed, ClaimedEvent, Delivery, Idle, SettleReport};
pub use deliver::export::{
    read_bundle, Checksum, ExportReport, Manifest, ManifestCounts, MARK_CHUNK,
};
pub use error::{ExportError, OpenCause, OutboxError};
pub use handle::{Outbox, Status};
pub use read::listing::{ColonyNode, Cursor as ListCursor, ListFilter, SessionBody, TreeNode};
pub use read::queries::{
    DeadLetter, FollowRow, SessionTotals, SessionUsage, StoredStatus, SyncStatus,
};
pub use read::quota::{KeptQuota, QuotaView, OUT_OF_ORDER_WINDOW};
pub use read::reader::OutboxReader;
pub use read::sent::{SentEvent, SENT_KEPT};
pub use record::counters::Counters;
pub use record::health::SessionStatus;
pub use record::item::{Item, PreparedEvent, ToolEdge, UsageAgg};
pub use record::live::{LiveRow, Position as LivePosition, Start as LiveStart};
pub use record::usage_time::UsageWindow;
pub use settings::{OutboxSettings, Overflow};
#[cfg(any(test, feature = "test-hooks"))]
pub use test_hooks::open_raw_writer;
pub use write::durations::{MAX_OPEN_STARTS, START_TTL_MS};
pub use write::intake::SubmitReport;
pub use write::store::sanitize_reason;
pub use write::writer::{Health, HealthState};
