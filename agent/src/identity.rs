//! Session identity: who a session runs for. See `outbox::sessions` for the binding rules.

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
