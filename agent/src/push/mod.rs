//! # The push loop: outbox → ingest
//!
//! Runs only while sync is enabled (consent) and the mode is online; in air-gapped mode it is never
//! started, so no socket to the ingest is ever opened. Sync off or paused → nothing is sent, not even a
//! heartbeat.
//!
//! One step ([`Pusher::try_push_once`]) claims a batch from the outbox (bounded by count and bytes), sends
//! it gzip-compressed with the bearer token from the token file (read for every batch, never logged), and
//! settles every claimed event exactly once:
//!
//! | answer                                   | what happens to the claimed rows                          |
//! |------------------------------------------|-----------------------------------------------------------|
//! | 2xx verdicts                             | accepted/duplicate → delivered; rejected → dead letter; a `quota` in the answer is kept |
//! | connection error, timeout, 408, 429, 5xx | `fail`: attempts + 1, next attempt after full-jitter backoff (Retry-After as a floor) — persisted |
//! | 413                                      | split in halves and sent again; a single event → dead letter |
//! | 404, 405, a 4xx without the ingest's error body | a wrong endpoint, not a verdict: like a 5xx (kept, backoff); the reason says which URL to give |
//! | other 4xx                                | split in halves to isolate the culprit; a single event → dead letter with the reason |
//! | 401/403                                  | released untouched; sync paused with `re-authenticate`      |
//! | (not sent) token file refused            | released untouched; sync paused with `re-authenticate`      |
//! | (not sent) endpoint refused ([`target`]) | released untouched; sync paused with `invalid-endpoint`     |
//!
//! Rows leave the outbox only after the ingest confirmed them. The loop ([`run`]) keeps up to
//! `concurrency` batches in flight (the outbox leases claimed rows, so two batches never hold the same
//! event). Small pushes are coalesced ([`cadence`]): claimed events wait up to `coalesce_interval_ms`
//! (+ jitter) to go together, unless `coalesce_events` of them are there, a batch is full, a retry fell
//! due or the loop shuts down; `coalesce_interval_ms = 0` sends whatever a poll finds at once. At
//! shutdown it sends what waits, lets the batches in flight finish for up to `shutdown_grace`, and leaves
//! anything unfinished pending (the ingest dedups a re-send). A heartbeat (backlog, oldest pending age,
//! agent version) goes every `heartbeat_interval`: inside a batch that is sent anyway when one is (it is
//! not an outbox row, so a large backlog never delays it), else as a request of its own. Evictions and
//! dead letters are turned into `outbox.dropped` events on the heartbeat interval's tick.
//!
//! Every batch and heartbeat asks for the budget state of the token's user (`X-Apiary-Quota: 1`); the
//! outbox keeps the latest one an answer carries ([`crate::outbox::Outbox::keep_quota`]; an answer
//! without it keeps the known one). It is advisory: nothing here stops or slows because a budget is
//! spent.

mod backoff;
mod cadence;
mod client;
mod heartbeat;
pub mod pauses;
pub mod register_key;
mod run;
mod settle;
pub mod target;
pub mod whoami;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::outbox::Outbox;
use crate::outbox::SyncChange;
use crate::outbox::{ClaimLimits, Claimed, Idle};

pub use backoff::{parse_retry_after, BackoffPolicy};
pub use client::{error_chain, http_client, PushError, SendResult};

/// The reason shown in `status` when the ingest refused the token (or the token file was refused).
pub const REAUTHENTICATE: &str = "re-authenticate";
/// The reason shown in `status` when the stored endpoint breaks the endpoint rule ([`target`]).
pub const INVALID_ENDPOINT: &str = "invalid-endpoint";

/// Push settings (config section `[push]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PushSettings {
    /// Events per batch at most.
    pub batch_max_events: usize,
    /// Uncompressed JSON bytes per batch at most (one larger event still goes alone).
    pub batch_max_bytes: usize,
    /// Batches in flight at once.
    pub concurrency: usize,
    pub connect_timeout_ms: u64,
    pub request_timeout_ms: u64,
    /// First retry delay ceiling.
    pub backoff_base_ms: u64,
    /// Longest retry delay.
    pub backoff_cap_ms: u64,
    /// How often to look for new events when idle.
    pub poll_interval_ms: u64,
    /// How long claimed events may wait to be sent together (the oldest's wait; see [`cadence`]);
    /// 0 sends whatever a poll found at once.
    pub coalesce_interval_ms: u64,
    /// A random extra wait in `[0, this)` per batch, so agents started together do not push in step.
    pub coalesce_jitter_ms: u64,
    /// A batch of this many events goes at once, without waiting (a size trigger).
    pub coalesce_events: usize,
    /// The shortest push interval adopted from the ingest (its answers carry the interval it wants,
    /// `push_interval_ms`; see [`cadence`]). Until an ingest has said, `coalesce_interval_ms` holds.
    pub min_interval_ms: u64,
    /// The longest push interval adopted from the ingest.
    pub max_interval_ms: u64,
    pub heartbeat_interval_secs: u64,
    /// How long shutdown waits for batches in flight.
    pub shutdown_grace_ms: u64,
}

impl Default for PushSettings {
    fn default() -> Self {
        PushSettings {
            batch_max_events: 1000,
            batch_max_bytes: 4 * 1024 * 1024,
            concurrency: 4,
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            backoff_base_ms: 1_000,
            backoff_cap_ms: 300_000,
            poll_interval_ms: 100,
            coalesce_interval_ms: 1_000,
            coalesce_jitter_ms: 500,
            coalesce_events: 100,
            min_interval_ms: 1_000,
            max_interval_ms: 30_000,
            heartbeat_interval_secs: 30,
            shutdown_grace_ms: 10_000,
        }
    }
}

impl PushSettings {
    fn backoff(&self) -> BackoffPolicy {
        BackoffPolicy {
            base: Duration::from_millis(self.backoff_base_ms.max(1)),
            cap: Duration::from_millis(self.backoff_cap_ms.max(1)),
        }
    }
    fn limits(&self) -> ClaimLimits {
        ClaimLimits {
            max_events: self.batch_max_events.max(1),
            max_bytes: self.batch_max_bytes.max(1),
        }
    }
}

/// What one step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// The batch was answered; counts from the ingest's verdicts (summed over split parts).
    Sent {
        events: usize,
        accepted: u64,
        duplicates: u64,
        rejected: u64,
    },
    /// Nothing to send.
    Idle(Idle),
    /// Not sent; retried after `delay`.
    Backoff {
        events: usize,
        delay: Duration,
        reason: String,
    },
    /// The token was refused: sync is paused until the user re-authenticates.
    Paused { reason: String },
}

impl PushOutcome {
    fn merge(self, other: PushOutcome) -> PushOutcome {
        use PushOutcome::*;
        match (self, other) {
            (Paused { reason }, _) | (_, Paused { reason }) => Paused { reason },
            (
                Sent {
                    events: e1,
                    accepted: a1,
                    duplicates: d1,
                    rejected: r1,
                },
                Sent {
                    events: e2,
                    accepted: a2,
                    duplicates: d2,
                    rejected: r2,
                },
            ) => Sent {
                events: e1 + e2,
                accepted: a1 + a2,
                duplicates: d1 + d2,
                rejected: r1 + r2,
            },
            (b @ Backoff { .. }, _) | (_, b @ Backoff { .. }) => b,
            (s, _) => s,
        }
    }
}

/// Pushes batches from one outbox to the ingest its sync settings name.
pub struct Pusher {
    outbox: Outbox,
    settings: PushSettings,
    client: reqwest::Client,
    /// The configured identity (`[identity]`), reconciled with the sync token's answer whenever the
    /// sync target changes ([`Pusher::settle`]).
    identity: crate::identity::IdentityDefaults,
    /// The sync target whose token identity was last settled, and when to ask again after a failure.
    settled: tokio::sync::Mutex<settle::Settled>,
    started: std::time::Instant,
    /// Runtime liveness of the sessions the tailer's scan found (empty when no Hive home is tailed):
    /// the heartbeat carries it.
    runtimes: crate::tail::runtime::RuntimeWatch,
    /// When the last heartbeat went and whether one rides in a batch in flight (shared by the loop and
    /// its delivery tasks; see [`cadence`]).
    beat: std::sync::Mutex<cadence::BeatClock>,
    /// The push interval the ingest last asked for (milliseconds; 0 until one has).
    directed: std::sync::atomic::AtomicU64,
}

type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<PushOutcome, PushError>> + Send + 'a>>;
/// A step that may carry the heartbeat: its outcome, and whether the heartbeat reached the ingest.
type CarryFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(PushOutcome, bool), PushError>> + Send + 'a>>;

impl Pusher {
    pub fn new(outbox: Outbox, settings: PushSettings) -> Result<Pusher, PushError> {
        let client = client::http_client(
            Duration::from_millis(settings.connect_timeout_ms),
            Duration::from_millis(settings.request_timeout_ms),
        )?;
        Ok(Pusher {
            outbox,
            settings,
            client,
            identity: Default::default(),
            settled: Default::default(),
            started: std::time::Instant::now(),
            runtimes: Default::default(),
            beat: Default::default(),
            directed: Default::default(),
        })
    }

    /// Reconciles the sync token's identity with `identity` (the configured `[identity]`).
    pub fn with_identity(mut self, identity: crate::identity::IdentityDefaults) -> Pusher {
        self.identity = identity;
        self
    }

    /// Who this agent is in batches and heartbeats: the device id in force now.
    fn agent(&self) -> apiary_schema::batch::AgentInfo {
        apiary_schema::batch::AgentInfo {
            device_id: Some(self.outbox.device_id()),
            agent_version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    /// Reports this table's runtime liveness in every heartbeat.
    pub fn with_runtimes(mut self, runtimes: crate::tail::runtime::RuntimeWatch) -> Pusher {
        self.runtimes = runtimes;
        self
    }

    /// Claims one batch and delivers it.
    pub async fn try_push_once(&self) -> Result<PushOutcome, PushError> {
        let claimed = self.outbox.claim(self.settings.limits()).await?;
        if claimed.events.is_empty() {
            return Ok(PushOutcome::Idle(claimed.idle.unwrap_or(Idle::NothingDue)));
        }
        self.deliver(claimed).await
    }

    /// Where to send and with which token, as the user's last `sync enable` said.
    async fn target(&self) -> Result<Option<(reqwest::Url, std::path::PathBuf)>, PushError> {
        if !self.settle().await {
            return Ok(None);
        }
        let sync = self.outbox.sync_status().await?;
        if !sync.enabled || sync.paused_reason.is_some() {
            return Ok(None);
        }
        match (sync.endpoint, sync.token_file) {
            (Some(endpoint), Some(token_file)) => {
                Ok(Some((target::batches_url(&endpoint)?, token_file.into())))
            }
            _ => Ok(None),
        }
    }

    fn deliver(&self, claimed: Claimed) -> StepFuture<'_> {
        Box::pin(async move { Ok(self.deliver_carrying(claimed, None).await?.0) })
    }

    /// Sends `claimed`, with the heartbeat event `beat` appended to its events when given (it is not an
    /// outbox row: settling ignores its id). Also says whether the heartbeat reached the ingest (the
    /// answer was verdicts). A refused batch that carried it (413, a 4xx) is sent again whole without
    /// it, so a heartbeat neither goes twice nor takes part in a split.
    fn deliver_carrying<'a>(
        &'a self,
        claimed: Claimed,
        beat: Option<&'a apiary_schema::CanonicalEvent>,
    ) -> CarryFuture<'a> {
        Box::pin(async move {
            let ids = claimed.ids();
            let (url, token_file) = match self.target().await {
                Ok(Some(target)) => target,
                Ok(None) => {
                    self.outbox.release(ids).await?;
                    return Ok((PushOutcome::Idle(Idle::SyncOff), false));
                }
                Err(e @ PushError::Endpoint(..)) => {
                    let paused = self.pause(ids, INVALID_ENDPOINT, e.to_string()).await;
                    return paused.map(|o| (o, false));
                }
                Err(e) => {
                    // Never leave the rows claimed until the lease runs out.
                    let _ = self.outbox.release(ids).await;
                    return Err(e);
                }
            };
            let token = match target::read_token(&token_file) {
                Ok(t) => t,
                Err(e) => {
                    let reason = format!("{REAUTHENTICATE}: {e}");
                    let paused = self.pause(ids, REAUTHENTICATE, reason).await;
                    return paused.map(|o| (o, false));
                }
            };
            let extra = beat.map(|b| serde_json::to_string(b).expect("an event serialises"));
            let body = claimed.batch_json_with(Uuid::new_v4(), &self.agent(), extra.as_deref());
            let outcome = match client::send(&self.client, &url, &token, body.as_bytes()).await {
                SendResult::Verdicts(mut v) => {
                    if let Some(beat) = beat {
                        without_beat(&mut v, beat.event_id);
                    }
                    self.outbox.settle_response(&ids, &v).await?;
                    self.keep_quota(v.quota.take()).await;
                    self.follow_cadence(v.push_interval_ms);
                    PushOutcome::Sent {
                        events: ids.len(),
                        accepted: v.accepted,
                        duplicates: v.duplicates,
                        rejected: v.rejected.len() as u64,
                    }
                }
                SendResult::Retry {
                    reason,
                    retry_after,
                } => {
                    let attempt = claimed.events.iter().map(|e| e.attempts).max().unwrap_or(0) + 1;
                    let delay = self.settings.backoff().delay(attempt, retry_after);
                    tracing::warn!(events = ids.len(), attempt, ?delay, %reason, "push failed; will retry");
                    self.outbox.fail(ids.clone(), delay, reason.clone()).await?;
                    PushOutcome::Backoff {
                        events: ids.len(),
                        delay,
                        reason,
                    }
                }
                SendResult::TooLarge | SendResult::Refused { .. } if beat.is_some() => {
                    tracing::info!(
                        "a batch carrying the heartbeat was refused; sending it without"
                    );
                    return Ok((self.deliver(claimed).await?, false));
                }
                SendResult::TooLarge => {
                    let reason = "the ingest refused the event as too large (HTTP 413)".into();
                    return Ok((self.split_or_reject(claimed, reason).await?, false));
                }
                SendResult::Refused { status, message } => {
                    let reason = format!("HTTP {status}: {message}");
                    return Ok((self.split_or_reject(claimed, reason).await?, false));
                }
                SendResult::Unauthorized { status, message } => {
                    let reason = format!(
                        "{REAUTHENTICATE}: {}",
                        client::unauthorized(status, &message)
                    );
                    let paused = self.pause(ids, REAUTHENTICATE, reason).await;
                    return paused.map(|o| (o, false));
                }
            };
            self.record(&outcome).await;
            let carried = beat.is_some() && matches!(outcome, PushOutcome::Sent { .. });
            Ok((outcome, carried))
        })
    }

    /// Splits a refused batch in halves to isolate what the ingest refuses; a single event is dead-lettered.
    async fn split_or_reject(
        &self,
        claimed: Claimed,
        reason: String,
    ) -> Result<PushOutcome, PushError> {
        if claimed.events.len() <= 1 {
            let ids = claimed.ids();
            self.outbox
                .reject(ids.iter().map(|id| (*id, reason.clone())).collect())
                .await?;
            let outcome = PushOutcome::Sent {
                events: ids.len(),
                accepted: 0,
                duplicates: 0,
                rejected: ids.len() as u64,
            };
            self.record(&outcome).await;
            return Ok(outcome);
        }
        tracing::info!(events = claimed.events.len(), %reason, "splitting a refused batch");
        let mut first = claimed;
        let second_events = first.events.split_off(first.events.len() / 2);
        let second = Claimed {
            events: second_events,
            sessions: first.sessions.clone(),
            policy_hash: first.policy_hash.clone(),
            idle: None,
        };
        let a = self.deliver(first).await?;
        let b = self.deliver(second).await?;
        Ok(a.merge(b))
    }

    /// Releases `ids` and pauses sync with `code` ([`REAUTHENTICATE`], [`INVALID_ENDPOINT`]) until the
    /// user enables it again.
    async fn pause(
        &self,
        ids: Vec<Uuid>,
        code: &str,
        reason: String,
    ) -> Result<PushOutcome, PushError> {
        tracing::error!(%reason, "sync paused");
        self.outbox.release(ids).await?;
        self.outbox
            .set_sync(SyncChange::Pause {
                reason: Some(code.into()),
            })
            .await?;
        let outcome = PushOutcome::Paused { reason };
        self.record(&outcome).await;
        Ok(outcome)
    }

    async fn record(&self, outcome: &PushOutcome) {
        let value = match outcome {
            PushOutcome::Sent {
                events,
                accepted,
                duplicates,
                rejected,
            } => serde_json::json!({
                "result": "sent", "events": events, "accepted": accepted, "duplicates": duplicates, "rejected": rejected }),
            PushOutcome::Backoff {
                events,
                delay,
                reason,
            } => serde_json::json!({
                "result": "backoff", "events": events, "retry_in_ms": delay.as_millis() as u64, "error": reason }),
            PushOutcome::Paused { reason } => {
                serde_json::json!({ "result": "paused", "error": reason })
            }
            PushOutcome::Idle(_) => return,
        };
        let mut value = value;
        value["at"] = serde_json::json!(chrono::Utc::now());
        if let Err(e) = self.outbox.record_push(value).await {
            tracing::warn!(error = %e, "could not record the push result");
        }
    }

    /// Keeps the budget state an answer carried (none: the kept one stays; see
    /// [`crate::outbox::Outbox::keep_quota`]). A failure to store it is logged: the events are settled
    /// already, and the next answer brings a fresh one.
    async fn keep_quota(&self, quota: Option<apiary_schema::quota::Quota>) {
        let Some(quota) = quota else {
            return;
        };
        if let Err(e) = self.outbox.keep_quota(quota).await {
            tracing::warn!(error = %e, "could not store the budget state the ingest sent");
        }
    }
}

/// Takes the heartbeat that rode in a batch out of the ingest's verdicts: the batch's own events' counts
/// remain (a rejected heartbeat is logged, as a standalone one's is).
fn without_beat(v: &mut apiary_schema::BatchResponse, beat: Uuid) {
    let before = v.rejected.len();
    v.rejected.retain(|r| {
        if r.event_id == beat {
            tracing::warn!(reason = %r.reason, "the ingest rejected the heartbeat");
        }
        r.event_id != beat
    });
    if v.rejected.len() == before {
        // Accepted, or (a replay) a duplicate.
        if v.accepted > 0 {
            v.accepted -= 1;
        } else {
            v.duplicates = v.duplicates.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod cadence_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod tests;
