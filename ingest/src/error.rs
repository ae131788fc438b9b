//! The one error type of the HTTP API.
//!
//! Every failure answers `{"error": {"code", "message"}}` (plus `details` for field-level problems) with
//! the right status. Internal failures answer 500 with an opaque message; the full cause chain is logged
//! once, here, and never sent. Not-found and cross-tenant look the same (404), so a caller cannot learn
//! that another tenant's id exists.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, for programs: `invalid_parameter`, `unauthenticated`, `not_found`, ...
    pub code: String,
    /// For people.
    pub message: String,
    /// One line per problem (422 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Vec<String>>,
}

impl ErrorBody {
    pub fn new(code: &str, message: &str) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: code.to_string(),
                message: message.to_string(),
                details: None,
            },
        }
    }
}

/// An API failure, one variant per kind of answer.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: a malformed request (bad JSON, bad compression, bad query parameter).
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// 422: well-formed JSON that does not match the contract; `details` lists the problems.
    #[error("{message}")]
    Invalid {
        message: String,
        details: Vec<String>,
    },
    /// 422: a well-formed body that cannot do what its method asks (a `PUT` without the whole resource);
    /// `code` names what is missing, the message how to go on.
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// 401: no token, or an unknown or revoked one.
    #[error("missing or invalid bearer token: send `Authorization: Bearer <token>` with a token from `apiary-ingest token create`")]
    Unauthenticated,
    /// 403: the token may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// 404: no such thing for this tenant.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// 409: the request contradicts what is stored (a device key already registered otherwise).
    #[error("{0}")]
    Conflict(String),
    /// 413: body or batch too large.
    #[error("{0}")]
    TooLarge(String),
    /// 415: unsupported Content-Encoding or Content-Type.
    #[error("{0}")]
    UnsupportedMedia(String),
    /// 429: the token's rate limit is exhausted; retry after the given time.
    #[error("rate limit exceeded")]
    RateLimited(Duration),
    /// 429: this replica has as many batches in flight as it takes now (the bound in force, between
    /// `min_batches_in_flight` and `max_batches_in_flight`); retry after the given time.
    #[error("the ingest is at capacity; push again after the Retry-After interval")]
    Overloaded(Duration),
    /// 503: a bounded resource of this server is in use up to its limit (live streams); retry later.
    #[error("{0}")]
    Busy(String),
    /// 503: the database is unreachable or overloaded; retry.
    #[error("service unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// 500: anything else. Opaque to the caller.
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    /// A 400 naming the offending query parameter.
    pub fn bad_param(param: &str, why: impl std::fmt::Display) -> ApiError {
        ApiError::BadRequest {
            code: "invalid_parameter",
            message: format!("parameter `{param}`: {why}"),
        }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Invalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_batch"),
            ApiError::Unprocessable { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ApiError::UnsupportedMedia(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            ApiError::Overloaded(_) => (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
            ApiError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

/// Maps database errors: connection trouble is retryable (503), the rest is internal.
impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> ApiError {
        match &e {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                ApiError::Unavailable(e.into())
            }
            sqlx::Error::Database(db)
                if db
                    .code()
                    .is_some_and(|c| c == "40P01" || c == "40001" || c.starts_with("57P")) =>
            {
                ApiError::Unavailable(e.into())
            }
            _ => ApiError::Internal(e.into()),
        }
    }
}

/// A path segment axum cannot decode (e.g. invalid UTF-8 after percent-decoding): 400, JSON body.
impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(e: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::BadRequest {
            code: "invalid_path",
            message: format!("the path is malformed: {}", e.body_text()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        match &self {
            ApiError::Internal(e) | ApiError::Unavailable(e) => {
                tracing::error!(error = ?e, status = status.as_u16(), "request failed");
            }
            _ => tracing::debug!(code, message = %self, "request refused"),
        }
        let mut body = ErrorBody::new(code, &self.to_string());
        if let ApiError::Invalid { details, .. } = &self {
            body.error.details = Some(details.clone());
        }
        let mut response = (status, axum::Json(body)).into_response();
        let retry = match &self {
            ApiError::RateLimited(d) | ApiError::Overloaded(d) => {
                Some(d.as_secs_f64().ceil().max(1.0) as u64)
            }
            ApiError::Unavailable(_) => Some(1),
            ApiError::Busy(_) => Some(5),
            _ => None,
        };
        if let Some(secs) = retry {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&secs.to_string()).expect("digits are a valid header"),
            );
        }
        response
    }
}

/// An error body as JSON, for responses built outside handlers (timeouts, unknown routes).
pub fn error_body(status: StatusCode, code: &str, message: &str) -> Response {
    (status, axum::Json(ErrorBody::new(code, message))).into_response()
}
