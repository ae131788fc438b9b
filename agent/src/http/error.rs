//! One API error type for the local API.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::budget::Refused;
use crate::outbox::OutboxError;

/// Everything a local API call can fail with; each maps to one status.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or wrong bearer token (see DIR/agent.token)")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("request body is {got} bytes or more; the limit is {limit} (intake.max_body_bytes)")]
    TooLarge { got: u64, limit: usize },
    #[error("the body holds more than {limit} events (intake.max_events); send them in smaller requests")]
    TooManyEvents { limit: usize },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{limit} live streams are open already (the most the agent serves); close one or retry later")]
    TooManyStreams { limit: usize },
    /// The intake's bound on bodies in flight, or a body too slow to arrive ([`super::budget`]).
    #[error(transparent)]
    Intake(#[from] super::budget::Refused),
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    /// Encoding `/metrics` failed (writing into a string: not expected to happen).
    #[error("cannot encode the metrics")]
    Metrics(#[source] std::fmt::Error),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::TooManyEvents { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_many_events"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::TooManyStreams { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "too_many_streams")
            }
            ApiError::Intake(Refused::Busy { .. }) => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            ApiError::Intake(Refused::Late { .. }) => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::Metrics(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            ApiError::Outbox(e) => match e {
                OutboxError::Full { .. } => (StatusCode::SERVICE_UNAVAILABLE, "outbox_full"),
                OutboxError::DiskFull => (StatusCode::SERVICE_UNAVAILABLE, "disk_full"),
                OutboxError::SessionConflict(_) => (StatusCode::CONFLICT, "session_conflict"),
                e if e.is_retryable() => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            },
        }
    }
}

impl ApiError {
    /// The message with its causes (an outbox error's message names the phase; its cause follows).
    fn detailed(&self) -> String {
        match self {
            ApiError::Outbox(e) => e.detailed(),
            e => e.to_string(),
        }
    }
}

impl ApiError {
    /// The status and the message a client is shown: a 500's cause is logged here, once, and never shown.
    /// (The JSON answer and the settings page word an error alike.)
    pub(crate) fn status_and_message(&self) -> (StatusCode, String) {
        let (status, _) = self.parts();
        let message = if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(error = %self.detailed(), "local API request failed");
            "internal error; see the agent's log".to_string()
        } else {
            self.detailed()
        };
        (status, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (_, code) = self.parts();
        let (status, message) = self.status_and_message();
        let mut resp = (
            status,
            Json(json!({"error": {"code": code, "message": message}})),
        )
            .into_response();
        if let ApiError::TooManyStreams { .. } = &self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if let Some(v) = match &self {
            ApiError::Intake(r) => r.retry_after(),
            _ => None,
        } {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        if let ApiError::Outbox(e) = &self {
            if let Some(after) = e.retry_after().filter(|_| status.is_server_error()) {
                let secs = after.as_secs().max(1).to_string();
                if let Ok(v) = HeaderValue::from_str(&secs) {
                    resp.headers_mut().insert(header::RETRY_AFTER, v);
                }
            }
        }
        resp
    }
}
