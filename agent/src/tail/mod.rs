//! # Tailing Hive's own logs (zero change to the runtime)
//!
//! Follows, under a Hive home (`--hive-home`, default `~/.hive`):
//! - every per-session log `**/sessions/<session_id>/events.jsonl` (at any depth), whose directory names
//!   the session: it is passed to the adapter as `session_hint`, because Hive omits `execution_id` on many
//!   queen-level events (phase changes, colony creation, triggers, compaction);
//! - every debug log `event_logs/*.jsonl` (`HIVE_DEBUG_EVENTS=1`), without a session hint: there, events
//!   that name no session are filtered as `no_session`, and their per-session copy is the one kept.
//!
//! Both logs hold the same events; ids are deterministic (session, stream, seq, type, timestamp), so an
//! event read from both, or read again after a restart, is one event after the outbox dedups it.
//!
//! ## Per file
//! State (see `tailer.rs`): the committed [`Checkpoint`] — `dev:inode`, offset just past the last complete
//! line committed, SHA-256 of the first `min(offset, 4096)` bytes — plus, in memory only, an open handle,
//! the metadata when last caught up, and the line count before the offset. Each poll (`poll_interval`,
//! 250 ms) `stat`s every known file and looks again only at those whose metadata changed; new files are
//! discovered every `discover_interval` (500 ms), so they are picked up within a second.
//!
//! A step (`step.rs`, blocking, run in `spawn_blocking`) does one of:
//! - **drain**: the open handle is no longer the file at the path (renamed away, replaced, deleted):
//!   read the complete lines left in the old file first;
//! - **restart from 0**, committing an empty chunk at offset 0 so a crash cannot resume past it, when the
//!   path holds a different `dev:inode` than committed (*replaced*, e.g. rotation), the file is shorter
//!   than the offset (*truncated*), or its first bytes no longer hash to the committed head hash
//!   (*rewritten*). Events read again get the same ids: local duplicates, never double counts;
//! - **read** up to `batch_lines` complete lines from the offset; a partial last line waits for its newline
//!   (its bytes are not committed); a line over `max_line_bytes` is skipped to its newline and reported as
//!   malformed; invalid UTF-8 and bad JSON become [`TailItem::Malformed`] with line number and offset,
//!   never the content. Each line is processed with `source_identity = file:<dev>:<inode>:<offset>`.
//!
//! ## Checkpoint rule
//! A chunk's items and the checkpoint just past its last line go to [`TailSink::commit`] together (one
//! transaction on the sink's side). The in-memory state advances only after the commit returned `Ok`; on
//! an error the poll stops, and the next one (after a backoff in [`run_until_stopped`]) reads the same
//! lines again. So after a crash the sink's checkpoint never points past an uncommitted line nor before a
//! committed one. Lines a writer appends to a file after it was renamed away *and* drained, or to a file
//! replaced while the agent was down, are not read.

mod discover;
mod file;
mod lines;
pub mod memory;
pub mod runtime;
pub mod sink;
mod step;
mod tailer;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apiary_schema::hive::Zone;
use apiary_schema::{Outcome, Policy};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

pub use discover::{discover as discover_logs, session_hint, Source};
pub use sink::{Checkpoint, TailItem, TailSink};
pub use tailer::Tailer;

/// Longest backoff after a sink (or home listing) error.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How to tail a Hive home.
#[derive(Debug, Clone)]
pub struct TailSettings {
    /// The Hive home (`HIVE_HOME`, default `~/.hive`); it need not exist yet.
    pub hive_home: PathBuf,
    /// How often known files are checked for new lines.
    pub poll_interval: Duration,
    /// How often the home is walked for new files (bounded so new files show up within a second).
    pub discover_interval: Duration,
    /// The zone Hive's naive timestamps are in (the machine's).
    pub zone: Zone,
    /// The redaction policy, applied before anything reaches the sink.
    pub policy: Arc<Policy>,
    /// Longer lines are skipped to their newline and reported as malformed ("line too long").
    pub max_line_bytes: usize,
    /// At most this many lines per commit.
    pub batch_lines: usize,
    /// The colony keys in force (the outbox's): colony names become keys before the policy runs.
    pub colony: Option<Arc<dyn sink::ColonyKeySource>>,
}

impl TailSettings {
    /// Defaults: poll every 250 ms, discover every 500 ms, local zone, 1 MiB lines, 1000 lines per commit.
    pub fn new(hive_home: impl Into<PathBuf>, policy: Arc<Policy>) -> TailSettings {
        TailSettings {
            hive_home: hive_home.into(),
            poll_interval: Duration::from_millis(250),
            discover_interval: Duration::from_millis(500),
            zone: Zone::Local,
            policy,
            max_line_bytes: 1 << 20,
            batch_lines: 1000,
            colony: None,
        }
    }

    fn validate(&self) -> Result<(), TailError> {
        let bad = |why: &str| Err(TailError::InvalidSettings(why.to_string()));
        if self.poll_interval.is_zero() {
            return bad("poll_interval must be more than 0");
        }
        if self.batch_lines == 0 || self.max_line_bytes == 0 {
            return bad("batch_lines and max_line_bytes must be at least 1");
        }
        Ok(())
    }
}

/// What one [`Tailer::try_poll_once`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Files followed after this poll.
    pub files_tracked: usize,
    /// Files seen for the first time in this poll.
    pub new_files: usize,
    /// Files looked at because they changed (or are new).
    pub files_scanned: usize,
    /// Commits of lines (restarts not included).
    pub commits: u64,
    /// Complete lines committed (blank ones included).
    pub lines_committed: u64,
    pub kept: u64,
    pub filtered: u64,
    pub malformed: u64,
    /// Files read again from offset 0 (replaced, truncated or rewritten).
    pub restarts: u64,
    /// Files that could not be read this time (logged once per distinct error; retried next poll).
    pub file_errors: u64,
    /// False when a per-file budget or a stop request left lines unread: poll again without waiting.
    pub caught_up: bool,
}

impl PollReport {
    fn of_items(items: &[TailItem], lines: u64) -> PollReport {
        let mut r = PollReport {
            commits: 1,
            lines_committed: lines,
            ..PollReport::default()
        };
        for item in items {
            match item {
                TailItem::Processed(Outcome::Kept { .. }) | TailItem::Kept(..) => r.kept += 1,
                TailItem::Processed(Outcome::Filtered { .. }) => r.filtered += 1,
                TailItem::Malformed { .. } => r.malformed += 1,
            }
        }
        r
    }

    /// Adds another file's report of the same poll.
    fn merge(&mut self, other: &PollReport) {
        self.add(other);
        self.files_scanned += other.files_scanned;
        self.restarts += other.restarts;
        self.file_errors += other.file_errors;
        self.caught_up &= other.caught_up;
    }

    fn add(&mut self, chunk: &PollReport) {
        self.commits += chunk.commits;
        self.lines_committed += chunk.lines_committed;
        self.kept += chunk.kept;
        self.filtered += chunk.filtered;
        self.malformed += chunk.malformed;
    }
}

/// Why the tailer could not go on (for now).
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("invalid tail settings: {0}")]
    InvalidSettings(String),
    #[error("could not load the tail checkpoints")]
    LoadCheckpoints(#[source] anyhow::Error),
    #[error("could not list the Hive home {}", path.display())]
    Discover {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not commit lines of {source_key}")]
    Commit {
        source_key: String,
        #[source]
        source: anyhow::Error,
    },
    #[error("a blocking file task failed")]
    Blocking(#[from] tokio::task::JoinError),
}

/// The head hash of an empty prefix (offset 0).
fn empty_head_hash() -> String {
    hex::encode(Sha256::digest(b""))
}

/// Follows the Hive home until `shutdown` is cancelled, committing through `sink`. Sink and listing errors
/// are retried with exponential backoff (from `poll_interval` up to 30 s); a poll in progress stops between
/// two chunks on shutdown, so nothing half-committed is left. Fails only on invalid settings.
pub async fn run_until_stopped<S: TailSink>(
    settings: TailSettings,
    sink: Arc<S>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    settings.validate()?;
    let poll = settings.poll_interval;
    let mut failures = 0u32;
    let backoff = |failures: &mut u32| {
        *failures += 1;
        poll.saturating_mul(1 << (*failures - 1).min(16))
            .min(MAX_BACKOFF)
    };
    let mut tailer = loop {
        match Tailer::start(settings.clone(), sink.clone()).await {
            Ok(tailer) => break tailer,
            Err(e) => {
                let error = format!("{:#}", anyhow::Error::from(e));
                tracing::warn!(%error, "tailer cannot start; will retry");
                if sleep_or_stop(backoff(&mut failures), &shutdown).await {
                    return Ok(());
                }
            }
        }
    };
    tailer.stop_on(shutdown.clone());
    tracing::info!(home = %settings.hive_home.display(), "following Hive logs");
    while !shutdown.is_cancelled() {
        let wait = match tailer.try_poll_once().await {
            Ok(report) => {
                failures = 0;
                if report.caught_up {
                    poll
                } else {
                    Duration::ZERO
                }
            }
            Err(e) => {
                let wait = backoff(&mut failures);
                let error = format!("{:#}", anyhow::Error::from(e));
                tracing::warn!(%error, retry_in = ?wait, "tail poll failed; will retry");
                wait
            }
        };
        if sleep_or_stop(wait, &shutdown).await {
            break;
        }
    }
    Ok(())
}

/// Sleeps for `wait` (just yields for zero); true when `shutdown` was cancelled meanwhile.
async fn sleep_or_stop(wait: Duration, shutdown: &CancellationToken) -> bool {
    if wait.is_zero() {
        tokio::task::yield_now().await;
        return shutdown.is_cancelled();
    }
    tokio::select! {
        _ = shutdown.cancelled() => true,
        _ = tokio::time::sleep(wait) => false,
    }
}
