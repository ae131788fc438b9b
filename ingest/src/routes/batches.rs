//! `POST /v1/batches`: the agent's batches (scope `ingest`).

use std::time::{Duration, Instant};

use apiary_schema::BatchResponse;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::Json;
use http_body_util::BodyExt;

use super::docs::{BatchBody, BatchErrors, BatchResponseBody};
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::intake::{check_batch, decode_body, IntakeError};
use crate::state::AppState;
use crate::store::batch::{self, Sender};

/// Ingest a batch of canonical events (scope ingest). Content-Encoding gzip or zstd accepted.
///
/// Events and session bindings together count towards max_batch_events (413). A binding whose ids
/// (session, user, device, parent; and agent.device_id) are not ids by the policy's rule — e.g. they look
/// like an e-mail address, a path or a key — or whose first_seen_at (clock-corrected) lies outside the
/// accepted window refuses the whole batch (422, one detail per problem). A token bound to a user or
/// device may write only that user's (device's) sessions: an event whose session, parent or colony
/// belongs to another is rejected per event with the reason. A token not bound to the batch's device
/// may not report as a device that another user's token or registered key is bound to (403).
///
/// Every answer carries `push_interval_ms`: how long the ingest wants this device's agent to let a
/// trickle of events gather before its next push — its interval at rest, longer while it is loaded.
/// Past its bound on batches in flight, or past the token's share of it, the ingest answers 429 with
/// `Retry-After` before reading the body.
///
/// With the header `X-Apiary-Quota: 1` the answer also carries `quota`: the budgets that apply to the
/// token's user (the tenant's budgets without a user, and that user's), each in its current period,
/// read at most 10 seconds before. Advisory: a spent budget never refuses a batch.
#[utoipa::path(
    post,
    path = "/v1/batches",
    request_body(content = BatchBody, content_type = "application/json"),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Per-event verdicts. Replaying a batch changes nothing.", body = BatchResponseBody),
        BatchErrors
    )
)]
#[tracing::instrument(skip_all, fields(tenant = %principal.tenant_id))]
pub async fn post_batch(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<BatchResponse>, ApiError> {
    let started = Instant::now();
    // A token that may not send batches holds no place among them.
    if let Err(e) = principal.require(Scope::Ingest) {
        state.metrics.batches_refused.inc();
        return Err(e);
    }
    let admitted = match state.cadence.admit(principal.token_key()) {
        Ok(admitted) => admitted,
        Err(over) => {
            state.metrics.batches_refused.inc();
            match over.token_share {
                true => state.metrics.batches_over_token_share.inc(),
                false => state.metrics.batches_overloaded.inc(),
            };
            return Err(ApiError::Overloaded(over.retry_after));
        }
    };
    // The cadence judges the server's time: from the body in hand (a device's slow upload is its link,
    // not this node's load) to the answer.
    let mut body_read = None;
    let result = handle(&state, &principal, &headers, body, &mut body_read).await;
    // An error answer's batch is timed as one of the agent's usual size (its events were not counted).
    let events = result
        .as_ref()
        .map_or(0, |r| r.accepted + r.duplicates + r.rejected.len() as u64);
    let server_time = body_read.map_or(Duration::ZERO, |at: Instant| at.elapsed());
    state.cadence.observe(server_time, events);
    drop(admitted);
    match &result {
        Ok(r) => {
            state.metrics.batches.inc();
            state.metrics.events_accepted.inc_by(r.accepted);
            state.metrics.events_duplicate.inc_by(r.duplicates);
            state
                .metrics
                .events_rejected
                .inc_by(r.rejected.len() as u64);
            state.metrics.observe_batch(started.elapsed());
        }
        Err(_) => {
            state.metrics.batches_refused.inc();
        }
    }
    result.map(Json)
}

async fn handle(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    body: Body,
    body_read: &mut Option<Instant>,
) -> Result<BatchResponse, ApiError> {
    principal.require(Scope::Ingest)?;
    check_content_type(headers)?;
    let bytes = read_body(body, state.settings.max_body_bytes).await?;
    *body_read = Some(Instant::now());
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (rules, policy, p) = (state.rules.clone(), state.policy.clone(), principal.clone());
    // Decompression, JSON parsing and validation are CPU work: keep them off the async workers.
    let checked = tokio::task::spawn_blocking(move || {
        let decoded = decode_body(encoding.as_deref(), &bytes, rules.max_decompressed_bytes)?;
        check_batch(&decoded, &p, &policy, &rules, chrono::Utc::now(), true)
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))??;
    crate::store::device_owners::check_sender(
        &state.pool,
        principal.tenant_id,
        principal.user_id.as_deref(),
        principal.device_id.as_deref(),
        checked.device_id.as_deref(),
    )
    .await?;
    let device = checked
        .device_id
        .clone()
        .or_else(|| principal.device_id.clone());
    let sender = Sender {
        tenant_id: principal.tenant_id,
        user_id: principal.user_id.clone(),
        device_id: principal.device_id.clone(),
        live: true,
    };
    // The write runs in a task of its own: if the client goes away (or the request times out) while the
    // batch is being stored, dropping the request's future must not cut the transaction off in the middle
    // of a statement — a `COPY` abandoned half-way leaves the pooled connection out of protocol sync, and
    // the next request to get it fails. The task always commits or rolls back; a client that gave up
    // simply re-sends, and dedup makes that harmless.
    // With group commit the writer tasks do this (and group the batch with concurrent ones).
    let mut answer = match &state.group_commit {
        Some(writers) => writers.submit(sender, checked).await?,
        None => {
            let store = state.store.clone();
            tokio::spawn(async move { batch::write(&store, &sender, checked).await })
                .await
                .map_err(|e| ApiError::Internal(e.into()))??
        }
    };
    if answer.accepted > 0 {
        state.budgets.mark(principal.tenant_id);
    }
    let interval = state.cadence.interval_for(device.as_deref());
    answer.push_interval_ms = Some(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX));
    if wants_quota(headers) {
        // The batch is committed: a failure to read the quota only leaves it out of the answer.
        match state
            .budgets
            .quota(
                &state.pool,
                &state.reads,
                principal.tenant_id,
                principal.user_id.as_deref(),
            )
            .await
        {
            Ok(q) => answer.quota = Some((*q).clone()),
            Err(e) => tracing::warn!(error = %e, "could not read the quota for a batch answer"),
        }
    }
    Ok(answer)
}

/// Whether the agent asked for the budgets that apply to it (`X-Apiary-Quota: 1`; older agents refuse
/// fields they do not know, so the answer carries it only on request).
fn wants_quota(headers: &HeaderMap) -> bool {
    headers
        .get(apiary_schema::quota::QUOTA_HEADER)
        .is_some_and(|v| v.as_bytes() == b"1")
}

/// 415 unless the `Content-Type`, when given, is JSON (or `application/octet-stream`).
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(());
    };
    let main = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if main == "application/json" || main.ends_with("+json") || main == "application/octet-stream" {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMedia(format!(
            "Content-Type {ct:?} is not supported (use application/json)"
        )))
    }
}

/// The body, at most `max` bytes (413 beyond).
async fn read_body(body: Body, max: usize) -> Result<bytes::Bytes, ApiError> {
    let collected = http_body_util::Limited::new(body, max)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::TooLarge(format!("the body exceeds {max} bytes"))
            } else {
                ApiError::BadRequest {
                    code: "bad_body",
                    message: "the request body could not be read".into(),
                }
            }
        })?;
    Ok(collected.to_bytes())
}

/// An intake refusal as its HTTP answer.
impl From<IntakeError> for ApiError {
    fn from(e: IntakeError) -> ApiError {
        let message = e.to_string();
        match e {
            IntakeError::UnsupportedEncoding(_) => ApiError::UnsupportedMedia(message),
            IntakeError::Encoding(_) => ApiError::BadRequest {
                code: "bad_encoding",
                message,
            },
            IntakeError::TooLarge(m) => ApiError::TooLarge(m),
            IntakeError::MalformedJson(_) => ApiError::BadRequest {
                code: "malformed_json",
                message,
            },
            IntakeError::UnsupportedVersion(m) => ApiError::BadRequest {
                code: "unsupported_schema_version",
                message: m,
            },
            IntakeError::Invalid { message, details } => ApiError::Invalid { message, details },
            IntakeError::Forbidden(m) => ApiError::Forbidden(m),
        }
    }
}
