//! The durable outbox: a SQLite file (`DIR/outbox.db`, WAL) between intake and push.
//!
//! ## Invariants
//! - **Ack after commit.** Every producer future ([`Outbox::submit`], [`TailSink::commit`]) resolves only
//!   after the transaction holding its events committed with `synchronous = FULL` (see
//!   `store::open_writer` for why FULL and not NORMAL). One writer thread, group commit: see the `writer` module.
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
//! [`Outbox::record_push`] after each attempt, and [`Outbox::keep_quota`] with the budget state an
//! answer carries (see [`quota`]). See [`delivery`].
//!
//! ## Module layers (no import cycles)
//! Each module uses only modules of lower layers, and within its layer only the ones its arrow names.
//! ```text
//! 3  handle (Outbox), sink, test_hooks
//! 2  writer → checkpointer, commit_hook, durations, store; intake → durations; consent, export,
//!    delivery → sessions; drops → intake; reader → read
//! 1  op (Op, Task, the Replying adaptor, Ctx) → memory; store → health, work, journal, usage_time
//! 0  memory (Delta, WriterState) → counters, item, usage_time, journal; health → live, journal;
//!    work → journal; journal (the folds as read: stored row + journal) → snapshot (the stored rows);
//!    live → meta; settings; error → schema; listing; quota; sent
//! ```
//! `store`, `writer`, `schema` and `checkpointer` are private: callers get [`Outbox`] (the writer's
//! queue and a read connection) and [`OutboxReader`] (read-only, for other processes), each with named
//! methods, never a connection.

mod checkpointer;
mod colony;
#[cfg(any(test, feature = "test-hooks"))]
mod commit_hook;
mod consent;
mod counters;
mod delivery;
pub mod disk;
mod drops;
mod durations;
mod error;
mod export;
mod handle;
mod health;
mod intake;
mod item;
mod journal;
mod listing;
mod live;
mod memory;
mod meta;
mod op;
mod quota;
mod read;
mod reader;
mod schema;
mod sent;
mod sessions;
mod settings;
mod sink;
mod snapshot;
mod store;
#[cfg(any(test, feature = "test-hooks"))]
mod test_hooks;
mod usage_time;
mod work;
mod writer;

pub use colony::{Adoption, ColonyKeys, Names as ColonyNamesState};
pub use consent::{SyncChange, SyncReport};
pub use counters::Counters;
pub use delivery::{ClaimLimits, Claimed, ClaimedEvent, Delivery, Idle, SettleReport};
pub use durations::{MAX_OPEN_STARTS, START_TTL_MS};
pub use error::{ExportError, OpenCause, OutboxError};
pub use export::{read_bundle, Checksum, ExportReport, Manifest, ManifestCounts, MARK_CHUNK};
pub use handle::{Outbox, Status};
pub use health::SessionStatus;
pub use intake::SubmitReport;
pub use item::{Item, PreparedEvent, ToolEdge, UsageAgg};
pub use listing::{ColonyNode, Cursor as ListCursor, ListFilter, SessionBody, TreeNode};
pub use live::{LiveRow, Position as LivePosition, Start as LiveStart};
pub use quota::{KeptQuota, QuotaView, OUT_OF_ORDER_WINDOW};
pub use read::{DeadLetter, FollowRow, SessionTotals, SessionUsage, StoredStatus, SyncStatus};
pub use reader::OutboxReader;
pub use sent::{SentEvent, SENT_KEPT};
pub use settings::{OutboxSettings, Overflow};
pub use store::sanitize_reason;
#[cfg(any(test, feature = "test-hooks"))]
pub use test_hooks::open_raw_writer;
pub use usage_time::UsageWindow;
pub use writer::{Health, HealthState};
