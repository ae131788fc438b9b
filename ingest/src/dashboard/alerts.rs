//! Alerts (`/alerts`): the firing alerts, then the resolved ones (each newest first), with the rule's
//! kind, the subject (a session's links to its page, a budget's to its place on `/budgets`, a device's
//! to `/devices`), the summary, the times and each notification's delivery (pending / delivered /
//! dead, attempts, last error); then the rules, and for an admin token the destinations.
//!
//! The answers of `list_alerts` (`GET /v1/alerts?state=firing`, then `?state=resolved`),
//! `list_rules` and `list_destinations`, with the token's own principal: alerts are tenant-wide, so a
//! `read` token bound to a user gets the API's 403 and its message, on a page that keeps the navigation.
//! A destination shows its kind, name, host, URL fingerprint and whether it signs — the API's listing,
//! which has neither the secret nor the URL (a Slack webhook's URL is its secret). A notification's last
//! error never carries the URL either (see `alerts::deliver`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::format::{self, path_segment};
use super::layout::{self, badge, Nav};
use super::Viewer;
use crate::alerts::RuleKind;
use crate::auth::Scope;
use crate::error::ApiError;
use crate::routes::alerts::{
    self as api, AlertBody, AlertList, AlertParams, DestinationBody, RuleBody,
};
use crate::routes::extract::Query;
use crate::state::AppState;

/// Most resolved alerts shown (the newest).
const RESOLVED_SHOWN: i64 = 100;
/// Most firing alerts shown (the API's maximum).
const FIRING_SHOWN: i64 = 1000;

/// `GET /alerts`.
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    match sections(state, &viewer).await {
        Ok(body) => layout::page("Alerts", Nav::Alerts, &viewer, body),
        Err(ApiError::Forbidden(message)) => {
            let body = html! {
                h1 { "Alerts" }
                p.problem role="alert" { (message) }
            };
            (
                StatusCode::FORBIDDEN,
                layout::page("Alerts", Nav::Alerts, &viewer, body),
            )
                .into_response()
        }
        Err(e) => layout::error_page(e),
    }
}

async fn fired(
    state: &AppState,
    viewer: &Viewer,
    which: &str,
    limit: i64,
) -> Result<AlertList, ApiError> {
    let params = AlertParams {
        state: Some(which.into()),
        limit: Some(limit),
    };
    let Json(list) = api::list_alerts(
        State(state.clone()),
        viewer.principal.clone(),
        Query(params),
    )
    .await?;
    Ok(list)
}

async fn sections(state: AppState, viewer: &Viewer) -> Result<Markup, ApiError> {
    let firing = fired(&state, viewer, "firing", FIRING_SHOWN).await?;
    let resolved = fired(&state, viewer, "resolved", RESOLVED_SHOWN).await?;
    let Json(rules) = api::list_rules(State(state.clone()), viewer.principal.clone()).await?;
    let destinations = if viewer.principal.has(Scope::Admin) {
        let Json(d) = api::list_destinations(State(state), viewer.principal.clone()).await?;
        Some(d.destinations)
    } else {
        None
    };
    let now = Utc::now();
    Ok(html! {
        h1 { "Alerts" }
        section aria-labelledby="firing-title" {
            h2 #firing-title { "Firing (" (firing.alerts.len()) ")" }
            (alert_table("firing", "Firing alerts, newest first", &firing.alerts, now))
        }
        section aria-labelledby="resolved-title" {
            h2 #resolved-title { "Resolved" }
            @if resolved.alerts.len() as i64 >= RESOLVED_SHOWN {
                p.note { "The " (RESOLVED_SHOWN) " most recent (" code { "GET /v1/alerts?state=resolved&limit=1000" } " has more)." }
            }
            (alert_table("resolved", "Resolved alerts, newest first", &resolved.alerts, now))
        }
        (rule_table(&rules.rules, destinations.as_deref()))
        @if let Some(d) = &destinations { (destination_table(d)) }
    })
}

/// An RFC 3339 time of an answer as UTC to the second, with how long ago.
fn when(t: &str, now: DateTime<Utc>) -> Markup {
    match DateTime::parse_from_rfc3339(t) {
        Ok(at) => {
            let at = at.with_timezone(&Utc);
            html! { time datetime=(t) title=(format::ago(at, now)) { (format::time(at)) } }
        }
        Err(_) => html! { (t) },
    }
}

/// A rule kind in words.
fn kind_words(k: RuleKind) -> &'static str {
    match k {
        RuleKind::Budget => "budget",
        RuleKind::SessionStatus => "session status",
        RuleKind::DeviceOffline => "device offline",
        RuleKind::Silence => "silence",
    }
}

/// The subject, linked to its page.
fn subject(a: &AlertBody) -> Markup {
    match a.kind {
        RuleKind::SessionStatus => html! {
            a href={ "/sessions/" (path_segment(&a.subject)) } aria-label={ "Session " (a.subject) } { code { (a.subject) } }
        },
        RuleKind::Budget => html! {
            a href={ "/budgets#" (path_segment(&a.subject)) } aria-label={ "Budget " (a.subject) } { code { (a.subject) } }
        },
        RuleKind::DeviceOffline | RuleKind::Silence => html! {
            a href="/devices" aria-label={ "Devices (" (a.subject) ")" } { code { (a.subject) } }
        },
    }
}

fn alert_table(state: &str, caption: &str, alerts: &[AlertBody], now: DateTime<Utc>) -> Markup {
    html! {
        @if alerts.is_empty() {
            p.empty { "No " (state) " alerts." }
        } @else {
            div.scroll { table.alerts {
                caption.visually-hidden { (caption) }
                thead { tr {
                    th scope="col" { "State" } th scope="col" { "Kind" } th scope="col" { "Subject" }
                    th scope="col" { "Summary" } th scope="col" { "Fired" } th scope="col" { "Resolved" }
                    th scope="col" { "Notifications" }
                } }
                tbody { @for a in alerts {
                    tr data-alert=(a.alert_id) data-state=(a.state) {
                        td { (badge(&a.state)) }
                        td { (kind_words(a.kind)) }
                        td { (subject(a)) }
                        th scope="row" { (a.summary) }
                        td { (when(&a.fired_at, now)) }
                        td { @if let Some(r) = &a.resolved_at { (when(r, now)) } @else { span.none { "–" } } }
                        td {
                            @if a.notifications.is_empty() {
                                span.none { "none" }
                            } @else {
                                ul.notes { @for n in &a.notifications {
                                    li data-event=(n.event) data-delivery=(n.state) data-attempts=(n.attempts) {
                                        (n.event) ": " (badge(&n.state))
                                        " · " (n.attempts) @if n.attempts == 1 { " attempt" } @else { " attempts" }
                                        @if let Some(d) = &n.delivered_at { " · at " (when(d, now)) }
                                        @if let Some(e) = &n.last_error { br; span.error { "Last error: " (e) } }
                                    }
                                } }
                            }
                        }
                    }
                } }
            } }
        }
    }
}

/// What a rule watches, in words.
fn rule_condition(r: &RuleBody) -> Markup {
    html! {
        @match r.kind {
            RuleKind::Budget => {
                @if let Some(b) = &r.budget_id {
                    "thresholds of " a href={ "/budgets#" (path_segment(b)) } { code { (b) } }
                } @else { "thresholds of any budget" }
            }
            RuleKind::SessionStatus => {
                "a session " (r.statuses.join(", ").replace('_', " "))
                @if r.min_duration_secs > 0 { " for " (format::duration(r.min_duration_secs as f64)) }
            }
            RuleKind::DeviceOffline => {
                "a device offline"
                @if let Some(n) = r.backlog_events { ", or with a backlog of " (format::count(n.into())) " events" }
            }
            RuleKind::Silence => {
                "a usually active device silent for " (r.silence_hours.unwrap_or(24)) " hours"
            }
        }
    }
}

fn rule_table(rules: &[RuleBody], destinations: Option<&[DestinationBody]>) -> Markup {
    let dest_name = |id: &str| {
        destinations
            .and_then(|ds| ds.iter().find(|d| d.destination_id == id))
            .and_then(|d| d.name.clone())
    };
    html! {
        section aria-labelledby="rules-title" {
            h2 #rules-title { "Rules" }
            @if rules.is_empty() {
                p.empty { "No rules. An admin token adds them (" code { "POST /v1/alerts/rules" } ")." }
            } @else {
                div.scroll { table {
                    thead { tr {
                        th scope="col" { "Rule" } th scope="col" { "Kind" } th scope="col" { "Fires on" }
                        th scope="col" { "Sends to" } th scope="col" { "Created" }
                    } }
                    tbody { @for r in rules { tr data-rule=(r.rule_id) {
                        th scope="row" { @if let Some(n) = &r.name { (n) br; } code { (r.rule_id) } }
                        td { (kind_words(r.kind)) }
                        td { (rule_condition(r)) }
                        td { @if let Some(n) = dest_name(&r.destination_id) { (n) br; } code { (r.destination_id) } }
                        td { (r.created_at.get(..10).unwrap_or(&r.created_at)) }
                    } } }
                } }
            }
        }
    }
}

fn destination_table(ds: &[DestinationBody]) -> Markup {
    html! {
        section aria-labelledby="destinations-title" {
            h2 #destinations-title { "Destinations" }
            @if ds.is_empty() {
                p.empty { "No destinations." }
            } @else {
                div.scroll { table {
                    caption.visually-hidden { "Destinations (hosts and URL fingerprints; URLs and secrets are never shown)" }
                    thead { tr {
                        th scope="col" { "Destination" } th scope="col" { "Kind" } th scope="col" { "Host" }
                        th scope="col" { "URL fingerprint" } th scope="col" { "Signed" } th scope="col" { "Created" }
                    } }
                    tbody { @for d in ds { tr data-destination=(d.destination_id) {
                        th scope="row" { @if let Some(n) = &d.name { (n) br; } code { (d.destination_id) } }
                        td { (d.kind.as_str()) }
                        td { code { (d.host) } }
                        td { code title="first 12 hex digits of the URL's SHA-256" { (d.url_fingerprint) } }
                        td { @if d.has_secret { "yes (HMAC)" } @else { "no" } }
                        td { (d.created_at.get(..10).unwrap_or(&d.created_at)) }
                    } } }
                } }
            }
        }
    }
}
