//! What fired: the tenant's alerts, newest first, each with its notifications and how their delivery
//! went.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::rfc3339;
use crate::alerts::RuleKind;
use crate::error::ApiError;

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

/// A notification of an alert and how its delivery went: the stored row as it is read.
pub use crate::store::alerts::NotificationRow as NotificationBody;

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

/// The tenant's alerts (in `params.state`, when given), newest first, with their notifications.
pub async fn alerts(
    pool: &PgPool,
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
                let notifications = a.notifications.0;
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
