//! The heartbeat: a device-level `agent.heartbeat` event sent straight to the ingest (not stored in the
//! outbox, so a backlog never delays it and a lost one costs nothing), riding in a batch the loop sends
//! anyway or in a request of its own ([`super::cadence`]). Its payload is the shared [`Heartbeat`] the
//! ingest reads back.

use std::time::Duration;

use apiary_schema::device::Heartbeat;
use apiary_schema::{Batch, CanonicalEvent};
use uuid::Uuid;

use super::client::{self, PushError, SendResult};
use super::Pusher;

impl Pusher {
    /// Builds the heartbeat event from the outbox's status.
    pub async fn heartbeat_event(&self) -> Result<CanonicalEvent, PushError> {
        let status = self.outbox.status().await?;
        let s = &status.stored;
        let sync_state = match (s.sync.enabled, s.sync.paused_reason.is_some()) {
            (true, false) => "enabled",
            (true, true) => "paused",
            _ => "disabled",
        };
        let beat = Heartbeat {
            agent_version: Some(env!("CARGO_PKG_VERSION").into()),
            backlog_events: Some(s.pending_events),
            backlog_bytes: Some(s.pending_bytes),
            oldest_pending_age_seconds: s.oldest_pending_age_seconds,
            sync_state: Some(sync_state.into()),
            uptime_seconds: Some(self.started.elapsed().as_secs_f64()),
            interval_seconds: Some(self.settings.heartbeat_interval_secs as f64),
            runtimes: self.runtimes.report(),
        };
        Ok(beat.event(chrono::Utc::now()))
    }

    /// Sends one heartbeat if sync is enabled and not paused; `None` when nothing was sent.
    pub async fn send_heartbeat(&self) -> Result<Option<SendResult>, PushError> {
        let Some((url, token_file)) = self.target().await? else {
            return Ok(None);
        };
        let token = super::target::read_token(&token_file)?;
        let batch = Batch {
            schema_version: apiary_schema::SCHEMA_VERSION,
            batch_id: Uuid::new_v4(),
            sent_at: chrono::Utc::now(),
            agent: self.agent(),
            policy_hash: self.outbox.policy_hash().to_string(),
            sessions: Vec::new(),
            events: vec![self.heartbeat_event().await?],
        };
        let body = serde_json::to_vec(&batch).expect("a batch serialises");
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            client::send(&self.client, &url, &token, &body),
        )
        .await;
        Ok(Some(result.unwrap_or(SendResult::Retry {
            reason: "heartbeat timed out".into(),
            retry_after: None,
        })))
    }
}
