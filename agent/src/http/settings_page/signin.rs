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
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
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
fn cookie_session(state: &AppState, jar: &CookieJar) -> Option<String> {
    jar.get(&cookie_name(state))
        .map(|c| c.value().to_string())
        .filter(|v| v.len() == 64)
}

/// True when the request carries the cookie of an open session.
pub(super) fn signed_in(state: &AppState, headers: &HeaderMap) -> bool {
    cookie_session(state, &CookieJar::from_headers(headers))
        .is_some_and(|id| state.page_sessions.is_open(&id))
}

/// The session cookie holding `id`: `HttpOnly`, `SameSite=Strict`, `Path=/settings`, for the
/// session's lifetime. Never `Secure`: the page is served over plain HTTP on loopback.
fn set_cookie(state: &AppState, id: String) -> Cookie<'static> {
    session_cookie(state, id, SESSION_TTL.as_secs())
}

/// The same cookie emptied, with `Max-Age=0`: the browser drops it.
fn clear_cookie(state: &AppState) -> Cookie<'static> {
    session_cookie(state, String::new(), 0)
}

fn session_cookie(state: &AppState, value: String, max_age_secs: u64) -> Cookie<'static> {
    let max_age = i64::try_from(max_age_secs).unwrap_or(i64::MAX);
    Cookie::build((cookie_name(state), value))
        .path("/settings")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(cookie::time::Duration::seconds(max_age))
        .build()
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
    jar: CookieJar,
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
        return (jar.add(set_cookie(&state, id)), Redirect::to("/settings")).into_response();
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
pub async fn sign_out(
    State(state): State<AppState>,
    headers: HeaderMap,
    jar: CookieJar,
) -> Response {
    if !super::origin_is_own(&state, &headers) {
        return layout::cross_site();
    }
    if let Some(id) = cookie_session(&state, &jar) {
        state.page_sessions.close(&id);
    }
    let cleared = clear_cookie(&state);
    (jar.add(cleared), Redirect::to("/settings/sign-in")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::http::{header, HeaderValue};

    use super::super::tests::{body_text, from_another_site, from_the_page, location, state_in};
    use crate::config::Mode;

    fn posted(token: &str) -> Result<Form<SignIn>, FormRejection> {
        Ok(Form(SignIn {
            token: token.into(),
        }))
    }

    #[tokio::test]
    async fn the_settings_token_opens_a_twelve_hour_session_in_a_cookie_named_after_the_port() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        let r = sign_in(
            State(state.clone()),
            from_the_page(None),
            CookieJar::new(),
            posted(" settings-token\n"),
        )
        .await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings"))
        );
        let set = r.headers()[header::SET_COOKIE].to_str().unwrap();
        let (pair, attributes) = set.split_once(';').unwrap();
        let (name, id) = pair.split_once('=').unwrap();
        assert_eq!(name, "apiary_settings_4319", "{set}");
        assert!(
            id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "a random 256-bit id: {set}"
        );
        for wanted in [
            "HttpOnly",
            "SameSite=Strict",
            "Path=/settings",
            "Max-Age=43200",
        ] {
            assert!(attributes.contains(wanted), "{wanted} in {set}");
        }
        let cookie = HeaderValue::from_str(pair).unwrap();
        assert!(signed_in(&state, &from_the_page(Some(&cookie))));
        assert!(!signed_in(&state, &from_the_page(None)), "no cookie");
        let unknown = HeaderValue::from_str(&format!("{name}={}", "0".repeat(64))).unwrap();
        assert!(
            !signed_in(&state, &from_the_page(Some(&unknown))),
            "an id this agent never opened"
        );
    }

    #[tokio::test]
    async fn only_the_settings_token_posted_from_the_page_itself_signs_in() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        let refused = [
            (
                "intake-token",
                StatusCode::FORBIDDEN,
                "That is the intake token",
            ),
            (
                "not-it",
                StatusCode::UNAUTHORIZED,
                "not this agent's settings token",
            ),
            ("  ", StatusCode::BAD_REQUEST, "Enter the settings token."),
        ];
        for (token, status, reason) in refused {
            let r = sign_in(
                State(state.clone()),
                from_the_page(None),
                CookieJar::new(),
                posted(token),
            )
            .await;
            assert_eq!(r.status(), status, "{token:?}");
            assert!(r.headers().get(header::SET_COOKIE).is_none(), "{token:?}");
            let page = body_text(r).await;
            assert!(
                page.contains(reason) && page.contains(r#"type="password""#),
                "the form again with the reason: {page}"
            );
        }
        let r = sign_in(
            State(state.clone()),
            from_another_site(None),
            CookieJar::new(),
            posted("settings-token"),
        )
        .await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(r.headers().get(header::SET_COOKIE).is_none());
        assert!(
            state.page_sessions.live.lock().unwrap().is_empty(),
            "no session was opened"
        );
    }

    #[tokio::test]
    async fn the_sign_in_form_asks_for_the_settings_token_in_a_password_field() {
        let r = form().await;
        assert_eq!(r.status(), StatusCode::OK);
        let page = body_text(r).await;
        assert!(
            page.contains(r#"action="/settings/sign-in""#)
                && page.contains(r#"type="password" name="token""#),
            "{page}"
        );
    }

    #[tokio::test]
    async fn signing_out_ends_the_session_and_clears_the_cookie_but_another_site_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let state = state_in(dir.path(), Mode::Online);
        let cookie = super::super::tests::signed_in_cookie(&state).await;
        let elsewhere = from_another_site(Some(&cookie));
        let r = sign_out(
            State(state.clone()),
            elsewhere.clone(),
            CookieJar::from_headers(&elsewhere),
        )
        .await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let own = from_the_page(Some(&cookie));
        assert!(signed_in(&state, &own), "still signed in");
        let r = sign_out(
            State(state.clone()),
            own.clone(),
            CookieJar::from_headers(&own),
        )
        .await;
        assert_eq!(
            (r.status(), location(&r)),
            (StatusCode::SEE_OTHER, Some("/settings/sign-in"))
        );
        let set = r.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(
            set.starts_with("apiary_settings_4319=;") && set.contains("Max-Age=0"),
            "the cookie is cleared: {set}"
        );
        assert!(!signed_in(&state, &own), "the session ended");
    }

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
