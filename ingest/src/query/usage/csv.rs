//! The usage answer as CSV, for spreadsheets: the same [`UsageResponse`] the JSON carries, one line per
//! row, nothing added (no totals line: a sheet sums its column and gets the JSON's `totals`).
//!
//! - RFC 4180: a header row, CRLF line ends, a field quoted (its `"` doubled) when it holds a comma, a
//!   quote, CR or LF.
//! - Columns: `bucket` (RFC 3339 in the query's zone), the grouped dimensions by their JSON field names
//!   (an empty cell for "none"), then the sums in the JSON's order. `cost_usd` (and its reported and
//!   estimated siblings) is the exact decimal of the nano-dollars (`0.000001234`), not the JSON's float;
//!   the `*_nanos` columns beside it are the integers.
//! - Formula injection (OWASP, "CSV Injection"): a text cell (a dimension key: a user, a model, a tool
//!   name) that starts with `=`, `+`, `-`, `@`, a tab or a CR is written with a leading `'` and quoted,
//!   so a spreadsheet shows it as text instead of evaluating it. Numeric cells are never changed (a
//!   negative number stays a number).

use std::fmt::Write;

use super::body::{UsageResponse, UsageRowBody, UsageSums};
use super::{Dim, Granularity};
use crate::query::sums::Sum;

/// The media type of the answer (RFC 7111 names `header=present`).
pub const CONTENT_TYPE: &str = "text/csv; charset=utf-8; header=present";

/// The sum columns, in the JSON's order.
pub const SUM_COLUMNS: [&str; 19] = [
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_creation_tokens",
    "cost_usd",
    "cost_nanos",
    "cost_reported_usd",
    "cost_reported_nanos",
    "cost_estimated_usd",
    "cost_estimated_nanos",
    "cost_basis",
    "llm_calls",
    "estimated_turns",
    "unpriced_turns",
    "tool_calls",
    "tool_errors",
    "tool_duration_ms",
    "events",
    "active_seconds",
];

/// The columns only a `group_by=tool` answer has.
const TOOL_COLUMNS: [&str; 3] = [
    "tool_calls_timed",
    "tool_duration_p50_ms",
    "tool_duration_p95_ms",
];

/// The whole answer as CSV text.
pub fn render(r: &UsageResponse) -> String {
    let tools = r.group_by.contains(&Dim::Tool);
    let mut out = String::new();
    let mut header: Vec<&str> = vec!["bucket"];
    header.extend(r.group_by.iter().map(|d| d.field()));
    header.extend(SUM_COLUMNS);
    if tools {
        header.extend(TOOL_COLUMNS);
    }
    line(&mut out, header.into_iter().map(str::to_string));
    for row in &r.rows {
        let mut cells = vec![row.bucket.clone()];
        cells.extend(r.group_by.iter().map(|d| text_cell(key(row, *d))));
        cells.extend(sum_cells(&row.sums));
        if tools {
            cells.push(row.tool_calls_timed.unwrap_or_default().0.to_string());
            for p in [row.tool_duration_p50_ms, row.tool_duration_p95_ms] {
                cells.push(p.flatten().map(|v| v.to_string()).unwrap_or_default());
            }
        }
        line(&mut out, cells.into_iter());
    }
    out
}

/// A file name for the answer: `usage-<from date>-<granularity>.csv`.
pub fn file_name(r: &UsageResponse, what: &str) -> String {
    let day = r.from.get(..10).unwrap_or("all");
    let g = match r.granularity {
        Granularity::Hour => "hourly",
        Granularity::Day => "daily",
        Granularity::Month => "monthly",
        Granularity::Total => "total",
    };
    format!("{what}-{day}-{g}.csv")
}

/// The cells of the sums, in [`SUM_COLUMNS`] order.
pub fn sum_cells(s: &UsageSums) -> Vec<String> {
    let n = |v: Sum| v.0.to_string();
    vec![
        n(s.input_tokens),
        n(s.output_tokens),
        n(s.cached_tokens),
        n(s.cache_creation_tokens),
        usd(s.cost_nanos.0),
        n(s.cost_nanos),
        usd(s.cost_reported_nanos.0),
        n(s.cost_reported_nanos),
        usd(s.cost_estimated_nanos.0),
        n(s.cost_estimated_nanos),
        serde_json::to_value(s.cost_basis)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        n(s.llm_calls),
        n(s.estimated_turns),
        n(s.unpriced_turns),
        n(s.tool_calls),
        n(s.tool_errors),
        n(s.tool_duration_ms),
        n(s.events),
        s.active_seconds.to_string(),
    ]
}

/// Nano-dollars as an exact decimal of dollars: `1234` → `0.000001234`.
pub fn usd(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let a = nanos.unsigned_abs();
    format!("{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000)
}

fn key(row: &UsageRowBody, d: Dim) -> &str {
    let k = match d {
        Dim::Tenant => &row.tenant_id,
        Dim::User => &row.user_id,
        Dim::Model => &row.model,
        Dim::Colony => &row.colony_id,
        Dim::Session => &row.session_id,
        Dim::Device => &row.device_id,
        Dim::Runtime => &row.runtime,
        Dim::Tool => &row.tool_name,
    };
    k.as_ref().and_then(|v| v.as_deref()).unwrap_or("")
}

/// A text cell a spreadsheet will not evaluate: a leading `'` before a formula's first character.
pub fn text_cell(s: &str) -> String {
    if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_string()
    }
}

/// Appends one CSV line (quoting as RFC 4180 asks, and every neutralised formula cell).
pub fn line(out: &mut String, cells: impl Iterator<Item = String>) {
    for (i, c) in cells.enumerate() {
        if i > 0 {
            out.push(',');
        }
        if c.contains([',', '"', '\r', '\n']) || c.starts_with('\'') {
            let _ = write!(out, "\"{}\"", c.replace('"', "\"\""));
        } else {
            out.push_str(&c);
        }
    }
    out.push_str("\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nano_dollars_read_as_exact_decimals() {
        assert_eq!(usd(0), "0.000000000");
        assert_eq!(usd(1_234), "0.000001234");
        assert_eq!(usd(1_500_000_000), "1.500000000");
        assert_eq!(usd(-7), "-0.000000007");
        assert_eq!(usd(i128::from(i64::MAX) * 4), "36893488147.419103228");
    }

    #[test]
    fn formulas_are_neutralised_and_separators_quoted() {
        let mut out = String::new();
        let cells = ["=1+2", "-x", "@SUM(A1)", "a,b", "say \"hi\"", "plain", "+1"];
        line(&mut out, cells.iter().map(|c| text_cell(c)));
        assert_eq!(
            out,
            "\"'=1+2\",\"'-x\",\"'@SUM(A1)\",\"a,b\",\"say \"\"hi\"\"\",plain,\"'+1\"\r\n"
        );
    }
}
