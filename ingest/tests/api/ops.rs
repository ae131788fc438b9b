use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::*;

#[sqlx::test(migrations = "../migrations")]
async fn health_ready_metrics_and_openapi_answer(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    for (path, want) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let v: Value = app
            .client
            .get(format!("{}{path}", app.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["status"], want);
    }
    let m = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(m.contains("apiary_ingest_batches_total"));
    let doc: Value = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/batches"]["post"].is_object());
    let r = app
        .client
        .get(format!("{}/v1/nothing", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["code"],
        "not_found"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn readyz_is_503_when_migrations_are_missing(pool: sqlx::PgPool) {
    sqlx::query("DELETE FROM _sqlx_migrations")
        .execute(&pool)
        .await
        .unwrap();
    let app = spawn_app(pool).await;
    let r = app
        .client
        .get(format!("{}/readyz", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_rate_limit_answers_429_with_retry_after(pool: sqlx::PgPool) {
    let settings = apiary_ingest::config::IngestSettings {
        rate_limit_per_sec: 0.5,
        rate_limit_burst: 2.0,
        ..test_settings()
    };
    let app = spawn_app_with(pool, settings).await;
    let t = app.tenant("acme").await;
    for _ in 0..2 {
        assert_eq!(app.get(&t.read, "/v1/devices").await.0, StatusCode::OK);
    }
    let r = app
        .client
        .get(format!("{}/v1/devices", app.base))
        .bearer_auth(&t.read)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    // Another token has its own bucket.
    assert_eq!(
        app.get(&t.ingest, "/v1/devices").await.0,
        StatusCode::FORBIDDEN
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn shutdown_stops_the_server(pool: sqlx::PgPool) {
    let app = apiary_ingest::startup::Application::build(test_settings(), pool)
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(app.run_until_stopped(async move {
        let _ = rx.await;
    }));
    tx.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), handle)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
