//! The usage answer as types: what `/v1/usage` (and a session's or colony's usage) returns, and the sums
//! every session read carries. The OpenAPI schemas are derived from these same types.

use serde::Serialize;
use utoipa::ToSchema;

use super::{Dim, Granularity, UsageQuery, UsageRow};
use crate::query::sums::Sum;
use crate::rollups::Usage;
use crate::tool_rollups::percentile;

/// The usage sums every usage and session answer carries: the contract's.
pub use apiary_schema::usage::UsageSums;

/// One row: its bucket, the key of each grouped dimension (a field is present only when grouped by
/// it; null stands for "none"), and the sums.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageRowBody {
    /// The bucket's start in the requested zone (RFC 3339); the range's start for totals.
    pub bucket: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colony_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Option<String>>,
    /// Grouped by tool: the tool's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<Option<String>>,
    #[serde(flatten)]
    pub sums: UsageSums,
    /// Grouped by tool: the completed calls that have a duration (what the percentiles are of).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls_timed: Option<Sum>,
    /// Grouped by tool: the median duration of its timed calls in milliseconds, from the rollups'
    /// duration histogram (in the exact median's histogram bucket; see docs/usage.md); null without a
    /// timed call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_duration_p50_ms: Option<Option<i64>>,
    /// Grouped by tool: the 95th percentile, likewise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_duration_p95_ms: Option<Option<i64>>,
}

/// The usage answer: the range and grouping it answers, its rows (sorted by bucket, then keys) and
/// their totals.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageResponse {
    /// RFC 3339, in the requested zone.
    pub from: String,
    /// Exclusive; RFC 3339, in the requested zone.
    pub to: String,
    /// The IANA zone of the buckets.
    pub tz: String,
    pub granularity: Granularity,
    /// The grouped dimensions, as the rows' field names.
    pub group_by: Vec<Dim>,
    pub rows: Vec<UsageRowBody>,
    /// The sums of the whole range (of every page, when the answer is paged).
    pub totals: UsageSums,
    /// Asked for in pages (`limit`): the next page's `cursor`, null after the last page. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub next_cursor: Option<Option<String>>,
}

impl UsageResponse {
    /// The answer to `q` from its rows.
    pub fn new(q: &UsageQuery, rows: &[UsageRow]) -> UsageResponse {
        let mut totals = Usage::default();
        let rows = rows
            .iter()
            .map(|r| {
                totals.add(&r.usage);
                row_body(q, r)
            })
            .collect();
        UsageResponse {
            from: q.from.with_timezone(&q.tz).to_rfc3339(),
            to: q.to.with_timezone(&q.tz).to_rfc3339(),
            tz: q.tz.name().to_string(),
            granularity: q.granularity,
            group_by: q.group_by.clone(),
            rows,
            totals: UsageSums::from(&totals),
            next_cursor: None,
        }
    }
}

fn row_body(q: &UsageQuery, r: &UsageRow) -> UsageRowBody {
    let mut body = UsageRowBody {
        bucket: r.bucket.unwrap_or(q.from).with_timezone(&q.tz).to_rfc3339(),
        tenant_id: None,
        user_id: None,
        model: None,
        colony_id: None,
        session_id: None,
        device_id: None,
        runtime: None,
        tool_name: None,
        sums: UsageSums::from(&r.usage),
        tool_calls_timed: None,
        tool_duration_p50_ms: None,
        tool_duration_p95_ms: None,
    };
    if let Some(t) = &r.tool {
        body.tool_calls_timed = Some(Sum(t.timed_calls));
        body.tool_duration_p50_ms = Some(percentile(&t.hist, 0.5));
        body.tool_duration_p95_ms = Some(percentile(&t.hist, 0.95));
    }
    for (d, k) in q.group_by.iter().zip(&r.keys) {
        let v = Some((!k.is_empty()).then(|| k.clone()));
        match d {
            Dim::Tenant => body.tenant_id = v,
            Dim::User => body.user_id = v,
            Dim::Model => body.model = v,
            Dim::Colony => body.colony_id = v,
            Dim::Session => body.session_id = v,
            Dim::Device => body.device_id = v,
            Dim::Runtime => body.runtime = v,
            Dim::Tool => body.tool_name = v,
        }
    }
    body
}

/// A session's usage: the usage answer and the session's id.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionUsage {
    pub session_id: String,
    #[serde(flatten)]
    pub usage: UsageResponse,
}

/// A colony's usage: the usage answer and the colony's id.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ColonyUsage {
    pub colony_id: String,
    #[serde(flatten)]
    pub usage: UsageResponse,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    #[test]
    fn a_row_names_only_its_grouped_dimensions_and_an_empty_key_is_null() {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let q = UsageQuery {
            from: t("2026-11-01T00:00:00Z"),
            to: t("2026-11-02T00:00:00Z"),
            group_by: vec![Dim::User, Dim::Model],
            granularity: Granularity::Day,
            tz: "Asia/Kolkata".parse().unwrap(),
        };
        let usage = Usage {
            input_tokens: 7,
            cost_nanos: 1_500_000_000,
            events: 2,
            ..Usage::default()
        };
        let rows = [UsageRow {
            bucket: Some(t("2026-10-31T18:30:00Z")),
            keys: vec![String::new(), "m".into()],
            usage,
            tool: None,
        }];
        let v = serde_json::to_value(UsageResponse::new(&q, &rows)).unwrap();
        assert_eq!(v["group_by"], serde_json::json!(["user_id", "model"]));
        assert_eq!(v["granularity"], "day");
        assert_eq!(v["from"], "2026-11-01T05:30:00+05:30");
        let row = v["rows"][0].as_object().unwrap();
        assert_eq!(row["bucket"], "2026-11-01T00:00:00+05:30");
        assert_eq!(row["user_id"], serde_json::Value::Null);
        assert_eq!(row["model"], "m");
        assert!(!row.contains_key("session_id"));
        assert_eq!(
            (row["input_tokens"].as_i64(), row["cost_usd"].as_f64()),
            (Some(7), Some(1.5))
        );
        assert_eq!(v["totals"]["events"], 2);
    }
}
