//! HTTP routes, one file per group. Every `/v1` route authenticates with a bearer token (the
//! [`Principal`](crate::auth::Principal) extractor, which also applies the per-token rate limit) and is
//! scoped to the token's tenant. Query strings deserialize into each route's parameter struct and path
//! parameters are read through [`extract`]'s wrappers, so that a malformed one answers the JSON error
//! body (400, naming the parameter), never axum's plain-text rejection. Handlers take the parts of the
//! state they need ([`crate::state`]); read handlers reach the database only through
//! [`crate::query::ReadDb`] and a read scope. Every handler carries its `#[utoipa::path]`, from which
//! [`openapi`] builds the document.

pub mod alerts;
mod batches;
pub mod budgets;
pub(crate) mod colonies;
mod device_keys;
pub(crate) mod devices;
mod docs;
pub(crate) mod exports;
pub mod extract;
mod negotiate;
pub mod openapi;
mod ops;
pub mod prices;
pub(crate) mod sessions;
mod status;
pub(crate) mod stream;
mod tenant;
mod tenant_metrics;
pub(crate) mod usage;
mod whoami;

use axum::routing::{delete, get, post, put};
use axum::Router;

use crate::state::AppState;

/// Every route.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/batches", post(batches::post_batch))
        .route("/v1/usage", get(usage::get_usage))
        .route("/v1/sessions", get(sessions::list_sessions))
        .route("/v1/sessions/{id}", get(sessions::get_session))
        .route("/v1/sessions/{id}/usage", get(sessions::get_session_usage))
        .route("/v1/sessions/{id}/tree", get(sessions::get_session_tree))
        .route(
            "/v1/sessions/{id}/history",
            get(sessions::get_session_history),
        )
        .route("/v1/status/transitions", get(status::get_transitions))
        .route("/v1/colonies", get(colonies::list_colonies))
        .route("/v1/colonies/{key}/label", put(colonies::put_colony_label))
        .route("/v1/colonies/{id}/usage", get(sessions::get_colony_usage))
        .route("/v1/devices", get(devices::get_devices))
        .route("/v1/devices/key", post(device_keys::post_device_key))
        .route(
            "/v1/prices",
            get(prices::get_prices).post(prices::post_price),
        )
        .route("/v1/prices/reprice", post(prices::post_reprice))
        .route(
            "/v1/budgets",
            get(budgets::list_budgets).post(budgets::post_budget),
        )
        .route(
            "/v1/budgets/{id}",
            get(budgets::get_budget)
                .put(budgets::put_budget)
                .patch(budgets::patch_budget)
                .delete(budgets::delete_budget),
        )
        .route("/v1/alerts", get(alerts::list_alerts))
        .route(
            "/v1/alerts/destinations",
            get(alerts::list_destinations).post(alerts::post_destination),
        )
        .route(
            "/v1/alerts/destinations/{id}",
            delete(alerts::delete_destination),
        )
        .route(
            "/v1/alerts/rules",
            get(alerts::list_rules).post(alerts::post_rule),
        )
        .route("/v1/alerts/rules/{id}", delete(alerts::delete_rule))
        .route("/v1/stream", get(stream::get_stream))
        .route("/v1/metrics", get(tenant_metrics::get_tenant_metrics))
        .route(
            "/v1/exports",
            get(exports::list_exports).post(exports::post_export),
        )
        .route("/v1/exports/{id}", delete(exports::delete_export))
        .route("/v1/whoami", get(whoami::get_whoami))
        .route(
            "/v1/tenant/settings",
            get(tenant::get_tenant_settings).put(tenant::put_tenant_settings),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/openapi.json", get(openapi::get_openapi))
}
