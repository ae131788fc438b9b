//! Operations endpoints (no token): liveness, readiness, Prometheus metrics.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;

use crate::error::{error_body, ErrorBody};
use crate::metrics::{Metrics, CONTENT_TYPE};

/// The answer of `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
    /// `apiary-ingest`: tells a client (the agent's `doctor`) it reached an Apiary ingest.
    pub service: &'static str,
    pub version: &'static str,
}

/// The answer of `GET /readyz` when ready.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    /// Always `ready`.
    pub status: &'static str,
}

/// Liveness: the process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "Up.", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        service: "apiary-ingest",
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// Readiness: the database answers and every migration is applied.
#[utoipa::path(
    get,
    path = "/readyz",
    responses(
        (status = 200, description = "Ready.", body = Ready),
        (status = 503, description = "Not ready: the database is unreachable or a migration is missing.", body = ErrorBody)
    )
)]
pub async fn readyz(State(pool): State<PgPool>) -> Response {
    match crate::store::schema_state(&pool).await {
        Ok(schema) => match schema.problem() {
            None => Json(Ready { status: "ready" }).into_response(),
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

/// Prometheus metrics (OpenMetrics text).
#[utoipa::path(
    get,
    path = "/metrics",
    responses((status = 200, description = "OpenMetrics text format.", content_type = "application/openmetrics-text", body = String))
)]
pub async fn metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()).into_response()
}
