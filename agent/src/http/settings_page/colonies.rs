//! The page's colony sections: the tenant's colony names choice (shown before sharing is turned on,
//! with the user's own choice when the tenant shares names) and this device's colonies with their keys.
//!
//! Colonies are the directories under the followed Hive home's `colonies/` (Hive keeps a colony there,
//! named after it; names are `[a-z0-9_]+`). Each key is computed here with the keyer in force
//! ([`crate::outbox::ColonyKeys`]): the `ck_…` key the dashboard lists once the tenant's secret is known,
//! this device's own `dk_…` before. Nothing is stored: names are read from the directory each time.
//! So a person can tell an admin which key is which, and the admin labels it
//! (`PUT /v1/colonies/{key}/label`).
//!
//! Hooks: `#colony-names` (in "Sharing now": `data-tenant`, `data-consent`, `data-shared`), `table#colonies`
//! (`tr[data-colony-name]`, `td[data-field=colony_key]`), `#share_colony_names`.

use std::path::Path;

use apiary_schema::colony::ColonyNames;
use maud::{html, Markup};

use crate::http::AppState;
use crate::outbox::ColonyNamesState;

/// Most colonies listed.
const MAX_LISTED: usize = 500;

/// The colony names Hive allows: `[a-z0-9_]+` (at most 128 characters here).
fn is_colony_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The colonies under `home/colonies/`, sorted (at most [`MAX_LISTED`]); empty when there is none.
pub(crate) fn colony_names(home: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(home.join("colonies")) else {
        return vec![];
    };
    let mut names: Vec<String> = dir
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_colony_name(n))
        .collect();
    names.sort();
    names.truncate(MAX_LISTED);
    names
}

/// What the tenant chose, and what sharing does (or would do) with colony names, in words.
pub(super) fn names_words(n: ColonyNamesState, shared: bool) -> &'static str {
    match (n.tenant, shared, n.declined) {
        (_, true, _) => {
            "Your organisation shares colony names, and you agreed: each colony's name is sent beside \
             its key."
        }
        (ColonyNames::Names, false, true) => {
            "Your organisation shares colony names, but you chose to keep them here: colonies are sent \
             as keys only."
        }
        (ColonyNames::Names, false, false) => {
            "Your organisation shares colony names: turning sharing on sends each colony's name beside \
             its key (you can keep them here below)."
        }
        (ColonyNames::Keys, false, _) => {
            "Colony names stay on this device: colonies are sent as keys (ck_…), which cannot be read \
             back. Your organisation's setting is \"keys\"."
        }
    }
}

/// The colony names line of "Sharing now": the tenant's choice and what sharing does with names.
pub(super) fn names_summary(state: &AppState) -> Markup {
    let keys = state.outbox.colony_keys();
    let n = keys.names();
    let shared = keys.shares_names();
    html! {
        p #colony-names data-tenant=(n.tenant.as_str()) data-consent=(n.consent.as_str())
            data-shared=(shared) {
            strong { "Colony names: " } (names_words(n, shared))
        }
    }
}

/// The colony names choice in the "Turn sharing on" form, when the tenant shares names: the person's
/// choice for this consent (`share_colony_names`, ticked unless declined before; `colony_names_seen`
/// says the form showed it).
pub(super) fn names_choice(state: &AppState) -> Markup {
    let n = state.outbox.colony_keys().names();
    html! {
        @if n.tenant == ColonyNames::Names {
            fieldset.colony-names {
                legend { "Colony names" }
                p { "Your organisation asks for your colonies' names: with this ticked, each colony's "
                    "name is sent beside its key." }
                input type="hidden" name="colony_names_seen" value="1";
                div.check {
                    input #share_colony_names type="checkbox" name="share_colony_names" value="on"
                        checked[!n.declined];
                    label for="share_colony_names" { "Send my colonies' names (unticked, colonies are "
                        "sent as keys only)" }
                }
            }
        }
    }
}

/// "Your colonies": this device's colonies with their keys.
pub(super) fn colonies_section(state: &AppState) -> Markup {
    let keys = state.outbox.colony_keys();
    let keyer = keys.keyer();
    let names = state
        .hive_home
        .as_deref()
        .map(colony_names)
        .unwrap_or_default();
    html! {
        section aria-labelledby="colonies-title" {
            h2 #colonies-title { "Your colonies" }
            p { "Colonies reach the dashboard as keys. Tell your admin which key is which: they can give a "
                "key a label there (" code { "PUT /v1/colonies/{key}/label" } "). The names below are "
                "read from this device and are not sent"
                @if keys.shares_names() { ", except as your organisation's setting and your consent say" }
                "." }
            @if !keys.is_tenant() {
                p.note { "Until this device has reached the server once with sharing on, keys are its own ("
                    code { "dk_…" } "); the dashboard lists the organisation's keys (" code { "ck_…" } ")." }
            }
            @if state.hive_home.is_none() {
                p.none { "This agent follows no Hive home (" code { "hive_home" } "), so it lists no colonies." }
            } @else if names.is_empty() {
                p.none { "No colonies in the Hive home yet." }
            } @else {
                div.scroll { table #colonies {
                    caption.visually-hidden { "This device's colonies and their keys" }
                    thead { tr { th scope="col" { "Colony" } th scope="col" { "Key on the dashboard" } } }
                    tbody { @for name in &names { tr data-colony-name=(name) {
                        td { code { (name) } }
                        td data-field="colony_key" { code { (keyer.key_of(name)) } }
                    } } }
                } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colonies_are_the_hive_home_s_colony_directories_by_name() {
        let home = tempfile::tempdir().unwrap();
        let colonies = home.path().join("colonies");
        for d in [
            "billing_refactor",
            "etl_backfill",
            "Not A Colony",
            ".hidden",
        ] {
            std::fs::create_dir_all(colonies.join(d)).unwrap();
        }
        std::fs::write(colonies.join("notes_txt"), "a file, not a colony").unwrap();
        assert_eq!(
            colony_names(home.path()),
            ["billing_refactor", "etl_backfill"]
        );
        assert!(colony_names(&home.path().join("missing")).is_empty());
    }
}
