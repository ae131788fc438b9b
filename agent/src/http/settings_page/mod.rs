//! # The desktop settings page: `GET /settings` on the agent's loopback address
//!
//! One server-rendered page for the person whose device this is, to decide whether to share telemetry:
//! sync on or off and the mode, where events go (the endpoint's host), what is shared (the policy in
//! force: kinds and the fields kept, its hash) and what never leaves the device, what is waiting here,
//! the last push and its problem in plain words, the budgets the server reported (advisory,
//! [`crate::quota`]), local usage today and this month ([`usage`]), the last events sent as they left
//! ([`sent`]), and the device's identity; the consent toggle, and in air-gapped mode the "export
//! bundle" button ([`export`]); the tenant's colony names choice and this device's colonies with their
//! keys ([`colonies`]).
//! A desktop shell embeds it in a webview; a browser on the same machine works alike.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | 303 to `/settings` |
//! | `GET /settings` | the page (`page`); 303 to `/settings/sign-in` without a sign-in |
//! | `GET /settings/sign-in`, `POST /settings/sign-in` | the form; `token=` the settings token ([`signin`]) |
//! | `POST /settings/sync` | the toggle: `enabled` (`true` or `false`), `endpoint`, `token_file`, `include_backlog`, `purge`; `colony_names_seen`, `share_colony_names` (see `colonies`) |
//! | `POST /settings/export` | air-gapped only: writes a bundle of every waiting event into `DIR/exports/` ([`export`]) |
//! | `POST /settings/sign-out` | ends the sign-in |
//! | `GET /settings/assets/settings.css` | the stylesheet (embedded) |
//!
//! ## The consent toggle
//! `POST /settings/sync` turns its form into the body of `PUT /v1/sync` and runs the same function
//! (`http::local::apply_sync`): the same air-gapped refusal, remembered target, target check and
//! consent record. A refusal shows the page again with the API's status and message.
//!
//! ## Security model
//! - **Only the settings token** (`DIR/settings.token`) signs in; the intake token (`DIR/agent.token`,
//!   which producers hold) is refused (403) like it is on `PUT /v1/sync`. The token is posted once in
//!   a form body, never in a URL, never logged, never written into a page.
//! - **The cookie holds no token**: a sign-in gets a random 256-bit session id, kept in this process's
//!   memory (at most [`signin::MAX_SESSIONS`], 12 hours each; a restart signs everyone out). Browsers
//!   share cookies between every port of a host, so another local web server would receive the cookie:
//!   it then holds a session id that only this page accepts, never the settings token. The cookie is
//!   `HttpOnly`, `SameSite=Strict`, `Path=/settings`, named after the port.
//! - **`Host` is checked** on every page route: only the bound address (and `localhost:PORT` when
//!   that is loopback) is answered, so a DNS-rebinding page of another site gets 403.
//! - **`Origin` is checked** on every POST: it must be `http://` + one of those authorities. Any web
//!   page can make the browser POST to localhost; such a request is refused (403) and changes nothing.
//!   A POST without `Origin` is refused too (browsers and webviews send it on form posts).
//! - **Headers**: a Content-Security-Policy without any script (`default-src 'none'`, this origin's
//!   stylesheet, forms post here only, `frame-ancestors 'none'`), `X-Frame-Options: DENY`, `nosniff`,
//!   `Referrer-Policy: same-origin` (with `no-referrer` a browser posts `Origin: null`), `Cache-Control: no-store`. There is no script at all: plain forms.
//! - **Escaping**: the templates are [`maud`], which HTML-escapes every spliced value (endpoint, token
//!   file path, push errors, ids).

mod budgets;
mod colonies;
mod export;
mod layout;
mod page;
mod sections;
mod sent;
pub mod signin;
mod usage;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use super::AppState;
pub(crate) use colonies::colony_names;
pub use signin::PageSessions;

/// The policy of every page answer: this origin's stylesheet, nothing else; no script at all.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
                       frame-ancestors 'none'; base-uri 'none'";

/// The stylesheet, embedded.
const CSS: &str = include_str!("settings.css");

/// The page's routes, behind the `Host` check and with the security headers.
pub fn router(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/settings") }))
        .route("/settings", get(page::show))
        .route("/settings/sync", post(page::toggle))
        .route("/settings/export", post(export::export))
        .route("/settings/sign-in", get(signin::form).post(signin::sign_in))
        .route("/settings/sign-out", post(signin::sign_out))
        .route("/settings/assets/settings.css", get(stylesheet))
        .layer(middleware::from_fn_with_state(state, own_host_only))
        .layer(middleware::from_fn(security_headers))
}

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CSS,
    )
        .into_response()
}

/// The `host:port` forms this agent is reached at: the bound address, and `localhost:PORT` when that
/// is a loopback one (an unspecified bind address stands for the loopback ones).
fn own_authorities(addr: std::net::SocketAddr) -> Vec<String> {
    let port = addr.port();
    let ip = addr.ip();
    let mut own = Vec::new();
    if ip.is_loopback() || ip.is_unspecified() {
        own.push(format!("localhost:{port}"));
    }
    if ip.is_unspecified() {
        own.push(format!("127.0.0.1:{port}"));
        own.push(format!("[::1]:{port}"));
    } else {
        own.push(addr.to_string());
    }
    own
}

fn header_str(headers: &HeaderMap, name: HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// True when the request's `Host` names this agent.
fn host_is_own(state: &AppState, headers: &HeaderMap) -> bool {
    header_str(headers, header::HOST)
        .is_some_and(|h| own_authorities(state.addr).iter().any(|o| o == h))
}

/// True when a form was posted from a page of this agent: `Origin` is `http://` + an own authority.
pub(super) fn origin_is_own(state: &AppState, headers: &HeaderMap) -> bool {
    header_str(headers, header::ORIGIN)
        .and_then(|o| o.strip_prefix("http://"))
        .is_some_and(|a| own_authorities(state.addr).iter().any(|o| o == a))
}

/// Refuses (403) a page request whose `Host` is not this agent's (DNS rebinding).
async fn own_host_only(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if host_is_own(&state, req.headers()) {
        return next.run(req).await;
    }
    let own = own_authorities(state.addr);
    layout::problem_page(
        StatusCode::FORBIDDEN,
        &format!(
            "This page answers only at http://{}/settings (the Host header names another site).",
            own.last().map_or("127.0.0.1", String::as_str)
        ),
    )
}

/// Adds the hardening headers (see the module notes) to every page answer.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    let mut set = |name: HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(header::CONTENT_SECURITY_POLICY, CSP);
    set(header::X_FRAME_OPTIONS, "DENY");
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(header::REFERRER_POLICY, "same-origin");
    if !response.headers().contains_key(header::CACHE_CONTROL) {
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use axum::extract::State;
    use axum::Form;
    use axum_extra::extract::cookie::CookieJar;

    use crate::config::Mode;

    /// The agent's port in these tests (it is bound to the loopback address).
    const PORT: u16 = 4319;

    /// An agent's state over a new outbox in `dir`, bound to the loopback address: the intake token
    /// is `intake-token`, the settings token `settings-token`.
    pub(super) fn state_in(dir: &std::path::Path, mode: Mode) -> AppState {
        let policy = apiary_schema::Policy::default_policy();
        let outbox = crate::outbox::Outbox::open(
            &dir.join("outbox.db"),
            crate::outbox::OutboxSettings::default(),
            crate::identity::IdentityDefaults::default(),
            &policy,
        )
        .unwrap();
        let intake = crate::config::IntakeSettings::default();
        AppState {
            outbox,
            token: Arc::new("intake-token".into()),
            settings_token: Arc::new("settings-token".into()),
            policy: Arc::new(policy),
            zone: apiary_schema::hive::Zone::Utc,
            body_budget: Arc::new(crate::http::budget::BodyBudget::new(
                intake.max_bytes_in_flight,
            )),
            intake,
            mode,
            started_at: std::time::Instant::now(),
            stats: Arc::default(),
            runtimes: crate::tail::runtime::RuntimeWatch::new(),
            streams: Arc::default(),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], PORT)),
            page_sessions: Arc::default(),
            exports: Arc::default(),
            identity: Arc::default(),
            hive_home: None,
        }
    }

    /// The headers of a request from the page itself (`Host` and `Origin` of this agent), with the
    /// browser's `Cookie` header if given.
    pub(super) fn from_the_page(cookie: Option<&HeaderValue>) -> HeaderMap {
        let mut h = HeaderMap::new();
        let own = format!("127.0.0.1:{PORT}");
        h.insert(header::HOST, HeaderValue::from_str(&own).unwrap());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_str(&format!("http://{own}")).unwrap(),
        );
        if let Some(c) = cookie {
            h.insert(header::COOKIE, c.clone());
        }
        h
    }

    /// The same request as if another site's page had made the browser send it.
    pub(super) fn from_another_site(cookie: Option<&HeaderValue>) -> HeaderMap {
        let mut h = from_the_page(cookie);
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        h
    }

    /// Signs in with the settings token: the `Cookie` header the browser then sends.
    pub(super) async fn signed_in_cookie(state: &AppState) -> HeaderValue {
        let form =
            serde_json::from_value(serde_json::json!({ "token": "settings-token" })).unwrap();
        let r = signin::sign_in(
            State(state.clone()),
            from_the_page(None),
            CookieJar::new(),
            Ok(Form(form)),
        )
        .await;
        let set = r.headers()[header::SET_COOKIE].to_str().unwrap();
        HeaderValue::from_str(set.split(';').next().unwrap()).unwrap()
    }

    /// Where a redirect sends the browser, if the answer is one.
    pub(super) fn location(r: &Response) -> Option<&str> {
        r.headers()
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap())
    }

    /// The answer's body as text.
    pub(super) async fn body_text(r: Response) -> String {
        let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn the_page_answers_to_the_bound_address_and_localhost_only() {
        let own = own_authorities("127.0.0.1:4319".parse().unwrap());
        assert_eq!(own, ["localhost:4319", "127.0.0.1:4319"]);
        let any = own_authorities("0.0.0.0:4319".parse().unwrap());
        assert!(any.contains(&"[::1]:4319".to_string()), "{any:?}");
        let lan = own_authorities("192.168.1.5:4319".parse().unwrap());
        assert_eq!(lan, ["192.168.1.5:4319"]);
    }
}
