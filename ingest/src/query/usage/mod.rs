//! Usage queries over `usage_rollups`: typed parameters ([`UsageParams`] → [`UsageQuery`]), a pure
//! planner ([`plan`]), a thin fetch ([`fetch::run`]) and the typed answer ([`body`]).
//!
//! Buckets: the rollup's 15-minute buckets are folded into hour, day or month buckets of the requested
//! zone: the bucket starts are computed in Rust ([`super::buckets`], the semantics of Postgres'
//! `date_trunc(unit, t, tz)`, correct across DST changes — a local day may be 23 or 25 hours long) and
//! each row finds its bucket with `width_bucket` against that sorted array. Exact in every zone because
//! every UTC offset in use is a multiple of 15 minutes; `from` and `to` must therefore fall on 15-minute
//! boundaries. A range longer than two months is first clamped to the rows' extent (one index probe),
//! so the array stays short.
//!
//! Five rollups: a tenant-wide query reads each UTC unit of its range at the coarsest grain no bucket
//! boundary cuts ([`split::Split`]). Grouped by nothing, user, device, model or runtime (no colony or
//! session): whole UTC months from `usage_rollups_monthly`, whole days from `usage_rollups_daily`, whole
//! hours from `usage_rollups_narrow` (the hourly sums without colony and session) — a year is about
//! twelve rows per user's device and model — and the rest from the 15-minute `usage_rollups`. Not grouped
//! by user and not limited to one user's usage, whole days and months come from the colony rollups
//! instead (`usage_rollups_colony_daily`, `_monthly`: no user in their key, a row per colony, model and
//! runtime), summed over their colonies. Grouped by a
//! wide dimension: whole hours from `usage_rollups_hourly` and the rest from the 15-minute rows. In a
//! whole-hour zone that leaves quarter rows only at the range's edges; a day or month in a half- or
//! quarter-hour zone cuts one hour per bucket (read as quarters); hour buckets in such a zone, and
//! session or colony scopes (small, with their own index), read quarter rows only. All the tables hold
//! the same sums (written together), so the answer is the same either way.
//!
//! Sums use `apiary_sum` (a bigint-state sum, see its migration): Postgres' `sum(bigint)` allocates a
//! numeric state per group, which dominated queries with thousands of groups. A sum past the bigint
//! range re-runs the query with exact sums ([`super::sums`]).
//!
//! Rows come back sorted by bucket then group keys (sorted here, not by the database).
//!
//! Per tool (`group_by=tool`): the rows come from the tool rollups instead (tool grouping cannot be
//! combined with `model`, which tool calls do not have): completed calls, errors, summed durations and
//! the duration histogram, whose merged counts give each row's p50/p95 ([`crate::tool_rollups`]). The
//! other sums of such a row are zero. Grouped by tool and tenant, user or runtime at most, a
//! tenant-wide query splits its range as above between `tool_rollups_monthly`, `_daily`, `_hourly`
//! (the narrow key) and the 15-minute `tool_rollups`; grouped by tool and device, colony or session, or
//! scoped to sessions or a colony, it reads the 15-minute rows only.
//!
//! Who sees what ([`Within`]): a [`TenantRead`] sums only its tenant's rows (and only its user's, for a
//! user-bound `read` token); `group_by=tenant` then answers that one tenant. Only an [`OperatorRead`]
//! (an operator token) sums across tenants, and only grouped by tenant, optionally by model too
//! ([`OPERATOR_DIMS`]).

pub mod body;
pub mod csv;
pub mod fetch;
pub mod page;
pub mod params;
pub mod plan;
pub mod split;

use std::str::FromStr;

use chrono::{DateTime, DurationRound, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use sqlx::{Postgres, QueryBuilder};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::access::{OperatorRead, TenantRead};
use crate::error::ApiError;

pub use body::{UsageJson, UsageResponse, UsageSums};
pub use fetch::{run, UsageRow};
pub use page::{answer, Paging};
pub use params::{AnswerFormat, GroupBy, TimeArg, UsageParams, Zone};

/// A dimension to group by. Asked for by its word (`group_by=user`), answered by its field (`user_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, ToSchema)]
pub enum Dim {
    #[serde(rename = "tenant_id")]
    Tenant,
    #[serde(rename = "user_id")]
    User,
    #[serde(rename = "model")]
    Model,
    #[serde(rename = "colony_id")]
    Colony,
    #[serde(rename = "session_id")]
    Session,
    #[serde(rename = "device_id")]
    Device,
    #[serde(rename = "runtime")]
    Runtime,
    #[serde(rename = "tool_name")]
    Tool,
}

impl Dim {
    /// Every dimension, in the order of the key columns of a usage row.
    pub const ALL: [Dim; 8] = [
        Dim::Tenant,
        Dim::User,
        Dim::Model,
        Dim::Colony,
        Dim::Session,
        Dim::Device,
        Dim::Runtime,
        Dim::Tool,
    ];

    fn parse(s: &str) -> Option<Dim> {
        Some(match s {
            "tenant" => Dim::Tenant,
            "user" => Dim::User,
            "model" => Dim::Model,
            "colony" => Dim::Colony,
            "session" => Dim::Session,
            "device" => Dim::Device,
            "runtime" => Dim::Runtime,
            "tool" => Dim::Tool,
            _ => return None,
        })
    }

    /// The rollup column (as text) this dimension groups by, over the rollup rows `r`.
    pub fn column(self) -> &'static str {
        match self {
            Dim::Tenant => "tenant_id::text",
            Dim::User => "user_id",
            Dim::Model => "model",
            Dim::Colony => COLONY_KEY_OF_ROW,
            Dim::Session => "session_id",
            Dim::Device => "device_id",
            Dim::Runtime => "runtime",
            Dim::Tool => "tool_name",
        }
    }

    /// The field of a usage row that holds this dimension's key.
    pub fn field(self) -> &'static str {
        match self {
            Dim::Tenant => "tenant_id",
            Dim::User => "user_id",
            Dim::Model => "model",
            Dim::Colony => "colony_id",
            Dim::Session => "session_id",
            Dim::Device => "device_id",
            Dim::Runtime => "runtime",
            Dim::Tool => "tool_name",
        }
    }
}

/// A rollup row's colony: the key of the colony run its `colony_id` (a worker's colony session) is, or
/// that its own session is when that session is a colony's forked session (a run with a parent: the
/// colony's own queen session); else the stored `colony_id` (the queen session of a colony whose key is
/// not known, or "" for none). See `crate::store::colonies`. Over rollup rows `r` joined by
/// [`push_colony_key_joins`].
pub(crate) const COLONY_KEY_OF_ROW: &str =
    "COALESCE(colony_run_.colony_run_key, forked_run_.forked_run_key, r.colony_id)";

/// Appends the joins [`COLONY_KEY_OF_ROW`] reads after the rollup rows `r`: `colony_run_`, the run that
/// the row's `colony_id` is; `forked_run_`, the run with a parent that the row's own session is — each
/// over the runs of `tenant` (every tenant's for None). `colony_runs` is keyed by (tenant, session), so
/// each join finds at most one run and every row is summed once. The planner hashes the tenant's runs
/// once and probes them per row (a subquery per row, an index probe for each of a month's hundreds of
/// thousands of rows, took seconds). Each join exposes only columns of its own name, so the grouping
/// and sum columns of `r` stay unambiguous; the tenant bound in each join keeps the statement on one
/// tenant's rows (on Citus, one shard).
pub(crate) fn push_colony_key_joins(q: &mut QueryBuilder<'static, Postgres>, tenant: Option<Uuid>) {
    for (alias, only_forked, on) in [
        ("colony_run", false, "r.colony_id"),
        ("forked_run", true, "r.session_id"),
    ] {
        q.push(format!(
            " LEFT JOIN (SELECT tenant_id AS {alias}_tenant, session_id AS {alias}_session, \
             colony_key AS {alias}_key FROM colony_runs WHERE TRUE"
        ));
        if let Some(t) = tenant {
            q.push(" AND tenant_id = ").push_bind(t);
        }
        if only_forked {
            q.push(" AND parent_session_id IS NOT NULL");
        }
        q.push(format!(
            ") {alias}_ ON {alias}_.{alias}_tenant = r.tenant_id AND {alias}_.{alias}_session = {on}"
        ));
    }
}

/// Where "all time" starts for the reads without a range of their own (a session's or colony's usage, the
/// cumulative metrics): before any event an agent can have recorded.
pub fn all_time_from() -> DateTime<Utc> {
    DateTime::from_timestamp(946_684_800, 0).expect("2000-01-01T00:00:00Z")
}

/// Bucket size of the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    Hour,
    Day,
    Month,
    #[default]
    Total,
}

impl FromStr for Granularity {
    type Err = String;

    fn from_str(s: &str) -> Result<Granularity, String> {
        Ok(match s {
            "" | "total" => Granularity::Total,
            "hour" => Granularity::Hour,
            "day" => Granularity::Day,
            "month" => Granularity::Month,
            _ => return Err(format!("{s:?} is not one of hour, day, month, total")),
        })
    }
}

/// Whose usage a query sums.
#[derive(Debug, Clone, Copy)]
pub enum Within<'a> {
    /// Part of one tenant's usage (of one user's, for a user-bound read).
    Tenant(&'a TenantRead, &'a Part),
    /// Every tenant's usage, grouped by tenant (operator tokens only).
    AllTenants(&'a OperatorRead),
}

/// A restriction to part of a tenant's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// All of it.
    Whole,
    /// These sessions.
    Sessions(Vec<String>),
    /// One colony's workers (by the queen session the workers name as their colony).
    Colony(String),
    /// One colony by key: its runs' workers and its forked colony sessions (see `COLONY_KEY_OF_ROW`).
    ColonyKey(String),
}

/// The dimensions an operator may group by: tenant (required) and model. A tenant's users, sessions,
/// colonies and devices are the tenant's business, not the operator's.
pub const OPERATOR_DIMS: [Dim; 2] = [Dim::Tenant, Dim::Model];

/// A usage request with every default applied and every value checked.
#[derive(Debug, Clone)]
pub struct UsageQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: Vec<Dim>,
    pub granularity: Granularity,
    pub tz: Tz,
}

impl UsageQuery {
    /// Applies the defaults and checks the range; a bad value is a 400 naming its parameter.
    pub fn from_params(p: UsageParams, now: DateTime<Utc>) -> Result<UsageQuery, ApiError> {
        let tz = p.tz.map_or(Tz::UTC, |z| z.0);
        let quarter = TimeDelta::minutes(15);
        let default_to = now.duration_trunc(quarter).expect("in range") + quarter;
        let to = match p.to {
            Some(t) => resolve_time("to", t, tz)?,
            None => default_to,
        };
        let from = match p.from {
            Some(t) => resolve_time("from", t, tz)?,
            None => to - TimeDelta::days(30),
        };
        if from >= to {
            return Err(ApiError::bad_param("from", "must be before `to`"));
        }
        let group_by = p.group_by.unwrap_or_default().0;
        if group_by.contains(&Dim::Tool) && group_by.contains(&Dim::Model) {
            return Err(ApiError::bad_param(
                "group_by",
                "tool and model cannot be combined (tool calls have no model)",
            ));
        }
        if to - from > TimeDelta::days(50 * 366) {
            return Err(ApiError::bad_param(
                "to",
                "the range may span at most fifty years",
            ));
        }
        Ok(UsageQuery {
            from,
            to,
            group_by,
            granularity: p.granularity.unwrap_or_default(),
            tz,
        })
    }
}

/// The instant of a `from` / `to` value in `tz`; must fall on a 15-minute boundary.
fn resolve_time(name: &str, t: TimeArg, tz: Tz) -> Result<DateTime<Utc>, ApiError> {
    let t = match t {
        TimeArg::Instant(t) => t,
        TimeArg::Local(n) => tz
            .from_local_datetime(&n)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
            .ok_or_else(|| {
                ApiError::bad_param(name, format!("{n} does not exist in {tz} (DST gap)"))
            })?,
    };
    if t.duration_trunc(TimeDelta::minutes(15)).ok() != Some(t) {
        return Err(ApiError::bad_param(
            name,
            "must fall on a 15-minute boundary (the rollup grain)",
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::extract::query_params;

    fn query(raw: &str) -> Result<UsageQuery, ApiError> {
        UsageQuery::from_params(query_params(raw)?, Utc::now())
    }

    #[test]
    fn local_dates_resolve_in_the_zone_and_misaligned_times_name_the_parameter() {
        let q = query("from=2026-11-03&to=2026-11-04&tz=Asia/Kolkata").unwrap();
        assert_eq!(q.from.to_rfc3339(), "2026-11-02T18:30:00+00:00");
        for (raw, param) in [
            ("from=2026-11-03T10:07:00Z", "`from`"),
            ("tz=Mars/Olympus", "`tz`"),
            ("group_by=user,prompt", "`group_by`"),
            ("granularity=week", "`granularity`"),
            ("from=2026-11-05&to=2026-11-04", "`from`"),
            ("colour=red", "`colour`"),
        ] {
            let err = query(raw).unwrap_err();
            assert!(err.to_string().contains(param), "{raw}: {err}");
        }
    }

    #[test]
    fn empty_values_mean_the_defaults_and_dimensions_count_once() {
        let q = query("tz=&granularity=&group_by=user,,model,user").unwrap();
        assert_eq!((q.tz, q.granularity), (Tz::UTC, Granularity::Total));
        assert_eq!(q.group_by, [Dim::User, Dim::Model]);
        assert_eq!(q.to - q.from, TimeDelta::days(30));
    }
}
