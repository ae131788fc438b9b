//! The local API on loopback (axum).
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/events[?session=ID]` | one JSON event, an array, or NDJSON; Hive-native or canonical ([`events`]); `session` = hint for events that name none |
//! | `POST /v1/sessions` | register a session with its own user and parent |
//! | `GET /v1/status` | sync state, mode, counts by outcome, pending, oldest pending age, last push |
//! | `GET /v1/quota` | the budgets of this device's user as the ingest last reported them: `{"quota": Quota or null, "received_at": RFC 3339 or null, "advisory": true}` ([`crate::outbox::QuotaView`]); 200 with nulls until one arrived |
//! | `PUT /v1/sync` | the desktop toggle (settings token only): `{"enabled": bool, "endpoint"?, "token_file"?, "include_backlog"?, "purge"?}` |
//! | `GET /v1/sessions[?status=&limit=&cursor=]` | this device's sessions, most recently active first, in the ingest's body shape ([`sessions`]) |
//! | `GET /v1/sessions/{id}` | local status and history (shared health model), durations (wall-clock, active time), tasks, triggers, next wake, activity (shared work fold) |
//! | `GET /v1/sessions/{id}/tree` | queen → colonies → workers with usage rolled up, the ingest's shape ([`sessions`]) |
//! | `GET /v1/stream` | the local live stream: `ready`/`reset`, `status`, `usage` as Server-Sent Events, resumable ([`stream`]) |
//! | `GET /v1/usage/sessions/{id}` | tokens, cost, calls and tool durations of a session and its workers, from local data |
//! | `GET /v1/colonies` | this device's colonies (the Hive home's `colonies/`) with the keys the dashboard lists them by, and the colony names settings ([`colonies`]) |
//! | `GET /metrics` | OpenMetrics text ([`metrics`]) |
//! | `GET /settings` | the desktop settings page: HTML for people, signed in with the settings token ([`settings_page`]) |
//!
//! ## Credentials
//! Two bearer tokens, each created `0600` at first start ([`crate::private`]):
//! - `DIR/agent.token`, the **intake token**, for producers (the runtime, its hooks, scripts): every route
//!   except the settings routes.
//! - `DIR/settings.token`, the **settings token**, for the user's own settings UI (the desktop shell): every
//!   route, and the only one accepted on the settings routes (`PUT /v1/sync` and every
//!   future settings route, behind [`settings_only`]). Changing consent — where events go and with which
//!   credential — is the user's decision, not a producer's: the intake token gets 403 there.
//!
//! A request without either token gets 401. The settings page (`/settings…`) is outside the bearer
//! layer: it signs in once with the settings token and then carries a cookie of its own
//! ([`settings_page`]).
//!
//! ## Errors
//! Every error body is `{"error": {"code", "message"}}`: the handlers' [`ApiError`], and — through
//! [`rejections::json_errors`], the outermost layer — whatever axum itself answers (404 for an unknown route,
//! 405, 413 from a body limit, extractor rejections such as a bad query string or path). Retryable outbox
//! conditions (cap reached, disk full) are 503 with `Retry-After`.

pub mod budget;
mod colonies;
mod error;
pub mod events;
mod local;
mod metrics;
pub mod parse;
mod rejections;
mod sessions;
pub mod settings_page;
pub mod split;
pub mod stream;

use std::net::SocketAddr;
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
pub use local::StatusBody;
pub use sessions::SessionPage;

use crate::config::{IntakeSettings, Mode};
use crate::outbox::Outbox;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub outbox: Outbox,
    /// The intake token producers present (`DIR/agent.token`).
    pub token: Arc<String>,
    /// The settings token (`DIR/settings.token`): the only one allowed to change consent.
    pub settings_token: Arc<String>,
    pub policy: Arc<Policy>,
    pub zone: Zone,
    pub intake: IntakeSettings,
    /// Request bodies admitted at once (`intake.max_bytes_in_flight`).
    pub body_budget: Arc<budget::BodyBudget>,
    pub mode: Mode,
    pub started_at: std::time::Instant,
    pub stats: Arc<IntakeStats>,
    /// Runtime liveness of Hive sessions (the `crashed` overlay of the local status).
    pub runtimes: crate::tail::runtime::RuntimeWatch,
    /// The local live streams' cap and stop signal.
    pub streams: Arc<stream::StreamHub>,
    /// The address the local API is bound to: the settings page answers only to it (`Host`) and
    /// accepts forms only from pages of it (`Origin`).
    pub addr: SocketAddr,
    /// The settings page's signed-in browsers.
    pub page_sessions: Arc<settings_page::PageSessions>,
    /// Held while the settings page writes an export bundle: one at a time.
    pub exports: Arc<tokio::sync::Mutex<()>>,
    /// The configured identity (`[identity]`): turning sharing on reconciles the token's with it.
    pub identity: Arc<crate::identity::IdentityDefaults>,
    /// The Hive home the running agent follows (`hive_home` or `--hive-home`), shown by `status`;
    /// the settings page lists its colonies (the directories under `colonies/`) with their keys.
    pub hive_home: Option<std::path::PathBuf>,
}

/// Which token a request presented (set by the auth layer as a request extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The intake token: producers.
    Producer,
    /// The settings token: the user's settings UI.
    Settings,
}

/// In-memory request counters for `/metrics`.
#[derive(Debug, Default)]
pub struct IntakeStats {
    pub requests_ok: AtomicU64,
    pub requests_partial: AtomicU64,
    pub requests_refused: AtomicU64,
    /// Not admitted: the bodies in flight were at `intake.max_bytes_in_flight` for too long.
    pub requests_busy: AtomicU64,
    pub requests_too_large: AtomicU64,
    pub requests_unauthorized: AtomicU64,
    pub requests_failed: AtomicU64,
}

impl IntakeStats {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The router: auth on every API route, settings routes for the settings token only, JSON errors
/// outermost; and beside them the settings page, with its own sign-in and HTML answers.
pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/v1/events", post(events::post_events))
        .route(
            "/v1/sessions",
            post(local::post_session).get(sessions::list_sessions),
        )
        .route("/v1/sessions/{id}", get(local::get_session))
        .route("/v1/sessions/{id}/tree", get(sessions::get_tree))
        .route("/v1/stream", get(stream::get_stream))
        .route("/v1/status", get(local::get_status))
        .route("/v1/quota", get(local::get_quota))
        .route("/v1/colonies", get(colonies::get_colonies))
        .route(
            "/v1/sync",
            put(local::put_sync).route_layer(axum::middleware::from_fn(settings_only)),
        )
        .route("/v1/usage/sessions/{id}", get(local::get_session_usage))
        .route("/metrics", get(metrics::get_metrics))
        .fallback(rejections::no_route)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .layer(axum::middleware::map_response(rejections::json_errors));
    settings_page::router(state.clone())
        .merge(api)
        .with_state(state)
}

pub(crate) async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .map(str::as_bytes);
    let caller = match presented {
        Some(t) if token_matches(t, &state.settings_token) => Caller::Settings,
        Some(t) if token_matches(t, &state.token) => Caller::Producer,
        _ => {
            IntakeStats::bump(&state.stats.requests_unauthorized);
            return ApiError::Unauthorized.into_response();
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Route layer of the settings routes: the settings token only (403 for the intake token).
pub async fn settings_only(req: Request, next: Next) -> Response {
    match req.extensions().get::<Caller>() {
        Some(Caller::Settings) => next.run(req).await,
        Some(Caller::Producer) => ApiError::Forbidden(
            "this route changes settings and needs the settings token (DIR/settings.token); \
             the intake token (DIR/agent.token) cannot change consent"
                .into(),
        )
        .into_response(),
        None => ApiError::Unauthorized.into_response(),
    }
}

/// Compares a presented token with the expected one in constant time (`subtle`): how long it takes
/// does not depend on where they first differ. (A length mismatch returns early; the tokens' length is
/// not a secret: both are 64 hex characters.)
pub(crate) fn token_matches(presented: &[u8], expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(presented.ct_eq(expected.as_bytes()))
}

/// Reads `DIR/agent.token` (the intake token), creating it (0600, 32 random bytes in hex) at first start.
pub fn load_or_create_token(data_dir: &std::path::Path) -> std::io::Result<String> {
    crate::private::load_or_create_secret(data_dir, "agent.token")
}

/// Reads `DIR/settings.token` (the settings token), creating it (0600) at first start.
pub fn load_or_create_settings_token(data_dir: &std::path::Path) -> std::io::Result<String> {
    crate::private::load_or_create_secret(data_dir, "settings.token")
}
