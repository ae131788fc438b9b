//! The named reads: what `status`, the local API and other processes read, on a read connection of
//! their own. Uses `record` and `write::store`'s SQL helpers.
//!
//! - `reader`: [`super::OutboxReader`], the read-only view with named queries (for the agent's reads
//!   and other processes); `queries`: the queries themselves (status, local usage, follow, checkpoints).
//! - `listing`: the local session listing and tree; `sent`: the ring of events the ingest accepted.
//! - `quota`: the last budget state the ingest sent, kept in memory and in the `quota` table (the
//!   statement that stores it runs in an op of the handle). By its imports a leaf; it is here because
//!   what it is for is being read (`GET /v1/quota`, `status`).
//!
//! ```text
//! reader → queries, listing, quota, sent; queries → quota; listing, quota, sent: leaves
//! ```

pub(super) mod listing;
pub(super) mod queries;
pub(super) mod quota;
pub(super) mod reader;
pub(super) mod sent;
