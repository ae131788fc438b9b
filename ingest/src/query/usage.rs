//! Usage queries over `usage_rollups`: parameters, SQL, and JSON rows.
//!
//! Buckets: the rollup's 15-minute buckets are folded into hour, day or month buckets of the requested
//! zone: the bucket starts are computed in Rust ([`super::buckets`], the semantics of Postgres'
//! `date_trunc(unit, t, tz)`, correct across DST changes — a local day may be 23 or 25 hours long) and
//! each row finds its bucket with `width_bucket` against that sorted array. Exact in every zone because
//! every UTC offset in use is a multiple of 15 minutes; `from` and `to` must therefore fall on 15-minute
//! boundaries. A range longer than two months is first clamped to the rows' extent (one index probe),
//! so the array stays short.
//!
//! Two rollups: a tenant-wide query reads `usage_rollups_hourly` for every whole UTC hour that no bucket
//! boundary cuts and `usage_rollups` (15 minutes) for the rest ([`Split`]): in a whole-hour zone that is
//! hourly rows only, for a day or month in a half- or quarter-hour zone one cut hour per bucket; hour
//! buckets in such a zone, and session or colony scopes (small, with their own index), read quarter rows
//! only. Both tables hold the same sums (written together), so the answer is the same either way.
//!
//! Sums use `apiary_sum` (a bigint-state sum, see its migration): Postgres' `sum(bigint)` allocates a
//! numeric state per group, which dominated queries with thousands of groups. A sum past the bigint
//! range re-runs the query with exact sums ([`super::sums`]).
//!
//! Rows come back sorted by bucket then group keys (sorted here, not by the database).
//!
//! Who sees what ([`Within`]): a [`TenantRead`] sums only its tenant's rows (and only its user's, for a
//! user-bound `read` token); `group_by=tenant` then answers that one tenant. Only an [`OperatorRead`]
//! (an operator token) sums across tenants, and only grouped by tenant, optionally by model too
//! ([`OPERATOR_DIMS`]).

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, NaiveDate, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use serde_json::{json, Map, Value};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::access::{OperatorRead, TenantRead};
use crate::error::ApiError;
use crate::rollups::{self, Usage};

use super::buckets::{self, Unit};
use super::sums;

/// A dimension to group by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Tenant,
    User,
    Model,
    Colony,
    Session,
    Device,
}

impl Dim {
    fn parse(s: &str) -> Option<Dim> {
        Some(match s {
            "tenant" => Dim::Tenant,
            "user" => Dim::User,
            "model" => Dim::Model,
            "colony" => Dim::Colony,
            "session" => Dim::Session,
            "device" => Dim::Device,
            _ => return None,
        })
    }
    /// (SQL expression, JSON field name)
    fn column(self) -> (&'static str, &'static str) {
        match self {
            Dim::Tenant => ("tenant_id::text", "tenant_id"),
            Dim::User => ("user_id", "user_id"),
            Dim::Model => ("model", "model"),
            Dim::Colony => ("colony_id", "colony_id"),
            Dim::Session => ("session_id", "session_id"),
            Dim::Device => ("device_id", "device_id"),
        }
    }
}

/// Bucket size of the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Hour,
    Day,
    Month,
    Total,
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
#[derive(Debug, Clone)]
pub enum Part {
    /// All of it.
    Whole,
    /// These sessions.
    Sessions(Vec<String>),
    /// One colony's workers.
    Colony(String),
}

/// The dimensions an operator may group by: tenant (required) and model. A tenant's users, sessions,
/// colonies and devices are the tenant's business, not the operator's.
pub const OPERATOR_DIMS: [Dim; 2] = [Dim::Tenant, Dim::Model];

/// 400 unless `group_by` is what an operator may ask for.
fn check_operator_dims(group_by: &[Dim]) -> Result<(), ApiError> {
    if !group_by.contains(&Dim::Tenant) || group_by.iter().any(|d| !OPERATOR_DIMS.contains(d)) {
        return Err(ApiError::bad_param(
            "group_by",
            "an operator token reads usage per tenant: group by tenant, optionally with model",
        ));
    }
    Ok(())
}

/// A parsed usage request.
#[derive(Debug, Clone)]
pub struct UsageQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: Vec<Dim>,
    pub granularity: Granularity,
    pub tz: Tz,
}

impl UsageQuery {
    /// Parses `from`, `to`, `group_by`, `granularity`, `tz`; a bad one is a 400 naming it.
    pub fn parse(p: &BTreeMap<String, String>, now: DateTime<Utc>) -> Result<UsageQuery, ApiError> {
        for k in p.keys() {
            if !["from", "to", "group_by", "granularity", "tz"].contains(&k.as_str()) {
                return Err(ApiError::bad_param(k, "unknown parameter"));
            }
        }
        let tz: Tz = match p.get("tz").map(String::as_str) {
            None | Some("") => Tz::UTC,
            Some(s) => s.parse().map_err(|_| {
                ApiError::bad_param("tz", format!("{s:?} is not an IANA time zone"))
            })?,
        };
        let granularity = match p.get("granularity").map(String::as_str) {
            None | Some("") | Some("total") => Granularity::Total,
            Some("hour") => Granularity::Hour,
            Some("day") => Granularity::Day,
            Some("month") => Granularity::Month,
            Some(s) => {
                return Err(ApiError::bad_param(
                    "granularity",
                    format!("{s:?} is not one of hour, day, month, total"),
                ))
            }
        };
        let mut group_by = vec![];
        for part in p
            .get("group_by")
            .map(String::as_str)
            .unwrap_or("")
            .split(',')
        {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let d = Dim::parse(part).ok_or_else(|| {
                ApiError::bad_param(
                    "group_by",
                    format!("{part:?} is not one of tenant, user, model, colony, session, device"),
                )
            })?;
            if !group_by.contains(&d) {
                group_by.push(d);
            }
        }
        let quarter = TimeDelta::minutes(15);
        let default_to = now.duration_trunc(quarter).expect("in range") + quarter;
        let to = match p.get("to") {
            Some(s) => parse_time("to", s, tz)?,
            None => default_to,
        };
        let from = match p.get("from") {
            Some(s) => parse_time("from", s, tz)?,
            None => to - TimeDelta::days(30),
        };
        if from >= to {
            return Err(ApiError::bad_param("from", "must be before `to`"));
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
            granularity,
            tz,
        })
    }
}

/// RFC 3339, or a local date / date-time in `tz`; must fall on a 15-minute boundary.
fn parse_time(name: &str, s: &str, tz: Tz) -> Result<DateTime<Utc>, ApiError> {
    let local = |n: NaiveDateTime| {
        tz.from_local_datetime(&n)
            .earliest()
            .map(|t| t.with_timezone(&Utc))
            .ok_or_else(|| {
                ApiError::bad_param(name, format!("{s:?} does not exist in {tz} (DST gap)"))
            })
    };
    let t = if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        t.with_timezone(&Utc)
    } else if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        local(d.and_hms_opt(0, 0, 0).expect("midnight"))?
    } else if let Ok(n) = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S") {
        local(n)?
    } else {
        return Err(ApiError::bad_param(
            name,
            format!("{s:?} is not an RFC 3339 time or a YYYY-MM-DD date"),
        ));
    };
    if t.duration_trunc(TimeDelta::minutes(15)).ok() != Some(t) {
        return Err(ApiError::bad_param(
            name,
            "must fall on a 15-minute boundary (the rollup grain)",
        ));
    }
    Ok(t)
}

/// One answer row: the bucket start, the group keys, and the sums.
#[derive(Debug, Clone)]
pub struct UsageRow {
    pub bucket: Option<DateTime<Utc>>,
    pub keys: Vec<String>,
    pub usage: Usage,
}

/// The rollup columns a usage query reads.
const COLUMNS: &str = "bucket, tenant_id, user_id, device_id, colony_id, session_id, model, input_tokens, \
    output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, \
    tool_errors, events";

/// How a tenant-wide query splits `[from, to)` between the two rollups: hourly rows for the whole UTC
/// hours `[hour_from, hour_to)` except `cut_hours` (hours a bucket boundary falls inside, e.g. the
/// 18:00 UTC hour of a day in Asia/Kolkata), and the 15-minute rows `quarters` for everything else (the
/// partial hours at both ends and the cut hours).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Split {
    hour_from: DateTime<Utc>,
    hour_to: DateTime<Utc>,
    cut_hours: Vec<DateTime<Utc>>,
    quarters: Vec<DateTime<Utc>>,
}

impl Split {
    /// None when quarter rows alone are the better plan: no whole hour in the range, or boundaries
    /// cut more than a quarter of the hours (hour buckets in a half- or quarter-hour zone).
    fn of(from: DateTime<Utc>, to: DateTime<Utc>, starts: &[DateTime<Utc>]) -> Option<Split> {
        let hour = TimeDelta::hours(1);
        let quarter = TimeDelta::minutes(15);
        let hour_from = from.duration_round_up(hour).ok()?;
        let hour_to = to.duration_trunc(hour).ok()?;
        if hour_from >= hour_to {
            return None;
        }
        let mut cut_hours: Vec<DateTime<Utc>> = starts
            .iter()
            .filter(|s| **s > hour_from && **s < hour_to && rollups::hour_of(**s) != **s)
            .map(|s| rollups::hour_of(*s))
            .collect();
        cut_hours.dedup();
        if cut_hours.len() as i64 * 4 > (hour_to - hour_from).num_hours() {
            return None;
        }
        let mut quarters = vec![];
        let mut push_range = |a: DateTime<Utc>, b: DateTime<Utc>| {
            let mut t = a;
            while t < b {
                quarters.push(t);
                t += quarter;
            }
        };
        push_range(from, hour_from);
        for h in &cut_hours {
            push_range(*h, *h + hour);
        }
        push_range(hour_to, to);
        Some(Split {
            hour_from,
            hour_to,
            cut_hours,
            quarters,
        })
    }
}

/// Longest range whose buckets are computed without first asking for the data's extent.
const MAX_UNCLAMPED: TimeDelta = TimeDelta::days(62);

/// Runs the query over the usage `within` allows (see [`Within`]).
pub async fn run(
    pool: &PgPool,
    within: Within<'_>,
    q: &UsageQuery,
) -> Result<Vec<UsageRow>, ApiError> {
    let (tenant_id, part, user): (Option<Uuid>, &Part, Option<&str>) = match within {
        Within::Tenant(r, part) => (Some(r.tenant_id()), part, r.user()),
        Within::AllTenants(_) => {
            check_operator_dims(&q.group_by)?;
            (None, &Part::Whole, None)
        }
    };
    let mut cond = String::from(match tenant_id {
        Some(_) => "tenant_id = $1",
        None => "$1::uuid IS NULL",
    });
    cond.push_str(" AND bucket >= $2 AND bucket < $3");
    cond.push_str(match part {
        Part::Whole => " AND $4::text[] IS NULL",
        Part::Sessions(_) => " AND session_id = ANY($4::text[])",
        Part::Colony(_) => " AND colony_id = ($4::text[])[1]",
    });
    cond.push_str(match user {
        Some(_) => " AND user_id = $5",
        None => " AND $5::text IS NULL",
    });
    let filter: Option<Vec<String>> = match part {
        Part::Whole => None,
        Part::Sessions(s) => Some(s.clone()),
        Part::Colony(c) => Some(vec![c.clone()]),
    };
    let unit = match q.granularity {
        Granularity::Hour => Some(Unit::Hour),
        Granularity::Day => Some(Unit::Day),
        Granularity::Month => Some(Unit::Month),
        Granularity::Total => None,
    };
    let (mut from, mut to) = (q.from, q.to);
    if unit.is_some() && to - from > MAX_UNCLAMPED {
        // Buckets only where there are rows: a long range with little data stays cheap.
        let extent: (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = sqlx::query_as(&format!(
            "SELECT min(bucket), max(bucket) FROM usage_rollups WHERE {cond}"
        ))
        .bind(tenant_id)
        .bind(from)
        .bind(to)
        .bind(&filter)
        .bind(user)
        .fetch_one(pool)
        .await?;
        let (Some(first), Some(last)) = extent else {
            return Ok(vec![]);
        };
        (from, to) = (from.max(first), to.min(last + TimeDelta::minutes(15)));
    }
    let buckets = unit.map(|u| buckets::buckets(u, q.tz, from, to));
    let starts: Vec<DateTime<Utc>> = match &buckets {
        Some(b) => b.starts.clone(),
        None => vec![from],
    };
    let split = match (tenant_id, part) {
        (Some(_), Part::Whole) => Split::of(from, to, &starts),
        _ => None,
    };
    let bucket = match &buckets {
        Some(_) => "width_bucket(bucket, $6::timestamptz[])",
        None => "0 + cardinality($6::timestamptz[])",
    };
    let dims: Vec<&str> = q.group_by.iter().map(|d| d.column().0).collect();
    let dim_list: String = dims.iter().map(|d| format!(", {d}")).collect();
    let group: String = (2..dims.len() + 2).map(|i| format!(", {i}")).collect();
    let source = match &split {
        // Whole hours no bucket boundary cuts from the hourly rollup, the rest from quarter rows.
        Some(_) => format!(
            "(SELECT {COLUMNS} FROM usage_rollups_hourly WHERE {} AND bucket >= $7 AND bucket < $8 \
               AND bucket <> ALL($9::timestamptz[]) \
             UNION ALL \
             SELECT {COLUMNS} FROM usage_rollups WHERE {} AND bucket = ANY($10::timestamptz[])) AS r",
            cond.replace(" AND bucket >= $2 AND bucket < $3", ""),
            cond.replace(" AND bucket >= $2 AND bucket < $3", ""),
        ),
        None => format!("(SELECT {COLUMNS} FROM usage_rollups WHERE {cond}) AS r"),
    };
    let mut rows = vec![];
    for wide in [false, true] {
        let sql = format!(
            "SELECT {bucket} AS b{dim_list}, {} FROM {source} GROUP BY 1{group}",
            sums::select(wide)
        );
        let mut query = sqlx::query(&sql)
            .bind(tenant_id)
            .bind(from)
            .bind(to)
            .bind(&filter)
            .bind(user)
            .bind(if buckets.is_some() {
                &starts[..]
            } else {
                &[][..]
            });
        if let Some(split) = &split {
            query = query
                .bind(split.hour_from)
                .bind(split.hour_to)
                .bind(&split.cut_hours)
                .bind(&split.quarters);
        }
        match query.fetch_all(pool).await {
            Ok(r) => {
                rows = r;
                break;
            }
            Err(e) if !wide && sums::is_out_of_range(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let n = dims.len();
    let mut out = rows
        .iter()
        .map(|r| {
            let keys = (0..n)
                .map(|i| r.try_get::<String, _>(i + 1))
                .collect::<Result<Vec<_>, _>>()?;
            let index: i32 = r.try_get(0)?;
            // width_bucket is 1-based; every row is at or after starts[0] (= the range's start).
            let bucket = buckets
                .as_ref()
                .map(|b| b.labels[(index.max(1) as usize - 1).min(b.labels.len() - 1)]);
            Ok(UsageRow {
                bucket,
                keys,
                usage: sums::usage_at(r, n + 1)?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(ApiError::from)?;
    out.sort_unstable_by(|a, b| (a.bucket, &a.keys).cmp(&(b.bucket, &b.keys)));
    Ok(out)
}

/// The sums as JSON (cost in USD, and exactly in nano-dollars).
pub fn usage_json(u: &Usage) -> Map<String, Value> {
    let n = sums::json_number;
    let v = json!({
        "input_tokens": n(u.input_tokens), "output_tokens": n(u.output_tokens),
        "cached_tokens": n(u.cached_tokens), "cache_creation_tokens": n(u.cache_creation_tokens),
        "cost_usd": u.cost_nanos as f64 / 1e9, "cost_nanos": n(u.cost_nanos), "llm_calls": n(u.llm_calls),
        "unpriced_turns": n(u.unpriced_turns), "tool_calls": n(u.tool_calls),
        "tool_errors": n(u.tool_errors), "events": n(u.events),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("a JSON object literal"),
    }
}

/// The response body: rows (bucket in the requested zone, keys, sums) and totals.
pub fn response_json(q: &UsageQuery, rows: &[UsageRow]) -> Value {
    let mut totals = Usage::default();
    let out: Vec<Value> = rows
        .iter()
        .map(|r| {
            totals.add(&r.usage);
            let mut m = Map::new();
            let bucket = r.bucket.unwrap_or(q.from).with_timezone(&q.tz).to_rfc3339();
            m.insert("bucket".into(), bucket.into());
            for (d, k) in q.group_by.iter().zip(&r.keys) {
                let v = if k.is_empty() {
                    Value::Null
                } else {
                    Value::String(k.clone())
                };
                m.insert(d.column().1.into(), v);
            }
            m.extend(usage_json(&r.usage));
            Value::Object(m)
        })
        .collect();
    let gran = match q.granularity {
        Granularity::Hour => "hour",
        Granularity::Day => "day",
        Granularity::Month => "month",
        Granularity::Total => "total",
    };
    let group: Vec<&str> = q.group_by.iter().map(|d| d.column().1).collect();
    json!({
        "from": q.from.with_timezone(&q.tz).to_rfc3339(), "to": q.to.with_timezone(&q.tz).to_rfc3339(),
        "tz": q.tz.name(), "granularity": gran, "group_by": group, "rows": out, "totals": usage_json(&totals),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn whole_hours_come_from_the_hourly_rollup_and_cut_hours_from_quarters() {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        // Days in Asia/Kolkata start at 18:30 UTC: that hour is cut, the others are whole.
        let starts = [
            t("2026-11-01T10:15:00Z"),
            t("2026-11-01T18:30:00Z"),
            t("2026-11-02T18:30:00Z"),
        ];
        let s = Split::of(starts[0], t("2026-11-03T12:45:00Z"), &starts).unwrap();
        assert_eq!(
            (s.hour_from, s.hour_to),
            (t("2026-11-01T11:00:00Z"), t("2026-11-03T12:00:00Z"))
        );
        assert_eq!(
            s.cut_hours,
            vec![t("2026-11-01T18:00:00Z"), t("2026-11-02T18:00:00Z")]
        );
        assert_eq!(s.quarters.len(), 3 + 4 + 4 + 3);
        assert_eq!(s.quarters[0], starts[0]);
        // Hour buckets of a half-hour zone cut every hour: quarter rows only.
        let halves: Vec<DateTime<Utc>> = (0..48)
            .map(|h| t("2026-11-01T00:30:00Z") + TimeDelta::hours(h))
            .collect();
        assert_eq!(
            Split::of(halves[0], t("2026-11-03T00:30:00Z"), &halves),
            None
        );
    }

    #[test]
    fn local_dates_resolve_in_the_zone_and_misaligned_times_name_the_parameter() {
        let now = Utc::now();
        let q = UsageQuery::parse(
            &params(&[
                ("from", "2026-11-03"),
                ("to", "2026-11-04"),
                ("tz", "Asia/Kolkata"),
            ]),
            now,
        )
        .unwrap();
        assert_eq!(q.from.to_rfc3339(), "2026-11-02T18:30:00+00:00");
        let err = UsageQuery::parse(&params(&[("from", "2026-11-03T10:07:00Z")]), now).unwrap_err();
        assert!(err.to_string().contains("`from`"), "{err}");
        let err = UsageQuery::parse(&params(&[("tz", "Mars/Olympus")]), now).unwrap_err();
        assert!(err.to_string().contains("`tz`"), "{err}");
        let err = UsageQuery::parse(&params(&[("group_by", "user,prompt")]), now).unwrap_err();
        assert!(err.to_string().contains("`group_by`"), "{err}");
    }
}
