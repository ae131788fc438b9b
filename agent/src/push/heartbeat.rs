//! The heartbeat: a device-level `agent.heartbeat` event sent straight to the ingest (not stored in the
//! outbox, so a backlog never delays it and a lost one costs nothing).

use std::time::Duration;

use apiary_schema::{Batch, CanonicalEvent, EventKind};
use serde_json::json;
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
        let mut data = serde_json::Map::new();
        data.insert("agent_version".into(), json!(env!("CARGO_PKG_VERSION")));
        data.insert("backlog_events".into(), json!(s.pending_events));
        data.insert("backlog_bytes".into(), json!(s.pending_bytes));
        if let Some(age) = s.oldest_pending_age_seconds {
            data.insert("oldest_pending_age_seconds".into(), json!(age));
        }
        data.insert("sync_state".into(), json!(sync_state));
        data.insert(
            "uptime_seconds".into(),
            json!(self.started.elapsed().as_secs_f64()),
        );
        data.insert(
            "interval_seconds".into(),
            json!(self.settings.heartbeat_interval_secs as f64),
        );
        Ok(CanonicalEvent {
            schema_version: apiary_schema::SCHEMA_VERSION,
            event_id: Uuid::new_v4(),
            kind: EventKind::AgentHeartbeat,
            occurred_at: chrono::Utc::now(),
            runtime: "apiary".into(),
            session_id: None,
            parent_session_id: None,
            colony_id: None,
            worker_id: None,
            agent_role: None,
            node_id: None,
            execution_id: None,
            trace_id: None,
            native_type: "agent.heartbeat".into(),
            data,
        })
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
            agent: self.agent.clone(),
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
