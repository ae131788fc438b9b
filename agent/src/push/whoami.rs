//! Asking the ingest who a push token is (`GET /v1/whoami`), and what the answer means for this device:
//! the identity rules themselves are [`crate::identity`]'s (see its notes), the asking is here, beside the
//! push loop's HTTP client, at `sync enable` ([`ask`]), in the push loop, and at start ([`check_at_start`]).

use std::time::Duration;

use apiary_schema::identity::TokenIdentity;

use crate::identity::{
    adoption, reconcile, Adoption, Contradiction, IdentityDefaults, IDENTITY_MISMATCH,
};

/// Why `GET /v1/whoami` gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum WhoamiError {
    /// The ingest could not be reached (offline, DNS, TLS, timeout).
    #[error("cannot reach the ingest at {0}: {1}")]
    Unreachable(String, String),
    /// It answered, but not with an identity (an old ingest, a proxy, a refused token).
    #[error("{url} answered HTTP {status}{hint}")]
    Refused {
        url: String,
        status: u16,
        hint: &'static str,
    },
    /// The token file cannot be used (missing, empty, readable by others).
    #[error("{0}")]
    TokenFile(String),
    #[error("{0}")]
    Other(String),
}

/// Asks `<endpoint>/v1/whoami` with the token in `token_file` (3 s budget).
pub async fn whoami(
    endpoint: &str,
    token_file: &std::path::Path,
) -> Result<TokenIdentity, WhoamiError> {
    use secrecy::ExposeSecret;
    let token =
        super::target::read_token(token_file).map_err(|e| WhoamiError::TokenFile(e.to_string()))?;
    let client = super::http_client(Duration::from_secs(2), Duration::from_secs(3))
        .map_err(|e| WhoamiError::Other(e.to_string()))?;
    let url = format!("{}/v1/whoami", endpoint.trim_end_matches('/'));
    let resp = client
        .get(&url)
        .bearer_auth(token.expose_secret())
        .send()
        .await
        .map_err(|e| WhoamiError::Unreachable(endpoint.to_string(), super::error_chain(&e)))?;
    let status = resp.status().as_u16();
    if status != 200 {
        let hint = match status {
            401 | 403 => {
                " (the ingest does not accept this token: revoked, expired or another ingest's)"
            }
            404 => " (is the endpoint the ingest's base URL?)",
            _ => "",
        };
        return Err(WhoamiError::Refused { url, status, hint });
    }
    resp.json()
        .await
        .map_err(|e| WhoamiError::Other(format!("{url}: not a whoami answer ({e})")))
}

/// Why the identity of a sync target could not be settled ([`ask`]).
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// The ingest could not be reached: nothing is known yet (the agent asks again later).
    #[error("{0}")]
    Unreachable(WhoamiError),
    /// The ingest answered, and the endpoint or the token cannot work (401, 403, 404, …).
    #[error("{0}")]
    Refused(WhoamiError),
    /// The token file cannot be used (missing, empty, readable by others).
    #[error("{0}")]
    TokenFile(String),
    /// The configured identity contradicts the token's binding.
    #[error("{}", join(.0))]
    Contradicts(Vec<Contradiction>),
}

impl AskError {
    /// The pause reason the push loop records for this problem (`None`: not a reason to pause).
    pub fn pause_reason(&self) -> Option<String> {
        match self {
            AskError::Unreachable(_) => None,
            AskError::Refused(WhoamiError::Refused {
                status: 401 | 403, ..
            })
            | AskError::TokenFile(_) => Some(super::REAUTHENTICATE.to_string()),
            AskError::Refused(_) => None,
            AskError::Contradicts(_) => Some(format!("{IDENTITY_MISMATCH}: {self}")),
        }
    }
}

fn join(problems: &[Contradiction]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Asks the ingest at `endpoint` who the token in `token_file` is and reconciles the answer with
/// `configured`: what sync enable (any of its three paths) and the push loop adopt.
pub async fn ask(
    configured: &IdentityDefaults,
    endpoint: &str,
    token_file: &std::path::Path,
) -> Result<Adoption, AskError> {
    let token = match whoami(endpoint, token_file).await {
        Ok(t) => t,
        Err(e @ WhoamiError::Unreachable(..)) => return Err(AskError::Unreachable(e)),
        // A busy or failing ingest (408, 429, 5xx) says nothing about the token: ask again later.
        Err(e @ WhoamiError::Refused { status, .. })
            if status == 408 || status == 429 || status >= 500 =>
        {
            return Err(AskError::Unreachable(e))
        }
        Err(e @ WhoamiError::Refused { .. }) => return Err(AskError::Refused(e)),
        Err(WhoamiError::TokenFile(e)) => return Err(AskError::TokenFile(e)),
        Err(e @ WhoamiError::Other(_)) => return Err(AskError::Refused(e)),
    };
    adoption(configured, &token).map_err(AskError::Contradicts)
}

/// What the start-up check found (see the module notes): the identity to open the outbox with, and
/// what to record once it is open.
#[derive(Debug, Clone)]
pub struct StartCheck {
    /// The identity defaults to open the outbox with.
    pub identity: IdentityDefaults,
    /// The token's user, adopted because `identity.user_id` is unset.
    adopted_user: Option<String>,
    /// `Some(Some(reason))` pauses sync, `Some(None)` clears an identity pause, `None` leaves it.
    pause: Option<Option<String>>,
    /// The tenant and its colony secret, from the token's answer (see `crate::outbox::ColonyKeys`).
    colony_secret: Option<(String, String)>,
    /// The tenant's colony names choice, from the token's answer.
    colony_names: Option<apiary_schema::colony::ColonyNames>,
}

/// Asks the ingest who the stored sync token is, when sync is on (see the module notes). Never fails:
/// an unreachable ingest keeps the configured (and earlier adopted) identity.
pub async fn check_at_start(
    data_dir: &std::path::Path,
    configured: &IdentityDefaults,
    airgapped: bool,
) -> StartCheck {
    let keep = StartCheck {
        identity: configured.clone(),
        adopted_user: None,
        pause: None,
        colony_secret: None,
        colony_names: None,
    };
    let db = data_dir.join("outbox.db");
    if airgapped || !db.exists() {
        return keep;
    }
    let stored = crate::outbox::OutboxReader::open(&db).and_then(|r| r.sync_status());
    let Ok(sync) = stored else { return keep };
    let (true, Some(endpoint), Some(token_file)) = (sync.enabled, sync.endpoint, sync.token_file)
    else {
        return keep;
    };
    let token = match whoami(&endpoint, std::path::Path::new(&token_file)).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "cannot ask the ingest who the sync token is; keeping this \
                device's stored identity (the token's is adopted at the next start that reaches it)");
            return keep;
        }
    };
    match reconcile(configured, &token) {
        Ok(identity) => {
            tracing::info!(
                user_id = identity.user_id.as_deref(),
                device_id = identity.device_id.as_deref(),
                "identity agrees with the sync token"
            );
            let paused_for_identity = sync
                .paused_reason
                .as_deref()
                .is_some_and(|r| r == super::REAUTHENTICATE || r.starts_with(IDENTITY_MISMATCH));
            StartCheck {
                colony_secret: token
                    .colony_secret
                    .clone()
                    .map(|s| (token.tenant_id.clone(), s)),
                colony_names: token.colony_names,
                adopted_user: token.user_id.filter(|_| configured.user_id.is_none()),
                identity,
                pause: paused_for_identity.then_some(None),
            }
        }
        Err(problems) => {
            let text = problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            tracing::error!(problem = %text, "sync paused: the configured identity contradicts the sync token");
            StartCheck {
                pause: Some(Some(format!("{IDENTITY_MISMATCH}: {text}"))),
                ..keep
            }
        }
    }
}

impl StartCheck {
    /// Records what the check found in the opened outbox: the adopted user, and the pause set or cleared.
    pub async fn apply(
        &self,
        outbox: &crate::outbox::Outbox,
    ) -> Result<(), crate::outbox::OutboxError> {
        if let Some(user) = &self.adopted_user {
            outbox.remember_token_user(user.clone()).await?;
        }
        if let Some((tenant, secret)) = &self.colony_secret {
            outbox.adopt_colony_secret(tenant, secret).await?;
        }
        if let Some(names) = self.colony_names {
            outbox.adopt_colony_names(names).await?;
        }
        if let Some(reason) = &self.pause {
            let change = crate::outbox::SyncChange::Pause {
                reason: reason.clone(),
            };
            outbox.set_sync(change).await?;
        }
        Ok(())
    }
}
