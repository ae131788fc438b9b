//! The last budget state ("quota") the ingest sent this device, kept in memory and in the `quota` table
//! (schema version 8, one row), so `GET /v1/quota`, `apiary-agent status` (another process) and a
//! restarted agent can show it.
//!
//! ## Which answer wins
//! The ingest puts a [`Quota`] in its answer to a batch when the agent asks (`X-Apiary-Quota: 1`, every
//! batch and heartbeat does). Up to `push.concurrency` batches are in flight, so answers may arrive out
//! of order: a quota replaces the kept one unless it was read earlier (`as_of`) than the kept one
//! ([`supersedes`]), and a kept quota older than [`OUT_OF_ORDER_WINDOW`] is replaced by any answer, so
//! an ingest whose clock went back does not freeze it. An answer without the field (an older ingest)
//! keeps what is known; an answer with `budgets: []` replaces it (no budget applies any more).
//!
//! ## Advisory
//! The quota is information: nothing in the agent stops, slows or drops anything because a budget is
//! spent (the events already happened; losing them would make every later number wrong). A runtime or
//! the desktop may read it and choose to stop.

use std::time::Duration;

use apiary_schema::quota::Quota;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

/// How long after it arrived a kept quota can still be displaced only by a newer reading.
pub const OUT_OF_ORDER_WINDOW: Duration = Duration::from_secs(60);

/// The last quota the ingest sent, and when it arrived here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeptQuota {
    /// The ingest's budget state, as sent.
    pub quota: Quota,
    /// When the answer carrying it arrived (this device's clock, whole milliseconds as stored).
    pub received_at: DateTime<Utc>,
}

/// The body of `GET /v1/quota`, and `quota` in `GET /v1/status` and `apiary-agent status --json`:
///
/// ```json
/// {"quota": {"as_of": "…", "budgets": [{"budget_id", "name"?, "scope", "period", "tz", "period_start",
///            "period_end", "unit": "usd"|"tokens", "limit", "spent", "percent", "thresholds", "crossed"}]},
///  "received_at": "2026-11-03T10:00:00Z",
///  "advisory": true}
/// ```
///
/// `quota` and `received_at` are `null` until the ingest sent one (never a 404). `limit` and `spent` are
/// integers in the budget's unit: nano-USD for `usd`, input + output tokens for `tokens`. `advisory` is
/// always true: the agent never stops on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaView {
    /// The ingest's budget state for this device's user; `null` when none was received yet.
    pub quota: Option<Quota>,
    /// When it arrived here (RFC 3339); `null` with `quota`.
    pub received_at: Option<DateTime<Utc>>,
    /// Always true: enforcement is up to whoever reads this.
    pub advisory: bool,
}

impl Default for QuotaView {
    fn default() -> Self {
        QuotaView {
            quota: None,
            received_at: None,
            advisory: true,
        }
    }
}

impl From<Option<KeptQuota>> for QuotaView {
    fn from(kept: Option<KeptQuota>) -> Self {
        match kept {
            Some(k) => QuotaView {
                quota: Some(k.quota),
                received_at: Some(k.received_at),
                advisory: true,
            },
            None => QuotaView::default(),
        }
    }
}

/// True when `new`, arriving at `now`, should replace `kept` (see the module notes).
pub fn supersedes(new: &Quota, kept: Option<&KeptQuota>, now: DateTime<Utc>) -> bool {
    let Some(kept) = kept else {
        return true;
    };
    let window = chrono::Duration::from_std(OUT_OF_ORDER_WINDOW).unwrap_or_default();
    new.as_of >= kept.quota.as_of || now - kept.received_at > window
}

/// The kept quota; `None` when none was received (or the file predates version 8, for a reader of an
/// outbox a running older agent has not migrated yet). An unreadable row is logged and ignored.
pub(crate) fn load(conn: &Connection) -> rusqlite::Result<Option<KeptQuota>> {
    let row: Option<(String, i64)> = match conn
        .prepare_cached("SELECT body, received_at FROM quota WHERE id = 1")
    {
        Ok(mut stmt) => stmt
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?,
        Err(rusqlite::Error::SqliteFailure(_, Some(m))) if m.starts_with("no such table") => None,
        Err(e) => return Err(e),
    };
    let Some((body, received_ms)) = row else {
        return Ok(None);
    };
    match serde_json::from_str::<Quota>(&body) {
        Ok(quota) => Ok(Some(KeptQuota {
            quota,
            received_at: DateTime::from_timestamp_millis(received_ms).unwrap_or_default(),
        })),
        Err(e) => {
            tracing::warn!(error = %e, "unreadable stored quota; ignoring it");
            Ok(None)
        }
    }
}

/// Stores `kept` as the kept quota (the handle decided it supersedes, see [`supersedes`]).
pub(crate) fn store(conn: &Connection, kept: &KeptQuota) -> rusqlite::Result<()> {
    let body = serde_json::to_string(&kept.quota).expect("a quota serialises");
    conn.prepare_cached(
        "INSERT INTO quota (id, body, received_at) VALUES (1, ?1, ?2)
         ON CONFLICT(id) DO UPDATE SET body = ?1, received_at = ?2",
    )?
    .execute(params![body, kept.received_at.timestamp_millis()])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(as_of: &str) -> Quota {
        Quota {
            as_of: as_of.parse().unwrap(),
            budgets: vec![],
        }
    }

    #[test]
    fn a_later_reading_wins_and_an_earlier_one_arriving_late_does_not() {
        let now: DateTime<Utc> = "2026-11-03T10:00:30Z".parse().unwrap();
        let kept = KeptQuota {
            quota: quota("2026-11-03T10:00:20Z"),
            received_at: "2026-11-03T10:00:21Z".parse().unwrap(),
        };
        assert!(supersedes(&quota("2026-11-03T10:00:00Z"), None, now));
        assert!(supersedes(&quota("2026-11-03T10:00:25Z"), Some(&kept), now));
        assert!(supersedes(&quota("2026-11-03T10:00:20Z"), Some(&kept), now));
        assert!(!supersedes(
            &quota("2026-11-03T10:00:10Z"),
            Some(&kept),
            now
        ));
        let much_later = now + chrono::Duration::minutes(5);
        assert!(
            supersedes(&quota("2026-11-03T09:00:00Z"), Some(&kept), much_later),
            "an ingest whose clock went back does not freeze the quota"
        );
    }

    #[test]
    fn the_view_is_null_until_a_quota_arrives_and_always_advisory() {
        let empty = serde_json::to_value(QuotaView::from(None)).unwrap();
        assert_eq!(
            empty,
            serde_json::json!({"quota": null, "received_at": null, "advisory": true})
        );
        let kept = KeptQuota {
            quota: quota("2026-11-03T10:00:20Z"),
            received_at: "2026-11-03T10:00:21Z".parse().unwrap(),
        };
        let v = serde_json::to_value(QuotaView::from(Some(kept))).unwrap();
        assert_eq!(v["quota"]["budgets"], serde_json::json!([]));
        assert_eq!(v["received_at"], "2026-11-03T10:00:21Z");
        assert_eq!(v["advisory"], true);
    }
}
