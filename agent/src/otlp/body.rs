//! The edges of an OTLP request: its encoding, its compression, and error responses in its encoding.

use std::io::Read;

use apiary_schema::otel::wire::encode_status;
use apiary_schema::otel::Encoding;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use crate::http::budget::Refused;
use crate::outbox::OutboxError;

/// Everything an export can fail with; each maps to one HTTP status and one gRPC code.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("Content-Type must be application/x-protobuf or application/json, got {0:?}")]
    UnsupportedType(String),
    #[error("Content-Encoding must be gzip or none, got {0:?}")]
    UnsupportedEncoding(String),
    #[error("the body is over {limit} bytes, as sent or inflated (intake.max_body_bytes)")]
    TooLarge { limit: usize },
    #[error("{0} (intake.max_events bounds one export)")]
    TooMany(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("no such OTLP path; use /v1/traces, /v1/logs or /v1/metrics")]
    NotFound,
    /// The intake's bound on bodies in flight, or a body too slow to arrive.
    #[error(transparent)]
    Intake(Refused),
    #[error(transparent)]
    Outbox(OutboxError),
}

impl OtlpError {
    /// (HTTP status, gRPC code) of the error.
    fn parts(&self) -> (StatusCode, i32) {
        match self {
            OtlpError::UnsupportedType(_) | OtlpError::UnsupportedEncoding(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, 3)
            }
            OtlpError::TooLarge { .. } | OtlpError::TooMany(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, 8)
            }
            OtlpError::BadRequest(_) => (StatusCode::BAD_REQUEST, 3),
            OtlpError::NotFound => (StatusCode::NOT_FOUND, 5),
            // UNAVAILABLE and DEADLINE_EXCEEDED: both retryable for an OTLP exporter.
            OtlpError::Intake(Refused::Busy { .. }) => (StatusCode::SERVICE_UNAVAILABLE, 14),
            OtlpError::Intake(Refused::Late { .. }) => (StatusCode::REQUEST_TIMEOUT, 4),
            OtlpError::Outbox(e) if e.is_retryable() => (StatusCode::SERVICE_UNAVAILABLE, 14),
            OtlpError::Outbox(_) => (StatusCode::INTERNAL_SERVER_ERROR, 13),
        }
    }

    /// The error as a `google.rpc.Status` in `encoding`, with `Retry-After` when the outbox refused.
    pub fn into_response_as(self, encoding: Encoding) -> Response {
        let (status, code) = self.parts();
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self, "OTLP export failed");
            "internal error; see the agent's log".to_string()
        } else {
            self.to_string()
        };
        let mut resp = reply(status, encoding, encode_status(encoding, code, &message));
        if let OtlpError::Outbox(e) = &self {
            if let Some(v) = super::retry_after(e).filter(|_| status.is_server_error()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if let Some(v) = match &self {
            OtlpError::Intake(r) => r.retry_after(),
            _ => None,
        } {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// A response with `bytes` as the body of `encoding`'s content type.
pub fn reply(status: StatusCode, encoding: Encoding, bytes: Vec<u8>) -> Response {
    let ctype = match encoding {
        Encoding::Protobuf => "application/x-protobuf",
        Encoding::Json => "application/json",
    };
    let mut resp = Response::new(axum::body::Body::from(bytes));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    resp
}

/// The body's encoding from `Content-Type` (parameters such as `; charset=utf-8` ignored).
pub fn encoding(headers: &HeaderMap) -> Result<Encoding, OtlpError> {
    let raw = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = raw
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(Encoding::Protobuf),
        "application/json" => Ok(Encoding::Json),
        _ => Err(OtlpError::UnsupportedType(raw.chars().take(100).collect())),
    }
}

/// Whether the body is gzip-compressed (`Content-Encoding: gzip`); other encodings are refused.
pub fn is_gzip(headers: &HeaderMap) -> Result<bool, OtlpError> {
    match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("" | "identity") => Ok(false),
        Some("gzip") => Ok(true),
        Some(other) => Err(OtlpError::UnsupportedEncoding(
            other.chars().take(100).collect(),
        )),
    }
}

/// Inflates a gzip body, refusing it once it passes `limit` bytes (a small bomb costs `limit`, no more).
pub fn inflate(gz: &[u8], limit: usize) -> Result<Vec<u8>, OtlpError> {
    let mut out = Vec::with_capacity((gz.len() * 4).min(limit));
    let mut reader = flate2::read::MultiGzDecoder::new(gz).take(limit as u64 + 1);
    reader
        .read_to_end(&mut out)
        .map_err(|e| OtlpError::BadRequest(format!("the gzip body cannot be inflated: {e}")))?;
    if out.len() > limit {
        return Err(OtlpError::TooLarge { limit });
    }
    Ok(out)
}
