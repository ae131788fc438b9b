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
use serde_json::Value;
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
    pub details: Value,
    /// When the alert began (RFC 3339, UTC).
    pub fired_at: DateTime<Utc>,
    /// When its condition stopped holding; null while firing.
    pub resolved_at: Option<DateTime<Utc>>,
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
