//! /v1/usage buckets in any zone, across DST, and in half- and quarter-hour zones.

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::*;

fn buckets(v: &Value) -> Vec<(String, i64)> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["bucket"].as_str().unwrap().to_string(),
                r["events"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn day_buckets_follow_the_zone_across_the_fall_back_change(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // America/New_York falls back on 2026-11-01: that local day is 25 hours long.
    let events = vec![
        tool("q1", ts("2026-11-01T04:30:00Z"), false), // 00:30 EDT, Nov 1
        tool("q1", ts("2026-11-02T04:30:00Z"), false), // 23:30 EST, Nov 1 (hour 25 of the day)
        tool("q1", ts("2026-11-02T05:30:00Z"), false), // 00:30 EST, Nov 2
    ];
    let sent = batch_sent_at(events, vec![], chrono::Utc::now());
    assert_eq!(app.post_batch(&t.ingest, &sent).await.0, StatusCode::OK);
    let (s, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-31&to=2026-11-04&granularity=day&tz=America/New_York",
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00-04:00".into(), 2),
            ("2026-11-02T00:00:00-05:00".into(), 1)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-31&to=2026-11-04&granularity=day&tz=UTC",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00+00:00".into(), 1),
            ("2026-11-02T00:00:00+00:00".into(), 2)
        ]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn half_and_quarter_hour_zones_get_exact_day_and_hour_buckets(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let events = vec![
        tool("q1", ts("2026-11-01T18:29:59Z"), false), // 23:59:59 IST Nov 1; 00:14:59 NPT Nov 2
        tool("q1", ts("2026-11-01T18:30:00Z"), false), // 00:00 IST Nov 2
        tool("q1", ts("2026-11-01T18:14:00Z"), false), // 23:59 NPT Nov 1 (+05:45)
    ];
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, vec![])).await.0,
        StatusCode::OK
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-01&to=2026-11-03&granularity=day&tz=Asia/Kolkata",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00+05:30".into(), 2),
            ("2026-11-02T00:00:00+05:30".into(), 1)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-01&to=2026-11-03&granularity=day&tz=Asia/Kathmandu",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00+05:45".into(), 1),
            ("2026-11-02T00:00:00+05:45".into(), 2)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-01&to=2026-11-03&granularity=hour&tz=Asia/Kolkata",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T23:00:00+05:30".into(), 2),
            ("2026-11-02T00:00:00+05:30".into(), 1)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-01&to=2026-12-01&granularity=month&tz=Asia/Kolkata",
        )
        .await;
    assert_eq!(buckets(&v), vec![("2026-11-01T00:00:00+05:30".into(), 3)]);
}

#[sqlx::test(migrations = "../migrations")]
async fn rows_carry_every_group_key_and_totals_add_up(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let at = ts("2026-11-03T10:00:00Z");
    let events = vec![
        llm("q1", at, "m1", 100, 10, 0.1),
        llm("q1", at, "m2", 50, 5, 0.0),
        llm("q2", at, "m1", 10, 1, 0.2),
    ];
    let sessions = vec![binding("q1", "alice"), binding("q2", "bob")];
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, sessions)).await.0,
        StatusCode::OK
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=user,model,session,device,colony",
        )
        .await;
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for k in [
        "user_id",
        "model",
        "session_id",
        "device_id",
        "colony_id",
        "bucket",
    ] {
        assert!(rows[0].get(k).is_some(), "{k} missing: {v}");
    }
    assert_eq!(v["totals"]["input_tokens"], 160);
    assert_eq!(v["totals"]["llm_calls"], 3);
    assert_eq!(v["totals"]["unpriced_turns"], 1);
    assert!((v["totals"]["cost_usd"].as_f64().unwrap() - 0.3).abs() < 1e-12);
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=user",
        )
        .await;
    let alice = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user_id"] == "alice")
        .unwrap();
    assert_eq!(alice["input_tokens"], 150);
}
