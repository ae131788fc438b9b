//! The body `POST` and `PUT /v1/budgets` and `apiary-ingest budget create` take ([`NewBudget`], with its
//! [`ScopeBody`]) and its checks into a [`Budget`]: what both the operations ([`super`]) and a patch's
//! merge ([`super::patch`]) build on.

use apiary_schema::quota::BudgetScope;
use chrono::Utc;
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::budgets::{Budget, Period, Unit, DEFAULT_THRESHOLDS};
use crate::error::ApiError;

/// A budget's scope as a request gives it: the tenant (`{}` or `{"tenant": true}`), narrowed by any of a
/// user, a model and a colony key. Answers carry the checked scope, [`BudgetScope`] (the same fields
/// without `tenant`); this adds only the `tenant` a request may name, and refuses unknown fields.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeBody {
    /// `true` (or the tenant's id): the whole tenant. The same as leaving the other fields out.
    #[serde(default, skip_serializing)]
    #[schema(value_type = Option<Object>)]
    pub tenant: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A colony key (`ck_…` or `dk_…`, see `GET /v1/colonies`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colony: Option<String>,
}

/// A budget to create, or the new definition of one (`PUT`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewBudget {
    #[serde(default)]
    pub name: Option<String>,
    /// What the budget counts. `POST`: absent is the whole tenant; `PUT`: required (`{}` for the whole
    /// tenant).
    #[serde(default)]
    pub scope: Option<ScopeBody>,
    /// `day`, `week` (from Monday) or `month`.
    pub period: String,
    /// IANA zone of the period (default UTC).
    #[serde(default)]
    pub tz: Option<String>,
    /// The limit in USD, a decimal string or number with at most 9 decimals ("100", "12.50"). Exactly
    /// one of `limit_usd` and `limit_tokens`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub limit_usd: Option<serde_json::Value>,
    /// The limit in tokens (input + output).
    #[serde(default)]
    pub limit_tokens: Option<u64>,
    /// Percentages of the limit to notify at, 1 to 1000 each, at most 10 (default 50, 80, 100).
    #[serde(default)]
    pub thresholds: Option<Vec<u32>>,
}

/// A 400 `invalid_budget` with `message` (naming the field).
pub fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        code: "invalid_budget",
        message: message.into(),
    }
}

/// Longest name, user or model kept.
const MAX_TEXT: usize = 200;

impl NewBudget {
    /// Checks every field; `budget_id` and the times are the caller's.
    pub fn check(self, tenant_id: Uuid, budget_id: String) -> Result<Budget, ApiError> {
        let text = |field: &str, v: Option<String>| -> Result<Option<String>, ApiError> {
            match v {
                Some(t) if t.trim().is_empty() => Err(invalid(format!("{field}: empty"))),
                Some(t) if t.chars().count() > MAX_TEXT => {
                    Err(invalid(format!("{field}: at most {MAX_TEXT} characters")))
                }
                other => Ok(other),
            }
        };
        let scope = self.scope.unwrap_or_default();
        match &scope.tenant {
            None | Some(serde_json::Value::Bool(true)) => {}
            Some(serde_json::Value::String(s)) if s == &tenant_id.to_string() => {}
            Some(_) => {
                return Err(invalid(
                    "scope.tenant: true (or this token's tenant id); a budget counts its own tenant only",
                ))
            }
        }
        let colony = text("scope.colony", scope.colony)?;
        if let Some(c) = &colony {
            if !apiary_schema::colony::is_colony_key(c) {
                return Err(invalid(
                    "scope.colony: a colony key is ck_ or dk_ and 32 lowercase hexadecimal digits",
                ));
            }
        }
        let period = Period::parse(&self.period).ok_or_else(|| {
            invalid(format!(
                "period: {:?} is not day, week or month",
                self.period
            ))
        })?;
        let tz: Tz = match self.tz.as_deref() {
            None | Some("") => Tz::UTC,
            Some(z) => z
                .parse()
                .map_err(|_| invalid(format!("tz: {z:?} is not an IANA time zone")))?,
        };
        let (unit, limit) = match (self.limit_usd, self.limit_tokens) {
            (Some(v), None) => (Unit::Usd, usd_limit(&v)?),
            (None, Some(t)) => (
                Unit::Tokens,
                i64::try_from(t).map_err(|_| invalid("limit_tokens: too large"))?,
            ),
            _ => return Err(invalid("give exactly one of limit_usd and limit_tokens")),
        };
        if limit <= 0 {
            return Err(invalid("the limit must be above zero"));
        }
        let mut thresholds = self
            .thresholds
            .unwrap_or_else(|| DEFAULT_THRESHOLDS.to_vec());
        thresholds.sort_unstable();
        thresholds.dedup();
        if thresholds.is_empty() || thresholds.len() > 10 {
            return Err(invalid("thresholds: 1 to 10 percentages"));
        }
        if thresholds.iter().any(|t| !(1..=1000).contains(t)) {
            return Err(invalid("thresholds: each from 1 to 1000 (percent)"));
        }
        let now = Utc::now();
        Ok(Budget {
            budget_id,
            name: text("name", self.name)?,
            scope: BudgetScope {
                user: text("scope.user", scope.user)?,
                model: text("scope.model", scope.model)?,
                colony,
            },
            period,
            tz,
            unit,
            limit,
            thresholds,
            created_at: now,
            updated_at: now,
        })
    }
}

/// A USD amount (string or JSON number, at most 9 decimals) → nano-USD, exactly.
fn usd_limit(v: &serde_json::Value) -> Result<i64, ApiError> {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => {
            return Err(invalid(
                "limit_usd: a decimal number of USD, like \"100.00\"",
            ))
        }
    };
    apiary_schema::prices::parse_rate(&text)
        .map_err(|_| invalid(format!("limit_usd: {text:?} is not a decimal number of USD with at most 9 decimals (at most 1000000)")))
}
