//! Session identity: who a session runs for. See `outbox::write::sessions` for the binding rules.
//!
//! A leaf of the agent's modules: the identity types and the pure rules that reconcile them with a token's
//! binding. Asking the ingest (`GET /v1/whoami`) is the push side's ([`crate::push::whoami`]).
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
//!   Nothing is lost meanwhile: events stay pending, and sessions whose binding the ingest never accepted are
//!   rebound to the adopted identity when the outbox opens (`outbox::write::sessions::rebind_undelivered`).

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

/// The prefix of the pause reason set at start when the configured identity contradicts the token.
pub const IDENTITY_MISMATCH: &str = "identity-mismatch";

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
