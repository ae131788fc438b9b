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
    // By model: its turns under "m"; its active time (no model) under null.
    let models: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["model"])
        .collect();
    assert_eq!(models, [&Value::Null, &json!("m")], "{v}");
    assert!(v["totals"]["active_seconds"].as_f64().unwrap() > 0.0, "{v}");
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
        ("waiting", "waiting"),
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

fn listed(v: &Value) -> Vec<String> {
    v["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("no sessions in {v}"))
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_string())
        .collect()
}

/// `/v1/sessions` with these query pairs (encoded as a client would).
fn list_path(pairs: &[(&str, &str)]) -> String {
    let mut url = reqwest::Url::parse("http://x/v1/sessions").unwrap();
    url.query_pairs_mut().extend_pairs(pairs);
    format!("{}?{}", url.path(), url.query().unwrap_or(""))
}

/// Follows `next_cursor` to the end; returns every id listed and the number of pages.
async fn list_all(app: &TestApp, token: &str, pairs: &[(&str, &str)]) -> (Vec<String>, usize) {
    let (mut all, mut pages) = (vec![], 0);
    let mut cursor: Option<String> = None;
    loop {
        let mut p = pairs.to_vec();
        if let Some(c) = &cursor {
            p.push(("cursor", c));
        }
        let (s, v) = app.get(token, &list_path(&p)).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        all.extend(listed(&v));
        pages += 1;
        assert!(pages < 50, "the cursor does not advance: {v}");
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return (all, pages),
        }
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn the_session_listing_pages_most_recent_first_and_filters(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    // s<k>'s last LLM turn was k minutes ago; s5 then hit a doom loop, s6 completed.
    let mut events: Vec<Value> = (0..7)
        .map(|k| {
            llm(
                &format!("s{k}"),
                now - Duration::minutes(k),
                "m",
                10 + k as u64,
                1,
                0.0,
            )
        })
        .collect();
    events.push(event(
        "health.signal",
        Some("s5"),
        now - Duration::minutes(4),
        json!({ "signal": "doom_loop" }),
    ));
    events.push(event(
        "execution",
        Some("s6"),
        now - Duration::minutes(6),
        json!({ "scope": "execution", "status": "completed" }),
    ));
    let bindings = (0..7)
        .map(|k| binding(&format!("s{k}"), if k % 2 == 0 { "alice" } else { "bob" }))
        .collect();
    let (s, v) = app.post_batch(&t.ingest, &batch(events, bindings)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let every: Vec<String> = (0..7).map(|k| format!("s{k}")).collect();
    let (s, v) = app.get(&t.read, "/v1/sessions").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // s5's health signal (4 minutes ago) is its latest event: it sorts between s3 and s4.
    assert_eq!(listed(&v), ["s0", "s1", "s2", "s3", "s5", "s4", "s6"]);
    assert_eq!(v["next_cursor"], Value::Null);
    assert_eq!(v["sessions"][2]["totals"]["input_tokens"], 12, "{v}");
    assert_eq!(v["sessions"][4]["status"], "stalled");
    assert_eq!(v["sessions"][6]["status"], "completed");

    let (mut paged, pages) = list_all(&app, &t.read, &[("limit", "3")]).await;
    assert_eq!(pages, 3);
    assert_eq!(paged.len(), 7, "nothing twice, nothing skipped: {paged:?}");
    paged.sort();
    assert_eq!(paged, every);

    let (done_or_stuck, _) = list_all(
        &app,
        &t.read,
        &[("status", "completed,stalled"), ("limit", "1")],
    )
    .await;
    assert_eq!(done_or_stuck, ["s5", "s6"]);
    let (alices, _) = list_all(&app, &t.read, &[("user", "alice")]).await;
    assert_eq!(alices, ["s0", "s2", "s4", "s6"]);
    let since = (now - Duration::seconds(150)).to_rfc3339();
    let (recent, _) = list_all(&app, &t.read, &[("since", &since)]).await;
    assert_eq!(recent, ["s0", "s1", "s2"]);

    for (param, value) in [
        ("limit", "0"),
        ("limit", "1001"),
        ("status", "busy"),
        ("since", "yesterday"),
        ("cursor", "not-a-cursor"),
        ("user", ""),
        ("colour", "blue"),
    ] {
        let (s, v) = app.get(&t.read, &list_path(&[(param, value)])).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{param}={value}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{param}`")), "{param}: {v}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn the_session_list_filters_by_colony_key(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let key_a = format!("ck_{}", "a".repeat(32));
    let key_b = format!("ck_{}", "b".repeat(32));
    let colony = |run: &str, queen: &str, key: &str| {
        event(
            "colony.created",
            Some(queen),
            now - Duration::minutes(10),
            json!({ "source": "created", "colony_id": run, "queen_session_id": queen,
                    "forked_session_id": run, "colony_key": key }),
        )
    };
    let events = vec![
        llm("q1", now - Duration::minutes(11), "m", 10, 1, 0.1),
        colony("run-a", "q1", &key_a),
        colony("run-b", "q1", &key_b),
        llm("run-a", now - Duration::minutes(9), "m", 10, 1, 0.1),
        llm("run-b", now - Duration::minutes(9), "m", 10, 1, 0.1),
        worker(
            "llm.turn",
            "wa",
            "run-a",
            now - Duration::minutes(8),
            json!({ "model": "m", "input_tokens": 1, "output_tokens": 1 }),
        ),
        worker(
            "llm.turn",
            "wb",
            "run-b",
            now - Duration::minutes(8),
            json!({ "model": "m", "input_tokens": 1, "output_tokens": 1 }),
        ),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &batch(events, vec![binding("q1", "alice")]))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ids = |v: &Value| {
        let mut ids: Vec<String> = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let (s, v) = app
        .get(&t.read, &format!("/v1/sessions?colony={key_a}"))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(ids(&v), ["run-a", "wa"], "{v}");
    let (_, v) = app
        .get(&t.read, &format!("/v1/sessions?colony={key_b}"))
        .await;
    assert_eq!(ids(&v), ["run-b", "wb"], "{v}");
    let (_, v) = app.get(&t.read, "/v1/sessions").await;
    assert_eq!(ids(&v).len(), 5, "{v}");
    // Another tenant's reader sees nothing of this colony.
    let other = app.tenant("other").await;
    let (_, v) = app
        .get(&other.read, &format!("/v1/sessions?colony={key_a}"))
        .await;
    assert!(ids(&v).is_empty(), "{v}");
    // The dashboard's list takes the same filter.
    let cookie = app.cookie(&t.read).await;
    let p = app
        .page(Some(&cookie), &format!("/sessions?colony={key_a}"))
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    assert!(p.body.contains("data-session=\"wa\""), "{}", p.body);
    assert!(!p.body.contains("data-session=\"wb\""), "{}", p.body);
}
