//! Alert rules: a kind (budget, session status, device offline, silence) with the fields of that kind,
//! and the destination its alerts go to.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;
use utoipa::ToSchema;
use uuid::Uuid;

use super::{invalid, rfc3339, MAX_PER_TENANT};
use crate::alerts::RuleKind;
use crate::error::ApiError;
use crate::store::alert_rules::{self as store, Rule};

/// A rule to create: `kind` names the rule, and which fields it takes besides the destination and the
/// name. A field of another kind is refused, naming it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum NewRule {
    /// A budget's threshold crossed.
    Budget {
        destination_id: String,
        #[serde(default)]
        name: Option<String>,
        /// This budget only (absent: any of the tenant's).
        #[serde(default)]
        budget_id: Option<String>,
    },
    /// A session in one of `statuses` for at least `min_duration_secs`.
    SessionStatus {
        destination_id: String,
        #[serde(default)]
        name: Option<String>,
        /// Some of `stalled`, `needs_attention`, `failed`, `crashed` (and any other status); at least one.
        #[serde(default)]
        statuses: Vec<String>,
        /// How long a session must stay in the status before the rule fires (anti-flap; default 0).
        #[serde(default)]
        min_duration_secs: Option<i64>,
    },
    /// A device not heard from for the ingest's `offline_after_secs`.
    DeviceOffline {
        destination_id: String,
        #[serde(default)]
        name: Option<String>,
        /// Also fire when a device's backlog reaches this many events.
        #[serde(default)]
        backlog_events: Option<i64>,
    },
    /// A device that went quiet.
    Silence {
        destination_id: String,
        #[serde(default)]
        name: Option<String>,
        /// Hours without anything from a device active on at least two of the last five working days
        /// (default 24).
        #[serde(default)]
        silence_hours: Option<i64>,
    },
}

impl NewRule {
    /// Parses a rule to create (the API's body, and the command line's flags as the same JSON): an
    /// unknown kind, a missing field or a field of another kind is refused, naming it.
    pub fn parse(v: Value) -> Result<NewRule, ApiError> {
        if let Some(kind) = v.get("kind").and_then(Value::as_str) {
            if RuleKind::parse(kind).is_none() {
                return Err(invalid(format!(
                    "kind: {kind:?} is not budget, session_status, device_offline or silence"
                )));
            }
        }
        serde_json::from_value(v).map_err(|e| invalid(format!("the body is not a rule: {e}")))
    }

    fn kind(&self) -> RuleKind {
        match self {
            NewRule::Budget { .. } => RuleKind::Budget,
            NewRule::SessionStatus { .. } => RuleKind::SessionStatus,
            NewRule::DeviceOffline { .. } => RuleKind::DeviceOffline,
            NewRule::Silence { .. } => RuleKind::Silence,
        }
    }
}

/// A checked rule, as it is stored.
struct CheckedRule {
    kind: RuleKind,
    destination_id: String,
    name: Option<String>,
    budget_id: Option<String>,
    /// session_status only.
    statuses: Option<Vec<String>>,
    min_duration_secs: i64,
    backlog_events: Option<i64>,
    silence_hours: Option<i64>,
}

impl NewRule {
    /// Checks the values (the fields are the kind's by construction).
    fn check(self) -> Result<CheckedRule, ApiError> {
        let kind = self.kind();
        let (destination_id, name) = match &self {
            NewRule::Budget {
                destination_id,
                name,
                ..
            }
            | NewRule::SessionStatus {
                destination_id,
                name,
                ..
            }
            | NewRule::DeviceOffline {
                destination_id,
                name,
                ..
            }
            | NewRule::Silence {
                destination_id,
                name,
                ..
            } => (destination_id.clone(), name.clone()),
        };
        if name.as_ref().is_some_and(|n| n.chars().count() > 200) {
            return Err(invalid("name: at most 200 characters"));
        }
        let mut checked = CheckedRule {
            kind,
            destination_id,
            name,
            budget_id: None,
            statuses: None,
            min_duration_secs: 0,
            backlog_events: None,
            silence_hours: None,
        };
        match self {
            NewRule::Budget { budget_id, .. } => checked.budget_id = budget_id,
            NewRule::SessionStatus {
                statuses: asked,
                min_duration_secs,
                ..
            } => {
                if asked.is_empty() {
                    return Err(invalid(
                        "statuses: at least one (e.g. stalled, needs_attention, failed, crashed)",
                    ));
                }
                let mut statuses: Vec<String> = vec![];
                for s in asked {
                    if serde_json::from_value::<apiary_schema::status::Status>(Value::String(
                        s.clone(),
                    ))
                    .is_err()
                    {
                        return Err(invalid(format!("statuses: {s:?} is not a session status")));
                    }
                    if !statuses.contains(&s) {
                        statuses.push(s);
                    }
                }
                let min = min_duration_secs.unwrap_or(0);
                if !(0..=7 * 86_400).contains(&min) {
                    return Err(invalid("min_duration_secs: 0 to 604800"));
                }
                checked.statuses = Some(statuses);
                checked.min_duration_secs = min;
            }
            NewRule::DeviceOffline { backlog_events, .. } => {
                if backlog_events.is_some_and(|b| b < 1) {
                    return Err(invalid("backlog_events: at least 1"));
                }
                checked.backlog_events = backlog_events;
            }
            NewRule::Silence { silence_hours, .. } => {
                let h = silence_hours.unwrap_or(24);
                if !(1..=168).contains(&h) {
                    return Err(invalid("silence_hours: 1 to 168"));
                }
                checked.silence_hours = Some(h);
            }
        }
        Ok(checked)
    }
}

/// A rule as stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RuleBody {
    pub rule_id: String,
    pub kind: RuleKind,
    pub name: Option<String>,
    pub destination_id: String,
    pub budget_id: Option<String>,
    pub statuses: Vec<String>,
    pub min_duration_secs: i64,
    pub backlog_events: Option<i64>,
    pub silence_hours: Option<i64>,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RuleList {
    pub rules: Vec<RuleBody>,
}

impl From<Rule> for RuleBody {
    fn from(r: Rule) -> RuleBody {
        RuleBody {
            rule_id: r.rule_id,
            kind: r.kind,
            name: r.name,
            destination_id: r.destination_id,
            budget_id: r.budget_id,
            statuses: r
                .statuses
                .iter()
                .filter_map(|s| serde_json::to_value(s).ok())
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            min_duration_secs: r.min_duration_secs,
            backlog_events: r.backlog_events,
            silence_hours: r.silence_hours,
            created_at: rfc3339(r.created_at),
        }
    }
}

/// Checks and stores a rule (the API's and the command line's one way in).
pub async fn create_rule(
    pool: &PgPool,
    tenant_id: Uuid,
    asked: NewRule,
) -> Result<RuleBody, ApiError> {
    let asked = asked.check()?;
    if !store::destination_exists(pool, tenant_id, &asked.destination_id).await? {
        return Err(invalid("destination_id: no such destination"));
    }
    if let Some(b) = &asked.budget_id {
        if crate::store::budgets::get(pool, tenant_id, b)
            .await?
            .is_none()
        {
            return Err(invalid("budget_id: no such budget"));
        }
    }
    let id = format!("ar_{}", Uuid::new_v4().simple());
    let row = store::NewRule {
        rule_id: &id,
        kind: asked.kind,
        name: asked.name.as_deref(),
        destination_id: &asked.destination_id,
        budget_id: asked.budget_id.as_deref(),
        statuses: asked.statuses.as_deref(),
        min_duration_secs: asked.min_duration_secs,
        backlog_events: asked.backlog_events,
        silence_hours: asked.silence_hours,
    };
    let Some(stored) = store::insert_rule(pool, tenant_id, row, MAX_PER_TENANT).await? else {
        return Err(invalid(format!(
            "the tenant already has {MAX_PER_TENANT} rules"
        )));
    };
    stored
        .map(RuleBody::from)
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("a stored rule does not parse")))
}

/// The tenant's rules, by id.
pub async fn rules(pool: &PgPool, tenant_id: Uuid) -> Result<RuleList, ApiError> {
    let mut conn = pool.acquire().await?;
    let rules = store::rules(&mut conn, tenant_id).await?;
    Ok(RuleList {
        rules: rules.into_iter().map(RuleBody::from).collect(),
    })
}

/// Deletes a rule with its alerts and their notifications; 404 when the tenant has no such rule.
pub async fn delete_rule(pool: &PgPool, tenant_id: Uuid, id: &str) -> Result<(), ApiError> {
    if store::delete_rule(pool, tenant_id, id).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound("rule"))
    }
}
