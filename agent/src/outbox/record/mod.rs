//! What the outbox stores: the tables and their migrations, the rows and the folds over them, and the
//! writer's memory. The lowest room: it imports no other module of the outbox.
//!
//! - `schema`: the SQLite schema and its migrations (the on-disk layout; `error` names its
//!   `MigrateError`, so it sits here, below `error`, rather than beside the writer).
//! - `item`: what producers hand in (already redacted); `counters`: the outcome counters and their names;
//!   `meta`: the `meta` table's small named values.
//! - `snapshot`: the stored folds (a row per session); `journal`: the folds as read, a stored row plus the
//!   journal of what groups pushed since; `health` and `work`: the shared status and work folds per
//!   session; `live`: the local live stream's log; `usage_time`: usage in quarter-hour buckets.
//! - `memory`: what one group changes (`Delta`) and what the writer keeps across groups (`WriterState`).
//!
//! ```text
//! memory → counters, item, journal, usage_time; health → journal, live; work → journal;
//! journal → snapshot; live → meta; usage_time → item; schema, counters, item, meta, snapshot: leaves
//! ```

pub(super) mod counters;
pub(super) mod health;
pub(super) mod item;
pub(super) mod journal;
pub(super) mod live;
pub(super) mod memory;
pub(super) mod meta;
pub(super) mod schema;
pub(super) mod snapshot;
pub(super) mod usage_time;
pub(super) mod work;
