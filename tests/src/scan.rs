//! A dump of everything the cloud stored, searched for values that must never leave the device.
//!
//! With `pg_dump` on PATH the whole database is dumped (`--data-only`); otherwise every text, varchar and
//! json(b) column of every table of the `public` schema is read with `SELECT`. Either way the text is
//! searched for the fixture's canary marker and its realistic secrets.

use std::process::Command;

use sqlx::Row;

/// Substrings that must never be stored by the cloud (the fixture README's list, plus the generic forms).
pub const FORBIDDEN: &[&str] = &[
    "zzcanary",
    "/home/",
    "@example.com",
    "sk-ant",
    "sk-proj-",
    "ghp_",
    "eyJ",
];

/// The whole stored content of the database at `db_url`, as text.
pub async fn dump(db_url: &str) -> anyhow::Result<String> {
    if let Ok(out) = Command::new("pg_dump")
        .args(["--data-only", "--no-owner", "--dbname", db_url])
        .output()
    {
        if out.status.success() && !out.stdout.is_empty() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
    }
    select_all(db_url).await
}

/// Every text-like column of every table, read with SELECT.
pub async fn select_all(db_url: &str) -> anyhow::Result<String> {
    let pool = sqlx::PgPool::connect(db_url).await?;
    let cols = sqlx::query(
        "SELECT c.table_name::text, c.column_name::text FROM information_schema.columns c \
         JOIN information_schema.tables t USING (table_schema, table_name) \
         WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' \
         AND c.data_type IN ('text', 'character varying', 'json', 'jsonb', 'ARRAY', 'USER-DEFINED')",
    )
    .fetch_all(&pool)
    .await?;
    let mut out = String::new();
    for c in cols {
        let (t, col): (String, String) = (c.get(0), c.get(1));
        let rows = sqlx::query(&format!("SELECT \"{col}\"::text FROM \"{t}\""))
            .fetch_all(&pool)
            .await?;
        for r in rows {
            if let Ok(Some(v)) = r.try_get::<Option<String>, _>(0) {
                out.push_str(&v);
                out.push('\n');
            }
        }
    }
    pool.close().await;
    Ok(out)
}

/// The forbidden substrings found in `text`, each with a little context.
pub fn forbidden_in(text: &str) -> Vec<String> {
    let mut hits = vec![];
    for f in FORBIDDEN {
        for (i, _) in text.match_indices(f).take(3) {
            let mut start = i.saturating_sub(60);
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (i + f.len() + 60).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            hits.push(format!("{f}: …{}…", &text[start..end]));
        }
    }
    hits
}

/// Asserts the database holds none of [`FORBIDDEN`], searching both a `pg_dump` (when on PATH) and a
/// `SELECT` of every text-like column; returns what was searched (so a test can check it is not empty of
/// the values it expects).
pub async fn assert_clean(db_url: &str) -> anyhow::Result<String> {
    let mut text = dump(db_url).await?;
    text.push_str(&select_all(db_url).await?);
    let hits = forbidden_in(&text);
    anyhow::ensure!(
        hits.is_empty(),
        "sensitive values in the cloud database:\n{}",
        hits.join("\n")
    );
    Ok(text)
}

/// Asserts the agent's outbox files (`outbox.db`, `-wal`) hold none of [`FORBIDDEN`] (redaction happens
/// before the commit, so no page of the file may ever have held one).
pub fn assert_outbox_clean(data_dir: &std::path::Path) -> anyhow::Result<()> {
    for name in ["outbox.db", "outbox.db-wal"] {
        let Ok(bytes) = std::fs::read(data_dir.join(name)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        let hits = forbidden_in(&text);
        anyhow::ensure!(
            hits.is_empty(),
            "sensitive values in {name}:\n{}",
            hits.join("\n")
        );
    }
    Ok(())
}

/// Whether a dump holds the fixture day's ids and model names (so a clean scan is not a vacuous one).
pub fn holds_the_day(text: &str) -> bool {
    [
        "session_20261103_101818_b5220072",
        "claude-haiku-4-5-20251001",
        "gpt-5-mini",
    ]
    .iter()
    .all(|s| text.contains(s))
}
