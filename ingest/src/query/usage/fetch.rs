//! Running a usage [`Plan`]: the extent probe when the plan asks for it, the statement (again with exact
//! sums when a bigint sum overflows, see [`crate::query::sums`]), and the rows decoded and sorted.

use chrono::{DateTime, Utc};

use super::plan::{self, Filter, Plan};
use super::{Dim, UsageQuery, Within};
use crate::error::ApiError;
use crate::query::sums::{self, SumColumns, ToolTotals};
use crate::query::ReadDb;
use crate::rollups::Usage;

/// One answer row: the bucket start, the group keys, and the sums.
#[derive(Debug, Clone)]
pub struct UsageRow {
    /// None for totals.
    pub bucket: Option<DateTime<Utc>>,
    /// The key of each dimension of the query's `group_by`, in that order (empty for "none").
    pub keys: Vec<String>,
    /// The usage sums (grouped by tool: its calls, errors and summed durations, the rest zero).
    pub usage: Usage,
    /// Grouped by tool: the group's tool sums and merged duration histogram.
    pub tool: Option<ToolTotals>,
}

/// The bucket and group keys of a row as the statement answers it (see [`plan`] for its fixed shape).
#[derive(Debug, sqlx::FromRow)]
struct Keys {
    b: i32,
    tenant_id: Option<String>,
    user_id: Option<String>,
    model: Option<String>,
    colony_id: Option<String>,
    session_id: Option<String>,
    device_id: Option<String>,
    runtime: Option<String>,
    tool_name: Option<String>,
}

/// A usage row.
#[derive(Debug, sqlx::FromRow)]
struct Raw {
    #[sqlx(flatten)]
    keys: Keys,
    #[sqlx(flatten)]
    sums: SumColumns,
}

/// A row grouped by tool.
#[derive(Debug, sqlx::FromRow)]
struct RawTool {
    #[sqlx(flatten)]
    keys: Keys,
    #[sqlx(flatten)]
    sums: ToolTotals,
}

impl Keys {
    fn key(&self, d: Dim) -> String {
        let k = match d {
            Dim::Tenant => &self.tenant_id,
            Dim::User => &self.user_id,
            Dim::Model => &self.model,
            Dim::Colony => &self.colony_id,
            Dim::Session => &self.session_id,
            Dim::Device => &self.device_id,
            Dim::Runtime => &self.runtime,
            Dim::Tool => &self.tool_name,
        };
        k.clone().unwrap_or_default()
    }
}

impl ToolTotals {
    /// The usage sums a tool group has.
    fn usage(&self) -> Usage {
        Usage {
            tool_calls: self.calls,
            tool_errors: self.errors,
            tool_duration_ms: self.duration_ms,
            ..Usage::default()
        }
    }
}

/// Runs the query over the usage `within` allows (see [`Within`]).
pub async fn run(
    db: &ReadDb,
    within: Within<'_>,
    q: &UsageQuery,
) -> Result<Vec<UsageRow>, ApiError> {
    Ok(run_at_most(db, within, q, None)
        .await?
        .expect("no bound, no overflow"))
}

/// The range `q` asks for, clamped to the rows' extent when the range is long (see
/// [`plan::needs_extent`]); None when there are no rows.
pub async fn range(
    db: &ReadDb,
    filter: &Filter,
    q: &UsageQuery,
) -> Result<Option<(DateTime<Utc>, DateTime<Utc>)>, ApiError> {
    if !plan::needs_extent(q) {
        return Ok(Some((q.from, q.to)));
    }
    let extent = filter
        .extent_query(q.from, q.to, q.group_by.contains(&Dim::Tool))
        .build_query_as::<(Option<DateTime<Utc>>, Option<DateTime<Utc>>)>()
        .fetch_one(&db.pool)
        .await?;
    Ok(plan::clamp(q, extent))
}

/// [`run`], reading at most `max + 1` grouped rows from the database: None when there are more than
/// `max` (so an answer past the bound is refused without being held in memory).
pub async fn run_at_most(
    db: &ReadDb,
    within: Within<'_>,
    q: &UsageQuery,
    max: Option<usize>,
) -> Result<Option<Vec<UsageRow>>, ApiError> {
    let filter = Filter::of(within, &q.group_by)?;
    let Some((from, to)) = range(db, &filter, q).await? else {
        return Ok(Some(vec![]));
    };
    let plan = Plan::new(filter, q, from, to);
    let limit = max.map(|m| m.saturating_add(1));
    let row = |k: &Keys, usage: Usage, tool: Option<ToolTotals>| UsageRow {
        bucket: plan.label(k.b),
        keys: plan.group_by.iter().map(|d| k.key(*d)).collect(),
        usage,
        tool,
    };
    // A row whose sums are all zero is no usage: active time added and later taken away, or a group busy
    // only on the short side of a moved unit (`split::Moved`), which nets to nothing in the unit's bucket.
    let mut out: Vec<UsageRow> = if plan.tools {
        let raw = fetch::<RawTool>(db, &plan, limit).await?;
        if limit.is_some_and(|l| raw.len() >= l) {
            return Ok(None);
        }
        raw.into_iter()
            .filter(|r| !r.sums.is_zero())
            .map(|r| row(&r.keys, r.sums.usage(), Some(r.sums)))
            .collect()
    } else {
        let raw = fetch::<Raw>(db, &plan, limit).await?;
        if limit.is_some_and(|l| raw.len() >= l) {
            return Ok(None);
        }
        raw.into_iter()
            .map(|r| row(&r.keys, r.sums.usage(), None))
            .filter(|r| !r.usage.is_zero())
            .collect()
    };
    out.sort_unstable_by(|a, b| (a.bucket, &a.keys).cmp(&(b.bucket, &b.keys)));
    Ok(Some(out))
}

/// The plan's rows (at most `limit`), with `apiary_sum`, or with exact sums when one leaves the bigint
/// range.
async fn fetch<R>(db: &ReadDb, plan: &Plan, limit: Option<usize>) -> Result<Vec<R>, ApiError>
where
    R: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    match fetch_with(db, plan, false, limit).await {
        Err(e) if sums::is_out_of_range(&e) => Ok(fetch_with(db, plan, true, limit).await?),
        r => Ok(r?),
    }
}

/// The settings a usage statement runs with, for its transaction only.
///
/// Work memory 16 MB: the planner estimates its groups from the rollup's columns (each hour or day × the
/// keys), not from the buckets they fall in, so it overstates them by the units a bucket holds; under
/// Postgres' default 4 MB it then sorts the rows to group them instead of hashing the few groups there
/// are (a month by day and model from the narrow hourly rows, 50,000 rows into 648 groups: 65 ms
/// sorted, 33 ms hashed).
///
/// No JIT compilation: a year's statement is estimated past `jit_above_cost` and spent 74 ms compiling
/// (first run 896 ms against 529 without; warm, within 3% either way): these statements are short and
/// run once, so compiling them does not pay.
const SETTINGS: &str =
    "SELECT set_config('work_mem', '16MB', true), set_config('jit', 'off', true)";

/// [`Plan::query`] in a transaction of its own with [`SETTINGS`].
async fn fetch_with<R>(
    db: &ReadDb,
    plan: &Plan,
    wide: bool,
    limit: Option<usize>,
) -> Result<Vec<R>, sqlx::Error>
where
    R: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let mut tx = db.pool.begin().await?;
    sqlx::query(SETTINGS).execute(&mut *tx).await?;
    let mut statement = plan.query(wide);
    if let Some(n) = limit {
        // The statement ends with its GROUP BY: the bound applies to the grouped rows.
        statement
            .push(" LIMIT ")
            .push_bind(i64::try_from(n).unwrap_or(i64::MAX));
    }
    let rows = statement.build_query_as().fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}
