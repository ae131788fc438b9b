//! Test-only entry points (cargo feature `test-hooks`, and this crate's unit tests), so tests can force
//! the interleavings and read the settings they are about instead of hoping for them. Nothing in the
//! agent calls these.

use std::future::Future;
use std::path::Path;

use rusqlite::Connection;

use super::deliver::export::ExportReport;
use super::error::OutboxError;
use super::handle::Outbox;
use super::record::schema;
use super::settings::OutboxSettings;
use super::write::op::{Ctx, Task};
use super::write::store;

impl Outbox {
    /// [`Outbox::export`] that awaits `between` after the bundle was written from its snapshot and before
    /// any row is marked exported: a test delivers, submits or purges rows there, deterministically.
    pub async fn export_pausing_after_snapshot(
        &self,
        out: &Path,
        between: impl Future<Output = ()>,
    ) -> Result<ExportReport, OutboxError> {
        self.export_with(out, between).await
    }

    /// `PRAGMA name` as the writer thread's own connection answers it (e.g. `synchronous`: 2 = FULL).
    pub async fn writer_pragma(&self, name: &str) -> Result<String, OutboxError> {
        let name = name.to_string();
        self.run(PragmaProbe { name }).await
    }

    /// Any read-only query on the handle's read connection, for tests that check rows no named query
    /// shows (e.g. which row a claim picks).
    pub async fn raw_read_for_test<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, OutboxError> {
        self.read(move |r| Ok(f(r.raw_connection_for_test())?))
            .await
    }
}

/// A writing connection to a new or existing file with the outbox's pragmas and schema but no writer
/// thread: the intake benchmark's raw-SQLite baseline writes through it.
pub fn open_raw_writer(path: &Path) -> anyhow::Result<Connection> {
    let mut conn = store::open_writer(path, &OutboxSettings::default())?;
    schema::migrate(&mut conn)?;
    Ok(conn)
}

/// Reads one pragma on the writer's connection.
struct PragmaProbe {
    name: String,
}

impl Task for PragmaProbe {
    type Output = String;

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<String, OutboxError>> {
        let value: rusqlite::types::Value =
            ctx.conn
                .query_row(&format!("PRAGMA {}", self.name), [], |r| r.get(0))?;
        let text = match value {
            rusqlite::types::Value::Integer(n) => n.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        };
        Ok(Ok(text))
    }
}
