//! The OTLP/HTTP receiver: `POST /v1/logs`, `/v1/traces`, `/v1/metrics` on its own loopback listener
//! (`otlp.listen`, default `127.0.0.1:4318`; `otlp.enabled = false` turns it off).
//!
//! Same contract as `POST /v1/events` ([`crate::http::events`]), and the same pieces:
//! 1. The bearer token (intake or settings token, [`crate::http::require_token`]): producers send it as
//!    `OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer …"`. 401 without it.
//! 2. The body is read up to `intake.max_body_bytes` ([`crate::http::events::read_body`], 413 beyond);
//!    `Content-Encoding: gzip` is inflated up to the same limit ([`body::inflate`]). `Content-Type`
//!    `application/x-protobuf` or `application/json` (OTLP's JSON mapping); anything else is 415.
//! 3. Decoded by [`apiary_schema::otel::decode`] with its bounds checked first: at most
//!    `intake.max_events` spans, log records or data points, and `intake.max_events` × 8 + 4096 nested
//!    messages (413 beyond, nothing committed). A body that is not an export request is 400.
//! 4. Every record is mapped and redacted by [`apiary_schema::process_otlp`] (the same policy step as
//!    Hive's events) and turned into outbox items by [`crate::http::parse::Parsed`]: kept events, filter
//!    counts, and unreadable records as dead letters (the first 100 each, the rest counted in one).
//! 5. One commit; the response after it: 200 with `partial_success.rejected_*` = the unreadable records
//!    (the others were committed), or 503 + `Retry-After` when the outbox refuses (cap reached under
//!    `reject`, disk full) — OTLP exporters retry exactly 429/502/503/504 — with nothing committed.
//!
//! Responses use the request's encoding: an `Export*ServiceResponse`, or a `google.rpc.Status` for
//! errors (gRPC code + message, never a quote of the body).

mod body;

use apiary_schema::otel::{self, Bounds, Encoding, Signal};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::post;
use axum::Router;

use crate::http::budget::{Refused, ADMIT_WAIT};
use crate::http::parse::Parsed;
use crate::http::{ApiError, AppState, IntakeStats};
use crate::outbox::OutboxError;

pub use body::OtlpError;

/// Bodies at least this large are decoded and mapped on the blocking pool.
const INLINE_LIMIT: usize = 64 * 1024;

/// The OTLP router: the three signals behind the intake token.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(logs))
        .route("/v1/metrics", post(metrics))
        .fallback(|| async { OtlpError::NotFound.into_response_as(Encoding::Json) })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::http::require_token,
        ))
        .with_state(state)
}

async fn traces(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    export(&s, Signal::Traces, &headers, body).await
}

async fn logs(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    export(&s, Signal::Logs, &headers, body).await
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    export(&s, Signal::Metrics, &headers, body).await
}

/// One export request, start to finish (see the module notes), counted in the intake's statistics.
async fn export(state: &AppState, signal: Signal, headers: &HeaderMap, body: Body) -> Response {
    let encoding = match body::encoding(headers) {
        Ok(e) => e,
        Err(e) => return e.into_response_as(Encoding::Json),
    };
    let result = try_export(state, signal, encoding, headers, body).await;
    let stats = &state.stats;
    match &result {
        Ok((_, 0)) => IntakeStats::bump(&stats.requests_ok),
        Ok(_) => IntakeStats::bump(&stats.requests_partial),
        Err(OtlpError::TooLarge { .. } | OtlpError::TooMany(_)) => {
            IntakeStats::bump(&stats.requests_too_large)
        }
        Err(OtlpError::Outbox(e)) if e.is_retryable() => IntakeStats::bump(&stats.requests_refused),
        Err(OtlpError::Intake(Refused::Busy { .. })) => IntakeStats::bump(&stats.requests_busy),
        Err(_) => IntakeStats::bump(&stats.requests_failed),
    }
    match result {
        Ok((parsed_events, rejected)) => {
            let message = if rejected == 0 {
                String::new()
            } else {
                format!(
                    "{rejected} of {parsed_events} {} could not be read and were rejected (see the \
                     agent's dead letters); the others were committed",
                    signal.record()
                )
            };
            let bytes = otel::wire::encode_response(signal, encoding, rejected, &message);
            body::reply(StatusCode::OK, encoding, bytes)
        }
        Err(e) => e.into_response_as(encoding),
    }
}

/// Reads, decodes, maps and commits; `(records, rejected)` after the commit.
async fn try_export(
    state: &AppState,
    signal: Signal,
    encoding: Encoding,
    headers: &HeaderMap,
    body: Body,
) -> Result<(u64, u64), OtlpError> {
    let limit = state.intake.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(OtlpError::TooLarge { limit });
    }
    let gzip = body::is_gzip(headers)?;
    // The body as sent, and its inflated copy (up to the limit) while both are alive; held until the
    // answer ([`crate::http::budget`]).
    let size = declared.map_or(limit, |n| n as usize) + if gzip { limit } else { 0 };
    let _room = state
        .body_budget
        .admit(size, ADMIT_WAIT)
        .await
        .map_err(OtlpError::Intake)?;
    let raw = crate::http::events::read_body(body, limit, declared)
        .await
        .map_err(|e| match e {
            ApiError::Intake(r) => OtlpError::Intake(r),
            ApiError::TooLarge { .. } => OtlpError::TooLarge { limit },
            other => OtlpError::BadRequest(other.to_string()),
        })?;
    let bounds = Bounds {
        max_records: state.intake.max_events,
        max_nested: state
            .intake
            .max_events
            .saturating_mul(8)
            .saturating_add(4096),
    };
    let st = state.clone();
    let work = move || -> Result<Parsed, OtlpError> {
        let bytes = if gzip {
            body::inflate(&raw, limit)?
        } else {
            raw.to_vec()
        };
        drop(raw);
        let request = otel::decode(signal, encoding, &bytes, bounds)?;
        drop(bytes);
        Ok(to_items(&request, &st))
    };
    let parsed = if declared.is_some_and(|n| (n as usize) < INLINE_LIMIT) && !gzip {
        work()?
    } else {
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| OtlpError::BadRequest(format!("could not process the body: {e}")))??
    };
    let (events, rejected) = (parsed.events(), parsed.rejected());
    if !parsed.items.is_empty() {
        state.outbox.submit(parsed.items).await?;
    }
    Ok((events, rejected))
}

/// Maps and redacts every record, and turns the outcomes into outbox items.
fn to_items(request: &otel::Request, state: &AppState) -> Parsed {
    let mut parsed = Parsed::default();
    for (index, result) in apiary_schema::process_otlp(request, &state.policy)
        .into_iter()
        .enumerate()
    {
        match result {
            Ok(outcome) => parsed.push_outcome(&outcome),
            Err(e) => parsed.reject(None, Some(index as u64), e.to_string()),
        }
    }
    parsed.finish();
    parsed
}

impl From<OutboxError> for OtlpError {
    fn from(e: OutboxError) -> OtlpError {
        OtlpError::Outbox(e)
    }
}

impl From<otel::DecodeError> for OtlpError {
    fn from(e: otel::DecodeError) -> OtlpError {
        match e {
            otel::DecodeError::TooManyNested { .. } | otel::DecodeError::TooManyRecords { .. } => {
                OtlpError::TooMany(e.to_string())
            }
            other => OtlpError::BadRequest(other.to_string()),
        }
    }
}

/// Writes `DIR/otlp.addr` (the bound address), like `agent.addr`.
pub fn write_addr(data_dir: &std::path::Path, addr: std::net::SocketAddr) -> std::io::Result<()> {
    crate::private::write_atomic(&data_dir.join("otlp.addr"), addr.to_string().as_bytes())
}

/// `Retry-After` for a refused export.
fn retry_after(e: &OutboxError) -> Option<HeaderValue> {
    let secs = e.retry_after()?.as_secs().max(1);
    HeaderValue::from_str(&secs.to_string()).ok()
}

#[cfg(test)]
mod tests;
