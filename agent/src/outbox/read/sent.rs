//! What was sent: the last [`SENT_KEPT`] events the ingest accepted (or answered as duplicates), as they
//! left the device.
//!
//! ## Table (version 9)
//! `sent_events`: a ring of the redacted canonical JSON of acked events, exactly the bytes the push
//! loop spliced into the batch (the outbox's `body`). Delivered rows lose their body (they become
//! tombstones, see [`crate::outbox::deliver::delivery`]), so the ring keeps a copy, written by the ack
//! in the same transaction that turns the row into a tombstone; nothing else writes it. So it never
//! holds an event that was not acked by the ingest (not a rejected one, not one exported, purged or
//! still pending).
//!
//! Only the last [`SENT_KEPT`] acks of a batch are copied (the earlier ones would be pruned at once),
//! and the ring is pruned to [`SENT_KEPT`] rows by `id` (AUTOINCREMENT: ack order) in the same
//! transaction.

use chrono::{DateTime, TimeZone, Utc};
use rusqlite::{params, Connection};
use serde::Serialize;
use uuid::Uuid;

/// How many sent events are kept.
pub const SENT_KEPT: usize = 50;

/// One event as it left the device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SentEvent {
    pub event_id: Uuid,
    pub kind: String,
    pub occurred_at: DateTime<Utc>,
    /// When the ingest's answer was recorded.
    pub sent_at: DateTime<Utc>,
    /// The ingest already had it (an earlier copy was sent).
    pub duplicate: bool,
    /// The redacted canonical event, JSON, byte for byte as sent.
    pub body: String,
}

/// Copies the row `seq` into the ring if it is still pending (call before it is turned into a
/// tombstone). True when copied.
pub(crate) fn try_keep(
    conn: &Connection,
    seq: i64,
    sent_at_ms: i64,
    duplicate: bool,
) -> rusqlite::Result<bool> {
    let n = conn
        .prepare_cached(
            "INSERT INTO sent_events (event_id, kind, occurred_at, sent_at, duplicate, body)
             SELECT event_id, kind, occurred_at, ?2, ?3, body FROM events
             WHERE seq = ?1 AND state = 0 AND body IS NOT NULL",
        )?
        .execute(params![seq, sent_at_ms, duplicate])?;
    Ok(n == 1)
}

/// Keeps the newest [`SENT_KEPT`] rows.
pub(crate) fn prune(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM sent_events WHERE id <= (SELECT max(id) FROM sent_events) - ?1",
    )?
    .execute([SENT_KEPT as i64])?;
    Ok(())
}

/// The newest `limit` sent events, newest first.
pub fn newest(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<SentEvent>> {
    let ms = |v: i64| Utc.timestamp_millis_opt(v).single().unwrap_or_default();
    conn.prepare_cached(
        "SELECT event_id, kind, occurred_at, sent_at, duplicate, body FROM sent_events
         ORDER BY id DESC LIMIT ?1",
    )?
    .query_map([limit as i64], |r| {
        Ok(SentEvent {
            event_id: Uuid::from_slice(&r.get::<_, Vec<u8>>(0)?).unwrap_or_default(),
            kind: r.get(1)?,
            occurred_at: ms(r.get(2)?),
            sent_at: ms(r.get(3)?),
            duplicate: r.get(4)?,
            body: r.get(5)?,
        })
    })?
    .collect()
}
