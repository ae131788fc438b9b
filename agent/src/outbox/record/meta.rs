//! The outbox's `meta` table: small named values (the stream's epoch and prune mark, the drop report's
//! sequence, colony secrets and consent, the token's user). A leaf: every layer may read and write it.

use rusqlite::{params, Connection, OptionalExtension};

/// Sets `key` to `value`.
pub fn set_meta(conn: &Connection, key: &str, value: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// The value of `key`, if set.
pub fn get_meta(conn: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()
}
