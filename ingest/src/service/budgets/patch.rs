//! The body of `PATCH /v1/budgets/{id}`: the fields to change, each replacing that field of the stored
//! budget; a field left out keeps its value.
//!
//! - `scope` is one field: sent, it is the new scope whole (`{}` or `{"tenant": true}`: the whole
//!   tenant), as in `POST`.
//! - The limit is one field with two spellings: `limit_usd` or `limit_tokens` sets the limit and its
//!   unit (a USD budget becomes a token budget by sending `limit_tokens`); at most one of them per patch.
//! - `null` gives a field the value `POST` gives it when left out: `name` none, `scope` the whole tenant,
//!   `tz` UTC, `thresholds` 50, 80, 100. `period` and the limit have no such value: `null` is refused.
//!
//! The patched budget is checked exactly like a new one ([`NewBudget::check`]), so a patch cannot make a
//! budget `POST` would refuse. It is stored only if nobody changed the budget since it was read (the
//! caller retries on a fresh read), so two patches of different fields both land.

use serde::{Deserialize, Deserializer};
use utoipa::ToSchema;

use super::body::{invalid, NewBudget, ScopeBody};
use crate::budgets::{Budget, Unit};
use crate::error::ApiError;

/// Fields of a budget to change (see the module notes).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetPatch {
    /// A new name; `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub name: Option<Option<String>>,
    /// The new scope, whole; `null` or `{}`: the whole tenant.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<ScopeBody>)]
    pub scope: Option<Option<ScopeBody>>,
    /// `day`, `week` (from Monday) or `month`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub period: Option<Option<String>>,
    /// IANA zone of the period; `null`: UTC.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub tz: Option<Option<String>>,
    /// A new limit in USD (decimal string or number, at most 9 decimals); makes the budget a USD one.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub limit_usd: Option<Option<serde_json::Value>>,
    /// A new limit in tokens (input + output); makes the budget a token one.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    pub limit_tokens: Option<Option<u64>>,
    /// Percentages of the limit to notify at; `null`: 50, 80, 100.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<u32>>)]
    pub thresholds: Option<Option<Vec<u32>>>,
}

/// A field that is present: `Some(None)` when it is `null`, `Some(Some(v))` otherwise (absent fields
/// are `None` through `#[serde(default)]`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Parses a `PATCH` body (a JSON object of the fields to change).
pub fn parse(body: &[u8]) -> Result<BudgetPatch, ApiError> {
    let not_a_patch =
        |e: serde_json::Error| invalid(format!("the body is not a budget patch: {e}"));
    // An object only: serde would also read a struct from an array, field by field in order.
    let value: serde_json::Value = serde_json::from_slice(body).map_err(not_a_patch)?;
    if !value.is_object() {
        return Err(invalid(
            "the body is not a budget patch: a JSON object of the fields to change",
        ));
    }
    // serde's message names the field and never quotes a value back for these types.
    serde_json::from_value(value).map_err(not_a_patch)
}

/// `limit_nanos` as the decimal USD text `POST` takes, exactly (`1500000000` → `"1.500000000"`).
fn usd_text(limit_nanos: i64) -> String {
    format!(
        "{}.{:09}",
        limit_nanos / 1_000_000_000,
        limit_nanos % 1_000_000_000
    )
}

/// The definition `stored` was made from (what `POST` would take to make it again).
fn definition(stored: &Budget) -> NewBudget {
    let (limit_usd, limit_tokens) = match stored.unit {
        Unit::Usd => (
            Some(serde_json::Value::String(usd_text(stored.limit))),
            None,
        ),
        Unit::Tokens => (None, u64::try_from(stored.limit).ok()),
    };
    NewBudget {
        name: stored.name.clone(),
        scope: Some(ScopeBody {
            tenant: None,
            user: stored.scope.user.clone(),
            model: stored.scope.model.clone(),
            colony: stored.scope.colony.clone(),
        }),
        period: stored.period.as_str().to_string(),
        tz: Some(stored.tz.name().to_string()),
        limit_usd,
        limit_tokens,
        thresholds: Some(stored.thresholds.clone()),
    }
}

impl BudgetPatch {
    /// `stored`'s definition with this patch applied, to be checked like a new budget.
    pub fn apply(self, stored: &Budget) -> Result<NewBudget, ApiError> {
        let mut b = definition(stored);
        if let Some(name) = self.name {
            b.name = name;
        }
        if let Some(scope) = self.scope {
            b.scope = Some(scope.unwrap_or_default());
        }
        match self.period {
            None => {}
            Some(Some(p)) => b.period = p,
            Some(None) => return Err(invalid("period: a budget needs one (day, week or month)")),
        }
        if let Some(tz) = self.tz {
            b.tz = tz;
        }
        match (self.limit_usd, self.limit_tokens) {
            (Some(Some(_)), Some(Some(_))) => {
                return Err(invalid("give at most one of limit_usd and limit_tokens"))
            }
            (Some(Some(usd)), _) => (b.limit_usd, b.limit_tokens) = (Some(usd), None),
            (_, Some(Some(tokens))) => (b.limit_usd, b.limit_tokens) = (None, Some(tokens)),
            (Some(None), _) | (_, Some(None)) => return Err(invalid(
                "a budget needs a limit: send the new limit_usd or limit_tokens instead of null",
            )),
            (None, None) => {}
        }
        if let Some(thresholds) = self.thresholds {
            b.thresholds = thresholds;
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budgets::Period;
    use apiary_schema::quota::BudgetScope;
    use chrono::Utc;
    use uuid::Uuid;

    fn stored() -> Budget {
        Budget {
            budget_id: "bu_1".into(),
            name: Some("team".into()),
            scope: BudgetScope {
                user: Some("alice".into()),
                model: Some("m1".into()),
                colony: None,
            },
            period: Period::Week,
            tz: chrono_tz::Europe::Berlin,
            unit: Unit::Usd,
            limit: 12_500_000_001,
            thresholds: vec![25, 100],
            created_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    fn patched(body: &str) -> Result<Budget, ApiError> {
        let tenant = Uuid::nil();
        parse(body.as_bytes())?
            .apply(&stored())?
            .check(tenant, "bu_1".into())
    }

    #[test]
    fn an_empty_patch_gives_back_the_stored_budget_exactly() {
        let b = patched("{}").unwrap();
        let s = stored();
        assert_eq!(
            (
                b.name,
                b.scope,
                b.period,
                b.tz,
                b.unit,
                b.limit,
                b.thresholds
            ),
            (
                s.name,
                s.scope,
                s.period,
                s.tz,
                s.unit,
                s.limit,
                s.thresholds
            )
        );
    }

    #[test]
    fn only_the_fields_sent_change() {
        let b = patched(r#"{"limit_usd": "150"}"#).unwrap();
        assert_eq!((b.unit, b.limit), (Unit::Usd, 150_000_000_000));
        assert_eq!(b.scope, stored().scope);
        assert_eq!(b.name.as_deref(), Some("team"));
        assert_eq!(b.tz, chrono_tz::Europe::Berlin);
        assert_eq!(b.period, Period::Week);
        let b = patched(r#"{"limit_tokens": 5000, "period": "day"}"#).unwrap();
        assert_eq!(
            (b.unit, b.limit, b.period),
            (Unit::Tokens, 5000, Period::Day)
        );
        let b = patched(r#"{"scope": {"colony": "ck_0123456789abcdef0123456789abcdef"}}"#).unwrap();
        assert_eq!(b.scope.user, None, "the scope is replaced whole");
        assert_eq!(b.scope.model, None);
    }

    #[test]
    fn null_gives_what_post_gives_for_a_field_left_out() {
        let b =
            patched(r#"{"name": null, "tz": null, "thresholds": null, "scope": null}"#).unwrap();
        assert_eq!(b.name, None);
        assert_eq!(b.tz, chrono_tz::UTC);
        assert_eq!(b.thresholds, crate::budgets::DEFAULT_THRESHOLDS);
        assert_eq!(b.scope, BudgetScope::default());
    }

    #[test]
    fn patches_post_would_refuse_are_refused() {
        for (body, needle) in [
            (r#"{"period": null}"#, "period"),
            (r#"{"period": "year"}"#, "period"),
            (r#"{"limit_usd": null}"#, "limit"),
            (r#"{"limit_usd": "1", "limit_tokens": 5}"#, "at most one"),
            (r#"{"thresholds": []}"#, "thresholds"),
            (r#"{"colour": "red"}"#, "colour"),
            (r#"[]"#, "budget patch"),
        ] {
            let e = patched(body).expect_err(body);
            assert!(e.to_string().contains(needle), "{body}: {e}");
        }
    }
}
