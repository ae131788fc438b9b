//! The intake op: commits a producer's items (and, for the tailer, its checkpoint) in one transaction.
//!
//! ## Capacity
//! Before writing, the op measures the database (`(page_count - freelist_count) * page_size`) and adds an
//! estimate of what it is about to write (body bytes + [`ROW_OVERHEAD`] per event). Over `max_bytes`:
//! 1. the oldest tombstones are pruned first (dedup memory is the cheapest thing to give up);
//! 2. then, under `overflow = "reject"`, the whole submission is refused ([`OutboxError::Full`], HTTP 503
//!    with Retry-After): nothing of it is received, the producer keeps it and retries;
//! 3. under `overflow = "drop_oldest"`, the oldest pending events are deleted until about as many bytes
//!    as the submission needs are free (never more than 4× its size per submission, so a lowered cap
//!    converges over several submissions instead of emptying the outbox at once). Each is counted
//!    `evicted` and as an unreported drop, later reported upstream as an `outbox.dropped` event.
//!
//! The cap is therefore enforced within one submission's size; SQLite reuses the freed space.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use uuid::Uuid;

use super::durations;
use super::op::{Ctx, Task};
use super::sessions;
use super::store::{self, state};
use crate::outbox::error::OutboxError;
use crate::outbox::record::counters::{Counter, DropReason};
use crate::outbox::record::item::{Item, PreparedEvent, UsageAgg};
use crate::outbox::record::usage_time;
use crate::outbox::settings::Overflow;
use crate::tail::sink::Checkpoint;

/// Estimated bytes a row costs beyond its body (row header, event_id and partial index entries).
pub const ROW_OVERHEAD: u64 = 150;
/// Tombstones pruned per attempt when the cap is reached.
const PRUNE_CHUNK: i64 = 20_000;

/// What one submission did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SubmitReport {
    /// New pending events.
    pub accepted: u64,
    /// Event ids already in the outbox.
    pub duplicates: u64,
    /// Not durable.
    pub filtered: u64,
    /// Unreadable (dead-lettered).
    pub rejected: u64,
    /// Older events evicted to make room (`drop_oldest`).
    pub evicted: u64,
}

pub(crate) struct Submit {
    pub items: Vec<Item>,
    pub checkpoint: Option<Checkpoint>,
}

impl Submit {
    fn estimate(&self) -> u64 {
        self.items
            .iter()
            .map(|i| match i {
                Item::Kept(e) => e.body.len() as u64 + ROW_OVERHEAD,
                _ => 0,
            })
            .sum()
    }

    fn kept(&self) -> i64 {
        self.items
            .iter()
            .filter(|i| matches!(i, Item::Kept(_)))
            .count() as i64
    }
}

impl Task for Submit {
    type Output = SubmitReport;
    const WRITES_EVENTS: bool = true;

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<SubmitReport, OutboxError>> {
        let mut report = SubmitReport::default();
        if let Room::Refused(e) = try_make_room(ctx, self.estimate(), &mut report)? {
            ctx.count(Counter::Refused, self.kept());
            return Ok(Err(e));
        }
        let pairing = durations::attach(ctx, &mut self.items)?;
        let mut inserted = Vec::with_capacity(self.items.len());
        let conn = ctx.conn;
        let mut statements = EventStatements::prepare(conn)?;
        // Keys first (each decides new or duplicate), then the new rows in multi-row inserts, then what
        // they add to the group's state, in the submission's order throughout.
        let mut new = Vec::with_capacity(self.items.len());
        for item in &self.items {
            let fresh = try_claim_item(ctx, &mut statements, item, &mut report)?;
            if let (true, Item::Kept(e)) = (fresh, item) {
                new.push(e);
            }
            inserted.push(fresh);
        }
        statements.insert_rows(ctx, &new)?;
        drop(statements);
        for e in new {
            try_record_new(ctx, e)?;
        }
        durations::record(ctx, &self.items, &inserted, pairing)?;
        let received: u64 = self.items.iter().map(Item::received).sum();
        ctx.count(Counter::Received, received as i64);
        if let Some(cp) = &self.checkpoint {
            try_save_checkpoint(ctx, cp)?;
        }
        Ok(Ok(report))
    }

    fn weight(&self) -> usize {
        self.items.len().max(1)
    }
}

enum Room {
    Available,
    Refused(OutboxError),
}

/// Checks the cap; prunes tombstones, then refuses or evicts per the overflow policy.
fn try_make_room(
    ctx: &mut Ctx<'_>,
    estimate: u64,
    report: &mut SubmitReport,
) -> rusqlite::Result<Room> {
    if estimate == 0 {
        return Ok(Room::Available);
    }
    let max = ctx.settings.max_bytes;
    let mut used = store::used_bytes(ctx.conn)?;
    if used + estimate <= max {
        return Ok(Room::Available);
    }
    if store::prune_tombstones_before(ctx.conn, i64::MAX, PRUNE_CHUNK)? > 0 {
        used = store::used_bytes(ctx.conn)?;
        if used + estimate <= max {
            return Ok(Room::Available);
        }
    }
    match ctx.settings.overflow {
        Overflow::Reject => Ok(Room::Refused(OutboxError::Full {
            retry_after: std::time::Duration::from_secs(ctx.settings.retry_after_secs),
        })),
        Overflow::DropOldest => {
            let need = (used + estimate - max).min(estimate * 4).max(estimate);
            report.evicted = try_evict(ctx, need)?;
            Ok(Room::Available)
        }
    }
}

/// Deletes the oldest pending events until about `need` bytes are freed. Returns how many.
///
/// Events in flight (claimed by a push that has not settled) are passed over: the ingest may already
/// have stored them, and one evicted then would be counted, and reported upstream, as dropped while the
/// cloud has it (seen as one event too many in the cloud under load). The outbox may stay over its cap
/// by what is in flight until the push settles.
fn try_evict(ctx: &mut Ctx<'_>, need: u64) -> rusqlite::Result<u64> {
    let mut victims = Vec::new();
    let mut freed = 0u64;
    {
        let mut stmt = ctx.conn.prepare_cached(
            "SELECT seq, bytes, event_id FROM events WHERE state = 0 ORDER BY seq",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let (seq, bytes): (i64, i64) = (row.get(0)?, row.get(1)?);
            let id = Uuid::from_slice(&row.get::<_, Vec<u8>>(2)?).unwrap_or_default();
            if ctx.state.is_in_flight(&id, ctx.delta) {
                continue;
            }
            victims.push((seq, bytes));
            freed += bytes as u64 + ROW_OVERHEAD;
            if freed >= need {
                break;
            }
        }
    }
    let mut delete = ctx
        .conn
        .prepare_cached("DELETE FROM events WHERE seq = ?1")?;
    let mut bytes_total = 0i64;
    for (seq, bytes) in &victims {
        delete.execute([seq])?;
        bytes_total += bytes;
    }
    let n = victims.len() as i64;
    ctx.count(Counter::Evicted, n);
    ctx.count(Counter::Pending, -n);
    ctx.count(Counter::PendingBytes, -bytes_total);
    ctx.count(Counter::Unreported(DropReason::Evicted), n);
    if n > 0 {
        tracing::warn!(evicted = n, "outbox full: oldest pending events evicted");
    }
    Ok(n as u64)
}

/// Claims a kept event's key or counts any other item; true for a kept event that is new (not a
/// duplicate), whose row the caller then inserts ([`EventStatements::insert_rows`]).
fn try_claim_item(
    ctx: &mut Ctx<'_>,
    statements: &mut EventStatements<'_>,
    item: &Item,
    report: &mut SubmitReport,
) -> rusqlite::Result<bool> {
    match item {
        Item::Kept(e) => {
            if try_claim_key(ctx, statements, e)? {
                report.accepted += 1;
                return Ok(true);
            }
            report.duplicates += 1;
            ctx.count(Counter::Duplicate, 1);
        }
        Item::Filtered { reason, count } => {
            report.filtered += count;
            ctx.count(Counter::Filtered, *count as i64);
            ctx.count(Counter::FilteredBy(reason.clone()), *count as i64);
        }
        Item::Malformed {
            source,
            line_no,
            offset,
            reason,
        } => {
            report.rejected += 1;
            store::insert_dead_letter(
                ctx.conn, ctx.now_ms, None, source, *line_no, *offset, reason, None,
            )?;
            ctx.count(Counter::Rejected, 1);
            ctx.count(Counter::Unreported(DropReason::Malformed), 1);
        }
        Item::MalformedMany {
            source,
            count,
            reason,
        } => {
            report.rejected += count;
            store::insert_dead_letter(
                ctx.conn, ctx.now_ms, None, source, None, None, reason, None,
            )?;
            ctx.count(Counter::Rejected, *count as i64);
            ctx.count(Counter::Unreported(DropReason::Malformed), *count as i64);
        }
    }
    Ok(false)
}

/// The statements every new event runs, prepared once per submission: taking each from the connection's
/// cache per event hashed its SQL text and put it back every time (about 4% of the writer's time on Hive's
/// mixed stream).
pub(crate) struct EventStatements<'c> {
    known: rusqlite::CachedStatement<'c>,
    recent: rusqlite::CachedStatement<'c>,
    insert: rusqlite::CachedStatement<'c>,
    insert_many: rusqlite::CachedStatement<'c>,
}

/// The columns of a new event's row, in the order [`bind_row`] binds them.
const EVENT_COLUMNS: &str =
    "event_id, state, held, kind, session_id, occurred_at, received_at, policy_id, bytes, body";
const EVENT_VALUES: usize = 10;

/// Rows one multi-row insert carries. Every execution of an insert opens a cursor on the table and on
/// each of its indexes, reads and writes the table's AUTOINCREMENT counter, and resets the statement;
/// a statement of many rows does that once for all of them (see docs/performance.md, "The writer's
/// side").
const ROWS_PER_INSERT: usize = 32;

/// `INSERT INTO events (…) VALUES (?, …), … ` for `rows` rows.
fn insert_sql(rows: usize) -> String {
    let row = format!("({})", ["?"; EVENT_VALUES].join(", "));
    format!(
        "INSERT INTO events ({EVENT_COLUMNS}) VALUES {}",
        vec![row.as_str(); rows].join(", ")
    )
}

static INSERT_ONE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| insert_sql(1));
static INSERT_MANY: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| insert_sql(ROWS_PER_INSERT));

impl<'c> EventStatements<'c> {
    pub(crate) fn prepare(conn: &'c rusqlite::Connection) -> rusqlite::Result<EventStatements<'c>> {
        Ok(EventStatements {
            known: conn.prepare_cached(
                "SELECT 1 FROM dedup_keys WHERE occurred_at = ?1 AND event_id = ?2",
            )?,
            recent: conn.prepare_cached(
                "INSERT OR IGNORE INTO dedup_recent (occurred_at, event_id) VALUES (?1, ?2)",
            )?,
            insert: conn.prepare_cached(&INSERT_ONE)?,
            insert_many: conn.prepare_cached(&INSERT_MANY)?,
        })
    }

    /// Inserts the rows of `events` (their keys claimed, [`try_claim_key`]), in order: whole chunks of
    /// [`ROWS_PER_INSERT`] by the multi-row statement, the rest one by one.
    pub(crate) fn insert_rows(
        &mut self,
        ctx: &Ctx<'_>,
        events: &[&PreparedEvent],
    ) -> rusqlite::Result<()> {
        let mut chunks = events.chunks_exact(ROWS_PER_INSERT);
        for chunk in &mut chunks {
            for (row, e) in chunk.iter().enumerate() {
                bind_row(&mut self.insert_many, row * EVENT_VALUES, ctx, e)?;
            }
            self.insert_many.raw_execute()?;
        }
        for e in chunks.remainder() {
            bind_row(&mut self.insert, 0, ctx, e)?;
            self.insert.raw_execute()?;
        }
        Ok(())
    }
}

/// Binds `e`'s row at parameters `at + 1 ..= at + EVENT_VALUES` ([`EVENT_COLUMNS`]).
fn bind_row(
    stmt: &mut rusqlite::Statement<'_>,
    at: usize,
    ctx: &Ctx<'_>,
    e: &PreparedEvent,
) -> rusqlite::Result<()> {
    stmt.raw_bind_parameter(at + 1, e.event_id.as_bytes().as_slice())?;
    stmt.raw_bind_parameter(at + 2, state::PENDING)?;
    stmt.raw_bind_parameter(at + 3, i64::from(!ctx.sync_enabled))?;
    stmt.raw_bind_parameter(at + 4, e.kind.as_str())?;
    stmt.raw_bind_parameter(at + 5, e.session_id.as_deref())?;
    stmt.raw_bind_parameter(at + 6, e.occurred_at_ms)?;
    stmt.raw_bind_parameter(at + 7, ctx.now_ms)?;
    stmt.raw_bind_parameter(at + 8, ctx.state.policy_id)?;
    stmt.raw_bind_parameter(at + 9, e.body.len() as i64)?;
    stmt.raw_bind_parameter(at + 10, e.body.as_str())?;
    Ok(())
}

/// Inserts one event; false when its id is already in the outbox (a duplicate).
pub(crate) fn try_insert_event(
    ctx: &mut Ctx<'_>,
    statements: &mut EventStatements<'_>,
    e: &PreparedEvent,
) -> rusqlite::Result<bool> {
    if !try_claim_key(ctx, statements, e)? {
        return Ok(false);
    }
    statements.insert_rows(ctx, &[e])?;
    try_record_new(ctx, e)?;
    Ok(true)
}

/// Claims `e`'s dedup key: false when it is already in the outbox (a duplicate).
fn try_claim_key(
    ctx: &mut Ctx<'_>,
    statements: &mut EventStatements<'_>,
    e: &PreparedEvent,
) -> rusqlite::Result<bool> {
    // Dedup (schema version 12): the key is in the big table, or goes into the small one.
    let key = rusqlite::params![e.occurred_at_ms, e.event_id.as_bytes().as_slice()];
    let known = match dedup_keys_max(ctx)? {
        // The big table is in key order, event time first: a key later than its last is not in it (most
        // of a live stream, whose times move forward: one lookup a group instead of one an event).
        Some(max) if e.occurred_at_ms <= max => statements.known.exists(key)?,
        _ => false,
    };
    Ok(!known && statements.recent.execute(key)? == 1)
}

/// What a new event (its row inserted) adds: counters, its session's first sight, the group's usage,
/// health inputs and work facts.
fn try_record_new(ctx: &mut Ctx<'_>, e: &PreparedEvent) -> rusqlite::Result<()> {
    ctx.count(Counter::Pending, 1);
    ctx.count(Counter::PendingBytes, e.body.len() as i64);
    if let Some(session) = &e.session_id {
        sessions::try_bind_on_first_sight(ctx, session, e.parent_session_id.as_deref())?;
        if let Some((model, u)) = e.usage.as_deref() {
            // Looked up by reference: names are copied only for a session or model new to the group.
            let models = match ctx.delta.usage.get_mut(session.as_str()) {
                Some(models) => models,
                None => ctx.delta.usage.entry(session.clone()).or_default(),
            };
            match models.iter_mut().find(|(m, _)| m == model) {
                Some((_, sum)) => sum.add(u),
                None => {
                    let mut sum = UsageAgg::default();
                    sum.add(u);
                    models.push((model.clone(), sum));
                }
            }
            ctx.delta
                .usage_by_time
                .entry(usage_time::bucket_of(e.occurred_at_ms))
                .or_default()
                .add(u);
        }
        if let Some(i) = &e.status {
            push_shared(&mut ctx.delta.status, session, i);
        }
        if let Some(f) = &e.work {
            push_shared(&mut ctx.delta.work, session, f);
        }
    }
    Ok(())
}

/// Appends `item` (shared with its event, not copied) to `session`'s list; the session's name is copied
/// only for its first item in the group.
fn push_shared<T>(map: &mut BTreeMap<String, Vec<Arc<T>>>, session: &str, item: &Arc<T>) {
    match map.get_mut(session) {
        Some(list) => list.push(Arc::clone(item)),
        None => {
            map.insert(session.to_owned(), vec![Arc::clone(item)]);
        }
    }
}

/// The latest event time in `dedup_keys`, read at the group's first insert. It stays true for the whole
/// group: the group holds the write lock (no other process merges meanwhile), keys reach the table only
/// by the merge at the group's end ([`store::merge_dedup_keys`]), and a deletion (eviction, pruning) can
/// only lower it, which costs lookups, never a missed duplicate.
fn dedup_keys_max(ctx: &mut Ctx<'_>) -> rusqlite::Result<Option<i64>> {
    if let Some(max) = ctx.delta.dedup_keys_max {
        return Ok(max);
    }
    let max = ctx
        .conn
        .prepare_cached("SELECT max(occurred_at) FROM dedup_keys")?
        .query_row([], |r| r.get::<_, Option<i64>>(0))?;
    ctx.delta.dedup_keys_max = Some(max);
    Ok(max)
}

fn try_save_checkpoint(ctx: &mut Ctx<'_>, cp: &Checkpoint) -> rusqlite::Result<()> {
    ctx.conn
        .prepare_cached(
            r#"INSERT INTO checkpoints (source_key, path, file_id, "offset", head_hash, updated_at)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6)
               ON CONFLICT(source_key) DO UPDATE SET path = ?2, file_id = ?3, "offset" = ?4,
                   head_hash = ?5, updated_at = ?6"#,
        )?
        .execute(rusqlite::params![
            cp.source_key,
            cp.path,
            cp.file_id,
            cp.offset as i64,
            cp.head_hash,
            ctx.now_ms
        ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The writer closes a group once its jobs weigh [`super::super::writer::GROUP_MAX_EVENTS`]; a
    /// submission weighs one per item (a filtered item stands for its whole count), and a submission of
    /// nothing but a checkpoint still one.
    #[test]
    fn a_submission_weighs_one_per_item_and_at_least_one() {
        let filtered = |count| Item::Filtered {
            reason: "delta".into(),
            count,
        };
        let submit = |items| Submit {
            items,
            checkpoint: None,
        };
        assert_eq!(submit(vec![]).weight(), 1);
        assert_eq!(submit(vec![filtered(500)]).weight(), 1);
        assert_eq!(submit((0..7).map(|_| filtered(1)).collect()).weight(), 7);
    }
}
