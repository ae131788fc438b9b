//! Read-only queries: status, local usage, follow, checkpoints. They run on a separate read connection
//! (WAL: never blocked by the writer), in the agent or in a CLI process, through the named methods of
//! [`crate::outbox::OutboxReader`] and [`crate::outbox::Outbox`].

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::outbox::record::counters::{Counters, FILTERED_PREFIX, UNREPORTED_PREFIX};
use crate::outbox::record::item::UsageAgg;
use crate::outbox::write::store;
use crate::tail::sink::Checkpoint;

/// The sync switch as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SyncStatus {
    pub enabled: bool,
    pub endpoint: Option<String>,
    pub token_file: Option<String>,
    pub include_backlog: bool,
    /// When sync was last switched, and the policy hash consented to.
    pub changed_at: Option<DateTime<Utc>>,
    pub consent_policy_hash: Option<String>,
    /// Set by the push loop when it stopped on its own (e.g. `re-authenticate`).
    pub paused_reason: Option<String>,
}

/// Everything `status` shows that lives in the database (read back from a running agent's status,
/// which may be older: a field it does not send reads as its default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoredStatus {
    pub device_id: Option<String>,
    pub sync: SyncStatus,
    pub counters: Counters,
    /// received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending.
    pub balanced: bool,
    pub pending_events: u64,
    pub pending_bytes: u64,
    /// Pending and uploadable now or after their backoff (not held).
    pub uploadable_events: u64,
    /// Pending but captured while sync was off (stay local unless the backlog is included).
    pub held_events: u64,
    pub oldest_pending_age_seconds: Option<f64>,
    pub dead_letters: u64,
    pub sessions: u64,
    pub filtered_by_reason: BTreeMap<String, u64>,
    pub drops_unreported: BTreeMap<String, u64>,
    pub used_bytes: u64,
    /// The write-ahead log's size on disk (`outbox.db-wal`), on top of `used_bytes`.
    pub wal_bytes: u64,
    pub last_push: Option<serde_json::Value>,
    /// The last budget state the ingest sent (the body of `GET /v1/quota`; see [`super::quota`]).
    pub quota: super::quota::QuotaView,
}

pub fn sync_status(conn: &Connection) -> rusqlite::Result<SyncStatus> {
    conn.query_row(
        "SELECT enabled, endpoint, token_file, include_backlog, changed_at, policy_hash, paused_reason
         FROM sync_state WHERE id = 1",
        [],
        |r| {
            Ok(SyncStatus {
                enabled: r.get::<_, i64>(0)? != 0,
                endpoint: r.get(1)?,
                token_file: r.get(2)?,
                include_backlog: r.get::<_, i64>(3)? != 0,
                changed_at: r.get::<_, Option<i64>>(4)?.and_then(ms_to_time),
                consent_policy_hash: r.get(5)?,
                paused_reason: r.get(6)?,
            })
        },
    )
}

pub fn stored_status(conn: &Connection) -> rusqlite::Result<StoredStatus> {
    let tx = conn.unchecked_transaction()?;
    let counters = store::read_counters(&tx)?;
    let map = store::read_counter_map(&tx)?;
    let sub = |prefix: &str| -> BTreeMap<String, u64> {
        map.iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), (*v).max(0) as u64)))
            .collect()
    };
    let count = |sql: &str| -> rusqlite::Result<u64> {
        tx.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
    };
    // Through the small `events_held` index; the pending counter is exact (see `Counters::balanced`).
    let held = count("SELECT count(*) FROM events WHERE state = 0 AND held = 1")?;
    let uploadable = counters.pending.saturating_sub(held);
    let oldest: Option<i64> = tx
        .query_row(
            "SELECT received_at FROM events WHERE state = 0 ORDER BY seq LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let now = Utc::now().timestamp_millis();
    let status = StoredStatus {
        device_id: store::get_meta(&tx, "device_id")?,
        sync: sync_status(&tx)?,
        balanced: counters.balanced(),
        pending_events: counters.pending,
        pending_bytes: counters.pending_bytes,
        uploadable_events: uploadable,
        held_events: held,
        oldest_pending_age_seconds: oldest.map(|t| (now - t).max(0) as f64 / 1000.0),
        dead_letters: count("SELECT count(*) FROM dead_letters")?,
        sessions: count("SELECT count(*) FROM sessions")?,
        filtered_by_reason: sub(FILTERED_PREFIX),
        drops_unreported: sub(UNREPORTED_PREFIX),
        used_bytes: store::used_bytes(&tx)?,
        wal_bytes: wal_bytes(&tx),
        last_push: store::get_meta(&tx, "last_push")?.and_then(|s| serde_json::from_str(&s).ok()),
        quota: super::quota::load(&tx)?.into(),
        counters,
    };
    tx.finish()?;
    Ok(status)
}

/// The size of the database's `-wal` file (0 when there is none).
fn wal_bytes(conn: &Connection) -> u64 {
    conn.path()
        .filter(|p| !p.is_empty())
        .and_then(|p| std::fs::metadata(format!("{p}-wal")).ok())
        .map_or(0, |m| m.len())
}

/// Local usage of a session and its workers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionUsage {
    pub session_id: String,
    /// The session and all its workers together.
    pub totals: UsageAgg,
    /// The same, by model (`""` = events without a model: tool calls, lifecycle).
    pub by_model: BTreeMap<String, UsageAgg>,
    /// Each session's own totals: the session itself first, then its workers.
    pub sessions: Vec<SessionTotals>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionTotals {
    pub session_id: String,
    pub parent_session_id: Option<String>,
    pub totals: UsageAgg,
}

/// `None` when the outbox has never seen the session.
pub fn session_usage(conn: &Connection, session: &str) -> rusqlite::Result<Option<SessionUsage>> {
    let mut stmt = conn.prepare_cached(
        "SELECT session_id, model, parent_session_id, llm_calls, input_tokens, output_tokens,
            cached_tokens, cache_creation_tokens, cost_nanos, unpriced_turns, credits_micros, tool_calls_started,
            tool_calls, tool_errors, events, tool_duration_ms
         FROM usage
         WHERE session_id = ?1 OR parent_session_id = ?1
            OR session_id IN (SELECT session_id FROM sessions WHERE parent_session_id = ?1)
         ORDER BY session_id <> ?1, session_id, model",
    )?;
    let mut out = SessionUsage {
        session_id: session.to_string(),
        ..SessionUsage::default()
    };
    let mut per_session: BTreeMap<String, SessionTotals> = BTreeMap::new();
    let mut order = Vec::new();
    let mut rows = stmt.query([session])?;
    while let Some(r) = rows.next()? {
        let sid: String = r.get(0)?;
        let model: String = r.get(1)?;
        let u = UsageAgg {
            parent_session_id: r.get(2)?,
            llm_calls: r.get(3)?,
            input_tokens: r.get(4)?,
            output_tokens: r.get(5)?,
            cached_tokens: r.get(6)?,
            cache_creation_tokens: r.get(7)?,
            cost_nanos: r.get(8)?,
            unpriced_turns: r.get(9)?,
            credits_micros: r.get(10)?,
            tool_calls_started: r.get(11)?,
            tool_calls: r.get(12)?,
            tool_errors: r.get(13)?,
            events: r.get(14)?,
            tool_duration_ms: r.get(15)?,
            ..UsageAgg::default()
        };
        out.totals.add(&u);
        out.by_model.entry(model).or_default().add(&u);
        let entry = per_session.entry(sid.clone()).or_insert_with(|| {
            order.push(sid.clone());
            SessionTotals {
                session_id: sid.clone(),
                parent_session_id: u.parent_session_id.clone(),
                totals: UsageAgg::default(),
            }
        });
        entry.totals.add(&u);
    }
    if order.is_empty() {
        let known: Option<String> = conn
            .query_row(
                "SELECT session_id FROM sessions WHERE session_id = ?1",
                [session],
                |r| r.get(0),
            )
            .optional()?;
        if known.is_none() {
            return Ok(None);
        }
    }
    out.totals.parent_session_id = None;
    out.sessions = order
        .into_iter()
        .filter_map(|s| per_session.remove(&s))
        .collect();
    Ok(Some(out))
}

/// One committed event, for `follow`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FollowRow {
    pub seq: i64,
    pub event_id: Uuid,
    pub kind: String,
    pub session_id: Option<String>,
    /// `pending`, `delivered`, ...
    pub state: &'static str,
    /// The canonical event while pending (tombstones have none).
    pub body: Option<String>,
}

/// Rows committed after `after_seq`, oldest first, at most `limit`.
pub fn follow_after(
    conn: &Connection,
    after_seq: i64,
    session: Option<&str>,
    kind: Option<&str>,
    limit: i64,
) -> rusqlite::Result<Vec<FollowRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, event_id, kind, session_id, state, body FROM events
         WHERE seq > ?1 AND (?2 IS NULL OR session_id = ?2) AND (?3 IS NULL OR kind = ?3)
         ORDER BY seq LIMIT ?4",
    )?;
    let rows = stmt.query_map(params![after_seq, session, kind, limit], |r| {
        Ok(FollowRow {
            seq: r.get(0)?,
            event_id: Uuid::from_slice(&r.get::<_, Vec<u8>>(1)?).unwrap_or_default(),
            kind: r.get(2)?,
            session_id: r.get(3)?,
            state: state_name(r.get(4)?),
            body: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// The seq after which [`follow_after`] with the same filters returns the last `n` matching rows (0 when
/// there are no more than `n`): seqs have gaps and other sessions' rows, so `last_seq - n` is not it.
pub fn seq_before_last(
    conn: &Connection,
    n: i64,
    session: Option<&str>,
    kind: Option<&str>,
) -> rusqlite::Result<i64> {
    conn.query_row(
        "SELECT coalesce((SELECT seq FROM events
             WHERE (?1 IS NULL OR session_id = ?1) AND (?2 IS NULL OR kind = ?2)
             ORDER BY seq DESC LIMIT 1 OFFSET ?3), 0)",
        params![session, kind, n],
        |r| r.get(0),
    )
}

/// The highest seq committed so far (0 when empty).
pub fn last_seq(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT coalesce(max(seq), 0) FROM events", [], |r| r.get(0))
}

pub fn state_name(state: i64) -> &'static str {
    match state {
        store::state::PENDING => "pending",
        store::state::DELIVERED => "delivered",
        store::state::DUPLICATE => "duplicate",
        store::state::REJECTED => "rejected",
        store::state::EVICTED => "evicted",
        store::state::PURGED => "purged",
        store::state::EXPORTED => "exported",
        _ => "unknown",
    }
}

pub fn checkpoints(conn: &Connection) -> rusqlite::Result<Vec<Checkpoint>> {
    let mut stmt = conn.prepare_cached(
        r#"SELECT source_key, path, file_id, "offset", head_hash FROM checkpoints ORDER BY source_key"#,
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Checkpoint {
            source_key: r.get(0)?,
            path: r.get(1)?,
            file_id: r.get(2)?,
            offset: r.get::<_, i64>(3)? as u64,
            head_hash: r.get(4)?,
        })
    })?;
    rows.collect()
}

/// One dead letter (reason and position; the redacted event only for ingest rejections).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetter {
    pub at: Option<DateTime<Utc>>,
    pub event_id: Option<Uuid>,
    pub source: String,
    pub line_no: Option<i64>,
    pub offset: Option<i64>,
    pub reason: String,
    pub body: Option<String>,
}

pub fn dead_letters(conn: &Connection, limit: i64) -> rusqlite::Result<Vec<DeadLetter>> {
    let mut stmt = conn.prepare_cached(
        "SELECT at, event_id, source, line_no, byte_offset, reason, body FROM dead_letters
         ORDER BY id DESC LIMIT ?1",
    )?;
    let rows = stmt.query_map([limit], |r| {
        Ok(DeadLetter {
            at: ms_to_time(r.get(0)?),
            event_id: r
                .get::<_, Option<Vec<u8>>>(1)?
                .and_then(|b| Uuid::from_slice(&b).ok()),
            source: r.get(2)?,
            line_no: r.get(3)?,
            offset: r.get(4)?,
            reason: r.get(5)?,
            body: r.get(6)?,
        })
    })?;
    rows.collect()
}

fn ms_to_time(ms: i64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}
