//! The alert notification: the JSON body the ingest POSTs to a webhook destination when an alert fires
//! or resolves (`schema/v1/alert-notification.schema.json`, generated from these types, so a receiver can
//! validate what it gets). Slack destinations get a one-line message made from the same notification.
//!
//! A notification is written once, when its alert changes state, and every retry sends the same bytes:
//! the `idempotency_key` (also the `Idempotency-Key` header) names it, and a receiver that saw it
//! already drops the repeat. With a destination secret, the `X-Apiary-Signature` header signs those bytes
//! (`t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`).

use chrono::{DateTime, Utc};
#[cfg(feature = "json-schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a rule watches (`kind` of a rule, and of each alert it raises).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    /// A budget's threshold crossed (once per budget, period and threshold).
    Budget,
    /// A session in one of `statuses` for at least `min_duration_secs`.
    SessionStatus,
    /// A device not heard from for `offline_after_secs`, or with a backlog of `backlog_events` or more.
    DeviceOffline,
    /// A device active on at least two of the last five working days (Monday to Friday, UTC) that has
    /// sent nothing for `silence_hours`.
    Silence,
}

impl RuleKind {
    /// The kind from its wire name.
    pub fn parse(s: &str) -> Option<RuleKind> {
        Some(match s {
            "budget" => RuleKind::Budget,
            "session_status" => RuleKind::SessionStatus,
            "device_offline" => RuleKind::DeviceOffline,
            "silence" => RuleKind::Silence,
            _ => return None,
        })
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Budget => "budget",
            RuleKind::SessionStatus => "session_status",
            RuleKind::DeviceOffline => "device_offline",
            RuleKind::Silence => "silence",
        }
    }
}

/// What happened to the alert: it began, or its condition no longer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    Firing,
    Resolved,
}

impl AlertState {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// The body of a webhook notification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub struct AlertNotification {
    /// `<alert_id>:<event>`: the same for every retry of this notification (also sent as the
    /// `Idempotency-Key` header).
    pub idempotency_key: String,
    /// `firing` when the alert began, `resolved` when its condition stopped holding.
    pub event: AlertState,
    /// The tenant whose rule fired.
    pub tenant_id: Uuid,
    /// The alert, as it stands after this event.
    pub alert: AlertBody,
}

/// An alert as a notification carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub struct AlertBody {
    /// `al_` and 32 hexadecimal digits.
    pub alert_id: String,
    /// The rule that raised it.
    pub rule_id: String,
    /// The rule's name, if it has one.
    pub rule_name: Option<String>,
    pub kind: RuleKind,
    pub state: AlertState,
    /// What it is about: a budget, a session or a device id.
    pub subject: String,
    /// One line for people.
    pub summary: String,
    /// The facts behind it, by kind (a budget's spend and threshold, a session's status and since when,
    /// a device's last contact or backlog).
    pub details: AlertDetails,
    /// When the alert began (RFC 3339, UTC).
    pub fired_at: DateTime<Utc>,
    /// When its condition stopped holding; null while firing.
    pub resolved_at: Option<DateTime<Utc>>,
}

/// The facts behind an alert, by what fired it: the alert's `kind` says which (`budget`,
/// `session_status`, `silence`; `device_offline` is a device offline or, with `backlog_limit`, a
/// backlog at or above the rule's). On the wire each is a plain object of its fields (no tag); the
/// fields tell them apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum AlertDetails {
    Budget(BudgetDetails),
    SessionStatus(SessionStatusDetails),
    DeviceBacklog(DeviceBacklogDetails),
    Silence(SilenceDetails),
    DeviceOffline(DeviceOfflineDetails),
}

/// A budget's threshold crossed in its current period (`kind` `budget`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BudgetDetails {
    pub budget_id: String,
    /// The budget's name, if it has one.
    pub budget_name: Option<String>,
    /// The threshold crossed, in percent of the limit.
    pub threshold_percent: i32,
    /// `usd` (amounts in nano-USD) or `tokens`.
    pub unit: String,
    /// Spent in the period when the threshold was crossed, in the unit.
    pub spent: i64,
    /// The period's limit, in the unit.
    pub limit: i64,
    /// `day`, `week` or `month`.
    pub period: String,
    /// The period's start (RFC 3339, UTC).
    pub period_start: DateTime<Utc>,
    /// The period's end, excluded (RFC 3339, UTC).
    pub period_end: DateTime<Utc>,
    /// When the threshold was crossed (RFC 3339, UTC).
    pub crossed_at: DateTime<Utc>,
}

/// A session in one of the rule's statuses for at least its minimum duration (`kind`
/// `session_status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionStatusDetails {
    pub session_id: String,
    /// The session's status (`stalled`, `needs_attention`, `failed`, `crashed`, …).
    pub status: String,
    /// When the session entered it (RFC 3339, UTC).
    pub since: DateTime<Utc>,
    /// Why the session is in it, in words.
    pub cause: String,
    pub user_id: String,
    pub device_id: String,
}

/// A device not heard from for the ingest's `offline_after_secs` (`kind` `device_offline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeviceOfflineDetails {
    pub device_id: String,
    pub user_id: String,
    /// Its last heartbeat or batch, whichever is later (RFC 3339, UTC).
    pub last_heard_at: DateTime<Utc>,
    /// Events waiting on the device as it last reported; null when it never did.
    pub backlog_events: Option<i64>,
    /// The agent's version as it last reported; null when it never did.
    pub agent_version: Option<String>,
}

/// A device with a backlog at or above the rule's `backlog_events` (`kind` `device_offline`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeviceBacklogDetails {
    pub device_id: String,
    pub user_id: String,
    /// Its last heartbeat or batch, whichever is later (RFC 3339, UTC).
    pub last_heard_at: DateTime<Utc>,
    /// Events waiting on the device as it last reported.
    pub backlog_events: i64,
    /// The rule's `backlog_events`.
    pub backlog_limit: i64,
    /// The agent's version as it last reported; null when it never did.
    pub agent_version: Option<String>,
}

/// A device active on recent working days that went quiet (`kind` `silence`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SilenceDetails {
    pub device_id: String,
    pub user_id: String,
    /// Its last heartbeat or batch, whichever is later (RFC 3339, UTC).
    pub last_heard_at: DateTime<Utc>,
    /// How many of the last five working days (Monday to Friday, UTC) it had usage on.
    pub active_working_days: i64,
    /// The rule's `silence_hours`.
    pub silence_hours: i64,
}

impl AlertNotification {
    /// The notification of `alert` reaching `event`, named `<alert_id>:<event>`.
    pub fn new(tenant_id: Uuid, alert: AlertBody, event: AlertState) -> AlertNotification {
        AlertNotification {
            idempotency_key: format!("{}:{}", alert.alert_id, event.as_str()),
            event,
            tenant_id,
            alert,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// Each kind's details are the plain object the evaluator has always sent (times as RFC 3339 with
    /// as many fractional digits as they need), and read back as the same kind.
    #[test]
    fn details_are_plain_objects_and_read_back_as_their_kind() {
        let t = at("2026-11-26T10:00:00.123456Z");
        let cases = [
            (
                AlertDetails::Budget(BudgetDetails {
                    budget_id: "bu_1".into(),
                    budget_name: None,
                    threshold_percent: 80,
                    unit: "usd".into(),
                    spent: 8_000_000_000,
                    limit: 10_000_000_000,
                    period: "month".into(),
                    period_start: at("2026-11-01T00:00:00Z"),
                    period_end: at("2026-12-01T00:00:00Z"),
                    crossed_at: t,
                }),
                json!({
                    "budget_id": "bu_1", "budget_name": null, "threshold_percent": 80,
                    "unit": "usd", "spent": 8_000_000_000_i64, "limit": 10_000_000_000_i64,
                    "period": "month", "period_start": "2026-11-01T00:00:00Z",
                    "period_end": "2026-12-01T00:00:00Z", "crossed_at": "2026-11-26T10:00:00.123456Z",
                }),
            ),
            (
                AlertDetails::SessionStatus(SessionStatusDetails {
                    session_id: "s1".into(),
                    status: "stalled".into(),
                    since: at("2026-11-26T09:00:00.5Z"),
                    cause: "no progress".into(),
                    user_id: "u1".into(),
                    device_id: "d1".into(),
                }),
                json!({
                    "session_id": "s1", "status": "stalled", "since": "2026-11-26T09:00:00.500Z",
                    "cause": "no progress", "user_id": "u1", "device_id": "d1",
                }),
            ),
            (
                AlertDetails::DeviceOffline(DeviceOfflineDetails {
                    device_id: "d1".into(),
                    user_id: "u1".into(),
                    last_heard_at: t,
                    backlog_events: None,
                    agent_version: Some("0.1.0".into()),
                }),
                json!({
                    "device_id": "d1", "user_id": "u1", "last_heard_at": "2026-11-26T10:00:00.123456Z",
                    "backlog_events": null, "agent_version": "0.1.0",
                }),
            ),
            (
                AlertDetails::DeviceBacklog(DeviceBacklogDetails {
                    device_id: "d1".into(),
                    user_id: "u1".into(),
                    last_heard_at: t,
                    backlog_events: 5000,
                    backlog_limit: 1000,
                    agent_version: None,
                }),
                json!({
                    "device_id": "d1", "user_id": "u1", "last_heard_at": "2026-11-26T10:00:00.123456Z",
                    "backlog_events": 5000, "backlog_limit": 1000, "agent_version": null,
                }),
            ),
            (
                AlertDetails::Silence(SilenceDetails {
                    device_id: "d1".into(),
                    user_id: "u1".into(),
                    last_heard_at: t,
                    active_working_days: 3,
                    silence_hours: 24,
                }),
                json!({
                    "device_id": "d1", "user_id": "u1", "last_heard_at": "2026-11-26T10:00:00.123456Z",
                    "active_working_days": 3, "silence_hours": 24,
                }),
            ),
        ];
        for (details, wire) in cases {
            assert_eq!(serde_json::to_value(&details).unwrap(), wire);
            assert_eq!(
                serde_json::from_value::<AlertDetails>(wire).unwrap(),
                details
            );
        }
    }
}
