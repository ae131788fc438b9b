//! The sessions list (`/sessions`: most recent first, filters, paging); a session's page is
//! [`super::session`].
//!
//! A row shows the session's runtime (`hive`, `claude_code`, …) and, under its status, the statuses
//! below it that call for a look, worst first (`1 stalled, 1 needs attention below`: the API's
//! `below`, as of the page load), so a queen that reads `completed` does not hide a stalled worker.
//!
//! The list is live: `assets/live.js` follows `/live` (see [`super::live`]) and updates a row's status
//! badge when the session's status changes, without a reload.
//!
//! The list's query string is `/v1/sessions`' (`status`, `user`, `device`, `colony`, `since`, `limit`, `cursor`;
//! empty filter fields dropped) and its rows are `list_sessions`' answer.

use axum::extract::{RawQuery, State};
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::format::{self, path_segment};
use super::layout::{self, badge, opt, Nav};
use super::overview::non_empty;
use super::Viewer;
use crate::query::sessions::body::{needs_a_look, SessionBody};
use crate::query::sessions::ListParams;
use crate::query::ReadDb;
use crate::routes::extract::query_params;
use crate::routes::sessions as api;
use apiary_schema::status::Status;

/// Sessions per page unless `limit` says otherwise.
pub(super) const PAGE: &str = "50";

/// `GET /sessions`.
pub async fn list_page(
    State(db): State<ReadDb>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let raw = non_empty(raw.as_deref().unwrap_or(""));
    let mut params: ListParams = match query_params(&raw) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    if params.limit.is_none() {
        params.limit = PAGE.parse().ok();
    }
    let filters = Filters::of(&raw);
    // New sessions join the live list only where they belong: the first page, unfiltered.
    let live_add = raw.is_empty() || raw.split('&').all(|p| p.starts_with("limit="));
    let page = match api::session_page(&db, &viewer.reader, params).await {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    let now = Utc::now();
    let body = html! {
        h1 { "Sessions" }
        (filters.form())
        (super::format::csv_link("/sessions.csv", Some(&raw), "this page of sessions"))
        p #live-note role="status" aria-live="polite" {}
        @if page.sessions.is_empty() {
            p.empty { "No sessions match." }
        }
        @if !page.sessions.is_empty() || live_add {
            div.scroll {
                table.sessions data-live="" data-live-add[live_add] {
                    caption.visually-hidden { "Sessions, most recent first" }
                    thead { tr {
                        th scope="col" { "Status" }
                        th scope="col" { "Session" }
                        th scope="col" { "Role" }
                        th scope="col" { "Runtime" }
                        th scope="col" { "User" }
                        th scope="col" { "Device" }
                        th scope="col" { "Last event" }
                        th.num scope="col" { "Spend" }
                        th.num scope="col" { "Tokens" }
                    } }
                    tbody {
                        @for s in &page.sessions { (row(s, now)) }
                    }
                }
            }
        }
        @if let Some(cursor) = &page.next_cursor {
            nav.paging aria-label="Pages" {
                a rel="next" href={ "/sessions?" (filters.with_cursor(cursor)) } { "Older sessions →" }
            }
        }
        script src="/assets/live.js" defer {}
    };
    layout::page("Sessions", Nav::Sessions, &viewer, body)
}

fn row(s: &SessionBody, now: DateTime<Utc>) -> Markup {
    let tokens = s.totals.input_tokens.0 + s.totals.output_tokens.0;
    html! {
        tr data-session=(s.session_id) {
            td { (badge(s.status.as_str())) (below(s)) }
            td { a href={ "/sessions/" (path_segment(&s.session_id)) } { code { (s.session_id) } } }
            td { (opt(&s.agent_role)) }
            td data-field="runtime" { (opt(&s.runtime)) }
            td { (opt(&s.user_id)) }
            td { (opt(&s.device_id)) }
            td { @if let Some(t) = s.last_event_at { time datetime=(t.to_rfc3339()) title=(format::time(t)) { (format::ago(t, now)) } } }
            td.num title=(format::money_exact(s.totals.cost_nanos.0)) { (format::money(s.totals.cost_nanos.0)) }
            td.num { (format::count(tokens)) }
        }
    }
}

/// The statuses below the session that call for a look, worst first, with their counts; nothing when
/// none does. The worst is in `data-worst-below`.
fn below(s: &SessionBody) -> Markup {
    let mut shown: Vec<(Status, u64)> = s
        .below
        .iter()
        .filter(|(st, n)| needs_a_look(**st) && **n > 0)
        .map(|(st, n)| (*st, *n))
        .collect();
    shown.sort_by_key(|(st, _)| std::cmp::Reverse(st.severity()));
    let Some((worst, _)) = shown.first().copied() else {
        return html! {};
    };
    let words: Vec<String> = shown
        .iter()
        .map(|(st, n)| format!("{n} {}", st.as_str().replace('_', " ")))
        .collect();
    html! {
        span.below class={ "s-" (worst.as_str()) } data-worst-below=(worst.as_str()) {
            (words.join(", ")) " below"
        }
    }
}

/// The list's filters as the form shows them and the next page's link carries them.
struct Filters {
    status: String,
    user: String,
    device: String,
    colony: String,
    limit: String,
}

impl Filters {
    fn of(raw: &str) -> Filters {
        let get = |name: &str| {
            form_urlencoded::parse(raw.as_bytes())
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        Filters {
            status: get("status"),
            user: get("user"),
            device: get("device"),
            colony: get("colony"),
            limit: get("limit"),
        }
    }

    fn with_cursor(&self, cursor: &str) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("status", &self.status),
            ("user", &self.user),
            ("device", &self.device),
            ("colony", &self.colony),
            ("limit", &self.limit),
        ] {
            if !v.is_empty() {
                q.append_pair(k, v);
            }
        }
        q.append_pair("cursor", cursor);
        q.finish()
    }

    fn form(&self) -> Markup {
        html! {
            form.pickers method="get" action="/sessions" aria-label="Filter sessions" {
                div {
                    label for="status" { "Status" }
                    select #status name="status" {
                        option value="" selected[self.status.is_empty()] { "any" }
                        @for s in Status::ALL {
                            option value=(s.as_str()) selected[self.status == s.as_str()] { (s.as_str().replace('_', " ")) }
                        }
                    }
                }
                div {
                    label for="user" { "User" }
                    input #user name="user" value=(self.user) autocomplete="off" spellcheck="false";
                }
                div {
                    label for="device" { "Device" }
                    input #device name="device" value=(self.device) autocomplete="off" spellcheck="false";
                }
                div {
                    label for="colony" { "Colony" }
                    input #colony name="colony" value=(self.colony) autocomplete="off" spellcheck="false" placeholder="ck_…";
                }
                div {
                    label for="limit" { "Per page" }
                    input #limit name="limit" type="number" min="1" max="1000" value=(self.limit) placeholder=(PAGE);
                }
                div { button type="submit" { "Filter" } }
            }
        }
    }
}
