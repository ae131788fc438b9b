//! The batch envelope the agent sends to `POST /v1/batches`, and the verdicts it gets back.
//!
//! Identity is bound per session: a batch carries one [`SessionBinding`] for every session its events
//! reference (the agent sends each binding with every batch that references the session; the ingest
//! upserts). The ingest trusts the token, not the payload: a binding that claims another tenant — or another
//! user or device than the token is bound to — refuses the whole batch with 403.

use chrono::{DateTime, Utc};
#[cfg(feature = "json-schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::event::CanonicalEvent;
use crate::quota::Quota;

/// A batch of canonical events, schema version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Schema version of this envelope (1).
    pub schema_version: u32,
    /// Random per send attempt; for logs and tracing only (dedup is per event).
    pub batch_id: Uuid,
    /// The device clock when the batch was sent; the ingest uses it to correct `occurred_at` of devices
    /// whose clock is off by more than a minute.
    pub sent_at: DateTime<Utc>,
    /// The sending agent.
    pub agent: AgentInfo,
    /// SHA-256 of the redaction policy the agent applied (hex).
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 128)))]
    pub policy_hash: String,
    /// Identity of every session the events reference.
    #[serde(default)]
    pub sessions: Vec<SessionBinding>,
    /// The events.
    pub events: Vec<CanonicalEvent>,
}

/// The agent that sent a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AgentInfo {
    /// The device id configured on the agent, if any (else the token's device binding is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub device_id: Option<String>,
    /// The agent's version, e.g. `0.1.0`.
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 64)))]
    pub agent_version: String,
}

/// Identity bound to a session when the agent first saw (or registered) it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionBinding {
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub session_id: String,
    /// The user the session runs for; absent = the user the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub user_id: Option<String>,
    /// The tenant the agent believes the session belongs to; must equal the token's tenant when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub tenant_id: Option<String>,
    /// The device the session ran on; absent = the device the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub device_id: Option<String>,
    /// The parent session (a worker's queen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub parent_session_id: Option<String>,
    /// When the agent first saw the session.
    pub first_seen_at: DateTime<Utc>,
}

/// The ingest's answer to a batch: per-event verdicts. Replaying a batch changes nothing (all duplicates).
/// Unknown fields are ignored, so that the ingest can add to its answer without breaking agents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub struct BatchResponse {
    /// Events stored for the first time.
    pub accepted: u64,
    /// Events already stored (same tenant and event_id).
    pub duplicates: u64,
    /// Events refused, each with the reason; they were not stored.
    #[serde(default)]
    pub rejected: Vec<Rejection>,
    /// The budgets that apply to the token's user, when the request asked for them (header
    /// `X-Apiary-Quota: 1`); see [`crate::quota`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// How long the ingest wants this device's agent to let a trickle of events gather before its next
    /// push (milliseconds): its interval at rest, longer while it is loaded. The agent adopts it within
    /// its own floor and ceiling; a full batch or a backlog still goes at once. Absent from an ingest
    /// that does not set the cadence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(range(min = 1)))]
    pub push_interval_ms: Option<u64>,
}

/// One refused event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Rejection {
    pub event_id: Uuid,
    pub reason: String,
}
