//! The local API on loopback (axum).
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/events[?session=ID]` | one JSON event, an array, or NDJSON; Hive-native or canonical ([`events`]); `session` = hint for events that name none |
//! | `POST /v1/sessions` | register a session with its own user and parent |
//! | `GET /v1/status` | sync state, mode, counts by outcome, pending, oldest pending age, last push |
//! | `PUT /v1/sync` | the desktop toggle: `{"enabled": bool, "endpoint"?, "token_file"?, "include_backlog"?, "purge"?}` |
//! | `GET /v1/usage/sessions/{id}` | tokens, cost and calls of a session and its workers, from local data |
//! | `GET /metrics` | Prometheus text |
//!
//! Every route requires `Authorization: Bearer <DIR/agent.token>` (401 otherwise). Errors are
//! `{"error": {"code", "message"}}`; retryable outbox conditions (cap reached, disk full) are 503 with
//! `Retry-After`.

mod error;
pub mod events;
mod local;
mod metrics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use apiary_schema::hive::Zone;
use apiary_schema::Policy;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;

pub use error::ApiError;

use crate::config::{IntakeSettings, Mode};
use crate::outbox::Outbox;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub outbox: Outbox,
    /// The bearer token producers must present.
    pub token: Arc<String>,
    pub policy: Arc<Policy>,
    pub zone: Zone,
    pub intake: IntakeSettings,
    pub mode: Mode,
    pub started_at: std::time::Instant,
    pub stats: Arc<IntakeStats>,
}

/// In-memory request counters for `/metrics`.
#[derive(Debug, Default)]
pub struct IntakeStats {
    pub requests_ok: AtomicU64,
    pub requests_partial: AtomicU64,
    pub requests_refused: AtomicU64,
    pub requests_too_large: AtomicU64,
    pub requests_unauthorized: AtomicU64,
    pub requests_failed: AtomicU64,
}

impl IntakeStats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The router with auth on every route.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/events", post(events::post_events))
        .route("/v1/sessions", post(local::post_session))
        .route("/v1/sessions/{id}", get(local::get_session))
        .route("/v1/status", get(local::get_status))
        .route("/v1/sync", put(local::put_sync))
        .route("/v1/usage/sessions/{id}", get(local::get_session_usage))
        .route("/metrics", get(metrics::get_metrics))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .with_state(state)
}

async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match presented {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => next.run(req).await,
        _ => {
            IntakeStats::bump(&state.stats.requests_unauthorized);
            ApiError::Unauthorized.into_response()
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads `DIR/agent.token`, creating it (mode 0600, 32 random bytes in hex) at first start.
pub fn load_or_create_token(data_dir: &std::path::Path) -> std::io::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("agent.token");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(data_dir)?;
    let token = hex::encode(rand::random::<[u8; 32]>());
    let tmp = data_dir.join("agent.token.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(token)
}
