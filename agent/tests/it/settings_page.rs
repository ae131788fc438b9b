//! The desktop settings page (`/settings`), in process on port 0: sign-in with the settings token only,
//! the toggle through `PUT /v1/sync`'s code (seen in `GET /v1/status`), the `Origin` and `Host` checks,
//! escaping, the security headers and what the page says is never sent.

use crate::http_api::App;
use crate::support;

use apiary_agent::config::Mode;
use apiary_agent::outbox::SyncChange;
use reqwest::header::{CONTENT_SECURITY_POLICY, COOKIE, HOST, LOCATION, ORIGIN, SET_COOKIE};
use reqwest::{Response, StatusCode};

/// An agent and a client that does not follow redirects (each answer is looked at).
pub(crate) struct Page {
    pub(crate) app: App,
    pub(crate) http: reqwest::Client,
    /// `http://127.0.0.1:PORT`: what the browser sends as `Origin` from the agent's own page.
    pub(crate) origin: String,
}

impl Page {
    pub(crate) async fn spawn(mode: Mode) -> Page {
        Page::of(App::spawn(|s| s.mode = mode).await)
    }

    /// The page of a running agent.
    pub(crate) fn of(app: App) -> Page {
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let origin = app.base.clone();
        Page { app, http, origin }
    }

    /// POSTs a form from `origin` (None: no `Origin` header) with `cookie`.
    pub(crate) async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        cookie: Option<&str>,
        origin: Option<&str>,
    ) -> Response {
        let mut req = self
            .http
            .post(format!("{}{path}", self.app.base))
            .form(form);
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        if let Some(o) = origin {
            req = req.header(ORIGIN, o);
        }
        req.send().await.unwrap()
    }

    /// Signs in with `token` from the agent's own page.
    pub(crate) async fn sign_in(&self, token: &str) -> Response {
        self.post(
            "/settings/sign-in",
            &[("token", token)],
            None,
            Some(&self.origin),
        )
        .await
    }

    /// Signs in with the settings token: the cookie (`name=value`).
    pub(crate) async fn cookie(&self) -> String {
        let r = self.sign_in(&self.app.settings_token).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
        set.split(';').next().unwrap().to_string()
    }

    pub(crate) async fn get(&self, path: &str, cookie: Option<&str>) -> Response {
        let mut req = self.http.get(format!("{}{path}", self.app.base));
        if let Some(c) = cookie {
            req = req.header(COOKIE, c);
        }
        req.send().await.unwrap()
    }

    /// The page's HTML (must answer 200).
    pub(crate) async fn html(&self, cookie: &str) -> String {
        let r = self.get("/settings", Some(cookie)).await;
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    }

    pub(crate) async fn sync_enabled(&self) -> bool {
        let (s, v) = self.app.get("/v1/status").await;
        assert_eq!(s, StatusCode::OK);
        v["sync"]["enabled"].as_bool().unwrap()
    }
}

fn location(r: &Response) -> &str {
    r.headers()[LOCATION].to_str().unwrap()
}

#[tokio::test]
async fn without_a_sign_in_the_page_redirects_to_the_sign_in_form_with_strict_headers() {
    let p = Page::spawn(Mode::Online).await;
    let r = p.get("/settings", None).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/settings/sign-in");
    let csp = r.headers()[CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let r = p.get("/", None).await;
    assert_eq!(location(&r), "/settings");
    let form = p.get("/settings/sign-in", None).await;
    assert_eq!(form.status(), StatusCode::OK);
    let html = form.text().await.unwrap();
    assert!(html.contains(r#"<label for="token">"#), "{html}");
    assert!(!html.contains("<script"), "{html}");
    // A cookie that names no session is no sign-in.
    let name = format!("apiary_settings_{}", p.app.base.rsplit(':').next().unwrap());
    let forged = format!("{name}={}", "a".repeat(64));
    let r = p.get("/settings", Some(&forged)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    p.app.stop().await;
}

#[tokio::test]
async fn only_the_settings_token_signs_in_and_it_never_shows() {
    let p = Page::spawn(Mode::Online).await;
    let intake = p.sign_in(&p.app.token).await;
    assert_eq!(intake.status(), StatusCode::FORBIDDEN);
    assert!(intake.headers().get(SET_COOKIE).is_none());
    assert!(intake.text().await.unwrap().contains("intake token"));
    let wrong = p.sign_in(&"0".repeat(64)).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(wrong.headers().get(SET_COOKIE).is_none());
    let empty = p.sign_in("").await;
    assert_eq!(empty.status(), StatusCode::BAD_REQUEST);

    let r = p.sign_in(&p.app.settings_token).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/settings");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/settings"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(
        !set.contains(p.app.settings_token.trim()),
        "the cookie holds the token: {set}"
    );
    let cookie = set.split(';').next().unwrap();
    let html = p.html(cookie).await;
    assert!(!html.contains(p.app.settings_token.trim()));
    assert!(!html.contains(p.app.token.trim()));
    assert!(html.contains(r#"data-field="sync">Off<"#), "{html}");
    assert!(html.contains(r#"data-field="mode">Online<"#), "{html}");
    assert!(
        html.contains("laptop") || html.contains("dev-"),
        "device id shown"
    );
    assert!(html.contains(r#"data-field="user_id">alice<"#), "{html}");

    // Signing out ends the session: the old cookie no longer opens the page.
    let out = p
        .post("/settings/sign-out", &[], Some(cookie), Some(&p.origin))
        .await;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        p.get("/settings", Some(cookie)).await.status(),
        StatusCode::SEE_OTHER
    );
    p.app.stop().await;
}

#[tokio::test]
async fn the_page_states_what_is_shared_and_what_is_never_sent() {
    let p = Page::spawn(Mode::Online).await;
    p.app
        .post("/v1/events", support::hive_turn("session_p", 1))
        .await;
    let cookie = p.cookie().await;
    let html = p.html(&cookie).await;
    assert!(html.contains("What never leaves this device"), "{html}");
    assert!(
        html.contains(
            "Prompts, tool arguments, results, file paths and colony names are never sent"
        ),
        "{html}"
    );
    // The policy in force: its kinds, their fields, its hash.
    let policy = apiary_schema::Policy::default_policy();
    assert!(html.contains(policy.hash()), "policy hash shown");
    assert!(html.contains(r#"data-kind="llm.turn""#));
    assert!(html.contains("input_tokens"));
    // What waits: the one event, recorded while sharing is off.
    assert!(html.contains(r#"data-field="pending_events">1<"#), "{html}");
    assert!(html.contains(r#"data-field="held_events">1<"#), "{html}");
    assert!(html.contains("Also send the 1 event recorded while sharing was off"));
    p.app.stop().await;
}

#[tokio::test]
async fn the_toggle_turns_sync_on_and_off_as_v1_status_reports() {
    let p = Page::spawn(Mode::Online).await;
    p.app
        .post("/v1/events", support::hive_turn("session_t", 1))
        .await;
    let cookie = p.cookie().await;
    let on = [
        ("enabled", "true"),
        ("endpoint", "https://ingest.example"),
        ("token_file", p.app.token_file.as_str()),
        ("include_backlog", "on"),
    ];
    // The first enable needs a target: the API's 400, shown on the page; nothing changes.
    let r = p
        .post(
            "/settings/sync",
            &[("enabled", "true")],
            Some(&cookie),
            Some(&p.origin),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("endpoint"));
    assert!(!p.sync_enabled().await);

    let r = p
        .post("/settings/sync", &on, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/settings?done=on&released=1");
    let (_, st) = p.app.get("/v1/status").await;
    assert_eq!(st["sync"]["enabled"], true);
    assert_eq!(st["sync"]["endpoint"], "https://ingest.example");
    assert_eq!(st["held_events"], 0, "the backlog was released");
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-field="sync">On<"#), "{html}");
    assert!(html.contains(r#"data-field="endpoint_host">ingest.example<"#));
    assert!(html.contains("Turn sharing off"));

    let off = [("enabled", "false"), ("purge", "on")];
    let r = p
        .post("/settings/sync", &off, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, st) = p.app.get("/v1/status").await;
    assert_eq!(st["sync"]["enabled"], false);
    assert_eq!(st["counters"]["purged"], 1, "{st}");
    assert_eq!(st["pending_events"], 0);
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-field="sync">Off<"#));

    // A bad value is a 400 that changes nothing.
    let r = p
        .post(
            "/settings/sync",
            &[("enabled", "maybe")],
            Some(&cookie),
            Some(&p.origin),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(!p.sync_enabled().await);
    p.app.stop().await;
}

#[tokio::test]
async fn a_cross_origin_post_is_refused_and_changes_nothing() {
    let p = Page::spawn(Mode::Online).await;
    let cookie = p.cookie().await;
    let on = [
        ("enabled", "true"),
        ("endpoint", "https://ingest.example"),
        ("token_file", p.app.token_file.as_str()),
    ];
    let port = p.app.base.rsplit(':').next().unwrap().to_string();
    let evil_same_port = format!("http://evil.example:{port}");
    for origin in [
        Some("http://evil.example"),
        Some("null"),
        Some(evil_same_port.as_str()),
        Some("https://127.0.0.1"),
        None,
    ] {
        let r = p.post("/settings/sync", &on, Some(&cookie), origin).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "Origin {origin:?}");
        assert!(!p.sync_enabled().await, "Origin {origin:?} changed consent");
        // Nor may another site sign a browser in (login CSRF).
        let r = p
            .post(
                "/settings/sign-in",
                &[("token", &p.app.settings_token)],
                None,
                origin,
            )
            .await;
        assert_eq!(
            r.status(),
            StatusCode::FORBIDDEN,
            "sign-in, Origin {origin:?}"
        );
        assert!(r.headers().get(SET_COOKIE).is_none());
    }
    // DNS rebinding: the page under another host name is refused.
    let r = p
        .http
        .get(format!("{}/settings", p.app.base))
        .header(HOST, format!("evil.example:{port}"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // `localhost` is this agent too.
    let r = p
        .http
        .get(format!("{}/settings", p.app.base))
        .header(HOST, format!("localhost:{port}"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    p.app.stop().await;
}

#[tokio::test]
async fn every_value_is_escaped() {
    let p = Page::spawn(Mode::Online).await;
    let cookie = p.cookie().await;
    let dir = tempfile::tempdir().unwrap();
    let weird = dir.path().join(r#"a<b>&"c"#);
    std::fs::create_dir(&weird).unwrap();
    let token_file = weird.join("t<i>.token");
    apiary_agent::private::write_atomic(&token_file, b"tok\n").unwrap();
    let endpoint = "https://ingest.example/<script>alert(1)</script>";
    let on = [
        ("enabled", "true"),
        ("endpoint", endpoint),
        ("token_file", token_file.to_str().unwrap()),
    ];
    let r = p
        .post("/settings/sync", &on, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, st) = p.app.get("/v1/status").await;
    assert_eq!(st["sync"]["endpoint"], endpoint);
    let html = p.html(&cookie).await;
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("<i>") && !html.contains("<b>"), "{html}");
    assert!(
        html.contains("t&lt;i&gt;.token") && html.contains("a&lt;b&gt;&amp;&quot;c"),
        "{html}"
    );
    // A refused target is shown with what was typed, escaped too.
    let bad = [
        ("enabled", "true"),
        ("endpoint", "http://<em>evil</em>.example"),
        ("token_file", token_file.to_str().unwrap()),
    ];
    let r = p
        .post("/settings/sync", &bad, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let html = r.text().await.unwrap();
    assert!(!html.contains("<em>"), "{html}");
    assert!(html.contains("&lt;em&gt;"), "{html}");
    p.app.stop().await;
}

#[tokio::test]
async fn air_gapped_the_toggle_is_disabled_with_the_reason() {
    let p = Page::spawn(Mode::Airgapped).await;
    let cookie = p.cookie().await;
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-field="mode">Air-gapped<"#), "{html}");
    assert!(html.contains("id=\"airgapped-reason\""), "{html}");
    assert!(
        html.contains(r#"<button id="sync-button" type="button" disabled aria-describedby="airgapped-reason">"#),
        "{html}"
    );
    // The API refuses it there; so does the form, with the API's words.
    let on = [
        ("enabled", "true"),
        ("endpoint", "https://ingest.example"),
        ("token_file", p.app.token_file.as_str()),
    ];
    let r = p
        .post("/settings/sync", &on, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("airgapped"));
    assert!(!p.sync_enabled().await);
    p.app.stop().await;
}

#[tokio::test]
async fn a_paused_sync_is_told_in_plain_words_with_both_ways_out() {
    let p = Page::spawn(Mode::Online).await;
    let cookie = p.cookie().await;
    let on = [
        ("enabled", "true"),
        ("endpoint", "https://ingest.example"),
        ("token_file", p.app.token_file.as_str()),
    ];
    let r = p
        .post("/settings/sync", &on, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    // What the push loop does on a 401 from the ingest.
    p.app
        .outbox
        .set_sync(SyncChange::Pause {
            reason: Some("re-authenticate".into()),
        })
        .await
        .unwrap();
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-field="sync">Paused<"#), "{html}");
    assert!(html.contains("the ingest refused the token"), "{html}");
    assert!(
        html.contains("put a valid ingest token in the token file"),
        "{html}"
    );
    assert_eq!(html.matches(r#"id="sync-button""#).count(), 1, "{html}");
    assert!(html.contains(r#"id="sync-again-button""#), "{html}");
    // On again (the remembered target) lifts the pause.
    let r = p
        .post(
            "/settings/sync",
            &[("enabled", "true")],
            Some(&cookie),
            Some(&p.origin),
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, st) = p.app.get("/v1/status").await;
    assert_eq!(st["sync"]["enabled"], true);
    assert!(st["sync"]["paused_reason"].is_null(), "{st}");
    p.app.stop().await;
}
