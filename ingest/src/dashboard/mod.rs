//! # The dashboard: pages for people, served by the ingest itself
//!
//! Server-rendered HTML at `/` (overview), `/sessions`, `/sessions/{id}`, `/devices`, `/colonies`,
//! `/budgets`, `/alerts`, `/exports` (admin: usage exports, with forms to add and delete) and `/prices`,
//! with `/sign-in` and `/sign-out`; and the CSV of what the overview, the sessions list and the
//! colonies page show, as the API answers it (`/usage.csv`, `/sessions.csv`, `/colonies.csv`,
//! [`downloads`]). No separate server, no build
//! step, nothing fetched from elsewhere: the templates are [`maud`] macros compiled into the binary
//! (every spliced value is HTML-escaped), the one stylesheet is embedded with `include_str!`, the charts
//! are SVG drawn here ([`chart`]), the budgets' progress bars native `<meter>`s. Filters and pickers are
//! plain GET forms, so every view has a URL and works with the keyboard, a screen reader and a phone
//! alike, without script. One small script file ([`live`], `assets/live.js`, embedded) keeps the
//! sessions list live: an `EventSource` on `/live` (the API's `/v1/stream`, authenticated by the cookie)
//! updates a row's status badge in place as transitions arrive.
//!
//! ## One source of numbers
//! A page calls the JSON API's own handlers ([`crate::routes`]: `get_usage`, `list_sessions`,
//! `get_session`, `get_session_tree`, `get_session_history`, `get_session_usage`, `get_devices`,
//! `list_colonies`, and `get_stream` for the live list) with the reader's scope and the parsed query string, and renders their typed answer;
//! the budgets, alerts and prices pages call `list_budgets`, `list_alerts` / `list_rules` /
//! `list_destinations` and `get_prices` with the token's own principal, so their visibility rules and
//! 403s are the API's too.
//! So every number on a page is the API's answer for the same query, under the same tenant / user scope
//! as the token's API access, with the same 400s for bad parameters.
//!
//! ## Signing in ([`signin`])
//! A `read` (or `admin`) tenant token is posted once in a form; the answer sets it as the `apiary_dash`
//! cookie: `HttpOnly` (no script can read it), `SameSite=Strict` (no other site's page sends it),
//! `Secure` when the browser reached us over https, `Path=/`, 12 hours. Each page request authenticates
//! the cookie exactly like a bearer header ([`crate::auth::AuthState::authenticate`]: throttle, cache,
//! rate limit, revocation within `token_cache_secs`). The token is never put in a URL, a page or a log
//! line (the request log holds method and path only). The `/v1` API ignores cookies, so the cookie can
//! never authorize an API request made by another site.
//!
//! ## Hardening ([`security_headers`])
//! Every dashboard answer carries a Content-Security-Policy without `unsafe-inline` or `unsafe-eval`
//! (`default-src 'none'`; scripts, styles, images and connections from this origin only, forms post here
//! only, `frame-ancestors 'none'`), `X-Frame-Options: DENY`, `X-Content-Type-Options: nosniff`,
//! `Referrer-Policy: same-origin` and `Cache-Control: no-store`. The POSTs (sign-in, sign-out) also
//! require an `Origin` (or `Sec-Fetch-Site: same-origin`) naming this host: login CSRF and forced
//! sign-out from another site are refused (403) on top of `SameSite=Strict`; so are the exports page's
//! forms (add, delete).
//!
//! Pages, the stylesheet and the script are sent gzip-compressed to browsers that accept it (the
//! overview's default month for a tenant of 10M events, `--bench rollups`: 50 KiB of HTML, 8 KiB gzip).

mod alerts;
mod budgets;
mod chart;
mod downloads;
mod exports;
mod fleet;
mod format;
mod layout;
mod live;
mod overview;
mod prices;
mod session;
mod sessions;
pub mod signin;

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::compression::CompressionLayer;

use crate::state::AppState;

pub use layout::Viewer;
pub use signin::COOKIE;

/// The policy of every dashboard answer: nothing but this origin's stylesheet, images and one script
/// file (no inline script, no `eval`), and connections to this origin only.
pub const CSP: &str =
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; \
    img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The stylesheet, embedded.
const APP_CSS: &str = include_str!("assets/app.css");
/// The live list's script (plain JavaScript, no library), embedded.
const LIVE_JS: &str = include_str!("assets/live.js");

/// The dashboard's routes, with their security headers.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview::page))
        .route("/sessions", get(sessions::list_page))
        .route("/sessions/{id}", get(session::page))
        .route("/devices", get(fleet::devices_page))
        .route("/colonies", get(fleet::colonies_page))
        .route("/budgets", get(budgets::page))
        .route("/alerts", get(alerts::page))
        .route("/exports", get(exports::page).post(exports::create))
        .route("/exports/{id}/delete", axum::routing::post(exports::delete))
        .route("/usage.csv", get(downloads::usage))
        .route("/sessions.csv", get(downloads::sessions))
        .route("/colonies.csv", get(downloads::colonies))
        .route("/prices", get(prices::page))
        .route("/sign-in", get(signin::form).post(signin::sign_in))
        .route("/sign-out", axum::routing::post(signin::sign_out))
        .route("/live", get(live::stream))
        .route("/assets/app.css", get(stylesheet))
        .route("/assets/live.js", get(script))
        .layer(middleware::from_fn(security_headers))
        // gzip when the browser asks for it (tower-http's default predicate leaves the live list's
        // event stream and tiny answers alone). No page holds a secret to guess at (the token is never
        // in a body), so compressing pages that echo query parameters gives BREACH nothing to find.
        .layer(CompressionLayer::new().gzip(true))
}

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        APP_CSS,
    )
        .into_response()
}

async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        LIVE_JS,
    )
        .into_response()
}

/// Adds the hardening headers (see the module notes) to every dashboard answer.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, name: HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(h, header::CONTENT_SECURITY_POLICY, CSP);
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "same-origin");
    if !h.contains_key(header::CACHE_CONTROL) {
        set(h, header::CACHE_CONTROL, "no-store");
    }
    response
}
