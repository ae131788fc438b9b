//! The usage sums of a read, exact whatever their size.
//!
//! Each stored rollup column is a bigint (kept so by `store::headroom`), but a sum over many rows need not
//! be one: two rows near the top already overflow. Reads therefore run with `apiary_sum` (a bigint-state
//! sum, fast — see its migration) and, when Postgres reports that a sum left the bigint range (SQLSTATE
//! 22003), run the same query again with the built-in `sum()` (128-bit state, numeric result, exact),
//! read as text into `i128`. The fallback costs only the rare query that needs it, and a tenant's reads
//! can no longer be broken for good by what it stored.
//!
//! Both forms name each sum after its column, and [`ExactSum`] decodes either (a bigint or the text of
//! the exact form), so one `FromRow` type ([`SumColumns`]) reads the rows of both.
//!
//! JSON ([`Sum`]): a sum within the 64-bit range is an exact integer; beyond it (10^19 tokens, or 18
//! billion USD in nano-dollars) it is written as a floating-point number, the nearest JSON can carry
//! without a string.

use std::sync::LazyLock;

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgRow, PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Row, Type, ValueRef};

use crate::rollups::Usage;
use crate::tool_rollups::SLOTS;

pub use crate::store::headroom::is_out_of_range;

use crate::rollups::SUM_COLUMNS as COLUMNS;

/// The sum expressions, comma-separated, each named after its column: `apiary_sum(c) AS c`, or
/// exact `sum(c)::text AS c` when `wide`.
pub fn select(wide: bool) -> String {
    COLUMNS
        .iter()
        .map(|c| {
            if wide {
                format!("sum({c})::text AS {c}")
            } else {
                format!("apiary_sum({c}) AS {c}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `tool_rollups` sums: calls, errors, timed calls and durations named after their columns, and each
/// histogram slot `i` (1-based) as `h<i>` (see [`select`] for `wide`).
pub fn tool_select(wide: bool) -> String {
    let sum = |expr: &str, name: &str| {
        if wide {
            format!("sum({expr})::text AS {name}")
        } else {
            format!("apiary_sum({expr}) AS {name}")
        }
    };
    let mut parts: Vec<String> = TOOL_COLUMNS.iter().map(|c| sum(c, c)).collect();
    parts.extend((1..=SLOTS).map(|i| sum(&format!("duration_hist[{i}]"), &format!("h{i}"))));
    parts.join(", ")
}

/// The summed columns of `tool_rollups` (the histogram apart).
pub const TOOL_COLUMNS: [&str; 4] = ["calls", "errors", "timed_calls", "duration_ms"];

/// A tool group's sums: calls, errors, timed calls, summed duration and the merged histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTotals {
    pub calls: i128,
    pub errors: i128,
    pub timed_calls: i128,
    pub duration_ms: i128,
    /// Calls per histogram slot ([`crate::tool_rollups::DURATION_BOUNDS_MS`]).
    pub hist: Vec<i128>,
}

impl ToolTotals {
    /// No call, error, duration or histogram count at all.
    pub fn is_zero(&self) -> bool {
        [self.calls, self.errors, self.timed_calls, self.duration_ms]
            .iter()
            .chain(&self.hist)
            .all(|v| *v == 0)
    }
}

/// One sum as the database answers it: a bigint (`apiary_sum`) or the text of an exact `sum()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExactSum(pub i128);

impl Type<Postgres> for ExactSum {
    fn type_info() -> PgTypeInfo {
        <i64 as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <i64 as Type<Postgres>>::compatible(ty) || <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for ExactSum {
    fn decode(value: PgValueRef<'r>) -> Result<ExactSum, BoxDynError> {
        if <i64 as Type<Postgres>>::compatible(&value.type_info()) {
            Ok(ExactSum(i128::from(<i64 as Decode<Postgres>>::decode(
                value,
            )?)))
        } else {
            Ok(ExactSum(
                <&str as Decode<Postgres>>::decode(value)?.parse()?,
            ))
        }
    }
}

/// The names a usage statement gives its sums, in the order [`select`] (and, `tools`, [`tool_select`])
/// writes them: what [`usage_at`] and [`tool_totals_at`] read by position.
pub fn names(tools: bool) -> &'static [String] {
    static USAGE: LazyLock<Vec<String>> =
        LazyLock::new(|| COLUMNS.iter().map(|c| c.to_string()).collect());
    static TOOLS: LazyLock<Vec<String>> = LazyLock::new(|| {
        TOOL_COLUMNS
            .iter()
            .map(|c| c.to_string())
            .chain((1..=SLOTS).map(|i| format!("h{i}")))
            .collect()
    });
    match tools {
        true => &TOOLS,
        false => &USAGE,
    }
}

/// One sum of `row` by position (absent, from no rows, is zero). Unchecked: the caller has checked the
/// statement's types once ([`ExactSum`]'s decoding refuses anything but a bigint or a number's text).
fn sum_at(row: &PgRow, i: usize) -> Result<i128, sqlx::Error> {
    Ok(row
        .try_get_unchecked::<Option<ExactSum>, _>(i)?
        .unwrap_or_default()
        .0)
}

/// The usage sums of `row` from column `first` on, as [`select`] names them ([`names`]; the caller has
/// checked the statement's columns against them).
pub fn usage_at(row: &PgRow, first: usize) -> Result<Usage, sqlx::Error> {
    let mut columns = [0i128; COLUMNS.len()];
    for (i, c) in columns.iter_mut().enumerate() {
        *c = sum_at(row, first + i)?;
    }
    Ok(Usage::from_columns(columns))
}

/// The tool sums of `row` from column `first` on, as [`tool_select`] names them ([`names`]).
pub fn tool_totals_at(row: &PgRow, first: usize) -> Result<ToolTotals, sqlx::Error> {
    let hist_from = first + TOOL_COLUMNS.len();
    Ok(ToolTotals {
        calls: sum_at(row, first)?,
        errors: sum_at(row, first + 1)?,
        timed_calls: sum_at(row, first + 2)?,
        duration_ms: sum_at(row, first + 3)?,
        hist: (hist_from..hist_from + SLOTS)
            .map(|i| sum_at(row, i))
            .collect::<Result<_, _>>()?,
    })
}

/// The sums of a row (absent ones, from no rows, are zero).
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct SumColumns {
    input_tokens: Option<ExactSum>,
    output_tokens: Option<ExactSum>,
    cached_tokens: Option<ExactSum>,
    cache_creation_tokens: Option<ExactSum>,
    cost_nanos: Option<ExactSum>,
    llm_calls: Option<ExactSum>,
    unpriced_turns: Option<ExactSum>,
    tool_calls: Option<ExactSum>,
    tool_errors: Option<ExactSum>,
    events: Option<ExactSum>,
    tool_duration_ms: Option<ExactSum>,
    active_ms: Option<ExactSum>,
    cost_reported_nanos: Option<ExactSum>,
    cost_estimated_nanos: Option<ExactSum>,
    estimated_turns: Option<ExactSum>,
}

impl SumColumns {
    pub fn usage(&self) -> Usage {
        let v = |s: Option<ExactSum>| s.unwrap_or_default().0;
        Usage::from_columns([
            v(self.input_tokens),
            v(self.output_tokens),
            v(self.cached_tokens),
            v(self.cache_creation_tokens),
            v(self.cost_nanos),
            v(self.llm_calls),
            v(self.unpriced_turns),
            v(self.tool_calls),
            v(self.tool_errors),
            v(self.events),
            v(self.tool_duration_ms),
            v(self.active_ms),
            v(self.cost_reported_nanos),
            v(self.cost_estimated_nanos),
            v(self.estimated_turns),
        ])
    }
}

/// A sum in JSON (exact within 64 bits, else the nearest float): the contract's.
pub use apiary_schema::usage::Sum;

#[cfg(test)]
mod tests {
    use super::*;

    fn json(v: i128) -> serde_json::Value {
        serde_json::to_value(Sum(v)).unwrap()
    }

    #[test]
    fn sums_are_exact_integers_within_64_bits_and_floats_beyond() {
        assert_eq!(json(42), serde_json::Value::from(42));
        assert_eq!(json(-3), serde_json::Value::from(-3));
        assert_eq!(
            json(i128::from(u64::MAX)),
            serde_json::Value::from(u64::MAX)
        );
        assert_eq!(
            json(i128::from(u64::MAX) * 4).as_f64(),
            Some(u64::MAX as f64 * 4.0)
        );
    }

    #[test]
    fn the_tool_sums_name_each_slot() {
        let s = tool_select(false);
        assert!(s.starts_with("apiary_sum(calls) AS calls, apiary_sum(errors) AS errors"));
        assert!(s.ends_with(&format!("apiary_sum(duration_hist[{SLOTS}]) AS h{SLOTS}")));
        assert_eq!(tool_select(true).matches("sum(").count(), 4 + SLOTS);
    }

    #[test]
    fn both_forms_name_every_column_once() {
        assert!(select(false).starts_with(
            "apiary_sum(input_tokens) AS input_tokens, apiary_sum(output_tokens) AS output_tokens"
        ));
        assert_eq!(select(true).matches("sum(").count(), 15);
        assert!(select(true).ends_with("sum(estimated_turns)::text AS estimated_turns"));
    }
}
