//! Status history reads and upkeep: user scoping of the tenant-wide transitions, the rebuild of a session
//! stored before the health model existed, retention, and parameter errors.

use apiary_ingest::store::Store;
use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn tos(v: &Value) -> Vec<(String, String)> {
    v["transitions"]
        .as_array()
        .unwrap_or_else(|| panic!("no transitions in {v}"))
        .iter()
        .map(|t| {
            (
                t["session_id"].as_str().unwrap_or("").to_string(),
                t["to"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_user_bound_reader_sees_only_its_users_transitions(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let doom = |s: &str| {
        vec![
            llm(s, now - Duration::seconds(20), "m", 1, 1, 0.1),
            event(
                "health.signal",
                Some(s),
                now - Duration::seconds(10),
                json!({ "signal": "doom_loop" }),
            ),
        ]
    };
    let mut events = doom("a1");
    events.extend(doom("b1"));
    let (code, v) = app
        .post_batch(
            &t.ingest,
            &batch(events, vec![binding("a1", "alice"), binding("b1", "bob")]),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let (_, all) = app
        .get(&t.read, "/v1/status/transitions?status=stalled")
        .await;
    assert_eq!(
        tos(&all),
        vec![
            ("a1".into(), "stalled".into()),
            ("b1".into(), "stalled".into())
        ],
        "{all}"
    );
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    let (_, mine) = app.get(&alice, "/v1/status/transitions").await;
    assert_eq!(
        tos(&mine),
        vec![
            ("a1".into(), "active".into()),
            ("a1".into(), "stalled".into())
        ],
        "{mine}"
    );
    let (code, _) = app.get(&alice, "/v1/sessions/b1/history").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    for bad in [
        "limit=0",
        "from=yesterday",
        "status=asleep",
        "colour=red",
        "from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z",
    ] {
        let (code, v) = app
            .get(&t.read, &format!("/v1/status/transitions?{bad}"))
            .await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}: {v}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_session_stored_before_the_health_model_is_rebuilt_from_its_events(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let first = vec![
        llm("old", now - Duration::seconds(60), "m", 1, 1, 0.1),
        event(
            "health.signal",
            Some("old"),
            now - Duration::seconds(50),
            json!({ "signal": "inactive" }),
        ),
    ];
    app.post_batch(&t.ingest, &batch(first, vec![])).await;
    // As an older ingest left it: facts but no tracker and no history.
    sqlx::query("UPDATE sessions SET health = NULL, stall_due_at = NULL")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM status_transitions")
        .execute(&pool)
        .await
        .unwrap();
    let later = vec![event(
        "health.signal",
        Some("old"),
        now - Duration::seconds(40),
        json!({ "signal": "nudge_sent" }),
    )];
    app.post_batch(&t.ingest, &batch(later, vec![])).await;
    let (_, h) = app.get(&t.read, "/v1/sessions/old/history").await;
    let got: Vec<(Option<&str>, &str, &str)> = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["from"].as_str(),
                x["to"].as_str().unwrap(),
                x["cause"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (None, "active", "llm_turn"),
            (Some("active"), "stalled", "inactive")
        ],
        "{h}"
    );
    assert_eq!(h["status"], "stalled");

    // An unreadable tracker (a hand-edited row) is rebuilt too, its old history replaced, not doubled.
    sqlx::query("UPDATE sessions SET health = '{\"bogus\": 1}'::jsonb")
        .execute(&pool)
        .await
        .unwrap();
    let resumed = vec![llm("old", now - Duration::seconds(30), "m", 1, 1, 0.1)];
    let (code, v) = app.post_batch(&t.ingest, &batch(resumed, vec![])).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let (_, h) = app.get(&t.read, "/v1/sessions/old/history").await;
    let causes: Vec<&str> = h["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["cause"].as_str().unwrap())
        .collect();
    assert_eq!(causes, vec!["llm_turn", "inactive", "llm_turn"], "{h}");
}

#[sqlx::test(migrations = "../migrations")]
async fn transitions_are_retained_like_events(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let old = Utc::now() - Duration::days(40);
    let events = vec![
        llm("s", old, "m", 1, 1, 0.1),
        event(
            "health.signal",
            Some("s"),
            old + Duration::seconds(5),
            json!({ "signal": "stalled" }),
        ),
        llm("s", Utc::now(), "m", 1, 1, 0.1),
    ];
    let (code, v) = app.post_batch(&t.ingest, &batch(events, vec![])).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(app.count("status_transitions").await, 3);
    let store = Store::new(pool.clone());
    store
        .drop_before((Utc::now() - Duration::days(30)).date_naive())
        .await
        .unwrap();
    assert_eq!(
        app.count("status_transitions").await,
        1,
        "only the recent transition is kept"
    );
}
