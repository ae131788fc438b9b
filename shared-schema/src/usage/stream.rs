//! The live streams' `usage` event data ([`StreamUsage`]): the ingest's `GET /v1/stream` and the agent's
//! local one send the same fields, so a client reads either with one parser.
//!
//! The ingest writes it in SQL (each row is encoded once for every subscriber, see its stream module);
//! this type is what that SQL must produce and what its OpenAPI document shows. The agent serialises it
//! from its local usage table, with what the device knows: costs as the runtimes reported them
//! (`cost_reported_nanos` is `cost_nanos`; `cost_estimated_nanos` and `estimated_turns` read 0, as in
//! [`super::UsageSums`] on the agent).

use serde::{Deserialize, Serialize};

/// `event: usage`: the session's usage TOTALS after the change (not the delta), at most once a second
/// per session; the same sums as `/v1/usage` rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamUsage {
    pub session_id: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    pub cost_nanos: i64,
    pub cost_usd: f64,
    pub unpriced_turns: i64,
    /// The turns' costs as their producers sent them (see `/v1/usage`).
    pub cost_reported_nanos: i64,
    /// The price catalog's estimates.
    pub cost_estimated_nanos: i64,
    /// Turns whose cost is the estimate.
    pub estimated_turns: i64,
    pub llm_calls: i64,
    pub tool_calls: i64,
    pub tool_errors: i64,
    pub tool_duration_ms: i64,
    pub events: i64,
    pub active_seconds: f64,
}
