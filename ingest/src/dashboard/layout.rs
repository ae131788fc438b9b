//! The page shell every dashboard page shares: document head, skip link, navigation (each link with
//! `aria-current` on the page it names), the sign-out form, and the error page; and the [`Viewer`] each
//! page is drawn for (the request side of it, the sign-in cookie, is [`super::signin`]'s).
//!
//! Accessibility: one `h1` per page, landmarks (`header`, `nav`, `main`), a skip link as the first
//! focusable element, visible focus rings (the stylesheet), labels on every control, status shown as
//! text (never by colour alone).

use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

use crate::access::TenantRead;
use crate::auth::Principal;
use crate::error::ApiError;

/// Whoever is signed in: the token's read scope and the token's holder, for the page header.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// What the pages may read (the same scope the token's API reads get).
    pub reader: TenantRead,
    /// The token's holder.
    pub principal: Principal,
}

/// The pages in the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Sessions,
    Devices,
    Colonies,
    Budgets,
    Alerts,
    Exports,
    Prices,
}

impl Nav {
    const ALL: [(Nav, &'static str, &'static str); 8] = [
        (Nav::Overview, "/", "Overview"),
        (Nav::Sessions, "/sessions", "Sessions"),
        (Nav::Devices, "/devices", "Devices"),
        (Nav::Colonies, "/colonies", "Colonies"),
        (Nav::Budgets, "/budgets", "Budgets"),
        (Nav::Alerts, "/alerts", "Alerts"),
        (Nav::Exports, "/exports", "Exports"),
        (Nav::Prices, "/prices", "Prices"),
    ];
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="color-scheme" content="light dark";
            meta name="referrer" content="same-origin";
            title { (title) " · Apiary" }
            link rel="stylesheet" href="/assets/app.css";
        }
    }
}

/// A signed-in page: navigation, who is signed in, and `body` in `main`.
pub fn page(title: &str, current: Nav, viewer: &Viewer, body: Markup) -> Response {
    let who = match viewer.reader.user() {
        Some(u) => format!("user {u}"),
        None => "whole tenant".to_string(),
    };
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { "Apiary" }
                    nav aria-label="Main" {
                        ul {
                            @for (nav, href, label) in Nav::ALL {
                                li {
                                    @if nav == current {
                                        a href=(href) aria-current="page" { (label) }
                                    } @else {
                                        a href=(href) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    div.who {
                        span title="What this sign-in may read" { (who) }
                        form method="post" action="/sign-out" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main #main tabindex="-1" {
                    (body)
                }
            }
        }
    };
    Html(doc.into_string()).into_response()
}

/// A page without navigation (sign-in, errors before sign-in).
pub fn bare(title: &str, body: Markup) -> Html<String> {
    let doc = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                main #main.bare { (body) }
            }
        }
    };
    Html(doc.into_string())
}

/// An API error as a page with the same status and message (a bad parameter reads exactly as the
/// JSON API words it). The cause of a 500 is logged by the error itself and never shown.
pub fn error_page(e: ApiError) -> Response {
    let message = e.to_string();
    let mut api = e.into_response();
    let status = api.status();
    let retry = api.headers_mut().remove(axum::http::header::RETRY_AFTER);
    let body = html! {
        h1 { (status.canonical_reason().unwrap_or("Error")) }
        p.problem role="alert" { (message) }
        p { a href="/" { "Back to the overview" } }
    };
    let mut page = (status, bare("Error", body)).into_response();
    if let Some(r) = retry {
        page.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, r);
    }
    page
}

/// An optional value, or a dash.
pub fn opt(v: &Option<String>) -> Markup {
    html! { @if let Some(v) = v { (v) } @else { span.none { "–" } } }
}

/// A status as a badge: the word is the information, the colour only repeats it.
pub fn badge(status: &str) -> Markup {
    html! { span class={ "badge s-" (status) } { (status.replace('_', " ")) } }
}
