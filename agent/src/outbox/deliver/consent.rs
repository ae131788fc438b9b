//! Consent: the sync switch and its history.
//!
//! Sync is **off** on a fresh outbox. Enabling records a `consent_log` row with the time and the hash of
//! the policy in force (what the user agreed to ship), plus the endpoint and token file the push loop
//! will use (the token itself is never stored here). Events committed while sync is off are `held`:
//! they are never uploaded unless sync is enabled with `include_backlog`, which releases the held rows
//! pending at that moment. Disabling stops claims at once (the next claim returns `SyncOff`); with
//! `purge`, every pending row becomes a `purged` tombstone.
//!
//! Enabling also records the colony names choice agreed to (`meta.colony_names_consent`, see
//! [`super::colony`]); under `names` the recorded policy hash is the widened policy's
//! (`Policy::with_colony_names`), which is what leaves the device then.
//!
//! The push loop can *pause* sync (`paused_reason`, e.g. `re-authenticate` after a 401/403) without
//! withdrawing consent; enabling again clears the pause.

use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::outbox::error::OutboxError;
use crate::outbox::record::counters::Counter;
use crate::outbox::write::op::{Ctx, Task};
use crate::outbox::write::store::state;

/// A change of the sync switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum SyncChange {
    Enable {
        endpoint: String,
        token_file: String,
        #[serde(default)]
        include_backlog: bool,
    },
    Disable {
        #[serde(default)]
        purge: bool,
    },
    /// Set by the push loop (401/403: `re-authenticate`); `None` clears it.
    Pause { reason: Option<String> },
}

/// What a change did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    pub enabled: bool,
    /// Held rows released for upload (`include_backlog`).
    pub released: u64,
    /// Pending rows purged.
    pub purged: u64,
}

pub(crate) struct SetSync {
    pub change: SyncChange,
    /// On enable: the colony names choice this consent agrees to.
    pub colony_names: Option<apiary_schema::colony::ColonyNames>,
    /// The policy hash the consent records (the widened one under `names`).
    pub policy_hash: String,
}

impl Task for SetSync {
    type Output = SyncReport;

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<SyncReport, OutboxError>> {
        let mut report = SyncReport::default();
        let hash = self.policy_hash.clone();
        if let (SyncChange::Enable { .. }, Some(names)) = (&self.change, self.colony_names) {
            crate::outbox::write::store::set_meta(
                ctx.conn,
                super::colony::CONSENT_NAMES_KEY,
                names.as_str(),
            )?;
        }
        match &self.change {
            SyncChange::Enable {
                endpoint,
                token_file,
                include_backlog,
            } => {
                ctx.conn.execute(
                    "UPDATE sync_state SET enabled = 1, endpoint = ?1, token_file = ?2,
                        include_backlog = ?3, policy_hash = ?4, changed_at = ?5, paused_reason = NULL
                     WHERE id = 1",
                    params![endpoint, token_file, include_backlog, hash, ctx.now_ms],
                )?;
                if *include_backlog {
                    report.released = ctx.conn.execute(
                        "UPDATE events SET held = 0 WHERE state = 0 AND held = 1",
                        [],
                    )? as u64;
                    ctx.delta.rescan_from(ctx.now_ms);
                }
                log(
                    ctx,
                    ("enable", &hash),
                    Some(endpoint),
                    *include_backlog,
                    0,
                    report.released,
                )?;
                ctx.sync_enabled = true;
                report.enabled = true;
            }
            SyncChange::Disable { purge } => {
                ctx.conn.execute(
                    "UPDATE sync_state SET enabled = 0, changed_at = ?1, paused_reason = NULL WHERE id = 1",
                    [ctx.now_ms],
                )?;
                if *purge {
                    report.purged = try_purge(ctx)?;
                }
                log(ctx, ("disable", &hash), None, false, report.purged, 0)?;
                ctx.sync_enabled = false;
            }
            SyncChange::Pause { reason } => {
                ctx.conn.execute(
                    "UPDATE sync_state SET paused_reason = ?1 WHERE id = 1",
                    [reason],
                )?;
                report.enabled = ctx.sync_enabled;
            }
        }
        Ok(Ok(report))
    }
}

/// Appends a `consent_log` row: the action and the policy hash it was taken under.
fn log(
    ctx: &mut Ctx<'_>,
    (action, policy_hash): (&str, &str),
    endpoint: Option<&String>,
    include_backlog: bool,
    purged: u64,
    released: u64,
) -> rusqlite::Result<()> {
    ctx.conn.execute(
        "INSERT INTO consent_log (at, action, policy_hash, endpoint, include_backlog, purged, released)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            ctx.now_ms,
            action,
            policy_hash,
            endpoint,
            include_backlog,
            purged as i64,
            released as i64
        ],
    )?;
    Ok(())
}

/// Every pending row becomes a `purged` tombstone.
fn try_purge(ctx: &mut Ctx<'_>) -> rusqlite::Result<u64> {
    let (n, bytes): (i64, i64) = ctx.conn.query_row(
        "SELECT count(*), coalesce(sum(bytes), 0) FROM events WHERE state = 0",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    ctx.conn.execute(
        "UPDATE events SET state = ?1, body = NULL, done_at = ?2 WHERE state = 0",
        params![state::PURGED, ctx.now_ms],
    )?;
    ctx.count(Counter::Purged, n);
    ctx.count(Counter::Pending, -n);
    ctx.count(Counter::PendingBytes, -bytes);
    tracing::info!(purged = n, "pending events purged");
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use apiary_schema::{EventKind, Policy};
    use uuid::Uuid;

    use super::*;
    use crate::identity::IdentityDefaults;
    use crate::outbox::{Item, Outbox, OutboxSettings, PreparedEvent};

    fn item(n: u128) -> Item {
        Item::Kept(PreparedEvent {
            event_id: Uuid::from_u128(n),
            kind: EventKind::ToolCall,
            session_id: Some("s".into()),
            parent_session_id: None,
            occurred_at_ms: n as i64,
            body: format!("{{\"n\":{n}}}"),
            usage: None,
            status: None,
            work: None,
            tool: None,
        })
    }

    type LogRow = (String, String, Option<String>, bool, i64, i64);

    #[tokio::test]
    async fn consent_is_logged_with_its_policy_and_a_purge_tombstones_every_pending_row() {
        let dir = tempfile::tempdir().unwrap();
        let policy = Policy::default_policy();
        let outbox = Outbox::open(
            &dir.path().join("o.db"),
            OutboxSettings::default(),
            IdentityDefaults::default(),
            &policy,
        )
        .unwrap();
        outbox.submit((1..=3).map(item).collect()).await.unwrap();
        let enable = SyncChange::Enable {
            endpoint: "https://ingest.example".into(),
            token_file: "/tmp/token".into(),
            include_backlog: true,
        };
        let on = outbox.set_sync(enable).await.unwrap();
        assert_eq!(
            on,
            SyncReport {
                enabled: true,
                released: 3,
                purged: 0
            }
        );
        let off = outbox
            .set_sync(SyncChange::Disable { purge: true })
            .await
            .unwrap();
        assert_eq!(
            off,
            SyncReport {
                enabled: false,
                released: 0,
                purged: 3
            }
        );
        let log: Vec<LogRow> = outbox
            .raw_read_for_test(|c| {
                c.prepare(
                    "SELECT action, policy_hash, endpoint, include_backlog, purged, released
                     FROM consent_log ORDER BY id",
                )?
                .query_map([], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                })?
                .collect()
            })
            .await
            .unwrap();
        let hash = policy.hash().to_string();
        assert_eq!(
            log,
            [
                (
                    "enable".into(),
                    hash.clone(),
                    Some("https://ingest.example".into()),
                    true,
                    0,
                    3
                ),
                ("disable".into(), hash, None, false, 3, 0),
            ]
        );
        let stored = outbox.status().await.unwrap().stored;
        let c = &stored.counters;
        assert_eq!((c.purged, c.pending, c.pending_bytes), (3, 0, 0));
        assert_eq!(stored.pending_events, 0);
        assert!(stored.balanced, "{stored:?}");
        outbox.close().await;
    }
}
