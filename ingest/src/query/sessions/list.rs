//! The session listing (`GET /v1/sessions`): its parameters ([`ListParams`]), the page statement (pure,
//! [`page_query`]) and the paging loop ([`list`]), which derives each session's status at `now` and so
//! filters by status after the query.

use std::str::FromStr;

use apiary_schema::status::{Rules, Status};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::{Postgres, QueryBuilder};
use utoipa::IntoParams;

use super::{SessionRow, SELECT};
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::params::{parsed, Limit, Rfc3339, Statuses, Text};
use crate::query::usage::AnswerFormat;
use crate::query::ReadDb;

/// Default page size.
pub const DEFAULT_LIMIT: usize = 100;
/// Largest page size.
pub const MAX_LIMIT: usize = 1000;

/// The query string of `GET /v1/sessions`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Comma-separated statuses: active, waiting, idle, degraded, stalled, needs_attention, failed,
    /// completed, offline, crashed.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub status: Option<Statuses>,
    /// Only this user's sessions.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub user: Option<Text>,
    /// Only this device's sessions.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub device: Option<Text>,
    /// Only the sessions of this colony (its key, `ck_…` or `dk_…`, as `GET /v1/colonies` lists it):
    /// the colony's runs and their workers.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>, min_length = 1, max_length = 200)]
    pub colony: Option<Text>,
    /// RFC 3339: only sessions with an event at or after this time.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub since: Option<Rfc3339>,
    /// Page size, 1 to 1000 (default 100).
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<Limit<MAX_LIMIT>>,
    /// The `next_cursor` of the previous page.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub cursor: Option<Cursor>,
    /// `json` (the default) or `csv` (one line per session of the page, the next page's cursor in the
    /// `X-Next-Cursor` header; see docs/exports.md). Without it, `Accept: text/csv` asks for CSV too.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<AnswerFormat>)]
    pub format: Option<AnswerFormat>,
}

/// Where a page of [`list`] ended: the sort key of the last session looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: DateTime<Utc>,
    pub session_id: String,
}

impl Cursor {
    /// Opaque to clients: Unix microseconds, a dot, the session id.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.at.timestamp_micros(), self.session_id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (micros, id) = s.split_once('.')?;
        let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
        (!id.is_empty() && id.len() <= 200).then(|| Cursor {
            at,
            session_id: id.to_string(),
        })
    }

    pub(crate) fn of(r: &SessionRow) -> Cursor {
        Cursor {
            at: r.last_event_at.unwrap_or(r.first_seen_at),
            session_id: r.session_id.clone(),
        }
    }
}

impl FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Cursor, String> {
        Cursor::decode(s).ok_or_else(|| "is not a cursor this endpoint returned".into())
    }
}

/// What `GET /v1/sessions` asks for.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub user: Option<String>,
    pub device: Option<String>,
    /// Only the runs of the colony with this key and their workers.
    pub colony: Option<String>,
    /// Only sessions with an event (or, without events, first seen) at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only sessions whose derived status is one of these.
    pub statuses: Option<Vec<apiary_schema::status::Status>>,
    pub limit: usize,
    pub after: Option<Cursor>,
}

impl From<ListParams> for ListFilter {
    fn from(p: ListParams) -> ListFilter {
        ListFilter {
            user: p.user.map(|t| t.0),
            device: p.device.map(|t| t.0),
            colony: p.colony.map(|t| t.0),
            since: p.since.map(|t| t.0),
            statuses: p.status.map(|s| s.0),
            limit: p.limit.map_or(DEFAULT_LIMIT, |l| l.0),
            after: p.cursor,
        }
    }
}

/// Most sessions one request looks at when a status filter skips some: a page can come back short (even
/// empty) with a cursor to go on from, instead of one request scanning a whole large tenant.
const LIST_SCAN_MAX: usize = 10_000;
/// Sessions fetched per query while a status filter is on.
const LIST_CHUNK: usize = 500;

/// The sessions a status filter can match, by their stored end (`sessions.ended`, written with the
/// tracker: NULL exactly while the status is neither `completed` nor `failed`): open ones for any other
/// status (derived at read time by [`list`], so all of them are read), and the ended ones whose end is
/// asked for. Each is an arm of the page statement walked through its own index: the open and the failed
/// sessions have a partial index each (`sessions_open_recent`, `sessions_failed_recent`), a small part of
/// a tenant's history; completed ones the tenant's (`sessions_recent`).
fn arms(statuses: &[Status]) -> Vec<&'static str> {
    let mut arms = Vec::new();
    if statuses.iter().any(|s| !s.is_terminal()) {
        arms.push(OPEN);
    }
    if statuses.contains(&Status::Failed) {
        arms.push(" AND s.ended = 'failed'");
    }
    if statuses.contains(&Status::Completed) {
        arms.push(" AND s.ended = 'completed'");
    }
    if arms.is_empty() {
        // No status asked for: nothing matches.
        arms.push(" AND false");
    }
    arms
}

/// The arm of the open sessions ([`arms`]).
const OPEN: &str = " AND s.ended IS NULL";

/// The earliest last event an open session can have and still be in one of `statuses` at `now`, when
/// that bounds them: `active` and `degraded` need progress within the rules' `stall_after_secs` (past it
/// the no-progress rule has made the session idle or stalled, and only a new input moves it back), and
/// a session's last event is never before its last progress (both are its events' effective times).
/// None when any other open status is asked for, or none is.
pub fn open_since(statuses: &[Status], now: DateTime<Utc>, rules: &Rules) -> Option<DateTime<Utc>> {
    let mut open = statuses.iter().filter(|s| !s.is_terminal()).peekable();
    (open.peek().is_some() && open.all(|s| matches!(s, Status::Active | Status::Degraded)))
        .then(|| now - chrono::TimeDelta::seconds(rules.stall_after_secs))
}

/// Up to `fetch` sessions the reader may see matching `f`, after `after`, most recently active first.
/// With a status filter, only those whose stored end does not rule them out ([`arms`]; several arms are
/// each ordered and limited, then merged), the open ones from `open_since` on when given ([`open_since`]).
pub fn page_query(
    r: &TenantRead,
    f: &ListFilter,
    after: Option<&Cursor>,
    fetch: usize,
    open_since: Option<DateTime<Utc>>,
) -> QueryBuilder<'static, Postgres> {
    let arms = f.statuses.as_deref().map_or(vec![""], arms);
    let since = |arm: &str| open_since.filter(|_| arm == OPEN);
    if let [arm] = arms[..] {
        let mut q = QueryBuilder::new("");
        push_arm(&mut q, r, f, after, fetch, (arm, since(arm)), true);
        return q;
    }
    let mut q = QueryBuilder::new("SELECT * FROM (");
    for (i, arm) in arms.into_iter().enumerate() {
        q.push(if i == 0 { "(" } else { ") UNION ALL (" });
        push_arm(&mut q, r, f, after, fetch, (arm, since(arm)), i == 0);
    }
    q.push(")) AS s ORDER BY COALESCE(s.last_event_at, s.first_seen_at) DESC, s.session_id DESC LIMIT ")
        .push_bind(fetch as i64);
    q
}

/// One statement of [`page_query`]: the filters of `f` and `arm` (its condition, and the earliest last
/// event it reads when bounded), ordered, limited. The tenant is `$1` (which [`SELECT`]'s device
/// subquery names): bound by the `first` arm, named by the others, so that every arm visibly reads one
/// tenant (Citus routes the whole statement to its shard).
fn push_arm(
    q: &mut QueryBuilder<'static, Postgres>,
    r: &TenantRead,
    f: &ListFilter,
    after: Option<&Cursor>,
    fetch: usize,
    (arm, since): (&'static str, Option<DateTime<Utc>>),
    first: bool,
) {
    q.push(SELECT);
    q.push(" WHERE s.tenant_id = ");
    if first {
        q.push_bind(r.tenant_id());
    } else {
        q.push("$1");
    }
    for (col, v) in [
        ("s.user_id", r.user()),
        ("s.user_id", f.user.as_deref()),
        ("s.device_id", f.device.as_deref()),
    ] {
        if let Some(v) = v {
            q.push(format!(" AND {col} = ")).push_bind(v.to_string());
        }
    }
    if let Some(key) = &f.colony {
        // A colony run is the session its colony.created event names; its workers name the run as their
        // colony or parent. The colony's runs are read once (an array), and each of the three columns
        // is matched through its own index: the sessions are found from the colony, not the colony
        // looked up for each session of the tenant (which read the tenant's whole history when the
        // colony was not recent).
        q.push(" AND (");
        for (i, col) in ["s.session_id", "s.colony_id", "s.parent_session_id"]
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                q.push(" OR ");
            }
            q.push(col)
                .push(" = ANY (ARRAY(SELECT c.session_id FROM colony_runs c WHERE c.tenant_id = ")
                .push_bind(r.tenant_id())
                .push(" AND c.colony_key = ")
                .push_bind(key.clone())
                .push("))");
        }
        q.push(")");
    }
    q.push(arm);
    // The later of the reader's `since` and the arm's own bound.
    if let Some(since) = since.max(f.since) {
        q.push(" AND COALESCE(s.last_event_at, s.first_seen_at) >= ")
            .push_bind(since);
    }
    if let Some(c) = after {
        q.push(" AND (COALESCE(s.last_event_at, s.first_seen_at), s.session_id) < (")
            .push_bind(c.at)
            .push(", ")
            .push_bind(c.session_id.clone())
            .push(")");
    }
    q.push(" ORDER BY COALESCE(s.last_event_at, s.first_seen_at) DESC, s.session_id DESC LIMIT ")
        .push_bind(fetch as i64);
}

/// The sessions the reader may see, most recently active first: ordered by the last event's
/// time (the first-seen time for a session registered without events), then by id, both descending.
/// Status is derived here, at `now`, so the status filter runs after the query (which leaves out only
/// the sessions whose stored end rules them out, [`arms`]). Returns the page and,
/// when there may be more, the cursor to pass on.
pub async fn list(
    db: &ReadDb,
    r: &TenantRead,
    f: &ListFilter,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<(Vec<SessionRow>, Option<Cursor>), ApiError> {
    let mut out = Vec::new();
    let mut after = f.after.clone();
    let mut scanned = 0usize;
    let since = f
        .statuses
        .as_deref()
        .and_then(|s| open_since(s, now, rules));
    loop {
        let fetch = match f.statuses {
            None => f.limit + 1 - out.len(),
            Some(_) => LIST_CHUNK,
        };
        let rows: Vec<SessionRow> = page_query(r, f, after.as_ref(), fetch, since)
            .build_query_as()
            .fetch_all(&db.pool)
            .await?;
        let exhausted = rows.len() < fetch;
        let mut last = None;
        for r in rows {
            if out.len() == f.limit {
                return Ok((out, last.or(after)));
            }
            scanned += 1;
            last = Some(Cursor::of(&r));
            if f.statuses
                .as_ref()
                .is_none_or(|s| s.contains(&r.view(now, rules).status))
            {
                out.push(r);
            }
        }
        if exhausted {
            return Ok((out, None));
        }
        after = last.or(after);
        if scanned >= LIST_SCAN_MAX {
            return Ok((out, after));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn a_user_bound_read_filters_by_its_user_whatever_the_parameters_say() {
        let r = TenantRead::for_user(Uuid::nil(), "alice");
        let params: ListParams =
            crate::routes::extract::query_params("user=bob&device=d1&limit=5").unwrap();
        let f = ListFilter::from(params);
        assert_eq!(f.limit, 5);
        let cursor = Cursor::decode("1700000000000000.s9").unwrap();
        let sql = page_query(&r, &f, Some(&cursor), 6, None).into_sql();
        assert!(
            sql.contains(
                "WHERE s.tenant_id = $1 AND s.user_id = $2 AND s.user_id = $3 AND s.device_id = $4"
            ),
            "{sql}"
        );
        assert!(sql.contains("s.session_id) < ($5, $6)"), "{sql}");
        assert!(sql.ends_with("s.session_id DESC LIMIT $7"), "{sql}");
    }

    #[test]
    fn a_status_filter_reads_the_open_sessions_and_those_ended_as_asked_each_by_its_arm() {
        let r = TenantRead::tenant_wide(Uuid::nil());
        let sql = |statuses: &str| {
            let params: ListParams =
                crate::routes::extract::query_params(&format!("status={statuses}")).unwrap();
            page_query(&r, &ListFilter::from(params), None, 500, None).into_sql()
        };
        let arms = |q: &str| {
            [
                "s.ended IS NULL",
                "s.ended = 'failed'",
                "s.ended = 'completed'",
            ]
            .into_iter()
            .filter(|a| q.contains(a))
            .collect::<Vec<_>>()
        };
        assert_eq!(arms(&sql("active,stalled,offline")), ["s.ended IS NULL"]);
        assert_eq!(arms(&sql("failed")), ["s.ended = 'failed'"]);
        assert_eq!(arms(&sql("completed")), ["s.ended = 'completed'"]);
        let all = sql("completed,failed,crashed");
        assert_eq!(arms(&all).len(), 3, "{all}");
        // Every arm reads the tenant `$1`, is ordered and limited; the merge is ordered and limited again.
        assert!(
            all.starts_with("SELECT * FROM ((SELECT s.session_id"),
            "{all}"
        );
        assert_eq!(all.matches(" UNION ALL ").count(), 2, "{all}");
        assert_eq!(all.matches("s.session_id DESC LIMIT $").count(), 4, "{all}");
        assert!(all.ends_with(")) AS s ORDER BY COALESCE(s.last_event_at, s.first_seen_at) DESC, s.session_id DESC LIMIT $5"), "{all}");
        assert_eq!(all.matches("WHERE s.tenant_id = $1 ").count(), 3, "{all}");
        let unfiltered = page_query(&r, &ListFilter::default(), None, 500, None).into_sql();
        assert!(!unfiltered.contains("ended"), "{unfiltered}");
        assert_eq!(super::arms(&[]), [" AND false"]);
    }

    #[test]
    fn only_active_and_degraded_bound_the_open_sessions_by_their_last_event() {
        let now = DateTime::parse_from_rfc3339("2026-06-01T12:00:00Z")
            .unwrap()
            .to_utc();
        let rules = Rules::default();
        let bound = Some(now - chrono::TimeDelta::seconds(rules.stall_after_secs));
        for (statuses, want) in [
            (&[Status::Active][..], bound),
            (&[Status::Degraded, Status::Active, Status::Failed], bound),
            (&[Status::Active, Status::Stalled], None),
            (&[Status::Idle], None),
            (&[Status::Offline, Status::Active], None),
            (&[Status::Completed, Status::Failed], None),
        ] {
            assert_eq!(open_since(statuses, now, &rules), want, "{statuses:?}");
        }
        // Only the open arm is bounded.
        let r = TenantRead::tenant_wide(Uuid::nil());
        let params: ListParams =
            crate::routes::extract::query_params("status=active,failed").unwrap();
        let sql = page_query(&r, &ListFilter::from(params), None, 500, bound).into_sql();
        assert!(
            sql.contains("s.ended IS NULL AND COALESCE(s.last_event_at, s.first_seen_at) >= $2"),
            "{sql}"
        );
        assert_eq!(sql.matches("first_seen_at) >= $").count(), 1, "{sql}");
    }

    #[test]
    fn cursors_round_trip_and_foreign_text_is_refused() {
        let c = Cursor::decode("1700000000000000.s.1").unwrap();
        assert_eq!(c.session_id, "s.1");
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        assert!(Cursor::from_str("not-a-cursor").is_err());
    }
}
