//! Claude Code's log events → `llm.turn`, `tool.call`, `health.signal` (see the table in [`super`]).
//!
//! A log record is Claude Code's when its event name starts with `claude_code.`: the record's
//! `event_name` field, else its body (Claude Code writes `claude_code.api_request` there), else its
//! `event.name` attribute (`api_request`) when the resource's `service.name` is `claude-code`.

use chrono::DateTime;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use serde_json::{Map, Value};

use super::attrs::{text, Attrs, BadAttribute};
use super::genai::CLAUDE_CODE_SERVICE;
use super::{event_id, hex_id, time_of, Record};
use crate::event::{AgentRole, CanonicalEvent, EventKind};
use crate::hive::{cost_source, provider_of, FilterReason};

/// Claude Code's event name prefix.
pub const PREFIX: &str = "claude_code.";

/// Maps every log record of a request, in order.
pub fn map_logs(request: &ExportLogsServiceRequest) -> Vec<Record> {
    let mut out = vec![];
    for rl in &request.resource_logs {
        let resource = rl.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        for sl in &rl.scope_logs {
            for record in &sl.log_records {
                let index = out.len() as u64;
                out.push(map_record(
                    record,
                    Attrs::new(&record.attributes, resource),
                    index,
                ));
            }
        }
    }
    out
}

/// The Claude Code event name of a record (`claude_code.api_request`), if it is one.
pub fn event_name(record: &LogRecord, attrs: &Attrs<'_>) -> Option<String> {
    let body = record
        .body
        .as_ref()
        .and_then(|b| b.value.as_ref())
        .and_then(text);
    let named = [
        Some(record.event_name.clone()).filter(|s| !s.is_empty()),
        body,
    ]
    .into_iter()
    .flatten()
    .find(|n| n.starts_with(PREFIX));
    named.or_else(|| {
        let short = attrs.str("event.name")?;
        let ours = attrs.resource_str("service.name").as_deref() == Some(CLAUDE_CODE_SERVICE);
        ours.then(|| format!("{PREFIX}{short}"))
    })
}

/// What a Claude Code event becomes.
fn kind_of(short: &str) -> Option<EventKind> {
    match short {
        "api_request" => Some(EventKind::LlmTurn),
        "tool_result" => Some(EventKind::ToolCall),
        "api_error" | "api_refusal" | "compaction" => Some(EventKind::HealthSignal),
        _ => None,
    }
}

/// One log record.
pub fn map_record(record: &LogRecord, attrs: Attrs<'_>, index: u64) -> Record {
    let filtered = |native_type: &str, reason| Record::Filtered {
        native_type: native_type.into(),
        reason,
    };
    let Some(name) = event_name(record, &attrs) else {
        return filtered("otel.log", FilterReason::NotDurable);
    };
    let short = &name[PREFIX.len()..];
    let Some(kind) = kind_of(short) else {
        return filtered(&name, FilterReason::NotDurable);
    };
    let Some(session) = attrs.str("session.id") else {
        return filtered(&name, FilterReason::NoSession);
    };
    let reject = |reason: String| Record::Rejected { index, reason };
    let time = time_of(record.time_unix_nano)
        .or_else(|| time_of(record.observed_time_unix_nano))
        .or_else(|| {
            let raw = attrs.str("event.timestamp")?;
            DateTime::parse_from_rfc3339(&raw).ok().map(|t| t.to_utc())
        });
    let Some(occurred_at) = time else {
        return reject(
            "log record has no time (time_unix_nano, observed_time_unix_nano or event.timestamp)"
                .into(),
        );
    };
    let data = match kind {
        EventKind::LlmTurn => api_request(&attrs),
        EventKind::ToolCall => tool_result(&attrs),
        _ => signal(short, &attrs),
    };
    let data = match data {
        Ok(d) => d,
        Err(e) => return reject(e.to_string()),
    };
    let trace_id = hex_id(&record.trace_id).or_else(|| attrs.str("prompt.id"));
    Record::Event(CanonicalEvent {
        schema_version: crate::SCHEMA_VERSION,
        event_id: identity(short, &session, record, &attrs, occurred_at),
        kind,
        occurred_at,
        runtime: "claude_code".into(),
        session_id: Some(session),
        parent_session_id: None,
        colony_id: None,
        worker_id: None,
        agent_role: Some(AgentRole::Queen),
        node_id: None,
        execution_id: None,
        trace_id,
        native_type: name.clone(),
        data,
    })
}

/// The event id from Claude Code's own identity of the event (see [`super`]).
fn identity(
    short: &str,
    session: &str,
    record: &LogRecord,
    a: &Attrs<'_>,
    occurred_at: chrono::DateTime<chrono::Utc>,
) -> uuid::Uuid {
    let own = match short {
        "api_request" | "api_error" | "api_refusal" => a.str("request_id").map(|r| ("request", r)),
        "tool_result" => a.str("tool_use_id").map(|t| ("tool", t)),
        _ => None,
    };
    if let Some((what, id)) = own {
        return event_id(&["claude_code", short, what, &id]);
    }
    if let Some(seq) = a.str("event.sequence") {
        // The sequence restarts with the process while a resumed session keeps its id, so the record's
        // time is part of its identity (a re-sent record carries the same time).
        let time = occurred_at
            .timestamp_nanos_opt()
            .unwrap_or_default()
            .to_string();
        return event_id(&["claude_code", short, "sequence", session, &seq, &time]);
    }
    // No identity of its own: its time and attributes (the same record re-sent is the same bytes).
    let mut attrs: Vec<String> = record
        .attributes
        .iter()
        .map(|kv| format!("{}={:?}", kv.key, kv.value))
        .collect();
    attrs.sort();
    let time = record.time_unix_nano.to_string();
    event_id(&[
        "claude_code",
        short,
        "content",
        session,
        &time,
        &attrs.join("\u{1e}"),
    ])
}

fn api_request(a: &Attrs<'_>) -> Result<Map<String, Value>, BadAttribute> {
    let input = a.count(&["input_tokens"])?.unwrap_or(0);
    let output = a.count(&["output_tokens"])?.unwrap_or(0);
    let cached = a.count(&["cache_read_tokens"])?.unwrap_or(0);
    let creation = a.count(&["cache_creation_tokens"])?.unwrap_or(0);
    let cost = a.number("cost_usd")?;
    // Anthropic's input_tokens excludes cache reads and writes; Apiary's includes them.
    let input = input.saturating_add(cached).saturating_add(creation);
    let model = a.str("model");
    let provider = model
        .as_deref()
        .and_then(provider_of)
        .unwrap_or("anthropic");
    let mut data = Map::new();
    if let Some(m) = model {
        data.insert("model".into(), m.into());
    }
    data.insert("provider".into(), provider.into());
    data.insert("input_tokens".into(), input.into());
    data.insert("output_tokens".into(), output.into());
    data.insert("cached_tokens".into(), cached.into());
    data.insert("cache_creation_tokens".into(), creation.into());
    if let Some(c) = cost {
        data.insert("cost_usd".into(), c.into());
    }
    data.insert(
        "cost_source".into(),
        cost_source(cost, input + output).into(),
    );
    if let Some(ms) = a.count(&["duration_ms"])? {
        data.insert("latency_ms".into(), ms.into());
    }
    Ok(data)
}

fn tool_result(a: &Attrs<'_>) -> Result<Map<String, Value>, BadAttribute> {
    let mut data = Map::new();
    if let Some(t) = a.str("tool_name").or_else(|| a.str("name")) {
        data.insert("tool_name".into(), t.into());
    }
    if let Some(id) = a.str("tool_use_id") {
        data.insert("tool_use_id".into(), id.into());
    }
    data.insert("status".into(), "completed".into());
    let success = a.bool("success")?;
    data.insert("is_error".into(), (success == Some(false)).into());
    if let Some(ms) = a.count(&["duration_ms"])? {
        data.insert("duration_ms".into(), ms.into());
    }
    Ok(data)
}

fn signal(short: &str, a: &Attrs<'_>) -> Result<Map<String, Value>, BadAttribute> {
    let mut data = Map::new();
    let signal = match short {
        "api_error" => "api_error",
        "api_refusal" => "refusal",
        _ => "compacted",
    };
    data.insert("signal".into(), signal.into());
    if short != "compaction" {
        if let Some(n) = a.count(&["attempt"])? {
            data.insert("attempt".into(), n.into());
        }
    }
    if short == "api_error" {
        if let Some(code) = a.get("status_code").and_then(|v| match v {
            AnyValue::IntValue(_) | AnyValue::StringValue(_) => super::attrs::count(v),
            _ => None,
        }) {
            data.insert("status_code".into(), code.into());
        }
    }
    Ok(data)
}
