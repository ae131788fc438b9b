//! Session detail, status derivation, tree and colony usage.

use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn worker(kind: &str, id: &str, queen: &str, at: chrono::DateTime<Utc>, data: Value) -> Value {
    let mut e = event(kind, Some(id), at, data);
    e["agent_role"] = "worker".into();
    e["colony_id"] = queen.into();
    e["parent_session_id"] = queen.into();
    e
}

#[sqlx::test(migrations = "../migrations")]
async fn the_tree_rolls_worker_usage_up_to_the_queen(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let w = |id: &str, tokens: u64| {
        worker(
            "llm.turn",
            id,
            "q1",
            now,
            json!({ "model": "m", "input_tokens": tokens, "output_tokens": 1, "cost_usd": 0.5, "cost_source": "reported" }),
        )
    };
    let events = vec![
        llm("q1", now, "m", 100, 1, 1.0),
        w("w1", 10),
        w("w2", 20),
        w("w2", 5),
    ];
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, vec![binding("q1", "alice")]))
            .await
            .0,
        StatusCode::OK
    );
    let (s, v) = app.get(&t.read, "/v1/sessions/q1/tree").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["usage"]["input_tokens"], 100);
    assert_eq!(v["totals"]["input_tokens"], 135);
    assert_eq!(v["colonies"][0]["colony_id"], "q1");
    assert_eq!(v["colonies"][0]["totals"]["input_tokens"], 35);
    assert_eq!(v["colonies"][0]["workers"].as_array().unwrap().len(), 2);
    // Workers inherit the queen's user.
    assert_eq!(v["colonies"][0]["workers"][0]["user_id"], "alice");
    let (s, v) = app.get(&t.read, "/v1/colonies/q1/usage").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["totals"]["input_tokens"], 35);
    assert_eq!(v["rows"].as_array().unwrap().len(), 2, "by session: {v}");
    let (_, v) = app.get(&t.read, "/v1/sessions/w2/usage").await;
    assert_eq!(v["totals"]["input_tokens"], 25);
    assert_eq!(v["rows"][0]["model"], "m");
}

async fn status_of(app: &TestApp, token: &str, id: &str) -> String {
    let (s, v) = app.get(token, &format!("/v1/sessions/{id}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["status"].as_str().unwrap().to_string()
}

#[sqlx::test(migrations = "../migrations")]
async fn status_is_derived_from_events_thresholds_and_the_device(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let ten_min_ago = now - Duration::minutes(11);
    let events = vec![
        llm("active", now, "m", 1, 1, 0.1),
        llm("waiting", now - Duration::seconds(5), "m", 1, 1, 0.1),
        event(
            "session.input",
            Some("waiting"),
            now,
            json!({ "state": "requested" }),
        ),
        llm("stuck", now - Duration::seconds(5), "m", 1, 1, 0.1),
        event(
            "health.signal",
            Some("stuck"),
            now,
            json!({ "signal": "doom_loop" }),
        ),
        llm("quiet", ten_min_ago, "m", 1, 1, 0.1),
        llm("chatting", ten_min_ago, "m", 1, 1, 0.1),
        event(
            "session.phase",
            Some("chatting"),
            ten_min_ago,
            json!({ "phase": "independent" }),
        ),
        event(
            "execution",
            Some("broken"),
            now,
            json!({ "scope": "execution", "status": "failed" }),
        ),
        event(
            "execution",
            Some("done"),
            now - Duration::seconds(1),
            json!({ "scope": "execution", "status": "started" }),
        ),
        event(
            "execution",
            Some("done"),
            now,
            json!({ "scope": "execution", "status": "completed" }),
        ),
    ];
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, vec![])).await.0,
        StatusCode::OK
    );
    // A late, older "started" does not roll the completed session back.
    let late = event(
        "execution",
        Some("done"),
        now - Duration::minutes(1),
        json!({ "scope": "execution", "status": "started" }),
    );
    app.post_batch(&t.ingest, &batch(vec![late], vec![])).await;
    for (id, want) in [
        ("active", "active"),
        ("waiting", "idle"),
        ("stuck", "stalled"),
        ("quiet", "stalled"),
        ("chatting", "idle"),
        ("broken", "failed"),
        ("done", "completed"),
    ] {
        assert_eq!(status_of(&app, &t.read, id).await, want, "{id}");
    }
    sqlx::query(
        "UPDATE devices SET last_seen_at = now() - interval '1 hour', last_heartbeat_at = NULL",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(status_of(&app, &t.read, "active").await, "offline");
    assert_eq!(status_of(&app, &t.read, "done").await, "completed");
    let (_, v) = app.get(&t.read, "/v1/sessions/stuck").await;
    assert_eq!(v["health"]["signal"], "doom_loop");
    assert!(v["last_event_at"].is_string());
}
