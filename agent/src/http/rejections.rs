//! Errors axum answers by itself, in the API's JSON shape.
//!
//! Handlers answer with [`ApiError`]; but an unknown route, a method a route does not serve, a body over
//! an extractor's limit or a query string or path that does not deserialize are answered by axum
//! before (or instead of) a handler, as plain text or an empty body. [`json_errors`] is the router's
//! outermost layer: any error response that is not JSON already becomes `{"error": {"code",
//! "message"}}` with the same status and headers (e.g. `Allow` on a 405); the message is axum's text,
//! with quoted input elided like every reason the agent records.

use axum::body::Body;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::ApiError;
use crate::outbox::sanitize_reason;

/// How much of a plain-text error body is read to become the message.
const MAX_MESSAGE_BYTES: usize = 4096;

/// The router's fallback: 404 for a route the API does not have.
pub async fn no_route(method: Method, uri: Uri) -> ApiError {
    let path: String = uri.path().chars().take(200).collect();
    ApiError::NotFound(format!(
        "no route {method} {}; the local API serves /v1/events, /v1/sessions, /v1/status, /v1/sync, \
         /v1/usage/sessions/{{id}} and /metrics",
        sanitize_reason(&path)
    ))
}

/// Turns a non-JSON error response into the JSON error shape (see the module notes).
pub async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&resp) {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, MAX_MESSAGE_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let mut message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string()
    } else {
        sanitize_reason(&text)
    };
    if status == StatusCode::METHOD_NOT_ALLOWED {
        if let Some(allow) = parts
            .headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
        {
            message = format!("method not allowed on this route; allowed: {allow}");
        }
    }
    let mut out = (
        status,
        Json(json!({"error": {"code": code_of(status), "message": message}})),
    )
        .into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

fn is_json(resp: &Response<Body>) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

/// The `code` of a status, as [`ApiError`] names them.
fn code_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "timeout",
        409 => "conflict",
        413 => "too_large",
        415 => "unsupported_media_type",
        422 => "unprocessable",
        429 => "too_many_requests",
        503 => "unavailable",
        s if s >= 500 => "internal",
        _ => "bad_request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_json(resp: Response) -> serde_json::Value {
        let b = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    #[tokio::test]
    async fn a_plain_text_rejection_becomes_a_json_error_with_its_status_and_headers() {
        let plain = Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET,HEAD")
            .body(Body::empty())
            .unwrap();
        let out = json_errors(plain).await;
        assert_eq!(out.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(out.headers()[header::ALLOW], "GET,HEAD");
        let v = body_json(out).await;
        assert_eq!(v["error"]["code"], "method_not_allowed");
        assert!(v["error"]["message"].as_str().unwrap().contains("GET,HEAD"));
        let text = (
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string: duplicate field `session`",
        )
            .into_response();
        let v = body_json(json_errors(text).await).await;
        assert_eq!(v["error"]["code"], "bad_request");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("duplicate field"));
    }

    #[tokio::test]
    async fn json_bodies_and_successes_are_left_alone() {
        let ok = (StatusCode::OK, "fine").into_response();
        let out = json_errors(ok).await;
        assert_eq!(out.status(), StatusCode::OK);
        let api = ApiError::Conflict("x".into()).into_response();
        let v = body_json(json_errors(api).await).await;
        assert_eq!(v["error"]["code"], "conflict");
    }
}
