//! A budget's spend: the usage rollups of its tenant in `[start, end)`, narrowed by its scope, summed in
//! its unit — the same rows and sums `/v1/usage` answers for that range (`cost_nanos`, or input + output
//! tokens), so the two agree exactly. A range on whole UTC hours (every zone with a whole-hour offset)
//! reads an hourly rollup — the narrow one (per user, model and runtime) unless the budget is scoped to
//! a colony — otherwise the 15-minute one; all hold the same sums.

use chrono::{DateTime, Timelike, Utc};
use sqlx::{Postgres, QueryBuilder};

use super::usage::{push_colony_key_joins, COLONY_KEY_OF_ROW};
use super::ReadDb;
use crate::access::TenantRead;
use crate::budgets::{Budget, Unit};
use crate::error::ApiError;

fn whole_hour(t: DateTime<Utc>) -> bool {
    t.minute() == 0 && t.second() == 0 && t.nanosecond() == 0
}

/// The statement summing `budget`'s spend over `[start, end)` for `read`'s tenant (and user, for a
/// user-bound read).
pub fn statement(
    read: &TenantRead,
    budget: &Budget,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> QueryBuilder<'static, Postgres> {
    let table = match (whole_hour(start) && whole_hour(end), &budget.scope.colony) {
        (true, None) => "usage_rollups_narrow",
        (true, Some(_)) => "usage_rollups_hourly",
        (false, _) => "usage_rollups",
    };
    let sum = match budget.unit {
        Unit::Usd => "cost_nanos",
        Unit::Tokens => "input_tokens + output_tokens",
    };
    let mut q = QueryBuilder::new(format!(
        "SELECT COALESCE(sum({sum}), 0)::bigint FROM {table} r"
    ));
    if budget.scope.colony.is_some() {
        push_colony_key_joins(&mut q, Some(read.tenant_id()));
    }
    q.push(" WHERE r.tenant_id = ");
    q.push_bind(read.tenant_id());
    q.push(" AND r.bucket >= ").push_bind(start);
    q.push(" AND r.bucket < ").push_bind(end);
    if let Some(user) = read.user() {
        q.push(" AND r.user_id = ").push_bind(user.to_string());
    }
    if let Some(user) = &budget.scope.user {
        q.push(" AND r.user_id = ").push_bind(user.clone());
    }
    if let Some(model) = &budget.scope.model {
        q.push(" AND r.model = ").push_bind(model.clone());
    }
    if let Some(colony) = &budget.scope.colony {
        q.push(format!(" AND {COLONY_KEY_OF_ROW} = "))
            .push_bind(colony.clone());
    }
    q
}

/// The spend, in the budget's unit (nano-USD or tokens). A sum past the bigint range is an error.
pub async fn spent(
    db: &ReadDb,
    read: &TenantRead,
    budget: &Budget,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<i64, ApiError> {
    let mut q = statement(read, budget, start, end);
    let (spent,): (i64,) = q.build_query_as().fetch_one(&db.pool).await?;
    Ok(spent)
}
