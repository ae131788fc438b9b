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
//! Rows leave the outbox only after the ingest confirmed them. The loop keeps up to `concurrency`
//! batches in flight (the outbox leases claimed rows, so two batches never hold the same event); at
//! shutdown it stops claiming, lets the batches in flight finish for up to `shutdown_grace`, and leaves
//! anything unfinished pending (the ingest dedups a re-send). A heartbeat (backlog, oldest pending age,
//! agent version) goes straight to the ingest every `heartbeat_interval`; it is not stored, so a large
//! backlog never delays it. Evictions and dead letters are turned into `outbox.dropped` events on the
//! same tick.
//!
//! Every batch and heartbeat asks for the budget state of the token's user (`X-Apiary-Quota: 1`); the
//! outbox keeps the latest one an answer carries ([`crate::outbox::Outbox::keep_quota`]; an answer
//! without it keeps the known one). It is advisory: nothing here stops or slows because a budget is
//! spent.

mod backoff;
mod client;
mod heartbeat;
pub mod target;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
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
    agent: apiary_schema::batch::AgentInfo,
    started: std::time::Instant,
    /// Runtime liveness of the sessions the tailer's scan found (empty when no Hive home is tailed):
    /// the heartbeat carries it.
    runtimes: crate::tail::runtime::RuntimeWatch,
}

type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<PushOutcome, PushError>> + Send + 'a>>;

impl Pusher {
    pub fn new(outbox: Outbox, settings: PushSettings) -> Result<Pusher, PushError> {
        let client = client::http_client(
            Duration::from_millis(settings.connect_timeout_ms),
            Duration::from_millis(settings.request_timeout_ms),
        )?;
        let agent = apiary_schema::batch::AgentInfo {
            device_id: Some(outbox.device_id().to_string()),
            agent_version: env!("CARGO_PKG_VERSION").into(),
        };
        Ok(Pusher {
            outbox,
            settings,
            client,
            agent,
            started: std::time::Instant::now(),
            runtimes: Default::default(),
        })
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
        Box::pin(async move {
            let ids = claimed.ids();
            let (url, token_file) = match self.target().await {
                Ok(Some(target)) => target,
                Ok(None) => {
                    self.outbox.release(ids).await?;
                    return Ok(PushOutcome::Idle(Idle::SyncOff));
                }
                Err(e @ PushError::Endpoint(..)) => {
                    return self.pause(ids, INVALID_ENDPOINT, e.to_string()).await
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
                    return self.pause(ids, REAUTHENTICATE, reason).await;
                }
            };
            let body = claimed.batch_json(Uuid::new_v4(), &self.agent);
            let outcome = match client::send(&self.client, &url, &token, body.as_bytes()).await {
                SendResult::Verdicts(mut v) => {
                    self.outbox.settle_response(&ids, &v).await?;
                    self.keep_quota(v.quota.take()).await;
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
                SendResult::TooLarge => {
                    return self
                        .split_or_reject(
                            claimed,
                            "the ingest refused the event as too large (HTTP 413)".into(),
                        )
                        .await
                }
                SendResult::Refused { status, message } => {
                    return self
                        .split_or_reject(claimed, format!("HTTP {status}: {message}"))
                        .await
                }
                SendResult::Unauthorized { status, message } => {
                    let reason = format!(
                        "{REAUTHENTICATE}: {}",
                        client::unauthorized(status, &message)
                    );
                    return self.pause(ids, REAUTHENTICATE, reason).await;
                }
            };
            self.record(&outcome).await;
            Ok(outcome)
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

    /// Pushes until `shutdown`, then lets batches in flight finish for up to `shutdown_grace`.
    pub async fn run_until_stopped(self: Arc<Self>, shutdown: CancellationToken) {
        let mut inflight: JoinSet<Result<PushOutcome, PushError>> = JoinSet::new();
        let mut heartbeat = tokio::time::interval(Duration::from_secs(
            self.settings.heartbeat_interval_secs.max(1),
        ));
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let poll = Duration::from_millis(self.settings.poll_interval_ms.max(10));
        loop {
            let mut wait = poll;
            while inflight.len() < self.settings.concurrency.max(1) && !shutdown.is_cancelled() {
                match self.outbox.claim(self.settings.limits()).await {
                    Ok(c) if !c.events.is_empty() => {
                        let me = self.clone();
                        inflight.spawn(async move { me.deliver(c).await });
                    }
                    Ok(c) => {
                        if matches!(c.idle, Some(Idle::SyncOff | Idle::Paused)) {
                            wait = poll.max(Duration::from_millis(500));
                        }
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed");
                        wait = Duration::from_secs(1);
                        break;
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(done) = inflight.join_next(), if !inflight.is_empty() => log_step(done),
                _ = heartbeat.tick() => self.tick_heartbeat().await,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let grace = Duration::from_millis(self.settings.shutdown_grace_ms);
        let drained = tokio::time::timeout(grace, async {
            while let Some(done) = inflight.join_next().await {
                log_step(done);
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!("shutdown: batches still in flight after the grace period stay pending");
            inflight.abort_all();
        }
    }

    /// While colony keys are still this device's own and sync is on, asks the ingest for the tenant's
    /// colony secret (`GET /v1/whoami`) and puts it in force (`crate::outbox::ColonyKeys`): so an agent
    /// whose sync was enabled while it ran switches to the tenant's keys within a heartbeat interval.
    async fn adopt_colony_secret(&self) {
        if self.outbox.colony_keys().is_tenant() {
            return;
        }
        let Ok(sync) = self.outbox.sync_status().await else {
            return;
        };
        let (true, None, Some(endpoint), Some(token_file)) = (
            sync.enabled,
            sync.paused_reason,
            sync.endpoint,
            sync.token_file,
        ) else {
            return;
        };
        match crate::identity::whoami(&endpoint, std::path::Path::new(&token_file)).await {
            Ok(t) => {
                if let Some(secret) = t.colony_secret {
                    if let Err(e) = self.outbox.adopt_colony_secret(&t.tenant_id, &secret).await {
                        tracing::warn!(error = %e, "could not store the tenant's colony secret");
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "colony secret not fetched yet"),
        }
    }

    async fn tick_heartbeat(&self) {
        self.adopt_colony_secret().await;
        if let Err(e) = self.outbox.enqueue_drop_report().await {
            tracing::warn!(error = %e, "could not enqueue the drop report");
        }
        let paused = match self.send_heartbeat().await {
            Ok(Some(SendResult::Unauthorized { status, message })) => {
                let reason = format!(
                    "{REAUTHENTICATE}: {}",
                    client::unauthorized(status, &message)
                );
                self.pause(Vec::new(), REAUTHENTICATE, reason).await
            }
            Err(e @ PushError::Endpoint(..)) => {
                self.pause(Vec::new(), INVALID_ENDPOINT, e.to_string())
                    .await
            }
            Err(e @ PushError::TokenFile(_)) => {
                let reason = format!("{REAUTHENTICATE}: {e}");
                self.pause(Vec::new(), REAUTHENTICATE, reason).await
            }
            Ok(Some(SendResult::Verdicts(mut v))) => {
                self.keep_quota(v.quota.take()).await;
                if let Some(r) = v.rejected.first() {
                    tracing::warn!(reason = %r.reason, "the ingest rejected the heartbeat");
                }
                return;
            }
            Ok(None) => return,
            Ok(Some(other)) => {
                let reason = other.problem();
                tracing::warn!(%reason, "heartbeat not accepted");
                self.record(&PushOutcome::Backoff {
                    events: 0,
                    delay: Duration::from_secs(self.settings.heartbeat_interval_secs),
                    reason,
                })
                .await;
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "heartbeat failed");
                return;
            }
        };
        if let Err(e) = paused {
            tracing::warn!(error = %e, "could not pause sync");
        }
    }
}

fn log_step(done: Result<Result<PushOutcome, PushError>, tokio::task::JoinError>) {
    match done {
        Ok(Ok(outcome)) => tracing::debug!(?outcome, "push step"),
        Ok(Err(e)) => tracing::warn!(error = %e, "push step failed"),
        Err(e) => tracing::warn!(error = %e, "push task ended abnormally"),
    }
}

#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod tests;
