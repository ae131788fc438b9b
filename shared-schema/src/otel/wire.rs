//! OTLP/HTTP bodies: decoding (`application/x-protobuf` with prost, `application/json` with the
//! `opentelemetry-proto` crate's serde mapping), bounds checked before decoding, and response bodies.
//!
//! ## The JSON mapping
//! OTLP/JSON writes trace and span ids as hex strings (not base64, as protobuf's canonical JSON would)
//! and 64-bit integers as decimal strings. `opentelemetry-proto`'s `with-serde` feature implements
//! exactly that: ids through hex (de)serializers, `*_unix_nano` and `intValue` accepting a string or a
//! number, field names in lowerCamelCase, enums as integers, unknown fields ignored. The tests in
//! [`super::tests`] pin each of these (`otlp_json_reads_hex_ids_and_string_int64s`).
//!
//! ## Bounds before decoding
//! A decoded message costs far more than its bytes (an empty span is 2 bytes on the wire and about 300
//! in memory), so a body's nested messages are counted first, without building anything: protobuf — every
//! length-delimited field whose bytes parse as a message (a string that happens to parse counts too: the
//! bound errs high); JSON — every object and array. More than [`Bounds::max_nested`] is refused before
//! decoding; more than [`Bounds::max_records`] spans, log records or data points after it.

use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

/// The three OTLP signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Logs,
    Metrics,
}

impl Signal {
    /// What one record of this signal is called (for messages).
    pub fn record(self) -> &'static str {
        match self {
            Signal::Traces => "spans",
            Signal::Logs => "log records",
            Signal::Metrics => "data points",
        }
    }
}

/// The body's encoding (from its Content-Type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

/// A decoded export request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    Traces(ExportTraceServiceRequest),
    Logs(ExportLogsServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

impl Request {
    /// Spans, log records or data points.
    pub fn records(&self) -> usize {
        match self {
            Request::Traces(r) => r
                .resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .map(|ss| ss.spans.len())
                .sum(),
            Request::Logs(r) => r
                .resource_logs
                .iter()
                .flat_map(|rl| &rl.scope_logs)
                .map(|sl| sl.log_records.len())
                .sum(),
            Request::Metrics(r) => data_points(r),
        }
    }
}

/// What one body may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Spans, log records or data points.
    pub max_records: usize,
    /// Nested messages (protobuf) or objects and arrays (JSON), counted before decoding.
    pub max_nested: usize,
}

/// A body that cannot be decoded, or is over its bounds. Messages never quote the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "the body holds more than {limit} nested messages, objects or arrays; send smaller exports"
    )]
    TooManyNested { limit: usize },
    #[error("the body holds more than {limit} {what}; send smaller exports")]
    TooManyRecords { limit: usize, what: &'static str },
    #[error("not a valid OTLP protobuf export request: {0}")]
    Protobuf(String),
    #[error("not a valid OTLP/JSON export request: {0}")]
    Json(String),
}

/// Decodes one body of `signal` within `bounds`.
pub fn decode(
    signal: Signal,
    encoding: Encoding,
    body: &[u8],
    bounds: Bounds,
) -> Result<Request, DecodeError> {
    let nested = match encoding {
        Encoding::Protobuf => count_messages(body, bounds.max_nested),
        Encoding::Json => count_containers(body, bounds.max_nested),
    };
    if nested.is_none() {
        return Err(DecodeError::TooManyNested {
            limit: bounds.max_nested,
        });
    }
    let request = match encoding {
        Encoding::Protobuf => decode_protobuf(signal, body),
        Encoding::Json => decode_json(signal, body),
    }?;
    if request.records() > bounds.max_records {
        return Err(DecodeError::TooManyRecords {
            limit: bounds.max_records,
            what: signal.record(),
        });
    }
    Ok(request)
}

fn decode_protobuf(signal: Signal, body: &[u8]) -> Result<Request, DecodeError> {
    let err = |e: prost::DecodeError| DecodeError::Protobuf(e.to_string());
    Ok(match signal {
        Signal::Traces => Request::Traces(ExportTraceServiceRequest::decode(body).map_err(err)?),
        Signal::Logs => Request::Logs(ExportLogsServiceRequest::decode(body).map_err(err)?),
        Signal::Metrics => {
            Request::Metrics(ExportMetricsServiceRequest::decode(body).map_err(err)?)
        }
    })
}

fn decode_json(signal: Signal, body: &[u8]) -> Result<Request, DecodeError> {
    // serde_json's messages quote the offending value; say only what and where.
    let err = |e: serde_json::Error| {
        DecodeError::Json(format!(
            "{:?} error at line {} column {}",
            e.classify(),
            e.line(),
            e.column()
        ))
    };
    Ok(match signal {
        Signal::Traces => Request::Traces(serde_json::from_slice(body).map_err(err)?),
        Signal::Logs => Request::Logs(serde_json::from_slice(body).map_err(err)?),
        Signal::Metrics => Request::Metrics(serde_json::from_slice(body).map_err(err)?),
    })
}

/// Data points of every metric of a request.
pub fn data_points(r: &ExportMetricsServiceRequest) -> usize {
    r.resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
            Some(Data::Summary(s)) => s.data_points.len(),
            None => 0,
        })
        .sum()
}

/// Nesting deeper than this is not descended into while counting (prost refuses beyond 100 anyway).
const MAX_SCAN_DEPTH: usize = 32;

/// Counts the nested messages of a protobuf body; `None` past `limit`.
pub fn count_messages(body: &[u8], limit: usize) -> Option<usize> {
    let mut budget = limit;
    match scan(body, 0, &mut budget) {
        Scanned::OverBudget => None,
        _ => Some(limit - budget),
    }
}

enum Scanned {
    Message,
    NotAMessage,
    OverBudget,
}

/// Walks `buf` as protobuf fields, descending into length-delimited ones that parse as messages and
/// taking one from `budget` for each.
fn scan(buf: &[u8], depth: usize, budget: &mut usize) -> Scanned {
    let mut pos = 0;
    while pos < buf.len() {
        let Some(key) = varint(buf, &mut pos) else {
            return Scanned::NotAMessage;
        };
        if key >> 3 == 0 {
            return Scanned::NotAMessage;
        }
        let skip = match key & 7 {
            0 => match varint(buf, &mut pos) {
                Some(_) => 0,
                None => return Scanned::NotAMessage,
            },
            1 => 8,
            5 => 4,
            2 => {
                let Some(len) = varint(buf, &mut pos).and_then(|l| usize::try_from(l).ok()) else {
                    return Scanned::NotAMessage;
                };
                let Some(inner) = buf.get(pos..pos.saturating_add(len)) else {
                    return Scanned::NotAMessage;
                };
                if depth < MAX_SCAN_DEPTH {
                    let mut trial = *budget;
                    match scan(inner, depth + 1, &mut trial) {
                        Scanned::Message if trial > 0 => *budget = trial - 1,
                        Scanned::Message | Scanned::OverBudget => return Scanned::OverBudget,
                        Scanned::NotAMessage => {}
                    }
                }
                len
            }
            _ => return Scanned::NotAMessage,
        };
        pos = match pos.checked_add(skip).filter(|p| *p <= buf.len()) {
            Some(p) => p,
            None => return Scanned::NotAMessage,
        };
    }
    Scanned::Message
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * shift);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Counts the objects and arrays of a JSON body (outside strings); `None` past `limit`.
pub fn count_containers(body: &[u8], limit: usize) -> Option<usize> {
    let (mut n, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'{' || b == b'[' {
            n += 1;
            if n > limit {
                return None;
            }
        }
    }
    Some(n)
}

/// The export response: `partial_success` set when records were rejected.
pub fn encode_response(
    signal: Signal,
    encoding: Encoding,
    rejected: u64,
    message: &str,
) -> Vec<u8> {
    let rejected = i64::try_from(rejected).unwrap_or(i64::MAX);
    let error_message = message.to_string();
    let any = rejected > 0 || !message.is_empty();
    if encoding == Encoding::Json {
        // OTLP/JSON: a full success is the empty object (opentelemetry-proto's serde would write
        // `"partialSuccess": null`), and 64-bit integers are decimal strings (its serde writes a number).
        if !any {
            return b"{}".to_vec();
        }
        let field = match signal {
            Signal::Traces => "rejectedSpans",
            Signal::Logs => "rejectedLogRecords",
            Signal::Metrics => "rejectedDataPoints",
        };
        let body = serde_json::json!({
            "partialSuccess": { field: rejected.to_string(), "errorMessage": error_message }
        });
        return serde_json::to_vec(&body).expect("a response serialises");
    }
    macro_rules! respond {
        ($resp:ident, $partial:ident, $field:ident) => {{
            $resp {
                partial_success: any.then(|| $partial {
                    $field: rejected,
                    error_message,
                }),
            }
            .encode_to_vec()
        }};
    }
    match signal {
        Signal::Traces => respond!(
            ExportTraceServiceResponse,
            ExportTracePartialSuccess,
            rejected_spans
        ),
        Signal::Logs => respond!(
            ExportLogsServiceResponse,
            ExportLogsPartialSuccess,
            rejected_log_records
        ),
        Signal::Metrics => respond!(
            ExportMetricsServiceResponse,
            ExportMetricsPartialSuccess,
            rejected_data_points
        ),
    }
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error response (fields 1 and 2; details are not sent).
#[derive(Clone, PartialEq, prost::Message, serde::Serialize)]
pub struct Status {
    /// A gRPC status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong and how to fix it.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// An error response body in the request's encoding.
pub fn encode_status(encoding: Encoding, code: i32, message: &str) -> Vec<u8> {
    let s = Status {
        code,
        message: message.to_string(),
    };
    match encoding {
        Encoding::Protobuf => s.encode_to_vec(),
        Encoding::Json => serde_json::to_vec(&s).expect("a status serialises"),
    }
}
