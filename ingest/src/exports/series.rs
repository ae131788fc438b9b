//! The metrics usage is exported as: one home for their names, units and values, so every form (the
//! Prometheus scrape, and any later push) says the same thing.
//!
//! Names follow OpenTelemetry's conventions (`apiary.token.usage`, with `gen_ai.token.type` as the GenAI
//! semantic conventions name a token's type) and become Prometheus names the way OpenTelemetry's
//! Prometheus compatibility rules say: dots to underscores, the unit appended, `_total` on counters
//! (`apiary_token_usage_tokens_total{gen_ai_token_type="input"}`).

use crate::rollups::Usage;

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
