//! The usage planner: pure (no database), unit-tested. From a checked [`UsageQuery`] and whose usage it
//! may read ([`Within`]) it decides the rows' filter ([`Filter`]), whether the range is first clamped
//! to the data's extent, the buckets ([`super::super::buckets`]), which rollup answers which part of the
//! range ([`Split`]), and builds the statements with `sqlx::QueryBuilder` (every value a bind).
//!
//! The statement's shape is fixed whatever the grouping: `b` (the bucket's index), one text column per
//! dimension of [`Dim::ALL`] (`NULL` when not grouped by it), and the sums — the usage sums, or with
//! `group_by=tool` the tool sums and histogram slots of `tool_rollups` — so every statement's rows are
//! read by position, their columns' names checked once per statement ([`super::fetch`]).

use chrono::{DateTime, TimeDelta, Utc};
use sqlx::{Postgres, QueryBuilder};
use uuid::Uuid;

use super::split::{Grain, Level, Split};
use super::{push_colony_key_joins, Dim, Granularity, Part, UsageQuery, Within, OPERATOR_DIMS};
use crate::error::ApiError;
use crate::query::buckets::{self, Buckets, Unit};
use crate::query::sums;
use crate::rollups::SUM_COLUMNS;

/// Longest range whose buckets are computed without first asking for the data's extent.
pub const MAX_UNCLAMPED: TimeDelta = TimeDelta::days(62);

/// The rollup columns a usage query reads.
const COLUMNS: &str = "bucket, tenant_id, user_id, device_id, colony_id, session_id, model, runtime, input_tokens, \
    output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, \
    tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns";
/// The dimensions `usage_rollups_narrow` (and the daily and monthly rollups) keep: a split query
/// grouped by these alone reads its whole hours, days and months there.
const NARROW_DIMS: [Dim; 5] = [
    Dim::Tenant,
    Dim::User,
    Dim::Device,
    Dim::Model,
    Dim::Runtime,
];
/// The dimensions the colony rollups keep (daily and monthly; the colony as its id and forked session,
/// whose key is resolved at read time; no user): a split query of a whole tenant's usage grouped by
/// colony and these reads its whole days and months there, its whole hours from the wide hourly rollup.
const COLONY_DIMS: [Dim; 4] = [Dim::Tenant, Dim::Model, Dim::Runtime, Dim::Colony];
/// The dimensions of a whole tenant's usage (no user) the colony rollups also answer, summed over their
/// colonies: a split query grouped by these alone reads its whole days and months there (a row per
/// colony, model and runtime a day, against a row per user, model and runtime in the daily rollup) and
/// its whole hours from `usage_rollups_narrow`.
const TENANT_DIMS: [Dim; 3] = [Dim::Tenant, Dim::Model, Dim::Runtime];
/// The `tool_rollups` columns a query grouped by tool reads.
const TOOL_COLUMNS: &str =
    "bucket, tenant_id, user_id, device_id, colony_id, session_id, runtime, tool_name, \
    calls, errors, timed_calls, duration_ms, duration_hist";
/// The dimensions the narrow tool rollups keep (hourly, daily, monthly): a query grouped by tool and
/// these reads its whole units there.
const NARROW_TOOL_DIMS: [Dim; 4] = [Dim::Tenant, Dim::User, Dim::Runtime, Dim::Tool];
/// The dimensions the tenant's tool rollups keep: a query grouped by tool and these, of a whole tenant
/// (not one user's usage), reads its whole units there.
const TENANT_TOOL_DIMS: [Dim; 3] = [Dim::Tenant, Dim::Runtime, Dim::Tool];

/// Which key the table a source reads has: the wide key, the narrow one (colony and session empty, as
/// that key has them), the narrow tool rollups' (the device empty too), the tenant's (the user empty
/// too) or the colony rollups' (no user or device; the session only where it is a forked colony run,
/// which is all the colony key reads of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    Wide,
    Narrow,
    User,
    Tenant,
    Colony,
}

impl Keys {
    /// The key columns after `tenant_id`, each read or empty.
    fn select(self) -> &'static str {
        match self {
            Keys::Wide => "user_id, device_id, colony_id, session_id",
            Keys::Narrow => "user_id, device_id, ''::text AS colony_id, ''::text AS session_id",
            Keys::User => {
                "user_id, ''::text AS device_id, ''::text AS colony_id, ''::text AS session_id"
            }
            Keys::Tenant => {
                "''::text AS user_id, ''::text AS device_id, ''::text AS colony_id, \
                 ''::text AS session_id"
            }
            Keys::Colony => {
                "''::text AS user_id, ''::text AS device_id, colony_id, fork_session_id AS session_id"
            }
        }
    }
}

/// The columns a source of the usage (or, `tools`, the tool) rollups gives from a table with `keys`.
fn columns(tools: bool, keys: Keys) -> String {
    let all = if tools { TOOL_COLUMNS } else { COLUMNS };
    all.replacen(
        "user_id, device_id, colony_id, session_id",
        keys.select(),
        1,
    )
}

/// The rollup a plan reads.
fn table(tools: bool) -> &'static str {
    if tools {
        "tool_rollups"
    } else {
        "usage_rollups"
    }
}

/// Which rollup rows a query may sum: the tenant (none for the operator), the user, the part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    tenant: Option<Uuid>,
    user: Option<String>,
    part: Part,
}

impl Filter {
    /// The filter `within` allows; 400 when an operator groups by anything but tenant (and model).
    pub fn of(within: Within<'_>, group_by: &[Dim]) -> Result<Filter, ApiError> {
        Ok(match within {
            Within::Tenant(r, part) => Filter {
                tenant: Some(r.tenant_id()),
                user: r.user().map(str::to_string),
                part: part.clone(),
            },
            Within::AllTenants(_) => {
                if !group_by.contains(&Dim::Tenant)
                    || group_by.iter().any(|d| !OPERATOR_DIMS.contains(d))
                {
                    return Err(ApiError::bad_param(
                        "group_by",
                        "an operator token reads usage per tenant: group by tenant, optionally with model",
                    ));
                }
                Filter {
                    tenant: None,
                    user: None,
                    part: Part::Whole,
                }
            }
        })
    }

    /// Appends ` WHERE ...` (tenant, part, user; never the time range).
    fn push_where(&self, q: &mut QueryBuilder<'static, Postgres>) {
        q.push(" WHERE TRUE");
        if let Some(t) = self.tenant {
            q.push(" AND tenant_id = ").push_bind(t);
        }
        match &self.part {
            Part::Whole => {}
            Part::Sessions(ids) => {
                q.push(" AND session_id = ANY(")
                    .push_bind(ids.clone())
                    .push(")");
            }
            Part::Colony(c) => {
                q.push(" AND colony_id = ").push_bind(c.clone());
            }
            Part::ColonyKey(k) => {
                // The rows the colony dimension gives this key (`COLONY_KEY_OF_ROW`).
                let t = self.tenant.unwrap_or_default();
                q.push(" AND (colony_id IN (SELECT session_id FROM colony_runs WHERE tenant_id = ")
                    .push_bind(t)
                    .push(" AND colony_key = ")
                    .push_bind(k.clone())
                    .push(
                        ") OR session_id IN (SELECT session_id FROM colony_runs WHERE tenant_id = ",
                    )
                    .push_bind(t)
                    .push(" AND colony_key = ")
                    .push_bind(k.clone())
                    .push(" AND parent_session_id IS NOT NULL))");
            }
        }
        if let Some(u) = &self.user {
            q.push(" AND user_id = ").push_bind(u.clone());
        }
    }

    /// The first and last 15-minute bucket with rows in `[from, to)` (of `tool_rollups` when `tools`).
    pub fn extent_query(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        tools: bool,
    ) -> QueryBuilder<'static, Postgres> {
        let mut q = QueryBuilder::new(format!(
            "SELECT min(bucket), max(bucket) FROM {}",
            table(tools)
        ));
        self.push_where(&mut q);
        q.push(" AND bucket >= ").push_bind(from);
        q.push(" AND bucket < ").push_bind(to);
        q
    }
}

/// Appends the condition on `bucket` that reads `level`'s units: a range, a range except its gaps, or
/// the units themselves — whichever binds the shorter array.
fn push_units(q: &mut QueryBuilder<'static, Postgres>, level: &Level) {
    let (first, last) = level.span();
    let gaps = level.gaps();
    let units = if gaps.is_empty() {
        vec![]
    } else {
        level.units()
    };
    if gaps.is_empty() || gaps.len() < units.len() {
        q.push(" AND bucket >= ").push_bind(first);
        q.push(" AND bucket < ").push_bind(last);
        if !gaps.is_empty() {
            q.push(" AND bucket <> ALL(").push_bind(gaps).push(")");
        }
    } else {
        q.push(" AND bucket = ANY(").push_bind(units).push(")");
    }
}

/// Appends the rows of `level`'s moved units ([`super::split::Moved`]) from `table` (of the tool
/// rollups when `tools`): each under its label as the row's bucket, its sums (and histogram slots)
/// times its sign.
fn push_moved(
    q: &mut QueryBuilder<'static, Postgres>,
    level: &Level,
    table: &str,
    keys: Keys,
    tools: bool,
) {
    let keys = format!("tenant_id, {}", keys.select());
    let signed = |cols: &[&str]| -> String {
        let sums: Vec<String> = cols
            .iter()
            .map(|c| format!("u.sign * {c} AS {c}"))
            .collect();
        sums.join(", ")
    };
    let columns = match tools {
        // A whole unit moved (sign 1) keeps its histogram as stored; only a short side taken back out
        // (a few hours or quarters) has its slots negated.
        true => format!(
            "u.label AS bucket, {keys}, runtime, tool_name, {}, CASE WHEN u.sign = 1 THEN duration_hist \
             ELSE ARRAY(SELECT u.sign * x FROM unnest(duration_hist) WITH ORDINALITY AS h(x, i) ORDER BY i) \
             END AS duration_hist",
            signed(&sums::TOOL_COLUMNS)
        ),
        false => format!(
            "u.label AS bucket, {keys}, model, runtime, {}",
            signed(&SUM_COLUMNS)
        ),
    };
    let pick = |f: fn(&super::split::Moved) -> DateTime<Utc>| -> Vec<DateTime<Utc>> {
        level.moved.iter().map(f).collect()
    };
    q.push(format!("SELECT {columns} FROM {table} JOIN unnest("))
        .push_bind(pick(|m| m.unit))
        .push("::timestamptz[], ")
        .push_bind(pick(|m| m.label))
        .push("::timestamptz[], ")
        .push_bind(level.moved.iter().map(|m| m.sign).collect::<Vec<i64>>())
        .push("::int8[]) AS u(unit, label, sign) ON bucket = u.unit");
}

/// The calendar unit of a granularity (none for totals).
pub(crate) fn unit(g: Granularity) -> Option<Unit> {
    match g {
        Granularity::Hour => Some(Unit::Hour),
        Granularity::Day => Some(Unit::Day),
        Granularity::Month => Some(Unit::Month),
        Granularity::Total => None,
    }
}

/// True when buckets are asked for over a range long enough to clamp it to the data's extent first
/// (a long range with little data stays cheap).
pub fn needs_extent(q: &UsageQuery) -> bool {
    unit(q.granularity).is_some() && q.to - q.from > MAX_UNCLAMPED
}

/// The range clamped to the rows' extent (`first`, `last` from [`Filter::extent_query`]); None when
/// there are no rows.
pub fn clamp(
    q: &UsageQuery,
    (first, last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>),
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let (first, last) = (first?, last?);
    Some((q.from.max(first), q.to.min(last + TimeDelta::minutes(15))))
}

/// Everything needed to run a usage query and label its rows.
#[derive(Debug, Clone)]
pub struct Plan {
    pub filter: Filter,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// The requested grouping, in order.
    pub group_by: Vec<Dim>,
    /// None for totals.
    pub buckets: Option<Buckets>,
    /// Some when whole hours (days, months) come from the coarser rollups.
    pub split: Option<Split>,
    /// The split reads the narrow rollups: whole hours from `usage_rollups_narrow`, whole days and
    /// months from `usage_rollups_daily` and `usage_rollups_monthly` (grouped by tenant, user, device,
    /// model or runtime only); otherwise whole hours from `usage_rollups_hourly` and nothing coarser.
    pub narrow: bool,
    /// Grouped by tool: the rows come from `tool_rollups` (and, grouped by tenant, user or runtime
    /// besides at most, whole hours, days and months from `tool_rollups_hourly`, `_daily` and
    /// `_monthly`; a wider grouping reads quarter rows only).
    pub tools: bool,
    /// Grouped by tool (and tenant or runtime at most) over a whole tenant's usage: whole hours, days
    /// and months come from `tool_rollups_tenant_hourly`, `_daily` and `_monthly` instead.
    pub tenant_tools: bool,
    /// Grouped by colony (and tenant, model or runtime at most) over a whole tenant's usage: whole days
    /// and months come from `usage_rollups_colony_daily` and `_monthly`, whole hours from
    /// `usage_rollups_hourly`.
    pub colony: bool,
    /// Grouped by tenant, model or runtime at most over a whole tenant's usage: whole days and months
    /// come from the colony rollups too (summed over colonies), whole hours from `usage_rollups_narrow`.
    pub tenant_days: bool,
}

impl Plan {
    /// The plan over `[from, to)` (the query's range, or that range clamped, see [`clamp`]).
    pub fn new(filter: Filter, q: &UsageQuery, from: DateTime<Utc>, to: DateTime<Utc>) -> Plan {
        let buckets = unit(q.granularity).map(|u| buckets::buckets(u, q.tz, from, to));
        let tools = q.group_by.contains(&Dim::Tool);
        let narrow_dims = match tools {
            true => q.group_by.iter().all(|d| NARROW_TOOL_DIMS.contains(d)),
            false => q.group_by.iter().all(|d| NARROW_DIMS.contains(d)),
        };
        let colony_dims = !tools
            && filter.user.is_none()
            && q.group_by.contains(&Dim::Colony)
            && q.group_by.iter().all(|d| COLONY_DIMS.contains(d));
        let tenant_dims =
            !tools && filter.user.is_none() && q.group_by.iter().all(|d| TENANT_DIMS.contains(d));
        let split = match (&filter.tenant, &filter.part) {
            // The tool rollups have no wide hourly rows: a wide tool grouping reads quarters.
            (Some(_), Part::Whole) if narrow_dims || !tools => {
                let starts = buckets.as_ref().map_or(vec![from], |b| b.starts.clone());
                Split::moving(
                    from,
                    to,
                    &starts,
                    narrow_dims || colony_dims,
                    // Days come from rows without the user: few against the hours a day's short
                    // side reads.
                    tenant_dims || colony_dims,
                )
            }
            _ => None,
        };
        let narrow = split.is_some() && narrow_dims;
        let split_colony = split.is_some() && colony_dims;
        let tenant_days = split.is_some() && tenant_dims;
        let tenant_tools = narrow
            && tools
            && filter.user.is_none()
            && q.group_by.iter().all(|d| TENANT_TOOL_DIMS.contains(d));
        Plan {
            filter,
            from,
            to,
            group_by: q.group_by.clone(),
            buckets,
            split,
            narrow,
            tools,
            tenant_tools,
            colony: split_colony,
            tenant_days,
        }
    }

    /// The statement: exact `sum()` as text when `wide`, else `apiary_sum` (see [`sums`]).
    pub fn query(&self, wide: bool) -> QueryBuilder<'static, Postgres> {
        let mut q = QueryBuilder::new("SELECT ");
        match &self.buckets {
            Some(b) => {
                q.push("width_bucket(bucket, ")
                    .push_bind(b.starts.clone())
                    .push(")");
            }
            None => {
                q.push("0");
            }
        }
        q.push("::int4 AS b");
        for d in Dim::ALL {
            match self.group_by.contains(&d) {
                true => q.push(format!(", {} AS {}", d.column(), d.field())),
                false => q.push(format!(", NULL::text AS {}", d.field())),
            };
        }
        let sums = if self.tools {
            sums::tool_select(wide)
        } else {
            sums::select(wide)
        };
        q.push(", ").push(sums).push(" FROM (");
        self.push_source(&mut q);
        q.push(") AS r");
        if self.group_by.contains(&Dim::Colony) {
            push_colony_key_joins(&mut q, self.filter.tenant);
        }
        q.push(" GROUP BY 1");
        for (i, d) in Dim::ALL.iter().enumerate() {
            if self.group_by.contains(d) {
                q.push(format!(", {}", i + 2));
            }
        }
        q
    }

    /// The rollup rows the query sums: quarter rows of the range, or the units of each grain of the
    /// [`Split`] from its rollup (whole months and days from the monthly and daily rollups and whole
    /// hours from the narrow one when the grouping allows, else whole hours from the hourly rollup),
    /// quarter rows for the rest.
    fn push_source(&self, q: &mut QueryBuilder<'static, Postgres>) {
        match &self.split {
            None if self.tools => {
                q.push(format!("SELECT {TOOL_COLUMNS} FROM tool_rollups"));
                self.filter.push_where(q);
                q.push(" AND bucket >= ").push_bind(self.from);
                q.push(" AND bucket < ").push_bind(self.to);
            }
            None => {
                q.push(format!("SELECT {COLUMNS} FROM usage_rollups"));
                self.filter.push_where(q);
                q.push(" AND bucket >= ").push_bind(self.from);
                q.push(" AND bucket < ").push_bind(self.to);
            }
            Some(s) => {
                let mut first = true;
                let mut union = |q: &mut QueryBuilder<'static, Postgres>| {
                    if !std::mem::take(&mut first) {
                        q.push(" UNION ALL ");
                    }
                };
                for level in &s.levels {
                    let calendar = matches!(level.grain, Grain::Day | Grain::Month);
                    let table = match (self.tools, self.colony) {
                        (true, _) => level.grain.tool_table(self.tenant_tools),
                        (false, true) => level.grain.colony_table(),
                        (false, false) if calendar && self.tenant_days => {
                            level.grain.colony_table()
                        }
                        (false, false) => level.grain.table(self.narrow),
                    };
                    // The narrow tables have no colony or session (the narrow tool tables no device
                    // either), the tenant's no user or device: empty, as their key has them; the colony
                    // tables no device.
                    let keys = match (level.grain, self.narrow, self.tenant_tools) {
                        _ if calendar && self.colony => Keys::Colony,
                        _ if calendar && self.tenant_days => Keys::Tenant,
                        (Grain::Quarter, ..) | (_, false, _) => Keys::Wide,
                        (_, true, false) if self.tools => Keys::User,
                        (_, true, false) => Keys::Narrow,
                        (_, true, true) => Keys::Tenant,
                    };
                    if !level.ranges.is_empty() {
                        union(q);
                        let columns = columns(self.tools, keys);
                        q.push(format!("SELECT {columns} FROM {table}"));
                        self.filter.push_where(q);
                        push_units(q, level);
                    }
                    if !level.moved.is_empty() {
                        union(q);
                        push_moved(q, level, table, keys, self.tools);
                        self.filter.push_where(q);
                    }
                }
            }
        }
    }

    /// The bucket a row's `b` names (1-based `width_bucket`; every row is at or after the range's start);
    /// None for totals.
    pub fn label(&self, b: i32) -> Option<DateTime<Utc>> {
        self.buckets.as_ref().map(|bs| {
            let i = (b.max(1) as usize - 1).min(bs.labels.len() - 1);
            bs.labels[i]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::TenantRead;
    use chrono_tz::Tz;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn query(from: &str, to: &str, gran: Granularity, tz: &str, group_by: &[Dim]) -> UsageQuery {
        UsageQuery {
            from: t(from),
            to: t(to),
            group_by: group_by.to_vec(),
            granularity: gran,
            tz: tz.parse::<Tz>().unwrap(),
        }
    }

    fn tenant_filter(part: Part) -> Filter {
        let r = TenantRead::tenant_wide(Uuid::nil());
        Filter::of(Within::Tenant(&r, &part), &[]).unwrap()
    }

    #[test]
    fn a_tenant_wide_day_query_reads_both_rollups_and_groups_by_the_asked_dimensions() {
        let q = query(
            "2026-11-01T00:00:00Z",
            "2026-11-04T00:00:00Z",
            Granularity::Day,
            "Asia/Kolkata",
            &[Dim::Model, Dim::User],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert_eq!(plan.buckets.as_ref().unwrap().starts.len(), 4);
        let sql = plan.query(false).into_sql();
        assert!(sql.starts_with("SELECT width_bucket(bucket, $1)::int4 AS b, NULL::text AS tenant_id, user_id AS user_id, model AS model, NULL::text AS colony_id"), "{sql}");
        assert!(plan.narrow, "model and user are in the narrow rollup");
        assert!(
            sql.contains("''::text AS session_id, model, runtime, input_tokens"),
            "{sql}"
        );
        // Kolkata's days start at 18:30 UTC and cut every UTC day: hours from the narrow rollup, but
        // the cut ones, which come from the quarter rows.
        assert!(sql.contains("FROM usage_rollups_narrow WHERE TRUE AND tenant_id = $2 AND bucket >= $3 AND bucket < $4 AND bucket <> ALL($5) UNION ALL SELECT"), "{sql}");
        assert!(
            sql.contains("FROM usage_rollups WHERE TRUE AND tenant_id = $6 AND bucket = ANY($7)"),
            "{sql}"
        );
        assert!(!sql.contains("usage_rollups_daily"), "{sql}");
        assert!(sql.ends_with(") AS r GROUP BY 1, 3, 4"), "{sql}");
        assert!(sql.contains("apiary_sum(events) AS events"));
        assert!(plan
            .query(true)
            .into_sql()
            .contains("sum(events)::text AS events"));

        // A session grouping needs the wide hourly rows; a colony grouping reads whole days from the
        // colony rollup, hours from the wide hourly rows.
        for wide in [Dim::Colony, Dim::Session] {
            let q = query(
                "2026-11-01T00:00:00Z",
                "2026-11-04T00:00:00Z",
                Granularity::Day,
                "UTC",
                &[Dim::Model, wide],
            );
            let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
            assert!(!plan.narrow, "{wide:?}");
            assert_eq!(plan.colony, wide == Dim::Colony, "{wide:?}");
            let sql = plan.query(false).into_sql();
            let table = match wide {
                Dim::Colony => "SELECT bucket, tenant_id, ''::text AS user_id, ''::text AS device_id, colony_id, fork_session_id AS session_id, model, runtime, input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns FROM usage_rollups_colony_daily",
                _ => "FROM usage_rollups_hourly",
            };
            assert!(
                sql.contains(&format!(
                    "{table} WHERE TRUE AND tenant_id = $2 AND bucket >= $3 AND bucket < $4) AS r"
                )),
                "{sql}"
            );
            assert!(!sql.contains("usage_rollups_narrow"), "{sql}");
            assert!(!sql.contains("usage_rollups_daily"), "{sql}");
            assert_eq!(
                sql.contains(") AS r LEFT JOIN (SELECT tenant_id AS colony_run_tenant, session_id AS colony_run_session, colony_key AS colony_run_key FROM colony_runs WHERE TRUE AND tenant_id = $5)"),
                wide == Dim::Colony,
                "{sql}"
            );
        }
    }

    #[test]
    fn a_device_grouping_reads_the_narrow_hourly_daily_and_monthly_rows_with_their_device() {
        let q = query(
            "2026-01-15T10:00:00Z",
            "2027-01-01T00:00:00Z",
            Granularity::Month,
            "UTC",
            &[Dim::Device, Dim::Runtime],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert!(plan.narrow && !plan.tenant_days && !plan.colony);
        let sql = plan.query(false).into_sql();
        for table in [
            "usage_rollups_monthly",
            "usage_rollups_daily",
            "usage_rollups_narrow",
        ] {
            assert!(
                sql.contains(&format!("SELECT bucket, tenant_id, user_id, device_id, ''::text AS colony_id, ''::text AS session_id, model, runtime, input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns FROM {table} WHERE")),
                "{table}: {sql}"
            );
        }
        assert!(!sql.contains("usage_rollups_hourly"), "{sql}");
        assert!(sql.contains("device_id AS device_id"), "{sql}");
    }

    #[test]
    fn a_year_reads_the_monthly_rollup_and_a_zone_that_cuts_months_the_daily_one() {
        let q = query(
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            Granularity::Month,
            "UTC",
            &[Dim::Model],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert!(plan.tenant_days, "a whole tenant by model");
        let sql = plan.query(false).into_sql();
        assert!(
            sql.contains("''::text AS session_id, model, runtime, input_tokens"),
            "{sql}"
        );
        assert!(sql.contains("FROM usage_rollups_colony_monthly WHERE TRUE AND tenant_id = $2 AND bucket >= $3 AND bucket < $4) AS r"), "{sql}");
        assert!(!sql.contains("UNION ALL"), "{sql}");
        // One user's usage (a token limited to alice) reads her rows of the monthly rollup.
        let alice = TenantRead::for_user(Uuid::nil(), "alice");
        let mine = Filter::of(Within::Tenant(&alice, &Part::Whole), &[]).unwrap();
        let plan = Plan::new(mine, &q, q.from, q.to);
        assert!(!plan.tenant_days);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("FROM usage_rollups_monthly WHERE TRUE AND tenant_id = $2 AND user_id = $3 AND bucket >= $4 AND bucket < $5) AS r"), "{sql}");
        // New York's months start at 04:00 or 05:00 UTC: each UTC month from February on is moved to
        // the New York month holding all but its first hours, which are taken back out of it; January
        // (the range starts at its 05:00) by the day and its first day's hours.
        let q = query(
            "2026-01-01T05:00:00Z",
            "2027-01-01T05:00:00Z",
            Granularity::Month,
            "America/New_York",
            &[Dim::User],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("FROM usage_rollups_monthly JOIN unnest($2::timestamptz[], $3::timestamptz[], $4::int8[]) AS u(unit, label, sign) ON bucket = u.unit WHERE TRUE AND tenant_id = $5 UNION ALL SELECT"), "{sql}");
        assert!(sql.contains("FROM usage_rollups_daily WHERE TRUE AND tenant_id = $6 AND bucket >= $7 AND bucket < $8 UNION ALL SELECT"), "{sql}");
        let split = plan.split.as_ref().unwrap();
        let months = split.level(Grain::Month).unwrap();
        assert_eq!(months.moved.len(), 11, "February to December");
        assert!(months.ranges.is_empty());
        let days = split.level(Grain::Day).unwrap();
        assert_eq!(days.units().len(), 30, "January 2nd to 31st");
        // Grouped by device: the same rollups, which keep the device.
        let q = UsageQuery {
            group_by: vec![Dim::Device],
            ..q
        };
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("tenant_id, user_id, device_id, ''::text AS colony_id, ''::text AS session_id, model, runtime, input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns FROM usage_rollups_daily WHERE TRUE"), "{sql}");
        assert!(!sql.contains("FROM usage_rollups_hourly"), "{sql}");
    }

    #[test]
    fn a_whole_tenants_usage_by_model_reads_days_and_months_summed_over_colonies() {
        // A year by month from January 15th, 10:00 UTC: the rest of January by day, then whole months, from
        // the colony rollups (no user in their key); the first day's hours from the narrow rollup.
        for group_by in [vec![], vec![Dim::Model], vec![Dim::Runtime, Dim::Tenant]] {
            let q = query(
                "2026-01-15T10:00:00Z",
                "2027-01-01T00:00:00Z",
                Granularity::Month,
                "UTC",
                &group_by,
            );
            let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
            assert!(
                plan.tenant_days && plan.narrow && !plan.colony,
                "{group_by:?}"
            );
            let sql = plan.query(false).into_sql();
            for table in [
                "usage_rollups_colony_monthly",
                "usage_rollups_colony_daily",
                "usage_rollups_narrow",
            ] {
                assert!(
                    sql.contains(&format!("FROM {table} WHERE")),
                    "{table}: {sql}"
                );
            }
            assert!(!sql.contains("FROM usage_rollups_daily"), "{sql}");
            assert!(!sql.contains("FROM usage_rollups_monthly"), "{sql}");
            assert!(!sql.contains("colony_runs"), "not grouped by colony: {sql}");
            let days = "SELECT bucket, tenant_id, ''::text AS user_id, ''::text AS device_id, ''::text AS colony_id, ''::text AS session_id, model, runtime, input_tokens";
            assert!(sql.contains(days), "{sql}");
        }
        // Grouped by user (or read by a user's token) the daily and monthly rollups keep the user.
        let q = query(
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            Granularity::Day,
            "UTC",
            &[Dim::User, Dim::Model],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert!(!plan.tenant_days && plan.narrow);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("FROM usage_rollups_daily WHERE"), "{sql}");
        assert!(!sql.contains("usage_rollups_colony"), "{sql}");
    }

    #[test]
    fn sessions_colonies_and_users_read_quarter_rows_with_their_filter() {
        let q = query(
            "2026-11-01T00:00:00Z",
            "2026-11-04T00:00:00Z",
            Granularity::Total,
            "UTC",
            &[],
        );
        let plan = Plan::new(tenant_filter(Part::Colony("c1".into())), &q, q.from, q.to);
        assert_eq!(plan.split, None);
        assert_eq!(plan.label(1), None);
        let sql = plan.query(false).into_sql();
        assert!(sql.starts_with("SELECT 0::int4 AS b,"), "{sql}");
        assert!(sql.contains("FROM usage_rollups WHERE TRUE AND tenant_id = $1 AND colony_id = $2 AND bucket >= $3 AND bucket < $4) AS r GROUP BY 1"), "{sql}");
        assert!(sql.ends_with("GROUP BY 1"), "{sql}");
        let part = Part::Sessions(vec!["s1".into()]);
        let alice = TenantRead::for_user(Uuid::nil(), "alice");
        let f = Filter::of(Within::Tenant(&alice, &part), &[]).unwrap();
        let sql = Plan::new(f, &q, q.from, q.to).query(false).into_sql();
        assert!(
            sql.contains("AND session_id = ANY($2) AND user_id = $3 AND bucket >= $4"),
            "{sql}"
        );
    }

    #[test]
    fn a_tool_grouping_reads_the_tool_rollups_quarter_rows() {
        let q = query(
            "2026-11-01T00:00:00Z",
            "2026-11-04T00:00:00Z",
            Granularity::Day,
            "UTC",
            &[Dim::Tool, Dim::Session],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert!(plan.tools);
        assert_eq!(
            plan.split, None,
            "no tool rollup coarser than quarters keeps the session"
        );
        let sql = plan.query(false).into_sql();
        assert!(
            sql.contains("FROM tool_rollups WHERE TRUE AND tenant_id = $2 AND bucket >= $3"),
            "{sql}"
        );
        assert!(
            sql.contains("NULL::text AS model, NULL::text AS colony_id, session_id AS session_id")
        );
        assert!(
            sql.contains("tool_name AS tool_name, apiary_sum(calls) AS calls"),
            "{sql}"
        );
        assert!(sql.contains(&format!("AS h{}", crate::tool_rollups::SLOTS)));
        assert!(!sql.contains("usage_rollups"), "{sql}");
        assert!(sql.ends_with("GROUP BY 1, 6, 9"), "{sql}");
        let extent = tenant_filter(Part::Whole)
            .extent_query(q.from, q.to, true)
            .into_sql();
        assert!(extent.starts_with("SELECT min(bucket), max(bucket) FROM tool_rollups"));
    }

    #[test]
    fn a_tool_grouping_by_user_reads_the_narrow_tool_rollups_and_moves_months_with_their_histograms(
    ) {
        let q = query(
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            Granularity::Month,
            "UTC",
            &[Dim::Tool, Dim::User],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert!(plan.tools && plan.narrow);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("SELECT bucket, tenant_id, user_id, ''::text AS device_id, ''::text AS colony_id, ''::text AS session_id, runtime, tool_name, calls, errors, timed_calls, duration_ms, duration_hist FROM tool_rollups_monthly WHERE TRUE AND tenant_id = $2 AND bucket >= $3 AND bucket < $4) AS r"), "{sql}");
        assert!(!sql.contains("usage_rollups"), "{sql}");
        // New York: the months moved, each with its histogram times its sign, and the short sides taken
        // back out of the hourly and quarter rows.
        let q = query(
            "2026-01-01T05:00:00Z",
            "2027-01-01T05:00:00Z",
            Granularity::Month,
            "America/New_York",
            &[Dim::Tool, Dim::User],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("u.sign * duration_ms AS duration_ms, CASE WHEN u.sign = 1 THEN duration_hist ELSE ARRAY(SELECT u.sign * x FROM unnest(duration_hist) WITH ORDINALITY AS h(x, i) ORDER BY i) END AS duration_hist FROM tool_rollups_monthly JOIN unnest("), "{sql}");
        assert!(sql.contains("FROM tool_rollups_daily WHERE"), "{sql}");
        assert!(
            sql.contains("FROM tool_rollups_hourly JOIN unnest("),
            "{sql}"
        );
        assert_eq!(
            plan.split
                .as_ref()
                .unwrap()
                .level(Grain::Month)
                .unwrap()
                .moved
                .len(),
            11
        );
        // A session scope reads quarter rows only, as before.
        let q = query(
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            Granularity::Month,
            "UTC",
            &[Dim::Tool],
        );
        let part = Part::Sessions(vec!["s1".into()]);
        let plan = Plan::new(tenant_filter(part), &q, q.from, q.to);
        assert_eq!(plan.split, None);
        assert!(plan
            .query(false)
            .into_sql()
            .contains("FROM tool_rollups WHERE"));
    }

    #[test]
    fn a_tool_grouping_of_a_whole_tenant_reads_the_tenants_tool_rollups() {
        let year = |tz: &str, from: &str, to: &str, group_by: &[Dim]| {
            query(from, to, Granularity::Month, tz, group_by)
        };
        for group_by in [
            &[Dim::Tool][..],
            &[Dim::Tool, Dim::Runtime],
            &[Dim::Tenant, Dim::Tool],
        ] {
            let q = year(
                "UTC",
                "2026-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
                group_by,
            );
            let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
            assert!(
                plan.tools && plan.narrow && plan.tenant_tools,
                "{group_by:?}"
            );
            let sql = plan.query(false).into_sql();
            assert!(sql.contains("SELECT bucket, tenant_id, ''::text AS user_id, ''::text AS device_id, ''::text AS colony_id, ''::text AS session_id, runtime, tool_name, calls, errors, timed_calls, duration_ms, duration_hist FROM tool_rollups_tenant_monthly WHERE TRUE AND tenant_id = $2 AND bucket >= $3 AND bucket < $4) AS r"), "{sql}");
            assert!(!sql.contains("FROM tool_rollups_monthly"), "{sql}");
        }
        // New York: months moved from the tenant's monthly rows, the short sides and the hours that are
        // neither from its hourly rows.
        let q = year(
            "America/New_York",
            "2026-01-01T05:00:00Z",
            "2027-01-01T05:00:00Z",
            &[Dim::Tool],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("SELECT u.label AS bucket, tenant_id, ''::text AS user_id, ''::text AS device_id, ''::text AS colony_id, ''::text AS session_id, runtime, tool_name, u.sign * calls AS calls"), "{sql}");
        assert!(
            sql.contains("FROM tool_rollups_tenant_monthly JOIN unnest("),
            "{sql}"
        );
        assert!(
            sql.contains("FROM tool_rollups_tenant_hourly JOIN unnest("),
            "{sql}"
        );
        assert!(!sql.contains("FROM tool_rollups_monthly"), "{sql}");
        // Grouped by user, or read by a token limited to one user: the per-user rows.
        let q = year(
            "UTC",
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            &[Dim::Tool, Dim::User],
        );
        let plan = Plan::new(tenant_filter(Part::Whole), &q, q.from, q.to);
        assert!(plan.narrow && !plan.tenant_tools);
        let q = year(
            "UTC",
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            &[Dim::Tool],
        );
        let alice = TenantRead::for_user(Uuid::nil(), "alice");
        let filter = Filter::of(Within::Tenant(&alice, &Part::Whole), &[]).unwrap();
        let plan = Plan::new(filter, &q, q.from, q.to);
        assert!(plan.narrow && !plan.tenant_tools);
        let sql = plan.query(false).into_sql();
        assert!(
            sql.contains(
                "FROM tool_rollups_monthly WHERE TRUE AND tenant_id = $2 AND user_id = $3"
            ),
            "{sql}"
        );
        assert!(!sql.contains("tool_rollups_tenant"), "{sql}");
    }

    #[test]
    fn an_operator_sums_every_tenant_but_only_per_tenant() {
        let op = crate::access::OperatorRead::for_tests();
        assert!(Filter::of(Within::AllTenants(&op), &[Dim::Model]).is_err());
        assert!(Filter::of(Within::AllTenants(&op), &[Dim::Tenant, Dim::User]).is_err());
        let f = Filter::of(Within::AllTenants(&op), &[Dim::Tenant, Dim::Model]).unwrap();
        let q = query(
            "2026-11-01T00:00:00Z",
            "2026-11-02T00:00:00Z",
            Granularity::Total,
            "UTC",
            &[Dim::Tenant, Dim::Model],
        );
        let plan = Plan::new(f, &q, q.from, q.to);
        assert_eq!(
            plan.split, None,
            "the hourly split is for one tenant's whole usage"
        );
        let sql = plan.query(false).into_sql();
        assert!(sql.contains("tenant_id::text AS tenant_id"), "{sql}");
        assert!(
            sql.contains("FROM usage_rollups WHERE TRUE AND bucket >= $1"),
            "{sql}"
        );
        assert!(!sql.contains("tenant_id ="), "{sql}");
    }

    #[test]
    fn long_bucketed_ranges_are_clamped_to_the_data_first() {
        let mut q = query(
            "2020-01-01T00:00:00Z",
            "2026-01-01T00:00:00Z",
            Granularity::Month,
            "UTC",
            &[],
        );
        assert!(needs_extent(&q));
        assert_eq!(clamp(&q, (None, None)), None);
        let clamped = clamp(
            &q,
            (
                Some(t("2025-03-01T10:00:00Z")),
                Some(t("2025-03-04T10:00:00Z")),
            ),
        );
        assert_eq!(
            clamped,
            Some((t("2025-03-01T10:00:00Z"), t("2025-03-04T10:15:00Z")))
        );
        q.granularity = Granularity::Total;
        assert!(!needs_extent(&q), "totals need no buckets");
        let sql = tenant_filter(Part::Whole)
            .extent_query(q.from, q.to, false)
            .into_sql();
        assert_eq!(sql, "SELECT min(bucket), max(bucket) FROM usage_rollups WHERE TRUE AND tenant_id = $1 AND bucket >= $2 AND bucket < $3");
    }
}
