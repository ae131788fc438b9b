//! The settings page itself (`GET /settings`) and its toggle (`POST /settings/sync`).
//!
//! Every figure comes from the outbox's [`crate::outbox::Status`] (what `GET /v1/status` answers) and the
//! policy in force; the toggle runs [`crate::http::local::apply_sync`], the code of `PUT /v1/sync`.
//! Stable hooks for tests and the desktop shell: `dd[data-field=…]` (`sync`, `mode`, `endpoint_host`,
//! `pending_events`, `held_events`, `oldest_pending_age`, `last_push`, `device_id`, `user_id`,
//! `policy_hash`), `#sync-button`.

use apiary_schema::EventKind;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;

use super::signin;
use crate::config::Mode;
use crate::http::local::{apply_sync, SyncToggle};
use crate::http::{ApiError, AppState};
use crate::outbox::Status;

/// What the user is told never leaves the device, whatever the policy says.
const NEVER_SENT: [&str; 7] = [
    "your prompts and the models' answers, and their reasoning",
    "tool arguments (what a tool was asked to do) and tool results",
    "file and folder paths",
    "colony names (a colony travels as a keyed hash of its name, which cannot be read back)",
    "error texts, task subjects and descriptions, questions and answers",
    "the contents of conversations and webhooks",
    "any field the policy below does not list: it is dropped before the event is even stored here",
];

/// The outcome of the last toggle, shown once after the redirect (`/settings?done=on&released=3`).
#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    done: Option<String>,
    released: Option<u64>,
    purged: Option<u64>,
}

/// The toggle's form (see the module notes of [`super`]).
#[derive(Debug, Deserialize)]
pub struct ToggleForm {
    enabled: String,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    token_file: Option<String>,
    #[serde(default)]
    include_backlog: Option<String>,
    #[serde(default)]
    purge: Option<String>,
}

/// What a refused toggle shows: the API's status and message, and what the user typed.
#[derive(Debug, Default)]
struct Problem {
    status: Option<StatusCode>,
    message: String,
    endpoint: Option<String>,
    token_file: Option<String>,
}

/// `GET /settings`.
pub async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    notice: Result<Query<Notice>, QueryRejection>,
) -> Response {
    if !signin::signed_in(&state, &headers) {
        return Redirect::to("/settings/sign-in").into_response();
    }
    let notice = notice.map(|Query(n)| n).unwrap_or_default();
    render(&state, &notice, None).await
}

/// `POST /settings/sync`.
pub async fn toggle(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<ToggleForm>, FormRejection>,
) -> Response {
    if !super::origin_is_own(&state, &headers) {
        return cross_site();
    }
    if !signin::signed_in(&state, &headers) {
        return Redirect::to("/settings/sign-in").into_response();
    }
    let bad = |message: String| Problem {
        status: Some(StatusCode::BAD_REQUEST),
        message,
        ..Problem::default()
    };
    let form = match form {
        Ok(Form(f)) => f,
        Err(e) => return render(&state, &Notice::default(), Some(bad(e.body_text()))).await,
    };
    let enabled = match form.enabled.as_str() {
        "true" => true,
        "false" => false,
        other => {
            let msg = format!("enabled must be true or false, not {other:?}");
            return render(&state, &Notice::default(), Some(bad(msg))).await;
        }
    };
    let toggle = SyncToggle {
        enabled,
        endpoint: filled(form.endpoint),
        token_file: filled(form.token_file),
        include_backlog: form.include_backlog.is_some(),
        purge: form.purge.is_some(),
    };
    let (endpoint, token_file) = (toggle.endpoint.clone(), toggle.token_file.clone());
    match apply_sync(&state, toggle).await {
        Ok(r) if r.enabled => Redirect::to(&format!("/settings?done=on&released={}", r.released)),
        Ok(r) => Redirect::to(&format!("/settings?done=off&purged={}", r.purged)),
        Err(e) => {
            let (status, message) = e.status_and_message();
            let problem = Problem {
                status: Some(status),
                message,
                endpoint,
                token_file,
            };
            return render(&state, &Notice::default(), Some(problem)).await;
        }
    }
    .into_response()
}

/// The page, with the outcome of the last toggle or the problem of a refused one.
async fn render(state: &AppState, notice: &Notice, problem: Option<Problem>) -> Response {
    let status = match state.outbox.status().await {
        Ok(s) => s,
        Err(e) => {
            let (status, message) = ApiError::from(e).status_and_message();
            return problem_page(status, &message);
        }
    };
    let problem = problem.unwrap_or_default();
    let body = html! {
        h1 { "Telemetry sharing" }
        @if let Some(n) = notice_text(notice) { p.notice role="status" { (n) } }
        @if problem.status.is_some() { p.problem role="alert" #problem { (problem.message) } }
        (summary(state, &status))
        (toggle_section(state, &status, &problem))
        (shared_section(state))
        (waiting_section(&status))
        (identity_section(state, &status))
    };
    let code = problem.status.unwrap_or(StatusCode::OK);
    (code, signed_in_page(body)).into_response()
}

/// `1 event`, `3 events`.
fn events(n: u64) -> String {
    if n == 1 {
        "1 event".into()
    } else {
        format!("{n} events")
    }
}

/// A form field with something in it, trimmed.
fn filled(v: Option<String>) -> Option<String> {
    v.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

fn notice_text(n: &Notice) -> Option<String> {
    match n.done.as_deref()? {
        "on" => Some(match n.released.unwrap_or(0) {
            0 => "Sharing is on. Your consent was recorded.".to_string(),
            r => format!(
                "Sharing is on. Your consent was recorded; the {} recorded earlier will be sent too.",
                events(r)
            ),
        }),
        "off" => Some(match n.purged.unwrap_or(0) {
            0 => "Sharing is off. Nothing more leaves this device.".to_string(),
            p => format!(
                "Sharing is off. Nothing more leaves this device; the {} waiting were deleted.",
                events(p)
            ),
        }),
        _ => None,
    }
}

/// "Sharing now": on, off or paused; the mode; where events go.
fn summary(state: &AppState, s: &Status) -> Markup {
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

/// A pause reason (a code the push loop sets) in plain words.
fn paused_words(reason: &str) -> String {
    if reason == crate::push::REAUTHENTICATE {
        "the server refused this device's token. Put a valid token in the token file, then turn \
         sharing on again."
            .into()
    } else if reason == crate::push::INVALID_ENDPOINT {
        "the stored server address is not allowed (it must be https://). Enter a correct one and turn \
         sharing on again."
            .into()
    } else if let Some(rest) = reason.strip_prefix(crate::identity::IDENTITY_MISMATCH) {
        format!("the token belongs to another user or device than this agent is set up for{rest}")
    } else {
        reason.to_string()
    }
}

/// The toggle: the form that turns sharing on or off, or why it cannot.
fn toggle_section(state: &AppState, s: &Status, problem: &Problem) -> Markup {
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
                        "records your consent with the time and that hash." }
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

/// What leaves the device (the policy in force) and what never does.
fn shared_section(state: &AppState) -> Markup {
    let policy = &state.policy;
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
                                td { (describe(kind)) }
                                td.fields { (fields.keys().map(String::as_str).collect::<Vec<_>>().join(", ")) }
                            }
                        }
                    }
                }
            } }
        }
        section aria-labelledby="never-title" {
            h2 #never-title { "What never leaves this device" }
            ul #never-sent { @for item in NEVER_SENT { li { (item) } } }
            p.note { "Prompts, tool arguments, results, file paths and colony names are never sent, "
                "whether sharing is on or off." }
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
fn waiting_section(s: &Status) -> Markup {
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
fn identity_section(state: &AppState, s: &Status) -> Markup {
    let device = s
        .stored
        .device_id
        .as_deref()
        .unwrap_or(state.outbox.device_id());
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

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="color-scheme" content="light dark";
            meta name="referrer" content="same-origin";
            title { (title) " · Apiary on this device" }
            link rel="stylesheet" href="/settings/assets/settings.css";
        }
    }
}

/// A signed-in page: skip link, header with sign-out, `body` in `main`.
fn signed_in_page(body: Markup) -> Html<String> {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            (head("Settings"))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { "Apiary · this device" }
                    form method="post" action="/settings/sign-out" {
                        button.link type="submit" { "Sign out" }
                    }
                }
                main #main tabindex="-1" { (body) }
            }
        }
    };
    Html(doc.into_string())
}

/// A page without the header (sign-in, refusals).
pub(super) fn bare(title: &str, body: Markup) -> Html<String> {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body { main #main.bare { (body) } }
        }
    };
    Html(doc.into_string())
}

/// A refusal or failure as a page.
pub(super) fn problem_page(status: StatusCode, message: &str) -> Response {
    let body = html! {
        h1 { (status.canonical_reason().unwrap_or("Error")) }
        p.problem role="alert" { (message) }
    };
    (status, bare("Error", body)).into_response()
}

/// 403 for a form posted from another site's page (the `Origin` check).
pub(super) fn cross_site() -> Response {
    problem_page(
        StatusCode::FORBIDDEN,
        "This form must be sent from this agent's own settings page (Origin check): nothing was changed.",
    )
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
