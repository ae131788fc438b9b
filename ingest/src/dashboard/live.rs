//! `GET /live`: the live stream of `/v1/stream` for the signed-in browser. `EventSource` cannot send an
//! `Authorization` header, so this route authenticates the cookie ([`super::Viewer`]) and then answers
//! exactly what `get_stream` answers for the same read scope (the same events, ids, `Last-Event-ID`
//! resumption and subscriber limits). `SameSite=Strict` keeps other sites' pages from opening it with
//! the cookie, and its answer is not readable across origins anyway (no CORS headers).

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::layout;
use super::Viewer;
use crate::query::ReadDb;
use crate::routes::extract::{query_params, Query};
use crate::routes::stream::{get_stream, StreamParams};
use crate::stream::StreamHub;

/// `GET /live` (`?after=ID` or `Last-Event-ID` as on `/v1/stream`).
pub async fn stream(
    State(db): State<ReadDb>,
    State(hub): State<Arc<StreamHub>>,
    viewer: Viewer,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Response {
    let params: StreamParams = match query_params(raw.as_deref().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    match get_stream(State(db), State(hub), viewer.reader, headers, Query(params)).await {
        Ok(r) => r,
        Err(e) => layout::error_page(e),
    }
}
