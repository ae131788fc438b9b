//! Another tenant's data is never visible, not even its existence, on every read endpoint and id kind.

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[sqlx::test(migrations = "../migrations")]
async fn no_read_endpoint_shows_another_tenants_data(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let a = app.tenant("a").await;
    let b = app.tenant("b").await;
    let now = Utc::now();
    let mut worker = tool("w-a", now, true);
    worker["colony_id"] = json!("q-a");
    worker["parent_session_id"] = json!("q-a");
    worker["agent_role"] = json!("worker");
    let (s, _) = app
        .post_batch(
            &a.ingest,
            &batch(
                vec![llm("q-a", now, "m-a", 5, 5, 1.0), worker],
                vec![binding("q-a", "alice")],
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    for path in [
        "/v1/sessions/q-a",
        "/v1/sessions/q-a/usage",
        "/v1/sessions/q-a/tree",
        "/v1/sessions/w-a",
        "/v1/sessions/w-a/tree",
        "/v1/colonies/q-a/usage",
    ] {
        let (s, v) = app.get(&b.read, path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {v}");
        let (s2, v2) = app.get(&b.read, &path.replace("-a", "-never")).await;
        assert_eq!(
            (s, &v),
            (s2, &v2),
            "{path}: unknown and foreign ids must look the same"
        );
        let (s, _) = app.get(&a.read, path).await;
        assert_eq!(s, StatusCode::OK, "{path} for its own tenant");
    }
    let (_, v) = app
        .get(
            &b.read,
            "/v1/usage?group_by=user,model,colony,session,device&granularity=hour",
        )
        .await;
    assert_eq!(v["rows"], json!([]));
    assert_eq!(v["totals"]["events"], 0);
    let (_, v) = app.get(&b.read, "/v1/devices").await;
    assert_eq!(v["devices"], json!([]));
    let (_, v) = app.get(&b.read, "/v1/sessions").await;
    assert_eq!(v["sessions"], json!([]), "{v}");
    let (_, v) = app.get(&a.read, "/v1/sessions").await;
    assert_eq!(v["sessions"].as_array().unwrap().len(), 2, "{v}");
    let (s, _) = app.get(&b.read, "/v1/usage?group_by=tenant").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_same_ids_in_two_tenants_stay_apart(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let a = app.tenant("a").await;
    let b = app.tenant("b").await;
    let now = Utc::now();
    let shared = llm("q1", now, "m", 10, 1, 0.25);
    // The very same event (same event_id) in both tenants: each stores its own copy.
    assert_eq!(
        app.post_batch(&a.ingest, &batch(vec![shared.clone()], vec![]))
            .await
            .1["accepted"],
        1
    );
    assert_eq!(
        app.post_batch(
            &b.ingest,
            &batch(vec![shared.clone(), llm("q1", now, "m", 7, 1, 0.0)], vec![])
        )
        .await
        .1["accepted"],
        2
    );
    let (_, va) = app.get(&a.read, "/v1/sessions/q1").await;
    let (_, vb) = app.get(&b.read, "/v1/sessions/q1").await;
    assert_eq!(va["totals"]["input_tokens"], 10);
    assert_eq!(vb["totals"]["input_tokens"], 17);
    assert_eq!(vb["totals"]["unpriced_turns"], 1);
    let (_, va) = app.get(&a.read, "/v1/devices").await;
    assert_eq!(va["devices"].as_array().unwrap().len(), 1);
    // An admin token sees every tenant only when grouping by tenant.
    let admin = app.token(a.id, &["admin"]).await;
    let (s, v) = app.get(&admin, "/v1/usage?group_by=tenant").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    let (_, v) = app.get(&admin, "/v1/usage").await;
    assert_eq!(v["totals"]["input_tokens"], 10);
}
