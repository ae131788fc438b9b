//! `GET /v1/colonies` (either token): this device's colonies with the keys the dashboard lists them by,
//! and the colony names settings — what the settings page's "Your colonies" shows, for a desktop shell
//! or a script that tells an admin which key is which. Colonies are the directories under the followed
//! Hive home's `colonies/` (see `settings_page::colonies`); keys come from the keyer in force.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::AppState;

/// One colony of this device.
#[derive(Debug, Clone, Serialize)]
pub struct LocalColony {
    /// Its name (never sent unless the tenant chose `names` and the user agreed).
    pub name: String,
    /// Its key: `ck_…` (the tenant's, as the dashboard lists it) or `dk_…` (this device's own, until
    /// the tenant's secret is known).
    pub key: String,
}

/// The colony names settings.
#[derive(Debug, Clone, Serialize)]
pub struct NamesBody {
    /// The tenant's choice as last told (`keys` | `names`).
    pub tenant: &'static str,
    /// What the consent in force agreed to.
    pub consent: &'static str,
    /// True while names leave the device.
    pub shared: bool,
}

/// The answer of `GET /v1/colonies`.
#[derive(Debug, Clone, Serialize)]
pub struct LocalColonies {
    /// `tenant` (`ck_` keys) or `device` (`dk_` keys).
    pub key_scope: &'static str,
    pub colony_names: NamesBody,
    /// By name.
    pub colonies: Vec<LocalColony>,
}

pub async fn get_colonies(State(state): State<AppState>) -> Json<LocalColonies> {
    let keys = state.outbox.colony_keys();
    let keyer = keys.keyer();
    let names = keys.names();
    let colonies = state
        .hive_home
        .as_deref()
        .map(super::settings_page::colony_names)
        .unwrap_or_default()
        .into_iter()
        .map(|name| LocalColony {
            key: keyer.key_of(&name),
            name,
        })
        .collect();
    Json(LocalColonies {
        key_scope: if keys.is_tenant() { "tenant" } else { "device" },
        colony_names: NamesBody {
            tenant: names.tenant.as_str(),
            consent: names.consent.as_str(),
            shared: keys.shares_names(),
        },
        colonies,
    })
}
