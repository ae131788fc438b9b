//! The push loop ([`Pusher::run_until_stopped`]): claims as [`super::cadence`] says, keeps up to
//! `concurrency` batches in flight, sends the heartbeat (riding in a batch or on its own) and, on the
//! heartbeat interval's tick, the other periodic duties: the drop report and the colony secret.
//!
//! Shutdown: the events waiting to be sent together go at once, with whatever a last claim finds (up to
//! `concurrency` batches in flight); then the batches in flight get `shutdown_grace_ms`. Anything
//! unfinished stays pending (the ingest dedups a re-send).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::cadence::{BeatClock, Coalesce, Gather};
use super::client::{self, PushError, SendResult};
use super::{PushOutcome, Pusher, INVALID_ENDPOINT, REAUTHENTICATE};
use crate::outbox::{Claimed, Idle};

type InFlight = JoinSet<Result<PushOutcome, PushError>>;

impl Pusher {
    /// Pushes until `shutdown`, then lets batches in flight finish for up to `shutdown_grace`.
    pub async fn run_until_stopped(self: Arc<Self>, shutdown: CancellationToken) {
        let every = self.beat_interval();
        let mut inflight = InFlight::new();
        let mut duties = tokio::time::interval(every);
        duties.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut gather = Gather::default();
        loop {
            // The interval may change with every answer (the ingest sets it).
            let rule = self.coalesce();
            let wait = self.fill(&mut inflight, &mut gather, &rule, false).await;
            let now = Instant::now();
            let wake = gather
                .due_at()
                .map_or(wait, |at| wait.min(at.saturating_duration_since(now)));
            // `None` while the heartbeat rides in a batch in flight: that batch's end decides.
            let beat_at = self.beat_clock().standalone_at(every, now);
            let beat_due = tokio::time::Instant::from_std(beat_at.unwrap_or(now));
            tokio::select! {
                _ = shutdown.cancelled() => break,
                Some(done) = inflight.join_next(), if !inflight.is_empty() => log_step(done),
                _ = duties.tick() => self.tick_duties().await,
                _ = tokio::time::sleep_until(beat_due), if beat_at.is_some() => {
                    self.standalone_heartbeat().await
                }
                _ = tokio::time::sleep(wake) => {}
            }
        }
        self.fill(&mut inflight, &mut gather, &self.coalesce(), true)
            .await;
        if let Some(left) = gather.take() {
            // Every slot was busy: not sent now, pending for next time.
            let _ = self.outbox.release(left.ids()).await;
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

    /// Claims into `gather` and starts deliveries while slots are free and a batch is ready (every
    /// non-empty gather when `closing`). Returns how long to wait before polling again.
    async fn fill(
        self: &Arc<Self>,
        inflight: &mut InFlight,
        gather: &mut Gather,
        rule: &Coalesce,
        closing: bool,
    ) -> Duration {
        let poll = Duration::from_millis(self.settings.poll_interval_ms.max(10));
        if !closing && !self.settle().await {
            // Off, paused, or the token's identity not settled yet: nothing is claimed.
            if let Some(batch) = gather.take() {
                self.start_delivery(inflight, batch);
            }
            return poll.max(Duration::from_millis(500));
        }
        while inflight.len() < self.settings.concurrency.max(1) {
            if gather.ready(rule, Instant::now()) || (closing && !gather.is_empty()) {
                let batch = gather.take().expect("a ready gather holds events");
                self.start_delivery(inflight, batch);
                continue;
            }
            let Some(room) = gather.room(rule) else {
                break; // unreachable: a full gather is ready
            };
            match self.outbox.claim(room).await {
                Ok(c) if !c.events.is_empty() => {
                    if let Some(batch) = gather.add(c, rule, Instant::now()) {
                        self.start_delivery(inflight, batch);
                    }
                }
                Ok(c) => {
                    if matches!(c.idle, Some(Idle::SyncOff | Idle::Paused)) {
                        if let Some(batch) = gather.take() {
                            // Sync stopped while they waited: the delivery gives them back.
                            self.start_delivery(inflight, batch);
                        }
                        return poll.max(Duration::from_millis(500));
                    }
                    return poll;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed");
                    return Duration::from_secs(1);
                }
            }
        }
        poll
    }

    /// Starts delivering `batch`; the heartbeat rides in it when one is due soon and none rides already.
    fn start_delivery(self: &Arc<Self>, inflight: &mut InFlight, batch: Claimed) {
        let ride = self
            .beat_clock()
            .take_ride(self.beat_interval(), Instant::now());
        let me = self.clone();
        inflight.spawn(async move {
            if !ride {
                return me.deliver(batch).await;
            }
            let beat = match me.heartbeat_event().await {
                Ok(beat) => Some(beat),
                Err(e) => {
                    tracing::warn!(error = %e, "no heartbeat to ride in the batch");
                    None
                }
            };
            let result = me.deliver_carrying(batch, beat.as_ref()).await;
            let carried = matches!(result, Ok((_, true)));
            me.beat_clock().ride_done(carried, Instant::now());
            result.map(|(outcome, _)| outcome)
        });
    }

    /// The coalescing rule in force: the interval the ingest asked for, within the floor and the
    /// ceiling, once it has; the configured one before.
    fn coalesce(&self) -> Coalesce {
        let directed = self.directed.load(std::sync::atomic::Ordering::Relaxed);
        Coalesce::of(&self.settings, (directed > 0).then_some(directed))
    }

    /// Adopts the push interval an answer carries (an answer without one keeps the last).
    pub(super) fn follow_cadence(&self, asked_ms: Option<u64>) {
        let Some(ms) = asked_ms.filter(|ms| *ms > 0) else {
            return;
        };
        let before = self.directed.swap(ms, std::sync::atomic::Ordering::Relaxed);
        if before != ms {
            let s = &self.settings;
            let adopted = ms.clamp(s.min_interval_ms, s.max_interval_ms.max(s.min_interval_ms));
            tracing::info!(
                asked_ms = ms,
                adopted_ms = adopted,
                "the ingest set the push interval"
            );
        }
    }

    fn beat_interval(&self) -> Duration {
        Duration::from_secs(self.settings.heartbeat_interval_secs.max(1))
    }

    fn beat_clock(&self) -> std::sync::MutexGuard<'_, BeatClock> {
        self.beat.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The heartbeat interval's other duties: the tenant's colony secret, the drop report.
    async fn tick_duties(&self) {
        self.adopt_colony_secret().await;
        if let Err(e) = self.outbox.enqueue_drop_report().await {
            tracing::warn!(error = %e, "could not enqueue the drop report");
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
        match super::whoami::whoami(&endpoint, std::path::Path::new(&token_file)).await {
            Ok(t) => {
                if let Some(secret) = t.colony_secret {
                    if let Err(e) = self.outbox.adopt_colony_secret(&t.tenant_id, &secret).await {
                        tracing::warn!(error = %e, "could not store the tenant's colony secret");
                    }
                }
                if let Some(names) = t.colony_names {
                    if let Err(e) = self.outbox.adopt_colony_names(names).await {
                        tracing::warn!(error = %e, "could not store the tenant's colony names choice");
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "colony secret not fetched yet"),
        }
    }

    /// Sends a heartbeat request of its own (none rode in a batch for an interval).
    pub(super) async fn standalone_heartbeat(&self) {
        self.beat_clock().standalone_sent(Instant::now());
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
                self.follow_cadence(v.push_interval_ms);
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
