//! Budgets (`budgets`) and their crossings (`budget_crossings`); see [`crate::budgets`].

use apiary_schema::quota::BudgetScope;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use sqlx::PgPool;
use uuid::Uuid;

use crate::budgets::{Budget, Period, Unit, MAX_BUDGETS};

type Row = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    String,
    String,
    i64,
    Vec<i32>,
    DateTime<Utc>,
    DateTime<Utc>,
);

const COLUMNS: &str = "budget_id, name, scope_user, scope_model, scope_colony, period, tz, unit, \
    limit_amount, thresholds, created_at, updated_at";

fn budget(r: Row) -> Option<Budget> {
    let (
        budget_id,
        name,
        user,
        model,
        colony,
        period,
        tz,
        unit,
        limit,
        thresholds,
        created,
        updated,
    ) = r;
    let parsed = (|| {
        Some(Budget {
            scope: BudgetScope {
                user,
                model,
                colony,
            },
            period: Period::parse(&period)?,
            tz: tz.parse::<Tz>().ok()?,
            unit: Unit::parse(&unit)?,
            limit,
            thresholds: thresholds
                .iter()
                .map(|t| u32::try_from(*t).ok())
                .collect::<Option<_>>()?,
            budget_id: budget_id.clone(),
            name,
            created_at: created,
            updated_at: updated,
        })
    })();
    if parsed.is_none() {
        tracing::warn!(%budget_id, "stored budget no longer parses; skipped");
    }
    parsed
}

/// The tenant's budgets, by id.
pub async fn list(pool: &PgPool, tenant_id: Uuid) -> Result<Vec<Budget>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM budgets WHERE tenant_id = $1 ORDER BY budget_id"
    ))
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().filter_map(budget).collect())
}

/// One budget of the tenant.
pub async fn get(
    pool: &PgPool,
    tenant_id: Uuid,
    budget_id: &str,
) -> Result<Option<Budget>, sqlx::Error> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM budgets WHERE tenant_id = $1 AND budget_id = $2"
    ))
    .bind(tenant_id)
    .bind(budget_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(budget))
}

/// Stores a new budget; false (nothing stored) when the tenant already has [`MAX_BUDGETS`].
pub async fn insert(pool: &PgPool, tenant_id: Uuid, b: &Budget) -> Result<bool, sqlx::Error> {
    let done = bind_definition(
        sqlx::query(
            "INSERT INTO budgets (tenant_id, budget_id, name, scope_user, scope_model, scope_colony, period,
                                  tz, unit, limit_amount, thresholds)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11
             WHERE (SELECT count(*) FROM budgets WHERE tenant_id = $1) < $12",
        ),
        tenant_id,
        b,
    )
    .bind(MAX_BUDGETS)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Binds `$1`..`$11`: the tenant, then the budget's definition in the column order of `budgets`.
fn bind_definition<'q>(
    q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    tenant_id: Uuid,
    b: &'q Budget,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    q.bind(tenant_id)
        .bind(&b.budget_id)
        .bind(&b.name)
        .bind(&b.scope.user)
        .bind(&b.scope.model)
        .bind(&b.scope.colony)
        .bind(b.period.as_str())
        .bind(b.tz.name())
        .bind(b.unit.as_str())
        .bind(b.limit)
        .bind(b.thresholds.iter().map(|t| *t as i32).collect::<Vec<i32>>())
}

/// Replaces a budget's definition; false when the tenant has no such budget. Crossings already recorded
/// stay (a threshold crossed in this period is not announced again). Done as a conditional replace of
/// the definition just read, again if another change came in between, so that `updated_at` moves
/// forward from the value it replaces (see [`update_if_unchanged`]).
pub async fn update(pool: &PgPool, tenant_id: Uuid, b: &Budget) -> Result<bool, sqlx::Error> {
    loop {
        let read_at: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT updated_at FROM budgets WHERE tenant_id = $1 AND budget_id = $2",
        )
        .bind(tenant_id)
        .bind(&b.budget_id)
        .fetch_optional(pool)
        .await?;
        let Some(read_at) = read_at else {
            return Ok(false);
        };
        if update_if_unchanged(pool, tenant_id, b, read_at).await? {
            return Ok(true);
        }
    }
}

/// Replaces a budget's definition only if it was not changed since it was read (its `updated_at` is
/// still `read_at`); false otherwise, or when the tenant has no such budget. Each change moves
/// `updated_at` forward, even within one clock tick or when the clock stepped back (to the later of
/// now and a microsecond past `read_at`), so a stale read never matches. The new value is computed here,
/// not by the database: Citus refuses `clock_timestamp()`, and `now()` next to a column, in an update
/// of a distributed table.
pub async fn update_if_unchanged(
    pool: &PgPool,
    tenant_id: Uuid,
    b: &Budget,
    read_at: DateTime<Utc>,
) -> Result<bool, sqlx::Error> {
    let micro = chrono::TimeDelta::microseconds(1);
    let now = chrono::DurationRound::duration_trunc(Utc::now(), micro).unwrap_or(read_at);
    let done = bind_definition(
        sqlx::query(
            "UPDATE budgets SET name = $3, scope_user = $4, scope_model = $5, scope_colony = $6, period = $7,
                    tz = $8, unit = $9, limit_amount = $10, thresholds = $11, updated_at = $13
             WHERE tenant_id = $1 AND budget_id = $2 AND updated_at = $12",
        ),
        tenant_id,
        b,
    )
    .bind(read_at)
    .bind(now.max(read_at + micro))
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Deletes a budget and its crossings; false when the tenant has no such budget.
pub async fn delete(pool: &PgPool, tenant_id: Uuid, budget_id: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("DELETE FROM budgets WHERE tenant_id = $1 AND budget_id = $2")
        .bind(tenant_id)
        .bind(budget_id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Records that `budget`'s spend reached each of `reached` in the period starting `start`; answers
/// those not recorded before (by anyone: the primary key makes each crossing happen once).
pub async fn record_crossings(
    pool: &PgPool,
    tenant_id: Uuid,
    budget: &Budget,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    spent: i64,
    reached: &[u32],
) -> Result<Vec<u32>, sqlx::Error> {
    let reached: Vec<i32> = reached.iter().map(|t| *t as i32).collect();
    let new: Vec<(i32,)> = sqlx::query_as(
        "INSERT INTO budget_crossings (tenant_id, budget_id, period_start, threshold_percent, period_end,
                                       spent, limit_amount)
         SELECT $1, $2, $3, t, $4, $5, $6 FROM unnest($7::integer[]) AS t
         WHERE EXISTS (SELECT 1 FROM budgets WHERE tenant_id = $1 AND budget_id = $2)
         ON CONFLICT DO NOTHING
         RETURNING threshold_percent",
    )
    .bind(tenant_id)
    .bind(&budget.budget_id)
    .bind(start)
    .bind(end)
    .bind(spent)
    .bind(budget.limit)
    .bind(&reached)
    .fetch_all(pool)
    .await?;
    let mut new: Vec<u32> = new.into_iter().map(|(t,)| t as u32).collect();
    new.sort_unstable();
    Ok(new)
}

/// The thresholds crossed in the period starting `start`, with when, ascending.
pub async fn crossings(
    pool: &PgPool,
    tenant_id: Uuid,
    budget_id: &str,
    start: DateTime<Utc>,
) -> Result<Vec<(u32, DateTime<Utc>)>, sqlx::Error> {
    let rows: Vec<(i32, DateTime<Utc>)> = sqlx::query_as(
        "SELECT threshold_percent, crossed_at FROM budget_crossings
         WHERE tenant_id = $1 AND budget_id = $2 AND period_start = $3
         ORDER BY threshold_percent",
    )
    .bind(tenant_id)
    .bind(budget_id)
    .bind(start)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(t, at)| (t as u32, at)).collect())
}

/// Every tenant that has a budget.
pub async fn tenants_with_budgets(pool: &PgPool) -> Result<Vec<Uuid>, sqlx::Error> {
    let rows: Vec<(Uuid,)> = sqlx::query_as("SELECT DISTINCT tenant_id FROM budgets")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|(t,)| t).collect())
}
