//! Sessions (registration, local status), agent status, the budget state, the sync toggle and local
//! usage.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, AppState};
use crate::config::Mode;
use crate::identity::SessionRegistration;
use crate::outbox::{QuotaView, SessionStatus, SessionUsage, Status, SyncChange, SyncReport};

/// Parses a JSON body into `T`, turning every failure into a 400 that says what is wrong.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::BadRequest(crate::outbox::sanitize_reason(&format!(
            "invalid request body: {e}"
        )))
    })
}

pub async fn post_session(
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let registration: SessionRegistration = parse(&body)?;
    registration.validate().map_err(ApiError::BadRequest)?;
    let binding = state.outbox.register_session(registration).await?;
    Ok((StatusCode::OK, Json(binding)))
}

/// The body of `GET /v1/status`: the outbox's [`Status`] (its fields at the top level) and what only
/// the running agent knows. `apiary-agent status` (its `CliStatus`) and `doctor` read it back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusBody {
    #[serde(flatten)]
    pub status: Status,
    /// The mode the agent runs in.
    pub mode: Mode,
    /// The running binary's version, which may differ from the one asking.
    #[serde(default)]
    pub agent_version: String,
    /// Seconds since the agent started.
    #[serde(default)]
    pub uptime_seconds: u64,
    /// The Hive home the agent follows (`hive_home` or `--hive-home`); `null` when none.
    pub hive_home: Option<std::path::PathBuf>,
}

impl StatusBody {
    /// The running agent's status now.
    pub async fn of(state: &AppState) -> Result<StatusBody, ApiError> {
        Ok(StatusBody {
            status: state.outbox.status().await?,
            mode: state.mode,
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_seconds: state.started_at.elapsed().as_secs(),
            hive_home: state.hive_home.clone(),
        })
    }
}

pub async fn get_status(State(state): State<AppState>) -> Result<Json<StatusBody>, ApiError> {
    Ok(Json(StatusBody::of(&state).await?))
}

/// `GET /v1/quota` (either token: a runtime holding the intake token may read it and choose to stop):
/// the budget state the ingest last sent, from memory, in the shape of [`QuotaView`] —
/// `{"quota": {"as_of", "budgets": [...]} | null, "received_at": RFC 3339 | null, "advisory": true}`.
/// 200 with nulls until the ingest sent one (sync off, air-gapped, an ingest that does not report
/// budgets), never 404. Advisory: the agent itself never stops because a budget is spent.
pub async fn get_quota(State(state): State<AppState>) -> Json<QuotaView> {
    Json(state.outbox.quota().into())
}

/// `PUT /v1/sync` (settings token only, see [`super::settings_only`]). Enabling checks the target
/// ([`crate::push::target`]): an `https://` endpoint (`http://` to loopback only) and a private token file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SyncToggle {
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) endpoint: Option<String>,
    #[serde(default)]
    pub(crate) token_file: Option<String>,
    #[serde(default)]
    pub(crate) include_backlog: bool,
    #[serde(default)]
    pub(crate) purge: bool,
    /// Store the target even though the ingest refused the token or the endpoint
    /// ([`crate::push::whoami::ask`]).
    #[serde(default)]
    pub(crate) force: bool,
}

pub async fn put_sync(
    State(state): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Json<SyncReport>, ApiError> {
    let toggle: SyncToggle = parse(&body)?;
    Ok(Json(apply_sync(&state, toggle).await?))
}

/// Switches sync as the user asked: the one path of the consent toggle, for `PUT /v1/sync` and the
/// settings page's form alike (air-gapped refusal, remembered target, target check, consent record).
pub(crate) async fn apply_sync(
    state: &AppState,
    toggle: SyncToggle,
) -> Result<SyncReport, ApiError> {
    let change = if toggle.enabled {
        if state.mode == Mode::Airgapped {
            return Err(ApiError::Conflict(
                "mode is airgapped: sync cannot be enabled (use `apiary-agent export`)".into(),
            ));
        }
        let current = state.outbox.status().await?.stored.sync;
        let endpoint = toggle.endpoint.or(current.endpoint);
        let token_file = toggle.token_file.or(current.token_file);
        let (Some(endpoint), Some(token_file)) = (endpoint, token_file) else {
            return Err(ApiError::BadRequest(
                "the first enable needs \"endpoint\" and \"token_file\"".into(),
            ));
        };
        // Checked at every enable, also when remembered: a refused target is never stored.
        let token_file = crate::push::target::check(&endpoint, std::path::Path::new(&token_file))
            .map_err(|e| ApiError::BadRequest(format!("sync not enabled: {e}")))?;
        adopt_at_enable(state, &endpoint, &token_file, toggle.force).await?;
        SyncChange::Enable {
            endpoint,
            token_file: token_file.display().to_string(),
            include_backlog: toggle.include_backlog,
        }
    } else {
        SyncChange::Disable {
            purge: toggle.purge,
        }
    };
    Ok(state.outbox.set_sync(change).await?)
}

/// Asks the ingest who the token is and adopts the answer before sync is switched on, so the running
/// agent sends as the token's user and device at once ([`crate::push::whoami::ask`]). A contradiction with
/// `[identity]` is refused (409), as is a token or endpoint the ingest refused (400) unless `force`; an
/// unreachable ingest is no reason to refuse (the push loop asks again until it answers).
async fn adopt_at_enable(
    state: &AppState,
    endpoint: &str,
    token_file: &std::path::Path,
    force: bool,
) -> Result<(), ApiError> {
    use crate::push::whoami::AskError;
    match crate::push::whoami::ask(&state.identity, endpoint, token_file).await {
        Ok(adoption) => Ok(state.outbox.adopt(&adoption).await?),
        Err(e @ AskError::Contradicts(_)) => {
            Err(ApiError::Conflict(format!("sync not enabled: {e}")))
        }
        Err(AskError::Unreachable(e)) => {
            tracing::warn!(error = %e, "sharing turned on; the token's identity is adopted once the ingest answers");
            Ok(())
        }
        Err(e) if force => {
            tracing::warn!(error = %e, "sharing turned on with a target the ingest refused (force)");
            Ok(())
        }
        Err(e) => Err(ApiError::BadRequest(format!(
            "sync not enabled: {e} (send \"force\": true to store it anyway)"
        ))),
    }
}

/// `GET /v1/sessions/{id}`: the session's status derived locally by the shared health model (the same
/// rules as the ingest), when it began and why, time in each status, its wall-clock and active time
/// (`durations`) and every transition, and its work
/// (tasks, triggers, next wake, the tool call in flight: the shared `apiary_schema::work` fold, the
/// ingest's field names); works with sync off and air-gapped.
pub async fn get_session(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SessionStatus>, ApiError> {
    let gone = state.runtimes.gone_at(&id);
    match state
        .outbox
        .session_status_live(&id, chrono::Utc::now(), gone)
        .await?
    {
        Some(s) => Ok(Json(s)),
        None => Err(ApiError::NotFound(format!(
            "session {id} is not known here"
        ))),
    }
}

pub async fn get_session_usage(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SessionUsage>, ApiError> {
    match state.outbox.session_usage(&id).await? {
        Some(u) => Ok(Json(u)),
        None => Err(ApiError::NotFound(format!(
            "session {id} is not known here"
        ))),
    }
}
