//! The metrics usage is exported as: one home for their names, units and values, so every form (the
//! Prometheus scrape, and any later push) says the same thing.
//!
//! Names follow OpenTelemetry's conventions (`apiary.token.usage`, with `gen_ai.token.type` as the GenAI
//! semantic conventions name a token's type) and become Prometheus names the way OpenTelemetry's
//! Prometheus compatibility rules say: dots to underscores, the unit appended, `_total` on counters
//! (`apiary_token_usage_tokens_total{gen_ai_token_type="input"}`).

use crate::rollups::Usage;
use crate::tool_rollups::DURATION_BOUNDS_MS;

/// A value: integers stay integers (exact), the rest are floats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i128),
    Float(f64),
}

/// One cumulative counter.
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    /// The OpenTelemetry name.
    pub otel: &'static str,
    /// The Prometheus name, without the `_total` the encoder appends.
    pub prometheus: &'static str,
    /// UCUM unit as OpenTelemetry writes it.
    pub unit: &'static str,
    pub help: &'static str,
    /// The extra attribute (name, value) telling apart the points of one counter (the token type).
    pub attribute: Option<(&'static str, &'static str)>,
    /// The value, from the usage sums.
    pub value: fn(&Usage) -> Num,
}

const TOKEN_HELP: &str = "Tokens used, by type (input, output, cached, cache_creation).";

/// Every counter, in order.
pub const COUNTERS: [Counter; 11] = [
    token("input", |u| Num::Int(u.input_tokens)),
    token("output", |u| Num::Int(u.output_tokens)),
    token("cached", |u| Num::Int(u.cached_tokens)),
    token("cache_creation", |u| Num::Int(u.cache_creation_tokens)),
    Counter {
        otel: "apiary.cost",
        prometheus: "apiary_cost_usd",
        unit: "USD",
        help: "Cost in USD: each turn's reported cost, else the price catalog's estimate (the nano-dollars / 1e9).",
        attribute: None,
        value: |u| Num::Float(u.cost_nanos as f64 / 1e9),
    },
    Counter {
        otel: "apiary.cost.nanos",
        prometheus: "apiary_cost_nanodollars",
        unit: "nUSD",
        help: "The same cost, exactly, in nano-dollars.",
        attribute: None,
        value: |u| Num::Int(u.cost_nanos),
    },
    Counter {
        otel: "apiary.llm.calls",
        prometheus: "apiary_llm_calls",
        unit: "{call}",
        help: "LLM calls (turns).",
        attribute: None,
        value: |u| Num::Int(u.llm_calls),
    },
    Counter {
        otel: "apiary.tool.calls",
        prometheus: "apiary_tool_calls",
        unit: "{call}",
        help: "Tool calls.",
        attribute: None,
        value: |u| Num::Int(u.tool_calls),
    },
    Counter {
        otel: "apiary.tool.errors",
        prometheus: "apiary_tool_errors",
        unit: "{call}",
        help: "Tool calls that failed.",
        attribute: None,
        value: |u| Num::Int(u.tool_errors),
    },
    Counter {
        otel: "apiary.tool.duration",
        prometheus: "apiary_tool_duration_seconds",
        unit: "s",
        help: "Summed durations of the completed tool calls that have one.",
        attribute: None,
        value: |u| Num::Float(u.tool_duration_ms as f64 / 1000.0),
    },
    Counter {
        otel: "apiary.events",
        prometheus: "apiary_events",
        unit: "{event}",
        help: "Events stored (each once, however often it was sent).",
        attribute: None,
        value: |u| Num::Int(u.events),
    },
];

const fn token(kind: &'static str, value: fn(&Usage) -> Num) -> Counter {
    Counter {
        otel: "apiary.token.usage",
        prometheus: "apiary_token_usage_tokens",
        unit: "{token}",
        help: TOKEN_HELP,
        attribute: Some(("gen_ai.token.type", kind)),
        value,
    }
}

/// An attribute name as a Prometheus label: dots to underscores.
pub fn label_name(attribute: &str) -> String {
    attribute.replace('.', "_")
}

/// A value of now (not a sum): sessions by status, devices online.
#[derive(Debug, Clone, Copy)]
pub struct Gauge {
    /// The OpenTelemetry name.
    pub otel: &'static str,
    /// The Prometheus name.
    pub prometheus: &'static str,
    /// UCUM unit as OpenTelemetry writes it.
    pub unit: &'static str,
    pub help: &'static str,
}

/// Sessions by their status now, labelled by `apiary.session.status` (`apiary_session_status`).
pub const SESSIONS: Gauge = Gauge {
    otel: "apiary.sessions",
    prometheus: "apiary_sessions",
    unit: "{session}",
    help: "Sessions by their status now, as GET /v1/sessions derives it.",
};

/// The attribute telling apart the points of [`SESSIONS`].
pub const STATUS_ATTRIBUTE: &str = "apiary.session.status";

/// Devices online now.
pub const DEVICES_ONLINE: Gauge = Gauge {
    otel: "apiary.devices.online",
    prometheus: "apiary_devices_online",
    unit: "{device}",
    help: "Devices heard from within offline_after_secs, as GET /v1/devices says online.",
};

/// A cumulative histogram: tool call durations.
#[derive(Debug, Clone, Copy)]
pub struct Histogram {
    /// The OpenTelemetry name.
    pub otel: &'static str,
    /// The Prometheus name, with its unit (the encoder adds `_bucket`, `_sum`, `_count`).
    pub prometheus: &'static str,
    pub unit: &'static str,
    pub help: &'static str,
}

/// Durations of completed tool calls, from the tool rollups' histograms.
pub const TOOL_DURATION: Histogram = Histogram {
    otel: "apiary.tool.call.duration",
    prometheus: "apiary_tool_call_duration_seconds",
    unit: "s",
    help: "Durations of the completed tool calls that have one (whole milliseconds; see docs/exports.md for the bucket bounds).",
};

/// The inclusive upper bounds of the exported duration buckets but the last (+Inf), in whole
/// milliseconds: 2^k − 1 for every power of two 2^k among the rollups' bounds
/// ([`DURATION_BOUNDS_MS`]). Durations are whole milliseconds, so "≤ 2^k − 1 ms" is exactly "< 2^k ms",
/// a rollup slot boundary: each exported bucket is a sum of whole slots, and its count is exact.
pub fn bucket_bounds_ms() -> Vec<i64> {
    DURATION_BOUNDS_MS
        .iter()
        .filter(|b| b.count_ones() == 1)
        .map(|b| b - 1)
        .collect()
}

/// A rollup histogram (calls per slot of [`DURATION_BOUNDS_MS`]) folded into the exported buckets:
/// one count per bound of [`bucket_bounds_ms`], then the +Inf bucket (not cumulative).
pub fn bucket_counts(hist: &[i128]) -> Vec<u64> {
    let mut out = vec![];
    let mut acc: i128 = 0;
    for (slot, count) in hist.iter().enumerate() {
        acc += count;
        // Slot `slot` holds the durations below DURATION_BOUNDS_MS[slot]: a bucket closes there when
        // that bound is a power of two.
        if DURATION_BOUNDS_MS
            .get(slot)
            .is_some_and(|b| b.count_ones() == 1)
        {
            out.push(u64::try_from(acc.max(0)).unwrap_or(u64::MAX));
            acc = 0;
        }
    }
    out.push(u64::try_from(acc.max(0)).unwrap_or(u64::MAX));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_rollups::{slot, SLOTS};

    #[test]
    fn exported_buckets_hold_exactly_the_durations_at_or_below_their_bound() {
        let bounds = bucket_bounds_ms();
        assert_eq!(bounds.len(), 27, "{bounds:?}");
        assert_eq!(&bounds[..4], &[0, 1, 3, 7]);
        assert_eq!(*bounds.last().unwrap(), 67_108_863);
        for ms in [
            0,
            1,
            2,
            3,
            4,
            7,
            8,
            1000,
            1023,
            1024,
            67_108_863,
            67_108_864,
            i64::MAX,
        ] {
            let mut hist = vec![0i128; SLOTS];
            hist[slot(ms)] += 1;
            let counts = bucket_counts(&hist);
            assert_eq!(counts.len(), bounds.len() + 1);
            let at = counts.iter().position(|c| *c == 1).unwrap();
            let want = bounds.iter().position(|b| ms <= *b).unwrap_or(bounds.len());
            assert_eq!(at, want, "{ms} ms");
        }
    }
}
