//! The OpenTelemetry adapter: decoded OTLP requests (`opentelemetry_proto` messages) in, canonical events
//! (not yet redacted) or per-record verdicts out. Pure: [`wire`] decodes bodies, [`genai`] maps spans
//! that follow the GenAI semantic conventions, [`claude`] maps Claude Code's log events. Every event then
//! goes through the same redaction as Hive's ([`crate::pipeline::process_otlp`]).
//!
//! ## Mapping rules (docs/opentelemetry.md has the same table)
//!
//! | input | becomes | rule |
//! |---|---|---|
//! | span, `gen_ai.operation.name` = `chat`, `generate_content`, `text_completion` (older OpenLLMetry: `llm.request.type` = `chat`/`completion`) | `llm.turn` | model = `gen_ai.response.model`, else `gen_ai.request.model`; provider = `gen_ai.provider.name`, else the deprecated `gen_ai.system`, else from the model name; input = `gen_ai.usage.input_tokens`, else the deprecated `gen_ai.usage.prompt_tokens`; output = `gen_ai.usage.output_tokens`, else `gen_ai.usage.completion_tokens`; cached = `gen_ai.usage.cache_read.input_tokens`, else `gen_ai.usage.cache_read_input_tokens`; cache creation = `gen_ai.usage.cache_creation.input_tokens`, else `gen_ai.usage.cache_creation_input_tokens`; reasoning = `gen_ai.usage.reasoning.output_tokens`, else `gen_ai.usage.reasoning_tokens`; cost = `gen_ai.usage.cost` (OpenLIT) when present, else unreported; stop_reason = first of `gen_ai.response.finish_reasons` (`error` when the span failed without one); latency_ms = end − start |
//! | span, `execute_tool` | `tool.call` (completed) | tool_name = `gen_ai.tool.name`, tool_use_id = `gen_ai.tool.call.id`, is_error = span status ERROR or `error.type` set, duration_ms = end − start |
//! | span, `invoke_agent` | `execution` (completed/failed) | agent_name = `gen_ai.agent.name`; its token attributes are **never read**: they aggregate the inference spans under it, which are counted themselves |
//! | span, `create_agent`, `embeddings`, any other operation, spans without one | filtered (`not_durable`) | |
//! | span from `service.name` = `claude-code` | filtered (`not_durable`) | Claude Code's beta traces repeat its `api_request` events; the events are the usage source |
//! | log `claude_code.api_request` | `llm.turn` | model, cost_usd (reported), output = `output_tokens`, cached = `cache_read_tokens`, cache creation = `cache_creation_tokens`, **input = `input_tokens` + `cache_read_tokens` + `cache_creation_tokens`** (Anthropic's `input_tokens` excludes the cache; Apiary's includes it), latency_ms = `duration_ms`, provider `anthropic` |
//! | log `claude_code.tool_result` | `tool.call` (completed) | tool_name, tool_use_id, is_error = `success` is false, duration_ms |
//! | log `claude_code.api_error` / `api_refusal` / `compaction` | `health.signal` | signal `api_error` (status_code, attempt) / `refusal` / `compacted` |
//! | every other `claude_code.*` log (`user_prompt`, `assistant_response`, `tool_decision`, `api_request_body`, `api_response_body`, `api_retries_exhausted`, hooks, plugins, skills, auth, MCP connections, ...) | filtered (`not_durable`) | content, or no usage or status meaning (`api_retries_exhausted` comes with the final `api_error`) |
//! | any other log record (GenAI content events included) | filtered (`not_durable`) | |
//! | every metric data point (Claude Code's `claude_code.token.usage`, `cost.usage`, ...) | filtered (`not_durable`) | they repeat the events as DELTA counters that collide across processes: usage is never derived from metrics |
//!
//! Input tokens of GenAI spans are taken as the conventions define them (cache reads and writes
//! *included*); a span whose input is smaller than its cache reads plus writes cannot include them, so
//! they are added (an instrumentation that passes Anthropic's `input_tokens` through).
//!
//! ## Identity
//! - `runtime`: `claude_code` for Claude Code's events, `otel` for GenAI spans (with `data.service_name`
//!   = the resource's `service.name`).
//! - session: spans — `gen_ai.conversation.id`, else `session.id` (span, then resource), else the trace id;
//!   never inherited from a parent span (a parent may arrive in another export). Claude Code —
//!   `session.id`; a log event without one is filtered (`no_session`). Role: queen (top-level session).
//! - `trace_id`: the span's or log record's trace id (hex), else Claude Code's `prompt.id`.
//! - `event_id` = UUID v5 ([`OTEL_NAMESPACE`]) over the producer's own identity, never the payload: a span
//!   — its trace id and span id; `api_request`, `api_error`, `api_refusal` — the event name and
//!   `request_id`; `tool_result` — `tool_use_id`; else `session.id` + `event.sequence` + the record's time + the event
//!   name (the sequence restarts when a resumed session runs in a new process);
//!   only a record with none of these falls back to its time and attributes. So a retried export, or the
//!   same record sent twice, is stored once.
//! - time: a span's end (else start); a log record's `time_unix_nano`, else `observed_time_unix_nano`,
//!   else its `event.timestamp` attribute.
//!
//! ## Claude Code's documented attributes this relies on (monitoring documentation)
//! Log records carry the event name as body (`claude_code.api_request`) and `event.name`
//! (`api_request`); standard attributes `session.id`, `user.id`, `user.email`, `user.account_uuid`,
//! `organization.id`, `terminal.type`, `prompt.id`; `event.sequence`, `event.timestamp`. `api_request`:
//! `model`, `cost_usd`, `duration_ms`, `input_tokens`, `output_tokens`, `cache_read_tokens`,
//! `cache_creation_tokens`, `request_id`. `tool_result`: `tool_name`, `tool_use_id`, `success`
//! (`"true"`/`"false"`), `duration_ms`, `error`, `tool_parameters`, `tool_input`. `api_error`: `model`,
//! `error`, `status_code`, `duration_ms`, `attempt`, `request_id`. Only the fields named in the table are
//! read; everything else (prompts, tool parameters and inputs, errors, e-mail, account ids) is dropped by
//! the policy before disk like any unlisted field — the adapter does not even copy it.
//!
//! ## Verdicts
//! Each span, log record and metric data point ends as one [`Record`]: an event, filtered with a reason,
//! or rejected (unreadable: no valid ids, no time, a token count that is not a number) with a reason
//! naming the attribute, never its value.

pub mod attrs;
pub mod claude;
pub mod genai;
pub mod wire;

#[cfg(test)]
mod tests;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::event::CanonicalEvent;
use crate::hive::FilterReason;

pub use wire::{decode, Bounds, DecodeError, Encoding, Request, Signal};

/// Namespace of OTLP event ids (UUID v5). Never change it: ids would stop deduplicating.
pub const OTEL_NAMESPACE: Uuid = Uuid::from_u128(0x3c9e_41d7_8a2b_4f06_b5e1_7d20_c4a9_e815);

/// What became of one span, log record or data point.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // the event is the common case
pub enum Record {
    /// Durable: a canonical event, not yet redacted.
    Event(CanonicalEvent),
    /// Not durable; counted only.
    Filtered {
        native_type: String,
        reason: FilterReason,
    },
    /// Unreadable: counted as rejected (OTLP `partial_success`), with the reason.
    Rejected { index: u64, reason: String },
}

/// Maps every record of a request, in order.
pub fn map_request(request: &Request) -> Vec<Record> {
    match request {
        Request::Traces(r) => genai::map_traces(r),
        Request::Logs(r) => claude::map_logs(r),
        Request::Metrics(r) => metric_points(r),
    }
}

/// Every metric data point is filtered: usage comes from events, never from metrics (see the table).
fn metric_points(
    request: &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
) -> Vec<Record> {
    let n = wire::data_points(request);
    (0..n)
        .map(|_| Record::Filtered {
            native_type: "otel.metric".into(),
            reason: FilterReason::NotDurable,
        })
        .collect()
}

/// The deterministic id of an OTLP record from the parts of its own identity.
pub fn event_id(parts: &[&str]) -> Uuid {
    Uuid::new_v5(&OTEL_NAMESPACE, parts.join("\u{1f}").as_bytes())
}

/// UNIX nanoseconds as UTC; `None` for 0 (unknown) or out of range.
pub fn time_of(nanos: u64) -> Option<DateTime<Utc>> {
    if nanos == 0 {
        return None;
    }
    let secs = i64::try_from(nanos / 1_000_000_000).ok()?;
    DateTime::from_timestamp(secs, (nanos % 1_000_000_000) as u32)
}

/// A trace or span id as lowercase hex; `None` when empty or all zeros (invalid in OTLP).
pub fn hex_id(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty() && bytes.iter().any(|b| *b != 0)).then(|| hex::encode(bytes))
}
