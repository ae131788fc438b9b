//! What one transaction of the writer does, and the SQL it runs: the writer thread and its group commit,
//! the ops it applies, and the helpers they share. Uses `record` (and the leaves `error`, `settings`,
//! `disk`); no other room.
//!
//! - `writer`: the single writer thread, group commit, full-disk recovery; `checkpointer`: WAL
//!   checkpoints off the commit path; `commit_hook`: the test pause between applying and committing.
//! - `op`: the contract between the writer and the changes it applies (`Op`, `Task`, `Ctx`).
//! - `intake`: a producer's items in one transaction (cap, overflow, dedup); `durations`: tool-call
//!   durations paired in that transaction; `drops`: drop reports as `outbox.dropped` events.
//! - `sessions`: the session registry (identity bound at first sight or by registration). Its bindings
//!   are read by `deliver` too, but the intake binds on first sight, so it lives here, beside the intake.
//! - `store`: the SQL helpers the ops share. The named reads (`read`) use a few of them (counters,
//!   `meta`), which is why `read` sits above this room.
//!
//! ```text
//! writer → checkpointer, commit_hook, durations, op, store; intake → durations, op, sessions, store;
//! drops → intake, op, store; durations → op; sessions → op, store; checkpointer → store;
//! op, store, commit_hook: leaves
//! ```

pub(super) mod checkpointer;
#[cfg(any(test, feature = "test-hooks"))]
pub(super) mod commit_hook;
pub(super) mod drops;
pub(super) mod durations;
pub(super) mod intake;
pub(super) mod op;
pub(super) mod sessions;
pub(super) mod store;
pub(super) mod writer;
