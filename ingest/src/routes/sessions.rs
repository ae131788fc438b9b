//! Session and colony reads (scope `read`): `/v1/sessions` (a listing), `/v1/sessions/{id}`,
//! `/v1/sessions/{id}/usage`, `/v1/sessions/{id}/tree`, `/v1/sessions/{id}/history`,
//! `/v1/colonies/{id}/usage`. Every handler takes a [`TenantRead`] (the token's tenant, and its user for
//! a user-bound `read` token) and the [`ReadDb`]. Unknown and other-tenant ids are both 404.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;

use super::docs::{ReadErrors, UsageErrors};
use super::extract::{Path, Query};
use super::negotiate::{csv_answer, usage_answer, wants_csv, NEXT_CURSOR};
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::history::{self, SessionHistory};
use crate::query::sessions::body::{self, SessionPage, TreeNode};
use crate::query::sessions::detail::SessionDetail;
use crate::query::sessions::work;
use crate::query::sessions::{self, ListFilter, ListParams};
use crate::query::usage::body::{ColonyUsage, SessionUsage};
use crate::query::usage::{self, Dim, GroupBy, Part, TimeArg, UsageParams, UsageQuery, Within};
use crate::query::{listings_csv, ReadDb};

fn check_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 200 {
        return Err(ApiError::bad_param("id", "must have 1 to 200 characters"));
    }
    Ok(())
}

/// Usage parameters with defaults for a single session or colony: all time, totals, by `group_by`.
fn scoped_usage(mut p: UsageParams, group_by: Dim) -> Result<UsageQuery, ApiError> {
    p.from
        .get_or_insert(TimeArg::Instant(usage::all_time_from()));
    p.group_by.get_or_insert(GroupBy(vec![group_by]));
    let q = UsageQuery::from_params(p, Utc::now())?;
    if q.group_by.contains(&Dim::Tenant) {
        return Err(ApiError::bad_param(
            "group_by",
            "tenant is not available here",
        ));
    }
    Ok(q)
}

/// The tenant's sessions, most recently active first (last event time, then id), each as
/// `/v1/sessions/{id}` returns it; `next_cursor` (null at the end) gives the next page. With a status
/// filter a page may come back short, even empty, with a cursor to go on from. A `read` token bound to
/// a user sees only that user's sessions. `format=csv` (or `Accept: text/csv`) answers the same page,
/// one line per session, with the next page's cursor in the `X-Next-Cursor` header (absent at the end).
#[utoipa::path(
    get,
    path = "/v1/sessions",
    params(ListParams),
    security(("bearer" = [])),
    responses((status = 200, description = "A page of sessions (as CSV with `format=csv` or `Accept: text/csv`).",
        headers(("X-Next-Cursor" = String, description = "CSV only: the next page's `cursor`; absent at the end.")),
        content(
            (SessionPage = "application/json"),
            (String = "text/csv")
        )), ReadErrors)
)]
pub async fn list_sessions(
    State(db): State<ReadDb>,
    reader: TenantRead,
    headers: HeaderMap,
    Query(params): Query<ListParams>,
) -> Result<Response, ApiError> {
    let csv = wants_csv(params.format, &headers);
    let page = session_page(&db, &reader, params).await?;
    if !csv {
        return Ok(Json(page).into_response());
    }
    let mut r = csv_answer(listings_csv::sessions(&page), "sessions.csv");
    if let Some(v) = page
        .next_cursor
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        r.headers_mut().insert(NEXT_CURSOR, v);
    }
    Ok(r)
}

/// The page of sessions `params` ask for (the listing's JSON, also the dashboard's sessions page).
pub async fn session_page(
    db: &ReadDb,
    reader: &TenantRead,
    params: ListParams,
) -> Result<SessionPage, ApiError> {
    let filter = ListFilter::from(params);
    let now = Utc::now();
    let (rows, next) = sessions::list::list(db, reader, &filter, now, db.rules()).await?;
    let ids: Vec<String> = rows.iter().map(|r| r.session_id.clone()).collect();
    let totals = sessions::totals(db, reader, &ids).await?;
    let mut below = sessions::below(db, reader, &ids, now, db.rules()).await?;
    let sessions = rows
        .iter()
        .map(|r| {
            let t = totals.get(&r.session_id).copied().unwrap_or_default();
            let mut body = r.body(now, db.rules(), &t);
            body.below = below.remove(&r.session_id).unwrap_or_default();
            body
        })
        .collect();
    Ok(SessionPage {
        sessions,
        next_cursor: next.map(|c| c.encode()),
    })
}

/// A session: identity, phase, status (the shared health model, see docs/session-status.md) with
/// status_since and status_cause, time_in_state (seconds per status), lifecycle, last health signal,
/// totals (the session's own usage), the statuses of the sessions below it (`below`), and the topmost
/// session of its tree (`root_session_id`).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    params(("id" = String, Path, description = "session id", max_length = 200)),
    security(("bearer" = [])),
    responses((status = 200, description = "The session, with its task list and triggers.",
        body = SessionDetail), ReadErrors)
)]
pub async fn get_session(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Path(id): Path<String>,
) -> Result<Json<SessionDetail>, ApiError> {
    check_id(&id)?;
    let row = sessions::get(&db, &reader, &id).await?;
    let one = std::slice::from_ref(&id);
    let totals = sessions::totals(&db, &reader, one).await?;
    let t = totals.get(&id).copied().unwrap_or_default();
    let now = Utc::now();
    let mut body = row.body(now, db.rules(), &t);
    body.below = sessions::below(&db, &reader, one, now, db.rules())
        .await?
        .remove(&id)
        .unwrap_or_default();
    let mut detail = SessionDetail::new(body, &work::stored(row.work.as_ref()));
    detail.root_session_id = sessions::root_of(&db, &reader, &id).await?;
    Ok(Json(detail))
}

/// A session's status history: every transition `{at, from, to, cause}` oldest first (from is null for
/// the first), including those time caused after its last event (no progress for stall_after) and the
/// current offline overlay, and its time in each status.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/history",
    params(("id" = String, Path, description = "session id", max_length = 200)),
    security(("bearer" = [])),
    responses((status = 200, description = "The session's history.", body = SessionHistory), ReadErrors)
)]
pub async fn get_session_history(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Path(id): Path<String>,
) -> Result<Json<SessionHistory>, ApiError> {
    check_id(&id)?;
    let row = sessions::get(&db, &reader, &id).await?;
    let now = Utc::now();
    let h = history::session_history(&db, &reader, &row, now, db.rules()).await?;
    Ok(Json(h))
}

/// A session's usage (default: all time, by model).
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/usage",
    params(("id" = String, Path, description = "session id", max_length = 200), UsageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The session's usage (as CSV with `format=csv` or `Accept: text/csv`).",
        headers(("X-Next-Cursor" = String, description = "CSV of a page (`limit`): the next page's `cursor`; absent after the last.")),
        content(
            (SessionUsage = "application/json"),
            (String = "text/csv")
        )),
        UsageErrors
    )
)]
pub async fn get_session_usage(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(params): Query<UsageParams>,
) -> Result<Response, ApiError> {
    let csv = wants_csv(params.format, &headers);
    let Json(answer) = session_usage_json(State(db), reader, Path(id), Query(params)).await?;
    Ok(usage_answer(csv, answer, "session-usage"))
}

/// The JSON answer of [`get_session_usage`] (the dashboard's session page calls it too).
pub async fn session_usage_json(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Path(id): Path<String>,
    Query(params): Query<UsageParams>,
) -> Result<Json<SessionUsage>, ApiError> {
    check_id(&id)?;
    let paging = params.paging()?;
    let q = scoped_usage(params, Dim::Model)?;
    sessions::get(&db, &reader, &id).await?;
    let part = Part::Sessions(vec![id.clone()]);
    let usage = usage::answer(&db, Within::Tenant(&reader, &part), &q, paging.as_ref()).await?;
    Ok(Json(SessionUsage {
        session_id: id,
        usage,
    }))
}

/// The session → colonies → workers, with usage rolled up; forked sessions (Hive's `session_forked`,
/// a colony's fork of its queen) below the session they were forked from, each colony with its key (when
/// named) and its workers counted by status.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/tree",
    params(("id" = String, Path, description = "session id", max_length = 200)),
    security(("bearer" = [])),
    responses((status = 200, description = "The tree.", body = TreeNode), ReadErrors)
)]
pub async fn get_session_tree(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Path(id): Path<String>,
) -> Result<Json<TreeNode>, ApiError> {
    check_id(&id)?;
    let rows = sessions::subtree(&db, &reader, &id).await?;
    let ids: Vec<String> = rows.iter().map(|r| r.session_id.clone()).collect();
    let usage = sessions::totals(&db, &reader, &ids).await?;
    let links = sessions::links(&db, &reader, &ids).await?;
    body::tree(&id, &rows, &usage, Utc::now(), db.rules(), &links)
        .map(Json)
        .ok_or(ApiError::NotFound("session"))
}

/// A colony's usage (default: all time, by session). `id` is a colony key (`ck_…`/`dk_…`: every run's
/// workers and forked colony sessions, as `group_by=colony` counts them) or, as before colony keys, the
/// queen session the workers name as their colony (its workers' events).
#[utoipa::path(
    get,
    path = "/v1/colonies/{id}/usage",
    params(("id" = String, Path, description = "colony id", max_length = 200), UsageParams),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The colony's usage (as CSV with `format=csv` or `Accept: text/csv`).",
        headers(("X-Next-Cursor" = String, description = "CSV of a page (`limit`): the next page's `cursor`; absent after the last.")),
        content(
            (ColonyUsage = "application/json"),
            (String = "text/csv")
        )),
        UsageErrors
    )
)]
pub async fn get_colony_usage(
    State(db): State<ReadDb>,
    reader: TenantRead,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(params): Query<UsageParams>,
) -> Result<Response, ApiError> {
    check_id(&id)?;
    let csv = wants_csv(params.format, &headers);
    let paging = params.paging()?;
    let q = scoped_usage(params, Dim::Session)?;
    let part = if apiary_schema::colony::is_colony_key(&id) {
        if !crate::query::colonies::visible(&db, &reader, &id).await? {
            return Err(ApiError::NotFound("colony"));
        }
        Part::ColonyKey(id.clone())
    } else {
        if !sessions::colony_exists(&db, &reader, &id).await? {
            return Err(ApiError::NotFound("colony"));
        }
        Part::Colony(id.clone())
    };
    let usage = usage::answer(&db, Within::Tenant(&reader, &part), &q, paging.as_ref()).await?;
    let answer = ColonyUsage {
        colony_id: id,
        usage,
    };
    Ok(usage_answer(csv, answer, "colony-usage"))
}
