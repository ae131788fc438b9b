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

/// `GET /v1/devices` with `token`: the status and the `Retry-After` seconds, if any.
async fn get_devices(app: &TestApp, token: &str) -> (StatusCode, Option<u64>) {
    let r = app
        .client
        .get(format!("{}/v1/devices", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (r.status(), retry)
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
    let (status, retry) = get_devices(&app, &t.read).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry = retry.expect("a 429 says when to retry");
    assert!((1..=2).contains(&retry), "{retry}");
    // Another token has its own bucket.
    assert_eq!(
        app.get(&t.ingest, "/v1/devices").await.0,
        StatusCode::FORBIDDEN
    );
}

/// Unknown tokens spend their client address's allowance of failed authentications
/// (`auth_failure_burst`); once it is spent, every request from that address that needs a token
/// checked is answered 429 with `Retry-After` before any lookup, a valid token's too.
#[sqlx::test(migrations = "../migrations")]
async fn an_address_sending_unknown_tokens_is_throttled_before_any_lookup(pool: sqlx::PgPool) {
    let settings = apiary_ingest::config::IngestSettings {
        auth_failure_burst: 2.0,
        auth_failures_per_sec: 0.01,
        ..test_settings()
    };
    let app = spawn_app_with(pool, settings).await;
    let t = app.tenant("acme").await;
    assert_eq!(app.get(&t.read, "/v1/devices").await.0, StatusCode::OK);
    for i in 0..2 {
        let unknown = format!("apy_{i:064x}");
        let (s, v) = app.get(&unknown, "/v1/devices").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "failure {i} of the burst: {v}");
    }
    for token in [format!("apy_{:064x}", 2), t.read.clone()] {
        let (status, retry) = get_devices(&app, &token).await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "the address has spent its failures, yet {token} was looked up"
        );
        let retry = retry.expect("a 429 says when to retry");
        assert!(retry >= 1, "{retry}");
    }
}

/// A bearer value longer than any token (tokens are 68 characters; more than 200 is refused) is
/// answered 401 at once: no lookup, so it spends nothing of its address's allowance of failures.
#[sqlx::test(migrations = "../migrations")]
async fn a_bearer_value_too_long_to_be_a_token_is_refused_without_a_lookup(pool: sqlx::PgPool) {
    let settings = apiary_ingest::config::IngestSettings {
        auth_failure_burst: 1.0,
        auth_failures_per_sec: 0.01,
        ..test_settings()
    };
    let app = spawn_app_with(pool, settings).await;
    let t = app.tenant("acme").await;
    let too_long = format!("apy_{}", "0".repeat(300));
    for i in 0..3 {
        let (s, v) = app.get(&too_long, "/v1/devices").await;
        assert_eq!(
            s,
            StatusCode::UNAUTHORIZED,
            "attempt {i}: an over-long value was looked up and spent the address's failures: {v}"
        );
    }
    assert_eq!(
        app.get(&t.read, "/v1/devices").await.0,
        StatusCode::OK,
        "the address keeps its allowance"
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
