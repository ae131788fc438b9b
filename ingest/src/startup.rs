//! Building and running the HTTP server: the router and its layers, background maintenance
//! (partitions ahead, retention), the live stream's reader and upkeep ([`crate::stream`]), and graceful
//! shutdown (open live streams end first, so the drain is not held by them).
//!
//! Shutdown: when the `shutdown` future passed to [`Application::run_until_stopped`] resolves (SIGTERM or
//! Ctrl-C in production, anything in tests), the listener stops accepting, requests in flight finish
//! (each batch commits or rolls back as a whole), and the process gives up after `shutdown_timeout_secs`.
//!
//! Connections: served by hyper's HTTP/1 connection builder directly (not `axum::serve`, which sets no
//! header timeout), so a connection that does not complete a request head within
//! `header_read_timeout_secs` — a slowloris, or an idle keep-alive connection — is closed. Each request
//! carries its peer address (`ConnectInfo<SocketAddr>`) for the failed-authentication throttle
//! ([`crate::auth_guard`]).

use std::future::Future;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use sqlx::PgPool;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;

use crate::config::IngestSettings;
use crate::error::error_body;
use crate::routes;
use crate::state::AppState;

/// The router with every route and layer.
pub fn router(state: AppState) -> Router {
    routes::router()
        .merge(crate::dashboard::router())
        .fallback(|| async { error_body(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            error_body(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(middleware::from_fn_with_state(state.clone(), timeout))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Answers 408 (JSON) when a request takes longer than `request_timeout_secs`; its work is dropped, so a
/// batch's transaction rolls back.
async fn timeout(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = Duration::from_secs(state.settings.request_timeout_secs);
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => error_body(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            "the request took too long; retry",
        ),
    }
}

/// A bound, ready-to-run server.
pub struct Application {
    listener: TcpListener,
    state: AppState,
}

impl Application {
    /// Binds `settings.listen` (port 0 picks a free port) with the given pool.
    pub async fn build(settings: IngestSettings, pool: PgPool) -> anyhow::Result<Application> {
        use anyhow::Context as _;
        let listener = TcpListener::bind(&settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        Ok(Application {
            listener,
            state: AppState::new(settings, pool),
        })
    }

    /// The bound address (with the port the OS chose for port 0).
    pub fn address(&self) -> String {
        self.listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then drains within `shutdown_timeout_secs`.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let state = self.state.clone();
        let maintenance = tokio::spawn(run_maintenance(state.clone()));
        let stream = tokio::spawn(state.stream.clone().run_until_stopped(state.pool.clone()));
        let stream_upkeep = tokio::spawn(crate::stream::run_upkeep(
            state.pool.clone(),
            state.settings.offline_after_secs,
            state.stream.stopped(),
        ));
        let budgets = tokio::spawn(
            state
                .budgets
                .clone()
                .run(state.pool.clone(), state.reads.clone()),
        );
        let alerts = tokio::spawn(crate::alerts::run(
            state.pool.clone(),
            state.reads.clone(),
            state.settings.alerts.clone(),
            state.settings.offline_after_secs,
        ));
        let exports = tokio::spawn(crate::exports::deliver::run(
            state.pool.clone(),
            state.reads.clone(),
            std::sync::Arc::new(state.settings.alerts.clone()),
        ));
        let app = router(state.clone());
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(state.settings.header_read_timeout_secs));
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let (stream, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = &mut shutdown => break,
            };
            let app = app.clone();
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                req.extensions_mut().insert(ConnectInfo(peer));
                tower::ServiceExt::oneshot(app.clone(), req)
            });
            let conn = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
            });
        }
        tracing::info!("shutting down: draining requests in flight");
        drop(self.listener);
        // Open live streams end here (clients reconnect to another replica with Last-Event-ID).
        state.stream.stop();
        let grace = Duration::from_secs(state.settings.shutdown_timeout_secs);
        if tokio::time::timeout(grace, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("requests still in flight after the shutdown timeout; exiting anyway");
        }
        maintenance.abort();
        budgets.abort();
        alerts.abort();
        exports.abort();
        let _ = tokio::join!(stream, stream_upkeep);
        state.pool.close().await;
        Ok(())
    }
}

/// Every hour: create the partitions of the next days, and drop those past retention.
async fn run_maintenance(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        let now = chrono::Utc::now();
        if let Err(e) = state.store.ensure_ahead(now, 3).await {
            tracing::warn!(error = %e, "could not create event partitions ahead");
        }
        let cutoff = state.rules.oldest_accepted(now).date_naive();
        match state.store.drop_before(cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(dropped = n, %cutoff, "retention dropped event partitions"),
            Err(e) => tracing::warn!(error = %e, "retention failed"),
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
