//! `GET /v1/whoami`: what a token is. The agent asks it at `sync enable` and at start, so that a device
//! without a configured identity takes the user and device its token is bound to, and a configured one
//! that contradicts the token is named at once instead of pausing sync at the first batch.

#[cfg(feature = "json-schema")]
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The answer of `GET /v1/whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "json-schema", derive(JsonSchema))]
pub struct TokenIdentity {
    /// The tenant every event sent with this token belongs to.
    pub tenant_id: String,
    /// `ingest`, `read`, `admin`.
    pub scopes: Vec<String>,
    /// The user every session this token sends belongs to, if bound.
    pub user_id: Option<String>,
    /// The device every batch this token sends comes from, if bound.
    pub device_id: Option<String>,
    /// The tenant's colony secret (64 hex digits), for tokens with the `ingest` scope only: the agent
    /// derives colony keys from colony names with it (`crate::colony`), so the same name gives the same
    /// key on every device of the tenant. Absent for other tokens and from ingests that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colony_secret: Option<String>,
    /// The tenant's choice for colony names (`keys`: never leave a device, the default; `names`: a
    /// device whose user consented sends them beside the keys). Absent from ingests that predate it,
    /// which means `keys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colony_names: Option<crate::colony::ColonyNames>,
}
