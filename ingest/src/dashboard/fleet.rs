//! Devices (`/devices`: liveness, backlog, agent version, last push) and colonies (`/colonies`: by key,
//! with runs, workers and spend over the range; each with its admin's label and, for a tenant that
//! shares colony names, its name). The answers of `get_devices` and `list_colonies`; the
//! colonies page takes `/v1/colonies`' query string (`from`, `to`, `tz`), with the overview's default
//! range (the last 30 local days, today included).

use apiary_schema::colony::ColonyNames;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use axum::Json;
use chrono::Utc;
use maud::html;

use super::format;
use super::layout::{self, Nav};
use super::overview::{last_30_days, non_empty};
use super::Viewer;
use crate::error::ApiError;
use crate::query::colonies::ColonyParams;
use crate::query::ReadDb;
use crate::routes::extract::query_params;

/// `GET /devices`.
pub async fn devices_page(State(db): State<ReadDb>, viewer: Viewer) -> Response {
    let list = match crate::routes::devices::get_devices(State(db), viewer.reader.clone()).await {
        Ok(Json(l)) => l,
        Err(e) => return layout::error_page(e),
    };
    let now = Utc::now();
    let body = html! {
        h1 { "Devices" }
        @if list.devices.is_empty() {
            p.empty { "No device has pushed yet." }
        } @else {
            div.scroll { table {
                caption.visually-hidden { "Devices, most recently heard first" }
                thead { tr {
                    th scope="col" { "Device" } th scope="col" { "Liveness" } th scope="col" { "User" }
                    th scope="col" { "Agent" } th scope="col" { "Last push" } th scope="col" { "Last heartbeat" }
                    th.num scope="col" { "Backlog" } th.num scope="col" { "Oldest pending" } th scope="col" { "Sync" }
                    th.num scope="col" { "Dropped" }
                } }
                tbody { @for d in &list.devices { tr {
                    th scope="row" { code { (d.device_id) } }
                    td { @if d.online { span.badge.s-active { "online" } } @else { span.badge.s-offline { "offline" } } }
                    td { (d.user_id.as_deref().unwrap_or("–")) }
                    td { (d.agent_version.as_deref().unwrap_or("–")) }
                    td { @if let Some(t) = d.last_seen_at { time datetime=(t.to_rfc3339()) title=(format::time(t)) { (format::ago(t, now)) } } @else { "never" } }
                    td { @if let Some(t) = d.last_heartbeat_at { time datetime=(t.to_rfc3339()) title=(format::time(t)) { (format::ago(t, now)) } } @else { "never" } }
                    td.num { @if let Some(n) = d.backlog_events { (format::count(n.into())) " events" } @else { "–" } }
                    td.num { @if let Some(s) = d.oldest_pending_age_seconds { (format::duration(s)) } @else { "–" } }
                    td { (d.sync_state.as_deref().unwrap_or("–")) }
                    td.num { (format::count(d.dropped_events.into())) }
                } } }
            } }
        }
    };
    layout::page("Devices", Nav::Devices, &viewer, body)
}

/// How colonies are named here, and how to make a key readable.
fn naming_note(names: ColonyNames) -> maud::Markup {
    html! {
        p.note #colony-naming data-colony-names=(names.as_str()) {
            @match names {
                ColonyNames::Keys => {
                    "Colonies are known by their keys (" code { "ck_…" } "): their names stay on the "
                    "devices (tenant setting " code { "colony_names" } " is " code { "keys" } "). "
                }
                ColonyNames::Names => {
                    "Devices whose users agreed send their colonies' names (tenant setting "
                    code { "colony_names" } " is " code { "names" } "); other colonies show their keys. "
                }
            }
            "Each device's settings page lists its own colonies with their keys; an admin labels a key with "
            code { "PUT /v1/colonies/{key}/label" } "."
        }
    }
}

/// `GET /colonies`.
/// The colonies page's query (and its CSV download's): the range asked for, else the overview's default
/// range (the API's would end at the next quarter hour, which the date picker cannot show: it would read
/// as today's midnight and leave today out when submitted).
pub(super) fn colony_params(raw: Option<&str>) -> Result<ColonyParams, ApiError> {
    let mut params: ColonyParams = query_params(&non_empty(raw.unwrap_or("")))?;
    if params.from.is_none() && params.to.is_none() {
        let (from, to) = last_30_days(params.tz.as_ref());
        (params.from, params.to) = (Some(from), Some(to));
    }
    Ok(params)
}

pub async fn colonies_page(
    State(db): State<ReadDb>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = match colony_params(raw.as_deref()) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    let list = match crate::query::colonies::list(&db, &viewer.reader, params.into()).await {
        Ok(l) => l,
        Err(e) => return layout::error_page(e),
    };
    let date = |s: &str| s.get(..10).unwrap_or(s).to_string();
    let body = html! {
        h1 { "Colonies" }
        (naming_note(viewer.principal.colony_names))
        form.pickers method="get" action="/colonies" aria-label="Colony range" {
            div { label for="from" { "From" } input #from type="date" name="from" value=(date(&list.from)); }
            div { label for="to" { "Until (exclusive)" } input #to type="date" name="to" value=(date(&list.to)); }
            div { label for="tz" { "Time zone" } input #tz name="tz" value=(list.tz) autocomplete="off" spellcheck="false"; }
            div { button type="submit" { "Show" } }
        }
        (super::format::csv_link("/colonies.csv", raw.as_deref(), "these colonies"))
        @if list.colonies.is_empty() {
            p.empty { "No colonies in this range." }
        } @else {
            div.scroll { table {
                thead { tr {
                    th scope="col" { "Colony" } th.num scope="col" { "Runs" } th.num scope="col" { "Sessions" }
                    th.num scope="col" { "Workers" } th scope="col" { "First seen" } th scope="col" { "Last seen" }
                    th.num scope="col" { "Spend in range" } th.num scope="col" { "Days with spend" }
                } }
                tbody { @for c in &list.colonies { tr {
                    th scope="row" data-colony=(c.colony_key) {
                        @if let Some(l) = &c.label { span.colony-label { (l) } br; }
                        @if let Some(n) = &c.name { @if c.label.as_ref() != Some(n) { span.colony-name { "name: " (n) } br; } }
                        a href={ "/sessions?colony=" (c.colony_key) } aria-label={ "Sessions of colony " (c.colony_key) } {
                            code { (c.colony_key) }
                        }
                    }
                    td.num { (c.runs.len()) }
                    td.num { (format::count(c.sessions.into())) }
                    td.num { (format::count(c.workers.into())) }
                    td { (format::time(c.first_seen_at)) }
                    td { (format::time(c.last_seen_at)) }
                    td.num title=(format::money_exact(c.totals.cost_nanos.0)) { (format::money(c.totals.cost_nanos.0)) }
                    td.num { (c.days.len()) }
                } } }
            } }
        }
    };
    layout::page("Colonies", Nav::Colonies, &viewer, body)
}
