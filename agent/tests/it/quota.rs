//! Quota visibility on the device, end to end in process: the running agent pushes to a fake ingest
//! (wiremock) that answers only batches asking for the quota (`X-Apiary-Quota: 1`) and puts one in its
//! answer; `GET /v1/quota` (either local token), `GET /v1/status`, the settings page and, after the agent
//! stopped, `apiary-agent status` (another process, reading the outbox) all show it.

use crate::http_api::App;
use crate::support;

use std::io::Read;
use std::time::{Duration, Instant};

use apiary_schema::quota::{BudgetScope, BudgetState, Quota, QUOTA_HEADER};
use apiary_schema::{Batch, BatchResponse};
use reqwest::header::{COOKIE, ORIGIN, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

fn team_monthly() -> Quota {
    Quota {
        as_of: "2026-11-03T10:00:00Z".parse().unwrap(),
        budgets: vec![
            BudgetState {
                budget_id: "b_team".into(),
                name: Some("team monthly".into()),
                scope: BudgetScope::default(),
                period: "month".into(),
                tz: "Europe/Berlin".into(),
                period_start: "2026-10-31T23:00:00Z".parse().unwrap(),
                period_end: "2026-11-30T23:00:00Z".parse().unwrap(),
                unit: "usd".into(),
                limit: 100_000_000_000,
                spent: 82_400_000_000,
                percent: 82.4,
                thresholds: vec![50, 80, 100],
                crossed: vec![50, 80],
            },
            BudgetState {
                budget_id: "b_tokens".into(),
                name: None,
                scope: BudgetScope {
                    model: Some("claude-sonnet-4-5".into()),
                    ..BudgetScope::default()
                },
                period: "day".into(),
                tz: "UTC".into(),
                period_start: "2026-11-03T00:00:00Z".parse().unwrap(),
                period_end: "2026-11-04T00:00:00Z".parse().unwrap(),
                unit: "tokens".into(),
                limit: 2_000_000,
                spent: 250_000,
                percent: 12.5,
                thresholds: vec![50, 80, 100],
                crossed: vec![],
            },
        ],
    }
}

/// A fake ingest: batches that ask for the quota are accepted and answered with `quota`; any other
/// request (a batch without the header included) gets wiremock's 404.
async fn ingest(quota: Quota) -> MockServer {
    let ingest = MockServer::start().await;
    support::answer_whoami(&ingest).await;
    Mock::given(method("POST"))
        .and(path("/v1/batches"))
        .and(header(QUOTA_HEADER, "1"))
        .respond_with(move |req: &Request| {
            let mut text = String::new();
            flate2::read::GzDecoder::new(&req.body[..])
                .read_to_string(&mut text)
                .unwrap();
            let batch: Batch = serde_json::from_str(&text).unwrap();
            ResponseTemplate::new(200).set_body_json(BatchResponse {
                accepted: batch.events.len() as u64,
                duplicates: 0,
                rejected: vec![],
                quota: Some(quota.clone()),
                push_interval_ms: None,
            })
        })
        .mount(&ingest)
        .await;
    ingest
}

async fn get_with(app: &App, token: &str, route: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .get(format!("{}{route}", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The settings page's HTML, signed in with the settings token.
async fn settings_page(app: &App) -> String {
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed = http
        .post(format!("{}/settings/sign-in", app.base))
        .header(ORIGIN, &app.base)
        .form(&[("token", app.settings_token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let cookie = signed.headers()[SET_COOKIE].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = http
        .get(format!("{}/settings", app.base))
        .header(COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    page.text().await.unwrap()
}

#[tokio::test]
async fn a_quota_in_the_ingests_answer_is_served_locally_and_survives_the_agent() {
    let quota = team_monthly();
    let ingest = ingest(quota.clone()).await;
    let app = App::spawn(|_| {}).await;

    // Nothing known yet: 200 with nulls (never 404), for either token; no token is 401.
    let (s, v) = app.get("/v1/quota").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v,
        json!({"quota": null, "received_at": null, "advisory": true})
    );
    let (s, _) = get_with(&app, "wrong", "/v1/quota").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    assert!(settings_page(&app).await.contains("No budget reported yet"));

    let on = json!({"enabled": true, "endpoint": ingest.uri(), "token_file": app.token_file});
    let r = app
        .client
        .put(format!("{}/v1/sync", app.base))
        .bearer_auth(&app.settings_token)
        .body(on.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (s, _) = app
        .post("/v1/events", support::hive_turn("session_q", 1))
        .await;
    assert_eq!(s, StatusCode::OK);

    let deadline = Instant::now() + Duration::from_secs(20);
    let v = loop {
        let (_, v) = app.get("/v1/quota").await;
        if !v["quota"].is_null() {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "no quota kept; the ingest got {:?}",
            ingest.received_requests().await.map(|r| r.len())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(v["advisory"], true);
    assert_eq!(v["quota"], serde_json::to_value(&quota).unwrap());
    let received: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(v["received_at"].clone()).unwrap();
    assert!((chrono::Utc::now() - received).num_seconds().abs() < 60);
    let (s, by_settings) = get_with(&app, &app.settings_token, "/v1/quota").await;
    assert_eq!((s, &by_settings), (StatusCode::OK, &v));
    for r in ingest.received_requests().await.unwrap() {
        if r.url.path() == "/v1/batches" {
            assert_eq!(
                r.headers[QUOTA_HEADER], "1",
                "every batch asks for the quota"
            );
        }
    }

    let (_, status) = app.get("/v1/status").await;
    assert_eq!(status["quota"], v, "status carries the same body");

    let html = settings_page(&app).await;
    assert!(
        html.contains(r#"<h2 id="budgets-title">Budgets</h2>"#),
        "{html}"
    );
    assert!(html.contains(r#"data-budget="b_team""#), "{html}");
    assert!(html.contains("&quot;team monthly&quot;"), "{html}");
    assert!(html.contains("82.4% of $100.00 — $82.40 spent"), "{html}");
    assert!(
        html.contains("12.5% of 2,000,000 tokens — 250,000 tokens spent"),
        "{html}"
    );
    assert!(html.contains("<meter"), "{html}");
    assert!(
        html.contains("Advisory: the agent never stops on its own"),
        "{html}"
    );

    // Another process, with the agent stopped: `status` reads the outbox.
    let kept = app.stop_keeping_dir().await;
    let dir = kept.path();
    let out = std::process::Command::new(support::bin())
        .args(["status", "--data-dir"])
        .arg(dir)
        .env("APIARY_ZONE", "UTC")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("agent:     not running"), "{text}");
    assert!(
        text.contains(
            "budget \"team monthly\" (month, Europe/Berlin): 82.4% of $100.00 — $82.40 spent, \
             thresholds crossed 50%, 80%"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "budget b_tokens (day, UTC, model claude-sonnet-4-5): 12.5% of 2,000,000 tokens"
        ),
        "{text}"
    );
    assert!(
        text.contains("advisory: the agent never stops on its own"),
        "{text}"
    );
    let out = std::process::Command::new(support::bin())
        .args(["status", "--json", "--data-dir"])
        .arg(dir)
        .env("APIARY_ZONE", "UTC")
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The same quota and flag; `received_at` may be later: a push at shutdown (what waited is sent)
    // is answered with the quota again.
    assert_eq!(
        json["quota"]["quota"], v["quota"],
        "status --json holds the same quota"
    );
    assert_eq!(json["quota"]["advisory"], v["advisory"]);
    let kept_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(json["quota"]["received_at"].clone()).unwrap();
    assert!(kept_at >= received, "{kept_at} < {received}");
}
