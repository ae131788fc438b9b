//! WAL checkpoints off the commit path.
//!
//! The writer connection has `wal_autocheckpoint = 0`; this thread, on its own connection, runs
//! `PRAGMA wal_checkpoint(PASSIVE)` every [`TICK`] (a no-op when nothing is new), and once more when the
//! outbox closes. PASSIVE never blocks the writer or readers.
//!
//! ## Keeping the WAL small
//! SQLite restarts the WAL from its start only when a write transaction begins right after a checkpoint
//! copied *every* frame. Under sustained intake the writer always appends more while a PASSIVE
//! checkpoint runs, so that moment never comes: the WAL grew without bound (1 GiB after 400k events in
//! the intake benchmark), and every commit wrote into freshly allocated file blocks, which the kernel
//! zeroes first (12% of all CPU in a profile of that benchmark). So when a checkpoint finds the WAL past
//! [`RESTART_PAGES`], it asks the writer ([`WalControl::restart_wanted`]) to run a RESTART checkpoint
//! between two groups, on its own connection and without waiting: only the frames written since this
//! checkpoint are left to copy, and no writer can get in between. The next group then starts the WAL at
//! its beginning again, reusing its blocks, and `journal_size_limit` trims a larger file back. A reader
//! still inside the WAL (an export's snapshot, say) makes that attempt a PASSIVE one; the checkpointer
//! asks again after its next run. An attempt that meets the checkpointer's own PASSIVE run (the
//! checkpoint lock is taken) is tried again after the writer's next group.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use super::store;

/// Past this many WAL pages (32 MiB at the 8 KiB pages of a new outbox, 16 MiB at the 4 KiB pages of one
/// created before [`store::PAGE_SIZE`]), the writer is asked to restart the WAL.
const RESTART_PAGES: i64 = 4096;
const TICK: Duration = Duration::from_millis(100);

/// Flags shared by the checkpointer, the writer and the outbox handle.
#[derive(Debug, Default)]
pub(crate) struct WalControl {
    /// Set by the outbox when it closes: checkpoint once more and stop.
    pub stop: AtomicBool,
    /// Set by the checkpointer when the WAL is past [`RESTART_PAGES`]; taken by the writer.
    pub restart_wanted: AtomicBool,
}

/// Runs until `wal.stop` is set; then checkpoints one last time.
pub(crate) fn run(path: &Path, wal: Arc<WalControl>) {
    let conn = match open(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "WAL checkpointer cannot open the outbox; WAL will grow");
            return;
        }
    };
    while !wal.stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        match try_checkpoint(&conn) {
            Ok(log) if log > RESTART_PAGES => wal.restart_wanted.store(true, Ordering::Relaxed),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "WAL checkpoint failed; will retry"),
        }
    }
    let _ = try_checkpoint(&conn);
}

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(store::BUSY_TIMEOUT)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "cache_size", -1024)?;
    Ok(conn)
}

/// One PASSIVE checkpoint; returns the WAL's length in pages.
fn try_checkpoint(conn: &Connection) -> rusqlite::Result<i64> {
    let (busy, log, done) = checkpoint(conn, "PASSIVE")?;
    tracing::trace!(busy, log, done, "WAL checkpoint");
    Ok(log)
}

/// `PRAGMA wal_checkpoint(mode)`: (busy, pages in the WAL, pages copied).
fn checkpoint(conn: &Connection, mode: &str) -> rusqlite::Result<(i64, i64, i64)> {
    conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
    })
}

/// The writer's side: restarts the WAL if the checkpointer asked, between two groups (see the module
/// notes). Never waits for a lock: `busy_timeout` is 0 during the attempt, then back to
/// [`store::BUSY_TIMEOUT`].
pub(crate) fn try_restart(conn: &Connection, wal: &WalControl) {
    if !wal.restart_wanted.swap(false, Ordering::Relaxed) {
        return;
    }
    let result = conn
        .busy_timeout(Duration::ZERO)
        .and_then(|()| checkpoint(conn, "RESTART"));
    if let Err(e) = conn.busy_timeout(store::BUSY_TIMEOUT) {
        tracing::warn!(error = %e, "could not restore the outbox busy timeout");
    }
    match result {
        // Busy with no WAL figures: the checkpointer's own PASSIVE run held the checkpoint lock. Try
        // again after the next group rather than wait for the checkpointer to ask again.
        Ok((1, -1, _)) => wal.restart_wanted.store(true, Ordering::Relaxed),
        Ok((busy, log, done)) => tracing::trace!(busy, log, done, "WAL restart checkpoint"),
        Err(e) => tracing::debug!(error = %e, "WAL restart checkpoint failed; will retry"),
    }
}
