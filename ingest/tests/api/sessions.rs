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

/// `sessions.ended` of each session of the tenant, by id.
async fn ended_of(app: &TestApp, tenant: &str) -> Vec<(String, Option<String>)> {
    sqlx::query_as(
        "SELECT s.session_id, s.ended FROM sessions s JOIN tenants t USING (tenant_id)
         WHERE t.name = $1 ORDER BY s.session_id",
    )
    .bind(tenant)
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_status_filter_reads_ended_sessions_by_their_stored_end_and_open_ones_by_their_status(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let run = |id: &str, at, status: &str| {
        event(
            "execution",
            Some(id),
            at,
            json!({ "scope": "execution", "status": status }),
        )
    };
    let events = vec![
        llm("open", now - Duration::seconds(30), "m", 1, 1, 0.1),
        llm("done", now - Duration::minutes(3), "m", 1, 1, 0.1),
        run("done", now - Duration::minutes(2), "completed"),
        llm("broken", now - Duration::minutes(4), "m", 1, 1, 0.1),
        run("broken", now - Duration::minutes(3), "failed"),
        llm("again", now - Duration::minutes(6), "m", 1, 1, 0.1),
        run("again", now - Duration::minutes(5), "completed"),
        llm("quiet", now - Duration::minutes(20), "m", 1, 1, 0.1),
        // Active still, near the end of the no-progress window (300 s).
        llm("late", now - Duration::seconds(200), "m", 1, 1, 0.1),
    ];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, vec![])).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ended = |pairs: &[(&str, Option<&str>)]| -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(id, e)| (id.to_string(), e.map(str::to_string)))
            .collect()
    };
    assert_eq!(
        ended_of(&app, "acme").await,
        ended(&[
            ("again", Some("completed")),
            ("broken", Some("failed")),
            ("done", Some("completed")),
            ("late", None),
            ("open", None),
            ("quiet", None),
        ])
    );
    // A completed session started again (a later batch) is open again; a late, older input leaves an
    // end where it was.
    let later = vec![
        run("again", now - Duration::seconds(10), "started"),
        llm("again", now - Duration::seconds(5), "m", 1, 1, 0.1),
        llm("done", now - Duration::minutes(10), "m", 1, 1, 0.1),
    ];
    let (s, v) = app.post_batch(&t.ingest, &batch(later, vec![])).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        ended_of(&app, "acme").await,
        ended(&[
            ("again", None),
            ("broken", Some("failed")),
            ("done", Some("completed")),
            ("late", None),
            ("open", None),
            ("quiet", None),
        ])
    );
    for (status, want) in [
        ("active", vec!["again", "open", "late"]),
        ("stalled", vec!["quiet"]),
        ("completed", vec!["done"]),
        ("failed", vec!["broken"]),
        ("failed,active", vec!["again", "open", "broken", "late"]),
        ("completed,stalled", vec!["done", "quiet"]),
        ("completed,failed,stalled", vec!["done", "broken", "quiet"]),
    ] {
        for limit in ["1", "100"] {
            let (got, _) = list_all(&app, &t.read, &[("status", status), ("limit", limit)]).await;
            assert_eq!(got, want, "status={status} limit={limit}");
        }
    }
    // The stored end is the derived status exactly when that is completed or failed, for every session.
    let (s, v) = app.get(&t.read, "/v1/sessions").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let mut derived: Vec<(String, Option<String>)> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let status = s["status"].as_str().unwrap();
            let end = ["completed", "failed"]
                .contains(&status)
                .then(|| status.to_string());
            (s["session_id"].as_str().unwrap().to_string(), end)
        })
        .collect();
    derived.sort();
    assert_eq!(ended_of(&app, "acme").await, derived);
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

#[sqlx::test(migrations = false)]
async fn the_ended_migration_reads_each_stored_trackers_end(pool: sqlx::PgPool) {
    use apiary_schema::status::{Input, Rules, Run, Tracker, What, REORDER_WINDOW};
    // Every migration before the one adding `sessions.ended`, then trackers the old code stored.
    let rest = migrate_before(&pool, "sessions ended").await;
    let tenant = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO tenants (tenant_id, name) VALUES ($1, 'acme')")
        .bind(tenant)
        .execute(&pool)
        .await
        .unwrap();
    let r = |run| What::Run { run };
    let turn = || What::Llm { ends_turn: true };
    let many = |what: fn() -> What| (0..REORDER_WINDOW + 8).map(move |_| what());
    let cases: Vec<(&str, Vec<What>)> = vec![
        (
            "completed",
            vec![r(Run::Started), turn(), r(Run::Completed)],
        ),
        ("failed", vec![r(Run::Started), r(Run::Failed)]),
        ("reopened", vec![r(Run::Completed), r(Run::Started), turn()]),
        ("paused", vec![r(Run::Started), r(Run::Paused)]),
        ("failed-then-paused", vec![r(Run::Failed), r(Run::Paused)]),
        ("stepped", vec![r(Run::Completed), r(Run::Step), turn()]),
        // The end left the re-order window: it is in the settled health only.
        (
            "settled-end",
            [r(Run::Completed)].into_iter().chain(many(turn)).collect(),
        ),
        (
            "settled-start",
            [r(Run::Completed), r(Run::Started)]
                .into_iter()
                .chain(many(turn))
                .collect(),
        ),
        (
            "long",
            [r(Run::Started)]
                .into_iter()
                .chain(many(turn))
                .chain([r(Run::Failed)])
                .collect(),
        ),
        ("no-run", vec![turn()]),
    ];
    let rules = Rules::default();
    let start = Utc::now() - Duration::hours(1);
    let mut want = vec![("untracked".to_string(), None)];
    for (id, whats) in cases {
        let mut t = Tracker::default();
        let inputs = whats.into_iter().enumerate().map(|(i, what)| Input {
            at: start + Duration::seconds(i as i64),
            id: uuid::Uuid::new_v4(),
            what,
            interactive: false,
        });
        t.push(inputs, &rules);
        let end = t.current(&rules).end();
        want.push((id.to_string(), end.map(|s| s.as_str().to_string())));
        sqlx::query(
            "INSERT INTO sessions (tenant_id, session_id, first_seen_at, health)
             VALUES ($1, $2, now(), $3::jsonb)",
        )
        .bind(tenant)
        .bind(id)
        .bind(serde_json::to_string(&t).unwrap())
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query("INSERT INTO sessions (tenant_id, session_id, first_seen_at) VALUES ($1, 'untracked', now())")
        .bind(tenant)
        .execute(&pool)
        .await
        .unwrap();
    apply(&pool, &rest).await;
    want.sort();
    let got: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT session_id, ended FROM sessions ORDER BY session_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(got, want);
    // The cases cover both ends, from the window and from the settled health, and open runs.
    let ends = |e: &str| want.iter().filter(|w| w.1.as_deref() == Some(e)).count();
    assert_eq!((ends("completed"), ends("failed")), (3, 2), "{want:?}");
}
