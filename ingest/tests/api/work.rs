//! A session's work (tasks, triggers, next wake, activity) in the ingest agrees with the shared fold:
//! random task, trigger, tool-call and lifecycle events, posted in any order, in random batches and with
//! replays (the same event ids again), answer in `GET /v1/sessions/{id}` (and the list) exactly what
//! `apiary_schema::work` gives for the events in their original order — what the agent shows locally (its
//! own property test checks that side).

use apiary_schema::work::arb::{kind_and_data, submission_order};
use apiary_schema::work::Work;
use apiary_schema::CanonicalEvent;
use chrono::{Duration, Utc};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// The fields of the detail that the shared view gives.
fn work_fields(v: &Value) -> Value {
    json!({
        "tasks": v["tasks"], "next_wake_at": v["next_wake_at"], "activity": v["activity"],
        "task_list": v["task_list"], "tasks_truncated": v["tasks_truncated"],
        "triggers": v["triggers"], "triggers_truncated": v["triggers_truncated"],
    })
}

#[sqlx::test(migrations = "../migrations")]
async fn stored_work_agrees_with_the_shared_fold_whatever_the_order_and_replays(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[13; 32]),
    );
    let strategy = (
        prop::collection::vec((0i64..600, kind_and_data()), 1..80),
        1usize..25,
        any::<u64>(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    );
    let t0 = Utc::now() - Duration::days(2);
    for case in 0..12 {
        let (events, batch_size, seed, replays) = strategy.new_tree(&mut runner).unwrap().current();
        let session = format!("s{case}");
        let bodies: Vec<Value> = events
            .iter()
            .map(|(secs, (kind, data))| {
                event(
                    kind,
                    Some(&session),
                    t0 + Duration::seconds(*secs),
                    data.clone(),
                )
            })
            .collect();
        let mut want = Work::default();
        for b in &bodies {
            let e: CanonicalEvent = serde_json::from_value(b.clone()).unwrap();
            want.fold(&e, e.occurred_at);
        }
        let order = submission_order(bodies.len(), seed, &replays);
        for chunk in order.chunks(batch_size) {
            let evs = chunk.iter().map(|i| bodies[*i].clone()).collect();
            let (s, v) = app
                .post_batch(&t.ingest, &batch(evs, vec![binding(&session, "alice")]))
                .await;
            assert_eq!(s, StatusCode::OK, "{v}");
        }
        let (s, got) = app.get(&t.read, &format!("/v1/sessions/{session}")).await;
        assert_eq!(s, StatusCode::OK, "{got}");
        let want_json = serde_json::to_value(want.view()).unwrap();
        assert_eq!(work_fields(&got), work_fields(&want_json), "case {case}");
    }
    // The list has the compact form.
    let (s, page) = app.get(&t.read, "/v1/sessions?limit=100").await;
    assert_eq!(s, StatusCode::OK, "{page}");
    for row in page["sessions"].as_array().unwrap() {
        assert!(row["tasks"]["pending"].is_u64(), "{row}");
        assert!(row.get("next_wake_at").is_some() && row.get("activity").is_some());
        assert!(row.get("task_list").is_none(), "the list is compact: {row}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_session_stored_before_its_work_existed_is_folded_from_its_events(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let at = Utc::now() - Duration::hours(1);
    let first = vec![
        event(
            "task.changed",
            Some("old"),
            at,
            json!({"action": "created", "task_id": "1", "status": "pending"}),
        ),
        event(
            "tool.call",
            Some("old"),
            at,
            json!({"tool_use_id": "a", "tool_name": "grep", "status": "started"}),
        ),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &batch(first, vec![binding("old", "alice")]))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // As a row stored before the migration: no work column value.
    sqlx::query("UPDATE sessions SET work = NULL")
        .execute(&pool)
        .await
        .unwrap();
    let later = vec![event(
        "task.changed",
        Some("old"),
        at + Duration::seconds(5),
        json!({"action": "updated", "task_id": "2", "status": "in_progress"}),
    )];
    let (s, v) = app.post_batch(&t.ingest, &batch(later, vec![])).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, got) = app.get(&t.read, "/v1/sessions/old").await;
    assert_eq!(
        got["tasks"],
        json!({"pending": 1, "in_progress": 1, "completed": 0, "other": 0}),
        "{got}"
    );
    assert_eq!(got["activity"]["tool_name"], "grep", "{got}");
    let ids: Vec<&str> = got["task_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["1", "2"]);
}

#[sqlx::test(migrations = "../migrations")]
async fn another_users_session_work_is_not_found(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let ev = vec![event(
        "task.changed",
        Some("mine"),
        Utc::now(),
        json!({"action": "created", "task_id": "1", "status": "pending"}),
    )];
    let (s, _) = app
        .post_batch(&t.ingest, &batch(ev, vec![binding("mine", "alice")]))
        .await;
    assert_eq!(s, StatusCode::OK);
    let bob = app.tenant_token_for_user(t.id, "bob").await;
    let (s, _) = app.get(&bob, "/v1/sessions/mine").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    let (s, v) = app.get(&alice, "/v1/sessions/mine").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["task_list"][0]["task_id"], "1");
}
