//! Settling the sync target's identity before anything is sent ([`Pusher::settle`]).
//!
//! A push token may be bound to a user and a device; the ingest refuses a batch that claims another. So
//! whenever the sync target changes — sharing turned on (by the settings page, `PUT /v1/sync` or
//! `apiary-agent sync enable` from another process), another endpoint, another token in the token file,
//! the file's mode changed — the loop asks `GET /v1/whoami` and adopts the answer
//! ([`crate::outbox::Outbox::adopt`]) before it claims or sends anything, with no restart:
//!
//! | whoami                                    | what the loop does                                          |
//! |-------------------------------------------|-------------------------------------------------------------|
//! | an identity that agrees with `[identity]` | adopts it; sends                                            |
//! | an identity that contradicts it           | pauses sync with `identity-mismatch: …` (the setting to change) |
//! | anything else (unreachable, 401/403, a token file that cannot be used, an older ingest without whoami) | sends: the push meets the same problem and handles it (backoff, or a pause with the reason); asks again after a backoff (1 s doubling to 30 s) |
//!
//! A pause for a problem the user fixes in place (`re-authenticate`, `identity-mismatch`) is lifted by
//! the loop itself: when the token file changes (contents, size or mode) it asks again at once, otherwise
//! every [`PAUSED_RETRY`]; once the answer is good, the pause is cleared and the backlog goes. So the advice
//! "put a valid token in the token file" or "chmod 600 the token file" is the whole fix.

use std::time::{Duration, Instant};

use super::whoami::AskError;
use crate::identity::IDENTITY_MISMATCH;

use crate::outbox::{SyncChange, SyncStatus};

use super::{Pusher, REAUTHENTICATE};

/// How often a paused loop asks again when nothing about the target changed.
pub const PAUSED_RETRY: Duration = Duration::from_secs(30);
/// How long a settled target is trusted before the stored sync state is read again.
const RECHECK: Duration = Duration::from_millis(200);
/// The longest wait between two attempts to ask an ingest that gave no identity.
const UNREACHABLE_CAP: Duration = Duration::from_secs(30);

/// What the loop knows about the sync target (kept behind a lock: one whoami at a time).
#[derive(Debug, Default)]
pub(super) struct Settled {
    /// The target whose identity was settled (adopted, or found unanswerable by an older ingest).
    target: Option<Target>,
    /// When the stored sync state was last read while settled.
    checked_at: Option<Instant>,
    /// The target of the last failed attempt, when to try again, and when it failed.
    failed: Option<(Target, Instant, Instant)>,
    /// Consecutive attempts without an identity (the backoff's exponent).
    unreachable: u32,
}

/// A sync target as the user last set it: a change of any part means asking again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    endpoint: String,
    token_file: String,
    /// When sync was last switched on (every enable asks again, also with the same endpoint and file).
    changed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The token file's length, modification time and permissions (`None` when it cannot be read).
    file: Option<(u64, Option<std::time::SystemTime>, std::fs::Permissions)>,
}

impl Target {
    fn of(sync: &SyncStatus) -> Option<Target> {
        let (Some(endpoint), Some(token_file)) = (&sync.endpoint, &sync.token_file) else {
            return None;
        };
        let file = std::fs::metadata(token_file)
            .ok()
            .map(|m| (m.len(), m.modified().ok(), m.permissions()));
        Some(Target {
            endpoint: endpoint.clone(),
            token_file: token_file.clone(),
            changed_at: sync.changed_at,
            file,
        })
    }
}

/// Whether a pause is one the user fixes in place (the token file or the token), so the loop lifts it.
fn lifts_by_itself(reason: &str) -> bool {
    reason == REAUTHENTICATE
        || reason.starts_with(&format!("{REAUTHENTICATE}:"))
        || reason.starts_with(IDENTITY_MISMATCH)
}

impl Pusher {
    /// True when sending may go on (see the module notes): false while sync is off or paused, or when
    /// the token's identity contradicts `[identity]`.
    pub(super) async fn settle(&self) -> bool {
        let mut st = self.settled.lock().await;
        if st.target.is_some() && st.checked_at.is_some_and(|t| t.elapsed() < RECHECK) {
            return true;
        }
        let Ok(sync) = self.outbox.sync_status().await else {
            return false;
        };
        if !sync.enabled {
            st.target = None;
            return false;
        }
        let Some(target) = Target::of(&sync) else {
            return false;
        };
        let paused = sync.paused_reason.clone();
        if paused.is_none() && st.target.as_ref() == Some(&target) {
            st.checked_at = Some(Instant::now());
            return true;
        }
        if let Some(reason) = &paused {
            if !lifts_by_itself(reason) {
                return false; // e.g. an invalid endpoint: only a new `sync enable` changes it
            }
        }
        if let Some((failed, due, at)) = &st.failed {
            // Paused over this very target (asked already): the pause's pace, not the backoff's.
            let due = if paused.is_some() {
                (*due).max(*at + PAUSED_RETRY)
            } else {
                *due
            };
            if failed == &target && Instant::now() < due {
                return paused.is_none();
            }
        }
        let asked = super::whoami::ask(
            &self.identity,
            &target.endpoint,
            std::path::Path::new(&target.token_file),
        )
        .await;
        match asked {
            Ok(adoption) => {
                if let Err(e) = self.outbox.adopt(&adoption).await {
                    tracing::warn!(error = %e, "could not adopt the sync token's identity");
                    st.failed = Some((
                        target,
                        Instant::now() + Duration::from_secs(1),
                        Instant::now(),
                    ));
                    return paused.is_none();
                }
                if paused.is_some() {
                    if let Err(e) = self
                        .outbox
                        .set_sync(SyncChange::Pause { reason: None })
                        .await
                    {
                        tracing::warn!(error = %e, "could not resume sync");
                        return false;
                    }
                    tracing::info!("sync resumed: the ingest accepts the token again");
                    let resumed =
                        serde_json::json!({"result": "resumed", "at": chrono::Utc::now()});
                    if let Err(e) = self.outbox.record_push(resumed).await {
                        tracing::warn!(error = %e, "could not record the resumption");
                    }
                }
                self.settled_on(&mut st, target)
            }
            Err(e @ AskError::Contradicts(_)) => {
                st.failed = Some((target, Instant::now() + PAUSED_RETRY, Instant::now()));
                // Also over a pause a push set first (a 403 for the device, before this answer came):
                // the contradiction names the setting to change.
                let reason = e.pause_reason().unwrap_or_default();
                if paused.as_deref() != Some(reason.as_str()) {
                    if let Err(e) = self.pause(Vec::new(), &reason, reason.clone()).await {
                        tracing::warn!(error = %e, "could not pause sync");
                    }
                }
                false
            }
            Err(e) => {
                // Unreachable, refused, a token file that cannot be used, an older ingest without whoami:
                // the push itself meets the same problem and handles it (backoff, or a pause with the
                // reason), so it goes on, asking again after a backoff until the answer is an identity.
                st.unreachable = st.unreachable.saturating_add(1);
                let wait = if paused.is_some() {
                    PAUSED_RETRY
                } else {
                    Duration::from_secs(1 << st.unreachable.min(5).saturating_sub(1))
                        .min(UNREACHABLE_CAP)
                };
                tracing::warn!(error = %e, retry_in = ?wait, "the ingest did not say who the sync token is");
                st.failed = Some((target, Instant::now() + wait, Instant::now()));
                paused.is_none()
            }
        }
    }

    fn settled_on(&self, st: &mut Settled, target: Target) -> bool {
        st.target = Some(target);
        st.checked_at = Some(Instant::now());
        st.failed = None;
        st.unreachable = 0;
        true
    }
}
