//! The usage answer as types: what `/v1/usage` (and a session's or colony's usage) returns, and the sums
//! every session read carries. The OpenAPI schemas are derived from these same types.

use chrono::{DateTime, Utc};
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
        // Rows come sorted by bucket: each bucket's label is formatted once, not per row.
        let mut label: Option<(DateTime<Utc>, String)> = None;
        let rows = rows
            .iter()
            .map(|r| {
                totals.add(&r.usage);
                let at = r.bucket.unwrap_or(q.from);
                let bucket = match &label {
                    Some((t, text)) if *t == at => text.clone(),
                    _ => {
                        let text = at.with_timezone(&q.tz).to_rfc3339();
                        label = Some((at, text.clone()));
                        text
                    }
                };
                row_body(&q.group_by, r, bucket)
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

/// Row `r` of an answer grouped by `group_by`, under its bucket's label.
fn row_body(group_by: &[Dim], r: &UsageRow, bucket: String) -> UsageRowBody {
    let mut body = UsageRowBody {
        bucket,
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
    for (d, k) in group_by.iter().zip(&r.keys) {
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

/// A usage answer as JSON — alone, or after a session's or colony's id — written field by field: the
/// same bytes as its derived `Serialize` (the tests hold them equal), each value through `serde_json`,
/// each key as the constant text it is. The derived code (a map per row for the flattened sums, every
/// key escaped) took about a fifth of the server's time for a large answer.
pub trait UsageJson {
    /// The usage answer it carries.
    fn usage(&self) -> &UsageResponse;
    /// Appends the JSON object to `out`.
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()>;
}

/// Appends `,"key":` (without the comma for an object's first field).
fn key(out: &mut Vec<u8>, key: &str, first: bool) {
    if !first {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

/// Appends `,"key":value`.
fn field<T: Serialize + ?Sized>(out: &mut Vec<u8>, k: &str, v: &T) -> serde_json::Result<()> {
    key(out, k, false);
    serde_json::to_writer(&mut *out, v)
}

/// Appends `,"key":value` when `v` is present (a field serde skips when `None`).
fn present<T: Serialize>(out: &mut Vec<u8>, k: &str, v: &Option<T>) -> serde_json::Result<()> {
    match v {
        Some(v) => field(out, k, v),
        None => Ok(()),
    }
}

/// Appends the sums' fields in [`UsageSums`]' order, each after a comma but the first when `first`.
fn write_sums(out: &mut Vec<u8>, s: &UsageSums, first: bool) -> serde_json::Result<()> {
    key(out, "input_tokens", first);
    serde_json::to_writer(&mut *out, &s.input_tokens)?;
    field(out, "output_tokens", &s.output_tokens)?;
    field(out, "cached_tokens", &s.cached_tokens)?;
    field(out, "cache_creation_tokens", &s.cache_creation_tokens)?;
    field(out, "cost_usd", &s.cost_usd)?;
    field(out, "cost_nanos", &s.cost_nanos)?;
    field(out, "cost_reported_usd", &s.cost_reported_usd)?;
    field(out, "cost_reported_nanos", &s.cost_reported_nanos)?;
    field(out, "cost_estimated_usd", &s.cost_estimated_usd)?;
    field(out, "cost_estimated_nanos", &s.cost_estimated_nanos)?;
    field(out, "cost_basis", &s.cost_basis)?;
    field(out, "llm_calls", &s.llm_calls)?;
    field(out, "estimated_turns", &s.estimated_turns)?;
    field(out, "unpriced_turns", &s.unpriced_turns)?;
    field(out, "tool_calls", &s.tool_calls)?;
    field(out, "tool_errors", &s.tool_errors)?;
    field(out, "tool_duration_ms", &s.tool_duration_ms)?;
    field(out, "events", &s.events)?;
    field(out, "active_seconds", &s.active_seconds)
}

impl UsageRowBody {
    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        key(out, "bucket", true);
        serde_json::to_writer(&mut *out, &self.bucket)?;
        present(out, "tenant_id", &self.tenant_id)?;
        present(out, "user_id", &self.user_id)?;
        present(out, "model", &self.model)?;
        present(out, "colony_id", &self.colony_id)?;
        present(out, "session_id", &self.session_id)?;
        present(out, "device_id", &self.device_id)?;
        present(out, "runtime", &self.runtime)?;
        present(out, "tool_name", &self.tool_name)?;
        write_sums(out, &self.sums, false)?;
        present(out, "tool_calls_timed", &self.tool_calls_timed)?;
        present(out, "tool_duration_p50_ms", &self.tool_duration_p50_ms)?;
        present(out, "tool_duration_p95_ms", &self.tool_duration_p95_ms)?;
        out.push(b'}');
        Ok(())
    }
}

impl UsageResponse {
    /// The answer's fields, each after a comma but the first when `first` (an object that starts with
    /// its own field has it after that).
    fn write_fields(&self, out: &mut Vec<u8>, first: bool) -> serde_json::Result<()> {
        key(out, "from", first);
        serde_json::to_writer(&mut *out, &self.from)?;
        field(out, "to", &self.to)?;
        field(out, "tz", &self.tz)?;
        field(out, "granularity", &self.granularity)?;
        field(out, "group_by", &self.group_by)?;
        key(out, "rows", false);
        out.push(b'[');
        for (i, r) in self.rows.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            r.write_json(out)?;
        }
        out.push(b']');
        key(out, "totals", false);
        out.push(b'{');
        write_sums(out, &self.totals, true)?;
        out.push(b'}');
        present(out, "next_cursor", &self.next_cursor)
    }
}

impl UsageResponse {
    /// The answer as an object whose first field is `id_key`: `id` (a session's or colony's usage,
    /// which flatten the answer after their id).
    fn write_after(&self, out: &mut Vec<u8>, id_key: &str, id: &str) -> serde_json::Result<()> {
        out.push(b'{');
        key(out, id_key, true);
        serde_json::to_writer(&mut *out, id)?;
        self.write_fields(out, false)?;
        out.push(b'}');
        Ok(())
    }
}

impl UsageJson for UsageResponse {
    fn usage(&self) -> &UsageResponse {
        self
    }

    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.push(b'{');
        self.write_fields(out, true)?;
        out.push(b'}');
        Ok(())
    }
}

impl UsageJson for SessionUsage {
    fn usage(&self) -> &UsageResponse {
        &self.usage
    }

    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        self.usage.write_after(out, "session_id", &self.session_id)
    }
}

impl UsageJson for ColonyUsage {
    fn usage(&self) -> &UsageResponse {
        &self.usage
    }

    fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        self.usage.write_after(out, "colony_id", &self.colony_id)
    }
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

    use proptest::prelude::*;

    /// Any sum: small, past i64 (an exact sum of many rows), negative (a moved unit's short side).
    fn any_sum() -> impl Strategy<Value = i128> {
        prop_oneof![
            0i128..1_000_000,
            any::<i64>().prop_map(i128::from),
            -(1i128 << 100)..(1i128 << 100),
            Just(i128::from(u64::MAX) + 1),
        ]
    }

    fn any_usage() -> impl Strategy<Value = Usage> {
        proptest::collection::vec(any_sum(), crate::rollups::COLUMNS)
            .prop_map(|v| Usage::from_columns(v.try_into().unwrap()))
    }

    /// A key: empty (null), plain, or with quotes, escapes, controls and non-ASCII.
    fn any_key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[a-z0-9_-]{1,12}",
            "\\PC{0,8}",
            ".{0,6}"
        ]
    }

    prop_compose! {
        fn any_answer()(
            group_by in proptest::sample::subsequence(Dim::ALL.to_vec(), 0..=3),
            granularity in prop_oneof![
                Just(Granularity::Hour), Just(Granularity::Day), Just(Granularity::Month), Just(Granularity::Total)
            ],
            rows in proptest::collection::vec(
                (0i64..3_000_000, proptest::collection::vec(any_key(), 3), any_usage(),
                 proptest::option::of((any_sum(), proptest::collection::vec(0i128..50, crate::tool_rollups::SLOTS)))),
                0..6),
            cursor in proptest::option::of(proptest::option::of("[a-z0-9.]{0,20}")),
            tz in prop_oneof![Just("UTC"), Just("America/New_York"), Just("Asia/Kolkata")],
        ) -> UsageResponse {
            let from: chrono::DateTime<chrono::Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
            let q = UsageQuery {
                from,
                to: from + chrono::TimeDelta::days(40),
                group_by: group_by.clone(),
                granularity,
                tz: tz.parse().unwrap(),
            };
            let rows: Vec<UsageRow> = rows
                .into_iter()
                .map(|(secs, keys, usage, tool)| UsageRow {
                    bucket: (granularity != Granularity::Total)
                        .then(|| from + chrono::TimeDelta::seconds(secs)),
                    keys: keys.into_iter().take(group_by.len()).collect(),
                    usage,
                    tool: tool.map(|(timed, hist)| crate::query::sums::ToolTotals {
                        calls: usage.tool_calls,
                        errors: usage.tool_errors,
                        timed_calls: timed,
                        duration_ms: usage.tool_duration_ms,
                        hist,
                    }),
                })
                .collect();
            let mut answer = UsageResponse::new(&q, &rows);
            answer.next_cursor = cursor;
            answer
        }
    }

    fn written<T: UsageJson>(v: &T) -> String {
        let mut out = vec![];
        v.write_json(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    proptest! {
        /// The answer written field by field is the derived serialisation byte for byte, alone and
        /// after a session's or colony's id.
        #[test]
        fn the_written_answer_is_the_derived_one(answer in any_answer(), id in any_key()) {
            prop_assert_eq!(written(&answer), serde_json::to_string(&answer).unwrap());
            let session = SessionUsage { session_id: id.clone(), usage: answer.clone() };
            prop_assert_eq!(written(&session), serde_json::to_string(&session).unwrap());
            let colony = ColonyUsage { colony_id: id, usage: answer };
            prop_assert_eq!(written(&colony), serde_json::to_string(&colony).unwrap());
        }
    }
}
