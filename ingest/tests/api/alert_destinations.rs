//! Alert destinations against server-side request forgery and leaks: address literals of every
//! special-purpose form (IPv4 embedded in IPv6 included) refused at creation and at delivery; Slack
//! destinations only at `hooks.slack.com`; deliveries through the configured egress proxy and no
//! other; a destination's URL answered once, then listed as host and fingerprint — in the API, in
//! delivery errors and on the dashboard.

use std::sync::{Arc, Mutex};

use apiary_ingest::alerts::deliver::{self, Claimed, Outcome};
use apiary_ingest::config::{AlertSettings, IngestSettings};
use apiary_schema::alert::{
    AlertBody, AlertDetails, AlertNotification, AlertState, RuleKind, SilenceDetails,
};
use chrono::Utc;
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::helpers::*;

/// A Slack webhook URL whose last segment is its secret.
const SLACK_TOKEN: &str = "s3cr3tT0k3nXYZ";

fn strict() -> AlertSettings {
    AlertSettings {
        delivery_timeout_secs: 2,
        ..AlertSettings::default()
    }
}

fn local() -> AlertSettings {
    AlertSettings {
        allow_private_destinations: true,
        ..strict()
    }
}

fn claimed(kind: &str, url: &str) -> Claimed {
    Claimed {
        tenant_id: uuid::Uuid::nil(),
        notification_id: "nt_test".into(),
        payload: serde_json::to_value(AlertNotification::new(
            uuid::Uuid::nil(),
            AlertBody {
                alert_id: "al_test".into(),
                rule_id: "ar_test".into(),
                rule_name: None,
                kind: RuleKind::Silence,
                state: AlertState::Firing,
                subject: "dev_1".into(),
                summary: "Device dev_1 went quiet".into(),
                details: AlertDetails::Silence(SilenceDetails {
                    device_id: "dev_1".into(),
                    user_id: "u_1".into(),
                    last_heard_at: Utc::now(),
                    active_working_days: 3,
                    silence_hours: 24,
                }),
                fired_at: Utc::now(),
                resolved_at: None,
            },
            AlertState::Firing,
        ))
        .unwrap(),
        attempts: 1,
        kind: kind.into(),
        url: url.into(),
        secret: Some("0123456789abcdef".into()),
    }
}

/// An HTTP server that answers 200 to anything and records each request's target as it came (a
/// proxy is sent the absolute form, `http://host:port/path`); its base URL.
async fn recorder() -> (String, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = got.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(req.uri().to_string());
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, got)
}

/// A loopback port nothing listens on (connections to it are refused).
async fn closed_port() -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

#[sqlx::test(migrations = "../migrations")]
async fn special_purpose_and_ipv4_embedding_literals_are_refused_at_creation_and_at_delivery(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    for host in [
        "[::127.0.0.1]",
        "[::169.254.169.254]",
        "[::10.0.0.1]",
        "[::ffff:0:127.0.0.1]",
        "[::ffff:169.254.169.254]",
        "[100::1]",
        "[64:ff9b::10.0.0.1]",
        "[64:ff9b::169.254.169.254]",
        "[64:ff9b:1::808:808]",
        "[2002:a00:1::1]",
        "[2002:7f00:1::1]",
        "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
        "[fec0::1]",
        "[3fff::1]",
        "[5f00::1]",
        "192.0.0.170",
        "198.18.0.1",
        "0x7f.1",
    ] {
        let url = format!("https://{host}/hook");
        let (status, err) = app
            .post_json(
                &admin,
                "/v1/alerts/destinations",
                json!({"kind": "webhook", "url": url}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a public address"),
            "{url}: {err}"
        );
        // At delivery too (a row written before this rule, or by hand): refused for good, unsent.
        match deliver::send(&claimed("webhook", &url), &strict()).await {
            Outcome::Permanent(e) => assert!(e.contains("not a public address"), "{url}: {e}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    assert_eq!(app.count("alert_destinations").await, 0);
}

#[sqlx::test(migrations = "../migrations")]
async fn slack_destinations_name_hooks_slack_com_and_no_other_host_or_address(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    for url in [
        "https://1.1.1.1/services/T0/B0/x",
        "https://[2606:4700:4700::1111]/services/T0/B0/x",
        "https://[::ffff:1.1.1.1]/services/T0/B0/x",
        "https://hooks.slack.com.evil.example/services/T0/B0/x",
        "https://evil.example/services/T0/B0/x",
        "https://hooks.slack.com:8443/services/T0/B0/x",
        "http://hooks.slack.com/services/T0/B0/x",
    ] {
        let (status, err) = app
            .post_json(
                &admin,
                "/v1/alerts/destinations",
                json!({"kind": "slack", "url": url}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {err}");
        assert_eq!(err["error"]["code"], "invalid_alert", "{url}");
    }
    assert_eq!(app.count("alert_destinations").await, 0);
    match deliver::send(
        &claimed("slack", "https://1.1.1.1/services/T0/B0/x"),
        &strict(),
    )
    .await
    {
        Outcome::Permanent(e) => assert!(e.contains("hooks.slack.com"), "{e}"),
        other => panic!("{other:?}"),
    }
    let (status, d) = app
        .post_json(
            &admin,
            "/v1/alerts/destinations",
            json!({"kind": "slack", "url": "https://hooks.slack.com/services/T0/B0/x"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_destination_url_is_answered_once_then_listed_as_host_and_fingerprint(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let slack = format!("https://hooks.slack.com/services/T0AAAA/B0BBBB/{SLACK_TOKEN}");
    let hook = "https://hooks.example.com:8443/apiary?token=tok3nInQuery";
    let mut created = Vec::new();
    for (kind, url) in [("slack", slack.as_str()), ("webhook", hook)] {
        let (status, d) = app
            .post_json(
                &admin,
                "/v1/alerts/destinations",
                json!({"kind": kind, "url": url}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{d}");
        assert_eq!(d["url"], url, "the creating answer shows the URL, once");
        created.push(d);
    }
    let (status, list) = app.get(&admin, "/v1/alerts/destinations").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let text = list.to_string();
    for secret in [SLACK_TOKEN, "/services/", "tok3nInQuery", "/apiary"] {
        assert!(!text.contains(secret), "{secret} is listed: {list}");
    }
    let listed = list["destinations"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{list}");
    for (d, (host, url)) in listed.iter().zip([
        ("hooks.slack.com", slack.as_str()),
        ("hooks.example.com:8443", hook),
    ]) {
        assert_eq!(d["host"], host, "{d}");
        let sha = hex::encode(Sha256::digest(url.as_bytes()));
        assert_eq!(d["url_fingerprint"], sha[..12], "{d}");
        assert!(d.get("url").is_none(), "{d}");
    }
    for (c, l) in created.iter().zip(listed) {
        assert_eq!(c["url_fingerprint"], l["url_fingerprint"]);
        assert_eq!(c["destination_id"], l["destination_id"]);
    }
}

#[tokio::test]
async fn a_failed_deliverys_error_never_carries_the_url() {
    let port = closed_port().await;
    let url = format!("http://127.0.0.1:{port}/services/T0/B0/{SLACK_TOKEN}");
    for kind in ["slack", "webhook"] {
        match deliver::send(&claimed(kind, &url), &local()).await {
            Outcome::Retry(_, e) => {
                assert!(!e.contains(SLACK_TOKEN) && !e.contains("/services/"), "{e}");
                assert!(e.contains("request failed"), "{e}");
            }
            other => panic!("{kind}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn deliveries_go_through_the_configured_egress_proxy_and_no_other() {
    let (destination, at_destination) = recorder().await;
    let (proxy, at_proxy) = recorder().await;
    let hook = format!("{destination}/hook");
    // Direct by default (whatever the environment says: see the black-box test).
    assert_eq!(
        deliver::send(&claimed("webhook", &hook), &local()).await,
        Outcome::Delivered
    );
    assert_eq!(at_destination.lock().unwrap().as_slice(), ["/hook"]);
    assert!(at_proxy.lock().unwrap().is_empty());
    // Through the configured proxy, which is handed the whole URL.
    let via_proxy = AlertSettings {
        egress_proxy: Some(SecretString::from(proxy.clone())),
        ..local()
    };
    assert_eq!(
        deliver::send(&claimed("webhook", &hook), &via_proxy).await,
        Outcome::Delivered
    );
    assert_eq!(at_proxy.lock().unwrap().as_slice(), [hook.as_str()]);
    assert_eq!(at_destination.lock().unwrap().len(), 1, "not sent twice");
    // The URL rules still hold with a proxy: a non-public literal never reaches it.
    let strict_via_proxy = AlertSettings {
        egress_proxy: Some(SecretString::from(proxy)),
        ..strict()
    };
    match deliver::send(
        &claimed("webhook", "https://[::ffff:0:127.0.0.1]/hook"),
        &strict_via_proxy,
    )
    .await
    {
        Outcome::Permanent(e) => assert!(e.contains("not a public address"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(at_proxy.lock().unwrap().len(), 1);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_alerts_page_shows_a_slack_destinations_host_and_fingerprint_never_its_url(
    pool: sqlx::PgPool,
) {
    let mut settings = IngestSettings {
        alerts: AlertSettings {
            retry_base_ms: 50,
            ..local()
        },
        ..test_settings()
    };
    settings.alerts.retry_cap_secs = 1;
    let app = spawn_app_with(pool, settings.clone()).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    // Slack's host rule is lifted by allow_private_destinations (local use): a refused connection
    // gives the notification a last error to show.
    let url = format!(
        "http://127.0.0.1:{}/services/T0/B0/{SLACK_TOKEN}",
        closed_port().await
    );
    let (s, d) = app
        .post_json(
            &admin,
            "/v1/alerts/destinations",
            json!({"kind": "slack", "url": url, "name": "team channel"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{d}");
    let (s, r) = app
        .post_json(
            &admin,
            "/v1/alerts/rules",
            json!({"kind": "session_status", "destination_id": d["destination_id"], "statuses": ["active"]}),
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
    let mut note = Value::Null;
    for _ in 0..200 {
        let (_, list) = app.get(&t.read, "/v1/alerts").await;
        note = list["alerts"][0]["notifications"][0].clone();
        if note["last_error"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let error = note["last_error"].as_str().expect("a failed attempt");
    assert!(
        !error.contains(SLACK_TOKEN),
        "the API's last error: {error}"
    );
    let cookie = app.cookie(&admin).await;
    let p = app.page(Some(&cookie), "/alerts").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("team channel"), "{}", p.body);
    assert!(
        p.body.contains(d["url_fingerprint"].as_str().unwrap()),
        "the fingerprint: {}",
        p.body
    );
    assert!(
        p.body.contains("Last error"),
        "the failed delivery: {}",
        p.body
    );
    assert!(
        !p.body.contains(SLACK_TOKEN) && !p.body.contains("/services/"),
        "the page shows the Slack URL: {}",
        p.body
    );
}
