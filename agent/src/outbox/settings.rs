//! [`OutboxSettings`]: the `[outbox]` config section.

use serde::{Deserialize, Serialize};

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
