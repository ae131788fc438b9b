//! Who may write into a session (`store::owners`): the first authenticated sender fixes its owner; a
//! token bound to another user or device is refused per event, through the session, its parent or its
//! colony; tokens bound to no user are tenant-wide trusted senders. A heartbeat's runtime report marks
//! only its sender's user's sessions of its device as gone.

use apiary_ingest::auth::Scope;
use apiary_ingest::store::admin::{create_token, TokenSpec};
use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::helpers::*;

async fn ingest_token(
    app: &TestApp,
    tenant: Uuid,
    user: Option<&str>,
    device: Option<&str>,
) -> String {
    let spec = TokenSpec {
        tenant: tenant.to_string(),
        scopes: vec![Scope::Ingest],
        user_id: user.map(str::to_string),
        device_id: device.map(str::to_string),
    };
    create_token(&app.pool, &spec).await.unwrap().1
}

fn worker_of(session: &str, parent: &str, tokens: u64) -> Value {
    let mut e = llm(session, Utc::now(), "m", tokens, 1, 0.1);
    e["agent_role"] = json!("worker");
    e["parent_session_id"] = json!(parent);
    e["colony_id"] = json!(parent);
    e
}

/// (accepted, duplicates, reasons)
fn verdicts(v: &Value) -> (u64, u64, Vec<String>) {
    let reasons = v["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap().to_string())
        .collect();
    (
        v["accepted"].as_u64().unwrap(),
        v["duplicates"].as_u64().unwrap(),
        reasons,
    )
}

async fn send(
    app: &TestApp,
    token: &str,
    events: Vec<Value>,
    sessions: Vec<Value>,
) -> (u64, u64, Vec<String>) {
    let (s, v) = app.post_batch(token, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    verdicts(&v)
}

async fn input_tokens(app: &TestApp, token: &str, session: &str) -> i64 {
    let (s, v) = app.get(token, &format!("/v1/sessions/{session}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["totals"]["input_tokens"].as_i64().unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_worker_cannot_inherit_or_hang_under_another_users_session(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let alice = ingest_token(&app, t.id, Some("alice"), None).await;
    let mallory = ingest_token(&app, t.id, Some("mallory"), None).await;
    assert_eq!(
        send(
            &app,
            &alice,
            vec![llm("q-alice", Utc::now(), "m", 100, 1, 0.1)],
            vec![]
        )
        .await
        .0,
        1
    );

    // Through the event's parent and colony, and through a binding's parent.
    let (acc, _, reasons) = send(
        &app,
        &mallory,
        vec![worker_of("w-m1", "q-alice", 5_000)],
        vec![],
    )
    .await;
    assert_eq!((acc, reasons.len()), (0, 1));
    assert!(
        reasons[0].contains("\"q-alice\" belongs to another user"),
        "{reasons:?}"
    );
    let mut b = binding("w-m2", "mallory");
    b["parent_session_id"] = json!("q-alice");
    let (acc, _, reasons) = send(
        &app,
        &mallory,
        vec![llm("w-m2", Utc::now(), "m", 7_000, 1, 0.1)],
        vec![b],
    )
    .await;
    assert_eq!((acc, reasons.len()), (0, 1));
    assert!(
        reasons[0].contains("names parent \"q-alice\""),
        "{reasons:?}"
    );

    let (_, v) = app.get(&t.read, "/v1/sessions/q-alice/tree").await;
    assert_eq!(v["totals"]["input_tokens"], 100, "{v}");
    assert_eq!(v["colonies"], json!([]), "{v}");
    let (_, v) = app.get(&t.read, "/v1/usage?group_by=user").await;
    assert_eq!(v["rows"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["rows"][0]["user_id"], "alice", "{v}");
    // Nothing of the refused batches stays behind, not even the workers' own new session rows.
    let (_, v) = app.get(&t.read, "/v1/sessions").await;
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(app.count("events").await, 1);
    assert_eq!(app.count("event_keys").await, 1);

    // Alice's own worker is fine.
    assert_eq!(
        send(&app, &alice, vec![worker_of("w-a", "q-alice", 10)], vec![])
            .await
            .0,
        1
    );
    assert_eq!(input_tokens(&app, &t.read, "w-a").await, 10);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_refused_event_leaves_its_id_free_for_the_owner(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let alice = ingest_token(&app, t.id, Some("alice"), None).await;
    let mallory = ingest_token(&app, t.id, Some("mallory"), None).await;
    assert_eq!(
        send(
            &app,
            &alice,
            vec![llm("q1", Utc::now(), "m", 100, 1, 0.1)],
            vec![]
        )
        .await
        .0,
        1
    );
    // Mallory sends, first, the very event alice is about to send.
    let next = llm("q1", Utc::now(), "m", 50, 1, 0.1);
    let (acc, dup, reasons) = send(&app, &mallory, vec![next.clone(), next.clone()], vec![]).await;
    assert_eq!((acc, reasons.len()), (0, 1), "{reasons:?}");
    assert_eq!(
        dup, 1,
        "the second copy in the batch is a duplicate of the first"
    );
    assert_eq!(
        send(&app, &alice, vec![next.clone()], vec![]).await,
        (1, 0, vec![])
    );
    assert_eq!(
        send(&app, &alice, vec![next], vec![]).await,
        (0, 1, vec![]),
        "a replay"
    );
    assert_eq!(input_tokens(&app, &t.read, "q1").await, 150);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_device_bound_token_writes_only_its_devices_sessions(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let laptop = ingest_token(&app, t.id, Some("alice"), Some("dev-1")).await;
    let mut other = batch(vec![llm("q-desktop", Utc::now(), "m", 10, 1, 0.1)], vec![]);
    other["agent"]["device_id"] = json!("alice-desktop");
    let desktop = ingest_token(&app, t.id, Some("alice"), Some("alice-desktop")).await;
    let (s, v) = app.post_batch(&desktop, &other).await;
    assert_eq!(
        (s, v["accepted"].clone()),
        (StatusCode::OK, json!(1)),
        "{v}"
    );
    // The same user, another device: refused.
    let (acc, _, reasons) = send(
        &app,
        &laptop,
        vec![llm("q-desktop", Utc::now(), "m", 99, 1, 0.1)],
        vec![],
    )
    .await;
    assert_eq!(acc, 0);
    assert!(reasons[0].contains("another device"), "{reasons:?}");
    // A token bound to the user only writes any of the user's sessions.
    let anywhere = ingest_token(&app, t.id, Some("alice"), None).await;
    assert_eq!(
        send(
            &app,
            &anywhere,
            vec![llm("q-desktop", Utc::now(), "m", 1, 1, 0.1)],
            vec![]
        )
        .await
        .0,
        1
    );
    assert_eq!(input_tokens(&app, &t.read, "q-desktop").await, 11);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_bound_sender_claims_the_new_parents_it_names(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let alice = ingest_token(&app, t.id, Some("alice"), None).await;
    let mallory = ingest_token(&app, t.id, Some("mallory"), None).await;
    // Mallory's worker names a queen nobody has sent yet: the queen is mallory's now ...
    assert_eq!(
        send(&app, &mallory, vec![worker_of("w-m", "q-later", 5)], vec![])
            .await
            .0,
        1
    );
    let (_, v) = app.get(&t.read, "/v1/sessions/q-later").await;
    assert_eq!(v["user_id"], "mallory", "{v}");
    // ... so alice cannot later start a queen of that id and find mallory's worker in her tree.
    let (acc, _, reasons) = send(
        &app,
        &alice,
        vec![llm("q-later", Utc::now(), "m", 100, 1, 0.1)],
        vec![],
    )
    .await;
    assert_eq!(acc, 0, "{reasons:?}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tenant_wide_sender_writes_any_session_and_workers_inherit_their_parent(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let alice = ingest_token(&app, t.id, Some("alice"), None).await;
    assert_eq!(
        send(
            &app,
            &alice,
            vec![llm("q-alice", Utc::now(), "m", 100, 1, 0.1)],
            vec![]
        )
        .await
        .0,
        1
    );
    // t.ingest is bound to no user: a trusted collector for the whole tenant.
    let (acc, _, reasons) = send(
        &app,
        &t.ingest,
        vec![
            llm("q-alice", Utc::now(), "m", 1, 1, 0.1),
            worker_of("w-1", "q-alice", 10),
        ],
        vec![binding("q-bob", "bob")],
    )
    .await;
    assert_eq!((acc, reasons), (2, vec![]));
    let (_, v) = app.get(&t.read, "/v1/sessions/w-1").await;
    assert_eq!(
        v["user_id"], "alice",
        "the worker inherits its queen's user: {v}"
    );
    let (_, v) = app.get(&t.read, "/v1/sessions/q-bob").await;
    assert_eq!(
        v["user_id"], "bob",
        "a registration without events is kept: {v}"
    );
    assert_eq!(input_tokens(&app, &t.read, "q-alice").await, 101);
}

/// The sessions marked gone by a heartbeat's runtime report: (session, gone).
async fn runtime_gone(app: &TestApp) -> Vec<(String, bool)> {
    sqlx::query_as("SELECT session_id, runtime_gone_at IS NOT NULL FROM sessions ORDER BY 1")
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// A heartbeat's runtime report reaches the sessions of its device, and only its own user's when its
/// token is bound to a user: on a device two users share, alice's agent cannot mark bob's session as
/// gone, while a sender bound to no user speaks for every user of the device.
#[sqlx::test(migrations = "../migrations")]
async fn a_runtime_report_marks_only_its_users_sessions_of_its_device_gone(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let alice = ingest_token(&app, t.id, Some("alice"), None).await;
    let bob = ingest_token(&app, t.id, Some("bob"), None).await;
    let now = Utc::now();
    // Both send from the batch's device, dev-1.
    send(&app, &alice, vec![llm("qa", now, "m", 1, 1, 0.1)], vec![]).await;
    send(&app, &bob, vec![llm("qb", now, "m", 1, 1, 0.1)], vec![]).await;
    let gone = |sessions: &[&str]| {
        let runtimes: Vec<Value> = sessions
            .iter()
            .map(|s| json!({ "session_id": s, "alive": false, "evidence": "pid_exited" }))
            .collect();
        event(
            "agent.heartbeat",
            None,
            now,
            json!({ "runtimes": runtimes }),
        )
    };
    assert_eq!(
        send(&app, &alice, vec![gone(&["qa", "qb"])], vec![])
            .await
            .0,
        1
    );
    assert_eq!(
        runtime_gone(&app).await,
        vec![("qa".into(), true), ("qb".into(), false)]
    );
    let fleet = ingest_token(&app, t.id, None, None).await;
    assert_eq!(send(&app, &fleet, vec![gone(&["qb"])], vec![]).await.0, 1);
    assert_eq!(
        runtime_gone(&app).await,
        vec![("qa".into(), true), ("qb".into(), true)]
    );
}
