//! Running a usage [`Plan`]: the extent probe when the plan asks for it, the statement (again with exact
//! sums when a bigint sum overflows, see [`crate::query::sums`]), and the rows decoded and sorted.

use chrono::{DateTime, Utc};

use super::plan::{self, Filter, Plan};
use super::{Dim, UsageQuery, Within};
use crate::error::ApiError;
use crate::query::sums::{self, SumColumns};
use crate::query::ReadDb;
use crate::rollups::Usage;

/// One answer row: the bucket start, the group keys, and the sums.
#[derive(Debug, Clone)]
pub struct UsageRow {
    /// None for totals.
    pub bucket: Option<DateTime<Utc>>,
    /// The key of each dimension of the query's `group_by`, in that order (empty for "none").
    pub keys: Vec<String>,
    pub usage: Usage,
}

/// A row as the statement answers it (see [`plan`] for its fixed shape).
#[derive(Debug, sqlx::FromRow)]
struct Raw {
    b: i32,
    tenant_id: Option<String>,
    user_id: Option<String>,
    model: Option<String>,
    colony_id: Option<String>,
    session_id: Option<String>,
    device_id: Option<String>,
    runtime: Option<String>,
    #[sqlx(flatten)]
    sums: SumColumns,
}

impl Raw {
    fn key(&self, d: Dim) -> String {
        let k = match d {
            Dim::Tenant => &self.tenant_id,
            Dim::User => &self.user_id,
            Dim::Model => &self.model,
            Dim::Colony => &self.colony_id,
            Dim::Session => &self.session_id,
            Dim::Device => &self.device_id,
            Dim::Runtime => &self.runtime,
        };
        k.clone().unwrap_or_default()
    }
}

/// Runs the query over the usage `within` allows (see [`Within`]).
pub async fn run(
    db: &ReadDb,
    within: Within<'_>,
    q: &UsageQuery,
) -> Result<Vec<UsageRow>, ApiError> {
    let filter = Filter::of(within, &q.group_by)?;
    let (from, to) = if plan::needs_extent(q) {
        let extent = filter
            .extent_query(q.from, q.to)
            .build_query_as::<(Option<DateTime<Utc>>, Option<DateTime<Utc>>)>()
            .fetch_one(&db.pool)
            .await?;
        match plan::clamp(q, extent) {
            Some(range) => range,
            None => return Ok(vec![]),
        }
    } else {
        (q.from, q.to)
    };
    let plan = Plan::new(filter, q, from, to);
    let rows = fetch(db, &plan).await?;
    let mut out: Vec<UsageRow> = rows
        .into_iter()
        .map(|r| UsageRow {
            bucket: plan.label(r.b),
            keys: plan.group_by.iter().map(|d| r.key(*d)).collect(),
            usage: r.sums.usage(),
        })
        .collect();
    out.sort_unstable_by(|a, b| (a.bucket, &a.keys).cmp(&(b.bucket, &b.keys)));
    Ok(out)
}

/// The plan's rows, with `apiary_sum`, or with exact sums when one leaves the bigint range.
async fn fetch(db: &ReadDb, plan: &Plan) -> Result<Vec<Raw>, ApiError> {
    match plan.query(false).build_query_as().fetch_all(&db.pool).await {
        Err(e) if sums::is_out_of_range(&e) => Ok(plan
            .query(true)
            .build_query_as()
            .fetch_all(&db.pool)
            .await?),
        r => Ok(r?),
    }
}
