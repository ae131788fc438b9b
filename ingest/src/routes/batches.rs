//! `POST /v1/batches`: the agent's batches (scope `ingest`).

use std::time::Instant;

use apiary_schema::BatchResponse;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::Json;
use http_body_util::BodyExt;

use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::intake::{check_batch, decode_body};
use crate::startup::AppState;
use crate::store::batch::{self, Sender};

/// Decodes, checks and stores one batch; answers the per-event verdicts.
#[tracing::instrument(skip_all, fields(tenant = %principal.tenant_id))]
pub async fn post_batch(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<BatchResponse>, ApiError> {
    let started = Instant::now();
    let result = handle(&state, &principal, &headers, body).await;
    match &result {
        Ok(r) => {
            state.metrics.batches.inc();
            state.metrics.events_accepted.add(r.accepted);
            state.metrics.events_duplicate.add(r.duplicates);
            state.metrics.events_rejected.add(r.rejected.len() as u64);
            state.metrics.batch_seconds.observe(started.elapsed());
        }
        Err(_) => state.metrics.batches_refused.inc(),
    }
    result.map(Json)
}

async fn handle(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    body: Body,
) -> Result<BatchResponse, ApiError> {
    principal.require(Scope::Ingest)?;
    if let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        let ct_main = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let jsonish = ct_main == "application/json"
            || ct_main.ends_with("+json")
            || ct_main == "application/octet-stream";
        if !jsonish {
            return Err(ApiError::UnsupportedMedia(format!(
                "Content-Type {ct:?} is not supported (use application/json)"
            )));
        }
    }
    let max = state.settings.max_body_bytes;
    let bytes = http_body_util::Limited::new(body, max)
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
        })?
        .to_bytes();
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let rules = state.rules.clone();
    let policy = state.policy.clone();
    let p = principal.clone();
    let max_out = rules.max_decompressed_bytes;
    let encoding = encoding.map(str::to_string);
    // Decompression, JSON parsing and validation are CPU work: keep them off the async workers.
    let checked = tokio::task::spawn_blocking(move || {
        let decoded = decode_body(encoding.as_deref(), &bytes, max_out)?;
        check_batch(&decoded, &p, &policy, &rules, chrono::Utc::now(), true)
    })
    .await
    .map_err(|e| ApiError::Internal(e.into()))??;
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
    let store = state.store.clone();
    tokio::spawn(async move { batch::write(&store, &sender, checked).await })
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
}
