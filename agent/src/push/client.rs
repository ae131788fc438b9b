//! One `POST /v1/batches`: gzip, bearer token, `X-Apiary-Quota: 1` (the answer then carries the budget
//! state of the token's user, see [`apiary_schema::quota`]), and a classification of what came back.

use std::io::Write;
use std::time::Duration;

use apiary_schema::quota::QUOTA_HEADER;
use apiary_schema::BatchResponse;
use flate2::write::GzEncoder;
use flate2::Compression;
use secrecy::{ExposeSecret, SecretString};

use super::backoff::parse_retry_after;

/// What the ingest (or the network) said about a batch.
#[derive(Debug)]
pub enum SendResult {
    /// 2xx with per-event verdicts.
    Verdicts(BatchResponse),
    /// Worth retrying later: connection error, timeout, 408, 429, 5xx, or an unreadable 2xx.
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// 413: the batch is too large; split it.
    TooLarge,
    /// 401/403: the token is not (or no longer) good; stop and ask the user to re-authenticate.
    Unauthorized { status: u16, message: String },
    /// Another 4xx for the whole batch, in the ingest's own error format: some event in it is
    /// unacceptable. (A 404/405 or a 4xx without the ingest's JSON error body means the endpoint is not
    /// an ingest's batch route: a configuration problem, not a verdict on the events, so it is a
    /// [`SendResult::Retry`] whose reason says which URL to give.)
    Refused { status: u16, message: String },
}

impl SendResult {
    /// The answer in words, for logs and `status` (empty for verdicts).
    pub fn problem(&self) -> String {
        match self {
            SendResult::Verdicts(_) => String::new(),
            SendResult::Retry { reason, .. } => reason.clone(),
            SendResult::TooLarge => "the ingest answered 413 (too large)".into(),
            SendResult::Unauthorized { status, message } => unauthorized(*status, message),
            SendResult::Refused { status, message } => format!("HTTP {status}: {message}"),
        }
    }
}

/// A 401/403 in words, with the ingest's reason; a 401 also says what to do.
pub fn unauthorized(status: u16, message: &str) -> String {
    match status {
        401 => format!(
            "the ingest refused the token (401: {message}): check the token in the --token-file given to \
             `apiary-agent sync enable`, or create one with `apiary-ingest token create --tenant T --scope \
             ingest` and write it to that file: sharing resumes by itself once the ingest accepts it"
        ),
        _ => format!("the ingest answered {status}: {message}"),
    }
}

/// Errors before anything was sent.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("token file refused: {0}")]
    TokenFile(crate::private::SecretFileError),
    #[error("endpoint {0:?} refused: {1}")]
    Endpoint(String, String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error(transparent)]
    Outbox(#[from] crate::outbox::OutboxError),
}

/// Builds the shared HTTP client (rustls, no OpenSSL).
pub fn http_client(
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<reqwest::Client, PushError> {
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .timeout(request_timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .user_agent(concat!("apiary-agent/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| PushError::Client(e.to_string()))
}

/// Gzip-compresses a body.
pub fn gzip(body: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(body.len() / 6 + 64), Compression::fast());
    enc.write_all(body).expect("writing to a Vec cannot fail");
    enc.finish().expect("finishing a Vec cannot fail")
}

/// Sends one batch body and classifies the answer.
#[tracing::instrument(skip_all, fields(url = %url, bytes = body.len()))]
pub async fn send(
    client: &reqwest::Client,
    url: &reqwest::Url,
    token: &SecretString,
    body: &[u8],
) -> SendResult {
    let response = client
        .post(url.clone())
        .bearer_auth(token.expose_secret())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::CONTENT_ENCODING, "gzip")
        .header(QUOTA_HEADER, "1")
        .body(gzip(body))
        .send()
        .await;
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            let kind = if e.is_timeout() {
                "timeout"
            } else if e.is_connect() {
                "connect"
            } else {
                "transport"
            };
            return SendResult::Retry {
                reason: format!("{kind}: {}", error_chain(&e)),
                retry_after: None,
            };
        }
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let text = match response.text().await {
        Ok(t) => t,
        Err(e) => {
            return SendResult::Retry {
                reason: format!("reading the response: {}", error_chain(&e)),
                retry_after,
            }
        }
    };
    classify(status, &text, retry_after)
}

/// Classifies a status and body.
pub fn classify(status: u16, body: &str, retry_after: Option<Duration>) -> SendResult {
    let message = || error_message(body);
    match status {
        200..=299 => match serde_json::from_str::<BatchResponse>(body) {
            Ok(v) => SendResult::Verdicts(v),
            Err(e) => SendResult::Retry {
                reason: format!("unreadable {status} response: {e}"),
                retry_after,
            },
        },
        408 | 429 | 500..=599 => SendResult::Retry {
            reason: format!("HTTP {status}: {}", message()),
            retry_after,
        },
        413 => SendResult::TooLarge,
        401 | 403 => SendResult::Unauthorized {
            status,
            message: message(),
        },
        404 | 405 => SendResult::Retry {
            reason: misconfigured(status),
            retry_after,
        },
        _ if !is_ingest_error(body) => SendResult::Retry {
            reason: format!(
                "the endpoint answered HTTP {status} without an Apiary error body ({:?}): is it \
                 the ingest's base URL?",
                body.chars().take(80).collect::<String>()
            ),
            retry_after,
        },
        _ => SendResult::Refused {
            status,
            message: message(),
        },
    }
}

/// What to tell the user when the batch route is not where the endpoint says.
fn misconfigured(status: u16) -> String {
    format!(
        "the endpoint answers HTTP {status} for /v1/batches: is it the ingest's base URL? Give \
         `sync enable --endpoint https://ingest.example` without a path (the agent appends \
         /v1/batches itself)"
    )
}

/// An `{"error": {"code": …}}` body, as every ingest error is.
fn is_ingest_error(body: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .is_some_and(|v| v.pointer("/error/code").is_some_and(|c| c.is_string()))
}

/// `error.message` of an ingest error body, else the body's start.
fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.chars().take(200).collect())
}

/// An error with its sources, `: `-separated (reqwest hides the cause behind "error sending request").
pub fn error_chain(e: &dyn std::error::Error) -> String {
    apiary_plumbing::error::chain(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_contract_says() {
        let ok = r#"{"accepted": 2, "duplicates": 1, "rejected": []}"#;
        assert!(
            matches!(classify(200, ok, None), SendResult::Verdicts(v) if v.accepted == 2 && v.quota.is_none())
        );
        let with_quota = r#"{"accepted": 1, "duplicates": 0, "rejected": [], "quota": {"as_of": "2026-11-03T10:00:00Z", "budgets": []}, "later": 1}"#;
        assert!(
            matches!(classify(200, with_quota, None), SendResult::Verdicts(v) if v.quota.is_some()),
            "a quota is read, and a field the ingest adds later is ignored"
        );
        for s in [408, 429, 500, 502, 503, 504] {
            assert!(
                matches!(
                    classify(s, "", Some(Duration::from_secs(3))),
                    SendResult::Retry {
                        retry_after: Some(_),
                        ..
                    }
                ),
                "{s}"
            );
        }
        assert!(matches!(classify(413, "", None), SendResult::TooLarge));
        assert!(
            matches!(classify(401, r#"{"error":{"code":"unauthorized","message":"bad token"}}"#, None),
            SendResult::Unauthorized { status: 401, message } if message == "bad token")
        );
        assert!(matches!(
            classify(403, "", None),
            SendResult::Unauthorized { .. }
        ));
        let refusal = r#"{"error":{"code":"invalid","message":"bad batch"}}"#;
        assert!(matches!(
            classify(422, refusal, None),
            SendResult::Refused { status: 422, .. }
        ));
        for s in [404, 405] {
            assert!(
                matches!(
                    classify(s, r#"{"error":{"code":"not_found","message":"no route"}}"#, None),
                    SendResult::Retry { ref reason, .. } if reason.contains(&format!("HTTP {s} for /v1/batches"))
                ),
                "{s}"
            );
        }
        assert!(
            matches!(
                classify(400, "<html>Bad Request</html>", None),
                SendResult::Retry { ref reason, .. } if reason.contains("base URL")
            ),
            "a 4xx that is not the ingest's error is a wrong endpoint, not a verdict"
        );
        assert!(
            matches!(classify(200, "<html>", None), SendResult::Retry { .. }),
            "an unreadable 2xx is retried"
        );
    }
}
