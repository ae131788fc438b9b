//! Local usage by time: what the device's events added, in quarter-hour buckets of event time, so the
//! settings page can say "today" and "this month" in any zone.
//!
//! ## Table (version 9)
//! `usage_by_time`: one row per quarter-hour (UTC, `bucket` = Unix ms of its start) in which events with
//! a usage contribution occurred, holding the sums of those contributions (the shared
//! `apiary_schema::usage` rule, the same sums as the `usage` table). Written by the writer in the same
//! transaction as the events, from the group's [`super::memory::Delta`].
//!
//! - **Why quarter-hours.** Every zone's offset from UTC is a whole number of quarter-hours (India +5:30,
//!   Nepal +5:45), so a local day or month is an exact union of buckets, whatever the zone, its daylight
//!   saving time, or a zone changed after the events were recorded.
//! - **Bounded.** Buckets older than [`KEEP_MS`] are deleted when a group writes new usage: enough for
//!   the current month in any zone. An event that occurred earlier than that (an old log read late) is
//!   still counted in `usage`, never here.
//! - **From version 9 on.** Usage recorded by an older agent is not broken down by time (its rows kept
//!   only per-session totals), so "this month" starts counting at the upgrade.

use std::collections::BTreeMap;

use rusqlite::{params, Connection};
use serde::Serialize;

use super::item::UsageAgg;

/// A bucket's length: a quarter-hour.
pub const BUCKET_MS: i64 = 15 * 60 * 1000;
/// How long buckets are kept: 62 days (a month and its zone offset, with room to spare).
pub const KEEP_MS: i64 = 62 * 24 * 3600 * 1000;

/// Usage sums over a time window (tokens, cost in nano-USD, calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsageWindow {
    /// Events with a usage contribution.
    pub events: i64,
    pub llm_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    /// Cost in nano-USD (exact, like the ingest's rollups).
    pub cost_nanos: i64,
    /// LLM turns without a cost (no price known): the cost is a lower bound when this is not 0.
    pub unpriced_turns: i64,
}

impl UsageWindow {
    /// Adds one event's (or one group's) usage, saturating.
    pub fn add(&mut self, u: &UsageAgg) {
        let sums = [
            (&mut self.events, u.events),
            (&mut self.llm_calls, u.llm_calls),
            (&mut self.input_tokens, u.input_tokens),
            (&mut self.output_tokens, u.output_tokens),
            (&mut self.cached_tokens, u.cached_tokens),
            (&mut self.cache_creation_tokens, u.cache_creation_tokens),
            (&mut self.cost_nanos, u.cost_nanos),
            (&mut self.unpriced_turns, u.unpriced_turns),
        ];
        for (sum, v) in sums {
            *sum = sum.saturating_add(v);
        }
    }

    /// All tokens: input, output, cached and cache creation.
    pub fn tokens(&self) -> i64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cached_tokens)
            .saturating_add(self.cache_creation_tokens)
    }
}

/// The bucket an event time (Unix ms) falls in.
pub fn bucket_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(BUCKET_MS) * BUCKET_MS
}

/// Adds a group's buckets and drops the ones older than [`KEEP_MS`] (only when there is something to add).
pub(crate) fn flush(
    conn: &Connection,
    buckets: &BTreeMap<i64, UsageWindow>,
    now_ms: i64,
) -> rusqlite::Result<()> {
    if buckets.is_empty() {
        return Ok(());
    }
    let oldest = bucket_of(now_ms - KEEP_MS);
    let mut add = conn.prepare_cached(
        "INSERT INTO usage_by_time (bucket, events, llm_calls, input_tokens, output_tokens, cached_tokens,
            cache_creation_tokens, cost_nanos, unpriced_turns)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT(bucket) DO UPDATE SET events = events + ?2, llm_calls = llm_calls + ?3,
            input_tokens = input_tokens + ?4, output_tokens = output_tokens + ?5,
            cached_tokens = cached_tokens + ?6, cache_creation_tokens = cache_creation_tokens + ?7,
            cost_nanos = cost_nanos + ?8, unpriced_turns = unpriced_turns + ?9",
    )?;
    for (bucket, u) in buckets.range(oldest..) {
        add.execute(params![
            bucket,
            u.events,
            u.llm_calls,
            u.input_tokens,
            u.output_tokens,
            u.cached_tokens,
            u.cache_creation_tokens,
            u.cost_nanos,
            u.unpriced_turns
        ])?;
    }
    conn.prepare_cached("DELETE FROM usage_by_time WHERE bucket < ?1")?
        .execute([oldest])?;
    Ok(())
}

/// The usage of the events that occurred in `[from_ms, to_ms)` (bucket starts; see the module notes).
pub fn between(conn: &Connection, from_ms: i64, to_ms: i64) -> rusqlite::Result<UsageWindow> {
    conn.prepare_cached(
        "SELECT coalesce(sum(events), 0), coalesce(sum(llm_calls), 0), coalesce(sum(input_tokens), 0),
            coalesce(sum(output_tokens), 0), coalesce(sum(cached_tokens), 0),
            coalesce(sum(cache_creation_tokens), 0), coalesce(sum(cost_nanos), 0),
            coalesce(sum(unpriced_turns), 0)
         FROM usage_by_time WHERE bucket >= ?1 AND bucket < ?2",
    )?
    .query_row([from_ms, to_ms], |r| {
        Ok(UsageWindow {
            events: r.get(0)?,
            llm_calls: r.get(1)?,
            input_tokens: r.get(2)?,
            output_tokens: r.get(3)?,
            cached_tokens: r.get(4)?,
            cache_creation_tokens: r.get(5)?,
            cost_nanos: r.get(6)?,
            unpriced_turns: r.get(7)?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_quarter_hours_also_before_1970() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(BUCKET_MS - 1), 0);
        assert_eq!(bucket_of(BUCKET_MS), BUCKET_MS);
        assert_eq!(bucket_of(-1), -BUCKET_MS);
    }

    #[test]
    fn a_window_sums_its_buckets_only_and_old_buckets_go() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        let now = 100 * KEEP_MS;
        let one = UsageAgg {
            events: 1,
            llm_calls: 1,
            input_tokens: 10,
            output_tokens: 2,
            cost_nanos: 5,
            ..UsageAgg::default()
        };
        let mut w = UsageWindow::default();
        w.add(&one);
        let mut buckets = BTreeMap::new();
        buckets.insert(bucket_of(now - 1), w);
        buckets.insert(bucket_of(now - 2 * BUCKET_MS), w);
        buckets.insert(bucket_of(now - KEEP_MS - BUCKET_MS), w);
        flush(&conn, &buckets, now).unwrap();
        flush(&conn, &buckets, now).unwrap();
        let last_hour = between(&conn, now - 4 * BUCKET_MS, now).unwrap();
        assert_eq!(last_hour.events, 4);
        assert_eq!(last_hour.tokens(), 48);
        assert_eq!(last_hour.cost_nanos, 20);
        let last_quarter = between(&conn, bucket_of(now - 1), now).unwrap();
        assert_eq!(last_quarter.events, 2);
        let n: i64 = conn
            .query_row("SELECT count(*) FROM usage_by_time", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "the bucket older than KEEP_MS is not kept");
    }
}
