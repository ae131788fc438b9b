//! The page's sections, each from the outbox's status and the policy in force: sharing now, the
//! toggle, the export button (air-gapped), what is shared and what never leaves the device, what waits
//! here, this device.

use std::path::{Path, PathBuf};

use apiary_schema::colony::ColonyNames;
use apiary_schema::EventKind;
use maud::{html, Markup};

use super::layout::Problem;
use crate::config::Mode;
use crate::http::AppState;
use crate::outbox::Status;

/// What the user is told never leaves the device, whatever the policy says (colony names: see
/// [`COLONY_NAMES_KEPT`]).
const NEVER_SENT: [&str; 6] = [
    "your prompts and the models' answers, and their reasoning",
    "tool arguments (what a tool was asked to do) and tool results",
    "file and folder paths",
    "error texts, task subjects and descriptions, questions and answers",
    "the contents of conversations and webhooks",
    "any field the policy below does not list: it is dropped before the event is even stored here",
];

/// Colony names in the "never leaves" list, unless the tenant shares them and the user agreed.
const COLONY_NAMES_KEPT: &str =
    "colony names (a colony travels as a keyed hash of its name, which cannot be read back)";

/// `1 event`, `3 events`.
pub(super) fn events(n: u64) -> String {
    if n == 1 {
        "1 event".into()
    } else {
        format!("{n} events")
    }
}

/// "Sharing now": on, off or paused; the mode; where events go.
pub(super) fn summary(state: &AppState, s: &Status) -> Markup {
    let sync = &s.stored.sync;
    let shown = match (sync.enabled, &sync.paused_reason) {
        (true, Some(_)) => "Paused",
        (true, None) => "On",
        (false, _) => "Off",
    };
    html! {
        section aria-labelledby="now-title" {
            h2 #now-title { "Sharing now" }
            dl.facts {
                div { dt { "Sharing" } dd data-field="sync" { (shown) } }
                div { dt { "Mode" } dd data-field="mode" { (mode_name(state.mode)) } }
                div { dt { "Server" } dd data-field="endpoint_host" {
                    @match sync.endpoint.as_deref().and_then(endpoint_host) {
                        Some(h) => (h),
                        None => span.none { "no server set" },
                    }
                } }
                div { dt { "Last switched" } dd { @match sync.changed_at {
                    Some(at) => (at.format("%Y-%m-%d %H:%M UTC")),
                    None => span.none { "never" },
                } } }
            }
            @if let (true, Some(reason)) = (sync.enabled, &sync.paused_reason) {
                p.problem #paused { "Sharing is paused: " (paused_words(reason)) }
            }
            (super::colonies::names_summary(state))
        }
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Online => "Online",
        Mode::Airgapped => "Air-gapped",
    }
}

/// `host[:port]` of an endpoint URL.
fn endpoint_host(endpoint: &str) -> Option<String> {
    let url = reqwest::Url::parse(endpoint).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    })
}

/// A pause reason (a code the push loop sets) in plain words, with its fix ([`crate::push::pauses`]);
/// the backticks that mark commands on a terminal are left out of the page.
fn paused_words(reason: &str) -> String {
    crate::push::pauses::explain(reason).replace('`', "")
}

/// The toggle: the form that turns sharing on or off, or why it cannot.
pub(super) fn toggle_section(state: &AppState, s: &Status, problem: &Problem) -> Markup {
    let sync = &s.stored.sync;
    let policy = &state.policy;
    let endpoint = problem.endpoint.as_ref().or(sync.endpoint.as_ref());
    let token_file = problem.token_file.as_ref().or(sync.token_file.as_ref());
    let airgapped = state.mode == Mode::Airgapped;
    let offer_enable = !sync.enabled || sync.paused_reason.is_some();
    // Paused, both forms show: "off" keeps `#sync-button`, ids stay unique.
    let on_id = if sync.enabled {
        "sync-again-button"
    } else {
        "sync-button"
    };
    html! {
        section aria-labelledby="toggle-title" {
            h2 #toggle-title { "Change" }
            @if sync.enabled {
                form method="post" action="/settings/sync" {
                    input type="hidden" name="enabled" value="false";
                    p { "Turning sharing off stops uploads at once. Events are still recorded here." }
                    @if s.stored.pending_events > 0 {
                        div.check {
                            input #purge type="checkbox" name="purge" value="on";
                            label for="purge" { "Also delete the " (events(s.stored.pending_events))
                                " waiting to be sent (they will never be sent)" }
                        }
                    }
                    button #sync-button type="submit" { "Turn sharing off" }
                }
            }
            @if offer_enable && airgapped {
                p #airgapped-reason { "This agent runs air-gapped (" code { "mode = \"airgapped\"" }
                    "): it never connects to a server, so sharing cannot be turned on here. To hand "
                    "events over, write a bundle with " code { "apiary-agent export" } "." }
                button id=(on_id) type="button" disabled aria-describedby="airgapped-reason" {
                    "Turn sharing on" }
            } @else if offer_enable {
                form method="post" action="/settings/sync" {
                    input type="hidden" name="enabled" value="true";
                    p { "Turning sharing on sends the event kinds and fields listed under "
                        a href="#shared-title" { "What is shared" } " (policy " (policy.name())
                        ", hash " code { (short_hash(policy.hash())) } ") to the server below, and "
                        "records your consent with the time and that hash"
                        @if state.outbox.colony_keys().names().tenant == ColonyNames::Names {
                            " (with your colonies' names, the policy " (policy.name()) "+colony_names, hash "
                            code { (short_hash(state.outbox.policy_hash_with_names())) } ")"
                        }
                        "." }
                    div.field {
                        label for="endpoint" { "Server address (https://…)" }
                        input #endpoint type="url" name="endpoint" required
                            value=[endpoint] placeholder="https://ingest.example";
                    }
                    div.field {
                        label for="token_file" { "Token file (readable by you only, mode 0600)" }
                        input #token_file type="text" name="token_file" required
                            spellcheck="false" value=[token_file];
                    }
                    (super::colonies::names_choice(state))
                    @if s.stored.held_events > 0 {
                        div.check {
                            input #include_backlog type="checkbox" name="include_backlog" value="on";
                            label for="include_backlog" { "Also send the " (events(s.stored.held_events))
                                " recorded while sharing was off" }
                        }
                    }
                    button id=(on_id) .secondary[sync.enabled] type="submit" {
                        @if sync.enabled { "Turn sharing on again" } @else { "Turn sharing on" }
                    }
                }
            }
        }
    }
}

fn short_hash(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// What leaves the device (the policy in force: widened by colony names while they are shared) and
/// what never does.
pub(super) fn shared_section(state: &AppState) -> Markup {
    let names_shared = state.outbox.colony_keys().shares_names();
    let wider;
    let policy = match names_shared {
        true => {
            wider = state.policy.with_colony_names();
            &wider
        }
        false => &*state.policy,
    };
    html! {
        section aria-labelledby="shared-title" {
            h2 #shared-title { "What is shared" }
            p { "Only these kinds of events, with only these fields, plus ids (session, colony, worker; "
                "scrubbed) and the time. Policy " code { (policy.name()) } " version " (policy.version())
                ", hash " code data-field="policy_hash" { (policy.hash()) } "." }
            div.scroll { table {
                caption.visually-hidden { "Event kinds and the fields sent" }
                thead { tr { th scope="col" { "Kind" } th scope="col" { "What it is" }
                    th scope="col" { "Fields sent" } } }
                tbody {
                    @for kind in EventKind::ALL {
                        @if let Some(fields) = policy.fields(kind) {
                            tr data-kind=(kind.as_str()) {
                                td { code { (kind.as_str()) } }
                                td { @if names_shared && kind == EventKind::ColonyCreated {
                                    "a colony of workers began: its name and its key"
                                } @else { (describe(kind)) } }
                                td.fields { (fields.keys().map(String::as_str).collect::<Vec<_>>().join(", ")) }
                            }
                        }
                    }
                }
            } }
        }
        section aria-labelledby="never-title" {
            h2 #never-title { "What never leaves this device" }
            ul #never-sent {
                @for item in NEVER_SENT { li { (item) } }
                @if !names_shared { li { (COLONY_NAMES_KEPT) } }
            }
            @if names_shared {
                p.note { "Prompts, tool arguments, results and file paths are never sent, whether sharing "
                    "is on or off. Colony names are sent: your organisation asked for them and you agreed "
                    "when you turned sharing on." }
            } @else {
                p.note { "Prompts, tool arguments, results, file paths and colony names are never sent, "
                    "whether sharing is on or off." }
            }
        }
    }
}

fn describe(kind: EventKind) -> &'static str {
    match kind {
        EventKind::LlmTurn => "a model call: model, tokens, cost",
        EventKind::ToolCall => "a tool call: the tool's name, success, duration",
        EventKind::Execution => "a run started or ended",
        EventKind::SessionPhase => "the queen's phase changed",
        EventKind::SessionInput => "a session waits for, or got, your input (never the input)",
        EventKind::ColonyCreated => "a colony of workers began (its name only as a hash)",
        EventKind::WorkerFinished => "a worker finished, with its totals",
        EventKind::TaskChanged => "a task changed state (ids and states, never its text)",
        EventKind::TriggerChanged => "a trigger changed or fired",
        EventKind::HealthSignal => "a health signal: stalled, retrying, an API error",
        EventKind::AgentHeartbeat => "this agent is alive: backlog and version",
        EventKind::OutboxDropped => "events this agent had to drop, by reason",
    }
}

/// What waits on the device, and the last push.
pub(super) fn waiting_section(s: &Status) -> Markup {
    let st = &s.stored;
    html! {
        section aria-labelledby="waiting-title" {
            h2 #waiting-title { "Waiting on this device" }
            dl.facts {
                div { dt { "Events waiting" } dd data-field="pending_events" { (st.pending_events) } }
                div { dt { "Recorded while sharing was off" } dd data-field="held_events" { (st.held_events) } }
                div { dt { "Oldest waiting" } dd data-field="oldest_pending_age" {
                    @match st.oldest_pending_age_seconds {
                        Some(a) => { (human_age(a)) " old" },
                        None => span.none { "nothing waits" },
                    }
                } }
                div { dt { "Last push" } dd data-field="last_push" { (last_push(st.last_push.as_ref())) } }
            }
        }
    }
}

/// The push loop's last result in plain words.
fn last_push(p: Option<&serde_json::Value>) -> Markup {
    let Some(p) = p.filter(|p| !p.is_null()) else {
        return html! { span.none { "never" } };
    };
    let n = |k: &str| p[k].as_u64().unwrap_or(0);
    let at = p["at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    let ago = at.map(|t| human_age((chrono::Utc::now() - t).num_seconds().max(0) as f64));
    let error = p["error"].as_str();
    html! {
        @match p["result"].as_str() {
            Some("sent") => { "Sent " (n("events")) " events (" (n("accepted")) " accepted, "
                (n("duplicates")) " already there, " (n("rejected")) " refused)" }
            Some("backoff") => { "Could not send " (n("events")) " events; retrying in "
                (human_age(n("retry_in_ms") as f64 / 1000.0)) }
            Some("paused") => { "Stopped: sharing paused" }
            Some(other) => { (other) }
            None => { "unknown" }
        }
        @if let Some(ago) = ago { ", " (ago) " ago" }
        @if let Some(e) = error { br; span.problem { "Problem: " (e) } }
    }
}

/// `42 s`, `5 min`, `3 h 10 min`, `2 days`.
fn human_age(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} days", s / 86_400),
    }
}

/// Who this device is.
pub(super) fn identity_section(state: &AppState, s: &Status) -> Markup {
    let device = s
        .stored
        .device_id
        .clone()
        .unwrap_or_else(|| state.outbox.device_id());
    html! {
        section aria-labelledby="identity-title" {
            h2 #identity-title { "This device" }
            dl.facts {
                div { dt { "Device" } dd data-field="device_id" { (device) } }
                div { dt { "User" } dd data-field="user_id" { @match state.outbox.user_id() {
                    Some(u) => (u),
                    None => span.none { "not set" },
                } } }
                div { dt { "Agent version" } dd { (env!("CARGO_PKG_VERSION")) } }
                div { dt { "Token file" } dd { @match &s.stored.sync.token_file {
                    Some(f) => code { (f) },
                    None => span.none { "not set" },
                } } }
            }
        }
    }
}

/// The export section ([`super::export`]): the button in air-gapped mode, with what it does; nothing
/// online.
pub(super) fn export_section(state: &AppState, s: &Status) -> Markup {
    if state.mode != Mode::Airgapped {
        return html! {};
    }
    let waiting = s.stored.pending_events;
    let dir = exports_dir(state.outbox.path());
    html! {
        section #export aria-labelledby="export-title" {
            h2 #export-title { "Export bundle" }
            form method="post" action="/settings/export" {
                p { "This device is air-gapped: events leave it only in a bundle you carry to the server. \
                    The button writes every event waiting here (" (events(waiting)) ") into a new file in "
                    code { (dir.display()) } ", for " code { "apiary-ingest import" } ". They are then \
                    marked exported and are not written again." }
                @if waiting == 0 {
                    p.none #export-empty { "Nothing to export now." }
                    button #export-button type="submit" disabled aria-describedby="export-empty" {
                        "Export bundle" }
                } @else {
                    button #export-button type="submit" { "Export bundle" }
                }
            }
        }
    }
}

/// Where the page writes bundles: `exports/` beside the outbox (the data directory).
pub(super) fn exports_dir(outbox_db: &Path) -> PathBuf {
    outbox_db
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("exports")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_hosts_read_plainly() {
        assert_eq!(human_age(42.4), "42 s");
        assert_eq!(human_age(3_900.0), "1 h 5 min");
        assert_eq!(human_age(200_000.0), "2 days");
        assert_eq!(
            endpoint_host("https://ingest.example/base").as_deref(),
            Some("ingest.example")
        );
        assert_eq!(
            endpoint_host("http://127.0.0.1:8080").as_deref(),
            Some("127.0.0.1:8080")
        );
        assert!(paused_words("re-authenticate").contains("token"));
    }
}
