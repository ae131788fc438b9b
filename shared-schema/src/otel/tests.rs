use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
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

/// The canonical events the adapter makes of `request`, before the policy (rejected and filtered
/// records left out).
fn mapped(request: &Request) -> Vec<crate::event::CanonicalEvent> {
    map_request(request)
        .into_iter()
        .filter_map(|r| match r {
            Record::Event(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// One log record of a resource whose `service.name` is `service`.
fn logs_of(service: &str, record: LogRecord) -> Request {
    Request::Logs(ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![s("service.name", service)],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![record],
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    })
}

/// The one event the adapter makes of `request` (failing with the record it made instead).
fn only_event(request: &Request) -> crate::event::CanonicalEvent {
    match &map_request(request)[..] {
        [Record::Event(e)] => e.clone(),
        other => panic!("not one event: {other:?}"),
    }
}

fn d(key: &str, v: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(v))
}

#[test]
fn claude_code_event_ids_never_change_between_releases() {
    // Stored events are deduplicated by id: a release that derived them differently would store every
    // record re-sent across the upgrade a second time. api_request and api_error are identified by
    // their request_id, tool_result by its tool_use_id.
    let ids: Vec<String> = kept(&claude_logs())
        .iter()
        .map(|e| e["event_id"].as_str().unwrap().to_string())
        .collect();
    // UUID v5 in OTEL_NAMESPACE of `claude_code`, the event name, `request` or `tool`, and the id.
    assert_eq!(
        ids,
        [
            "2080a996-88ef-5865-b2de-dcc18f3f358b",
            "255c53e0-ad09-552b-96f7-716a41434e31",
            "eb32e299-1ccb-5e47-ac64-4f30ef68a6c0",
            "2db73728-030d-5877-8282-3e6cc40c4e5c",
            "eb005b75-eb18-557c-acf0-6a92535c3478",
        ]
    );
}

#[test]
fn a_claude_code_record_is_recognised_by_its_event_name_field_alone() {
    let record = LogRecord {
        time_unix_nano: 1_793_700_000_000_000_000,
        event_name: "claude_code.api_request".into(),
        attributes: vec![s("session.id", "s-1"), s("request_id", "req_1")],
        ..LogRecord::default()
    };
    let event = only_event(&logs_of("some-collector", record));
    assert_eq!(event.native_type, "claude_code.api_request");
}

#[test]
fn a_short_event_name_attribute_is_claude_codes_only_from_the_claude_code_service() {
    let record = LogRecord {
        time_unix_nano: 1_793_700_000_000_000_000,
        attributes: vec![s("event.name", "api_request"), s("session.id", "s-1")],
        ..LogRecord::default()
    };
    let ours = only_event(&logs_of("claude-code", record.clone()));
    assert_eq!(ours.native_type, "claude_code.api_request");
    assert_eq!(
        map_request(&logs_of("travel-agent", record)),
        [Record::Filtered {
            native_type: "otel.log".into(),
            reason: crate::hive::FilterReason::NotDurable,
        }]
    );
}

#[test]
fn a_tool_result_is_an_error_only_when_success_says_false() {
    let t0 = 1_793_700_000_000_000_000u64;
    let is_error = |success: Option<KeyValue>| {
        let req = claude_record("tool_result", "s-1", t0, success.into_iter().collect());
        only_event(&req).data["is_error"].clone()
    };
    assert_eq!(is_error(Some(s("success", "true"))), json!(false));
    assert_eq!(
        is_error(Some(kv("success", any_value::Value::BoolValue(true)))),
        json!(false)
    );
    assert_eq!(is_error(None), json!(false));
    assert_eq!(is_error(Some(s("success", "false"))), json!(true));
    assert_eq!(
        is_error(Some(kv("success", any_value::Value::BoolValue(false)))),
        json!(true)
    );
    let odd = claude_record("tool_result", "s-1", t0, vec![s("success", "maybe")]);
    assert_eq!(
        map_request(&odd),
        [Record::Rejected {
            index: 0,
            reason: "attribute `success` should be true or false".into(),
        }]
    );
}

#[test]
fn an_api_refusal_becomes_a_refusal_signal() {
    let req = claude_record(
        "api_refusal",
        "s-1",
        1_793_700_000_000_000_000,
        vec![s("request_id", "req_1"), i("attempt", 2)],
    );
    let event = only_event(&req);
    assert_eq!(event.kind, EventKind::HealthSignal);
    assert_eq!(
        Value::Object(event.data),
        json!({"signal": "refusal", "attempt": 2})
    );
}

#[test]
fn a_claude_code_cost_sent_as_an_integer_is_read() {
    let req = claude_record(
        "api_request",
        "s-1",
        1_793_700_000_000_000_000,
        vec![
            s("request_id", "req_1"),
            i("cost_usd", 2),
            i("output_tokens", 10),
        ],
    );
    let data = &only_event(&req).data;
    assert_eq!(
        (&data["cost_usd"], &data["cost_source"]),
        (&json!(2.0), &json!("reported"))
    );
}

#[test]
fn a_zero_cost_with_tokens_is_unreported_and_without_tokens_reported() {
    // A turn that used tokens has a price; a cost of 0 for it says the producer did not know it.
    let t0 = 1_793_700_000_000_000_000u64;
    let claude = |tokens: Vec<KeyValue>| {
        let mut attrs = vec![s("request_id", "req_1"), s("cost_usd", "0")];
        attrs.extend(tokens);
        only_event(&claude_record("api_request", "s-1", t0, attrs)).data["cost_source"].clone()
    };
    assert_eq!(
        claude(vec![i("input_tokens", 7), i("output_tokens", 7)]),
        "unreported"
    );
    assert_eq!(claude(vec![i("output_tokens", 5)]), "unreported");
    assert_eq!(claude(vec![]), "reported");
    let genai = |tokens: Vec<KeyValue>| {
        let mut attrs = vec![
            s("gen_ai.operation.name", "chat"),
            d("gen_ai.usage.cost", 0.0),
        ];
        attrs.extend(tokens);
        only_event(&traces(vec![span(1, attrs, false)])).data["cost_source"].clone()
    };
    assert_eq!(
        genai(vec![i("gen_ai.usage.output_tokens", 5)]),
        "unreported"
    );
    assert_eq!(genai(vec![]), "reported");
}

#[test]
fn a_span_without_a_start_time_has_no_duration() {
    let mut chat = span(1, vec![s("gen_ai.operation.name", "chat")], false);
    chat.start_time_unix_nano = 0;
    let mut tool = span(2, vec![s("gen_ai.operation.name", "execute_tool")], false);
    tool.start_time_unix_nano = 0;
    let events = mapped(&traces(vec![chat, tool]));
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].data.get("latency_ms"),
        None,
        "{:?}",
        events[0].data
    );
    assert_eq!(
        events[1].data.get("duration_ms"),
        None,
        "{:?}",
        events[1].data
    );
}

#[test]
fn a_span_session_is_an_integer_conversation_id_written_out_and_never_an_empty_one() {
    let numbered = span(
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            i("gen_ai.conversation.id", 42),
        ],
        false,
    );
    let empty = span(
        2,
        vec![
            s("gen_ai.operation.name", "chat"),
            s("gen_ai.conversation.id", ""),
            s("session.id", "s-7"),
        ],
        false,
    );
    let sessions: Vec<Option<String>> = mapped(&traces(vec![numbered, empty]))
        .into_iter()
        .map(|e| e.session_id)
        .collect();
    assert_eq!(sessions, [Some("42".into()), Some("s-7".into())]);
}

#[test]
fn a_token_count_sent_as_a_double_is_read_only_when_it_is_a_whole_number_below_10_to_the_18() {
    use any_value::Value::DoubleValue;
    // JavaScript SDKs send every number as a double.
    let chat = span(
        1,
        vec![
            s("gen_ai.operation.name", "chat"),
            d("gen_ai.usage.input_tokens", 12.0),
        ],
        false,
    );
    assert_eq!(only_event(&traces(vec![chat])).data["input_tokens"], 12);
    assert_eq!(attrs::count(&DoubleValue(12.0)), Some(12));
    assert_eq!(attrs::count(&DoubleValue(0.0)), Some(0));
    assert_eq!(
        attrs::count(&DoubleValue(999_999_999_999_999_872.0)),
        Some(999_999_999_999_999_872)
    );
    for refused in [1.5, -3.0, 1e18, f64::NAN, f64::INFINITY] {
        assert_eq!(attrs::count(&DoubleValue(refused)), None, "{refused}");
    }
    let fractional = span(
        2,
        vec![
            s("gen_ai.operation.name", "chat"),
            d("gen_ai.usage.output_tokens", 1.5),
        ],
        false,
    );
    assert_eq!(
        map_request(&traces(vec![fractional])),
        [Record::Rejected {
            index: 0,
            reason: "attribute `gen_ai.usage.output_tokens` should be a non-negative integer"
                .into(),
        }]
    );
}

#[test]
fn an_input_exactly_the_size_of_its_cache_already_holds_it() {
    assert_eq!(genai::inclusive_input(20_000, 18_000, 2_000), 20_000);
}

#[test]
fn a_body_over_its_record_bound_names_the_records_and_one_at_the_bound_is_decoded() {
    let Request::Traces(t) = traces(vec![
        span(1, vec![], false),
        span(2, vec![], false),
        span(3, vec![], false),
    ]) else {
        unreachable!()
    };
    let body = t.encode_to_vec();
    let at = |max_records| Bounds {
        max_records,
        max_nested: 1_000,
    };
    assert_eq!(
        decode(Signal::Traces, Encoding::Protobuf, &body, at(2))
            .unwrap_err()
            .to_string(),
        "the body holds more than 2 spans; send smaller exports"
    );
    assert!(decode(Signal::Traces, Encoding::Protobuf, &body, at(3)).is_ok());
    let logs = decode(Signal::Logs, Encoding::Json, CLAUDE_JSON.as_bytes(), at(5));
    assert_eq!(
        logs.unwrap_err().to_string(),
        "the body holds more than 5 log records; send smaller exports"
    );
}

#[test]
fn a_json_body_with_exactly_its_bound_of_containers_is_decoded() {
    assert_eq!(wire::count_containers(b"[[]]", 2), Some(2));
    assert_eq!(wire::count_containers(b"[[]]", 1), None);
    let body = br#"{"resourceSpans": []}"#;
    let bounds = Bounds {
        max_records: 10,
        max_nested: 2,
    };
    assert!(decode(Signal::Traces, Encoding::Json, body, bounds).is_ok());
}

#[test]
fn containers_after_an_escaped_quote_in_a_json_string_are_counted() {
    assert_eq!(
        wire::count_containers(br#"[{"k": "say \"hi\""}, [], {}]"#, 10),
        Some(4)
    );
}

#[test]
fn spans_holding_varints_fixed64s_or_fixed32s_are_counted_as_messages() {
    let one_span = |s: Span| ScopeSpans {
        spans: vec![s],
        ..ScopeSpans::default()
    };
    for (what, s) in [
        (
            "kind (varint)",
            Span {
                kind: 3,
                ..Span::default()
            },
        ),
        (
            "start time (fixed64)",
            Span {
                start_time_unix_nano: 7,
                ..Span::default()
            },
        ),
        (
            "flags (fixed32)",
            Span {
                flags: 1,
                ..Span::default()
            },
        ),
    ] {
        let body = one_span(s).encode_to_vec();
        assert_eq!(wire::count_messages(&body, 10), Some(1), "{what}");
    }
}

#[test]
fn bytes_starting_with_field_number_zero_are_not_counted_as_a_message() {
    // Field 1, 5 bytes: a key of field 0 (fixed32) and four bytes. Field numbers start at 1.
    assert_eq!(
        wire::count_messages(&[0x0a, 5, 0x05, 1, 2, 3, 4], 10),
        Some(0)
    );
    assert_eq!(
        wire::count_messages(&[0x0a, 5, 0x0d, 1, 2, 3, 4], 10),
        Some(1)
    );
}

#[test]
fn nested_messages_are_counted_down_to_32_levels_and_no_further() {
    let nest = |levels: usize| {
        let mut body: Vec<u8> = vec![];
        for _ in 0..levels {
            let mut outer = vec![0x0a, body.len() as u8];
            outer.extend(body);
            body = outer;
        }
        body
    };
    assert_eq!(wire::count_messages(&nest(10), 100), Some(10));
    assert_eq!(wire::count_messages(&nest(32), 100), Some(32));
    assert_eq!(wire::count_messages(&nest(40), 100), Some(32));
}

#[test]
fn an_attribute_holding_an_array_counts_each_value_as_a_message() {
    // An attribute holding an array of 50 ints: the AnyValue, its ArrayValue and the 50 AnyValues
    // inside (each an int, a varint field).
    let ints = (0..50)
        .map(|n| AnyValue {
            value: Some(any_value::Value::IntValue(n)),
        })
        .collect();
    let attr = kv(
        "ids",
        any_value::Value::ArrayValue(ArrayValue { values: ints }),
    );
    let body = attr.encode_to_vec();
    assert_eq!(wire::count_messages(&body, 1_000), Some(52));
}

#[test]
fn a_response_carries_partial_success_when_records_were_rejected_or_there_is_a_warning() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    let rejected = wire::encode_response(Signal::Traces, Encoding::Protobuf, 3, "");
    let partial = ExportTraceServiceResponse::decode(&rejected[..])
        .unwrap()
        .partial_success
        .expect("partial_success when records were rejected");
    assert_eq!(
        (partial.rejected_spans, partial.error_message.as_str()),
        (3, "")
    );
    let j: Value = serde_json::from_slice(&wire::encode_response(
        Signal::Traces,
        Encoding::Json,
        3,
        "",
    ))
    .unwrap();
    assert_eq!(
        j,
        json!({"partialSuccess": {"rejectedSpans": "3", "errorMessage": ""}})
    );
    let warning = wire::encode_response(Signal::Traces, Encoding::Protobuf, 0, "slow down");
    let partial = ExportTraceServiceResponse::decode(&warning[..])
        .unwrap()
        .partial_success
        .expect("partial_success for a warning");
    assert_eq!(
        (partial.rejected_spans, partial.error_message.as_str()),
        (0, "slow down")
    );
}

#[test]
fn an_error_response_is_a_google_rpc_status_in_the_requests_encoding() {
    let pb = wire::encode_status(Encoding::Protobuf, 8, "send smaller exports");
    assert_eq!(
        wire::Status::decode(&pb[..]).unwrap(),
        wire::Status {
            code: 8,
            message: "send smaller exports".into(),
        }
    );
    let j: Value =
        serde_json::from_slice(&wire::encode_status(Encoding::Json, 3, "not OTLP")).unwrap();
    assert_eq!(j, json!({"code": 3, "message": "not OTLP"}));
}
