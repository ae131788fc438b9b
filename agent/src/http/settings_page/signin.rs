//! Signing in to the settings page with the settings token, and the sessions that sign-in opens.
//!
//! - `GET /settings/sign-in`: the form (one password field).
//! - `POST /settings/sign-in` (`token=…`, `Origin` checked): the settings token opens a session (a random
//!   id in the cookie) and answers 303 to `/settings`; the intake token answers 403, anything else 401,
//!   each with the form again and the reason.
//! - `POST /settings/sign-out` (`Origin` checked): forgets the session and clears the cookie.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;

use super::layout;
use crate::http::{token_matches, AppState};

/// The most sign-ins kept at once; a new one past it ends the oldest.
pub const MAX_SESSIONS: usize = 16;

/// How long a sign-in lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The settings page's signed-in browsers: random ids, each with its expiry, in memory only.
#[derive(Debug, Default)]
pub struct PageSessions {
    /// `(id, expires)`, oldest first.
    live: Mutex<Vec<(String, Instant)>>,
}

impl PageSessions {
    /// Opens a session; its id (64 hex digits) goes in the cookie.
    fn open(&self) -> String {
        let id = hex::encode(rand::random::<[u8; 32]>());
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(_, expires)| *expires > now);
        if live.len() >= MAX_SESSIONS {
            live.remove(0);
        }
        live.push((id.clone(), now + SESSION_TTL));
        id
    }

    /// True when `id` names an open session (compared in constant time).
    fn is_open(&self, id: &str) -> bool {
        let now = Instant::now();
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.iter()
            .any(|(known, expires)| *expires > now && token_matches(id.as_bytes(), known))
    }

    fn close(&self, id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(known, _)| !token_matches(id.as_bytes(), known));
    }
}

/// The cookie's name: per port, since browsers share a host's cookies between its ports (two agents
/// on one machine keep their sign-ins apart).
fn cookie_name(state: &AppState) -> String {
    format!("apiary_settings_{}", state.addr.port())
}

/// The session id in the request's cookie, if any.
fn cookie_session(state: &AppState, headers: &HeaderMap) -> Option<String> {
    let name = cookie_name(state);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| v.len() == 64)
}

/// True when the request carries the cookie of an open session.
pub(super) fn signed_in(state: &AppState, headers: &HeaderMap) -> bool {
    cookie_session(state, headers).is_some_and(|id| state.page_sessions.is_open(&id))
}

fn set_cookie(state: &AppState, id: &str) -> String {
    format!(
        "{}={id}; Path=/settings; HttpOnly; SameSite=Strict; Max-Age={}",
        cookie_name(state),
        SESSION_TTL.as_secs()
    )
}

fn clear_cookie(state: &AppState) -> String {
    format!(
        "{}=; Path=/settings; HttpOnly; SameSite=Strict; Max-Age=0",
        cookie_name(state)
    )
}

/// `GET /settings/sign-in`.
pub async fn form() -> Response {
    sign_in_page(StatusCode::OK, None)
}

fn sign_in_page(status: StatusCode, problem: Option<&str>) -> Response {
    let body = html! {
        section.signin aria-labelledby="signin-title" {
            h1 #signin-title { "Apiary settings on this device" }
            p { "Paste the settings token: the contents of the file " code { "settings.token" }
                " in the agent's data directory (the desktop app passes it for you). It stays in this "
                "agent's memory; the browser keeps only a session cookie, for 12 hours." }
            @if let Some(p) = problem {
                p.problem role="alert" { (p) }
            }
            form method="post" action="/settings/sign-in" {
                label for="token" { "Settings token" }
                input #token type="password" name="token" autocomplete="off" required
                    spellcheck="false" autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    (status, layout::bare("Sign in", body)).into_response()
}

/// The sign-in form's body.
#[derive(Debug, Deserialize)]
pub struct SignIn {
    #[serde(default)]
    token: String,
}

/// `POST /settings/sign-in`.
pub async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    if !super::origin_is_own(&state, &headers) {
        return layout::cross_site();
    }
    let token = form.map(|Form(f)| f.token).unwrap_or_default();
    let token = token.trim().as_bytes();
    if token.is_empty() {
        return sign_in_page(StatusCode::BAD_REQUEST, Some("Enter the settings token."));
    }
    if token_matches(token, &state.settings_token) {
        let id = state.page_sessions.open();
        tracing::info!("settings page: signed in");
        return (
            [(header::SET_COOKIE, set_cookie(&state, &id))],
            Redirect::to("/settings"),
        )
            .into_response();
    }
    if token_matches(token, &state.token) {
        return sign_in_page(
            StatusCode::FORBIDDEN,
            Some(
                "That is the intake token (agent.token), which programs use to send events; it \
                 cannot change settings. Use the settings token (settings.token).",
            ),
        );
    }
    sign_in_page(
        StatusCode::UNAUTHORIZED,
        Some("That is not this agent's settings token."),
    )
}

/// `POST /settings/sign-out`.
pub async fn sign_out(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if !super::origin_is_own(&state, &headers) {
        return layout::cross_site();
    }
    if let Some(id) = cookie_session(&state, &headers) {
        state.page_sessions.close(&id);
    }
    (
        [(header::SET_COOKIE, clear_cookie(&state))],
        Redirect::to("/settings/sign-in"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_bounded_and_close() {
        let s = PageSessions::default();
        let first = s.open();
        assert!(s.is_open(&first));
        assert!(!s.is_open(&"0".repeat(64)));
        let more: Vec<String> = (0..MAX_SESSIONS).map(|_| s.open()).collect();
        assert!(!s.is_open(&first), "the oldest ends past the bound");
        assert!(more.iter().all(|id| s.is_open(id)));
        s.close(&more[0]);
        assert!(!s.is_open(&more[0]));
        s.live.lock().unwrap()[0].1 = Instant::now();
        assert!(!s.is_open(&more[1]), "expired");
    }
}
