//! Session identity: who a session runs for. See `outbox::sessions` for the binding rules.
//!
//! ## Identity from the token
//! A push token may be bound to a user and a device (`apiary-ingest token create … --user U --device
//! D`); the ingest refuses a batch that claims another. So the agent asks `GET /v1/whoami` at `sync
//! enable` and at start (when sync is on) and [`reconcile`]s the answer with `[identity]`:
//! - a setting left out takes the token's value (*adopted*): the device id is stored in the outbox like a
//!   generated one, the user id under `token_user_id`, so both hold at later starts without the ingest;
//! - a setting that contradicts the token is a [`Contradiction`], naming the setting to change: an error
//!   at `sync enable`, a paused sync with that text at start;
//! - an unreachable ingest changes nothing: the agent says so and adopts at the next start that reaches it.
//!   Nothing is lost meanwhile: events stay pending, and sessions whose binding the ingest never accepted
//!   are rebound to the adopted identity when the outbox opens (`outbox::sessions::rebind_undelivered`).

use std::time::Duration;

use apiary_schema::identity::TokenIdentity;
use serde::{Deserialize, Serialize};

/// Identity defaults for sessions first seen on this device (config section `[identity]`; the desktop
/// writes them at sign-in). Each may be left out: the ingest then takes the user and device the push
/// token is bound to (the tenant always comes from the token).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityDefaults {
    pub user_id: Option<String>,
    pub tenant_id: Option<String>,
    /// This device's id; generated once and kept in the outbox when not configured.
    pub device_id: Option<String>,
}

/// `POST /v1/sessions`: a session registered explicitly, with its own user and parent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRegistration {
    pub session_id: String,
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub tenant_id: Option<String>,
    #[serde(default)]
    pub device_id: Option<String>,
    #[serde(default)]
    pub parent_session_id: Option<String>,
}

impl SessionRegistration {
    /// Checks lengths and characters (ids: 1..=200 of `[A-Za-z0-9._:@+=-]`).
    pub fn validate(&self) -> Result<(), String> {
        let check = |name: &str, v: &str| {
            let ok = !v.is_empty()
                && v.len() <= 200
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._:@+=-".contains(&b));
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "{name} must be 1 to 200 characters of A-Z a-z 0-9 . _ : @ + = -"
                ))
            }
        };
        check("session_id", &self.session_id)?;
        for (name, v) in [
            ("user_id", &self.user_id),
            ("tenant_id", &self.tenant_id),
            ("device_id", &self.device_id),
            ("parent_session_id", &self.parent_session_id),
        ] {
            if let Some(v) = v {
                check(name, v)?;
            }
        }
        if self.parent_session_id.as_deref() == Some(self.session_id.as_str()) {
            return Err("a session cannot be its own parent".into());
        }
        Ok(())
    }
}

/// A configured identity setting that contradicts the token's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    /// The setting to change, e.g. `identity.device_id`.
    pub setting: &'static str,
    pub configured: String,
    pub token: String,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = self
            .setting
            .trim_start_matches("identity.")
            .trim_end_matches("_id");
        write!(
            f,
            "{} is {:?} but the token is bound to {what} {:?}: set {} = \"{}\" (or leave it out) in \
             the agent's config and restart the agent, or use a token for this {what}",
            self.setting, self.configured, self.token, self.setting, self.token
        )
    }
}

/// The identity to use: each configured setting, else the token's binding. Err lists every setting the
/// token contradicts.
pub fn reconcile(
    configured: &IdentityDefaults,
    token: &TokenIdentity,
) -> Result<IdentityDefaults, Vec<Contradiction>> {
    let mut problems = vec![];
    let mut pick = |setting, mine: &Option<String>, theirs: &Option<String>| match (mine, theirs) {
        (Some(m), Some(t)) if m != t => {
            problems.push(Contradiction {
                setting,
                configured: m.clone(),
                token: t.clone(),
            });
            mine.clone()
        }
        (Some(_), _) => mine.clone(),
        (None, _) => theirs.clone(),
    };
    let user_id = pick("identity.user_id", &configured.user_id, &token.user_id);
    let device_id = pick(
        "identity.device_id",
        &configured.device_id,
        &token.device_id,
    );
    if problems.is_empty() {
        Ok(IdentityDefaults {
            user_id,
            tenant_id: configured.tenant_id.clone(),
            device_id,
        })
    } else {
        Err(problems)
    }
}

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
    let token = crate::push::target::read_token(token_file)
        .map_err(|e| WhoamiError::TokenFile(e.to_string()))?;
    let client = crate::push::http_client(Duration::from_secs(2), Duration::from_secs(3))
        .map_err(|e| WhoamiError::Other(e.to_string()))?;
    let url = format!("{}/v1/whoami", endpoint.trim_end_matches('/'));
    let resp = client
        .get(&url)
        .bearer_auth(token.expose_secret())
        .send()
        .await
        .map_err(|e| {
            WhoamiError::Unreachable(endpoint.to_string(), crate::push::error_chain(&e))
        })?;
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

/// What the token's answer means for this device (see the module notes): the identity to use from now
/// on, the token's user to remember, and the tenant's colony secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    /// The configured settings, with the token's binding where a setting is left out.
    pub identity: IdentityDefaults,
    /// The token's user, adopted because `identity.user_id` is unset (remembered for starts that cannot
    /// reach the ingest); `None` forgets an earlier token's.
    pub token_user: Option<String>,
    /// The tenant and its colony secret (see `crate::outbox::ColonyKeys`).
    pub colony_secret: Option<(String, String)>,
    /// The tenant's colony names choice (`None`: an ingest that predates it).
    pub colony_names: Option<apiary_schema::colony::ColonyNames>,
}

/// Reconciles `configured` with the token's answer: the [`Adoption`], or every contradiction.
pub fn adoption(
    configured: &IdentityDefaults,
    token: &TokenIdentity,
) -> Result<Adoption, Vec<Contradiction>> {
    let identity = reconcile(configured, token)?;
    Ok(Adoption {
        identity,
        token_user: token
            .user_id
            .clone()
            .filter(|_| configured.user_id.is_none()),
        colony_secret: token
            .colony_secret
            .clone()
            .map(|s| (token.tenant_id.clone(), s)),
        colony_names: token.colony_names,
    })
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
            | AskError::TokenFile(_) => Some(crate::push::REAUTHENTICATE.to_string()),
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

/// The prefix of the pause reason set at start when the configured identity contradicts the token.
pub const IDENTITY_MISMATCH: &str = "identity-mismatch";

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
    settings: &crate::config::Settings,
) -> StartCheck {
    let keep = StartCheck {
        identity: settings.identity.clone(),
        adopted_user: None,
        pause: None,
        colony_secret: None,
        colony_names: None,
    };
    let db = data_dir.join("outbox.db");
    if settings.mode == crate::config::Mode::Airgapped || !db.exists() {
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
    match reconcile(&settings.identity, &token) {
        Ok(identity) => {
            tracing::info!(
                user_id = identity.user_id.as_deref(),
                device_id = identity.device_id.as_deref(),
                "identity agrees with the sync token"
            );
            let paused_for_identity = sync.paused_reason.as_deref().is_some_and(|r| {
                r == crate::push::REAUTHENTICATE || r.starts_with(IDENTITY_MISMATCH)
            });
            StartCheck {
                colony_secret: token
                    .colony_secret
                    .clone()
                    .map(|s| (token.tenant_id.clone(), s)),
                colony_names: token.colony_names,
                adopted_user: token
                    .user_id
                    .filter(|_| settings.identity.user_id.is_none()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn token(user: Option<&str>, device: Option<&str>) -> TokenIdentity {
        TokenIdentity {
            tenant_id: "t".into(),
            scopes: vec!["ingest".into()],
            user_id: user.map(str::to_string),
            device_id: device.map(str::to_string),
            colony_secret: None,
            colony_names: None,
        }
    }

    #[test]
    fn settings_left_out_take_the_tokens_binding() {
        let got = reconcile(
            &IdentityDefaults::default(),
            &token(Some("alice"), Some("alice-laptop")),
        );
        let got = got.unwrap();
        assert_eq!(got.user_id.as_deref(), Some("alice"));
        assert_eq!(got.device_id.as_deref(), Some("alice-laptop"));
        let unbound = reconcile(&IdentityDefaults::default(), &token(None, None)).unwrap();
        assert_eq!(unbound, IdentityDefaults::default());
    }

    #[test]
    fn a_configured_setting_that_contradicts_the_token_names_the_setting_to_change() {
        let configured = IdentityDefaults {
            user_id: Some("alice".into()),
            device_id: Some("old-laptop".into()),
            ..IdentityDefaults::default()
        };
        let err = reconcile(&configured, &token(Some("alice"), Some("alice-laptop"))).unwrap_err();
        assert_eq!(err.len(), 1);
        let text = err[0].to_string();
        assert!(
            text.contains("identity.device_id is \"old-laptop\""),
            "{text}"
        );
        assert!(
            text.contains("set identity.device_id = \"alice-laptop\""),
            "{text}"
        );
    }
}
