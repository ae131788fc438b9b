//! [`OutboxReader`]: a read-only view of an outbox file with named queries, for the agent's own reads
//! and for other processes (the CLI's `status` and `follow`, `doctor`). Opening it never creates,
//! migrates or writes the file; it runs beside a live agent (WAL readers never block the writer).

use std::path::Path;

use chrono::{DateTime, Utc};
use rusqlite::Connection;

use std::collections::HashMap;

use super::listing::{self, Cursor, ListFilter, SessionBody, TreeNode};
use super::queries::{self, DeadLetter, FollowRow, SessionUsage, StoredStatus, SyncStatus};
use super::quota::{self, KeptQuota};
use super::sent::{self, SentEvent};
use crate::outbox::error::OutboxError;
use crate::outbox::record::health::{self, SessionStatus};
use crate::outbox::record::live::{self, LiveRow, Position, Start};
use crate::outbox::record::usage_time::{self, UsageWindow};
use crate::outbox::write::store;
use crate::tail::sink::Checkpoint;

/// A read-only connection to an outbox, with its queries.
pub struct OutboxReader {
    conn: Connection,
}

impl OutboxReader {
    /// Opens the outbox at `path` read-only (it must exist).
    pub fn open(path: &Path) -> Result<OutboxReader, OutboxError> {
        let conn = store::open_reader(path).map_err(|e| OutboxError::open_sqlite(path, e))?;
        Ok(OutboxReader { conn })
    }

    /// Everything `status` shows that lives in the database.
    pub fn stored_status(&self) -> Result<StoredStatus, OutboxError> {
        Ok(queries::stored_status(&self.conn)?)
    }

    /// The sync switch as stored.
    pub fn sync_status(&self) -> Result<SyncStatus, OutboxError> {
        Ok(queries::sync_status(&self.conn)?)
    }

    /// The last budget state the ingest sent, and when; `None` until one arrived ([`super::quota`]).
    pub fn quota(&self) -> Result<Option<KeptQuota>, OutboxError> {
        Ok(quota::load(&self.conn)?)
    }

    /// Local usage of a session and its workers; `None` if never seen.
    pub fn session_usage(&self, session: &str) -> Result<Option<SessionUsage>, OutboxError> {
        Ok(queries::session_usage(&self.conn, session)?)
    }

    /// Local status of a session (the shared health model) at `now`; `None` if never seen.
    pub fn session_status(
        &self,
        session: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<SessionStatus>, OutboxError> {
        self.session_status_live(session, now, None)
    }

    /// [`Self::session_status`] with the session's runtime found gone at `runtime_gone_at` (the
    /// `crashed` overlay).
    pub fn session_status_live(
        &self,
        session: &str,
        now: DateTime<Utc>,
        runtime_gone_at: Option<DateTime<Utc>>,
    ) -> Result<Option<SessionStatus>, OutboxError> {
        // One snapshot: the stored folds and the fold journal replayed on them must be of one commit
        // (a compaction between the two reads would drop the pushes it wrote back).
        let tx = self.conn.unchecked_transaction()?;
        Ok(health::session_status(&tx, session, now, runtime_gone_at)?)
    }

    /// A page of the local session listing at `now` (`gone`: sessions whose runtime was found gone, and
    /// since when), and the cursor to go on from.
    pub fn session_list(
        &self,
        f: &ListFilter,
        now: DateTime<Utc>,
        gone: &HashMap<String, DateTime<Utc>>,
    ) -> Result<(Vec<SessionBody>, Option<Cursor>), OutboxError> {
        let tx = self.conn.unchecked_transaction()?;
        Ok(listing::list(&tx, f, now, &|s| gone.get(s).copied())?)
    }

    /// The local tree under `root`; `None` if never seen.
    pub fn session_tree(
        &self,
        root: &str,
        now: DateTime<Utc>,
        gone: &HashMap<String, DateTime<Utc>>,
    ) -> Result<Option<TreeNode>, OutboxError> {
        let tx = self.conn.unchecked_transaction()?;
        Ok(listing::tree(&tx, root, now, &|s| gone.get(s).copied())?)
    }

    /// Where a live stream resuming after `asked` starts.
    pub fn live_start(&self, asked: Option<&Position>) -> Result<Start, OutboxError> {
        Ok(live::start(&self.conn, asked)?)
    }

    /// Live stream rows after `after`, oldest first, at most `limit`.
    pub fn live_after(&self, after: i64, limit: i64) -> Result<Vec<LiveRow>, OutboxError> {
        Ok(live::after(&self.conn, after, limit)?)
    }

    /// Rows committed after `after_seq`, oldest first, at most `limit` (optionally one session's or one
    /// kind's).
    pub fn follow_after(
        &self,
        after_seq: i64,
        session: Option<&str>,
        kind: Option<&str>,
        limit: i64,
    ) -> Result<Vec<FollowRow>, OutboxError> {
        Ok(queries::follow_after(
            &self.conn, after_seq, session, kind, limit,
        )?)
    }

    /// The seq after which [`Self::follow_after`] with the same filters returns the last `n` matching rows
    /// (0 when there are no more than `n`).
    pub fn seq_before_last(
        &self,
        n: i64,
        session: Option<&str>,
        kind: Option<&str>,
    ) -> Result<i64, OutboxError> {
        Ok(queries::seq_before_last(&self.conn, n, session, kind)?)
    }

    /// The highest seq committed so far (0 when empty).
    pub fn last_seq(&self) -> Result<i64, OutboxError> {
        Ok(queries::last_seq(&self.conn)?)
    }

    /// Every tailer checkpoint.
    pub fn checkpoints(&self) -> Result<Vec<Checkpoint>, OutboxError> {
        Ok(queries::checkpoints(&self.conn)?)
    }

    /// The newest `limit` dead letters, newest first.
    pub fn dead_letters(&self, limit: i64) -> Result<Vec<DeadLetter>, OutboxError> {
        Ok(queries::dead_letters(&self.conn, limit)?)
    }

    /// Local usage of the events that occurred in `[from, to)`, at quarter-hour precision
    /// ([`crate::outbox::record::usage_time`]).
    pub fn usage_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<UsageWindow, OutboxError> {
        let (from, to) = (from.timestamp_millis(), to.timestamp_millis());
        Ok(usage_time::between(&self.conn, from, to)?)
    }

    /// The newest `limit` events the ingest acked, as they were sent, newest first ([`super::sent`]).
    pub fn sent_events(&self, limit: usize) -> Result<Vec<SentEvent>, OutboxError> {
        Ok(sent::newest(&self.conn, limit)?)
    }

    /// How many times consent was changed (rows of the consent log).
    pub fn consent_changes(&self) -> Result<u64, OutboxError> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM consent_log", [], |r| r.get(0))?;
        Ok(n as u64)
    }

    /// SQLite's `PRAGMA integrity_check`: `"ok"`, or the first problems it found.
    pub fn integrity_check(&self) -> Result<String, OutboxError> {
        Ok(self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?)
    }

    /// The connection, for tests that check rows no named query shows (cargo feature `test-hooks`).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn raw_connection_for_test(&self) -> &Connection {
        &self.conn
    }
}
