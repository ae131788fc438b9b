//! The ten usage sums of a read, exact whatever their size.
//!
//! Each stored rollup column is a bigint (kept so by `store::headroom`), but a sum over many rows need not
//! be one: two rows near the top already overflow. Reads therefore run with `apiary_sum` (a bigint-state
//! sum, fast — see its migration) and, when Postgres reports that a sum left the bigint range (SQLSTATE
//! 22003), run the same query again with the built-in `sum()` (128-bit state, numeric result, exact),
//! read as text into `i128`. The fallback costs only the rare query that needs it, and a tenant's reads
//! can no longer be broken for good by what it stored.
//!
//! JSON: a sum within the 64-bit range is an exact integer; beyond it (10^19 tokens, or 18 billion USD in
//! nano-dollars) it is written as a floating-point number, the nearest JSON can carry without a
//! string.

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::rollups::Usage;

pub use crate::store::headroom::is_out_of_range;

/// The rollup columns, in [`Usage::columns`] order.
const COLUMNS: [&str; 10] = [
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_creation_tokens",
    "cost_nanos",
    "llm_calls",
    "unpriced_turns",
    "tool_calls",
    "tool_errors",
    "events",
];

/// The ten sum expressions, comma-separated: `apiary_sum(c)`, or exact `sum(c)::text` when `wide`.
pub fn select(wide: bool) -> String {
    COLUMNS
        .iter()
        .map(|c| {
            if wide {
                format!("sum({c})::text")
            } else {
                format!("apiary_sum({c})")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The ten sums of `row` starting at column `first` (bigint, or text from the exact fallback).
pub fn usage_at(row: &PgRow, first: usize) -> Result<Usage, sqlx::Error> {
    let mut cols = [0i128; 10];
    for (i, c) in cols.iter_mut().enumerate() {
        let at = first + i;
        *c = match row.try_get::<Option<i64>, _>(at) {
            Ok(v) => i128::from(v.unwrap_or(0)),
            Err(_) => match row.try_get::<Option<String>, _>(at)? {
                None => 0,
                Some(t) => t.parse().map_err(|e| sqlx::Error::ColumnDecode {
                    index: at.to_string(),
                    source: Box::new(e),
                })?,
            },
        };
    }
    Ok(Usage::from_columns(cols))
}

/// A sum as a JSON number: exact within 64 bits, else the nearest float.
pub fn json_number(v: i128) -> Value {
    if let Ok(n) = i64::try_from(v) {
        Value::from(n)
    } else if let Ok(n) = u64::try_from(v) {
        Value::from(n)
    } else {
        Value::from(v as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_exact_integers_within_64_bits_and_floats_beyond() {
        assert_eq!(json_number(42), Value::from(42));
        assert_eq!(json_number(i128::from(u64::MAX)), Value::from(u64::MAX));
        assert_eq!(
            json_number(i128::from(u64::MAX) * 4).as_f64(),
            Some(u64::MAX as f64 * 4.0)
        );
    }

    #[test]
    fn both_forms_name_every_column_once() {
        assert!(select(false).starts_with("apiary_sum(input_tokens), apiary_sum(output_tokens)"));
        assert_eq!(select(true).matches("sum(").count(), 10);
        assert!(select(true).ends_with("sum(events)::text"));
    }
}
