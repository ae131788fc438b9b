//! Operations endpoints (no token): liveness, readiness, Prometheus metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::error_body;
use crate::startup::AppState;

/// The process is up; `service` tells a client (the agent's `doctor`) it reached an Apiary ingest.
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({
        "status": "ok",
        "service": "apiary-ingest",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// The database answers and every migration is applied.
pub async fn readyz(State(state): State<AppState>) -> Response {
    match crate::store::schema_state(&state.pool).await {
        Ok(schema) => match schema.problem() {
            None => Json(json!({ "status": "ready" })).into_response(),
            Some(problem) => error_body(StatusCode::SERVICE_UNAVAILABLE, "not_ready", &problem),
        },
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            error_body(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the database is unreachable",
            )
        }
    }
}

/// Prometheus text format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
