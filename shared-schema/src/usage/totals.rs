//! Usage totals: the exact sums ([`Usage`], `i128`, so no sum of stored 64-bit values can overflow) both
//! sides add events into, and their one wire form ([`UsageSums`]) — the `totals` of every session, tree
//! and usage answer, on the ingest's API and on the agent's local one.
//!
//! The agent's local answers fill what the device knows: costs as the runtimes reported them (the price
//! catalog's estimates are the ingest's: `cost_estimated_nanos` and `estimated_turns` read 0 there, and a
//! turn without a reported cost stays `unpriced`).

use serde::{Serialize, Serializer};

use super::contribution_of_data;
use crate::event::{CanonicalEvent, EventKind};

/// The number of sums a rollup row holds.
pub const COLUMNS: usize = 15;

/// Additive usage totals (one event's contribution, or a sum). `i128` so that no sum of bigint values
/// can overflow (see the module notes); a stored row holds each column as a bigint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: i128,
    pub output_tokens: i128,
    pub cached_tokens: i128,
    pub cache_creation_tokens: i128,
    pub cost_nanos: i128,
    pub llm_calls: i128,
    pub unpriced_turns: i128,
    pub tool_calls: i128,
    pub tool_errors: i128,
    pub events: i128,
    /// Summed durations of the completed tool calls that have one.
    pub tool_duration_ms: i128,
    /// Milliseconds in status `active` (see the module notes).
    pub active_ms: i128,
    /// The turns' costs as their producers sent them (see "Cost provenance").
    pub cost_reported_nanos: i128,
    /// The catalog's estimates of the turns a price matched.
    pub cost_estimated_nanos: i128,
    /// Turns without a reported cost whose `cost_nanos` is the estimate.
    pub estimated_turns: i128,
}

impl Usage {
    /// What one stored event adds: the shared contribution ([`contribution_of_data`]) widened to
    /// `i128`; a device-level event adds nothing (it never reaches the rollups). Err (a rejection
    /// reason) when a value is out of range.
    pub fn of(event: &CanonicalEvent) -> Result<Usage, String> {
        Usage::of_data(event.kind, &event.data)
    }

    /// [`Usage::of`] for a stored event read back: its kind and `data`.
    pub fn of_data(
        kind: EventKind,
        data: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Usage, String> {
        let Some(c) = contribution_of_data(kind, data).map_err(|e| e.to_string())? else {
            return Ok(Usage::default());
        };
        Ok(Usage {
            input_tokens: c.input_tokens.into(),
            output_tokens: c.output_tokens.into(),
            cached_tokens: c.cached_tokens.into(),
            cache_creation_tokens: c.cache_creation_tokens.into(),
            cost_nanos: c.cost_nanos.into(),
            llm_calls: c.llm_calls.into(),
            unpriced_turns: c.unpriced_turns.into(),
            tool_calls: c.tool_calls.into(),
            tool_errors: c.tool_errors.into(),
            events: c.events.into(),
            tool_duration_ms: c.tool_duration_ms.into(),
            active_ms: 0,
            cost_reported_nanos: c.cost_nanos.into(),
            cost_estimated_nanos: 0,
            estimated_turns: 0,
        })
    }

    /// This turn's usage with the catalog's `estimate` (nano-USD; None when no price matched) folded in
    /// (see "Cost provenance"). Anything but one LLM turn is returned unchanged.
    pub fn with_estimate(mut self, estimate: Option<i64>) -> Usage {
        let Some(est) = estimate.filter(|_| self.llm_calls == 1) else {
            return self;
        };
        self.cost_estimated_nanos = est.into();
        if self.unpriced_turns == 1 {
            self.cost_nanos = est.into();
            self.unpriced_turns = 0;
            self.estimated_turns = 1;
        }
        self
    }

    /// Adds `o`. Cannot overflow for sums of bigint values (fewer than 2^64 terms below 2^63 each).
    pub fn add(&mut self, o: &Usage) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_creation_tokens += o.cache_creation_tokens;
        self.cost_nanos += o.cost_nanos;
        self.llm_calls += o.llm_calls;
        self.unpriced_turns += o.unpriced_turns;
        self.tool_calls += o.tool_calls;
        self.tool_errors += o.tool_errors;
        self.events += o.events;
        self.tool_duration_ms += o.tool_duration_ms;
        self.active_ms += o.active_ms;
        self.cost_reported_nanos += o.cost_reported_nanos;
        self.cost_estimated_nanos += o.cost_estimated_nanos;
        self.estimated_turns += o.estimated_turns;
    }

    /// True when every sum is zero (a row update that changes nothing).
    pub fn is_zero(&self) -> bool {
        self.columns().iter().all(|v| *v == 0)
    }

    /// The sums in column order (input, output, cached, cache creation, cost, llm calls, unpriced, tool
    /// calls, tool errors, events, tool duration, active ms, cost reported, cost estimated, estimated
    /// turns).
    pub fn columns(&self) -> [i128; COLUMNS] {
        [
            self.input_tokens,
            self.output_tokens,
            self.cached_tokens,
            self.cache_creation_tokens,
            self.cost_nanos,
            self.llm_calls,
            self.unpriced_turns,
            self.tool_calls,
            self.tool_errors,
            self.events,
            self.tool_duration_ms,
            self.active_ms,
            self.cost_reported_nanos,
            self.cost_estimated_nanos,
            self.estimated_turns,
        ]
    }

    /// The inverse of [`Usage::columns`].
    pub fn from_columns(c: [i128; COLUMNS]) -> Usage {
        let [input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns] =
            c;
        Usage {
            input_tokens,
            output_tokens,
            cached_tokens,
            cache_creation_tokens,
            cost_nanos,
            llm_calls,
            unpriced_turns,
            tool_calls,
            tool_errors,
            events,
            tool_duration_ms,
            active_ms,
            cost_reported_nanos,
            cost_estimated_nanos,
            estimated_turns,
        }
    }

    /// Where `cost_nanos` comes from (see [`CostBasis`]).
    pub fn cost_basis(&self) -> CostBasis {
        let estimated = self.estimated_turns > 0;
        let reported = self.llm_calls - self.estimated_turns - self.unpriced_turns > 0;
        match (reported, estimated) {
            (true, false) => CostBasis::Reported,
            (false, true) => CostBasis::Estimated,
            (true, true) => CostBasis::Mixed,
            (false, false) => CostBasis::None,
        }
    }

    /// `self − o`, column by column (a re-pricing's change to a row).
    pub fn minus(&self, o: &Usage) -> Usage {
        let (a, b) = (self.columns(), o.columns());
        Usage::from_columns(std::array::from_fn(|i| a[i] - b[i]))
    }

    /// Whether every sum fits a stored (bigint) rollup column.
    pub fn fits_row(&self) -> bool {
        self.columns().iter().all(|v| i64::try_from(*v).is_ok())
    }
}

/// Where a row's `cost_nanos` comes from: only turns with a reported cost, only estimated ones, some of
/// each, or none (no turn with a known cost: the row has no LLM turns, or only unpriced ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CostBasis {
    Reported,
    Estimated,
    Mixed,
    #[default]
    None,
}

/// A sum in JSON: exact within 64 bits, else the nearest float.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sum(pub i128);

impl Serialize for Sum {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Ok(n) = i64::try_from(self.0) {
            s.serialize_i64(n)
        } else if let Ok(n) = u64::try_from(self.0) {
            s.serialize_u64(n)
        } else {
            s.serialize_f64(self.0 as f64)
        }
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Sum {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::Number)
            .description(Some(
                "An exact sum: an integer within the 64-bit range, the nearest floating-point number beyond it.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Sum {}

/// The usage sums: tokens, cost (in USD, and exactly in nano-dollars), calls, errors, tool durations,
/// events, active time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageSums {
    pub input_tokens: Sum,
    pub output_tokens: Sum,
    pub cached_tokens: Sum,
    pub cache_creation_tokens: Sum,
    /// `cost_nanos` in USD (a float: for display; `cost_nanos` is exact).
    pub cost_usd: f64,
    /// The cost: each turn's reported cost where it has one, else the price catalog's estimate.
    pub cost_nanos: Sum,
    /// `cost_reported_nanos` in USD (for display).
    pub cost_reported_usd: f64,
    /// The turns' costs as their producers reported them (as sent).
    pub cost_reported_nanos: Sum,
    /// `cost_estimated_nanos` in USD (for display).
    pub cost_estimated_usd: f64,
    /// The price catalog's estimates of every turn a price matched (reported or not).
    pub cost_estimated_nanos: Sum,
    /// Where `cost_nanos` comes from: `reported`, `estimated`, `mixed` or `none`.
    pub cost_basis: CostBasis,
    pub llm_calls: Sum,
    /// LLM turns without a reported cost whose cost is the estimate.
    pub estimated_turns: Sum,
    /// LLM turns with neither a reported cost nor an estimate.
    pub unpriced_turns: Sum,
    pub tool_calls: Sum,
    pub tool_errors: Sum,
    /// Summed durations of the completed tool calls that have one (computed on the device by pairing
    /// each call's start and completion, or reported by the runtime), in milliseconds.
    pub tool_duration_ms: Sum,
    pub events: Sum,
    /// Seconds spent in status `active` (the sessions' status histories; an active stretch still open
    /// counts up to when the no-progress rule would end it).
    pub active_seconds: f64,
}

impl From<&Usage> for UsageSums {
    fn from(u: &Usage) -> UsageSums {
        UsageSums {
            input_tokens: Sum(u.input_tokens),
            output_tokens: Sum(u.output_tokens),
            cached_tokens: Sum(u.cached_tokens),
            cache_creation_tokens: Sum(u.cache_creation_tokens),
            cost_usd: u.cost_nanos as f64 / 1e9,
            cost_nanos: Sum(u.cost_nanos),
            cost_reported_usd: u.cost_reported_nanos as f64 / 1e9,
            cost_reported_nanos: Sum(u.cost_reported_nanos),
            cost_estimated_usd: u.cost_estimated_nanos as f64 / 1e9,
            cost_estimated_nanos: Sum(u.cost_estimated_nanos),
            cost_basis: u.cost_basis(),
            llm_calls: Sum(u.llm_calls),
            estimated_turns: Sum(u.estimated_turns),
            unpriced_turns: Sum(u.unpriced_turns),
            tool_calls: Sum(u.tool_calls),
            tool_errors: Sum(u.tool_errors),
            tool_duration_ms: Sum(u.tool_duration_ms),
            events: Sum(u.events),
            active_seconds: u.active_ms as f64 / 1000.0,
        }
    }
}
