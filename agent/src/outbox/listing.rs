//! The local session listing and tree (`GET /v1/sessions`, `GET /v1/sessions/{id}/tree` on the agent):
//! the ingest's body shapes, derived from this outbox alone (so they answer with sync off and
//! air-gapped). Status is the shared health model at `now` with the runtime liveness overlay; totals
//! are the local usage table's sums; work is the shared work fold's summary.
//!
//! Fields the agent does not keep per session (`colony_id`, `agent_role`, `worker_id`, `runtime`,
//! `phase`, `lifecycle`, `input_state`, the last health signal) are null. `last_event_at` is the
//! latest `occurred_at` of the session's events; `device_last_heard_at` is now (this is the device).
//! Order and paging mirror the ingest: most recently active first (last event, else first seen), then
//! session id, both descending; a cursor `<micros>.<session_id>`; a status filter is applied after the
//! query, so a page can come back short with a cursor to go on from.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::status::{view, Liveness, Rules, Status, Tracker};
use apiary_schema::work::{Work, WorkSummary};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use serde::Serialize;

/// Usage sums as the ingest's session bodies show them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Totals {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    pub cost_usd: f64,
    pub cost_nanos: i64,
    pub llm_calls: i64,
    pub unpriced_turns: i64,
    pub tool_calls: i64,
    pub tool_errors: i64,
    pub events: i64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_creation_tokens += o.cache_creation_tokens;
        self.cost_nanos = self.cost_nanos.saturating_add(o.cost_nanos);
        self.cost_usd = self.cost_nanos as f64 / 1e9;
        self.llm_calls += o.llm_calls;
        self.unpriced_turns += o.unpriced_turns;
        self.tool_calls += o.tool_calls;
        self.tool_errors += o.tool_errors;
        self.events += o.events;
    }
}

/// The last health signal (the agent does not keep it: both null).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HealthSignal {
    pub signal: Option<String>,
    pub at: Option<DateTime<Utc>>,
}

/// A session as the local list and tree show it (the ingest's `SessionBody` fields).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionBody {
    pub session_id: String,
    pub user_id: Option<String>,
    pub device_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub colony_id: Option<String>,
    pub agent_role: Option<String>,
    pub worker_id: Option<String>,
    pub runtime: Option<String>,
    pub phase: Option<String>,
    pub status: Status,
    pub status_since: Option<DateTime<Utc>>,
    pub status_cause: String,
    pub time_in_state: BTreeMap<Status, f64>,
    pub lifecycle: Option<String>,
    pub input_state: Option<String>,
    pub health: HealthSignal,
    pub first_seen_at: DateTime<Utc>,
    pub last_event_at: Option<DateTime<Utc>>,
    pub last_progress_at: Option<DateTime<Utc>>,
    pub device_last_heard_at: Option<DateTime<Utc>>,
    /// All-time usage (in a tree: of the session and everything below it).
    pub totals: Totals,
    #[serde(flatten)]
    pub work: WorkSummary,
}

/// A session row with what its body is built from.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    session_id: String,
    user_id: Option<String>,
    device_id: Option<String>,
    parent_session_id: Option<String>,
    first_seen_ms: i64,
    last_ms: Option<i64>,
    /// The stored folds with the fold journal replayed ([`with_journal`]).
    tracker: Tracker,
    work: Work,
    own: Totals,
}

const SELECT: &str = "SELECT s.session_id, s.user_id, s.device_id, s.parent_session_id, s.first_seen_at,
    u.last_at, h.tracker, w.work, u.i, u.o, u.c, u.cc, u.cost, u.llm, u.unpriced, u.tools, u.errors, u.events
  FROM sessions s
  LEFT JOIN (SELECT session_id, max(last_at) AS last_at, sum(input_tokens) AS i, sum(output_tokens) AS o,
        sum(cached_tokens) AS c, sum(cache_creation_tokens) AS cc, sum(cost_nanos) AS cost,
        sum(llm_calls) AS llm, sum(unpriced_turns) AS unpriced, sum(tool_calls) AS tools,
        sum(tool_errors) AS errors, sum(events) AS events
      FROM usage GROUP BY session_id) u ON u.session_id = s.session_id
  LEFT JOIN session_health h ON h.session_id = s.session_id
  LEFT JOIN session_work w ON w.session_id = s.session_id";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    let n = |i: usize| -> rusqlite::Result<i64> { Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0)) };
    let cost = n(12)?;
    Ok(Row {
        session_id: r.get(0)?,
        user_id: r.get(1)?,
        device_id: r.get(2)?,
        parent_session_id: r.get(3)?,
        first_seen_ms: r.get(4)?,
        last_ms: r.get(5)?,
        tracker: r
            .get::<_, Option<String>>(6)?
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default(),
        work: r
            .get::<_, Option<String>>(7)?
            .and_then(|w| serde_json::from_str(&w).ok())
            .unwrap_or_default(),
        own: Totals {
            input_tokens: n(8)?,
            output_tokens: n(9)?,
            cached_tokens: n(10)?,
            cache_creation_tokens: n(11)?,
            cost_nanos: cost,
            cost_usd: cost as f64 / 1e9,
            llm_calls: n(13)?,
            unpriced_turns: n(14)?,
            tool_calls: n(15)?,
            tool_errors: n(16)?,
            events: n(17)?,
        },
    })
}

/// The rows with their sessions' journaled pushes replayed onto the stored folds ([`super::journal`]).
fn with_journal(conn: &Connection, mut rows: Vec<Row>) -> rusqlite::Result<Vec<Row>> {
    for r in &mut rows {
        let pushes = super::journal::of_session(conn, &r.session_id)?;
        super::journal::apply(&pushes, &mut r.tracker, &mut r.work);
    }
    Ok(rows)
}

fn ms(t: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t).unwrap_or_default()
}

impl Row {
    /// The sort key: the last event's time, else the first-seen time (Unix ms).
    fn key_ms(&self) -> i64 {
        self.last_ms.unwrap_or(self.first_seen_ms)
    }

    /// The status at `now` with the runtime overlay.
    fn status(&self, now: DateTime<Utc>, gone: &dyn Fn(&str) -> Option<DateTime<Utc>>) -> Status {
        self.view(now, gone).0.status
    }

    fn view(
        &self,
        now: DateTime<Utc>,
        gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
    ) -> (apiary_schema::status::View, Option<DateTime<Utc>>) {
        let rules = Rules::default();
        let h = self.tracker.current(&rules);
        let live = Liveness {
            runtime_gone_at: gone(&self.session_id),
            ..Liveness::local(now)
        };
        (view(&h, now, &live, &rules), h.progress_at)
    }

    fn body(
        &self,
        totals: Totals,
        now: DateTime<Utc>,
        gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
    ) -> SessionBody {
        let (v, progress_at) = self.view(now, gone);
        let work = &self.work;
        SessionBody {
            session_id: self.session_id.clone(),
            user_id: self.user_id.clone(),
            device_id: self.device_id.clone(),
            parent_session_id: self.parent_session_id.clone(),
            colony_id: None,
            agent_role: None,
            worker_id: None,
            runtime: None,
            phase: None,
            status: v.status,
            status_since: v.since,
            status_cause: v.cause,
            time_in_state: v.time_in_state,
            lifecycle: None,
            input_state: None,
            health: HealthSignal::default(),
            first_seen_at: ms(self.first_seen_ms),
            last_event_at: self.last_ms.map(ms),
            last_progress_at: progress_at,
            device_last_heard_at: Some(now),
            totals,
            work: work.summary(),
        }
    }
}

/// Where a page ended: the sort key (Unix microseconds on the wire) and session id of the last row seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at_ms: i64,
    pub session_id: String,
}

impl Cursor {
    /// `<micros>.<session_id>`, the ingest's form.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.at_ms.saturating_mul(1000), self.session_id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (micros, id) = s.split_once('.')?;
        let micros: i64 = micros.parse().ok()?;
        (!id.is_empty() && id.len() <= 200).then(|| Cursor {
            at_ms: micros.div_euclid(1000),
            session_id: id.to_string(),
        })
    }
}

/// What a listing asks for.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub statuses: Option<Vec<Status>>,
    pub limit: usize,
    pub after: Option<Cursor>,
}

/// Rows scanned per query while a status filter skips some, and at most per request.
const CHUNK: i64 = 500;
const SCAN_MAX: usize = 10_000;

/// A page of sessions and the cursor to go on from (None at the end).
pub fn list(
    conn: &Connection,
    f: &ListFilter,
    now: DateTime<Utc>,
    gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
) -> rusqlite::Result<(Vec<SessionBody>, Option<Cursor>)> {
    let mut out = Vec::new();
    let mut after = f.after.clone();
    let mut scanned = 0;
    let sql = format!(
        "{SELECT} WHERE ?1 IS NULL OR (coalesce(u.last_at, s.first_seen_at), s.session_id) < (?1, ?2)
         ORDER BY coalesce(u.last_at, s.first_seen_at) DESC, s.session_id DESC LIMIT ?3"
    );
    loop {
        let fetch = match f.statuses {
            None => (f.limit + 1 - out.len()) as i64,
            Some(_) => CHUNK,
        };
        let rows: Vec<Row> = conn
            .prepare_cached(&sql)?
            .query_map(
                params![
                    after.as_ref().map(|c| c.at_ms),
                    after.as_ref().map(|c| c.session_id.clone()),
                    fetch
                ],
                row,
            )?
            .collect::<rusqlite::Result<_>>()?;
        let rows = with_journal(conn, rows)?;
        let exhausted = (rows.len() as i64) < fetch;
        let mut last = None;
        for r in rows {
            if out.len() == f.limit {
                return Ok((out, last.or(after)));
            }
            scanned += 1;
            last = Some(Cursor {
                at_ms: r.key_ms(),
                session_id: r.session_id.clone(),
            });
            if f.statuses
                .as_ref()
                .is_none_or(|s| s.contains(&r.status(now, gone)))
            {
                out.push(r.body(r.own, now, gone));
            }
        }
        if exhausted {
            return Ok((out, None));
        }
        after = last.or(after);
        if scanned >= SCAN_MAX {
            return Ok((out, after));
        }
    }
}

/// A session in the tree: the session (`totals` of it and everything below), its own `usage`, and its
/// children grouped by colony (the ingest's `TreeNode`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TreeNode {
    #[serde(flatten)]
    pub session: SessionBody,
    pub usage: Totals,
    pub colonies: Vec<ColonyNode>,
}

/// A colony below a session: its workers and their totals. Its id is the queen's session (Hive's
/// `colony_id` is the queen's session id).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ColonyNode {
    pub colony_id: String,
    pub totals: Totals,
    pub workers: Vec<TreeNode>,
}

/// Most levels a tree shows below its root (the ingest's).
const MAX_DEPTH: usize = 8;

/// The tree under `root`; None when the session is not known here.
pub fn tree(
    conn: &Connection,
    root: &str,
    now: DateTime<Utc>,
    gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
) -> rusqlite::Result<Option<TreeNode>> {
    let sql = format!(
        "WITH RECURSIVE t(session_id, depth) AS (
            SELECT session_id, 0 FROM sessions WHERE session_id = ?1
          UNION
            SELECT s.session_id, t.depth + 1 FROM sessions s JOIN t
              ON s.parent_session_id = t.session_id AND s.session_id <> t.session_id
            WHERE t.depth < {MAX_DEPTH})
         {SELECT} WHERE s.session_id IN (SELECT session_id FROM t)"
    );
    let rows: Vec<Row> = conn
        .prepare_cached(&sql)?
        .query_map([root], row)?
        .collect::<rusqlite::Result<_>>()?;
    let rows = with_journal(conn, rows)?;
    let by_id: HashMap<&str, &Row> = rows.iter().map(|r| (r.session_id.as_str(), r)).collect();
    let mut children: HashMap<&str, Vec<&Row>> = HashMap::new();
    for r in &rows {
        if let Some(p) = r.parent_session_id.as_deref() {
            if p != r.session_id && r.session_id != root && by_id.contains_key(p) {
                children.entry(p).or_default().push(r);
            }
        }
    }
    for list in children.values_mut() {
        list.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    }
    let build = Build {
        children: &children,
        now,
        gone,
    };
    Ok(by_id.get(root).map(|r| build.node(r, 0).0))
}

struct Build<'a> {
    children: &'a HashMap<&'a str, Vec<&'a Row>>,
    now: DateTime<Utc>,
    gone: &'a dyn Fn(&str) -> Option<DateTime<Utc>>,
}

impl Build<'_> {
    fn node(&self, r: &Row, depth: usize) -> (TreeNode, Totals) {
        let mut total = r.own;
        let mut colonies: BTreeMap<String, (Vec<TreeNode>, Totals)> = BTreeMap::new();
        for c in self
            .children
            .get(r.session_id.as_str())
            .into_iter()
            .flatten()
        {
            if depth >= MAX_DEPTH {
                break;
            }
            let (v, sub) = self.node(c, depth + 1);
            total.add(&sub);
            let entry = colonies.entry(r.session_id.clone()).or_default();
            entry.0.push(v);
            entry.1.add(&sub);
        }
        let node = TreeNode {
            session: r.body(total, self.now, self.gone),
            usage: r.own,
            colonies: colonies
                .into_iter()
                .map(|(colony_id, (workers, totals))| ColonyNode {
                    colony_id,
                    totals,
                    workers,
                })
                .collect(),
        };
        (node, total)
    }
}
