//! Who sees what within a tenant: a `read` token bound to a user sees only that user's usage, sessions,
//! colonies and devices; `admin` and unbound `read` tokens see the whole tenant. Revoked tokens get 401.
//! Malformed query strings and paths answer the JSON error body, never axum's plain text.

use apiary_ingest::auth::Scope;
use apiary_ingest::store::admin::{create_token, revoke_token, TokenRef, TokenSpec};
use chrono::Utc;
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

async fn token(
    app: &TestApp,
    tenant: uuid::Uuid,
    scopes: Vec<Scope>,
    user: Option<&str>,
) -> String {
    let spec = TokenSpec {
        tenant: tenant.to_string(),
        scopes,
        user_id: user.map(str::to_string),
        device_id: None,
    };
    create_token(&app.pool, &spec).await.unwrap().1
}

#[sqlx::test(migrations = "../migrations")]
async fn a_user_bound_read_token_sees_only_its_users_data(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let mut bob_worker = tool("w-bob", now, false);
    bob_worker["colony_id"] = json!("q-bob");
    bob_worker["agent_role"] = json!("worker");
    let events = vec![
        llm("q-alice", now, "m1", 100, 10, 0.1),
        llm("q-bob", now, "m1", 1000, 100, 1.0),
        bob_worker,
    ];
    let sessions = vec![binding("q-alice", "alice"), binding("q-bob", "bob")];
    let (s, _) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK);

    let alice = token(&app, t.id, vec![Scope::Read], Some("alice")).await;
    let (s, v) = app.get(&alice, "/v1/usage?group_by=user").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["totals"]["input_tokens"], 100, "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 1, "{v}");
    let (s, _) = app.get(&alice, "/v1/sessions/q-alice").await;
    assert_eq!(s, StatusCode::OK);
    for path in [
        "/v1/sessions/q-bob",
        "/v1/sessions/q-bob/usage",
        "/v1/sessions/q-bob/tree",
        "/v1/sessions/w-bob",
        "/v1/colonies/q-bob/usage",
    ] {
        let (s, v) = app.get(&alice, path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        let (s2, v2) = app.get(&alice, &path.replace("bob", "nobody")).await;
        assert_eq!((s, v), (s2, v2), "{path}: another user's id looks unknown");
    }
    let (_, v) = app.get(&alice, "/v1/sessions").await;
    let listed: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["q-alice"], "{v}");
    let (_, v) = app.get(&alice, "/v1/sessions?user=bob").await;
    assert_eq!(v["sessions"], json!([]), "{v}");
    let (_, v) = app.get(&alice, "/v1/devices").await;
    assert_eq!(
        v["devices"],
        json!([]),
        "the device was registered by an unbound token: {v}"
    );

    // The whole tenant: an unbound read token, and an admin token even when bound to a user.
    let admin = token(&app, t.id, vec![Scope::Admin], Some("alice")).await;
    for tok in [&t.read, &admin] {
        let (_, v) = app.get(tok, "/v1/usage").await;
        assert_eq!(v["totals"]["input_tokens"], 1100, "{v}");
        let (s, _) = app.get(tok, "/v1/sessions/q-bob/tree").await;
        assert_eq!(s, StatusCode::OK);
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn malformed_query_strings_and_paths_answer_the_json_error_body(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    for path in [
        "/v1/usage?from=%FF",
        "/v1/usage?%FF=1",
        "/v1/sessions/%FF",
        "/v1/sessions/%FF%FE/usage",
        "/v1/sessions/q1/usage?tz=%C3%28",
        "/v1/colonies/%FF/usage",
    ] {
        let resp = app
            .client
            .get(format!("{}{}", app.base, path))
            .bearer_auth(&t.read)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text:?}"));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert!(
            v["error"]["code"].is_string() && v["error"]["message"].is_string(),
            "{path}: {v}"
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_revoked_token_is_refused(pool: sqlx::PgPool) {
    let mut settings = test_settings();
    settings.token_cache_secs = 0;
    let app = spawn_app_with(pool, settings).await;
    let t = app.tenant("acme").await;
    let (s, _) = app.get(&t.read, "/v1/usage").await;
    assert_eq!(s, StatusCode::OK);
    let id = revoke_token(&app.pool, &TokenRef::Token(t.read.clone()))
        .await
        .unwrap();
    assert!(id.is_some());
    let again = revoke_token(&app.pool, &TokenRef::Id(id.unwrap()))
        .await
        .unwrap();
    assert_eq!(again, id, "revoking twice is harmless");
    let (s, v) = app.get(&t.read, "/v1/usage").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let none = revoke_token(&app.pool, &TokenRef::Id(uuid::Uuid::new_v4()))
        .await
        .unwrap();
    assert_eq!(none, None);
}
