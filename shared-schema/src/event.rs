//! The canonical event: one envelope for every runtime — the wire contract between agent and ingest,
//! published as JSON Schema in `shared-schema/schema/v1/`.
//!
//! The envelope fields are typed; `data` is an object whose keys are governed by the redaction
//! [`Policy`](crate::policy::Policy) of the event's kind: after the policy is applied it holds only
//! allowlisted, typed values (numbers, booleans, enums, ids, model and tool names).

use chrono::{DateTime, Utc};
#[cfg(feature = "json-schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The closed set of durable event kinds. Anything a runtime emits maps to one of these or is filtered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub enum EventKind {
    /// One LLM loop iteration with its token usage and cost.
    #[serde(rename = "llm.turn")]
    LlmTurn,
    /// A tool call started or completed (`data.status`), with `is_error` on completion.
    #[serde(rename = "tool.call")]
    ToolCall,
    /// Lifecycle of an execution, stream or node loop (`data.status`: started, completed, failed, ...).
    #[serde(rename = "execution")]
    Execution,
    /// The queen's phase changed (`data.phase`: independent, incubating, working, reviewing).
    #[serde(rename = "session.phase")]
    SessionPhase,
    /// The session waits for, or received, the user's input (`data.state`).
    #[serde(rename = "session.input")]
    SessionInput,
    /// A colony of workers was created, loaded or forked from a session.
    #[serde(rename = "colony.created")]
    ColonyCreated,
    /// A worker finished (`data.status`), with its own totals where the runtime reports them.
    #[serde(rename = "worker.finished")]
    WorkerFinished,
    /// A task was created, updated or deleted: ids and states only, never subjects.
    #[serde(rename = "task.changed")]
    TaskChanged,
    /// A trigger became available, fired, was activated, deactivated, updated or removed.
    #[serde(rename = "trigger.changed")]
    TriggerChanged,
    /// A health signal: stall, doom loop, retry, inactivity, TTFT exceeded, escalation, compaction...
    #[serde(rename = "health.signal")]
    HealthSignal,
    /// The agent itself is alive: backlog, oldest pending age, version. Device-level (no session).
    #[serde(rename = "agent.heartbeat")]
    AgentHeartbeat,
    /// The agent dropped events (evicted at the cap, or dead-lettered): counts by reason. Device-level.
    #[serde(rename = "outbox.dropped")]
    OutboxDropped,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 12] = [
        EventKind::LlmTurn,
        EventKind::ToolCall,
        EventKind::Execution,
        EventKind::SessionPhase,
        EventKind::SessionInput,
        EventKind::ColonyCreated,
        EventKind::WorkerFinished,
        EventKind::TaskChanged,
        EventKind::TriggerChanged,
        EventKind::HealthSignal,
        EventKind::AgentHeartbeat,
        EventKind::OutboxDropped,
    ];

    /// The wire name, e.g. `llm.turn`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::LlmTurn => "llm.turn",
            EventKind::ToolCall => "tool.call",
            EventKind::Execution => "execution",
            EventKind::SessionPhase => "session.phase",
            EventKind::SessionInput => "session.input",
            EventKind::ColonyCreated => "colony.created",
            EventKind::WorkerFinished => "worker.finished",
            EventKind::TaskChanged => "task.changed",
            EventKind::TriggerChanged => "trigger.changed",
            EventKind::HealthSignal => "health.signal",
            EventKind::AgentHeartbeat => "agent.heartbeat",
            EventKind::OutboxDropped => "outbox.dropped",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Device-level kinds carry no session (and no agent role); every other kind must.
    pub fn is_device_level(self) -> bool {
        matches!(self, EventKind::AgentHeartbeat | EventKind::OutboxDropped)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who in the runtime produced the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum AgentRole {
    /// The top-level session (Hive's Queen) the user talks to.
    Queen,
    /// A worker of a colony forked by a queen.
    Worker,
}

/// A canonical event, schema version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CanonicalEvent {
    /// Schema version of this envelope (1).
    pub schema_version: u32,
    /// Deterministic id: UUID v5 over the runtime and the native event's identity (never its payload), so
    /// the same event read twice, from two logs, or re-sent, dedups end to end.
    pub event_id: Uuid,
    /// The durable kind.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// When it happened, in UTC (naive producer times are resolved with the producer's zone).
    #[serde(serialize_with = "crate::timefmt::time")]
    pub occurred_at: DateTime<Utc>,
    /// The runtime that produced it, e.g. `hive`.
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 64)))]
    pub runtime: String,
    /// The session the event belongs to. Absent only on device-level kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub session_id: Option<String>,
    /// The parent session (for a worker: its queen's session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub parent_session_id: Option<String>,
    /// The colony the worker belongs to (in Hive, the id of the queen session that forked it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub colony_id: Option<String>,
    /// The worker's own id, for worker events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub worker_id: Option<String>,
    /// Queen or worker. Absent only on device-level kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_role: Option<AgentRole>,
    /// The runtime's graph node that emitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub node_id: Option<String>,
    /// The runtime's execution id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub execution_id: Option<String>,
    /// A correlation or trace id, when the runtime has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 200)))]
    pub trace_id: Option<String>,
    /// The runtime's own type name, e.g. `llm_turn_complete`.
    #[cfg_attr(feature = "json-schema", schemars(length(min = 1, max = 100)))]
    pub native_type: String,
    /// Allowlisted, typed fields only (see the redaction policy for this kind).
    pub data: serde_json::Map<String, serde_json::Value>,
}

/// Why a canonical event is not well formed beyond what JSON Schema can say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("schema_version {0} is not supported (this build accepts {accepted:?})", accepted = crate::ACCEPTED_SCHEMA_VERSIONS)]
    UnsupportedVersion(u32),
    #[error("a {0} event needs session_id and agent_role")]
    MissingSession(EventKind),
    #[error("a {0} event is device-level and carries no session_id or agent_role")]
    UnexpectedSession(EventKind),
}

impl CanonicalEvent {
    /// Checks the rules the JSON Schema cannot express: version and session presence by kind.
    pub fn check_envelope(&self) -> Result<(), EnvelopeError> {
        if !crate::ACCEPTED_SCHEMA_VERSIONS.contains(&self.schema_version) {
            return Err(EnvelopeError::UnsupportedVersion(self.schema_version));
        }
        let has_session = self.session_id.is_some() && self.agent_role.is_some();
        match (self.kind.is_device_level(), has_session) {
            (false, false) => Err(EnvelopeError::MissingSession(self.kind)),
            (true, _) if self.session_id.is_some() || self.agent_role.is_some() => {
                Err(EnvelopeError::UnexpectedSession(self.kind))
            }
            _ => Ok(()),
        }
    }

    /// A number in `data`, as u64 (0 when absent or not a non-negative integer).
    pub fn data_u64(&self, key: &str) -> u64 {
        self.data
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    }

    /// A string in `data`.
    pub fn data_str(&self, key: &str) -> Option<&str> {
        self.data.get(key).and_then(serde_json::Value::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_wire_names() {
        for kind in EventKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EventKind::parse("llm_turn_complete"), None);
    }
}
