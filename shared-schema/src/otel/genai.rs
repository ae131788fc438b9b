//! Spans that follow the OpenTelemetry GenAI semantic conventions → `llm.turn`, `tool.call`, `execution`
//! (see the table in [`super`]). Attribute names relied on, current first, deprecated after:
//! `gen_ai.operation.name` (`llm.request.type`), `gen_ai.provider.name` (`gen_ai.system`),
//! `gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens`
//! (`gen_ai.usage.prompt_tokens`), `gen_ai.usage.output_tokens` (`gen_ai.usage.completion_tokens`),
//! `gen_ai.usage.cache_read.input_tokens` (`gen_ai.usage.cache_read_input_tokens`),
//! `gen_ai.usage.cache_creation.input_tokens` (`gen_ai.usage.cache_creation_input_tokens`),
//! `gen_ai.usage.reasoning.output_tokens` (`gen_ai.usage.reasoning_tokens`), `gen_ai.usage.cost`,
//! `gen_ai.response.finish_reasons`, `gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.agent.name`,
//! `gen_ai.conversation.id`, `session.id`, `error.type`, and the resource's `service.name`.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value};

use super::attrs::{Attrs, BadAttribute};
use super::{event_id, hex_id, time_of, Record};
use crate::event::{AgentRole, CanonicalEvent, EventKind};
use crate::hive::{cost_source, provider_of, FilterReason};

/// The `service.name` of Claude Code, whose spans repeat its log events.
pub const CLAUDE_CODE_SERVICE: &str = "claude-code";

/// What a span is, by its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Inference,
    Tool,
    Agent,
}

fn operation(a: &Attrs<'_>) -> Option<Operation> {
    match a.str("gen_ai.operation.name").as_deref() {
        Some("chat" | "generate_content" | "text_completion") => Some(Operation::Inference),
        Some("execute_tool") => Some(Operation::Tool),
        Some("invoke_agent") => Some(Operation::Agent),
        Some(_) => None,
        None => match a.str("llm.request.type").as_deref() {
            Some("chat" | "completion") => Some(Operation::Inference),
            _ => None,
        },
    }
}

/// Maps every span of a request, in order.
pub fn map_traces(request: &ExportTraceServiceRequest) -> Vec<Record> {
    let mut out = vec![];
    for rs in &request.resource_spans {
        let resource = rs.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let index = out.len() as u64;
                let attrs = Attrs::new(&span.attributes, resource);
                out.push(map_span(span, attrs, index));
            }
        }
    }
    out
}

fn filtered(native_type: &str) -> Record {
    Record::Filtered {
        native_type: native_type.into(),
        reason: FilterReason::NotDurable,
    }
}

/// One span.
pub fn map_span(span: &Span, attrs: Attrs<'_>, index: u64) -> Record {
    let Some(op) = operation(&attrs) else {
        return filtered("otel.span");
    };
    let service = attrs.resource_str("service.name");
    if service.as_deref() == Some(CLAUDE_CODE_SERVICE) {
        return filtered("otel.span");
    }
    let reject = |reason: String| Record::Rejected { index, reason };
    let (Some(trace), Some(span_id)) = (hex_id(&span.trace_id), hex_id(&span.span_id)) else {
        return reject("span has no valid trace_id and span_id".into());
    };
    let Some(occurred_at) =
        time_of(span.end_time_unix_nano).or_else(|| time_of(span.start_time_unix_nano))
    else {
        return reject("span has no start or end time".into());
    };
    let session = attrs
        .str("gen_ai.conversation.id")
        .or_else(|| attrs.str("session.id"))
        .unwrap_or_else(|| trace.clone());
    let failed = span.status.as_ref().map(|s| s.code) == Some(StatusCode::Error as i32);
    let duration_ms = span
        .end_time_unix_nano
        .checked_sub(span.start_time_unix_nano)
        .filter(|_| span.start_time_unix_nano > 0)
        .map(|ns| ns / 1_000_000);
    let mut data = Map::new();
    let set = |data: &mut Map<String, Value>, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            data.insert(k.into(), v);
        }
    };
    set(&mut data, "service_name", service.map(Value::from));
    set(
        &mut data,
        "agent_name",
        attrs.str("gen_ai.agent.name").map(Value::from),
    );
    let (kind, native) = match op {
        Operation::Inference => {
            if let Err(e) = inference(&attrs, failed, &mut data) {
                return reject(e.to_string());
            }
            set(&mut data, "latency_ms", duration_ms.map(Value::from));
            (EventKind::LlmTurn, "gen_ai.inference")
        }
        Operation::Tool => {
            set(
                &mut data,
                "tool_name",
                attrs.str("gen_ai.tool.name").map(Value::from),
            );
            set(
                &mut data,
                "tool_use_id",
                attrs.str("gen_ai.tool.call.id").map(Value::from),
            );
            data.insert("status".into(), "completed".into());
            let error = failed || attrs.get("error.type").is_some();
            data.insert("is_error".into(), error.into());
            set(&mut data, "duration_ms", duration_ms.map(Value::from));
            (EventKind::ToolCall, "gen_ai.execute_tool")
        }
        Operation::Agent => {
            data.insert("scope".into(), "execution".into());
            let status = if failed { "failed" } else { "completed" };
            data.insert("status".into(), status.into());
            data.insert("success".into(), (!failed).into());
            set(&mut data, "duration_ms", duration_ms.map(Value::from));
            (EventKind::Execution, "gen_ai.invoke_agent")
        }
    };
    Record::Event(CanonicalEvent {
        schema_version: crate::SCHEMA_VERSION,
        event_id: event_id(&["otel-span", &trace, &span_id]),
        kind,
        occurred_at,
        runtime: "otel".into(),
        session_id: Some(session),
        parent_session_id: None,
        colony_id: None,
        worker_id: None,
        agent_role: Some(AgentRole::Queen),
        node_id: None,
        execution_id: None,
        trace_id: Some(trace),
        native_type: native.into(),
        data,
    })
}

/// The usage of an inference span (see the table in [`super`]).
fn inference(
    a: &Attrs<'_>,
    failed: bool,
    data: &mut Map<String, Value>,
) -> Result<(), BadAttribute> {
    let model = a
        .str("gen_ai.response.model")
        .or_else(|| a.str("gen_ai.request.model"));
    let provider = a
        .str("gen_ai.provider.name")
        .or_else(|| a.str("gen_ai.system"))
        .or_else(|| model.as_deref().and_then(provider_of).map(str::to_string));
    let input = a.count(&["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"])?;
    let output = a.count(&[
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
    ])?;
    let cached = a.count(&[
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_read_input_tokens",
    ])?;
    let creation = a.count(&[
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_creation_input_tokens",
    ])?;
    let reasoning = a.count(&[
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.usage.reasoning_tokens",
    ])?;
    let cost = a.number("gen_ai.usage.cost")?;
    let (cached_n, creation_n) = (cached.unwrap_or(0), creation.unwrap_or(0));
    let input = input.map(|i| inclusive_input(i, cached_n, creation_n));
    let stop = a
        .first_str("gen_ai.response.finish_reasons")
        .map(|s| s.to_ascii_lowercase())
        .or_else(|| failed.then(|| "error".to_string()));
    let tokens = input.unwrap_or(0) + output.unwrap_or(0);
    let pairs: [(&str, Option<Value>); 10] = [
        ("model", model.map(Value::from)),
        ("provider", provider.map(Value::from)),
        ("input_tokens", input.map(Value::from)),
        ("output_tokens", output.map(Value::from)),
        ("cached_tokens", cached.map(Value::from)),
        ("cache_creation_tokens", creation.map(Value::from)),
        ("reasoning_tokens", reasoning.map(Value::from)),
        ("cost_usd", cost.map(Value::from)),
        ("cost_source", Some(cost_source(cost, tokens).into())),
        ("stop_reason", stop.map(Value::from)),
    ];
    for (k, v) in pairs {
        if let Some(v) = v {
            data.insert(k.into(), v);
        }
    }
    Ok(())
}

/// Input tokens with the cache reads and writes inside: the conventions' meaning and Apiary's. An input
/// smaller than the cache reads plus writes cannot hold them, so they are added.
pub fn inclusive_input(input: u64, cached: u64, creation: u64) -> u64 {
    let cache = cached.saturating_add(creation);
    if input < cache {
        input.saturating_add(cache)
    } else {
        input
    }
}
