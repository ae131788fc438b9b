//! Signing in and out of the dashboard, and the [`Viewer`] every page takes.
//!
//! - `GET /sign-in`: the form (one password field; the page never holds a token).
//! - `POST /sign-in` (form `token=…`): a tenant token with the `read` scope (`admin` implies it) sets the
//!   [`COOKIE`] and answers 303 to `/`; an unknown or revoked token answers the form again with 401, a
//!   token without `read` (an ingest token) 403, an operator token 403. The failed-authentication
//!   throttle of the API applies (429 after a burst of wrong tokens from one address).
//! - `POST /sign-out`: clears the cookie, 303 to `/sign-in`.
//!
//! Both POSTs pass [`same_origin`] first (CSRF: see the module notes of [`crate::dashboard`]).
//! A page request without a valid cookie answers 303 to `/sign-in` (clearing a stale cookie).

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRef, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use maud::html;

use super::layout::{self, Viewer};
use crate::access::TenantRead;
use crate::auth::{peer_ip, AuthState, Caller, Scope, TENANT_TOKEN_PREFIX};
use crate::error::ApiError;

/// The cookie that holds the signed-in token.
pub const COOKIE: &str = "apiary_dash";

/// How long a sign-in lasts, in seconds (12 hours).
const MAX_AGE_SECS: i64 = 12 * 3600;

/// Longest token accepted (tokens are 68 characters).
const MAX_TOKEN_LEN: usize = 200;

/// A page request's [`Viewer`]: the signed-in cookie's token, checked like the API's.
impl<S> FromRequestParts<S> for Viewer
where
    AuthState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let jar = CookieJar::from_headers(&parts.headers);
        let Some(token) = cookie_token(&jar) else {
            return Err(Redirect::to("/sign-in").into_response());
        };
        let auth = AuthState::from_ref(state);
        match auth.authenticate(peer_ip(parts), &token).await {
            Ok(Caller::Tenant(p)) if p.has(Scope::Read) => Ok(Viewer {
                reader: TenantRead::of(&p).map_err(layout::error_page)?,
                principal: p,
            }),
            Err(
                e @ (ApiError::RateLimited(_) | ApiError::Unavailable(_) | ApiError::Internal(_)),
            ) => Err(layout::error_page(e)),
            // Unknown, revoked, operator, or lacking `read`: sign in again.
            _ => Err((
                jar.add(clear_cookie(is_https(&parts.headers))),
                Redirect::to("/sign-in"),
            )
                .into_response()),
        }
    }
}

/// The token in the request's [`COOKIE`], if any.
fn cookie_token(jar: &CookieJar) -> Option<String> {
    jar.get(COOKIE)
        .map(|c| c.value().to_string())
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_LEN)
}

/// Whether the browser reached us over https: its `Origin` says so (POSTs), or a proxy's
/// `X-Forwarded-Proto`.
fn is_https(headers: &HeaderMap) -> bool {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    h("origin").is_some_and(|o| o.starts_with("https://"))
        || h("x-forwarded-proto").is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// The sign-in cookie holding `token`: `HttpOnly`, `SameSite=Strict`, `Path=/`, [`MAX_AGE_SECS`], and
/// `Secure` when the browser came over https.
fn set_cookie(token: String, https: bool) -> Cookie<'static> {
    session_cookie(token, MAX_AGE_SECS, https)
}

/// The same cookie emptied, with `Max-Age=0`: the browser drops it.
fn clear_cookie(https: bool) -> Cookie<'static> {
    session_cookie(String::new(), 0, https)
}

fn session_cookie(value: String, max_age_secs: i64, https: bool) -> Cookie<'static> {
    let mut cookie = Cookie::build((COOKIE, value))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(cookie::time::Duration::seconds(max_age_secs))
        .build();
    if https {
        cookie.set_secure(true);
    }
    cookie
}

/// True when a state-changing request comes from a page of this host: its `Origin`'s host and port
/// equal the `Host` header, or (no `Origin`) the browser says `Sec-Fetch-Site: same-origin`. Anything
/// else — another site's form, a request without either header — is refused.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let h = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    match h(header::ORIGIN) {
        Some(origin) => {
            let authority = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            authority.is_some_and(|a| h(header::HOST).is_some_and(|host| a == host))
        }
        None => headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes() == b"same-origin"),
    }
}

pub(super) fn cross_site() -> Response {
    layout::error_page(ApiError::Forbidden(
        "this form must be sent from a page of this dashboard (Origin check)".into(),
    ))
}

/// `GET /sign-in`.
pub async fn form() -> Response {
    sign_in_page(StatusCode::OK, None)
}

fn sign_in_page(status: StatusCode, problem: Option<&str>) -> Response {
    let body = html! {
        section.signin aria-labelledby="signin-title" {
            h1 #signin-title { "Sign in to Apiary" }
            p { "Paste a tenant token with the " code { "read" } " scope (from "
                code { "apiary-ingest token create --scope read" } "). It is kept in an HttpOnly cookie "
                "for 12 hours and never shown again." }
            @if let Some(p) = problem {
                p.problem role="alert" { (p) }
            }
            form method="post" action="/sign-in" {
                label for="token" { "Read token" }
                input #token type="password" name="token" autocomplete="off" required
                    spellcheck="false" autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    (status, layout::bare("Sign in", body)).into_response()
}

/// `POST /sign-in`.
pub async fn sign_in(
    State(auth): State<AuthState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    jar: CookieJar,
    body: Bytes,
) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    let token = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    if token.is_empty() {
        return sign_in_page(StatusCode::BAD_REQUEST, Some("Enter a token."));
    }
    if token.len() > MAX_TOKEN_LEN || !token.starts_with(TENANT_TOKEN_PREFIX) {
        return sign_in_page(
            StatusCode::UNAUTHORIZED,
            Some("That is not a tenant token (they start with apy_)."),
        );
    }
    let ip = peer.map(|Extension(ConnectInfo(a))| a.ip());
    match auth.authenticate(ip, &token).await {
        Ok(Caller::Tenant(p)) if p.has(Scope::Read) => (
            jar.add(set_cookie(token, is_https(&headers))),
            Redirect::to("/"),
        )
            .into_response(),
        Ok(Caller::Tenant(_)) => sign_in_page(
            StatusCode::FORBIDDEN,
            Some("This token lacks the read scope (an ingest token cannot read)."),
        ),
        Ok(Caller::Operator(_)) => {
            sign_in_page(StatusCode::FORBIDDEN, Some(crate::auth::OPERATOR_ONLY))
        }
        Err(ApiError::Unauthenticated) => sign_in_page(
            StatusCode::UNAUTHORIZED,
            Some("That token is unknown or revoked."),
        ),
        Err(e) => layout::error_page(e),
    }
}

/// `POST /sign-out`.
pub async fn sign_out(headers: HeaderMap, jar: CookieJar) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    (
        jar.add(clear_cookie(is_https(&headers))),
        Redirect::to("/sign-in"),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_a_page_of_this_host_may_post() {
        let ok = headers(&[
            ("host", "dash.example:8080"),
            ("origin", "https://dash.example:8080"),
        ]);
        assert!(same_origin(&ok));
        for bad in [
            headers(&[
                ("host", "dash.example:8080"),
                ("origin", "https://evil.example"),
            ]),
            headers(&[("host", "dash.example:8080"), ("origin", "null")]),
            headers(&[
                ("host", "dash.example:8080"),
                ("origin", "https://dash.example:8080.evil"),
            ]),
            headers(&[("host", "dash.example:8080")]),
            headers(&[("host", "dash.example"), ("sec-fetch-site", "cross-site")]),
        ] {
            assert!(!same_origin(&bad), "{bad:?}");
        }
        assert!(same_origin(&headers(&[
            ("host", "h"),
            ("sec-fetch-site", "same-origin")
        ])));
    }

    #[test]
    fn the_cookie_is_read_among_others_and_is_strict_and_http_only() {
        let h = headers(&[("cookie", "a=1; apiary_dash=apy_abc ; b=2")]);
        let jar = |h: &HeaderMap| CookieJar::from_headers(h);
        assert_eq!(cookie_token(&jar(&h)).as_deref(), Some("apy_abc"));
        let empty = headers(&[("cookie", "apiary_dash=")]);
        assert_eq!(cookie_token(&jar(&empty)), None);
        let c = set_cookie("apy_x".into(), true).to_string();
        for part in [
            "apiary_dash=apy_x;",
            "HttpOnly",
            "SameSite=Strict",
            "Secure",
            "Path=/",
            "Max-Age=43200",
        ] {
            assert!(c.contains(part), "{c}");
        }
        assert!(!set_cookie("apy_x".into(), false)
            .to_string()
            .contains("Secure"));
        let cleared = clear_cookie(false).to_string();
        assert!(
            cleared.starts_with("apiary_dash=;") && cleared.contains("Max-Age=0"),
            "{cleared}"
        );
        assert!(!cleared.contains("Expires"), "{cleared}");
    }
}
