//! The usage routes' query string ([`UsageParams`]) and the value types of its parameters, each parsing
//! its own text (the extractor names the parameter when one fails).

use std::str::FromStr;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use chrono_tz::Tz;
use serde::Deserialize;
use utoipa::IntoParams;

use super::page::{question_digest, Cursor, Paging, MAX_ROWS};
use super::{Dim, Granularity};
use crate::query::params::{parsed, Limit};

/// The `group_by` parameter: comma-separated dimensions, each once, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupBy(pub Vec<Dim>);

impl FromStr for GroupBy {
    type Err = String;

    fn from_str(s: &str) -> Result<GroupBy, String> {
        let mut dims = vec![];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let d = Dim::parse(part).ok_or_else(|| {
                format!(
                    "{part:?} is not one of tenant, user, model, colony, session, device, runtime, tool"
                )
            })?;
            if !dims.contains(&d) {
                dims.push(d);
            }
        }
        Ok(GroupBy(dims))
    }
}

/// The `tz` parameter: an IANA zone (empty: UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone(pub Tz);

impl FromStr for Zone {
    type Err = String;

    fn from_str(s: &str) -> Result<Zone, String> {
        if s.is_empty() {
            return Ok(Zone(Tz::UTC));
        }
        s.parse()
            .map(Zone)
            .map_err(|_| format!("{s:?} is not an IANA time zone"))
    }
}

/// A `from` / `to` value before the zone is known: an instant, or a local date-time in `tz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    /// RFC 3339.
    Instant(DateTime<Utc>),
    /// `YYYY-MM-DD` (local midnight) or `YYYY-MM-DDTHH:MM:SS` without an offset.
    Local(NaiveDateTime),
}

impl FromStr for TimeArg {
    type Err = String;

    fn from_str(s: &str) -> Result<TimeArg, String> {
        if let Ok(t) = DateTime::parse_from_rfc3339(s) {
            Ok(TimeArg::Instant(t.with_timezone(&Utc)))
        } else if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
            Ok(TimeArg::Local(d.and_hms_opt(0, 0, 0).expect("midnight")))
        } else if let Ok(n) = NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S") {
            Ok(TimeArg::Local(n))
        } else {
            Err(format!(
                "{s:?} is not an RFC 3339 time or a YYYY-MM-DD date"
            ))
        }
    }
}

/// The `format` parameter: the answer's form. Without it the `Accept` header chooses (see
/// [`crate::routes::negotiate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnswerFormat {
    Json,
    Csv,
}

impl FromStr for AnswerFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<AnswerFormat, String> {
        match s {
            "json" => Ok(AnswerFormat::Json),
            "csv" => Ok(AnswerFormat::Csv),
            _ => Err(format!("{s:?} is not one of json, csv")),
        }
    }
}

/// The query string of the usage routes (`/v1/usage`, and a session's or colony's usage).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// RFC 3339 time or YYYY-MM-DD (local midnight in tz); on a 15-minute boundary. Default: `to` minus
    /// 30 days (for a session or colony: all time).
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub from: Option<TimeArg>,
    /// Exclusive end, same forms. Default: the next 15-minute boundary.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub to: Option<TimeArg>,
    /// Comma-separated: tenant, user, model, colony, session, device, runtime, tool. A tenant's token (any
    /// scope, admin included) reads its own tenant only: grouped by tenant it answers that one row. An
    /// operator token reads every tenant and must group by tenant, optionally with model; other
    /// dimensions are refused (400). `tool` gives per tool name the completed calls, errors, summed and
    /// p50/p95 durations (it cannot be combined with model).
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub group_by: Option<GroupBy>,
    /// Bucket size (default total).
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<Granularity>)]
    pub granularity: Option<Granularity>,
    /// IANA zone for buckets, e.g. Asia/Kolkata. Default UTC.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub tz: Option<Zone>,
    /// `json` (the default) or `csv` (RFC 4180, a header row, exact decimal costs; see docs/exports.md).
    /// Without it, `Accept: text/csv` asks for CSV too.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<AnswerFormat>)]
    pub format: Option<AnswerFormat>,
    /// Rows per page, 1 to 100000: the answer comes in pages, each with `next_cursor` (null after the
    /// last; `totals` are the whole range's on every page). Without it the answer is whole, and refused
    /// (422 `too_many_rows`) past 100000 rows.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100000)]
    pub limit: Option<Limit<MAX_ROWS>>,
    /// The `next_cursor` of the previous page, with the same `from`, `to`, `tz`, `granularity` and
    /// `group_by` (a cursor of another question is a 400).
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub cursor: Option<Cursor>,
}

impl UsageParams {
    /// The page asked for, if any; a cursor without `limit` is a 400.
    pub fn paging(&self) -> Result<Option<Paging>, crate::error::ApiError> {
        match (self.limit, &self.cursor) {
            (Some(Limit(limit)), after) => Ok(Some(Paging {
                limit,
                after: after.clone(),
                question: question_digest(&format!(
                    "{:?}|{:?}|{:?}|{:?}|{:?}",
                    self.from, self.to, self.tz, self.granularity, self.group_by
                )),
            })),
            (None, Some(_)) => Err(crate::error::ApiError::bad_param(
                "cursor",
                "is only read with `limit` (the page size)",
            )),
            (None, None) => Ok(None),
        }
    }
}
