//! The payloads of the device-level events the agent makes itself: the heartbeat (`agent.heartbeat`) and
//! the drop report (`outbox.dropped`). The agent writes them with [`Heartbeat::event`] and
//! [`DropReport::event`]; the ingest reads them back with [`Heartbeat::from_data`] and
//! [`DropReport::from_data`] (tolerantly: a field of the wrong type is absent, as it always was). The
//! allowlist of both kinds lives in the default policy; this module only gives its fields types.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::event::{CanonicalEvent, EventKind};

/// `data` of an `agent.heartbeat` event: the agent's liveness and backlog.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The agent's version, e.g. `0.1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Events waiting to be delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_events: Option<u64>,
    /// Their size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog_bytes: Option<u64>,
    /// Age of the oldest of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending_age_seconds: Option<f64>,
    /// `enabled`, `paused` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_seconds: Option<f64>,
    /// How often the agent sends one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<f64>,
    /// Runtime liveness of the sessions the agent saw open recently (at most [`MAX_RUNTIMES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<RuntimeLiveness>,
}

/// Most [`RuntimeLiveness`] entries one heartbeat carries (the policy's `max`).
pub const MAX_RUNTIMES: usize = 64;

/// Whether the runtime process behind a session is alive, as the agent found it on this device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeLiveness {
    pub session_id: String,
    pub alive: bool,
    /// What the answer rests on: `pid_running`, `pid_exited`, `pid_reused`, `hive_marked_stale`.
    pub evidence: String,
    /// When gone: the first time the agent found it gone (Unix epoch milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gone_at: Option<i64>,
}

impl RuntimeLiveness {
    /// `gone_at` as a time.
    pub fn gone_time(&self) -> Option<DateTime<Utc>> {
        self.gone_at.and_then(DateTime::from_timestamp_millis)
    }
}

impl Heartbeat {
    /// The `agent.heartbeat` event carrying this payload (a random id: a lost heartbeat costs nothing).
    pub fn event(&self, at: DateTime<Utc>) -> CanonicalEvent {
        device_event(
            EventKind::AgentHeartbeat,
            "apiary",
            Uuid::new_v4(),
            at,
            to_data(self),
        )
    }

    /// Reads a heartbeat's `data`; a field that is absent or of another type is `None`.
    pub fn from_data(data: &Map<String, Value>) -> Heartbeat {
        let s = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_string);
        let n = |k: &str| data.get(k).and_then(Value::as_u64);
        let f = |k: &str| data.get(k).and_then(Value::as_f64);
        Heartbeat {
            agent_version: s("agent_version"),
            backlog_events: n("backlog_events"),
            backlog_bytes: n("backlog_bytes"),
            oldest_pending_age_seconds: f("oldest_pending_age_seconds"),
            sync_state: s("sync_state"),
            uptime_seconds: f("uptime_seconds"),
            interval_seconds: f("interval_seconds"),
            runtimes: data
                .get("runtimes")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|v| serde_json::from_value(v.clone()).ok())
                        .take(MAX_RUNTIMES)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// `data` of an `outbox.dropped` event: `count` events dropped for `reason` since the last report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropReport {
    /// `evicted`, or the dead-letter reason class.
    pub reason: String,
    pub count: u64,
}

impl DropReport {
    /// The `outbox.dropped` event carrying this report, with a deterministic id (UUID v5 in `namespace`
    /// over the device, the report's sequence number and the reason), so a report re-sent dedups.
    pub fn event(
        &self,
        namespace: &Uuid,
        device: &str,
        seq: i64,
        at: DateTime<Utc>,
    ) -> CanonicalEvent {
        let name = format!("{device}:outbox.dropped:{seq}:{}", self.reason);
        let id = Uuid::new_v5(namespace, name.as_bytes());
        device_event(
            EventKind::OutboxDropped,
            "apiary-agent",
            id,
            at,
            to_data(self),
        )
    }

    /// Reads a drop report's `data`; None unless it holds a positive `count` (a reason is optional).
    pub fn from_data(data: &Map<String, Value>) -> Option<DropReport> {
        let count = data
            .get("count")
            .and_then(Value::as_i64)
            .filter(|n| *n > 0)?;
        Some(DropReport {
            reason: data
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            count: count as u64,
        })
    }
}

fn to_data<T: Serialize>(payload: &T) -> Map<String, Value> {
    match serde_json::to_value(payload) {
        Ok(Value::Object(m)) => m,
        _ => unreachable!("a payload struct serialises to an object"),
    }
}

/// A device-level event (no session, no role) of `kind` with `data`.
fn device_event(
    kind: EventKind,
    runtime: &str,
    event_id: Uuid,
    occurred_at: DateTime<Utc>,
    data: Map<String, Value>,
) -> CanonicalEvent {
    CanonicalEvent {
        schema_version: crate::SCHEMA_VERSION,
        event_id,
        kind,
        occurred_at,
        runtime: runtime.into(),
        session_id: None,
        parent_session_id: None,
        colony_id: None,
        worker_id: None,
        agent_role: None,
        node_id: None,
        execution_id: None,
        trace_id: None,
        native_type: kind.as_str().into(),
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_heartbeat_round_trips_through_its_event_and_passes_the_default_policy() {
        let beat = Heartbeat {
            agent_version: Some("0.1.0".into()),
            backlog_events: Some(3),
            backlog_bytes: Some(1200),
            oldest_pending_age_seconds: None,
            sync_state: Some("enabled".into()),
            uptime_seconds: Some(12.5),
            interval_seconds: Some(30.0),
            runtimes: vec![
                RuntimeLiveness {
                    session_id: "session_20261103_101433_51be07d2".into(),
                    alive: false,
                    evidence: "pid_exited".into(),
                    gone_at: Some(1_762_164_000_000),
                },
                RuntimeLiveness {
                    session_id: "s2".into(),
                    alive: true,
                    evidence: "pid_running".into(),
                    gone_at: None,
                },
            ],
        };
        let e = beat.event(Utc::now());
        assert_eq!(e.native_type, "agent.heartbeat");
        assert!(e.check_envelope().is_ok());
        assert!(!e.data.contains_key("oldest_pending_age_seconds"));
        assert_eq!(Heartbeat::from_data(&e.data), beat);
        assert!(crate::Policy::default_policy().check(&e).is_ok());
    }

    #[test]
    fn runtime_liveness_keeps_only_its_allowlisted_fields_and_at_most_64_entries() {
        let policy = crate::Policy::default_policy();
        let mut e = Heartbeat::default().event(Utc::now());
        let mut items: Vec<Value> = (0..70)
            .map(|i| json!({"session_id": format!("s{i}"), "alive": true, "evidence": "pid_running"}))
            .collect();
        items[0] = json!({"session_id": "s0", "alive": false, "evidence": "pid_exited",
            "gone_at": 5, "pid": 4242, "path": "/home/alice/.hive"});
        e.data.insert("runtimes".into(), Value::Array(items));
        let issues = policy.check(&e).unwrap_err();
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert!(paths.contains(&"runtimes[].pid"), "{paths:?}");
        assert!(paths.contains(&"runtimes[].path"), "{paths:?}");
        assert!(paths.contains(&"runtimes[64..]"), "{paths:?}");
        policy.apply(&mut e).unwrap();
        let kept = Heartbeat::from_data(&e.data).runtimes;
        assert_eq!(kept.len(), 64);
        assert_eq!(kept[0].gone_at, Some(5));
        let text = serde_json::to_string(&e.data).unwrap();
        assert!(!text.contains("4242") && !text.contains("alice"), "{text}");
    }

    #[test]
    fn a_drop_report_has_a_stable_id_and_reads_back() {
        let ns = Uuid::from_u128(7);
        let r = DropReport {
            reason: "evicted".into(),
            count: 4,
        };
        let (a, b) = (
            r.event(&ns, "d1", 1, Utc::now()),
            r.event(&ns, "d1", 1, Utc::now()),
        );
        assert_eq!(a.event_id, b.event_id);
        assert_eq!(
            a.data,
            json!({"reason": "evicted", "count": 4})
                .as_object()
                .unwrap()
                .clone()
        );
        assert_eq!(DropReport::from_data(&a.data), Some(r));
        assert!(crate::Policy::default_policy().check(&a).is_ok());
        let bad = json!({"reason": "x", "count": -1});
        assert_eq!(DropReport::from_data(bad.as_object().unwrap()), None);
    }
}
