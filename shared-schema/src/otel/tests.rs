use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use serde_json::{json, Value};

use super::*;
use crate::event::EventKind;
use crate::pipeline::{process_otlp, Outcome, ProcessError};
use crate::Policy;

/// Claude Code's documented log events, as OTLP/JSON (also the black-box tests' fixture).
pub const CLAUDE_JSON: &str = include_str!("../../../tests/fixtures/otlp/claude_code_logs.json");
/// The same export as protobuf (checked in; a test pins it to the JSON).
pub const CLAUDE_PB: &[u8] = include_bytes!("../../../tests/fixtures/otlp/claude_code_logs.pb");

fn bounds() -> Bounds {
    Bounds {
        max_records: 1000,
        max_nested: 100_000,
    }
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    }
}

fn s(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.into()))
}

fn i(key: &str, v: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(v))
}

fn span(id: u8, attrs: Vec<KeyValue>, failed: bool) -> Span {
    Span {
        trace_id: vec![0xab; 16],
        span_id: vec![id; 8],
        name: "chat claude-sonnet-4-5".into(),
        start_time_unix_nano: 1_793_613_600_000_000_000,
        end_time_unix_nano: 1_793_613_601_250_000_000,
        attributes: attrs,
        status: failed.then(|| Status {
            message: "boom /home/alice".into(),
            code: status::StatusCode::Error as i32,
        }),
        ..Span::default()
    }
}

fn traces(spans: Vec<Span>) -> Request {
    Request::Traces(ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![s("service.name", "travel-agent")],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    })
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

fn claude_logs() -> Request {
    decode(
        Signal::Logs,
        Encoding::Json,
        CLAUDE_JSON.as_bytes(),
        bounds(),
    )
    .unwrap()
}

#[test]
fn claude_codes_api_requests_become_turns_with_the_cache_inside_input() {
    let events = kept(&claude_logs());
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "llm.turn",
            "tool.call",
            "tool.call",
            "llm.turn",
            "health.signal"
        ]
    );
    let turn = &events[0];
    assert_eq!(turn["runtime"], "claude_code");
    assert_eq!(turn["session_id"], "5f0c9a3e-8b1d-4f7a-9c2e-6d4b3a2f1e0d");
    assert_eq!(turn["trace_id"], "0b7c2d4e-1f3a-4b5c-8d9e-a0b1c2d3e4f5");
    assert_eq!(
        turn["data"],
        json!({"model": "claude-sonnet-4-5-20250929", "provider": "anthropic",
            "input_tokens": 1200 + 18000 + 2000, "output_tokens": 350, "cached_tokens": 18000,
            "cache_creation_tokens": 2000, "cost_usd": 0.0421, "cost_source": "reported", "latency_ms": 4200})
    );
    assert_eq!(events[3]["data"]["input_tokens"], 900);
    assert_eq!(
        events[2]["data"],
        json!({"tool_name": "Bash", "tool_use_id": "toolu_01A2", "status": "completed", "is_error": true, "duration_ms": 1800})
    );
    assert_eq!(
        events[4]["data"],
        json!({"signal": "api_error", "attempt": 11, "status_code": 529})
    );
    let all = serde_json::to_string(&events).unwrap();
    for secret in [
        "alice@example.com",
        "/home/alice",
        "zzcanary",
        "id_rsa",
        "payroll",
        "a1b2c3d4-e5f6",
    ] {
        assert!(!all.contains(secret), "{secret} survived: {all}");
    }
}

#[test]
fn the_protobuf_fixture_is_the_json_fixture() {
    let pb = decode(Signal::Logs, Encoding::Protobuf, CLAUDE_PB, bounds()).unwrap();
    assert_eq!(pb, claude_logs());
}

#[test]
#[ignore = "writes tests/fixtures/otlp/claude_code_logs.pb from the JSON fixture"]
fn write_the_protobuf_fixture() {
    let Request::Logs(r) = claude_logs() else {
        unreachable!()
    };
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/otlp/claude_code_logs.pb"
    );
    std::fs::write(path, r.encode_to_vec()).unwrap();
}

#[test]
fn otlp_json_reads_hex_ids_and_string_int64s() {
    let body = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "eee19b7ec3c1b174",
        "name": "chat", "kind": 3, "startTimeUnixNano": "1793613600000000000", "endTimeUnixNano": 1793613601000000000u64,
        "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                       {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
                       {"key": "gen_ai.usage.output_tokens", "value": {"intValue": 3}}],
        "status": {"code": 2}, "someFutureField": {"x": 1}}]}]}]});
    let r = decode(
        Signal::Traces,
        Encoding::Json,
        body.to_string().as_bytes(),
        bounds(),
    )
    .unwrap();
    let Request::Traces(t) = &r else {
        unreachable!()
    };
    let sp = &t.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(
        hex::encode(&sp.trace_id),
        "5b8efff798038103d269b633813fc60c"
    );
    assert_eq!(sp.start_time_unix_nano, 1_793_613_600_000_000_000);
    assert_eq!(sp.status.as_ref().unwrap().code, 2);
    let e = &kept(&r)[0];
    assert_eq!(e["trace_id"], "5b8efff798038103d269b633813fc60c");
    assert_eq!(
        (
            e["data"]["input_tokens"].clone(),
            e["data"]["output_tokens"].clone()
        ),
        (json!(12), json!(3))
    );
    assert_eq!(e["data"]["stop_reason"], "error");
    assert_eq!(e["data"]["latency_ms"], 1000);
}

#[test]
fn decode_errors_never_quote_the_body() {
    let bad =
        br#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zzcanary /home/a"}]}]}]}"#;
    let err = decode(Signal::Traces, Encoding::Json, bad, bounds())
        .unwrap_err()
        .to_string();
    assert!(!err.contains("zzcanary") && !err.contains("/home"), "{err}");
    let err = decode(Signal::Logs, Encoding::Protobuf, b"\x0a\x05zzcan", bounds()).unwrap_err();
    assert!(matches!(err, DecodeError::Protobuf(_)), "{err}");
}

#[test]
fn genai_spans_map_by_operation_with_current_and_deprecated_names() {
    let chat_old = span(
        1,
        vec![
            s("llm.request.type", "chat"),
            s("gen_ai.system", "openai"),
            s("gen_ai.request.model", "gpt-4o"),
            i("gen_ai.usage.prompt_tokens", 500),
            i("gen_ai.usage.completion_tokens", 40),
            s("gen_ai.prompt.0.content", "my secret plan"),
        ],
        false,
    );
    let chat_new = span(
        2,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.provider.name", "anthropic"),
            s("gen_ai.response.model", "claude-sonnet-4-5"),
            i("gen_ai.usage.input_tokens", 100),
            i("gen_ai.usage.cache_read.input_tokens", 4000),
            i("gen_ai.usage.cache_creation.input_tokens", 50),
            i("gen_ai.usage.output_tokens", 7),
            s("gen_ai.conversation.id", "conv-1"),
            kv(
                "gen_ai.response.finish_reasons",
                any_value::Value::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(any_value::Value::StringValue("tool_use".into())),
                    }],
                }),
            ),
        ],
        false,
    );
    let agent = span(
        3,
        vec![
            s("gen_ai.operation.name", "invoke_agent"),
            s("gen_ai.agent.name", "planner"),
            i("gen_ai.usage.input_tokens", 99_999),
            s("gen_ai.conversation.id", "conv-1"),
        ],
        false,
    );
    let tool = span(
        4,
        vec![
            s("gen_ai.operation.name", "execute_tool"),
            s("gen_ai.tool.name", "search_flights"),
            s("gen_ai.tool.call.id", "call_1"),
            s(
                "gen_ai.tool.call.arguments",
                "{\"to\": \"alice@example.com\"}",
            ),
        ],
        true,
    );
    let http = span(5, vec![s("http.request.method", "GET")], false);
    let events = kept(&traces(vec![chat_old, chat_new, agent, tool, http]));
    assert_eq!(events.len(), 4);
    assert_eq!(
        events[0]["data"],
        json!({"model": "gpt-4o", "provider": "openai", "input_tokens": 500,
        "output_tokens": 40, "cost_source": "unreported", "latency_ms": 1250, "service_name": "travel-agent"})
    );
    assert_eq!(events[0]["session_id"], "abababababababababababababababab");
    assert_eq!(events[1]["data"]["input_tokens"], 100 + 4000 + 50);
    assert_eq!(events[1]["data"]["stop_reason"], "tool_use");
    assert_eq!(events[1]["session_id"], "conv-1");
    assert_eq!(events[2]["type"], "execution");
    assert_eq!(
        events[2]["data"],
        json!({"scope": "execution", "status": "completed", "success": true,
        "duration_ms": 1250, "agent_name": "planner", "service_name": "travel-agent"})
    );
    assert_eq!(events[3]["data"]["is_error"], true);
    assert_eq!(events[3]["data"]["tool_name"], "search_flights");
    assert!(!serde_json::to_string(&events).unwrap().contains("alice@"));
}

#[test]
fn inclusive_input_adds_the_cache_only_when_it_cannot_be_inside() {
    assert_eq!(genai::inclusive_input(21_200, 18_000, 2_000), 21_200);
    assert_eq!(genai::inclusive_input(1_200, 18_000, 2_000), 21_200);
    assert_eq!(genai::inclusive_input(5, 0, 0), 5);
}

#[test]
fn event_ids_come_from_the_producers_identity_not_the_payload() {
    let a = span(
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            i("gen_ai.usage.input_tokens", 1),
        ],
        false,
    );
    let mut b = a.clone();
    b.attributes
        .push(s("gen_ai.response.id", "different payload"));
    let ids =
        |r: &Request| -> Vec<Value> { kept(r).iter().map(|e| e["event_id"].clone()).collect() };
    assert_eq!(ids(&traces(vec![a.clone()])), ids(&traces(vec![b])));
    let mut other = a.clone();
    other.span_id = vec![9; 8];
    assert_ne!(ids(&traces(vec![a])), ids(&traces(vec![other])));
    // The same Claude Code export twice: the same ids; every id distinct within it.
    let first = ids(&claude_logs());
    assert_eq!(first, ids(&claude_logs()));
    let unique: std::collections::BTreeSet<String> = first.iter().map(|v| v.to_string()).collect();
    assert_eq!(unique.len(), first.len());
}

#[test]
fn unreadable_records_are_rejected_naming_the_attribute_and_the_rest_kept() {
    let bad = span(
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.usage.input_tokens", "zzcanary9"),
        ],
        false,
    );
    let mut no_ids = span(2, vec![s("gen_ai.operation.name", "chat")], false);
    no_ids.trace_id = vec![0; 16];
    let good = span(3, vec![s("gen_ai.operation.name", "chat")], false);
    let results = process_otlp(&traces(vec![bad, no_ids, good]), &Policy::default_policy());
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert_eq!(errors.len(), 2);
    assert!(
        errors[0].contains("gen_ai.usage.input_tokens") && !errors[0].contains("zzcanary"),
        "{errors:?}"
    );
    assert!(matches!(results[2], Ok(Outcome::Kept { .. })));
}

#[test]
fn claude_code_spans_and_all_metrics_are_filtered_never_counted() {
    let mut r = traces(vec![span(
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            i("gen_ai.usage.input_tokens", 5),
        ],
        false,
    )]);
    let Request::Traces(t) = &mut r else {
        unreachable!()
    };
    t.resource_spans[0].resource.as_mut().unwrap().attributes =
        vec![s("service.name", "claude-code")];
    assert!(kept(&r).is_empty());
    let metrics = json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "claude_code.token.usage", "sum": {"aggregationTemporality": 1, "isMonotonic": true,
         "dataPoints": [{"asInt": "1200", "timeUnixNano": "1793613600000000000"}, {"asInt": "350"}]}}]}]}]});
    let r = decode(
        Signal::Metrics,
        Encoding::Json,
        metrics.to_string().as_bytes(),
        bounds(),
    )
    .unwrap();
    let results = process_otlp(&r, &Policy::default_policy());
    assert_eq!(results.len(), 2);
    assert!(results
        .iter()
        .all(|r| matches!(r, Ok(Outcome::Filtered { .. }))));
}

#[test]
fn a_log_event_without_a_session_is_filtered_as_no_session() {
    let Request::Logs(mut r) = claude_logs() else {
        unreachable!()
    };
    for rec in &mut r.resource_logs[0].scope_logs[0].log_records {
        rec.attributes.retain(|kv| kv.key != "session.id");
    }
    let results = process_otlp(&Request::Logs(r), &Policy::default_policy());
    assert!(results.iter().all(|r| matches!(
        r,
        Ok(Outcome::Filtered {
            reason: crate::hive::FilterReason::NoSession | crate::hive::FilterReason::NotDurable,
            ..
        })
    )));
}

#[test]
fn bodies_of_tiny_messages_are_refused_before_decoding() {
    // 100,000 empty spans: 200 KB on the wire, about 30 MB decoded.
    let spans = vec![Span::default(); 100_000];
    let Request::Traces(t) = traces(spans) else {
        unreachable!()
    };
    let body = t.encode_to_vec();
    let tight = Bounds {
        max_records: 1_000_000,
        max_nested: 50_000,
    };
    assert_eq!(
        decode(Signal::Traces, Encoding::Protobuf, &body, tight),
        Err(DecodeError::TooManyNested { limit: 50_000 })
    );
    let n = wire::count_messages(&body, usize::MAX).unwrap();
    assert!(n >= 100_000, "{n}");
    let few = Bounds {
        max_records: 10,
        max_nested: 1_000_000,
    };
    assert!(matches!(
        decode(Signal::Traces, Encoding::Protobuf, &body, few),
        Err(DecodeError::TooManyRecords { limit: 10, .. })
    ));
    let json = format!("{{\"resourceSpans\": [{}]}}", vec!["{}"; 60_000].join(","));
    assert_eq!(
        wire::count_containers(json.as_bytes(), usize::MAX),
        Some(60_002)
    );
    assert_eq!(wire::count_containers(br#"{"a": "{[{[\"{"}"#, 10), Some(1));
    assert!(decode(Signal::Traces, Encoding::Json, json.as_bytes(), tight).is_err());
}

#[test]
fn responses_carry_partial_success_only_when_something_was_rejected() {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
    let ok = wire::encode_response(Signal::Logs, Encoding::Protobuf, 0, "");
    assert!(ok.is_empty());
    let partial = wire::encode_response(Signal::Logs, Encoding::Protobuf, 2, "2 unreadable");
    let r = ExportLogsServiceResponse::decode(&partial[..]).unwrap();
    assert_eq!(r.partial_success.unwrap().rejected_log_records, 2);
    let j: Value = serde_json::from_slice(&wire::encode_response(
        Signal::Traces,
        Encoding::Json,
        1,
        "x",
    ))
    .unwrap();
    assert_eq!(j["partialSuccess"]["errorMessage"], "x");
    // OTLP/JSON: 64-bit integers are strings; a full success is the empty object.
    assert_eq!(j["partialSuccess"]["rejectedSpans"], "1", "{j}");
    assert_eq!(
        wire::encode_response(Signal::Metrics, Encoding::Json, 0, ""),
        b"{}"
    );
    let _ = ExportLogsServiceRequest::default();
    assert_eq!(EventKind::parse("llm.turn"), Some(EventKind::LlmTurn));
}

/// One Claude Code log record of `name` in session `session`, at `nanos`, with `attrs` added.
fn claude_record(name: &str, session: &str, nanos: u64, attrs: Vec<KeyValue>) -> Request {
    let mut attributes = vec![s("event.name", name), s("session.id", session)];
    attributes.extend(attrs);
    let v = serde_json::json!({"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "timeUnixNano": nanos.to_string(),
        "body": {"stringValue": format!("claude_code.{name}")},
    }]}]}]});
    let Request::Logs(mut req) = decode(
        Signal::Logs,
        Encoding::Json,
        v.to_string().as_bytes(),
        bounds(),
    )
    .unwrap() else {
        unreachable!()
    };
    req.resource_logs[0].scope_logs[0].log_records[0].attributes = attributes;
    Request::Logs(req)
}

#[test]
fn a_resumed_session_restarting_its_sequence_keeps_both_records() {
    // Two api_requests without request_id, of one session, both `event.sequence` 3, half an hour apart
    // (a resumed session in a new process): two events. The same record again: the same id.
    let turn = |nanos: u64, input: i64| {
        claude_record(
            "api_request",
            "resumed-1",
            nanos,
            vec![
                s("event.sequence", "3"),
                s("model", "m"),
                i("input_tokens", input),
            ],
        )
    };
    let t0 = 1_793_700_000_000_000_000u64;
    let first = kept(&turn(t0, 1000));
    let later = kept(&turn(t0 + 1_800_000_000_000, 2000));
    assert_eq!((first.len(), later.len()), (1, 1));
    assert_ne!(first[0]["event_id"], later[0]["event_id"]);
    assert_eq!(first[0]["event_id"], kept(&turn(t0, 1000))[0]["event_id"]);
}

#[test]
fn values_the_ingest_would_refuse_are_rejected_at_intake() {
    let t0 = 1_793_700_000_000_000_000u64;
    for (what, attr) in [
        (
            "negative cost",
            kv("cost_usd", any_value::Value::DoubleValue(-0.01)),
        ),
        ("tokens above 10^12", i("input_tokens", 2_000_000_000_000)),
    ] {
        let req = claude_record(
            "api_request",
            "s-1",
            t0,
            vec![s("request_id", "req_1"), s("model", "m"), attr],
        );
        let results = process_otlp(&req, &Policy::default_policy());
        assert!(
            matches!(&results[..], [Err(ProcessError::Otlp(_))]),
            "{what}: {results:?}"
        );
    }
}
