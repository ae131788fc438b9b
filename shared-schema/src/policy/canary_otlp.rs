//! The canary property for OTLP: random export requests (GenAI spans of every operation, Claude Code
//! log events of every documented name, and strangers) with markers (`zzcanary<N>`) in random record
//! attributes, resource attributes, log bodies, span names, status messages and span events — plain or
//! wrapped in paths, e-mails and keys, nested in arrays and key-value lists — go through the real
//! pipeline ([`process_otlp`]); every kept event must pass the checks of [`super::canary`] (allowlisted,
//! of its value kind, scrubbed) and every surviving marker must come from an attribute that this test's
//! own table says feeds that field.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use proptest::prelude::*;
use serde_json::Value;

use super::canary::{allowlist, cases, fits, leaf, leak, marked, markers, ENVELOPE_IDS};
use crate::otel::Request;
use crate::pipeline::{process_otlp, Outcome};
use crate::Policy;

/// Which input attributes may feed each output field (this test's own reading of the mapping table).
fn origins(field: &str) -> &'static [&'static str] {
    match field {
        "data.model" => &["gen_ai.response.model", "gen_ai.request.model", "model"],
        "data.provider" => &["gen_ai.provider.name", "gen_ai.system"],
        "data.tool_name" => &["gen_ai.tool.name", "tool_name", "name"],
        "data.tool_use_id" => &["gen_ai.tool.call.id", "tool_use_id"],
        "data.service_name" => &["resource:service.name"],
        "data.agent_name" => &["gen_ai.agent.name"],
        "data.stop_reason" => &["gen_ai.response.finish_reasons"],
        "session_id" => &[
            "gen_ai.conversation.id",
            "session.id",
            "resource:session.id",
        ],
        "trace_id" => &["prompt.id"],
        _ => &[],
    }
}

/// Attributes the mapping reads, in both vocabularies.
const SOURCES: &[&str] = &[
    "gen_ai.response.model",
    "gen_ai.request.model",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cost",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.agent.name",
    "gen_ai.conversation.id",
    "session.id",
    "model",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "tool_name",
    "name",
    "tool_use_id",
    "success",
    "duration_ms",
    "request_id",
    "event.sequence",
    "prompt.id",
    "status_code",
    "attempt",
    "error.type",
];

/// Content a producer may attach that must never leave.
const SENSITIVE: &[&str] = &[
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.system_instructions",
    "user.email",
    "user.account_uuid",
    "organization.id",
    "enduser.id",
    "prompt",
    "response",
    "error",
    "tool_parameters",
    "tool_input",
    "body",
    "code.filepath",
    "exception.message",
    "http.url",
    "user.id",
    "workspace.host_paths",
];

const OPERATIONS: &[&str] = &[
    "chat",
    "generate_content",
    "text_completion",
    "execute_tool",
    "invoke_agent",
    "create_agent",
    "embeddings",
    "",
];

const CLAUDE_EVENTS: &[&str] = &[
    "api_request",
    "tool_result",
    "api_error",
    "api_refusal",
    "compaction",
    "user_prompt",
    "assistant_response",
    "tool_decision",
    "api_request_body",
    "api_retries_exhausted",
    "auth",
];

fn anyv(v: any_value::Value) -> AnyValue {
    AnyValue { value: Some(v) }
}

/// A random attribute value: a leaf of the Hive canary (marked text, numbers, booleans), or one nested
/// in an array or a key-value list.
fn value() -> impl Strategy<Value = AnyValue> {
    let scalar = leaf().prop_map(|v| match v {
        Value::String(s) => anyv(any_value::Value::StringValue(s)),
        Value::Bool(b) => anyv(any_value::Value::BoolValue(b)),
        Value::Number(n) if n.is_i64() => anyv(any_value::Value::IntValue(n.as_i64().unwrap())),
        Value::Number(n) => anyv(any_value::Value::DoubleValue(n.as_f64().unwrap_or(0.0))),
        _ => AnyValue { value: None },
    });
    scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3)
                .prop_map(|values| anyv(any_value::Value::ArrayValue(ArrayValue { values }))),
            prop::collection::vec(("[a-z.]{1,12}", inner), 1..3).prop_map(|kvs| {
                let values = kvs
                    .into_iter()
                    .map(|(key, v)| KeyValue {
                        key,
                        value: Some(v),
                        ..KeyValue::default()
                    })
                    .collect();
                anyv(any_value::Value::KvlistValue(KeyValueList { values }))
            }),
        ]
    })
}

fn attributes(
    keys: &'static [&'static str],
    n: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<KeyValue>> {
    prop::collection::btree_map(prop::sample::select(keys), value(), n).prop_map(|m| {
        m.into_iter()
            .map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: Some(v),
                ..KeyValue::default()
            })
            .collect()
    })
}

fn text(s: impl Into<String>) -> KeyValue {
    KeyValue {
        key: String::new(),
        value: Some(anyv(any_value::Value::StringValue(s.into()))),
        ..KeyValue::default()
    }
}

fn resource() -> impl Strategy<Value = Resource> {
    let service = prop_oneof![
        Just("claude-code".to_string()),
        Just("travel-agent".to_string()),
        (0u32..1_000_000).prop_flat_map(marked)
    ];
    (service, attributes(SENSITIVE, 0..3)).prop_map(|(service, mut attrs)| {
        attrs.push(KeyValue {
            key: "service.name".into(),
            ..text(service)
        });
        Resource {
            attributes: attrs,
            ..Resource::default()
        }
    })
}

fn span() -> impl Strategy<Value = Span> {
    let op = prop::sample::select(OPERATIONS);
    let marks = || (0u32..1_000_000).prop_flat_map(marked);
    (
        op,
        attributes(SOURCES, 0..8),
        attributes(SENSITIVE, 0..4),
        marks(),
        marks(),
        attributes(SENSITIVE, 0..3),
        any::<[u8; 8]>(),
    )
        .prop_map(|(op, mut attrs, secrets, name, status, event_attrs, id)| {
            attrs.extend(secrets);
            if !op.is_empty() {
                attrs.push(KeyValue {
                    key: "gen_ai.operation.name".into(),
                    ..text(op)
                });
            }
            Span {
                trace_id: vec![7; 16],
                span_id: id.iter().map(|b| b | 1).collect(),
                name,
                start_time_unix_nano: 1_793_613_600_000_000_000,
                end_time_unix_nano: 1_793_613_601_000_000_000,
                attributes: attrs,
                events: vec![Event {
                    name: "gen_ai.content.prompt".into(),
                    attributes: event_attrs,
                    ..Event::default()
                }],
                status: Some(Status {
                    message: status,
                    code: 2,
                }),
                ..Span::default()
            }
        })
}

fn log_record() -> impl Strategy<Value = LogRecord> {
    let body = prop_oneof![
        prop::sample::select(CLAUDE_EVENTS).prop_map(|e| format!("claude_code.{e}")),
        (0u32..1_000_000).prop_flat_map(marked),
    ];
    (
        body,
        prop::sample::select(CLAUDE_EVENTS),
        attributes(SOURCES, 0..10),
        attributes(SENSITIVE, 0..5),
        value(),
    )
        .prop_map(|(body, event, mut attrs, secrets, extra)| {
            attrs.extend(secrets);
            attrs.push(KeyValue {
                key: "event.name".into(),
                ..text(event)
            });
            attrs.push(KeyValue {
                key: "session.id".into(),
                ..text("5f0c9a3e-8b1d")
            });
            attrs.push(KeyValue {
                key: "tool_parameters".into(),
                value: Some(extra),
                ..KeyValue::default()
            });
            LogRecord {
                time_unix_nano: 1_793_613_600_000_000_000,
                body: Some(anyv(any_value::Value::StringValue(body))),
                attributes: attrs,
                ..LogRecord::default()
            }
        })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (resource(), prop::collection::vec(span(), 1..6)).prop_map(|(resource, spans)| {
            Request::Traces(ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(resource),
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..ScopeSpans::default()
                    }],
                    ..ResourceSpans::default()
                }],
            })
        }),
        (resource(), prop::collection::vec(log_record(), 1..6)).prop_map(
            |(resource, log_records)| {
                Request::Logs(ExportLogsServiceRequest {
                    resource_logs: vec![ResourceLogs {
                        resource: Some(resource),
                        scope_logs: vec![ScopeLogs {
                            log_records,
                            ..ScopeLogs::default()
                        }],
                        ..ResourceLogs::default()
                    }],
                })
            }
        ),
    ]
}

/// Every marker in a value, nested ones included.
fn marks_in(v: &AnyValue, out: &mut Vec<String>) {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => out.extend(markers(s)),
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().for_each(|v| marks_in(v, out)),
        Some(any_value::Value::KvlistValue(l)) => l
            .values
            .iter()
            .flat_map(|kv| &kv.value)
            .for_each(|v| marks_in(v, out)),
        _ => {}
    }
}

/// Where each marker was planted: an attribute key (`resource:` for resource attributes) or elsewhere.
fn planted(request: &Request) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut add = |at: String, v: &AnyValue| {
        let mut found = vec![];
        marks_in(v, &mut found);
        for m in found {
            out.entry(m).or_default().push(at.clone());
        }
    };
    let attrs = |prefix: &str, kvs: &[KeyValue], add: &mut dyn FnMut(String, &AnyValue)| {
        kvs.iter()
            .filter_map(|kv| kv.value.as_ref().map(|v| (kv, v)))
            .for_each(|(kv, v)| add(format!("{prefix}{}", kv.key), v));
    };
    match request {
        Request::Traces(t) => {
            for rs in &t.resource_spans {
                attrs(
                    "resource:",
                    &rs.resource.as_ref().unwrap().attributes,
                    &mut add,
                );
                for sp in rs.scope_spans.iter().flat_map(|s| &s.spans) {
                    attrs("", &sp.attributes, &mut add);
                    add(
                        "span.name".into(),
                        &anyv(any_value::Value::StringValue(sp.name.clone())),
                    );
                    for e in &sp.events {
                        attrs("event:", &e.attributes, &mut add);
                    }
                    let msg = sp
                        .status
                        .as_ref()
                        .map(|s| s.message.clone())
                        .unwrap_or_default();
                    add(
                        "status.message".into(),
                        &anyv(any_value::Value::StringValue(msg)),
                    );
                }
            }
        }
        Request::Logs(l) => {
            for rl in &l.resource_logs {
                attrs(
                    "resource:",
                    &rl.resource.as_ref().unwrap().attributes,
                    &mut add,
                );
                for r in rl.scope_logs.iter().flat_map(|s| &s.log_records) {
                    attrs("", &r.attributes, &mut add);
                    if let Some(b) = &r.body {
                        add("body".into(), b);
                    }
                }
            }
        }
        Request::Metrics(_) => {}
    }
    out
}

/// Checks one kept event: allowlisted and typed data, ids, no secret shapes, markers from their sources.
fn check(event: &Value, planted: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    let kind = event["type"].as_str().ok_or("no type")?;
    let allowed = allowlist()
        .get(kind)
        .ok_or(format!("kept a {kind} the policy does not list"))?;
    let mut found = vec![];
    for (key, v) in event["data"].as_object().ok_or("data is not an object")? {
        let spec = allowed
            .get(key)
            .ok_or(format!("{kind}: data.{key} is not allowlisted"))?;
        if !fits(spec, v) {
            return Err(format!("{kind}: data.{key} = {v} is not a {spec}"));
        }
        found.push((format!("data.{key}"), v.clone()));
    }
    for f in ENVELOPE_IDS {
        match &event[f] {
            Value::Null => {}
            v if fits(&toml::Value::String("id".into()), v) => {
                found.push((f.to_string(), v.clone()))
            }
            v => return Err(format!("envelope {f} = {v} is not an id")),
        }
    }
    for (at, v) in &found {
        let Some(s) = v.as_str() else { continue };
        if let Some(what) = leak(s) {
            return Err(format!("{at} = {s:?} holds {what}"));
        }
        for m in markers(s) {
            let from = planted.get(&m).cloned().unwrap_or_default();
            if !from.iter().any(|src| origins(at).contains(&src.as_str())) {
                return Err(format!("{m} moved from {from:?} to {at}"));
            }
        }
    }
    let mut rest = event.clone();
    for f in ENVELOPE_IDS.into_iter().chain(["data"]) {
        rest.as_object_mut().expect("an object").remove(f);
    }
    if rest.to_string().contains("zzcanary") {
        return Err(format!("a marker outside data and the ids: {rest}"));
    }
    Ok(())
}

fn kept(request: &Request) -> Vec<Value> {
    process_otlp(request, &Policy::default_policy())
        .into_iter()
        .filter_map(|r| match r {
            Ok(Outcome::Kept { event, .. }) => Some(serde_json::to_value(&*event).unwrap()),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases() / 4, ..ProptestConfig::default() })]

    /// Whatever survives an OTLP export is allowlisted, of its kind, scrubbed, and from its own source.
    #[test]
    fn nothing_but_allowlisted_scrubbed_values_survives_an_otlp_export(request in request()) {
        let origins = planted(&request);
        for event in kept(&request) {
            if let Err(e) = check(&event, &origins) {
                prop_assert!(false, "{}\nkept: {}", e, event);
            }
        }
    }
}

#[test]
fn the_generated_exports_keep_events_with_surviving_markers() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut events, mut with_marker, mut scrubbed) = (0, 0, 0);
    for _ in 0..1000 {
        let request = request().new_tree(&mut runner).unwrap().current();
        for e in kept(&request) {
            events += 1;
            let all = e.to_string();
            with_marker += usize::from(all.contains("zzcanary"));
            scrubbed += usize::from(
                all.contains("[path]") || all.contains("[email]") || all.contains("\"h:"),
            );
        }
    }
    // Without these the property above would hold vacuously.
    for (what, n, least) in [
        ("kept events", events, 300),
        ("events with a surviving marker", with_marker, 30),
        ("scrubbed or hashed values", scrubbed, 10),
    ] {
        assert!(n >= least, "only {n} {what} in 1000 generated exports");
    }
}
