//! The dashboard served at `/`: signing in with a read token (an HttpOnly, SameSite=Strict cookie; a wrong
//! token, an ingest token and another site's form refused), pages redirect to the sign-in without it, the
//! token never appears in a body or a `Location`, values from clients are HTML-escaped, the hardening
//! headers, the same user scope as the API, and the overview's totals equal `/v1/usage`'s; the budgets
//! page's numbers equal `/v1/budgets`' for the same token (a user-bound token sees its user's budgets
//! only), the alerts page shows a fired alert's summary and delivery (403 to a user-bound token, like
//! the API; destinations to admins only, without secrets), and the prices page lists the API's entries
//! in its order.

use chrono::{Duration, DurationRound, Utc};
use reqwest::header::{CONTENT_SECURITY_POLICY, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

const EVIL: &str = "<script>alert(1)</script>";

/// A client that shows redirects instead of following them and keeps no cookies of its own.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

pub(crate) struct Page {
    pub(crate) status: StatusCode,
    location: Option<String>,
    set_cookie: Option<String>,
    csp: Option<String>,
    frame: Option<String>,
    pub(crate) body: String,
}

async fn page(resp: reqwest::Response) -> Page {
    let h = resp.headers().clone();
    let get = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_string());
    Page {
        status: resp.status(),
        location: get(LOCATION.as_str()),
        set_cookie: get(SET_COOKIE.as_str()),
        csp: get(CONTENT_SECURITY_POLICY.as_str()),
        frame: get("x-frame-options"),
        body: resp.text().await.unwrap(),
    }
}

impl TestApp {
    fn origin(&self) -> String {
        self.base.clone()
    }

    /// `POST /sign-in` with `token`, from a page of this host unless `origin` says otherwise.
    async fn sign_in(&self, token: &str, origin: Option<&str>) -> Page {
        let mut req = browser()
            .post(format!("{}/sign-in", self.base))
            .form(&[("token", token)]);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        page(req.send().await.unwrap()).await
    }

    /// The cookie pair (`apiary_dash=…`) a sign-in with `token` sets.
    pub(crate) async fn cookie(&self, token: &str) -> String {
        let p = self.sign_in(token, Some(&self.origin())).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
        let c = p.set_cookie.expect("a cookie");
        c.split(';').next().unwrap().to_string()
    }

    pub(crate) async fn page(&self, cookie: Option<&str>, path: &str) -> Page {
        let mut req = browser().get(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        page(req.send().await.unwrap()).await
    }
}

/// The exact value of the overview's total `field` (its `data-value`).
fn total(body: &str, field: &str) -> i128 {
    let key = format!("data-field=\"{field}\" data-value=\"");
    let at = body
        .find(&key)
        .unwrap_or_else(|| panic!("no {field} in the page"))
        + key.len();
    body[at..].split('"').next().unwrap().parse().unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn sign_in_sets_a_strict_http_only_cookie_and_pages_need_it(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    for path in [
        "/",
        "/sessions",
        "/sessions/x",
        "/devices",
        "/colonies",
        "/budgets",
        "/alerts",
        "/prices",
        "/live",
    ] {
        let p = app.page(None, path).await;
        assert_eq!(p.status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(p.location.as_deref(), Some("/sign-in"), "{path}");
    }
    let form = app.page(None, "/sign-in").await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(form.body.contains("type=\"password\""), "{}", form.body);

    let p = app.sign_in(&t.read, Some(&app.origin())).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location.as_deref(), Some("/"));
    let cookie = p.set_cookie.unwrap();
    for part in [
        "apiary_dash=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=",
    ] {
        assert!(cookie.contains(part), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    // Reached over https (behind a TLS proxy that keeps the Host): the cookie is Secure.
    let https_origin = app.origin().replace("http://", "https://");
    let https = app.sign_in(&t.read, Some(&https_origin)).await;
    assert_eq!(https.status, StatusCode::SEE_OTHER, "{}", https.body);
    assert!(https.set_cookie.unwrap().contains("; Secure"));

    let pair = cookie.split(';').next().unwrap();
    let home = app.page(Some(pair), "/").await;
    assert_eq!(home.status, StatusCode::OK, "{}", home.body);
    assert!(home.body.contains("<h1>Overview</h1>"), "{}", home.body);

    // The live stream, by the cookie: the API's stream.
    let mut live = browser()
        .get(format!("{}/live", app.base))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    assert_eq!(live.headers()["content-type"], "text/event-stream");
    let first = live.chunk().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("event: ready"),
        "{first:?}"
    );
    drop(live);

    // Sign-out clears the cookie (from this host's page only).
    let out = browser()
        .post(format!("{}/sign-out", app.base))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::FORBIDDEN, "no Origin");
    let out = page(
        browser()
            .post(format!("{}/sign-out", app.base))
            .header("cookie", pair)
            .header("origin", app.origin())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    assert!(out.set_cookie.unwrap().contains("Max-Age=0"));
}

#[sqlx::test(migrations = "../migrations")]
async fn pages_are_gzip_compressed_for_browsers_that_ask_and_the_live_stream_is_not(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let pair = app.cookie(&t.read).await;
    // A client that neither asks for gzip nor decodes it by itself.
    let raw = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_gzip()
        .build()
        .unwrap();
    let get = |path: &str, gzip: bool| {
        let mut req = raw
            .get(format!("{}{path}", app.base))
            .header("cookie", &pair);
        if gzip {
            req = req.header("accept-encoding", "gzip");
        }
        req.send()
    };
    for path in ["/", "/sessions", "/assets/app.css", "/assets/live.js"] {
        let plain = get(path, false).await.unwrap();
        assert_eq!(plain.status(), StatusCode::OK, "{path}");
        assert!(plain.headers().get("content-encoding").is_none(), "{path}");
        let plain = plain.text().await.unwrap();

        let r = get(path, true).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["content-encoding"], "gzip", "{path}");
        assert!(r.headers().contains_key(CONTENT_SECURITY_POLICY), "{path}");
        let wire = r.bytes().await.unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&wire[..]), &mut text)
            .unwrap();
        if path.starts_with("/assets") {
            assert_eq!(text, plain, "{path}");
        } else {
            assert!(text.starts_with("<!DOCTYPE html>"), "{path}: {text}");
        }
        assert!(
            wire.len() < plain.len(),
            "{path}: {} vs {}",
            wire.len(),
            plain.len()
        );
    }
    // The live list's event stream is never buffered by a compressor.
    let mut live = get("/live", true).await.unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    assert!(live.headers().get("content-encoding").is_none());
    let first = live.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("event: ready"));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_wrong_token_an_ingest_token_and_another_sites_form_are_refused(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let me = app.origin();
    let wrong = format!("apy_{}", "0".repeat(64));
    for (token, origin, status) in [
        (wrong.as_str(), Some(me.as_str()), StatusCode::UNAUTHORIZED),
        ("not-a-token", Some(me.as_str()), StatusCode::UNAUTHORIZED),
        ("", Some(me.as_str()), StatusCode::BAD_REQUEST),
        (t.ingest.as_str(), Some(me.as_str()), StatusCode::FORBIDDEN),
        (
            t.read.as_str(),
            Some("http://evil.example"),
            StatusCode::FORBIDDEN,
        ),
        (t.read.as_str(), Some("null"), StatusCode::FORBIDDEN),
        (t.read.as_str(), None, StatusCode::FORBIDDEN),
    ] {
        let p = app.sign_in(token, origin).await;
        assert_eq!(p.status, status, "{token} from {origin:?}: {}", p.body);
        assert!(p.set_cookie.is_none(), "{token} from {origin:?}");
        assert!(!p.body.contains(&t.read) && !p.body.contains(&t.ingest));
    }
    // A cookie holding a wrong or an ingest token is no sign-in.
    for bad in [wrong.as_str(), t.ingest.as_str()] {
        let p = app.page(Some(&format!("apiary_dash={bad}")), "/").await;
        assert_eq!(p.status, StatusCode::SEE_OTHER);
        assert_eq!(p.location.as_deref(), Some("/sign-in"));
        assert!(
            p.set_cookie.unwrap().contains("Max-Age=0"),
            "the stale cookie is cleared"
        );
    }
    // The API ignores the cookie: it never authorizes a /v1 request.
    let r = browser()
        .get(format!("{}/v1/usage", app.base))
        .header("cookie", format!("apiary_dash={}", t.read))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_token_is_in_no_page_and_client_values_are_escaped(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    // Ids are restricted to [A-Za-z0-9._:@+=-] at intake, but a model name is free text; this id
    // needs percent-encoding in a link.
    let session = "q-a+b=c@d:e".to_string();
    let mut worker = llm("w-1", now, EVIL, 10, 1, 0.5);
    worker["colony_id"] = json!(session);
    worker["agent_role"] = json!("worker");
    worker["parent_session_id"] = json!(session);
    let events = vec![llm(&session, now, EVIL, 100, 10, 1.25), worker];
    let sessions = vec![binding(&session, "alice"), binding("w-1", "alice")];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    let cookie = app.cookie(&t.read).await;
    let encoded: String = form_urlencoded::byte_serialize(session.as_bytes()).collect();
    let paths = [
        "/".to_string(),
        "/?group_by=user".into(),
        "/?group_by=colony&granularity=hour".into(),
        "/sessions".into(),
        format!(
            "/sessions?user={}",
            form_urlencoded::byte_serialize(EVIL.as_bytes()).collect::<String>()
        ),
        format!("/sessions/{encoded}"),
        "/sessions/w-1".into(),
        "/devices".into(),
        "/colonies".into(),
        "/budgets".into(),
        "/alerts".into(),
        "/prices".into(),
        "/sign-in".into(),
    ];
    for path in &paths {
        let p = app.page(Some(&cookie), path).await;
        assert_eq!(p.status, StatusCode::OK, "{path}: {}", p.body);
        assert!(
            !p.body.contains(&t.read),
            "{path}: the token is in the page"
        );
        // The one script is the embedded file of the live list; nothing inline, nothing injected.
        let own = "<script src=\"/assets/live.js\" defer></script>";
        assert!(
            !p.body.replace(own, "").contains("<script"),
            "{path}: an unescaped <script>"
        );
        assert!(p.location.is_none());
        let csp = p.csp.expect("a CSP");
        assert!(
            csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "{csp}"
        );
        assert_eq!(p.frame.as_deref(), Some("DENY"));
    }
    let detail = app
        .page(Some(&cookie), &format!("/sessions/{encoded}"))
        .await;
    assert!(
        detail.body.contains("w-1"),
        "the worker is in the tree: {}",
        detail.body
    );
    assert!(
        detail
            .body
            .contains("href=\"/sessions/q-a%2Bb%3Dc%40d%3Ae\""),
        "{}",
        detail.body
    );
    let home = app.page(Some(&cookie), "/").await;
    assert!(
        home.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        home.body
    );
    let p = app.page(Some(&cookie), "/nowhere-x").await;
    assert!(!p.body.contains(&t.read));
}

#[sqlx::test(migrations = "../migrations")]
async fn the_overview_totals_equal_the_usage_api_for_the_same_query(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let day = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let events = vec![
        llm(
            "q-1",
            day + Duration::hours(1),
            "m-a",
            1_234,
            56,
            0.123456789,
        ),
        llm("q-1", day + Duration::hours(3), "m-b", 7_000, 800, 2.5),
        // A catalog model without a reported cost: its cost is the estimate.
        llm(
            "q-2",
            day + Duration::hours(2),
            "claude-opus-4-6",
            40_000,
            2_000,
            0.0,
        ),
        llm("q-2", day - Duration::days(3), "m-a", 999, 1, 0.000000001),
        // Outside the query's range: must not count.
        llm("q-2", day - Duration::days(40), "m-a", 5_000_000, 1, 100.0),
    ];
    let sessions = vec![binding("q-1", "alice"), binding("q-2", "bob")];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let cookie = app.cookie(&t.read).await;
    let from = (day - Duration::days(10)).format("%Y-%m-%d");
    let to = (day + Duration::days(1)).format("%Y-%m-%d");
    for query in [
        format!("from={from}&to={to}&tz=Asia%2FKolkata&granularity=day&group_by=model"),
        format!("from={from}&to={to}&tz=UTC&granularity=hour&group_by=user"),
        format!("from={from}&to={to}&granularity=month&group_by=colony"),
    ] {
        let (s, api) = app.get(&t.read, &format!("/v1/usage?{query}")).await;
        assert_eq!(s, StatusCode::OK, "{api}");
        let p = app.page(Some(&cookie), &format!("/?{query}")).await;
        assert_eq!(p.status, StatusCode::OK, "{query}: {}", p.body);
        // The page-weight budget (#14: 300 KB compressed), held here uncompressed.
        assert!(p.body.len() < 300 * 1024, "{query}: {} bytes", p.body.len());
        for field in [
            "cost_nanos",
            "cost_reported_nanos",
            "cost_estimated_nanos",
            "estimated_turns",
            "unpriced_turns",
            "input_tokens",
            "output_tokens",
            "cached_tokens",
            "llm_calls",
            "events",
        ] {
            let want = api["totals"][field].as_i64().unwrap() as i128;
            assert_eq!(total(&p.body, field), want, "{query}: {field}");
        }
        assert!(api["totals"]["input_tokens"].as_i64().unwrap() > 0);
        assert!(api["totals"]["cost_estimated_nanos"].as_i64().unwrap() > 0);
        assert!(
            p.body.contains("reported where sent, else estimated"),
            "{query}: the cost basis is named"
        );
        assert!(
            api["totals"]["input_tokens"].as_i64().unwrap() < 5_000_000,
            "the range applies"
        );
    }
    // The overview lists the budgets with the API's numbers for the same token.
    let admin = app.token(t.id, &["admin"]).await;
    let (s, b) = app
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"name": "team", "period": "month", "limit_usd": "10"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    let (_, list) = app.get(&t.read, "/v1/budgets").await;
    let home = app.page(Some(&cookie), "/").await;
    let want = format!(
        "data-budget=\"{}\" data-spent=\"{}\" data-limit=\"10000000000\"",
        b["budget_id"].as_str().unwrap(),
        list["budgets"][0]["spent"]
    );
    assert!(home.body.contains(&want), "{want} not in {}", home.body);
    assert!(list["budgets"][0]["spent"].as_i64().unwrap() > 0, "{list}");
    // A bad parameter reads as the API words it, with its status.
    let p = app.page(Some(&cookie), "/?granularity=week").await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("parameter `granularity`"), "{}", p.body);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_user_bound_token_sees_only_its_users_sessions_on_the_pages(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let events = vec![
        llm("q-alice", now, "m", 100, 10, 0.1),
        llm("q-bob", now, "m", 1000, 100, 1.0),
    ];
    let sessions = vec![binding("q-alice", "alice"), binding("q-bob", "bob")];
    let (s, _) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK);
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    let cookie = app.cookie(&alice).await;
    let list = app.page(Some(&cookie), "/sessions").await;
    assert!(
        list.body.contains("q-alice") && !list.body.contains("q-bob"),
        "{}",
        list.body
    );
    let bob = app.page(Some(&cookie), "/sessions/q-bob").await;
    assert_eq!(bob.status, StatusCode::NOT_FOUND);
    let home = app.page(Some(&cookie), "/").await;
    assert_eq!(total(&home.body, "input_tokens"), 100);
}

/// The budgets page's numbers per budget id (the `data-*` attributes of each budget's `article`).
fn budget_numbers(body: &str) -> std::collections::BTreeMap<String, BudgetShown> {
    let attr = |tag: &str, name: &str| -> String {
        let key = format!(" data-{name}=\"");
        let at = tag
            .find(&key)
            .unwrap_or_else(|| panic!("no data-{name} in {tag}"))
            + key.len();
        tag[at..].split('"').next().unwrap().to_string()
    };
    body.split("<article ")
        .skip(1)
        .map(|rest| {
            let (tag, inside) = rest.split_once('>').unwrap();
            let inside = inside.split("</article>").next().unwrap();
            let n = |name: &str| attr(tag, name).parse::<i64>().unwrap();
            let crossed = inside
                .split(" data-threshold=\"")
                .skip(1)
                .map(|s| s.split('"').next().unwrap().parse().unwrap())
                .collect();
            let shown = BudgetShown {
                limit: n("limit"),
                spent: n("spent"),
                remaining: n("remaining"),
                forecast: n("forecast"),
                percent: attr(tag, "percent").parse().unwrap(),
                crossed,
            };
            (attr(tag, "budget"), shown)
        })
        .collect()
}

#[derive(Debug)]
struct BudgetShown {
    limit: i64,
    spent: i64,
    remaining: i64,
    forecast: i64,
    percent: f64,
    crossed: Vec<i64>,
}

#[sqlx::test(migrations = "../migrations")]
async fn the_budgets_page_shows_the_budgets_apis_numbers_for_the_same_token(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    for body in [
        json!({"name": "team", "period": "month", "limit_usd": "2.50"}),
        json!({"name": "alice", "scope": {"user": "alice"}, "period": "week", "tz": "Europe/Berlin",
               "limit_tokens": 1000, "thresholds": [10, 90]}),
        json!({"name": "bob", "scope": {"user": "bob"}, "period": "day", "limit_usd": "0.000000007"}),
    ] {
        let (s, b) = app.post_json(&admin, "/v1/budgets", body).await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
    }
    let now = Utc::now();
    let events = vec![
        llm("q-alice", now, "m", 300, 20, 1.234567891),
        llm("q-bob", now, "m", 7, 1, 0.000000009),
    ];
    let sessions = vec![binding("q-alice", "alice"), binding("q-bob", "bob")];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let alice = app.tenant_token_for_user(t.id, "alice").await;

    for (token, want) in [
        (t.read.as_str(), vec!["alice", "bob", "team"]),
        (admin.as_str(), vec!["alice", "bob", "team"]),
        (alice.as_str(), vec!["alice"]),
    ] {
        let cookie = app.cookie(token).await;
        // The forecast moves with the clock: the page's lies between the API's before and after.
        let (s, before) = app.get(token, "/v1/budgets").await;
        assert_eq!(s, StatusCode::OK, "{before}");
        let p = app.page(Some(&cookie), "/budgets").await;
        assert_eq!(p.status, StatusCode::OK, "{}", p.body);
        let (_, after) = app.get(token, "/v1/budgets").await;
        assert!(p.body.contains("<h1>Budgets</h1>"), "{}", p.body);
        assert!(p.body.contains("<meter "), "a progress bar: {}", p.body);
        assert!(!p.body.contains(" style="), "no inline style (CSP)");
        let shown = budget_numbers(&p.body);
        let mut names: Vec<&str> = before["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, want, "the API's visibility");
        assert_eq!(shown.len(), want.len(), "{shown:?}");
        for (b, a) in before["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .zip(after["budgets"].as_array().unwrap())
        {
            let id = b["budget_id"].as_str().unwrap();
            let s = &shown[id];
            let int = |v: &serde_json::Value, f: &str| v[f].as_i64().unwrap();
            assert_eq!(s.limit, int(b, "limit"), "{id}");
            assert_eq!(s.spent, int(b, "spent"), "{id}");
            assert_eq!(s.remaining, int(b, "remaining"), "{id}");
            assert_eq!(s.percent, b["percent"].as_f64().unwrap(), "{id}");
            assert!(
                int(b, "forecast") >= s.forecast && s.forecast >= int(a, "forecast"),
                "{id}: forecast {} not within the API's {} .. {}",
                s.forecast,
                int(b, "forecast"),
                int(a, "forecast")
            );
            if b["crossed"] == a["crossed"] {
                let crossed: Vec<i64> = b["crossed"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["threshold"].as_i64().unwrap())
                    .collect();
                assert_eq!(s.crossed, crossed, "{id}");
            }
        }
    }
    // The numbers are not trivially zero: alice's 320 tokens of 1000 (32%), bob beyond his limit.
    let (_, mine) = app.get(&alice, "/v1/budgets").await;
    assert_eq!(mine["budgets"][0]["spent"], 320, "{mine}");
    assert_eq!(mine["budgets"][0]["percent"], 32.0, "{mine}");
    let cookie = app.cookie(&t.read).await;
    let p = app.page(Some(&cookie), "/budgets").await;
    assert!(p.body.contains("(over the limit)"), "bob: {}", p.body);
    assert!(p.body.contains("$1.23"), "the team's spend in dollars");
    assert!(p.body.contains("320 tokens"), "alice's spend in tokens");
}

/// A webhook receiver that answers 200 to everything; its URL.
async fn receiver() -> String {
    let app = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[sqlx::test(migrations = "../migrations")]
async fn the_alerts_page_shows_a_fired_alert_and_its_delivery_to_tenant_readers_only(
    pool: sqlx::PgPool,
) {
    let mut settings = test_settings();
    settings.alerts.allow_private_destinations = true;
    settings.alerts.retry_base_ms = 50;
    let app = spawn_app_with(pool, settings.clone()).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let url = receiver().await;
    let (s, d) = app
        .post_json(
            &admin,
            "/v1/alerts/destinations",
            json!({"kind": "webhook", "url": url, "name": "on-call hook"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    let secret = d["secret"].as_str().unwrap().to_string();
    let (s, r) = app
        .post_json(
            &admin,
            "/v1/alerts/rules",
            json!({"kind": "session_status", "name": "anything active",
               "destination_id": d["destination_id"], "statuses": ["active"]}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{r}");
    let (s, v) = app
        .post_batch(
            &t.ingest,
            &batch(
                vec![llm("q-1", Utc::now(), "m", 10, 1, 0.1)],
                vec![binding("q-1", "alice")],
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let db = apiary_ingest::query::ReadDb::new(
        app.pool.clone(),
        apiary_ingest::status::rules(&settings),
    );
    apiary_ingest::alerts::evaluate::tenant(&app.pool, &db, t.id, 180, Utc::now())
        .await
        .unwrap();
    // The deliverer (in the app) sends it: wait until the API says delivered.
    let mut alert = serde_json::Value::Null;
    for _ in 0..200 {
        let (s, list) = app.get(&t.read, "/v1/alerts").await;
        assert_eq!(s, StatusCode::OK, "{list}");
        alert = list["alerts"][0].clone();
        if alert["notifications"][0]["state"] == "delivered" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(alert["state"], "firing", "{alert}");
    assert_eq!(alert["notifications"][0]["state"], "delivered", "{alert}");
    let summary = alert["summary"].as_str().unwrap();

    for (token, admin_view) in [(t.read.as_str(), false), (admin.as_str(), true)] {
        let cookie = app.cookie(token).await;
        let p = app.page(Some(&cookie), "/alerts").await;
        assert_eq!(p.status, StatusCode::OK, "{}", p.body);
        let b = &p.body;
        assert!(b.contains(&escaped(summary)), "the summary: {b}");
        let row = format!(
            "data-alert=\"{}\" data-state=\"firing\"",
            alert["alert_id"].as_str().unwrap()
        );
        assert!(b.contains(&row), "{b}");
        let delivery = format!(
            "data-event=\"firing\" data-delivery=\"delivered\" data-attempts=\"{}\"",
            alert["notifications"][0]["attempts"]
        );
        assert!(b.contains(&delivery), "the delivery state: {b}");
        assert!(b.contains("href=\"/sessions/q-1\""), "the session's page");
        assert!(b.contains("anything active"), "the rule is listed");
        assert!(b.contains("No resolved alerts."), "{b}");
        assert_eq!(
            b.contains("<h2 id=\"destinations-title\">"),
            admin_view,
            "destinations for admins only"
        );
        assert!(
            !b.contains(&secret) && !b.contains(&url),
            "never a secret nor the full URL"
        );
        if admin_view {
            assert!(
                b.contains("on-call hook") && b.contains("yes (HMAC)"),
                "{b}"
            );
        }
    }
    // A read token bound to a user: the API's 403, said on the page.
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    let (s, api) = app.get(&alice, "/v1/alerts").await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{api}");
    let cookie = app.cookie(&alice).await;
    let p = app.page(Some(&cookie), "/alerts").await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(p.body.contains("alerts are tenant-wide"), "{}", p.body);
    assert!(!p.body.contains(&escaped(summary)));
    assert!(
        p.body.contains("aria-current=\"page\""),
        "the navigation stays"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn the_prices_page_lists_the_tenants_entries_then_the_catalog_to_any_reader(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let (s, mine) = app
        .post_json(
            &admin,
            "/v1/prices",
            json!({"models": ["acme-model-*"], "from": "2026-01-01", "input": "3",
               "output": "15.5", "cache_read": "0.3", "source": "contract 42"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{mine}");
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    for token in [t.read.as_str(), admin.as_str(), alice.as_str()] {
        let (s, api) = app.get(token, "/v1/prices").await;
        assert_eq!(s, StatusCode::OK, "{api}");
        let cookie = app.cookie(token).await;
        let p = app.page(Some(&cookie), "/prices").await;
        assert_eq!(p.status, StatusCode::OK, "{}", p.body);
        let b = &p.body;
        let prices = api["prices"].as_array().unwrap();
        assert!(prices.len() > 1, "{api}");
        let mut last = 0;
        for price in prices {
            let id = price["price_id"].as_str().unwrap();
            let at = b
                .find(&format!("data-price=\"{id}\""))
                .unwrap_or_else(|| panic!("{id} not on the page"));
            assert!(at > last, "{id}: the API's order");
            last = at;
            let row = &b[at..at + b[at..].find("</tr>").unwrap()];
            for (rate, field) in [("input", "input"), ("output", "output")] {
                let want = format!("data-rate=\"{rate}\">${}<", price[field].as_str().unwrap());
                assert!(row.contains(&want), "{id}: {want} in {row}");
            }
        }
        assert!(
            b.contains("contract 42") && b.contains("acme-model-*"),
            "{b}"
        );
        assert!(
            b.find("data-owner=\"tenant\"").unwrap() < b.find("data-owner=\"shipped\"").unwrap()
        );
    }
}

/// `POST path` with the `form` body and the cookie, from a page of this host unless `origin` is None.
async fn post_form(
    app: &TestApp,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
    origin: Option<&str>,
) -> Page {
    let mut req = browser()
        .post(format!("{}{path}", app.base))
        .header("cookie", cookie)
        .form(form);
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    page(req.send().await.unwrap()).await
}

#[sqlx::test(migrations = "../migrations")]
async fn the_exports_page_adds_lists_and_deletes_exports_for_admins_only(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let cookie = app.cookie(&admin).await;
    let origin = app.origin();
    let p = app.page(Some(&cookie), "/exports").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("No exports."), "{}", p.body);
    assert!(p.body.contains("href=\"/exports\" aria-current=\"page\""));

    // Added: the URL and the header shown on the answer, once.
    let form = [
        ("url", "https://otlp.example.com/v1/metrics"),
        ("headers", "api-key: k-dash-secret-1"),
        ("interval_secs", "30"),
        ("dimensions", "user"),
        ("dimensions", "model"),
    ];
    let p = post_form(&app, &cookie, "/exports", &form, Some(&origin)).await;
    assert_eq!(p.status, StatusCode::CREATED, "{}", p.body);
    assert!(p.body.contains("k-dash-secret-1"), "{}", p.body);
    assert!(p.body.contains("https://otlp.example.com/v1/metrics"));
    let (s, listed) = app.get(&admin, "/v1/exports").await;
    assert_eq!(s, StatusCode::OK, "{listed}");
    let e = &listed["exports"][0];
    let id = e["export_id"].as_str().unwrap().to_string();
    assert_eq!(e["dimensions"], json!(["user", "model"]));
    assert_eq!(e["interval_secs"], 30);

    // Listed as the API lists it, never with the header or the URL.
    let p = app.page(Some(&cookie), "/exports").await;
    assert_eq!(p.status, StatusCode::OK);
    assert!(!p.body.contains("k-dash-secret-1"), "{}", p.body);
    assert!(
        !p.body.contains("https://otlp.example.com/v1/metrics"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(&format!("data-export=\"{id}\"")),
        "{}",
        p.body
    );
    for shown in [
        "otlp.example.com",
        e["url_fingerprint"].as_str().unwrap(),
        "user, model",
    ] {
        assert!(p.body.contains(shown), "{shown}: {}", p.body);
    }

    // Refused: another site's form, bad input (the API's words), a read token's cookie.
    let p = post_form(
        &app,
        &cookie,
        "/exports",
        &form,
        Some("https://evil.example"),
    )
    .await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    let p = post_form(
        &app,
        &cookie,
        "/exports",
        &[("url", "ftp://x.example.com/")],
        Some(&origin),
    )
    .await;
    assert_eq!(p.status, StatusCode::BAD_REQUEST);
    assert!(p.body.contains("url: scheme"), "{}", p.body);
    let reader = app.cookie(&t.read).await;
    let p = app.page(Some(&reader), "/exports").await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    assert!(!p.body.contains(&id), "{}", p.body);
    let delete = format!("/exports/{id}/delete");
    let p = post_form(&app, &reader, &delete, &[], Some(&origin)).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN);
    let p = post_form(&app, &cookie, &delete, &[], None).await;
    assert_eq!(p.status, StatusCode::FORBIDDEN, "no Origin");
    assert_eq!(
        app.get(&admin, "/v1/exports").await.1["exports"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Deleted: back to the page, gone from the API; a second delete is the API's 404.
    let p = post_form(&app, &cookie, &delete, &[], Some(&origin)).await;
    assert_eq!(p.status, StatusCode::SEE_OTHER, "{}", p.body);
    assert_eq!(p.location.as_deref(), Some("/exports"));
    assert_eq!(app.get(&admin, "/v1/exports").await.1["exports"], json!([]));
    let p = post_form(&app, &cookie, &delete, &[], Some(&origin)).await;
    assert_eq!(p.status, StatusCode::NOT_FOUND);
}

/// The cells of a CSV text (RFC 4180: quoted cells with doubled quotes), by line.
fn cells(text: &str) -> Vec<Vec<String>> {
    let mut rows = vec![];
    let (mut row, mut cell, mut quoted) = (vec![], String::new(), false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => row.push(std::mem::take(&mut cell)),
            ('\r', false) => {}
            ('\n', false) => {
                row.push(std::mem::take(&mut cell));
                rows.push(std::mem::take(&mut row));
            }
            (c, _) => cell.push(c),
        }
    }
    rows
}

/// A CSV's cells without the columns that grow with the time of reading (a session's durations and
/// time in each state), which two reads a moment apart cannot share.
fn steady(text: &str) -> Vec<Vec<String>> {
    let rows = cells(text);
    let Some(header) = rows.first() else {
        return rows;
    };
    let keep: Vec<bool> = header
        .iter()
        .map(|h| !h.starts_with("durations.") && !h.starts_with("time_in_state."))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(c, _)| c.clone())
                .collect()
        })
        .collect()
}

/// The answer to `path` with a bearer token: (status, content type, body).
async fn get_text(app: &TestApp, token: &str, path: &str) -> (StatusCode, String, String) {
    let r = browser()
        .get(format!("{}{path}", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    (r.status(), ct, r.text().await.unwrap())
}

#[sqlx::test(migrations = "../migrations")]
async fn download_csv_links_answer_the_apis_csv_for_what_each_page_shows(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let day = Utc::now().duration_trunc(Duration::days(1)).unwrap();
    let events = vec![
        llm("q-1", day + Duration::hours(1), "m-a", 1_234, 56, 0.5),
        llm("q-2", day - Duration::days(2), "m-b", 7_000, 800, 2.5),
    ];
    let sessions = vec![binding("q-1", "alice"), binding("q-2", "bob")];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let cookie = app.cookie(&t.read).await;
    let from = (day - Duration::days(5)).format("%Y-%m-%d").to_string();
    let to = (day + Duration::days(1)).format("%Y-%m-%d").to_string();
    let ranged = format!("from={from}&to={to}&tz=UTC");
    // (page, its query, the link's path, the API's equal query).
    let cases = [
        (
            "/".to_string(),
            format!("{ranged}&granularity=day&group_by=user"),
            "/usage.csv",
            format!("/v1/usage?{ranged}&granularity=day&group_by=user&format=csv"),
        ),
        (
            "/sessions".to_string(),
            "user=alice&limit=10".to_string(),
            "/sessions.csv",
            "/v1/sessions?user=alice&limit=10&format=csv".to_string(),
        ),
        (
            "/colonies".to_string(),
            ranged.clone(),
            "/colonies.csv",
            format!("/v1/colonies?{ranged}&format=csv"),
        ),
    ];
    for (page_path, query, link, api_path) in cases {
        let p = app
            .page(Some(&cookie), &format!("{page_path}?{query}"))
            .await;
        assert_eq!(p.status, StatusCode::OK, "{}", p.body);
        let href = format!("href=\"{link}?{}\"", query.replace('&', "&amp;"));
        assert!(p.body.contains(&href), "{href} in {}", p.body);
        let file = app.page(Some(&cookie), &format!("{link}?{query}")).await;
        assert_eq!(file.status, StatusCode::OK, "{}", file.body);
        let (s, ct, api) = get_text(&app, &t.read, &api_path).await;
        assert_eq!(s, StatusCode::OK, "{api}");
        assert!(ct.starts_with("text/csv"), "{ct}");
        assert_eq!(steady(&file.body), steady(&api), "{link}?{query}");
        if link != "/colonies.csv" {
            assert!(api.lines().count() >= 2, "{api_path}: {api}");
        }
    }
    // The overview's defaults (the last 30 days by model and day) are the file's too.
    let p = app.page(Some(&cookie), "/").await;
    assert!(p.body.contains("href=\"/usage.csv\""), "{}", p.body);
    let file = app.page(Some(&cookie), "/usage.csv").await;
    assert!(
        file.body.contains("m-a") && file.body.contains("m-b"),
        "{}",
        file.body
    );
    // Without a cookie: the sign-in redirect, as every page.
    assert_eq!(
        app.page(None, "/sessions.csv").await.status,
        StatusCode::SEE_OTHER
    );
}
