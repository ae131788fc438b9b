//! What one canonical event adds to usage: the single rule both the agent's local usage table and the
//! ingest's rollups apply ([`contribution_of`]).
//!
//! ## The rule
//! - Device-level events (`agent.heartbeat`, `outbox.dropped`) add nothing: usage counts what the
//!   runtimes did, not the agent's own bookkeeping ([`contribution_of`] returns `Ok(None)`).
//! - Every other event: `events` + 1, keyed by `model` (`""` unless it is an `llm.turn`).
//! - `llm.turn`: `llm_calls` + 1 and its tokens. `cached_tokens` and `cache_creation_tokens` are already
//!   *included in* `input_tokens`; they are summed in their own columns and never added to input again.
//!   A token count above [`MAX_TOKENS`] is a producer bug: the event is refused ([`UsageError`]).
//! - Cost is integer nano-USD ([`cost_nanos`]): the decimal serde_json writes for `cost_usd` (shortest
//!   round-trip digits), rounded half away from zero at the 9th decimal, exactly as Postgres'
//!   `round(x::numeric * 1e9)` would. Integer sums are exact and order-independent; an f64 sum is not
//!   (ten turns of 0.1 USD sum to 0.9999999999999999). Negative, non-finite or above [`MAX_COST_USD`]
//!   is refused.
//! - Credits (Hive's own unit, optional) are integer micro-credits by the same decimal rule at the 6th
//!   decimal, refused when negative or above [`MAX_CREDITS`]. They are part of the contribution so that
//!   the device's sums are exact too; the ingest does not keep them (it has no credits column yet).
//! - Unpriced turns — ONE rule, the ingest's: a turn is unpriced when `cost_source` is `unreported`; when
//!   it has another `cost_source`, it is priced; without `cost_source`, it is unpriced when it has no
//!   `cost_usd`, or a zero cost with input or output tokens. A zero-cost turn without tokens consumed
//!   nothing, so it is free, not unpriced — this is also what the Hive adapter says (`cost_source =
//!   reported` for it).
//! - `tool.call`: `status = started` adds `tool_calls_started`; `status = completed` adds `tool_calls`, and
//!   `tool_errors` when `is_error` is true, and its `duration_ms` (the runtime's own, or the one the agent
//!   computed by pairing the call's start and completion) to `tool_duration_ms`; `tool_calls_timed` counts
//!   the completed calls that have one. A duration above [`MAX_DURATION_MS`] is refused like a token count.
//!
//! ## Bounds
//! One event's values are bounded (tokens ≤ 10^12, cost ≤ 10^15 nano-USD, credits ≤ 10^15 micro), so a
//! [`Contribution`] is `i64`; sums of many may not be, and each side sums in the width it stores.

use crate::event::{CanonicalEvent, EventKind};

mod stream;
mod totals;
pub use stream::StreamUsage;
pub use totals::{CostBasis, Sum, Usage, UsageSums, COLUMNS};

/// Largest token count accepted in one event (a bigger one is a producer bug, refused).
pub const MAX_TOKENS: u64 = 1_000_000_000_000;
/// Largest cost accepted in one event, in USD.
pub const MAX_COST_USD: f64 = 1_000_000.0;
/// Largest credit amount accepted in one event.
pub const MAX_CREDITS: f64 = 1_000_000_000.0;
/// Largest tool-call duration accepted in one event, in milliseconds (about 31 years: a bigger one is a
/// producer bug, refused).
pub const MAX_DURATION_MS: u64 = 1_000_000_000_000;

/// What one event adds to usage (see the module notes). Every count is 0 or 1 except tokens, cost and
/// credits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Contribution {
    /// The model of an `llm.turn` (`""` for any other event, or a turn without a model).
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    /// Cost in nano-USD (10^-9 USD).
    pub cost_nanos: i64,
    /// Credits in micro-credits (10^-6).
    pub credits_micros: i64,
    pub llm_calls: i64,
    pub unpriced_turns: i64,
    pub tool_calls_started: i64,
    /// Completed tool calls.
    pub tool_calls: i64,
    pub tool_errors: i64,
    /// The completed call's duration in milliseconds (0 without one).
    pub tool_duration_ms: i64,
    /// 1 for a completed call with a duration.
    pub tool_calls_timed: i64,
    /// Always 1: the event itself.
    pub events: i64,
}

/// Why an event's usage cannot be counted: a value out of range. The event is refused, never clamped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// A token count above [`MAX_TOKENS`]; names the `data` key.
    #[error("data.{0} is out of range")]
    Tokens(&'static str),
    #[error("data.cost_usd is out of range")]
    Cost,
    #[error("data.credits is out of range")]
    Credits,
    #[error("data.duration_ms is out of range")]
    Duration,
}

/// The usage `event` contributes; `Ok(None)` for device-level events, Err when a value is out of range.
pub fn contribution_of(event: &CanonicalEvent) -> Result<Option<Contribution>, UsageError> {
    contribution_of_data(event.kind, &event.data)
}

/// [`contribution_of`] for an event of `kind` with `data` (a stored event read back, e.g. to re-price
/// it): the same rule.
pub fn contribution_of_data(
    kind: EventKind,
    data: &serde_json::Map<String, serde_json::Value>,
) -> Result<Option<Contribution>, UsageError> {
    if kind.is_device_level() {
        return Ok(None);
    }
    let mut c = Contribution {
        events: 1,
        ..Contribution::default()
    };
    match kind {
        EventKind::LlmTurn => llm_turn(data, &mut c)?,
        EventKind::ToolCall => match data.get("status").and_then(serde_json::Value::as_str) {
            Some("started") => c.tool_calls_started = 1,
            Some("completed") => {
                c.tool_calls = 1;
                let is_error = data.get("is_error").and_then(serde_json::Value::as_bool);
                c.tool_errors = i64::from(is_error == Some(true));
                if let Some(ms) = duration_ms(data)? {
                    c.tool_duration_ms = ms;
                    c.tool_calls_timed = 1;
                }
            }
            _ => {}
        },
        _ => {}
    }
    Ok(Some(c))
}

/// A completed call's `duration_ms`: None when absent (or not a non-negative integer, which the policy
/// never lets through), Err above [`MAX_DURATION_MS`].
pub fn tool_duration_ms(event: &CanonicalEvent) -> Result<Option<i64>, UsageError> {
    duration_ms(&event.data)
}

fn duration_ms(
    data: &serde_json::Map<String, serde_json::Value>,
) -> Result<Option<i64>, UsageError> {
    match data.get("duration_ms").and_then(serde_json::Value::as_u64) {
        None => Ok(None),
        Some(ms) if ms > MAX_DURATION_MS => Err(UsageError::Duration),
        Some(ms) => Ok(Some(ms as i64)),
    }
}

fn llm_turn(
    data: &serde_json::Map<String, serde_json::Value>,
    c: &mut Contribution,
) -> Result<(), UsageError> {
    let text = |key: &str| data.get(key).and_then(serde_json::Value::as_str);
    let tokens = |key: &'static str| -> Result<i64, UsageError> {
        let n = data
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if n > MAX_TOKENS {
            return Err(UsageError::Tokens(key));
        }
        Ok(n as i64)
    };
    c.model = text("model").unwrap_or("").to_string();
    c.llm_calls = 1;
    c.input_tokens = tokens("input_tokens")?;
    c.output_tokens = tokens("output_tokens")?;
    c.cached_tokens = tokens("cached_tokens")?;
    c.cache_creation_tokens = tokens("cache_creation_tokens")?;
    let number = |key: &str| data.get(key).and_then(serde_json::Value::as_f64);
    let cost = number("cost_usd");
    if let Some(x) = cost {
        c.cost_nanos = cost_nanos(x).ok_or(UsageError::Cost)?;
    }
    if let Some(x) = number("credits") {
        c.credits_micros = credits_micros(x).ok_or(UsageError::Credits)?;
    }
    let unpriced = match text("cost_source") {
        Some("unreported") => true,
        Some(_) => false,
        None => cost.is_none() || (c.cost_nanos == 0 && c.input_tokens + c.output_tokens > 0),
    };
    c.unpriced_turns = i64::from(unpriced);
    Ok(())
}

/// USD → nano-USD for one event's cost (see the module notes). None when negative, not finite or above
/// [`MAX_COST_USD`].
pub fn cost_nanos(usd: f64) -> Option<i64> {
    if !usd.is_finite() || !(0.0..=MAX_COST_USD).contains(&usd) {
        return None;
    }
    decimal_units(usd, 9)
}

/// Credits → micro-credits for one event. None when negative, not finite or above [`MAX_CREDITS`].
pub fn credits_micros(credits: f64) -> Option<i64> {
    if !credits.is_finite() || !(0.0..=MAX_CREDITS).contains(&credits) {
        return None;
    }
    decimal_units(credits, 6)
}

/// `x` in units of 10^-`decimals`: the shortest round-trip decimal of `x` (what serde_json writes),
/// rounded half away from zero at that decimal. None when not finite or beyond `i64`. Also used to
/// convert stored f64 sums (which may exceed one event's bounds) to integers.
pub fn decimal_units(x: f64, decimals: u32) -> Option<i64> {
    if !x.is_finite() {
        return None;
    }
    // `Display` for f64 never uses an exponent: the digits are the shortest that round-trip.
    let text = format!("{}", x.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let scale = 10i64.checked_pow(decimals)?;
    let mut units = int.parse::<i64>().ok()?.checked_mul(scale)?;
    let digits: Vec<i64> = frac.bytes().map(|b| i64::from(b - b'0')).collect();
    let mut place = scale / 10;
    for d in digits.iter().take(decimals as usize) {
        units = units.checked_add(d * place)?;
        place /= 10;
    }
    if digits.get(decimals as usize).is_some_and(|d| *d >= 5) {
        units = units.checked_add(1)?;
    }
    Some(if x < 0.0 { -units } else { units })
}

/// Nano-USD → USD as f64, for outputs that print `cost_usd` (the exact value is the integer).
pub fn nanos_to_usd(nanos: i64) -> f64 {
    nanos as f64 / 1e9
}

#[cfg(test)]
mod tests;
