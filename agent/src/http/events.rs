//! `POST /v1/events`: one JSON event, a JSON array of events, or NDJSON; Hive-native or canonical.
//!
//! 1. The request reserves its size in the intake's budget of bodies in flight
//!    (`intake.max_bytes_in_flight`, [`super::budget`]: it waits up to 5 s for room, then gets 503 +
//!    Retry-After), then the body is read up to `intake.max_body_bytes` (413 beyond, checked against
//!    Content-Length first), into one buffer, within 30 s (408 after).
//! 2. It is split into events and each is processed on this side of the outbox ([`super::parse`]: at
//!    most `intake.max_events` per body, else 413 before anything is parsed; one value alive at a time;
//!    classify, adapt, redact), so only redacted events reach the writer. `?session=ID` is passed as the
//!    session hint for events that name no session themselves (as the tailer does with a per-session
//!    log's directory).
//! 3. Everything (kept, filtered, unreadable) is committed in one transaction; the response is sent after
//!    the commit. Unreadable events are received + rejected; the first
//!    [`MAX_DEAD_LETTERS`](super::parse::MAX_DEAD_LETTERS) are dead-lettered with their line number or
//!    index and the reason (never their content), the rest share one dead letter that counts them.
//!
//! Responses: 200 `{"accepted", "duplicates", "filtered", "rejected": 0, "evicted", "events"}` when every
//! event was readable; 400 with the same counts, `"committed": true`, `"errors": [{"line"|"index",
//! "error"}]` (the first 100) and `"errors_not_listed"` (how many more) when some were not — the good ones
//! **were** committed; 413 when the body is too large or holds too many events (nothing committed); 503 +
//! Retry-After when the outbox refuses (cap reached under `reject`, disk full) or the intake is busy
//! (`busy`, above): nothing of the request was committed.

use apiary_schema::ProcessOptions;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::BodyExt;
use serde_json::json;

use super::budget::{Refused, ADMIT_WAIT, BODY_READ_TIMEOUT};
use super::parse::{parse_body, Limits, Parsed};
use super::split::TooManyEvents;
use super::{ApiError, AppState, IntakeStats};

/// Bodies at least this large are processed on the blocking pool.
const INLINE_LIMIT: usize = 64 * 1024;

/// `?session=ID`: the session the events belong to when they name none themselves (Hive omits
/// `execution_id` on many queen-level events; the tailer knows it from the log's directory, an HTTP
/// producer can say it here).
#[derive(Debug, Default, serde::Deserialize)]
pub struct IntakeQuery {
    pub session: Option<String>,
}

pub async fn post_events(
    State(state): State<AppState>,
    axum::extract::Query(query): axum::extract::Query<IntakeQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let limit = state.intake.max_body_bytes;
    let result = try_intake(&state, query.session, &headers, body, limit).await;
    let stats = &state.stats;
    match &result {
        Ok(r) if r.status() == StatusCode::OK => IntakeStats::bump(&stats.requests_ok),
        Ok(_) => IntakeStats::bump(&stats.requests_partial),
        Err(ApiError::TooLarge { .. } | ApiError::TooManyEvents { .. }) => {
            IntakeStats::bump(&stats.requests_too_large)
        }
        Err(ApiError::Outbox(e)) if e.is_retryable() => IntakeStats::bump(&stats.requests_refused),
        Err(ApiError::Intake(Refused::Busy { .. })) => IntakeStats::bump(&stats.requests_busy),
        Err(_) => IntakeStats::bump(&stats.requests_failed),
    }
    result
}

async fn try_intake(
    state: &AppState,
    session: Option<String>,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Response, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > limit as u64) {
        return Err(ApiError::TooLarge { got: n, limit });
    }
    if let Some(s) = &session {
        let probe = crate::identity::SessionRegistration {
            session_id: s.clone(),
            ..Default::default()
        };
        probe.validate().map_err(ApiError::BadRequest)?;
    }
    // Held until the answer: the body, then what is parsed from it, live until the commit.
    let _room = (state.body_budget)
        .admit(declared.map_or(limit, |n| n as usize), ADMIT_WAIT)
        .await?;
    let bytes = read_body(body, limit, declared).await?;
    let limits = Limits::from(&state.intake);
    let parsed = if bytes.len() < INLINE_LIMIT {
        let keyer = state.outbox.colony_keys().keyer();
        parse_body(&bytes, &options(state, session.as_deref(), &keyer), limits)
    } else {
        let st = state.clone();
        tokio::task::spawn_blocking(move || {
            let keyer = st.outbox.colony_keys().keyer();
            let parsed = parse_body(&bytes, &options(&st, session.as_deref(), &keyer), limits);
            drop(bytes);
            parsed
        })
        .await
        .map_err(|e| ApiError::BadRequest(format!("could not process the body: {e}")))?
    };
    let parsed = parsed.map_err(|TooManyEvents { limit }| ApiError::TooManyEvents { limit })?;
    if parsed.items.is_empty() {
        return Err(ApiError::BadRequest("the body holds no events".into()));
    }
    respond(state, parsed).await
}

/// Commits the items, then answers with the counts (and the errors, if any).
async fn respond(state: &AppState, parsed: Parsed) -> Result<Response, ApiError> {
    let total = parsed.events();
    let bad = parsed.rejected();
    let Parsed {
        items,
        errors,
        unlisted,
        ..
    } = parsed;
    let report = state.outbox.submit(items).await?;
    let mut body = json!({
        "accepted": report.accepted,
        "duplicates": report.duplicates,
        "filtered": report.filtered,
        "rejected": report.rejected,
        "evicted": report.evicted,
        "events": total,
    });
    if bad == 0 {
        return Ok((StatusCode::OK, Json(body)).into_response());
    }
    body["committed"] = json!(true);
    body["error"] = json!({
        "code": "invalid_events",
        "message": format!(
            "{bad} of {total} events could not be read and were rejected; the other {} were committed",
            total - bad
        ),
    });
    body["errors"] = json!(errors);
    body["errors_not_listed"] = json!(unlisted);
    Ok((StatusCode::BAD_REQUEST, Json(body)).into_response())
}

fn options<'a>(
    state: &'a AppState,
    session: Option<&'a str>,
    colony: &'a apiary_schema::colony::ColonyKeyer,
) -> ProcessOptions<'a> {
    ProcessOptions {
        policy: &state.policy,
        zone: state.zone,
        source_identity: None,
        session_hint: session,
        colony: Some(colony),
    }
}

/// Reads the body into one buffer (sized from Content-Length when given), refusing it past `limit`,
/// or when it has not all arrived within [`BODY_READ_TIMEOUT`].
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    declared: Option<u64>,
) -> Result<Bytes, ApiError> {
    tokio::time::timeout(BODY_READ_TIMEOUT, read_all(body, limit, declared))
        .await
        .unwrap_or(Err(ApiError::Intake(Refused::Late {
            secs: BODY_READ_TIMEOUT.as_secs(),
        })))
}

async fn read_all(mut body: Body, limit: usize, declared: Option<u64>) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::TooLarge {
        got: limit as u64 + 1,
        limit,
    };
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize).min(limit));
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::BadRequest(format!("could not read the body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(too_large());
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_is_given_up_after_the_read_timeout() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
        tx.unbounded_send(Ok(Bytes::from_static(b"{\"type\": ")))
            .unwrap();
        let body = Body::from_stream(rx);
        let started = tokio::time::Instant::now();
        let err = read_body(body, 1024, None).await.unwrap_err();
        assert!(
            matches!(err, ApiError::Intake(Refused::Late { secs: 30 })),
            "{err:?}"
        );
        assert_eq!(started.elapsed(), BODY_READ_TIMEOUT);
        drop(tx);
    }

    #[tokio::test]
    async fn a_whole_body_is_read() {
        let body = Body::from("abc");
        assert_eq!(&read_body(body, 1024, Some(3)).await.unwrap()[..], b"abc");
    }
}
