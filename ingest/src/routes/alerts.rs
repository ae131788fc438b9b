//! Alerts: destinations (`POST/GET /v1/alerts/destinations`, `DELETE /v1/alerts/destinations/{id}`,
//! scope `admin`), rules (`POST /v1/alerts/rules` and `DELETE /v1/alerts/rules/{id}`, scope `admin`;
//! `GET /v1/alerts/rules`, any read token not bound to a user), and what fired (`GET /v1/alerts`, same),
//! with each alert's notifications and their delivery state. See [`crate::alerts`].
//!
//! Bad input is a 400 (`invalid_alert`, naming the field); nothing is stored. Another tenant's or an
//! unknown id is a 404.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, SecondsFormat, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::docs::ReadErrors;
use super::extract::{Path, Query};
use crate::alerts::destination::{self, Kind};
use crate::alerts::RuleKind;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::state::AppState;
use crate::store::alert_rules::{self as store, Rule};

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_alert",
        message: message.into(),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Most destinations and rules a tenant keeps.
const MAX_PER_TENANT: i64 = 100;

/// Alerts are tenant-wide: a read token bound to a user may not list them (they name other users'
/// sessions and devices).
fn tenant_reader(p: &Principal) -> Result<(), ApiError> {
    p.require(Scope::Read)?;
    if p.read_user().is_some() {
        return Err(ApiError::Forbidden(
            "alerts are tenant-wide: use a read token that is not bound to a user".into(),
        ));
    }
    Ok(())
}

/// A destination to create.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewDestination {
    /// `webhook` (JSON, signed) or `slack` (an incoming-webhook URL).
    pub kind: String,
    /// `https://` and public (checked again after DNS resolution at each delivery).
    pub url: String,
    /// The webhook's HMAC key (16 to 200 characters); absent: one is made and answered once.
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// A destination as listed: where it sends and which URL, never the URL itself nor the secret (a Slack
/// webhook's URL is its only secret, and a webhook's URL often carries a token too).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DestinationBody {
    pub destination_id: String,
    pub kind: Kind,
    /// The URL's host, with its port when that is not the default.
    pub host: String,
    /// The first 12 hex digits of the SHA-256 of the URL as answered at creation
    /// (`printf %s "$URL" | sha256sum | cut -c1-12`): tells which URL it is without showing it.
    pub url_fingerprint: String,
    pub name: Option<String>,
    pub has_secret: bool,
    pub created_at: String,
}

impl DestinationBody {
    fn new(
        destination_id: String,
        kind: Kind,
        url: &str,
        name: Option<String>,
        has_secret: bool,
        created_at: DateTime<Utc>,
    ) -> DestinationBody {
        DestinationBody {
            destination_id,
            kind,
            host: destination::listed_host(url),
            url_fingerprint: destination::fingerprint(url),
            name,
            has_secret,
            created_at: rfc3339(created_at),
        }
    }
}

/// The answer that created a destination: as listed, plus what is shown this once and never again.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedDestination {
    #[serde(flatten)]
    pub destination: DestinationBody,
    /// The URL as stored (normalised; its fingerprint is the listing's `url_fingerprint`).
    pub url: String,
    /// Only when the server made the secret: keep it now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DestinationList {
    pub destinations: Vec<DestinationBody>,
}

/// Adds a destination (scope admin).
#[utoipa::path(
    post,
    path = "/v1/alerts/destinations",
    request_body(content = NewDestination, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 201, description = "The destination, with its URL and (when the server made it) its secret: shown this once.", body = CreatedDestination), ReadErrors)
)]
pub async fn post_destination(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<CreatedDestination>), ApiError> {
    principal.require(Scope::Admin)?;
    let asked: NewDestination = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("the body is not a destination: {e}")))?;
    let d = create_destination(
        &state.pool,
        principal.tenant_id,
        asked,
        state.settings.alerts.allow_private_destinations,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(d)))
}

/// Checks and stores a destination (the API's and the command line's one way in).
pub async fn create_destination(
    pool: &sqlx::PgPool,
    tenant_id: Uuid,
    asked: NewDestination,
    allow_private: bool,
) -> Result<CreatedDestination, ApiError> {
    let kind = Kind::parse(&asked.kind)
        .ok_or_else(|| invalid(format!("kind: {:?} is not webhook or slack", asked.kind)))?;
    let url = destination::check_url(kind, asked.url.trim(), allow_private).map_err(invalid)?;
    if asked.name.as_ref().is_some_and(|n| n.chars().count() > 200) {
        return Err(invalid("name: at most 200 characters"));
    }
    let (secret, made) = match (kind, asked.secret) {
        (Kind::Slack, Some(_)) => {
            return Err(invalid(
                "secret: Slack webhooks are not signed (the URL is the secret)",
            ))
        }
        (Kind::Slack, None) => (None, false),
        (Kind::Webhook, Some(s)) if !(16..=200).contains(&s.len()) => {
            return Err(invalid("secret: 16 to 200 characters"))
        }
        (Kind::Webhook, Some(s)) => (Some(s), false),
        (Kind::Webhook, None) => {
            let mut b = [0u8; 32];
            rand::thread_rng().fill_bytes(&mut b);
            (Some(format!("whsec_{}", hex::encode(b))), true)
        }
    };
    let id = format!("ad_{}", Uuid::new_v4().simple());
    let row = store::NewDestination {
        destination_id: &id,
        kind: kind.as_str(),
        url: url.as_str(),
        secret: secret.as_deref(),
        name: asked.name.as_deref(),
    };
    let created = store::insert_destination(pool, tenant_id, row, MAX_PER_TENANT).await?;
    let Some(created_at) = created else {
        return Err(invalid(format!(
            "the tenant already has {MAX_PER_TENANT} destinations"
        )));
    };
    Ok(CreatedDestination {
        destination: DestinationBody::new(
            id,
            kind,
            url.as_str(),
            asked.name,
            secret.is_some(),
            created_at,
        ),
        url: url.to_string(),
        secret: if made { secret } else { None },
    })
}

/// The tenant's destinations (scope admin): host and URL fingerprint, never the URL nor the secret.
#[utoipa::path(
    get,
    path = "/v1/alerts/destinations",
    security(("bearer" = [])),
    responses((status = 200, description = "Destinations.", body = DestinationList), ReadErrors)
)]
pub async fn list_destinations(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<DestinationList>, ApiError> {
    principal.require(Scope::Admin)?;
    Ok(Json(destinations(&state.pool, principal.tenant_id).await?))
}

pub async fn destinations(
    pool: &sqlx::PgPool,
    tenant_id: Uuid,
) -> Result<DestinationList, ApiError> {
    let rows = store::destinations(pool, tenant_id).await?;
    Ok(DestinationList {
        destinations: rows
            .into_iter()
            .filter_map(|d| {
                Some(DestinationBody::new(
                    d.destination_id,
                    Kind::parse(&d.kind)?,
                    &d.url,
                    d.name,
                    d.has_secret,
                    d.created_at,
                ))
            })
            .collect(),
    })
}

/// Deletes a destination (scope admin); 400 while rules send to it.
#[utoipa::path(
    delete,
    path = "/v1/alerts/destinations/{id}",
    params(("id" = String, Path, description = "destination id")),
    security(("bearer" = [])),
    responses((status = 204, description = "Deleted."), ReadErrors)
)]
pub async fn delete_destination(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.require(Scope::Admin)?;
    let used = store::rules_sending_to(&state.pool, principal.tenant_id, &id).await?;
    if used > 0 {
        return Err(invalid(format!(
            "{used} rule(s) send to this destination: delete them first"
        )));
    }
    if store::delete_destination(&state.pool, principal.tenant_id, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("destination"))
    }
}

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

/// Adds a rule (scope admin).
#[utoipa::path(
    post,
    path = "/v1/alerts/rules",
    request_body(content = NewRule, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 201, description = "The rule.", body = RuleBody), ReadErrors)
)]
pub async fn post_rule(
    State(state): State<AppState>,
    principal: Principal,
    body: Bytes,
) -> Result<(StatusCode, Json<RuleBody>), ApiError> {
    principal.require(Scope::Admin)?;
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("the body is not a rule: {e}")))?;
    let asked = NewRule::parse(body)?;
    Ok((
        StatusCode::CREATED,
        Json(create_rule(&state.pool, principal.tenant_id, asked).await?),
    ))
}

/// Checks and stores a rule (the API's and the command line's one way in).
pub async fn create_rule(
    pool: &sqlx::PgPool,
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

/// The tenant's rules (any read token not bound to a user).
#[utoipa::path(
    get,
    path = "/v1/alerts/rules",
    security(("bearer" = [])),
    responses((status = 200, description = "Rules.", body = RuleList), ReadErrors)
)]
pub async fn list_rules(
    State(state): State<AppState>,
    principal: Principal,
) -> Result<Json<RuleList>, ApiError> {
    tenant_reader(&principal)?;
    Ok(Json(rules(&state.pool, principal.tenant_id).await?))
}

pub async fn rules(pool: &sqlx::PgPool, tenant_id: Uuid) -> Result<RuleList, ApiError> {
    let mut conn = pool.acquire().await?;
    let rules = store::rules(&mut conn, tenant_id).await?;
    Ok(RuleList {
        rules: rules.into_iter().map(RuleBody::from).collect(),
    })
}

/// Deletes a rule with its alerts and their notifications (scope admin).
#[utoipa::path(
    delete,
    path = "/v1/alerts/rules/{id}",
    params(("id" = String, Path, description = "rule id")),
    security(("bearer" = [])),
    responses((status = 204, description = "Deleted."), ReadErrors)
)]
pub async fn delete_rule(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.require(Scope::Admin)?;
    if store::delete_rule(&state.pool, principal.tenant_id, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound("rule"))
    }
}

/// `GET /v1/alerts` parameters.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AlertParams {
    /// `firing` or `resolved` (default both).
    pub state: Option<String>,
    /// Most alerts answered, newest first (default 100, at most 1000).
    pub limit: Option<i64>,
}

/// A notification of an alert and how its delivery went.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NotificationBody {
    pub event: String,
    pub idempotency_key: String,
    /// `pending`, `delivered` or `dead`.
    pub state: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub delivered_at: Option<String>,
}

/// A fired alert.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AlertBody {
    pub alert_id: String,
    pub rule_id: String,
    pub kind: RuleKind,
    /// `firing` or `resolved`.
    pub state: String,
    /// The budget, session or device it is about.
    pub subject: String,
    pub summary: String,
    #[schema(value_type = Object)]
    pub details: Value,
    pub fired_at: String,
    pub resolved_at: Option<String>,
    pub notifications: Vec<NotificationBody>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AlertList {
    pub alerts: Vec<AlertBody>,
}

/// Fired alerts, newest first, with their notifications (any read token not bound to a user).
#[utoipa::path(
    get,
    path = "/v1/alerts",
    params(AlertParams),
    security(("bearer" = [])),
    responses((status = 200, description = "Alerts.", body = AlertList), ReadErrors)
)]
pub async fn list_alerts(
    State(state): State<AppState>,
    principal: Principal,
    Query(params): Query<AlertParams>,
) -> Result<Json<AlertList>, ApiError> {
    tenant_reader(&principal)?;
    Ok(Json(
        alerts(&state.pool, principal.tenant_id, &params).await?,
    ))
}

pub async fn alerts(
    pool: &sqlx::PgPool,
    tenant_id: Uuid,
    params: &AlertParams,
) -> Result<AlertList, ApiError> {
    if let Some(s) = &params.state {
        if s != "firing" && s != "resolved" {
            return Err(ApiError::bad_param("state", "firing or resolved"));
        }
    }
    let limit = params.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_param("limit", "1 to 1000"));
    }
    let rows = crate::store::alerts::list(pool, tenant_id, params.state.as_deref(), limit).await?;
    Ok(AlertList {
        alerts: rows
            .into_iter()
            .filter_map(|a| {
                let notifications = a
                    .notifications
                    .0
                    .into_iter()
                    .map(|n| NotificationBody {
                        event: n.event,
                        idempotency_key: n.idempotency_key,
                        state: n.state,
                        attempts: n.attempts,
                        last_error: n.last_error,
                        delivered_at: n.delivered_at,
                    })
                    .collect();
                Some(AlertBody {
                    alert_id: a.alert_id,
                    rule_id: a.rule_id,
                    kind: RuleKind::parse(&a.kind)?,
                    state: a.state,
                    subject: a.subject,
                    summary: a.summary,
                    details: a.details,
                    fired_at: rfc3339(a.fired_at),
                    resolved_at: a.resolved_at.map(rfc3339),
                    notifications,
                })
            })
            .collect(),
    })
}
