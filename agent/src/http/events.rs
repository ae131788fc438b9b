//! `POST /v1/events`: one JSON event, a JSON array of events, or NDJSON; Hive-native or canonical.
//!
//! 1. The body is read up to `intake.max_body_bytes` (413 beyond, checked against Content-Length first).
//! 2. It is split into events: a body starting with `[` is one JSON array; otherwise the body is read
//!    as a stream of JSON values separated by whitespace (one object, pretty-printed or not, or NDJSON).
//!    If that stream does not parse, the body is read line by line so that each bad line gets its own
//!    error and the good ones are kept. A line longer than `intake.max_line_bytes` is an error without
//!    being parsed; invalid UTF-8 and nesting deeper than 128 levels are errors too.
//! 3. Each event goes through [`apiary_schema::process_value`] (classify, adapt, redact) on this side of
//!    the outbox, so only redacted events reach the writer. `?session=ID` is passed as the session hint
//!    for events that name no session themselves (as the tailer does with a per-session log's directory).
//! 4. Everything (kept, filtered, unreadable) is committed in one transaction; the response is sent after
//!    the commit. Unreadable events are received + rejected, dead-lettered with their line number and the
//!    reason (never their content).
//!
//! Responses: 200 `{"accepted", "duplicates", "filtered", "rejected": 0, "evicted", "events"}` when every
//! event was readable; 400 with the same counts, `"committed": true` and `"errors": [{"line"|"index",
//! "error"}]` (first 100) when some were not — the good ones **were** committed; 503 + Retry-After when
//! the outbox refuses (cap reached under `reject`, disk full): nothing of the request was committed.

use apiary_schema::{process_value, ProcessOptions};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Serialize;
use serde_json::{json, Value};

use super::{ApiError, AppState, IntakeStats};
use crate::outbox::Item;

/// Bodies at least this large are processed on the blocking pool.
const INLINE_LIMIT: usize = 64 * 1024;
/// At most this many per-event errors are listed in a response.
const MAX_LISTED_ERRORS: usize = 100;

/// One unreadable event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventError {
    /// 1-based line (NDJSON or a single value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// 0-based position in a JSON array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    pub error: String,
}

/// A request body turned into outbox items.
#[derive(Debug, Default)]
pub struct Parsed {
    pub items: Vec<Item>,
    pub errors: Vec<EventError>,
}

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
        Err(ApiError::TooLarge { .. }) => IntakeStats::bump(&stats.requests_too_large),
        Err(ApiError::Outbox(e)) if e.is_retryable() => IntakeStats::bump(&stats.requests_refused),
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
    let bytes = read_body(body, limit).await?;
    let parsed = if bytes.len() < INLINE_LIMIT {
        let opts = options(state, session.as_deref());
        parse_body(&bytes, &opts, state.intake.max_line_bytes)
    } else {
        let st = state.clone();
        tokio::task::spawn_blocking(move || {
            let opts = options(&st, session.as_deref());
            parse_body(&bytes, &opts, st.intake.max_line_bytes)
        })
        .await
        .map_err(|e| ApiError::BadRequest(format!("could not process the body: {e}")))?
    };
    if parsed.items.is_empty() {
        return Err(ApiError::BadRequest("the body holds no events".into()));
    }
    let total = parsed.items.len();
    let report = state.outbox.submit(parsed.items).await?;
    let mut body = json!({
        "accepted": report.accepted,
        "duplicates": report.duplicates,
        "filtered": report.filtered,
        "rejected": report.rejected,
        "evicted": report.evicted,
        "events": total,
    });
    if parsed.errors.is_empty() {
        return Ok((StatusCode::OK, Json(body)).into_response());
    }
    let bad = parsed.errors.len();
    body["committed"] = json!(true);
    body["error"] = json!({
        "code": "invalid_events",
        "message": format!(
            "{bad} of {total} events could not be read and were rejected; the other {} were committed",
            total - bad
        ),
    });
    body["errors"] = json!(parsed
        .errors
        .into_iter()
        .take(MAX_LISTED_ERRORS)
        .collect::<Vec<_>>());
    Ok((StatusCode::BAD_REQUEST, Json(body)).into_response())
}

fn options<'a>(state: &'a AppState, session: Option<&'a str>) -> ProcessOptions<'a> {
    ProcessOptions {
        policy: &state.policy,
        zone: state.zone,
        source_identity: None,
        session_hint: session,
    }
}

async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::TooLarge {
            got: limit as u64 + 1,
            limit,
        }),
        Err(e) => Err(ApiError::BadRequest(format!(
            "could not read the body: {e}"
        ))),
    }
}

/// Splits and processes a body (see the module notes).
pub fn parse_body(body: &[u8], opts: &ProcessOptions<'_>, max_line: usize) -> Parsed {
    let mut out = Parsed::default();
    let trimmed = body.trim_ascii_start();
    if trimmed.starts_with(b"[") {
        match serde_json::from_slice::<Vec<Value>>(trimmed) {
            Ok(values) => {
                for (i, v) in values.iter().enumerate() {
                    push_value(&mut out, v, opts, None, Some(i as u64));
                }
            }
            Err(e) => push_error(&mut out, Some(1), None, format!("invalid JSON array: {e}")),
        }
        return out;
    }
    if !try_parse_stream(body, opts, max_line, &mut out) {
        out = Parsed::default();
        parse_lines(body, opts, max_line, &mut out);
    }
    out
}

/// The fast path: the body is a stream of JSON values. False (and `out` is to be discarded) when it is
/// not, so the caller falls back to reading line by line.
fn try_parse_stream(
    body: &[u8],
    opts: &ProcessOptions<'_>,
    max_line: usize,
    out: &mut Parsed,
) -> bool {
    let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Value>();
    let (mut start, mut line) = (0usize, 1u64);
    while let Some(next) = stream.next() {
        let Ok(v) = next else { return false };
        let end = stream.byte_offset();
        let gap = &body[start..end];
        let value_at = gap.len() - gap.trim_ascii_start().len();
        line += gap[..value_at].iter().filter(|b| **b == b'\n').count() as u64;
        if end - start > max_line {
            return false;
        }
        push_value(out, &v, opts, Some(line), None);
        line += gap[value_at..].iter().filter(|b| **b == b'\n').count() as u64;
        start = end;
    }
    true
}

/// NDJSON, line by line, with per-line errors.
fn parse_lines(body: &[u8], opts: &ProcessOptions<'_>, max_line: usize, out: &mut Parsed) {
    for (i, raw) in body.split(|b| *b == b'\n').enumerate() {
        let line_no = Some(i as u64 + 1);
        let line = raw.trim_ascii();
        if line.is_empty() {
            continue;
        }
        if line.len() > max_line {
            let msg = format!(
                "line is {} bytes, over the limit of {max_line} (intake.max_line_bytes)",
                line.len()
            );
            push_error(out, line_no, None, msg);
            continue;
        }
        if let Err(e) = std::str::from_utf8(line) {
            let msg = format!("invalid UTF-8 at byte {}", e.valid_up_to());
            push_error(out, line_no, None, msg);
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) => push_value(out, &v, opts, line_no, None),
            Err(e) => push_error(out, line_no, None, format!("invalid JSON: {e}")),
        }
    }
}

fn push_value(
    out: &mut Parsed,
    v: &Value,
    opts: &ProcessOptions<'_>,
    line: Option<u64>,
    index: Option<u64>,
) {
    match process_value(v, opts) {
        Ok(outcome) => out.items.push(Item::from_outcome(&outcome)),
        Err(e) => push_error(out, line, index, e.to_string()),
    }
}

fn push_error(out: &mut Parsed, line: Option<u64>, index: Option<u64>, error: String) {
    let error = crate::outbox::store::sanitize_reason(&error);
    out.items.push(Item::Malformed {
        source: "http".into(),
        line_no: line.or(index),
        offset: None,
        reason: error.clone(),
    });
    out.errors.push(EventError { line, index, error });
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_schema::hive::Zone;
    use apiary_schema::Policy;

    const TURN: &str = r#"{"type": "llm_turn_complete", "stream_id": "queen", "node_id": "queen", "execution_id": "s1", "data": {"model": "m", "input_tokens": 5, "output_tokens": 1, "cached_tokens": 0, "cache_creation_tokens": 0, "cost_usd": 0.1}, "timestamp": "2026-11-03T10:15:09.412338", "seq": SEQ}"#;

    fn turn(seq: u32) -> String {
        TURN.replace("SEQ", &seq.to_string())
    }

    fn parse(body: &[u8]) -> Parsed {
        let policy = Policy::default_policy();
        let opts = ProcessOptions {
            policy: &policy,
            zone: Zone::Utc,
            source_identity: None,
            session_hint: None,
        };
        parse_body(body, &opts, 4096)
    }

    fn kept(p: &Parsed) -> usize {
        p.items
            .iter()
            .filter(|i| matches!(i, Item::Kept(_)))
            .count()
    }

    #[test]
    fn ndjson_pretty_objects_and_arrays_all_split_into_events() {
        let ndjson = format!("{}\n\n{}\n", turn(1), turn(2));
        assert_eq!(kept(&parse(ndjson.as_bytes())), 2);
        let v: Value = serde_json::from_str(&turn(3)).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let p = parse(pretty.as_bytes());
        assert_eq!((kept(&p), p.errors.len()), (1, 0));
        let arr = format!("  [{}, {}, 7]", turn(4), turn(5));
        let p = parse(arr.as_bytes());
        assert_eq!(kept(&p), 2);
        assert_eq!(p.errors[0].index, Some(2));
    }

    #[test]
    fn a_bad_line_gets_its_own_error_and_the_rest_is_kept() {
        let body = format!("{}\n{{oops\n{}\n{}\n", turn(1), turn(2), "x".repeat(5000));
        let p = parse(body.as_bytes());
        assert_eq!(kept(&p), 2);
        let lines: Vec<_> = p.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![Some(2), Some(4)]);
        assert!(p.errors[1].error.contains("over the limit"));
        assert_eq!(
            p.items.len(),
            4,
            "malformed lines are items too (dead-lettered)"
        );
    }

    #[test]
    fn an_event_over_the_line_limit_is_refused_even_when_it_is_valid_json() {
        let big = turn(1).replace("\"m\"", &format!("\"{}\"", "m".repeat(5000)));
        let p = parse(format!("{}\n{big}\n", turn(2)).as_bytes());
        assert_eq!((kept(&p), p.errors.len()), (1, 1));
        assert_eq!(p.errors[0].line, Some(2));
    }
}
