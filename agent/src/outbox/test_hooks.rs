//! Test-only entry points (cargo feature `test-hooks`), so tests can force the interleavings and read
//! the settings they are about instead of hoping for them. Nothing in the agent calls these.

use std::future::Future;
use std::path::Path;

use super::writer::{Ctx, Op, Reply};
use super::{ExportReport, Outbox, OutboxError};

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
        self.run(|reply| PragmaProbe { name, reply }).await
    }
}

/// Reads one pragma on the writer's connection.
struct PragmaProbe {
    name: String,
    reply: Reply<String>,
}

impl Op for PragmaProbe {
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
        self.reply.reset();
        let value: rusqlite::types::Value =
            ctx.conn
                .query_row(&format!("PRAGMA {}", self.name), [], |r| r.get(0))?;
        let text = match value {
            rusqlite::types::Value::Integer(n) => n.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        };
        self.reply.set(Ok(text));
        Ok(())
    }
    fn finish(mut self: Box<Self>, committed: Result<(), OutboxError>) {
        self.reply.send(committed);
    }
}
