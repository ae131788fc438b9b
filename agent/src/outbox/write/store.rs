//! SQL helpers shared by the ops (all run inside the writer's transaction unless noted).

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags};

use crate::outbox::record::counters::Counters;
use crate::outbox::record::memory::Delta;
use crate::outbox::settings::OutboxSettings;

/// Row states of `events`.
pub mod state {
    pub const PENDING: i64 = 0;
    pub const DELIVERED: i64 = 1;
    pub const DUPLICATE: i64 = 2;
    pub const REJECTED: i64 = 3;
    pub const EVICTED: i64 = 4;
    pub const PURGED: i64 = 5;
    pub const EXPORTED: i64 = 6;
}

/// How long a connection waits for a lock another connection holds.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The page size of a new outbox: 8 KiB, not SQLite's 4 KiB. Each commit writes every page it dirtied to
/// the WAL, and a backfill (durable events of thousands of sessions, times not monotonic) dirties pages
/// all over the dedup index, the per-session folds and usage rows; with twice as many rows per page a
/// group dirties fewer pages and walks shallower trees. A page-size sweep of `cargo bench -p apiary-agent
/// --bench realistic`'s backfill (medians of 3, relative to the 1 KiB rate): 2 KiB 1.30×, 4 KiB 1.50×,
/// 8 KiB 1.77×, 16 KiB 1.75×.
pub const PAGE_SIZE: i64 = 8192;

/// Opens the writing connection with the pragmas the outbox relies on.
///
/// - `journal_mode = WAL`: readers (status, follow, the CLI) never block the writer and vice versa.
/// - `synchronous = FULL`: the WAL is fsynced at every commit, so an acknowledged event survives power
///   loss, not only a process crash. NORMAL would survive SIGKILL but could lose the last commits on power
///   loss — which would break "2xx only after commit" for the producer. Group commit amortises the fsync
///   over everything queued meanwhile, which is what makes FULL affordable.
/// - `busy_timeout = 5 s`: the CLI (sync, export) may write while `run` is running.
/// - `foreign_keys` off, `temp_store = MEMORY`, a bounded page cache (`cache_size = -8192`, 8 MiB) so
///   the agent's memory does not grow with the backlog (RSS budget: 64 MiB with a 1M-event backlog).
/// - `wal_autocheckpoint = 0`: checkpoints do not run inside a producer's commit (they would add the
///   copy of the WAL into the database, and its fsync, to that producer's latency); the
///   [`super::checkpointer`] thread runs them on its own connection instead.
/// - [`PAGE_SIZE`] for a new database (an existing one keeps the page size it was created with).
pub fn open_writer(path: &Path, settings: &OutboxSettings) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Only takes effect before the first table is written, and must precede journal_mode = WAL.
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -8192)?;
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    if let Some(pages) = settings.sqlite_max_page_count {
        conn.pragma_update(None, "max_page_count", pages)?;
    }
    conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
    Ok(conn)
}

/// Prepared statements the writer's connection keeps. A group runs more distinct statements than
/// rusqlite's default of 16 (intake, durations, sessions, the delta's flush, the journal, the live
/// stream, health), so with the default the least recently used were evicted and prepared again in
/// every group: `sqlite3Prepare` was 7% of the writer thread's samples on the mixed Hive stream.
const WRITER_STATEMENTS: usize = 256;

/// Opens a read-only connection (status, usage, follow, export reads in other processes).
pub fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "cache_size", -2048)?;
    Ok(conn)
}

pub fn sync_enabled(conn: &Connection) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT enabled FROM sync_state WHERE id = 1")?
        .query_row([], |r| r.get::<_, i64>(0))
        .map(|v| v != 0)
}

/// Bytes in use: (page_count - freelist_count) * page_size.
pub fn used_bytes(conn: &Connection) -> rusqlite::Result<u64> {
    let read = |sql: &str| -> rusqlite::Result<i64> {
        conn.prepare_cached(sql)?.query_row([], |r| r.get(0))
    };
    let pages = read("PRAGMA page_count")?;
    let free = read("PRAGMA freelist_count")?;
    let size = read("PRAGMA page_size")?;
    Ok(((pages - free).max(0) * size) as u64)
}

pub use crate::outbox::record::meta::{get_meta, set_meta};

/// `dedup_recent` is merged into `dedup_keys` at the end of a group once it holds this many keys (see
/// the schema notes, version 12): ≈ 0.5 MiB of keys, whose leaves a group of random keys dirties nearly
/// all of, against the big index's leaves written once per merge.
pub const DEDUP_MERGE_AT: i64 = 16_384;

/// Moves the recent dedup keys into `dedup_keys` (in key order) once there are [`DEDUP_MERGE_AT`].
pub(crate) fn merge_dedup_keys(conn: &Connection) -> rusqlite::Result<()> {
    let recent: i64 = conn
        .prepare_cached("SELECT count(*) FROM dedup_recent")?
        .query_row([], |r| r.get(0))?;
    if recent >= DEDUP_MERGE_AT {
        conn.prepare_cached(
            "INSERT OR IGNORE INTO dedup_keys (occurred_at, event_id)
             SELECT occurred_at, event_id FROM dedup_recent ORDER BY occurred_at, event_id",
        )?
        .execute([])?;
        conn.prepare_cached("DELETE FROM dedup_recent")?
            .execute([])?;
    }
    Ok(())
}

/// Writes the group's counter and usage deltas, and folds its health inputs
/// ([`crate::outbox::record::health`]) and work facts ([`crate::outbox::record::work`]), starting from
/// `folds` for the sessions it holds, into the fold journal (compacting it when due,
/// [`crate::outbox::record::journal`]).
pub(crate) fn flush_delta(
    conn: &Connection,
    delta: &mut Delta,
    folds: &mut crate::outbox::record::memory::FoldCache,
    journal: &mut crate::outbox::record::journal::JournalState,
) -> rusqlite::Result<()> {
    merge_dedup_keys(conn)?;
    let mut counters = conn.prepare_cached(
        "INSERT INTO counters (name, value) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET value = value + ?2",
    )?;
    for (counter, n) in &delta.counters {
        counters.execute(params![counter.name(), n])?;
    }
    let mut usage = conn.prepare_cached(
        "INSERT INTO usage (session_id, model, parent_session_id, llm_calls, input_tokens, output_tokens,
            cached_tokens, cache_creation_tokens, cost_nanos, unpriced_turns, credits_micros, tool_calls_started,
            tool_calls, tool_errors, events, first_at, last_at, tool_duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         ON CONFLICT(session_id, model) DO UPDATE SET
            llm_calls = llm_calls + ?4, input_tokens = input_tokens + ?5, output_tokens = output_tokens + ?6,
            cached_tokens = cached_tokens + ?7, cache_creation_tokens = cache_creation_tokens + ?8,
            cost_nanos = cost_nanos + ?9, unpriced_turns = unpriced_turns + ?10,
            credits_micros = credits_micros + ?11,
            tool_calls_started = tool_calls_started + ?12, tool_calls = tool_calls + ?13,
            tool_errors = tool_errors + ?14, events = events + ?15,
            first_at = min(first_at, ?16), last_at = max(last_at, ?17),
            tool_duration_ms = tool_duration_ms + ?18",
    )?;
    let mut adopt_parent = conn.prepare_cached(
        "UPDATE usage SET parent_session_id = ?3
         WHERE session_id = ?1 AND model = ?2 AND parent_session_id IS NULL",
    )?;
    for (session, model, u) in delta
        .usage
        .iter()
        .flat_map(|(s, models)| models.iter().map(move |(m, u)| (s, m, u)))
    {
        usage.execute(params![
            session,
            model,
            u.parent_session_id,
            u.llm_calls,
            u.input_tokens,
            u.output_tokens,
            u.cached_tokens,
            u.cache_creation_tokens,
            u.cost_nanos,
            u.unpriced_turns,
            u.credits_micros,
            u.tool_calls_started,
            u.tool_calls,
            u.tool_errors,
            u.events,
            u.first_at,
            u.last_at,
            u.tool_duration_ms
        ])?;
        if u.parent_session_id.is_some() {
            // Apart from the upsert: a column it sets is rewritten in `usage_parent` for every row it
            // updates, parent or not; this statement changes a row only when its parent is missing.
            adopt_parent.execute(params![session, model, u.parent_session_id])?;
        }
    }
    let now_ms = chrono::Utc::now().timestamp_millis();
    crate::outbox::record::usage_time::flush(conn, &delta.usage_by_time, now_ms)?;
    crate::outbox::record::health::flush(
        conn,
        &delta.status,
        &mut folds.trackers,
        &mut delta.trackers,
    )?;
    crate::outbox::record::work::flush(conn, &delta.work, &mut folds.works, &mut delta.works)?;
    crate::outbox::record::journal::append(conn, &delta.status, &delta.work, journal)?;
    // The folds as of this group: its own, else the writer's cache (current: every push goes through
    // it), else read and replayed.
    let folds = &*folds;
    let (trackers, works) = (&delta.trackers, &delta.works);
    crate::outbox::record::journal::compact_due(
        conn,
        journal,
        &|s| {
            trackers
                .get(s)
                .or(folds.trackers.get(s).map(|(_, t)| t))
                .cloned()
        },
        &|s| works.get(s).or(folds.works.get(s).map(|(_, w)| w)).cloned(),
    )?;
    Ok(())
}

/// Every counter as stored.
pub fn read_counter_map(conn: &Connection) -> rusqlite::Result<BTreeMap<String, i64>> {
    let mut stmt = conn.prepare_cached("SELECT name, value FROM counters")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

pub fn read_counters(conn: &Connection) -> rusqlite::Result<Counters> {
    Ok(Counters::from_rows(&read_counter_map(conn)?))
}

/// Deletes up to `limit` of the oldest tombstones finished before `cutoff_ms` (`i64::MAX` = any age).
pub fn prune_tombstones_before(
    conn: &Connection,
    cutoff_ms: i64,
    limit: i64,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM events WHERE seq IN (
            SELECT seq FROM events WHERE state <> 0 AND done_at < ?1 ORDER BY seq LIMIT ?2)",
    )?
    .execute(params![cutoff_ms, limit])
}

/// Inserts a dead-letter row.
#[allow(clippy::too_many_arguments)]
pub fn insert_dead_letter(
    conn: &Connection,
    at_ms: i64,
    event_id: Option<&[u8]>,
    source: &str,
    line_no: Option<u64>,
    offset: Option<u64>,
    reason: &str,
    body: Option<&str>,
) -> rusqlite::Result<()> {
    let reason = sanitize_reason(reason);
    conn.prepare_cached(
        "INSERT INTO dead_letters (at, event_id, source, line_no, byte_offset, reason, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        at_ms,
        event_id,
        source,
        line_no.map(|n| n as i64),
        offset.map(|n| n as i64),
        reason,
        body
    ])?;
    Ok(())
}

/// The id of `hash` in `policies`, inserting it when new.
pub fn ensure_policy(
    conn: &Connection,
    hash: &str,
    name: &str,
    version: u32,
    now_ms: i64,
) -> rusqlite::Result<i64> {
    conn.execute(
        "INSERT OR IGNORE INTO policies (hash, name, version, first_used_at) VALUES (?1, ?2, ?3, ?4)",
        params![hash, name, version, now_ms],
    )?;
    conn.query_row("SELECT id FROM policies WHERE hash = ?1", [hash], |r| {
        r.get(0)
    })
}

/// Makes an error message safe to store and show: quoted values are replaced (serde quotes the
/// offending input in some messages, e.g. `invalid type: string "…"`), backquoted names are kept only
/// when they look like identifiers, and the message is cut to 300 characters.
pub fn sanitize_reason(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len().min(320));
    let mut chars = reason.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '`' => {
                let mut inner = String::new();
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                    inner.push(d);
                }
                let identifier = c == '`'
                    && !inner.is_empty()
                    && inner.len() <= 64
                    && inner
                        .chars()
                        .all(|d| d.is_ascii_alphanumeric() || "_.:-".contains(d));
                out.push(c);
                out.push_str(if identifier { &inner } else { "…" });
                out.push(c);
            }
            c => out.push(c),
        }
        if out.len() >= 300 {
            out.push('…');
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitized_reasons_never_hold_quoted_input() {
        let r =
            sanitize_reason("invalid type: string \"zzcanary9001 secret\", expected u32 at `seq`");
        assert_eq!(r, "invalid type: string \"…\", expected u32 at `seq`");
        let r = sanitize_reason("unknown variant `zzcanary 9002 with spaces`, expected one of");
        assert!(!r.contains("zzcanary"), "{r}");
        assert!(sanitize_reason(&"x".repeat(1000)).chars().count() <= 302);
    }
}
