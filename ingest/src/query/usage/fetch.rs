//! Running a usage [`Plan`]: the extent probe when the plan asks for it, the statement (again with exact
//! sums when a bigint sum overflows, see [`crate::query::sums`]), and the rows decoded and sorted.

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use sqlx::postgres::PgRow;
use sqlx::{Column, Row};

use super::plan::{self, Filter, Plan};
use super::{Dim, UsageQuery, Within};
use crate::error::ApiError;
use crate::query::sums::{self, ExactSum, ToolTotals};
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

/// The columns of a usage statement ([`plan`]'s fixed shape): `b`, one per dimension of [`Dim::ALL`],
/// then the sums ([`sums::names`]). Rows are read by position, the statement's columns checked against
/// these names once (by name, every row looked each of its 24 to 66 columns up in a hash map: a third
/// of the server's time for a large answer).
fn check_columns(row: &PgRow, tools: bool) -> Result<(), sqlx::Error> {
    let want = std::iter::once("b")
        .chain(Dim::ALL.iter().map(|d| d.field()))
        .chain(sums::names(tools).iter().map(String::as_str));
    let got = row.columns().iter().map(|c| c.name());
    if !want.clone().eq(got.clone()) {
        return Err(sqlx::Error::Decode(
            format!(
                "a usage statement's columns are {:?}, not {:?}",
                got.collect::<Vec<_>>(),
                want.collect::<Vec<_>>()
            )
            .into(),
        ));
    }
    // The sums' types once too, so that each row's are read unchecked (`ExactSum` decodes a bigint or
    // the text of an exact sum, and refuses anything else).
    for c in &row.columns()[1 + Dim::ALL.len()..] {
        if !<ExactSum as sqlx::Type<sqlx::Postgres>>::compatible(c.type_info()) {
            return Err(sqlx::Error::Decode(
                format!(
                    "a usage statement's sum {} is a {}",
                    c.name(),
                    c.type_info()
                )
                .into(),
            ));
        }
    }
    Ok(())
}

/// One row of the statement as an answer row (see [`check_columns`] for its columns); None when its
/// sums are all zero — no usage: active time added and later taken away, or a group busy only on the
/// short side of a moved unit (`split::Moved`), which nets to nothing in the unit's bucket.
fn decode(plan: &Plan, row: &PgRow) -> Result<Option<UsageRow>, sqlx::Error> {
    let first_sum = 1 + Dim::ALL.len();
    let (usage, tool) = if plan.tools {
        let t = sums::tool_totals_at(row, first_sum)?;
        if t.is_zero() {
            return Ok(None);
        }
        (t.usage(), Some(t))
    } else {
        let u = sums::usage_at(row, first_sum)?;
        if u.is_zero() {
            return Ok(None);
        }
        (u, None)
    };
    let keys = plan
        .group_by
        .iter()
        .map(|d| {
            let at = 1 + Dim::ALL.iter().position(|x| x == d).expect("in Dim::ALL");
            Ok(row.try_get::<Option<String>, _>(at)?.unwrap_or_default())
        })
        .collect::<Result<_, sqlx::Error>>()?;
    Ok(Some(UsageRow {
        bucket: plan.label(row.try_get::<i32, _>(0)?),
        keys,
        usage,
        tool,
    }))
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
    let Some(mut out) = fetch(db, &plan, limit).await? else {
        return Ok(None);
    };
    out.sort_unstable_by(|a, b| (a.bucket, &a.keys).cmp(&(b.bucket, &b.keys)));
    Ok(Some(out))
}

/// The plan's rows but the all-zero ones, with `apiary_sum`, or with exact sums when one leaves the
/// bigint range; None when the statement answered `limit` rows (more than the bound).
async fn fetch(
    db: &ReadDb,
    plan: &Plan,
    limit: Option<usize>,
) -> Result<Option<Vec<UsageRow>>, ApiError> {
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

/// [`Plan::query`] in a transaction of its own with [`SETTINGS`], its rows decoded as they arrive.
async fn fetch_with(
    db: &ReadDb,
    plan: &Plan,
    wide: bool,
    limit: Option<usize>,
) -> Result<Option<Vec<UsageRow>>, sqlx::Error> {
    let mut tx = db.pool.begin().await?;
    sqlx::query(SETTINGS).execute(&mut *tx).await?;
    let mut statement = plan.query(wide);
    if let Some(n) = limit {
        // The statement ends with its GROUP BY: the bound applies to the grouped rows.
        statement
            .push(" LIMIT ")
            .push_bind(i64::try_from(n).unwrap_or(i64::MAX));
    }
    let mut out = vec![];
    let mut answered = 0usize;
    {
        let mut rows = statement.build().fetch(&mut *tx);
        while let Some(row) = rows.try_next().await? {
            if answered == 0 {
                check_columns(&row, plan.tools)?;
            }
            answered += 1;
            out.extend(decode(plan, &row)?);
        }
    }
    tx.commit().await?;
    if limit.is_some_and(|l| answered >= l) {
        return Ok(None);
    }
    Ok(Some(out))
}
