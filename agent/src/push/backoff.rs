//! Retry delays: the shared policy ([`apiary_plumbing::backoff`]), with the attempt count persisted on
//! the outbox rows so a restarted agent continues the sequence.

pub use apiary_plumbing::backoff::{parse_retry_after, BackoffPolicy};
