//! OTLP producers for black-box tests: raw exports to the agent's OTLP receiver, Claude Code's documented
//! log events (`fixtures/otlp/claude_code_logs.{json,pb}`) with their usage computed here, independently
//! of the adapter, and a real OpenTelemetry SDK (`opentelemetry-otlp`'s HTTP exporter) emitting GenAI
//! spans.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _,
};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use serde_json::Value;

/// Claude Code's documented events as OTLP/JSON: two `api_request` (one with cache reads and writes),
/// two `tool_result` (one failed), an `api_error`, and content events (prompt, decision, response).
pub const CLAUDE_JSON: &[u8] = include_bytes!("../fixtures/otlp/claude_code_logs.json");
/// The same export as protobuf.
pub const CLAUDE_PB: &[u8] = include_bytes!("../fixtures/otlp/claude_code_logs.pb");
/// The Claude fixture's session.
pub const CLAUDE_SESSION: &str = "5f0c9a3e-8b1d-4f7a-9c2e-6d4b3a2f1e0d";

/// Usage totals as `/v1/usage` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    pub cost_usd: f64,
    pub llm_calls: i64,
    pub tool_calls: i64,
    pub tool_errors: i64,
}

impl Usage {
    pub fn add(&mut self, o: &Usage) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_creation_tokens += o.cache_creation_tokens;
        self.cost_usd += o.cost_usd;
        self.llm_calls += o.llm_calls;
        self.tool_calls += o.tool_calls;
        self.tool_errors += o.tool_errors;
    }

    /// The `totals` of a `/v1/usage` answer. The cost compared is the one the producers reported
    /// (`cost_reported_usd`; the ingest also estimates turns that report none, in `cost_usd`); an answer
    /// without it (the agent's local usage) has reported costs only.
    pub fn from_totals(v: &Value) -> Usage {
        let i = |k: &str| v[k].as_i64().unwrap_or(0);
        Usage {
            input_tokens: i("input_tokens"),
            output_tokens: i("output_tokens"),
            cached_tokens: i("cached_tokens"),
            cache_creation_tokens: i("cache_creation_tokens"),
            cost_usd: v["cost_reported_usd"]
                .as_f64()
                .or_else(|| v["cost_usd"].as_f64())
                .unwrap_or(0.0),
            llm_calls: i("llm_calls"),
            tool_calls: i("tool_calls"),
            tool_errors: i("tool_errors"),
        }
    }

    /// Equal, with costs compared to a micro-dollar.
    pub fn assert_eq(&self, want: &Usage, what: &str) {
        let mut a = *self;
        a.cost_usd = (a.cost_usd * 1e6).round();
        let mut b = *want;
        b.cost_usd = (b.cost_usd * 1e6).round();
        assert_eq!(a, b, "{what}: got {self:?}, want {want:?}");
    }
}

/// The fixture's usage, read from its raw attributes: Anthropic's `input_tokens` plus the cache reads
/// and writes (Apiary's input includes them), one call per `api_request`, one per `tool_result`.
pub fn claude_fixture_usage() -> Usage {
    let v: Value = serde_json::from_slice(CLAUDE_JSON).expect("the fixture is JSON");
    let mut u = Usage::default();
    for r in v["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
        .as_array()
        .expect("records")
    {
        let attr = |k: &str| -> Option<String> {
            let a = r["attributes"].as_array()?.iter().find(|a| a["key"] == k)?;
            let v = &a["value"];
            [&v["stringValue"], &v["intValue"], &v["doubleValue"]]
                .into_iter()
                .find_map(|x| match x {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
        };
        let n = |k: &str| attr(k).map_or(0, |s| s.parse::<i64>().expect("a count"));
        match r["body"]["stringValue"].as_str() {
            Some("claude_code.api_request") => {
                u.input_tokens +=
                    n("input_tokens") + n("cache_read_tokens") + n("cache_creation_tokens");
                u.output_tokens += n("output_tokens");
                u.cached_tokens += n("cache_read_tokens");
                u.cache_creation_tokens += n("cache_creation_tokens");
                u.cost_usd += attr("cost_usd").map_or(0.0, |s| s.parse::<f64>().expect("a cost"));
                u.llm_calls += 1;
            }
            Some("claude_code.tool_result") => {
                u.tool_calls += 1;
                u.tool_errors += i64::from(attr("success").as_deref() == Some("false"));
            }
            _ => {}
        }
    }
    u
}

/// An OTLP response: status, `Retry-After`, content type, body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// `POST http://ADDR/PATH` with an OTLP body (gzip-compressed when asked), bearer `token`.
pub async fn post(
    addr: SocketAddr,
    token: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
    gzip: bool,
) -> anyhow::Result<Answer> {
    let mut req = crate::stack::client()
        .post(format!("http://{addr}{path}"))
        .bearer_auth(token)
        .header("content-type", content_type)
        .timeout(Duration::from_secs(60));
    let body = if gzip {
        req = req.header("content-encoding", "gzip");
        crate::hostile::gzip(body)
    } else {
        body.to_vec()
    };
    let r = req.body(body).send().await?;
    let header = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    Ok(Answer {
        status: r.status().as_u16(),
        retry_after: header("retry-after"),
        content_type: header("content-type").unwrap_or_default(),
        body: r.bytes().await?.to_vec(),
    })
}

/// One inference call of a GenAI app, as its instrumentation reports it.
#[derive(Debug, Clone)]
pub struct Turn {
    pub model: &'static str,
    /// `gen_ai.usage.input_tokens` (cache reads and writes included, as the conventions say).
    pub input: i64,
    pub output: i64,
    pub cache_read: i64,
    pub cache_creation: i64,
}

/// What a GenAI trace adds to `/v1/usage`: its turns, its tool calls (and errors). The agent span's own
/// aggregated tokens are never counted.
pub fn trace_usage(turns: &[Turn], tools: usize, failed_tools: usize) -> Usage {
    let mut u = Usage::default();
    for t in turns {
        u.input_tokens += t.input;
        u.output_tokens += t.output;
        u.cached_tokens += t.cache_read;
        u.cache_creation_tokens += t.cache_creation;
        u.llm_calls += 1;
    }
    u.tool_calls = tools as i64;
    u.tool_errors = failed_tools as i64;
    u
}

/// Emits one agent run through the official SDK's OTLP/HTTP exporter (protobuf, or JSON when `json`;
/// gzip): an `invoke_agent` span (carrying the run's aggregated usage, as agent frameworks do) with
/// `chat` spans and `execute_tool` spans under it, the last `failed_tools` of them failed. Blocks until
/// every span was exported (the simple processor exports each as it ends).
pub fn emit_agent_run(
    endpoint: &str,
    token: &str,
    conversation: &str,
    turns: &[Turn],
    tools: usize,
    failed_tools: usize,
    json: bool,
) -> anyhow::Result<()> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(if json {
            Protocol::HttpJson
        } else {
            Protocol::HttpBinary
        })
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .with_headers(HashMap::from([(
            "authorization".to_string(),
            format!("Bearer {token}"),
        )]))
        .with_compression(opentelemetry_otlp::Compression::Gzip)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name("travel-agent")
        .build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("apiary-tests");
    let total: i64 = turns.iter().map(|t| t.input + t.output).sum();
    let agent = tracer
        .span_builder("invoke_agent planner")
        .with_kind(SpanKind::Internal)
        .with_attributes([
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", "planner"),
            KeyValue::new("gen_ai.conversation.id", conversation.to_string()),
            KeyValue::new("gen_ai.usage.input_tokens", total),
            KeyValue::new(
                "gen_ai.input.messages",
                "book me a flight, my e-mail is zzcanary1@example.com",
            ),
        ])
        .start(&tracer);
    let cx = opentelemetry::Context::current_with_span(agent);
    for t in turns {
        let mut span = tracer.start_with_context(format!("chat {}", t.model), &cx);
        span.set_attributes([
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", "anthropic"),
            KeyValue::new("gen_ai.request.model", t.model),
            KeyValue::new("gen_ai.conversation.id", conversation.to_string()),
            KeyValue::new("gen_ai.usage.input_tokens", t.input),
            KeyValue::new("gen_ai.usage.output_tokens", t.output),
            KeyValue::new("gen_ai.usage.cache_read.input_tokens", t.cache_read),
            KeyValue::new("gen_ai.usage.cache_creation.input_tokens", t.cache_creation),
            KeyValue::new(
                "gen_ai.output.messages",
                "zzcanary2 see /home/alice/trip.md",
            ),
        ]);
        span.add_event(
            "gen_ai.content.prompt",
            vec![KeyValue::new(
                "gen_ai.prompt",
                "zzcanary3 sk-ant-api03-zzcanary3abcdefghijk",
            )],
        );
        span.end();
    }
    for i in 0..tools {
        let mut span = tracer.start_with_context("execute_tool search_flights", &cx);
        span.set_attributes([
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", "search_flights"),
            KeyValue::new("gen_ai.tool.call.id", format!("call_{conversation}_{i}")),
            KeyValue::new("gen_ai.conversation.id", conversation.to_string()),
            KeyValue::new(
                "gen_ai.tool.call.arguments",
                "{\"passport\": \"/home/alice/passport.pdf\"}",
            ),
        ]);
        if i + failed_tools >= tools {
            span.set_status(Status::error("zzcanary4 timeout"));
        }
        span.end();
    }
    cx.span().end();
    provider.force_flush()?;
    provider.shutdown()?;
    Ok(())
}

/// `n` chat spans of `conversation` numbered from `first` (span ids derived from the number, so a re-sent
/// export is the same records), 100 input and 10 output tokens each, as an OTLP protobuf export.
pub fn synthetic_spans(conversation: &str, first: u64, n: u64) -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue as Kv};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let kv = |k: &str, v: any_value::Value| Kv {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Kv::default()
    };
    let t0 = 1_793_613_600_000_000_000u64; // 2026-11-03T10:00:00Z
    let spans = (first..first + n)
        .map(|i| Span {
            trace_id: (u128::from(i) | 1 << 100).to_be_bytes().to_vec(),
            span_id: (i | 1 << 60).to_be_bytes().to_vec(),
            name: "chat".into(),
            start_time_unix_nano: t0 + i * 1_000_000,
            end_time_unix_nano: t0 + i * 1_000_000 + 500_000,
            attributes: vec![
                kv(
                    "gen_ai.operation.name",
                    any_value::Value::StringValue("chat".into()),
                ),
                kv(
                    "gen_ai.request.model",
                    any_value::Value::StringValue("claude-haiku-4-5".into()),
                ),
                kv(
                    "gen_ai.conversation.id",
                    any_value::Value::StringValue(conversation.into()),
                ),
                kv("gen_ai.usage.input_tokens", any_value::Value::IntValue(100)),
                kv("gen_ai.usage.output_tokens", any_value::Value::IntValue(10)),
            ],
            ..Span::default()
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}
