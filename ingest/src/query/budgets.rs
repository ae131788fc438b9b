//! Budgets' spend: the usage rollups of their tenant in each budget's `[start, end)`, narrowed by its
//! scope, summed in its unit — the same rows and sums `/v1/usage` answers for that range (`cost_nanos`,
//! or input + output tokens), so the two agree exactly.
//!
//! The budgets of a tenant are evaluated together ([`spent_all`]): budgets with the same period bounds
//! (the same period and zone) share one statement that sums both units per user and model (and colony
//! key, for colony-scoped budgets), and each budget's spend is then the sum of the groups its scope
//! matches. A tenant's hundred budgets cost a few statements, not a hundred scans of their periods.
//!
//! Each statement reads the whole UTC hours inside the range from an hourly rollup — the narrow one (per
//! user, model and runtime), or the wide one when colony keys are wanted — and the quarter hours a zone
//! with a half- or quarter-hour offset cuts at either end from the 15-minute rollup; all hold the same
//! sums (written together).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt, TryStreamExt};
use sqlx::{Postgres, QueryBuilder};

use super::usage::split::Split;
use super::usage::{push_colony_key_joins, COLONY_KEY_OF_ROW};
use super::ReadDb;
use crate::access::TenantRead;
use crate::budgets::{Budget, Unit};
use crate::error::ApiError;

/// Most of one evaluation's statements running at once.
const STATEMENTS_AT_ONCE: usize = 4;

/// `[start, end)` of bucket starts.
type Range = (DateTime<Utc>, DateTime<Utc>);

/// One group of a range's sums.
#[derive(Debug, sqlx::FromRow)]
struct Group {
    user_id: String,
    model: String,
    colony_key: Option<String>,
    cost_nanos: i64,
    tokens: i64,
}

/// The statement summing `[start, end)` of `read`'s tenant (and user, for a user-bound read) per user
/// and model, and per colony key too when `colonies` is given (only rows of those colonies, then).
fn grouped(
    read: &TenantRead,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    colonies: Option<&[String]>,
) -> QueryBuilder<'static, Postgres> {
    let key = match colonies {
        Some(_) => COLONY_KEY_OF_ROW,
        None => "NULL::text",
    };
    let mut q = QueryBuilder::new(
        "SELECT user_id, model, colony_key, COALESCE(sum(cost_nanos), 0)::bigint AS cost_nanos, \
         COALESCE(sum(tokens), 0)::bigint AS tokens FROM (",
    );
    // The tables read, each with the ranges of buckets it serves.
    let mut parts: Vec<(&str, Vec<Range>)> = Vec::new();
    // Whole UTC months, days and hours inside the range from their rollups (no bucket boundary cuts
    // them: a budget is one bucket), the edges from the 15-minute rows. Rows of colonies need the wide
    // hourly rollup (the narrow ones have no colony), and nothing coarser.
    match Split::of(start, end, &[], colonies.is_none()) {
        Some(split) => {
            for level in split.levels {
                // No bucket boundary inside the range: nothing is moved.
                debug_assert!(level.moved.is_empty());
                parts.push((level.grain.table(colonies.is_none()), level.ranges));
            }
        }
        None => parts.push(("usage_rollups", vec![(start, end)])),
    }
    for (i, (table, ranges)) in parts.into_iter().enumerate() {
        if i > 0 {
            q.push(" UNION ALL ");
        }
        q.push(format!(
            "SELECT r.user_id, r.model, {key} AS colony_key, r.cost_nanos, \
             r.input_tokens + r.output_tokens AS tokens FROM {table} r"
        ));
        if colonies.is_some() {
            push_colony_key_joins(&mut q, Some(read.tenant_id()));
        }
        q.push(" WHERE r.tenant_id = ").push_bind(read.tenant_id());
        q.push(" AND (");
        for (j, (a, b)) in ranges.into_iter().enumerate() {
            if j > 0 {
                q.push(" OR ");
            }
            q.push("(r.bucket >= ")
                .push_bind(a)
                .push(" AND r.bucket < ")
                .push_bind(b)
                .push(")");
        }
        q.push(")");
        if let Some(user) = read.user() {
            q.push(" AND r.user_id = ").push_bind(user.to_string());
        }
        if let Some(keys) = colonies {
            q.push(format!(" AND {COLONY_KEY_OF_ROW} = ANY("))
                .push_bind(keys.to_vec())
                .push(")");
        }
    }
    q.push(") x GROUP BY user_id, model, colony_key");
    q
}

/// Whether `budget`'s scope counts the group.
fn matches(budget: &Budget, g: &Group) -> bool {
    let s = &budget.scope;
    s.user.as_ref().is_none_or(|u| *u == g.user_id)
        && s.model.as_ref().is_none_or(|m| *m == g.model)
        && s.colony
            .as_ref()
            .is_none_or(|c| Some(c) == g.colony_key.as_ref())
}

/// The spend of each budget, in its unit (nano-USD or tokens), over its `[start, end)`, in the order
/// given; all budgets are `read`'s tenant's. A sum past the bigint range is an error.
pub async fn spent_all(
    db: &ReadDb,
    read: &TenantRead,
    budgets: &[(&Budget, DateTime<Utc>, DateTime<Utc>)],
) -> Result<Vec<i64>, ApiError> {
    let mut out = vec![0i64; budgets.len()];
    // Budgets by their bounds, then split by whether they want colony keys: one statement each.
    let mut ranges: HashMap<(DateTime<Utc>, DateTime<Utc>), Vec<usize>> = HashMap::new();
    for (i, (_, start, end)) in budgets.iter().enumerate() {
        ranges.entry((*start, *end)).or_default().push(i);
    }
    let mut work = Vec::new();
    for ((start, end), members) in ranges {
        let (by_colony, plain): (Vec<usize>, Vec<usize>) = members
            .into_iter()
            .partition(|i| budgets[*i].0.scope.colony.is_some());
        let mut keys: Vec<String> = by_colony
            .iter()
            .filter_map(|i| budgets[*i].0.scope.colony.clone())
            .collect();
        keys.sort();
        keys.dedup();
        for (members, keys) in [(plain, None), (by_colony, Some(keys))] {
            if !members.is_empty() {
                work.push((start, end, members, keys));
            }
        }
    }
    // The statements run side by side (each a scan of its own range), a few at a time: a tenant whose
    // budgets use many zones does not take every connection of the pool.
    let statements: Vec<_> = work
        .iter()
        .map(|(start, end, _, keys)| {
            // Boxed, owning its statement and pool: a future of the stream's closure that borrows is not
            // `Send` for every lifetime the server's handlers ask of it.
            let mut q = grouped(read, *start, *end, keys.as_deref());
            let pool = db.pool.clone();
            async move { q.build_query_as::<Group>().fetch_all(&pool).await }.boxed()
        })
        .collect();
    let answers: Vec<Vec<Group>> = futures::stream::iter(statements)
        .buffered(STATEMENTS_AT_ONCE)
        .try_collect()
        .await?;
    for ((_, _, members, _), groups) in work.into_iter().zip(answers) {
        for i in members {
            let budget = budgets[i].0;
            let mut sum = 0i64;
            for g in groups.iter().filter(|g| matches(budget, g)) {
                let v = match budget.unit {
                    Unit::Usd => g.cost_nanos,
                    Unit::Tokens => g.tokens,
                };
                sum = sum.checked_add(v).ok_or_else(|| {
                    ApiError::Internal(anyhow::anyhow!(
                        "the spend of budget {} is past the bigint range",
                        budget.budget_id
                    ))
                })?;
            }
            out[i] = sum;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 28, h, m, 0).unwrap()
    }

    #[test]
    fn a_cut_range_reads_its_edges_from_quarter_rows_and_the_rest_from_hourly_rows() {
        let r = TenantRead::tenant_wide(uuid::Uuid::nil());
        let sql = grouped(&r, at(0, 30), at(23, 30), None).into_sql();
        assert!(sql.contains("FROM usage_rollups_narrow r"), "{sql}");
        assert!(sql.contains("UNION ALL SELECT"), "{sql}");
        assert!(sql.contains("FROM usage_rollups r"), "{sql}");
        assert!(!sql.contains("colony_runs"), "{sql}");
        let sql = grouped(&r, at(0, 0), at(23, 0), Some(&["ck_x".into()])).into_sql();
        assert!(sql.contains("FROM usage_rollups_hourly r"), "{sql}");
        assert!(!sql.contains("UNION ALL"), "{sql}");
        assert!(sql.contains("colony_runs"), "{sql}");
        // A month in New York: its whole UTC days from the daily rows, the hours at both ends from the
        // narrow ones; a UTC month from its monthly row alone.
        let ny = |d: u32, m: u32| Utc.with_ymd_and_hms(2026, m, d, 5, 0, 0).unwrap();
        let sql = grouped(&r, ny(1, 11), ny(1, 12), None).into_sql();
        assert!(sql.contains("FROM usage_rollups_daily r"), "{sql}");
        assert!(sql.contains("FROM usage_rollups_narrow r"), "{sql}");
        assert!(!sql.contains("FROM usage_rollups r"), "{sql}");
        let utc = |m: u32| Utc.with_ymd_and_hms(2026, m, 1, 0, 0, 0).unwrap();
        let sql = grouped(&r, utc(11), utc(12), None).into_sql();
        assert!(sql.contains("FROM usage_rollups_monthly r"), "{sql}");
        assert!(!sql.contains("UNION ALL"), "{sql}");
    }
}
