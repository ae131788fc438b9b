//! The interface between the log tailer and the outbox.
//!
//! The tailer reads complete lines from one file, processes each with
//! [`apiary_schema::process_value`] (so redaction happens before anything is written), and hands the
//! outcomes plus the file's new [`Checkpoint`] to a [`TailSink`], which commits both in **one**
//! transaction: after a crash, the checkpoint never points past an event that is not in the outbox, nor
//! before one that is (re-reading would only produce local duplicates anyway, since ids are deterministic).

use std::future::Future;

use apiary_schema::usage::Contribution;
use apiary_schema::{CanonicalEvent, Outcome};

/// Where reading of one file stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// Stable key of the source: the path relative to the Hive home.
    pub source_key: String,
    /// The file's full path when last read.
    pub path: String,
    /// `<dev>:<inode>` of the file when last read; a different one means the file was replaced.
    pub file_id: String,
    /// Byte offset just past the last complete line committed.
    pub offset: u64,
    /// SHA-256 (hex) of the file's first `min(offset, 4096)` bytes; a mismatch means truncated or rewritten.
    pub head_hash: String,
}

/// One line's result.
#[derive(Debug, Clone, PartialEq)]
pub enum TailItem {
    /// A line that parsed: kept (redacted) or filtered.
    Processed(Outcome),
    /// A durable line read in one pass ([`apiary_schema::line`]): the kept, redacted event and its usage
    /// contribution (the same event the full path keeps; no redaction report is made).
    Kept(Box<CanonicalEvent>, Option<Contribution>),
    /// A line that could not be read: it is counted as received and rejected (dead-lettered with the
    /// reason and its position, never its content).
    Malformed {
        source_key: String,
        line_no: u64,
        offset: u64,
        reason: String,
    },
}

impl TailItem {
    /// The kept event, whichever path read it.
    pub fn kept_event(&self) -> Option<&CanonicalEvent> {
        match self {
            TailItem::Processed(Outcome::Kept { event, .. }) | TailItem::Kept(event, _) => {
                Some(event)
            }
            _ => None,
        }
    }
}

/// Where tailed lines go. Implemented by the outbox.
pub trait TailSink: Send + Sync + 'static {
    /// Commits `items` and `checkpoint` in one transaction; resolves once it is durable.
    fn commit(
        &self,
        items: Vec<TailItem>,
        checkpoint: Checkpoint,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Every checkpoint stored so far.
    fn load_checkpoints(&self) -> impl Future<Output = anyhow::Result<Vec<Checkpoint>>> + Send;
}

/// The colony keys in force, read for every batch of lines so colony names become keys before the policy
/// runs. Implemented by the outbox's colony keys, which change while the agent runs (a tenant's secret
/// adopted, the colony names choice made).
pub trait ColonyKeySource: std::fmt::Debug + Send + Sync + 'static {
    /// The keyer in force now.
    fn keyer(&self) -> apiary_schema::colony::ColonyKeyer;
}
