//! The push cadence the ingest sets: every batch answer carries `push_interval_ms`; load stretches it;
//! past `max_batches_in_flight` a batch is answered 429 with `Retry-After` before its body is read.

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
    // Drawn from one second up to the interval in force (2 s at rest).
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
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

/// The bound in force follows the latency: batches that take longer than the target bring it down to
/// three quarters of what was in flight, so the next burst is refused sooner instead of queueing.
#[sqlx::test(migrations = "../migrations")]
async fn slow_batches_bring_the_bound_in_flight_down_to_three_quarters_of_what_was_in_flight(
    pool: sqlx::PgPool,
) {
    let app = spawn_app_with(
        pool,
        apiary_ingest::config::IngestSettings {
            max_batches_in_flight: 64,
            min_batches_in_flight: 2,
            // Every batch held half-sent is slow against 1 ms.
            cadence_target_ms: 1,
            ..test_settings()
        },
    )
    .await;
    let t = app.tenant("acme").await;
    // Twelve in flight at once, each held past the target: the bound is still the ceiling.
    let held: Vec<_> = (0..12)
        .map(|i| held_batch(&app, &t.ingest, one_tool_batch(&format!("slow-{i}"))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (release, task) in held {
        let _ = release.send(());
        let (s, v) = task.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    // The window of those twelve closes: twelve slow of twelve, so the bound is nine.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let held: Vec<_> = (0..9)
        .map(|i| held_batch(&app, &t.ingest, one_tool_batch(&format!("next-{i}"))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = app.post_raw(&t.ingest, one_tool_batch("tenth"), None).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["error"]["code"], "overloaded", "{v}");
    // Operators see the bound in force (and the level's interval: one loaded second, 4 s).
    let text = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("\napiary_ingest_batches_in_flight_bound 9\n"),
        "{text}"
    );
    assert!(
        text.contains("\napiary_ingest_push_interval_seconds 4.0\n"),
        "{text}"
    );
    for (release, task) in held {
        let _ = release.send(());
        let (s, v) = task.await.unwrap();
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    // Twelve and nine stored, the refused one not.
    assert_eq!(app.count("events").await, 21);
}
