//! Exports (`/exports`, scope admin): the tenant's OTLP usage exports — where each sends (the endpoint's
//! host and URL fingerprint, never the URL or a header), how often, labelled by what, and how its sends
//! went (status, last success, last error) — with a form that adds one and a button that deletes one.
//!
//! Every action is the API's: the listing is `list_exports`, the form posts to `post_export` (the same
//! checks, the same 400 and its message), the button to `delete_export`; so a `read` token gets the
//! API's 403 and its words, on a page that keeps the navigation. The URL and headers of a new export
//! are shown on the answer to the form, once, as `POST /v1/exports` answers them, and never again.
//!
//! The two POSTs pass [`same_origin`] first (CSRF: see the module notes of [`crate::dashboard`]); the
//! cookie is `SameSite=Strict` on top.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde_json::json;

use super::format::{self, path_segment};
use super::layout::{self, badge, Nav};
use super::signin::{cross_site, same_origin};
use super::Viewer;
use crate::error::ApiError;
use crate::exports::store::{CreatedExport, ExportBody};
use crate::exports::LABEL_DIMS;
use crate::routes::exports as api;
use crate::state::AppState;

/// `GET /exports`.
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    show(state, &viewer, StatusCode::OK, None, None).await
}

/// The page with, above the listing, the export just created (`created`) or why the form was refused.
async fn show(
    state: AppState,
    viewer: &Viewer,
    status: StatusCode,
    created: Option<&CreatedExport>,
    problem: Option<String>,
) -> Response {
    let listed = api::list_exports(State(state), viewer.principal.clone()).await;
    let exports = match listed {
        Ok(Json(l)) => l.exports,
        Err(ApiError::Forbidden(message)) => {
            let body = html! {
                h1 { "Exports" }
                p.problem role="alert" { (message) }
            };
            return (
                StatusCode::FORBIDDEN,
                layout::page("Exports", Nav::Exports, viewer, body),
            )
                .into_response();
        }
        Err(e) => return layout::error_page(e),
    };
    let now = Utc::now();
    let body = html! {
        h1 { "Exports" }
        p { "Usage pushed as OTLP/HTTP metrics to your collector, every interval (see "
            code { "docs/exports.md" } "). Prometheus can scrape " code { "GET /v1/metrics" } " instead." }
        @if let Some(p) = &problem { p.problem role="alert" { (p) } }
        @if let Some(c) = created { (created_box(c)) }
        (table(&exports, now))
        (form())
    };
    (status, layout::page("Exports", Nav::Exports, viewer, body)).into_response()
}

/// A new export's URL and headers, shown this once.
fn created_box(c: &CreatedExport) -> Markup {
    html! {
        section.created role="status" aria-labelledby="created-title" {
            h2 #created-title { "Export " code { (c.export.export_id) } " created" }
            p { strong { "Keep these now: the URL and the header values are not shown again." } }
            dl {
                dt { "URL" } dd { code { (c.url) } }
                @for (k, v) in &c.headers { dt { "Header " code { (k) } } dd { code data-header=(k) { (v) } } }
            }
        }
    }
}

/// An RFC 3339 time of an answer as UTC to the second, with how long ago.
fn when(t: &Option<String>, now: DateTime<Utc>) -> Markup {
    match t.as_deref().map(|s| (s, DateTime::parse_from_rfc3339(s))) {
        Some((s, Ok(at))) => {
            let at = at.with_timezone(&Utc);
            html! { time datetime=(s) title=(format::ago(at, now)) { (format::time(at)) } }
        }
        Some((s, Err(_))) => html! { (s) },
        None => html! { span.none { "–" } },
    }
}

fn table(exports: &[ExportBody], now: DateTime<Utc>) -> Markup {
    html! {
        section aria-labelledby="exports-title" {
            h2 #exports-title { "Destinations" }
            @if exports.is_empty() {
                p.empty { "No exports." }
            } @else {
                div.scroll { table.exports {
                    caption.visually-hidden { "Exports (hosts and URL fingerprints; URLs and headers are never shown)" }
                    thead { tr {
                        th scope="col" { "Endpoint host" } th scope="col" { "Every" }
                        th scope="col" { "Labels" } th scope="col" { "Status" }
                        th scope="col" { "Last success" } th scope="col" { "Last error" }
                        th scope="col" { span.visually-hidden { "Delete" } }
                    } }
                    tbody { @for e in exports { tr data-export=(e.export_id) data-status=(e.status) {
                        th scope="row" {
                            code { (e.host) } br;
                            span.note title="first 12 hex digits of the URL's SHA-256" { (e.url_fingerprint) }
                            " · " code { (e.export_id) }
                        }
                        td { (format::duration(e.interval_secs as f64)) }
                        td { @if e.dimensions.is_empty() { span.none { "none" } } @else { (e.dimensions.join(", ")) } }
                        td { (badge(&e.status)) @if e.failures > 0 { " · " (e.failures) " failed" } }
                        td { (when(&e.last_success_at, now)) }
                        td { @if let Some(err) = &e.last_error { span.error { (err) } } @else { span.none { "–" } } }
                        td {
                            form method="post" action={ "/exports/" (path_segment(&e.export_id)) "/delete" } {
                                button type="submit" aria-label={ "Delete export " (e.export_id) " to " (e.host) } { "Delete" }
                            }
                        }
                    } } }
                } }
            }
        }
    }
}

fn form() -> Markup {
    html! {
        section aria-labelledby="new-title" {
            h2 #new-title { "Add an export" }
            form.new-export method="post" action="/exports" {
                div {
                    label for="url" { "OTLP/HTTP metrics endpoint" }
                    input #url name="url" type="url" required placeholder="https://collector.example.net/v1/metrics" autocomplete="off" spellcheck="false";
                }
                div {
                    label for="headers" { "Headers, one " code { "name: value" } " a line (shown once)" }
                    textarea #headers name="headers" rows="3" autocomplete="off" spellcheck="false" {}
                }
                div {
                    label for="interval_secs" { "Seconds between sends" }
                    input #interval_secs name="interval_secs" type="number" min="5" max="86400" value="60";
                }
                fieldset {
                    legend { "Labels of every point (each multiplies the points sent)" }
                    @for (_, word) in LABEL_DIMS {
                        label { input type="checkbox" name="dimensions" value=(word); " " (word) }
                    }
                }
                div { button type="submit" { "Add export" } }
            }
        }
    }
}

/// The form's fields as the API's body: url, headers (`name: value` or `name=value` lines), the
/// interval and the checked dimensions.
fn body_of(form: &[u8]) -> Result<serde_json::Value, String> {
    let mut url = String::new();
    let mut headers = serde_json::Map::new();
    let mut interval: Option<i64> = None;
    let mut dimensions = vec![];
    for (k, v) in form_urlencoded::parse(form) {
        match &*k {
            "url" => url = v.trim().to_string(),
            "headers" => {
                for line in v.lines().map(str::trim).filter(|l| !l.is_empty()) {
                    let (name, value) = line
                        .split_once(':')
                        .or_else(|| line.split_once('='))
                        .ok_or_else(|| format!("headers: {line:?} is not \"name: value\""))?;
                    headers.insert(name.trim().to_string(), value.trim().into());
                }
            }
            "interval_secs" if !v.trim().is_empty() => {
                interval = Some(
                    v.trim()
                        .parse()
                        .map_err(|_| "interval_secs: a whole number of seconds".to_string())?,
                );
            }
            "dimensions" => dimensions.push(v.into_owned()),
            _ => {}
        }
    }
    let mut body = json!({ "url": url, "headers": headers, "dimensions": dimensions });
    if let Some(i) = interval {
        body["interval_secs"] = i.into();
    }
    Ok(body)
}

/// `POST /exports` (form): adds an export; answers the page with its URL and headers, once.
pub async fn create(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    form: Bytes,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let body = match body_of(&form) {
        Ok(b) => b,
        Err(problem) => {
            return show(state, &viewer, StatusCode::BAD_REQUEST, None, Some(problem)).await
        }
    };
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON value"));
    match api::post_export(State(state.clone()), viewer.principal.clone(), bytes).await {
        Ok((_, Json(created))) => {
            show(state, &viewer, StatusCode::CREATED, Some(&created), None).await
        }
        Err(ApiError::BadRequest { message, .. }) => {
            show(state, &viewer, StatusCode::BAD_REQUEST, None, Some(message)).await
        }
        Err(e) => layout::error_page(e),
    }
}

/// `POST /exports/{id}/delete`: deletes the export, then back to the page (303).
pub async fn delete(
    State(state): State<AppState>,
    viewer: Viewer,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let path = crate::routes::extract::Path(id);
    match api::delete_export(State(state), viewer.principal.clone(), path).await {
        Ok(_) => Redirect::to("/exports").into_response(),
        Err(e) => layout::error_page(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_becomes_the_apis_body() {
        let form = b"url=https%3A%2F%2Fo.example.com%2Fv1%2Fmetrics&headers=api-key%3A+k1%0D%0Ax-team%3Dops&interval_secs=30&dimensions=user&dimensions=model";
        assert_eq!(
            body_of(form).unwrap(),
            json!({"url": "https://o.example.com/v1/metrics", "headers": {"api-key": "k1", "x-team": "ops"},
                   "interval_secs": 30, "dimensions": ["user", "model"]})
        );
        assert!(body_of(b"headers=no-separator")
            .unwrap_err()
            .starts_with("headers"));
        assert_eq!(body_of(b"").unwrap()["url"], "");
    }
}
