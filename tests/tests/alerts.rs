//! Budget alerts end to end, with the real binaries: two `apiary-ingest serve` replicas on one database,
//! a budget, a webhook destination and a rule made with the command line, batches (and their replays)
//! through both replicas crossing 50% and 80%, a receiver that fails while one replica is SIGKILLed and
//! restarted, then recovers: each crossing is delivered exactly once (one 2xx per idempotency key), every
//! attempt of a notification carries the same key, and nothing more arrives afterwards.
//!
//! And an ingest whose environment names a proxy (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, a loopback
//! listener here) delivers straight to the destination: the listener receives nothing, until the
//! operator names it in Apiary's own settings (`alerts.egress_proxy`).

use std::time::Duration;

use tests::fixture;
use tests::procs::last_line;
use tests::receiver::{Mode, Receiver};
use tests::stack::{ingest_cli, migrate, Api, Ingest, Tenant};

const DEVICE: &str = "dev-alerts";

fn alert_env() -> Vec<(&'static str, &'static str)> {
    vec![
        // The receiver is on loopback, over http: allowed here only.
        ("APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS", "true"),
        ("APIARY_ALERTS_EVALUATE_SECS", "1"),
        ("APIARY_ALERTS_RETRY_BASE_MS", "200"),
        ("APIARY_ALERTS_RETRY_CAP_SECS", "1"),
        ("APIARY_ALERTS_DELIVERY_TIMEOUT_SECS", "2"),
    ]
}

async fn wait(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_budget_crossing_is_delivered_once_through_failures_two_replicas_and_a_restart() {
    let db = tests::db::TestDb::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(Mode::Fail(503)).await.unwrap();
    let (url, hook) = (db.url.clone(), receiver.url.clone());
    let tenant = tokio::task::spawn_blocking(move || -> anyhow::Result<Tenant> {
        migrate(&url)?;
        let t = Tenant::create(&url, "acme")?;
        let env_free = |args: &[&str]| ingest_cli(&url, args).map(|o| last_line(&o));
        let budget = env_free(&[
            "budget",
            "create",
            "--tenant",
            &t.id,
            "--period",
            "day",
            "--limit-usd",
            "0.01",
            "--thresholds",
            "50,80",
            "--name",
            "demo",
        ])?;
        anyhow::ensure!(budget.starts_with("bu_"), "budget create: {budget}");
        // The command line checks destinations like the API: a loopback http URL needs the operator's
        // permission (here, through the environment of this one command).
        let refused = ingest_cli(
            &url,
            &[
                "alert",
                "destination",
                "create",
                "--tenant",
                &t.id,
                "--kind",
                "webhook",
                "--url",
                &hook,
            ],
        );
        anyhow::ensure!(refused.is_err(), "a loopback destination was accepted");
        let mut cmd = std::process::Command::new(tests::bins::path("apiary-ingest"));
        cmd.args([
            "alert",
            "destination",
            "create",
            "--tenant",
            &t.id,
            "--kind",
            "webhook",
            "--url",
            &hook,
        ])
        .env("DATABASE_URL", &url)
        .env("APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS", "true")
        .env("RUST_LOG", "warn");
        let dest = last_line(&tests::procs::run(&mut cmd)?);
        anyhow::ensure!(dest.starts_with("ad_"), "destination create: {dest}");
        let rule = env_free(&[
            "alert",
            "rule",
            "create",
            "--tenant",
            &t.id,
            "--kind",
            "budget",
            "--destination",
            &dest,
            "--budget",
            &budget,
        ])?;
        anyhow::ensure!(rule.starts_with("ar_"), "rule create: {rule}");
        Ok(t)
    })
    .await
    .unwrap()
    .unwrap();
    let env = alert_env();
    let mut a = Ingest::start_with(&db.url, dir.path(), &env).await.unwrap();
    let b = Ingest::start_with(&db.url, dir.path(), &env).await.unwrap();
    let apis = [
        Api::new(&a.url(), &tenant.ingest_token),
        Api::new(&b.url(), &tenant.ingest_token),
    ];

    // 5 turns of 0.001 USD (50%), then 3 more (80%), each batch sent through both replicas.
    for (seq0, n) in [(0, 5), (5, 3)] {
        let body = fixture::batch_body(&fixture::synthetic_canonical("s1", seq0, n), DEVICE);
        for api in &apis {
            let (code, v) = api.post_batch(&body).await.unwrap();
            assert_eq!(code, 200, "{v}");
        }
    }
    // The receiver fails: both notifications are being retried.
    wait("two failed attempts of each notification", || {
        let got = receiver.received();
        let keys: std::collections::BTreeSet<String> = got
            .iter()
            .map(|r| r.body["idempotency_key"].as_str().unwrap_or("").to_string())
            .collect();
        keys.len() == 2 && got.len() >= 4
    })
    .await;
    // One replica dies mid-retries and comes back; then the receiver recovers.
    a.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.restart().await.unwrap();
    receiver.set(Mode::Accept);
    wait("both crossings delivered", || {
        receiver.delivered().len() == 2
    })
    .await;
    // Several more evaluation and delivery rounds on both replicas: nothing more arrives.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let delivered = receiver.delivered();
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    assert!(
        delivered.values().all(|n| *n == 1),
        "exactly one successful delivery per key: {delivered:?}"
    );
    let got = receiver.received();
    assert!(got.iter().all(|r| r
        .header("x-apiary-signature")
        .is_some_and(|s| s.starts_with("t="))));
    let mut thresholds: Vec<i64> = got
        .iter()
        .filter(|r| r.answered == 200)
        .map(|r| {
            r.body["alert"]["details"]["threshold_percent"]
                .as_i64()
                .unwrap()
        })
        .collect();
    thresholds.sort();
    assert_eq!(thresholds, [50, 80]);
    // The API agrees: two firing alerts, each notification delivered.
    let admin = Api::new(&b.url(), &tenant.read_token);
    let alerts = admin.get_ok("/v1/alerts").await.unwrap();
    let list = alerts["alerts"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{alerts}");
    for al in list {
        assert_eq!(al["state"], "firing");
        assert_eq!(al["notifications"][0]["state"], "delivered", "{al}");
    }
    let budgets = admin.get_ok("/v1/budgets").await.unwrap();
    assert_eq!(budgets["budgets"][0]["spent"], 8_000_000, "{budgets}");
    drop(b);
}

/// Every proxy variable reqwest and curl read, in both spellings, naming `proxy`; none exempted.
fn environment_proxy(proxy: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k.to_string(), proxy.to_string()))
    .collect();
    env.extend(["NO_PROXY", "no_proxy"].map(|k| (k.to_string(), String::new())));
    env
}

/// `alert_env()` plus `extra`, as `Ingest::start_with` takes it.
fn with_env(extra: &[(String, String)]) -> Vec<(&str, &str)> {
    let mut env = alert_env();
    env.extend(extra.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    env
}

/// One session's turns through `api`, as its agent would push them.
async fn session(api: &Api, id: &str) {
    let body = fixture::batch_body(&fixture::synthetic_canonical(id, 0, 1), DEVICE);
    let (code, v) = api.post_batch(&body).await.unwrap();
    assert_eq!(code, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_never_go_through_the_environments_proxy_only_through_the_configured_one() {
    let db = tests::db::TestDb::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(Mode::Accept).await.unwrap();
    // A loopback listener posing as the corporate proxy: it records what it is sent and answers 200,
    // as a proxy that forwarded the request would.
    let proxy = Receiver::start(Mode::Accept).await.unwrap();
    let proxy_url = proxy.url.trim_end_matches("/hook").to_string();
    // The listener does receive what a client that uses the proxy sends.
    let honouring = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&proxy_url).unwrap())
        .build()
        .unwrap();
    let sent = honouring
        .post(&receiver.url)
        .json(&serde_json::json!({"idempotency_key": "calibration"}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    assert_eq!((proxy.received().len(), receiver.received().len()), (1, 0));

    let (url, hook) = (db.url.clone(), receiver.url.clone());
    let tenant = tokio::task::spawn_blocking(move || -> anyhow::Result<Tenant> {
        migrate(&url)?;
        let t = Tenant::create(&url, "acme")?;
        let mut cmd = std::process::Command::new(tests::bins::path("apiary-ingest"));
        cmd.args(["alert", "destination", "create", "--tenant", &t.id])
            .args(["--kind", "webhook", "--url", &hook])
            .env("DATABASE_URL", &url)
            .env("APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS", "true")
            .env("RUST_LOG", "warn");
        let dest = last_line(&tests::procs::run(&mut cmd)?);
        anyhow::ensure!(dest.starts_with("ad_"), "destination create: {dest}");
        let rule = last_line(&ingest_cli(
            &url,
            &[
                "alert",
                "rule",
                "create",
                "--tenant",
                &t.id,
                "--kind",
                "session_status",
                "--destination",
                &dest,
                "--statuses",
                "active,waiting,idle,degraded,stalled,needs_attention,failed,completed",
            ],
        )?);
        anyhow::ensure!(rule.starts_with("ar_"), "rule create: {rule}");
        Ok(t)
    })
    .await
    .unwrap()
    .unwrap();

    // An ingest on a host whose environment names a proxy: the notification goes straight to the
    // receiver, and the proxy gets nothing.
    let env = environment_proxy(&proxy_url);
    let mut a = Ingest::start_with(&db.url, dir.path(), &with_env(&env))
        .await
        .unwrap();
    session(&Api::new(&a.url(), &tenant.ingest_token), "s-env").await;
    wait("the first notification sent somewhere", || {
        receiver.delivered().len() + proxy.received().len() > 1
    })
    .await;
    assert_eq!(
        proxy.received().len(),
        1,
        "the environment's proxy was used: {:?}",
        proxy.received().last().map(|r| &r.body)
    );
    assert_eq!(receiver.delivered().len(), 1);
    a.kill();

    // The operator's own setting: then, and only then, notifications go through the proxy.
    let mut configured = env.clone();
    configured.push(("APIARY_ALERTS_EGRESS_PROXY".into(), proxy_url.clone()));
    let b = Ingest::start_with(&db.url, dir.path(), &with_env(&configured))
        .await
        .unwrap();
    session(&Api::new(&b.url(), &tenant.ingest_token), "s-configured").await;
    wait(
        "the second notification through the configured proxy",
        || proxy.received().len() > 1,
    )
    .await;
    let through = proxy.received()[1].clone();
    assert!(
        through.body["idempotency_key"]
            .as_str()
            .is_some_and(|k| k.starts_with("al_")),
        "{:?}",
        through.body
    );
    assert!(through.header("x-apiary-signature").is_some());
    assert_eq!(
        receiver.delivered().len(),
        1,
        "the configured proxy, not both"
    );
    drop(b);
}

/// Checks `X-Apiary-Signature` the way the docs tell a receiver to: `t=<unix>,v1=<hex HMAC-SHA256(secret,
/// "<t>.<body>")>` over the body's bytes as received, and `t` no older (nor further ahead) than
/// `window` — `Err` with the reason otherwise.
fn verify_signature(
    secret: &str,
    header: Option<&str>,
    raw: &[u8],
    now: i64,
    window: i64,
) -> Result<(), String> {
    use hmac::{Hmac, Mac};
    let header = header.ok_or("no X-Apiary-Signature")?;
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => v1 = hex::decode(v).ok(),
            _ => {}
        }
    }
    let (t, v1) = (t.ok_or("no t")?, v1.ok_or("no v1")?);
    if (now - t).abs() > window {
        return Err(format!("t={t} is {}s from now", now - t));
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(raw);
    mac.verify_slice(&v1)
        .map_err(|_| "the HMAC does not match".to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_signed_over_the_raw_body_now_and_a_redirect_is_never_followed() {
    const SECRET: &str = "whsec-receiver-checks-this-0123456789";
    const WINDOW: i64 = 300;
    let db = tests::db::TestDb::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(Mode::Accept).await.unwrap();
    // A receiver that answers 302 towards a second loopback listener, which must receive nothing.
    let elsewhere = Receiver::start(Mode::Accept).await.unwrap();
    let to: &'static str = Box::leak(elsewhere.url.clone().into_boxed_str());
    let redirecting = Receiver::start(Mode::Redirect(to)).await.unwrap();
    let url = db.url.clone();
    let tenant = tokio::task::spawn_blocking(move || -> anyhow::Result<Tenant> {
        migrate(&url)?;
        Tenant::create(&url, "acme")
    })
    .await
    .unwrap()
    .unwrap();
    let a = Ingest::start_with(&db.url, dir.path(), &alert_env())
        .await
        .unwrap();
    let admin = Api::new(&a.url(), &tenant.admin_token);
    let http = tests::stack::client();
    let mut rules = vec![];
    for (hook, secret) in [(&receiver.url, Some(SECRET)), (&redirecting.url, None)] {
        let mut d = serde_json::json!({"kind": "webhook", "url": hook});
        if let Some(s) = secret {
            d["secret"] = s.into();
        }
        let dest: serde_json::Value = http
            .post(format!("{}/v1/alerts/destinations", a.url()))
            .bearer_auth(&admin.token)
            .json(&d)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let dest = dest["destination_id"].as_str().expect("a destination id");
        let rule: serde_json::Value = http
            .post(format!("{}/v1/alerts/rules", a.url()))
            .bearer_auth(&admin.token)
            .json(
                &serde_json::json!({"kind": "session_status", "destination_id": dest,
                "statuses": ["active", "waiting", "idle", "completed"]}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        rules.push(rule["rule_id"].as_str().expect("a rule id").to_string());
    }
    session(&Api::new(&a.url(), &tenant.ingest_token), "s-signed").await;
    wait("a signed notification delivered", || {
        !receiver.delivered().is_empty()
    })
    .await;
    wait("the redirecting receiver asked", || {
        !redirecting.received().is_empty()
    })
    .await;
    // Time for a retry or two (and for a followed redirect to arrive).
    tokio::time::sleep(Duration::from_secs(3)).await;

    let now = chrono::Utc::now().timestamp();
    for r in receiver.received() {
        let sig = r.header("x-apiary-signature");
        verify_signature(SECRET, sig, &r.raw, now, WINDOW).unwrap_or_else(|why| {
            panic!("{why}: {sig:?} over {}", String::from_utf8_lossy(&r.raw))
        });
        // The check itself refuses what it must: another body, another secret, a stale t.
        let mut tampered = r.raw.clone();
        tampered.push(b' ');
        assert!(verify_signature(SECRET, sig, &tampered, now, WINDOW).is_err());
        assert!(verify_signature("another", sig, &r.raw, now, WINDOW).is_err());
        assert!(verify_signature(SECRET, sig, &r.raw, now + WINDOW + 60, WINDOW).is_err());
    }
    assert!(
        elsewhere.received().is_empty(),
        "the 302 was followed to {}",
        elsewhere.url
    );
    let alerts = admin.get_ok("/v1/alerts").await.unwrap();
    let redirected: Vec<&serde_json::Value> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|al| al["rule_id"] == rules[1].as_str())
        .collect();
    assert!(!redirected.is_empty(), "{alerts}");
    for al in redirected {
        for n in al["notifications"].as_array().unwrap() {
            assert_ne!(n["state"], "delivered", "a 302 counted as delivered: {al}");
        }
    }
}
