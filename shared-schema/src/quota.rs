//! Budget state as the device sees it (the "quota"): the ingest puts it in its answer to a batch when the
//! agent asks for it (request header [`QUOTA_HEADER`]` : 1`), the agent keeps the last one it got and
//! serves it locally (`GET /v1/quota`, `apiary-agent status`, the settings page).
//!
//! Enforcement is advisory: the ingest never refuses a batch because a budget is spent (events that
//! already happened are facts to count, and losing them would make every later number wrong). A runtime
//! or the desktop may read the quota and choose to stop.

use chrono::{DateTime, Utc};
#[cfg(feature = "json-schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The request header an agent sends (value `1`) to get [`Quota`] in the batch answer. Agents that do not
/// send it get the answer without the field (older agents refuse fields they do not know).
pub const QUOTA_HEADER: &str = "x-apiary-quota";

/// The budgets that apply to the token's user (a budget scoped to the tenant, or to this user), each with
/// its spend in the current period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub struct Quota {
    /// When the spend was read (it may trail the batch it answers by a few seconds).
    pub as_of: DateTime<Utc>,
    pub budgets: Vec<BudgetState>,
}

/// One budget in its current period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub struct BudgetState {
    pub budget_id: String,
    /// The budget's name, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the budget counts: absent fields match everything (no field: the whole tenant).
    pub scope: BudgetScope,
    /// `day`, `week` (starting Monday) or `month`, in `tz`.
    pub period: String,
    /// IANA time zone of the period.
    pub tz: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// `usd` or `tokens` (input + output tokens).
    pub unit: String,
    /// The limit in the unit: nano-USD for `usd`, tokens for `tokens` (exact integers).
    pub limit: i64,
    /// Spent so far in the period, in the same unit.
    pub spent: i64,
    /// `spent / limit` in percent (for display; the integers are exact).
    pub percent: f64,
    /// The thresholds (percent) the budget notifies at, and those crossed in this period.
    pub thresholds: Vec<u32>,
    pub crossed: Vec<u32>,
}

/// A budget's scope: each present field restricts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BudgetScope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A colony key (see `GET /v1/colonies`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colony: Option<String>,
}
