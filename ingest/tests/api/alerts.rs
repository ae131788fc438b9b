//! Alerts: each rule kind fires once per episode and resolves; notifications reach a real HTTP receiver
//! (in this test) exactly once with two replicas delivering, signed, through failures, `Retry-After` and
//! timeouts; dead letters; destinations checked against server-side request forgery; a round claims at
//! most 16 notifications across tenants.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiary_ingest::alerts::deliver;
use apiary_ingest::config::{AlertSettings, IngestSettings};
use apiary_ingest::query::ReadDb;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::IntoResponse;
use chrono::{DateTime, NaiveTime, TimeDelta, Utc};
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::helpers::*;

/// What the receiver answers, in order; after the plan it answers 200.
#[derive(Debug, Clone, Copy)]
enum Reply {
    Status(u16),
    RetryAfter(u16, u64),
    /// Answer 200 after this long (longer than the delivery timeout: the sender gives up).
    Slow(u64),
}

/// One request the receiver got and what it answered.
#[derive(Debug, Clone)]
struct Received {
    body: Value,
    signature: Option<String>,
    answered: u16,
}

/// What the receiver's handler holds: what it got, and what it still has to answer.
type ReceiverState = (
    Arc<Mutex<Vec<Received>>>,
    Arc<Mutex<std::vec::IntoIter<Reply>>>,
);

#[derive(Clone)]
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(plan: Vec<Reply>) -> Receiver {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let plan = Arc::new(Mutex::new(plan.into_iter()));
        let state = (got.clone(), plan);
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(
                    |axum::extract::State((got, plan)): axum::extract::State<ReceiverState>,
                     headers: HeaderMap,
                     body: axum::body::Bytes| async move {
                        let reply = plan.lock().unwrap().next();
                        let signature = headers
                            .get("x-apiary-signature")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string);
                        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let (status, extra) = match reply {
                            None => (200, None),
                            Some(Reply::Status(s)) => (s, None),
                            Some(Reply::RetryAfter(s, secs)) => (s, Some(secs)),
                            Some(Reply::Slow(_)) => (200, None),
                        };
                        // A slow answer reaches no one (the sender gives up first, which drops this
                        // handler mid-sleep): it is recorded as answered 0, before the sleep.
                        let answered = if matches!(reply, Some(Reply::Slow(_))) {
                            0
                        } else {
                            status
                        };
                        got.lock().unwrap().push(Received {
                            body,
                            signature,
                            answered,
                        });
                        if let Some(Reply::Slow(ms)) = reply {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                        }
                        let mut resp = AxumStatus::from_u16(status).unwrap().into_response();
                        if let Some(secs) = extra {
                            resp.headers_mut()
                                .insert("retry-after", secs.to_string().parse().unwrap());
                        }
                        resp
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, got }
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Deliveries answered 2xx, per idempotency key.
    fn delivered(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for r in self.received() {
            if (200..300).contains(&r.answered) {
                *m.entry(r.body["idempotency_key"].as_str().unwrap_or("").to_string())
                    .or_default() += 1;
            }
        }
        m
    }

    async fn wait_for(&self, delivered: usize) {
        for _ in 0..200 {
            if self.delivered().len() >= delivered {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "expected {delivered} deliveries, got {:?}",
            self.delivered()
        );
    }
}

fn alert_settings() -> AlertSettings {
    AlertSettings {
        allow_private_destinations: true,
        egress_proxy: None,
        evaluate_secs: 1,
        max_attempts: 5,
        retry_base_ms: 50,
        retry_cap_secs: 1,
        delivery_timeout_secs: 1,
    }
}

fn settings() -> IngestSettings {
    IngestSettings {
        alerts: alert_settings(),
        ..test_settings()
    }
}

/// A notification as a webhook receives it validates against the published JSON Schema
/// (`shared-schema/schema/v1/alert-notification.schema.json`).
fn assert_published_shape(body: &Value) {
    let schema: Value =
        serde_json::from_str(apiary_schema::json_schema::ALERT_NOTIFICATION_SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{body}: {errors:?}");
}

async fn destination(app: &TestApp, admin: &str, url: &str) -> (String, String) {
    let (status, d) = app
        .post_json(
            admin,
            "/v1/alerts/destinations",
            json!({"kind": "webhook", "url": url}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{d}");
    assert!(d["has_secret"].as_bool().unwrap());
    (
        d["destination_id"].as_str().unwrap().to_string(),
        d["secret"].as_str().unwrap().to_string(),
    )
}

async fn rule(app: &TestApp, admin: &str, body: Value) -> String {
    let (status, r) = app.post_json(admin, "/v1/alerts/rules", body).await;
    assert_eq!(status, StatusCode::CREATED, "{r}");
    r["rule_id"].as_str().unwrap().to_string()
}

fn verify(secret: &str, r: &Received) {
    let sig = r.signature.as_deref().expect("signed");
    let (t, v1) = sig.split_once(",v1=").unwrap();
    let t = t.strip_prefix("t=").unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(&serde_json::to_vec(&r.body).unwrap());
    assert_eq!(hex::encode(mac.finalize().into_bytes()), v1, "signature");
}

fn db(app: &TestApp) -> ReadDb {
    ReadDb::new(
        app.pool.clone(),
        apiary_ingest::status::rules(&test_settings()),
    )
}

#[sqlx::test(migrations = "../migrations")]
async fn budget_alerts_fire_once_per_threshold_through_two_replicas_and_resolve_at_the_period_end(
    pool: sqlx::PgPool,
) {
    let a = spawn_app_with(pool.clone(), settings()).await;
    let b = spawn_app_with(pool, settings()).await;
    let t = a.tenant("acme").await;
    let admin = a.token(t.id, &["admin"]).await;
    let receiver = Receiver::start(vec![]).await;
    let (dest, secret) = destination(&a, &admin, &receiver.url).await;
    let (_, budget) = a
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"name": "team", "period": "day", "limit_usd": "1", "thresholds": [50, 100]}),
        )
        .await;
    let budget_id = budget["budget_id"].as_str().unwrap().to_string();
    rule(
        &a,
        &admin,
        json!({"kind": "budget", "destination_id": dest, "budget_id": budget_id}),
    )
    .await;
    let turn = |nanos: i64| llm("s1", Utc::now(), "m1", 10, 5, nanos as f64 / 1e9);
    // 0.6 USD through both replicas (a replay): 50% crossed once.
    let first = batch(vec![turn(600_000_000)], vec![binding("s1", "u1")]);
    a.post_batch(&t.ingest, &first).await;
    b.post_batch(&t.ingest, &first).await;
    receiver.wait_for(1).await;
    let second = batch(vec![turn(500_000_000)], vec![binding("s1", "u1")]);
    b.post_batch(&t.ingest, &second).await;
    a.post_batch(&t.ingest, &second).await;
    receiver.wait_for(2).await;
    // Several more evaluation rounds on both replicas: nothing more is sent.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let delivered = receiver.delivered();
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    assert!(delivered.values().all(|n| *n == 1), "{delivered:?}");
    let got = receiver.received();
    for r in &got {
        verify(&secret, r);
        assert_published_shape(&r.body);
        assert_eq!(r.body["event"], "firing");
        assert_eq!(r.body["alert"]["kind"], "budget");
    }
    let mut thresholds: Vec<i64> = got
        .iter()
        .map(|r| {
            r.body["alert"]["details"]["threshold_percent"]
                .as_i64()
                .unwrap()
        })
        .collect();
    thresholds.sort();
    assert_eq!(thresholds, [50, 100]);
    // The summary says the amounts in the budget's unit and when the period began.
    let full = got
        .iter()
        .find(|r| r.body["alert"]["details"]["threshold_percent"] == 100)
        .unwrap();
    let summary = full.body["alert"]["summary"].as_str().unwrap();
    assert!(summary.contains("reached 100%"), "{summary}");
    let (_, from) = summary
        .split_once(" of its daily limit: 1.10 USD of 1.00 USD (period from ")
        .unwrap_or_else(|| panic!("{summary}"));
    let start: DateTime<Utc> = budget["period_start"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        from.strip_suffix(')').map(str::parse),
        Some(Ok(start)),
        "{summary}"
    );
    // The period ends: both resolve (evaluated as of the next day), each with one notification.
    let end: DateTime<Utc> = budget["period_end"].as_str().unwrap().parse().unwrap();
    let changes = apiary_ingest::alerts::evaluate::tenant(
        &a.pool,
        &db(&a),
        t.id,
        180,
        end + TimeDelta::seconds(1),
    )
    .await
    .unwrap();
    assert_eq!((changes.fired, changes.resolved), (0, 2));
    receiver.wait_for(4).await;
    // The receiver has the four requests; each notification is marked delivered when its answer is
    // back in the ingest, a moment later: read the alerts until they say so (or time out).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, alerts) = a.get(&t.read, "/v1/alerts").await;
        assert_eq!(status, StatusCode::OK, "{alerts}");
        let alerts = alerts["alerts"].as_array().unwrap();
        assert_eq!(alerts.len(), 2);
        let states: Vec<Vec<(String, String)>> = alerts
            .iter()
            .map(|al| {
                assert_eq!(al["state"], "resolved");
                al["notifications"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| {
                        let f = |k: &str| n[k].as_str().unwrap().to_string();
                        (f("event"), f("state"))
                    })
                    .collect()
            })
            .collect();
        let want = |e: &str| (e.to_string(), "delivered".to_string());
        if states
            .iter()
            .all(|s| *s == [want("firing"), want("resolved")])
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "notifications not all delivered: {states:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(receiver.delivered().len(), 4);
    assert!(receiver.delivered().values().all(|n| *n == 1));
}

#[sqlx::test(migrations = "../migrations")]
async fn session_status_alerts_wait_their_minimum_duration_resolve_and_fire_again(
    pool: sqlx::PgPool,
) {
    let app = spawn_app_with(pool, settings()).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let receiver = Receiver::start(vec![]).await;
    let (dest, _) = destination(&app, &admin, &receiver.url).await;
    rule(
        &app,
        &admin,
        json!({"kind": "session_status", "destination_id": dest, "statuses": ["failed", "crashed"], "min_duration_secs": 5}),
    )
    .await;
    // Flapping guard: this one would need an hour in the status.
    rule(
        &app,
        &admin,
        json!({"kind": "session_status", "destination_id": dest, "statuses": ["failed"], "min_duration_secs": 3600}),
    )
    .await;
    let now = Utc::now();
    let exec = |status: &str, at: DateTime<Utc>| {
        event(
            "execution",
            Some("broken"),
            at,
            json!({ "scope": "execution", "status": status }),
        )
    };
    app.post_batch(
        &t.ingest,
        &batch(vec![exec("failed", now - TimeDelta::seconds(10))], vec![]),
    )
    .await;
    receiver.wait_for(1).await;
    let first = receiver.received()[0].body.clone();
    assert_eq!(first["alert"]["subject"], "broken");
    assert_eq!(first["alert"]["details"]["status"], "failed");
    // It runs again: resolved.
    app.post_batch(&t.ingest, &batch(vec![exec("started", now)], vec![]))
        .await;
    receiver.wait_for(2).await;
    // And fails again, a new episode: it fires again once it has lasted 5 s.
    app.post_batch(
        &t.ingest,
        &batch(vec![exec("failed", now + TimeDelta::seconds(1))], vec![]),
    )
    .await;
    receiver.wait_for(3).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let events: Vec<String> = receiver
        .received()
        .iter()
        .map(|r| r.body["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["firing", "resolved", "firing"]);
    for r in receiver.received() {
        assert_published_shape(&r.body);
    }
    let (_, alerts) = app.get(&t.read, "/v1/alerts?state=firing").await;
    assert_eq!(alerts["alerts"].as_array().unwrap().len(), 1, "{alerts}");
    // The guard fires once the stretch has lasted its hour to the second, not a second before
    // (evaluated here at those instants; a background round may hold the tenant's lock: try again).
    let since: DateTime<Utc> = receiver.received()[2].body["alert"]["details"]["since"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let db = db(&app);
    let eval = |at: DateTime<Utc>| {
        let (pool, db) = (app.pool.clone(), db.clone());
        async move {
            for _ in 0..100 {
                let c = apiary_ingest::alerts::evaluate::tenant(&pool, &db, t.id, 180, at)
                    .await
                    .unwrap();
                if c.evaluated {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("the tenant's rules were never evaluated: its lock was held every time");
        }
    };
    let c = eval(since + TimeDelta::seconds(3599)).await;
    assert_eq!((c.fired, c.resolved), (0, 0));
    let c = eval(since + TimeDelta::seconds(3600)).await;
    assert_eq!((c.fired, c.resolved), (1, 0));
}

#[sqlx::test(migrations = "../migrations")]
async fn device_offline_backlog_and_silence_rules_fire_and_resolve(pool: sqlx::PgPool) {
    let app = spawn_app_with(pool, settings()).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let receiver = Receiver::start(vec![]).await;
    let (dest, _) = destination(&app, &admin, &receiver.url).await;
    let offline = rule(
        &app,
        &admin,
        json!({"kind": "device_offline", "destination_id": dest, "backlog_events": 100}),
    )
    .await;
    let silence = rule(
        &app,
        &admin,
        json!({"kind": "silence", "destination_id": dest, "silence_hours": 24}),
    )
    .await;
    // The device worked on the two working days before tomorrow, and sends a heartbeat with a backlog.
    let later = Utc::now() + TimeDelta::hours(30);
    let days = [
        apiary_ingest::alerts::evaluate::working_days_back(later, 1),
        apiary_ingest::alerts::evaluate::working_days_back(later, 2),
    ];
    let turns: Vec<Value> = days
        .iter()
        .map(|d| llm("s1", *d + TimeDelta::hours(1), "m1", 10, 5, 0.001))
        .filter(|e| {
            e["occurred_at"]
                .as_str()
                .unwrap()
                .parse::<DateTime<Utc>>()
                .unwrap()
                < Utc::now()
        })
        .collect();
    let hb = event(
        "agent.heartbeat",
        None,
        Utc::now(),
        json!({ "backlog_events": 500 }),
    );
    let mut events = turns.clone();
    events.push(hb);
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, vec![binding("s1", "u1")]))
            .await
            .0,
        StatusCode::OK
    );
    let db = db(&app);
    let eval = |at: DateTime<Utc>| {
        let (pool, db) = (app.pool.clone(), db.clone());
        async move {
            apiary_ingest::alerts::evaluate::tenant(&pool, &db, t.id, 180, at)
                .await
                .unwrap()
        }
    };
    // Now: the backlog fires (heard just now); evaluated again, nothing new.
    receiver.wait_for(1).await;
    let c = eval(Utc::now()).await;
    assert_eq!((c.fired, c.resolved), (0, 0));
    let (_, alerts) = app.get(&t.read, "/v1/alerts").await;
    let list = alerts["alerts"].as_array().unwrap().clone();
    assert_eq!(list.len(), 1, "{alerts}");
    assert_eq!(list[0]["rule_id"], offline.as_str());
    assert!(list[0]["summary"]
        .as_str()
        .unwrap()
        .contains("500 events waiting"));
    // Ten minutes on without a word: offline (the backlog episode resolves into it).
    let c = eval(Utc::now() + TimeDelta::minutes(10)).await;
    assert_eq!((c.fired, c.resolved), (1, 1));
    // 30 hours on: silent after working days, if it worked on two of them (a weekend between may leave
    // only one before now; then the rule must stay quiet).
    let c = eval(later).await;
    let worked_days = turns.len();
    assert_eq!(
        c.fired,
        usize::from(worked_days >= 2),
        "worked {worked_days} days"
    );
    // The device speaks again: offline and silence resolve.
    app.post_batch(&t.ingest, &heartbeat_batch()).await;
    let c = eval(Utc::now()).await;
    assert_eq!(c.resolved, 1 + usize::from(worked_days >= 2));
    let (_, firing) = app.get(&t.read, "/v1/alerts?state=firing").await;
    assert_eq!(firing["alerts"], json!([]), "{firing}");
    // At the start of the day it was found silent on, but less than the rule's 24 hours after its last
    // word, the device is offline and not silent. (That start is less than 23 hours away when the test
    // starts between 01:00 and 18:00 UTC; at other hours this is not checked.)
    let spoke = Utc::now();
    let day_start = later.date_naive().and_time(NaiveTime::MIN).and_utc();
    if day_start - spoke < TimeDelta::hours(23) {
        let c = eval(day_start).await;
        assert_eq!((c.fired, c.resolved), (1, 0), "only the offline rule fires");
    }
    let _ = silence;
}

#[sqlx::test(migrations = "../migrations")]
async fn deliveries_retry_through_failures_honour_retry_after_and_end_dead(pool: sqlx::PgPool) {
    let app = spawn_app_with(pool, settings()).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    // 500, then 429 with Retry-After: 1, then an answer slower than the 1 s timeout, then 200.
    let flaky = Receiver::start(vec![
        Reply::Status(500),
        Reply::RetryAfter(429, 1),
        Reply::Slow(1500),
    ])
    .await;
    let broken = Receiver::start(vec![Reply::Status(503); 20]).await;
    let gone = Receiver::start(vec![Reply::Status(404); 20]).await;
    let mut rules = vec![];
    for r in [&flaky, &broken, &gone] {
        let (dest, secret) = destination(&app, &admin, &r.url).await;
        rules.push((
            rule(
                &app,
                &admin,
                json!({"kind": "session_status", "destination_id": dest, "statuses": ["failed"]}),
            )
            .await,
            secret,
        ));
    }
    let started = std::time::Instant::now();
    app.post_batch(
        &t.ingest,
        &batch(
            vec![event(
                "execution",
                Some("s1"),
                Utc::now(),
                json!({ "scope": "execution", "status": "failed" }),
            )],
            vec![],
        ),
    )
    .await;
    flaky.wait_for(1).await;
    let took = started.elapsed();
    let got = flaky.received();
    assert_eq!(
        got.iter().map(|r| r.answered).collect::<Vec<_>>(),
        [500, 429, 0, 200]
    );
    // Retry-After held the third attempt back at least a second after the second.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    let keys: std::collections::BTreeSet<&str> = got
        .iter()
        .map(|r| r.body["idempotency_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 1, "every attempt carries the same key");
    for r in &got {
        verify(&rules[0].1, r);
    }
    // The always-failing receiver: 5 attempts, then dead; the 404: one attempt, dead; the flaky one's
    // 200 recorded (its answer reaches the receiver before the deliverer writes it down).
    for _ in 0..100 {
        let (dead, delivered): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE state = 'dead'), count(*) FILTER (WHERE state = 'delivered')
             FROM notifications",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if (dead, delivered) == (2, 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(broken.received().len(), 5);
    assert_eq!(gone.received().len(), 1);
    let (_, alerts) = app.get(&t.read, "/v1/alerts").await;
    let mut notes: Vec<(String, i64, String)> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let n = &a["notifications"][0];
            (
                n["state"].as_str().unwrap().to_string(),
                n["attempts"].as_i64().unwrap(),
                n["last_error"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    notes.sort();
    assert_eq!((notes[0].0.as_str(), notes[0].1), ("dead", 1), "{notes:?}");
    assert!(notes[0].2.contains("404"), "{notes:?}");
    assert_eq!((notes[1].0.as_str(), notes[1].1), ("dead", 5), "{notes:?}");
    assert!(notes[1].2.contains("503"), "{notes:?}");
    assert_eq!(
        (notes[2].0.as_str(), notes[2].1),
        ("delivered", 4),
        "{notes:?}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn private_destinations_are_refused_at_creation_and_again_at_delivery(pool: sqlx::PgPool) {
    // Without the operator's permission.
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    for url in [
        "http://hooks.example.com/x",
        "https://127.0.0.1/x",
        "https://localhost:8443/x",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/x",
        "https://10.0.0.7/x",
    ] {
        let (status, err) = app
            .post_json(
                &admin,
                "/v1/alerts/destinations",
                json!({"kind": "webhook", "url": url}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {err}");
        assert_eq!(err["error"]["code"], "invalid_alert");
    }
    let (status, _) = app
        .post_json(
            &admin,
            "/v1/alerts/destinations",
            json!({"kind": "slack", "url": "https://hooks.example.com/services/x"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(app.count("alert_destinations").await, 0);
    // Read tokens cannot write; user-bound read tokens cannot list.
    let (status, _) = app
        .post_json(
            &t.read,
            "/v1/alerts/rules",
            json!({"kind": "silence", "destination_id": "x"}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let u1 = app.tenant_token_for_user(t.id, "u1").await;
    assert_eq!(app.get(&u1, "/v1/alerts").await.0, StatusCode::FORBIDDEN);
    // A name that resolves to loopback at delivery time (DNS checked when sending, not only when stored).
    let c = deliver::Claimed {
        tenant_id: t.id,
        notification_id: "nt_x".into(),
        payload: json!({"idempotency_key": "k"}),
        attempts: 1,
        kind: "webhook".into(),
        url: "https://localhost/x".into(),
        secret: None,
    };
    let strict = AlertSettings {
        allow_private_destinations: false,
        ..alert_settings()
    };
    match deliver::send(&c, &strict).await {
        deliver::Outcome::Permanent(e) => assert!(e.contains("not a public"), "{e}"),
        other => panic!("{other:?}"),
    }
    // Bad rules name their field.
    let receiver_url = "https://hooks.example.com/apiary";
    let (_, d) = app
        .post_json(
            &admin,
            "/v1/alerts/destinations",
            json!({"kind": "webhook", "url": receiver_url, "secret": "0123456789abcdef"}),
        )
        .await;
    assert!(d.get("secret").is_none(), "a given secret is never echoed");
    let dest = d["destination_id"].as_str().unwrap();
    for (body, needle) in [
        (
            json!({"kind": "budget", "destination_id": dest, "statuses": ["failed"]}),
            "statuses",
        ),
        (
            json!({"kind": "session_status", "destination_id": dest}),
            "statuses",
        ),
        (
            json!({"kind": "session_status", "destination_id": dest, "statuses": ["sad"]}),
            "statuses",
        ),
        (
            json!({"kind": "budget", "destination_id": dest, "budget_id": "bu_nope"}),
            "budget_id",
        ),
        (
            json!({"kind": "silence", "destination_id": "ad_nope"}),
            "destination_id",
        ),
        (
            json!({"kind": "silence", "destination_id": dest, "silence_hours": 0}),
            "silence_hours",
        ),
        (json!({"kind": "weather", "destination_id": dest}), "kind"),
    ] {
        let (status, err) = app
            .post_json(&admin, "/v1/alerts/rules", body.clone())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(needle),
            "{body}: {err}"
        );
    }
}

/// Queues `n` firing notifications for `tenant` (a destination, a rule and an alert for them to belong
/// to), due since `due_mins` minutes.
async fn queue(pool: &sqlx::PgPool, tenant: uuid::Uuid, n: i64, due_mins: i32) {
    for sql in [
        "INSERT INTO alert_destinations (tenant_id, destination_id, kind, url, secret)
         VALUES ($1, 'ad_1', 'webhook', 'http://127.0.0.1:9/hook', 'secret')",
        "INSERT INTO alert_rules (tenant_id, rule_id, kind, destination_id, statuses)
         VALUES ($1, 'ar_1', 'session_status', 'ad_1', ARRAY['failed'])",
        "INSERT INTO alerts (tenant_id, alert_id, rule_id, episode, subject, state, summary)
         VALUES ($1, 'al_1', 'ar_1', 's1', 's1', 'firing', 'session s1 failed')",
    ] {
        sqlx::query(sql).bind(tenant).execute(pool).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO notifications (tenant_id, notification_id, alert_id, destination_id, event,
             idempotency_key, payload, next_attempt_at)
         SELECT $1, 'an_' || g, 'al_1', 'ad_1', 'firing', 'al_1:firing:' || g, '{}',
             now() - make_interval(mins => $3)
         FROM generate_series(1, $2) AS g",
    )
    .bind(tenant)
    .bind(n)
    .bind(due_mins)
    .execute(pool)
    .await
    .unwrap();
}

/// A round claims at most 16 notifications however many tenants have some due: the longest-due
/// tenant's first, then as many of the next one's as there is room left; the rest wait for the next
/// round, and what was claimed is not claimed again while its lease holds. No server runs here, so no
/// deliverer claims alongside the test.
#[sqlx::test(migrations = "../migrations")]
async fn a_round_claims_at_most_sixteen_notifications_across_tenants(pool: sqlx::PgPool) {
    use apiary_ingest::store::admin::create_tenant;
    citus_prepare(&pool).await;
    let acme = create_tenant(&pool, "acme").await.unwrap();
    let globex = create_tenant(&pool, "globex").await.unwrap();
    queue(&pool, acme, 12, 10).await;
    queue(&pool, globex, 12, 5).await;
    let lease = Duration::from_secs(60);
    let per_tenant = |claimed: &[deliver::Claimed]| {
        [acme, globex].map(|t| claimed.iter().filter(|c| c.tenant_id == t).count())
    };
    let first = deliver::claim(&pool, lease).await.unwrap();
    assert_eq!(per_tenant(&first), [12, 4], "the first round");
    let second = deliver::claim(&pool, lease).await.unwrap();
    assert_eq!(per_tenant(&second), [0, 8], "the second round");
    let third = deliver::claim(&pool, lease).await.unwrap();
    assert!(
        third.is_empty(),
        "claimed again within the lease: {third:?}"
    );
}
