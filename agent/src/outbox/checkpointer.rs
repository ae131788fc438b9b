//! WAL checkpoints off the commit path.
//!
//! The writer connection has `wal_autocheckpoint = 0`; this thread, on its own connection, runs
//! `PRAGMA wal_checkpoint(PASSIVE)` every [`TICK`] (a no-op when nothing is new), and once more when the
//! outbox closes. PASSIVE never blocks the writer
//! or readers; the next write transaction after a complete checkpoint restarts the WAL from its start,
//! and `journal_size_limit` truncates it back. If the WAL ever grows past [`FORCE_PAGES`] (the checkpoint
//! keeps losing to long readers), a RESTART checkpoint is attempted, which waits for readers briefly.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

/// Try harder past this many pages (256 MiB).
const FORCE_PAGES: i64 = 65_536;
const TICK: Duration = Duration::from_millis(100);

/// Runs until `stop` is set; then checkpoints one last time.
pub(crate) fn run(path: &Path, stop: Arc<AtomicBool>) {
    let conn = match open(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "WAL checkpointer cannot open the outbox; WAL will grow");
            return;
        }
    };
    let mut behind = 0;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        if let Err(e) = try_checkpoint(&conn, &mut behind) {
            tracing::debug!(error = %e, "WAL checkpoint failed; will retry");
        }
    }
    let _ = try_checkpoint(&conn, &mut behind);
}

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -1024)?;
    Ok(conn)
}

/// One checkpoint: PASSIVE, or RESTART when the last one left more than [`FORCE_PAGES`] behind.
fn try_checkpoint(conn: &Connection, behind: &mut i64) -> rusqlite::Result<()> {
    let mode = if *behind > FORCE_PAGES {
        "RESTART"
    } else {
        "PASSIVE"
    };
    let (busy, log, done): (i64, i64, i64) =
        conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    *behind = log - done;
    tracing::trace!(busy, log, done, mode, "WAL checkpoint");
    Ok(())
}
