//! "Download CSV" (`/usage.csv`, `/sessions.csv`, `/colonies.csv`): what the overview, the sessions
//! list and the colonies page show, as the API's CSV answer to the same query. Each takes its page's
//! query string with that page's defaults (the overview's last 30 days by model and day, the list's page
//! size, the colonies' range), forces `format=csv` and calls the API's own handler (`get_usage`,
//! `list_sessions`, `list_colonies`) with the viewer's scope — so a file holds exactly the API's CSV of
//! `GET /v1/usage?…&format=csv` (and its `Content-Disposition`, and for sessions the `X-Next-Cursor`
//! of the next page), under the same tenant / user scope, with the same 400s.
//!
//! The pages link here with [`super::format::csv_link`]. These are the dashboard's routes, not links
//! to `/v1/…`, because the API ignores the sign-in cookie (see [`super`]): a browser following a link
//! to the API would have no token to send.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::layout;
use super::overview::{non_empty, page_params};
use super::sessions::PAGE;
use super::Viewer;
use crate::access::UsageReader;
use crate::query::sessions::ListParams;
use crate::query::usage::AnswerFormat;
use crate::query::ReadDb;
use crate::routes::extract::{query_params, Query};
use crate::state::AppState;

fn answer(r: Result<Response, crate::error::ApiError>) -> Response {
    r.unwrap_or_else(layout::error_page)
}

/// `GET /usage.csv`: the overview's usage.
pub async fn usage(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let mut params = match page_params(raw.as_deref().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    params.format = Some(AnswerFormat::Csv);
    let reader = UsageReader::Tenant(viewer.reader.clone());
    answer(
        crate::routes::usage::get_usage(
            State(state.reads.clone()),
            reader,
            HeaderMap::new(),
            Query(params),
        )
        .await,
    )
}

/// `GET /sessions.csv`: the page of sessions the list shows.
pub async fn sessions(
    State(db): State<ReadDb>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let mut params: ListParams = match query_params(&non_empty(raw.as_deref().unwrap_or(""))) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    if params.limit.is_none() {
        params.limit = PAGE.parse().ok();
    }
    params.format = Some(AnswerFormat::Csv);
    answer(
        crate::routes::sessions::list_sessions(
            State(db),
            viewer.reader.clone(),
            HeaderMap::new(),
            Query(params),
        )
        .await,
    )
}

/// `GET /colonies.csv`: the colonies of the page's range.
pub async fn colonies(
    State(db): State<ReadDb>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let mut params = match super::fleet::colony_params(raw.as_deref()) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    params.format = Some(AnswerFormat::Csv);
    answer(
        crate::routes::colonies::list_colonies(
            State(db),
            viewer.reader.clone(),
            HeaderMap::new(),
            Query(params),
        )
        .await,
    )
}
