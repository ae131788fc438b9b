//! [`OutboxError`]: one variant per failure phase, each keeping its cause as its `source()`.
//!
//! The writer answers every op of a failed group with the same error, so the error is `Clone`; causes
//! that are not (`rusqlite::Error`, `std::io::Error`) are shared behind an `Arc`. A variant's message
//! names the phase only; the cause follows in the chain (`{:#}` through anyhow, or [`OutboxError::detailed`]).

use std::error::Error as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Outbox failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OutboxError {
    /// Creating the directory, preparing the file, opening a connection or starting a thread.
    #[error("cannot open the outbox at {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: OpenCause,
    },
    #[error("cannot migrate the outbox")]
    Migrate(#[source] Arc<super::record::schema::MigrateError>),
    #[error("the outbox is full (cap reached); retry in {}s", retry_after.as_secs())]
    Full { retry_after: Duration },
    #[error("the disk is full: nothing was committed; retry later")]
    DiskFull,
    #[error("outbox database error")]
    Database(#[source] Arc<rusqlite::Error>),
    /// A blocking read task did not finish (it panicked or the runtime is shutting down).
    #[error("outbox read task failed")]
    ReadTask(#[source] Arc<tokio::task::JoinError>),
    #[error("session {0} is already registered with a different identity")]
    SessionConflict(String),
    #[error("export failed")]
    Export(#[source] ExportError),
    #[error("the outbox is closed")]
    Closed,
}

/// Why the outbox could not be opened.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OpenCause {
    #[error(transparent)]
    Io(Arc<std::io::Error>),
    #[error(transparent)]
    Sqlite(Arc<rusqlite::Error>),
}

/// Why an export failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExportError {
    /// Reading the snapshot.
    #[error(transparent)]
    Read(Arc<rusqlite::Error>),
    /// Writing the bundle file.
    #[error("{}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The blocking snapshot task did not finish.
    #[error(transparent)]
    Task(Arc<tokio::task::JoinError>),
}

impl OutboxError {
    pub(crate) fn from_sqlite(e: rusqlite::Error) -> OutboxError {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => OutboxError::DiskFull,
            _ => OutboxError::Database(Arc::new(e)),
        }
    }

    pub(crate) fn open_io(path: &std::path::Path, e: std::io::Error) -> OutboxError {
        OutboxError::Open {
            path: path.to_path_buf(),
            source: OpenCause::Io(Arc::new(e)),
        }
    }

    pub(crate) fn open_sqlite(path: &std::path::Path, e: rusqlite::Error) -> OutboxError {
        OutboxError::Open {
            path: path.to_path_buf(),
            source: OpenCause::Sqlite(Arc::new(e)),
        }
    }

    /// The message with every cause after it (`a: b: c`), for places that show one string (status,
    /// HTTP error bodies, logs).
    pub fn detailed(&self) -> String {
        let mut out = self.to_string();
        let mut cause = self.source();
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        out
    }

    /// True when the producer should retry the same submission later (HTTP 503).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            OutboxError::Full { .. }
                | OutboxError::DiskFull
                | OutboxError::Database(_)
                | OutboxError::ReadTask(_)
                | OutboxError::Closed
        )
    }

    /// How long a producer should wait before retrying.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            OutboxError::Full { retry_after } => Some(*retry_after),
            e if e.is_retryable() => Some(Duration::from_secs(5)),
            _ => None,
        }
    }
}

impl From<rusqlite::Error> for OutboxError {
    fn from(e: rusqlite::Error) -> Self {
        OutboxError::from_sqlite(e)
    }
}

impl ExportError {
    pub(crate) fn read(e: rusqlite::Error) -> OutboxError {
        OutboxError::Export(ExportError::Read(Arc::new(e)))
    }

    pub(crate) fn write(path: &std::path::Path, e: std::io::Error) -> OutboxError {
        OutboxError::Export(ExportError::Write {
            path: path.to_path_buf(),
            source: Arc::new(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_keeps_its_sqlite_cause_and_shows_it_in_detail() {
        let cause = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some("disk I/O error".into()),
        );
        let e = OutboxError::from(cause);
        let source = e.source().expect("a source");
        assert!(source.downcast_ref::<Arc<rusqlite::Error>>().is_some());
        let detailed = e.detailed();
        assert!(
            detailed.starts_with("outbox database error: disk I/O error"),
            "{detailed}"
        );
        assert!(e.clone().is_retryable());
    }

    #[test]
    fn sqlite_full_is_the_disk_full_state_not_a_database_error() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert!(matches!(OutboxError::from(full), OutboxError::DiskFull));
    }
}
