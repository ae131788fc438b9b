//! Scans for values that must never leave the device (the fixture's canary marker and its realistic
//! secrets), with no blind spot left unchecked:
//! - the cloud: a `pg_dump --data-only` of the whole database (when `pg_dump` is on PATH and can dump
//!   this server) **and** a `SELECT` of every text-like column of every table, each searched on its own;
//! - the device: every file in the agent's data directory, whatever its name (the outbox and its WAL,
//!   the agent's own log, the token, ...);
//! - the wire: every request body the proxy captured (gunzipped), re-sends included.
//!
//! A clean scan of nothing proves nothing, so [`assert_day_clean`], [`assert_agent_day_clean`] and
//! [`assert_wire_day_clean`] also check that what they read holds the fixture day's ids and model names
//! ([`holds_the_day`]) and a value found only inside stored event bodies ([`BODY_MARKER`]). The cloud and
//! wire scans also refuse [`HOME_CANARY`], which a test puts in the path of the home directory it tails.

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
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "sk_live_",
    "-----BEGIN ",
    // A JWT's header: `{"alg"` or `{"typ"` in base64url. Not the bare `eyJ`, which a random base64 value
    // (a bundle's signature, a device key) holds once in a few thousand.
    "eyJhbGci",
    "eyJ0eXAi",
];

/// In the path of the home directory the fixture day is tailed from: forbidden in the cloud and on the
/// wire (no path leaves the device), allowed on the device (its tail checkpoints name the files read).
pub const HOME_CANARY: &str = "zzhomecanary";

/// A value that is only ever inside a stored event's body (a tool call's `tool_use_id` in the fixture
/// day): a scan that holds it read the bodies, not only the rows derived from them.
pub const BODY_MARKER: &str = "toolu_01v9FhrHriawSWwIw2p6krRl";

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

/// For a database that holds the fixture day: each scan on its own (the `SELECT` of every column, and
/// the `pg_dump` when it can run) holds the day and none of [`FORBIDDEN`].
pub async fn assert_day_clean(db_url: &str) -> anyhow::Result<()> {
    let selected = select_all(db_url).await?;
    check_source("the SELECT of every text column", &selected, true)?;
    match Command::new("pg_dump")
        .args(["--data-only", "--no-owner", "--dbname", db_url])
        .output()
    {
        Ok(out) if out.status.success() => {
            check_source("pg_dump", &String::from_utf8_lossy(&out.stdout), true)?;
        }
        Ok(out) => eprintln!(
            "scan: pg_dump could not dump this server, only the SELECT scan ran: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("scan: no pg_dump ({e}), only the SELECT scan ran"),
    }
    Ok(())
}

/// One scan's text must hold the day (its bodies included) and nothing forbidden; off the device,
/// nor the [`HOME_CANARY`].
fn check_source(what: &str, text: &str, off_device: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        holds_the_day(text),
        "{what} read {} bytes without the fixture day in them: a clean result would mean nothing",
        text.len()
    );
    anyhow::ensure!(
        text.contains(BODY_MARKER),
        "{what} read {} bytes without an event body's {BODY_MARKER}: the bodies were not scanned",
        text.len()
    );
    let mut hits = forbidden_in(text);
    if off_device {
        hits.extend(
            text.match_indices(HOME_CANARY)
                .take(3)
                .map(|(i, _)| format!("{HOME_CANARY} at byte {i}: the home directory's path")),
        );
    }
    anyhow::ensure!(
        hits.is_empty(),
        "sensitive values in {what}:\n{}",
        hits.join("\n")
    );
    Ok(())
}

/// Every file under `dir` (recursively) as lossy text, with its name; none of [`FORBIDDEN`] may be in
/// any of them. Returns everything read.
pub fn assert_agent_files_clean(dir: &std::path::Path) -> anyhow::Result<String> {
    let mut files = vec![];
    collect_files(dir, &mut files)?;
    anyhow::ensure!(!files.is_empty(), "no files in {}", dir.display());
    let mut all = String::new();
    for f in &files {
        let text = String::from_utf8_lossy(&std::fs::read(f)?).into_owned();
        let hits = forbidden_in(&text);
        anyhow::ensure!(
            hits.is_empty(),
            "sensitive values in {}:\n{}",
            f.display(),
            hits.join("\n")
        );
        all.push_str(&text);
    }
    Ok(all)
}

fn collect_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect_files(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// [`assert_agent_files_clean`] for an agent holding the fixture day: what it read must hold the day.
pub fn assert_agent_day_clean(dir: &std::path::Path) -> anyhow::Result<()> {
    let text = assert_agent_files_clean(dir)?;
    check_source(&format!("the files of {}", dir.display()), &text, false)
}

/// The outbox files of `data_dir` (kept for callers that scan only those; see
/// [`assert_agent_files_clean`] for every file).
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

/// Every captured request body (see [`crate::proxy::FaultProxy::capture_bodies`]) must be free of
/// [`FORBIDDEN`], and together they must hold the fixture day.
pub fn assert_wire_day_clean(seen: &[crate::proxy::Seen]) -> anyhow::Result<()> {
    let mut all = String::new();
    for (i, s) in seen.iter().enumerate() {
        let body = s
            .body
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("request {i} ({}) was not captured", s.request))?;
        let hits = forbidden_in(body);
        anyhow::ensure!(
            hits.is_empty(),
            "sensitive values in request {i} ({}):\n{}",
            s.request,
            hits.join("\n")
        );
        all.push_str(body);
    }
    check_source(&format!("{} request bodies", seen.len()), &all, true)
}

/// Whether a text holds the fixture day's ids and model names (so a clean scan is not a vacuous one).
pub fn holds_the_day(text: &str) -> bool {
    [
        "session_20261103_101818_b5220072",
        "claude-haiku-4-5-20251001",
        "gpt-5-mini",
    ]
    .iter()
    .all(|s| text.contains(s))
}
