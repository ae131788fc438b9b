//! The push cadence the ingest sets: every batch answer carries `push_interval_ms`; load stretches it;
//! past the bound on batches in flight a batch is answered 429 with `Retry-After` before its body is read;
//! the bound follows the latency.

use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::helpers::*;

/// A batch request whose body is held half-sent until `release` fires: it stays in flight.
fn held_batch(
    app: &TestApp,
    token: &str,
    body: Vec<u8>,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<(StatusCode, Value)>,
) {
    let (release, released) = oneshot::channel::<()>();
    let (head, tail) = body.split_at(body.len() / 2);
    let (head, tail) = (
        bytes::Bytes::copy_from_slice(head),
        bytes::Bytes::copy_from_slice(tail),
    );
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(head) }).chain(
        futures::stream::once(async move {
            let _ = released.await;
            Ok::<_, std::io::Error>(tail)
        }),
    );
    let request = app
        .client
        .post(format!("{}/v1/batches", app.base))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(stream));
    let task = tokio::spawn(async move {
        let resp = request.send().await.unwrap();
        let status = resp.status();
        (status, resp.json::<Value>().await.unwrap_or(Value::Null))
    });
    (release, task)
}

/// The ingest's `/metrics` text.
async fn scrape(app: &TestApp) -> String {
    let url = format!("{}/metrics", app.base);
    app.client
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the sample `name` (without labels) in a `/metrics` text.
fn metric(text: &str, name: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} in {text}"));
    line[name.len() + 1..].parse().unwrap()
}

fn one_tool_batch(session: &str) -> Vec<u8> {
    serde_json::to_vec(&batch(vec![tool(session, Utc::now(), false)], vec![])).unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn batches_in_flight_stretch_the_interval_and_past_the_bound_are_answered_429(
    pool: sqlx::PgPool,
) {
    let app = spawn_app_with(
        pool,
        apiary_ingest::config::IngestSettings {
            max_batches_in_flight: 4,
            // The rule's steps, not the default: 2 s at rest keeps a second raise out of the test's time.
            cadence_base_ms: 2_000,
            ..test_settings()
        },
    )
    .await;
    let t = app.tenant("acme").await;
    let (s, v) = app.post_raw(&t.ingest, one_tool_batch("calm"), None).await;
    assert_eq!(
        (s, v["push_interval_ms"].as_u64()),
        (StatusCode::OK, Some(2000)),
        "{v}"
    );

    // Three of four in flight (more than half): load. A fourth fills the bound.
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(held_batch(
            &app,
            &t.ingest,
            one_tool_batch(&format!("held-{i}")),
        ));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = app
        .client
        .post(format!("{}/v1/batches", app.base))
        .bearer_auth(&t.ingest)
        .header("content-type", "application/json")
        .body(one_tool_batch("refused"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // Drawn from one second up to the interval in force: 2 s at rest, 4 s if the window with four in
    // flight has closed meanwhile (its load raised the level).
    assert!((1..=4).contains(&retry), "Retry-After {retry}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "overloaded", "{body}");

    // The window with four in flight ends: the next answers ask for twice the base (with a jitter).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let mut answers = Vec::new();
    for (release, task) in held {
        let _ = release.send(());
        answers.push(task.await.unwrap());
    }
    for (s, v) in &answers {
        assert_eq!(*s, StatusCode::OK, "{v}");
        assert_eq!(v["accepted"], 1, "{v}");
    }
    let (s, v) = app.post_raw(&t.ingest, one_tool_batch("after"), None).await;
    assert_eq!(s, StatusCode::OK);
    let asked = v["push_interval_ms"].as_u64().unwrap();
    // Level 1: 4 s, and this device's own 75–125% of it.
    assert!((3_000..5_000).contains(&asked), "{v}");
    // Nothing refused was stored, everything answered 200 was.
    assert_eq!(app.count("events").await, 6);
}

/// The bound in force follows the latency: batches the database holds up past the target bring it
/// under what was in flight, so the next burst is partly refused at once instead of queueing behind the
/// rest; operators see the bound and the interval in `/metrics`.
#[sqlx::test(migrations = "../migrations")]
async fn batches_held_up_by_the_database_bring_the_bound_in_flight_down(pool: sqlx::PgPool) {
    let app = spawn_app_with(
        pool.clone(),
        apiary_ingest::config::IngestSettings {
            max_batches_in_flight: 16,
            min_batches_in_flight: 2,
            cadence_base_ms: 2_000,
            ..test_settings()
        },
    )
    .await;
    let t = app.tenant("acme").await;
    let text = scrape(&app).await;
    assert_eq!(metric(&text, "apiary_ingest_batches_in_flight_bound"), 16.0);
    assert_eq!(metric(&text, "apiary_ingest_push_interval_seconds"), 2.0);

    // Twelve batches at once against a slow database: the events table locked for half a second while
    // they arrive; each taken waits at its insert, far past the 100 ms target. Their answers.
    let burst = |tag: &'static str| {
        let (app, t, pool) = (&app, &t, &pool);
        async move {
            let mut lock = pool.begin().await.unwrap();
            sqlx::query("LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
                .execute(&mut *lock)
                .await
                .unwrap();
            let tasks: Vec<_> = (0..12)
                .map(|i| {
                    let (client, base, token) =
                        (app.client.clone(), app.base.clone(), t.ingest.clone());
                    let body = one_tool_batch(&format!("{tag}-{i}"));
                    tokio::spawn(async move {
                        let r = client
                            .post(format!("{base}/v1/batches"))
                            .bearer_auth(token)
                            .header("content-type", "application/json")
                            .body(body)
                            .send()
                            .await
                            .unwrap();
                        r.status()
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(500)).await;
            lock.commit().await.unwrap();
            let mut statuses = Vec::new();
            for task in tasks {
                statuses.push(task.await.unwrap());
            }
            statuses
        }
    };
    // The first: each is taken (the bound is 16).
    assert_eq!(burst("slow").await, [StatusCode::OK; 12]);
    let answered = std::time::Instant::now();
    // Once their window has closed the bound is three quarters of twelve (a window boundary among
    // their answers would cut it to between half the ceiling and that), and the slow second raised the
    // level: 4 s. The bound grows back by one a second at most: a scrape that a busy machine delays
    // past the 1.1 s may see it grown by as many.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let text = scrape(&app).await;
    let late = (answered.elapsed().as_secs_f64() - 1.1).max(0.0).ceil();
    let bound = metric(&text, "apiary_ingest_batches_in_flight_bound");
    assert!((2.0..=9.0 + late).contains(&bound), "{text}");
    assert_eq!(metric(&text, "apiary_ingest_push_interval_seconds"), 4.0);

    // The same burst against the same slow database: past the bound (it grows by one a second at
    // most from here) some are answered 429 at once; the others are stored once it is released.
    let statuses = burst("again").await;
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    let stored = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert!(refused >= 1 && refused + stored == 12, "{statuses:?}");
    let text = scrape(&app).await;
    assert_eq!(
        metric(&text, "apiary_ingest_batches_overloaded_total"),
        refused as f64
    );
    // Nothing refused was stored, everything answered 200 was.
    assert_eq!(app.count("events").await, 12 + stored as i64);
}

/// One token cannot hold the whole bound (e.g. by sending its bodies slowly on purpose): past its share
/// its batches are answered 429 before their bodies are read, another token's are taken meanwhile, and
/// those refusals are not the node's load.
#[sqlx::test(migrations = "../migrations")]
async fn a_token_past_its_share_of_the_batches_in_flight_is_refused_while_others_are_taken(
    pool: sqlx::PgPool,
) {
    let app = spawn_app_with(
        pool,
        apiary_ingest::config::IngestSettings {
            max_batches_in_flight_per_token: 3,
            ..test_settings()
        },
    )
    .await;
    let (t, other) = (app.tenant("acme").await, app.tenant("globex").await);
    let held: Vec<_> = (0..3)
        .map(|i| held_batch(&app, &t.ingest, one_tool_batch(&format!("slow-{i}"))))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..5 {
        let resp = app
            .client
            .post(format!("{}/v1/batches", app.base))
            .bearer_auth(&t.ingest)
            .header("content-type", "application/json")
            .body(one_tool_batch(&format!("more-{i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], "1");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "overloaded", "{body}");
    }
    let (s, v) = app
        .post_raw(&other.ingest, one_tool_batch("other"), None)
        .await;
    assert_eq!(
        (s, v["accepted"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    // Five refusals (three at least in one second) would be load if the node's bound had refused them: the interval
    // asked after it is still the one at rest.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let (s, v) = app
        .post_raw(&other.ingest, one_tool_batch("other-later"), None)
        .await;
    assert_eq!(
        (s, v["push_interval_ms"].as_u64()),
        (StatusCode::OK, Some(1000)),
        "{v}"
    );

    for (release, task) in held {
        let _ = release.send(());
        let (s, v) = task.await.unwrap();
        assert_eq!(
            (s, v["accepted"].as_u64()),
            (StatusCode::OK, Some(1)),
            "{v}"
        );
    }
    let (s, _) = app.post_raw(&t.ingest, one_tool_batch("after"), None).await;
    assert_eq!(
        s,
        StatusCode::OK,
        "the token's share is free once its batches end"
    );
    let text = scrape(&app).await;
    assert_eq!(
        metric(&text, "apiary_ingest_batches_over_token_share_total"),
        5.0
    );
    assert_eq!(metric(&text, "apiary_ingest_batches_overloaded_total"), 0.0);
    assert_eq!(app.count("events").await, 6);
}
