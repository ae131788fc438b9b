//! The page shell: document head, skip link, header with sign-out; the bare page and refusals, and what
//! a refused action shows on the page ([`Problem`]).

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};

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
pub(super) fn signed_in_page(body: Markup) -> Html<String> {
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

/// What a refused toggle shows: the API's status and message, and what the user typed.
#[derive(Debug, Default)]
pub(super) struct Problem {
    pub(super) status: Option<StatusCode>,
    pub(super) message: String,
    /// The server address typed, shown again in the form.
    pub(super) endpoint: Option<String>,
    /// The token file typed, shown again in the form.
    pub(super) token_file: Option<String>,
}

impl Problem {
    /// A refusal with the API's status and message.
    pub(super) fn new(status: StatusCode, message: String) -> Problem {
        Problem {
            status: Some(status),
            message,
            ..Problem::default()
        }
    }
}
