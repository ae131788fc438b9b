//! The local session listing and tree (`GET /v1/sessions`, `GET /v1/sessions/{id}/tree` on the agent):
//! the ingest's body type ([`SessionBody`], shared), derived from this outbox alone (so they answer with
//! sync off and air-gapped). Status and durations are the shared health model at `now` with the runtime
//! liveness overlay; totals are the local usage table's sums in the shared usage type (costs as the
//! runtimes reported them: the device does not estimate, see [`apiary_schema::usage::UsageSums`]), with
//! the session's active time; `below` counts the statuses of the sessions below it (by parent, at most
//! [`MAX_DEPTH`] levels, as the tree shows them); work is the shared work fold's summary.
//!
//! Fields the agent does not keep per session (`colony_id`, `agent_role`, `worker_id`, `runtime`,
//! `phase`, `lifecycle`, `input_state`, the last health signal; a tree colony's key, label and name) are
//! null, and a tree colony's `workers_by_status` is left out (see [`apiary_schema::session`]). A tree's
//! children are grouped under their parent's session id as their colony (Hive's `colony_id` is the
//! queen's session id). `last_event_at` is the
//! latest `occurred_at` of the session's events; `device_last_heard_at` is now (this is the device).
//! Order and paging mirror the ingest: most recently active first (last event, else first seen), then
//! session id, both descending; a cursor `<micros>.<session_id>`; a status filter is applied after the
//! query, so a page can come back short with a cursor to go on from.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::status::{view, Durations, Liveness, Rules, Status, Tracker};
use apiary_schema::usage::{Usage, UsageSums};
use apiary_schema::work::Work;
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};

pub use apiary_schema::session::{ColonyNode, HealthSignal, SessionBody, TreeNode};

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
    /// The session's own usage (its active time is added at read time, [`Row::body`]).
    own: Usage,
}

const SELECT: &str = "SELECT s.session_id, s.user_id, s.device_id, s.parent_session_id, s.first_seen_at,
    u.last_at, h.tracker, w.work, u.i, u.o, u.c, u.cc, u.cost, u.llm, u.unpriced, u.tools, u.errors, u.events,
    u.tool_ms
  FROM sessions s
  LEFT JOIN (SELECT session_id, max(last_at) AS last_at, sum(input_tokens) AS i, sum(output_tokens) AS o,
        sum(cached_tokens) AS c, sum(cache_creation_tokens) AS cc, sum(cost_nanos) AS cost,
        sum(llm_calls) AS llm, sum(unpriced_turns) AS unpriced, sum(tool_calls) AS tools,
        sum(tool_errors) AS errors, sum(events) AS events, sum(tool_duration_ms) AS tool_ms
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
        // The device's costs are the runtimes' own: reported, never estimated here.
        own: Usage {
            input_tokens: n(8)?.into(),
            output_tokens: n(9)?.into(),
            cached_tokens: n(10)?.into(),
            cache_creation_tokens: n(11)?.into(),
            cost_nanos: cost.into(),
            cost_reported_nanos: cost.into(),
            llm_calls: n(13)?.into(),
            unpriced_turns: n(14)?.into(),
            tool_calls: n(15)?.into(),
            tool_errors: n(16)?.into(),
            events: n(17)?.into(),
            tool_duration_ms: n(18)?.into(),
            ..Usage::default()
        },
    })
}

/// The rows with their sessions' journaled pushes replayed onto the stored folds
/// ([`crate::outbox::record::journal`]).
fn with_journal(conn: &Connection, mut rows: Vec<Row>) -> rusqlite::Result<Vec<Row>> {
    for r in &mut rows {
        let pushes = crate::outbox::record::journal::of_session(conn, &r.session_id)?;
        crate::outbox::record::journal::apply(&pushes, &mut r.tracker, &mut r.work);
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
    ) -> (
        apiary_schema::status::View,
        Durations,
        Option<DateTime<Utc>>,
    ) {
        let rules = Rules::default();
        let h = self.tracker.current(&rules);
        let live = Liveness {
            runtime_gone_at: gone(&self.session_id),
            ..Liveness::local(now)
        };
        let v = view(&h, now, &live, &rules);
        let d = Durations::of(&h, &v, now);
        (v, d, h.progress_at)
    }

    /// The session at `now` with `below` (the usage and statuses of what is below it; none in a
    /// listing), and its own usage — with its active time at `now`, as the ingest's rollups hold it.
    fn body(
        &self,
        below_usage: &Usage,
        below: BTreeMap<Status, u64>,
        now: DateTime<Utc>,
        gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
    ) -> (SessionBody, Usage) {
        let (v, durations, progress_at) = self.view(now, gone);
        let own = Usage {
            active_ms: (durations.active_seconds * 1000.0).round() as i128,
            ..self.own
        };
        let mut totals = own;
        totals.add(below_usage);
        let body = SessionBody {
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
            durations: durations.into(),
            lifecycle: None,
            input_state: None,
            health: HealthSignal {
                signal: None,
                at: None,
            },
            first_seen_at: ms(self.first_seen_ms),
            last_event_at: self.last_ms.map(ms),
            last_progress_at: progress_at,
            device_last_heard_at: Some(now),
            totals: UsageSums::from(&totals),
            work: self.work.summary(),
            below,
        };
        (body, own)
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
    let (page, cursor) = page(conn, f, now, gone)?;
    let ids: Vec<&str> = page.iter().map(|r| r.session_id.as_str()).collect();
    let mut below = below(conn, &ids, now, gone)?;
    let bodies = page
        .iter()
        .map(|r| {
            let b = below.remove(&r.session_id).unwrap_or_default();
            r.body(&Usage::default(), b, now, gone).0
        })
        .collect();
    Ok((bodies, cursor))
}

/// The rows of a page and the cursor to go on from.
fn page(
    conn: &Connection,
    f: &ListFilter,
    now: DateTime<Utc>,
    gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
) -> rusqlite::Result<(Vec<Row>, Option<Cursor>)> {
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
                out.push(r);
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

/// For each of `ids`, the statuses at `now` of the sessions below it (children by parent at any depth,
/// at most [`MAX_DEPTH`] levels: what its tree shows), counted; sessions with nothing below are left out.
fn below(
    conn: &Connection,
    ids: &[&str],
    now: DateTime<Utc>,
    gone: &dyn Fn(&str) -> Option<DateTime<Utc>>,
) -> rusqlite::Result<HashMap<String, BTreeMap<Status, u64>>> {
    let mut out: HashMap<String, BTreeMap<Status, u64>> = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    // The page's ids as a JSON array (one statement whatever the page's size).
    let ids_json = serde_json::to_string(ids).unwrap_or_else(|_| "[]".into());
    let sql = format!(
        "WITH RECURSIVE t(above, session_id, depth) AS (
            SELECT value, value, 0 FROM json_each(?1)
          UNION
            SELECT t.above, s.session_id, t.depth + 1 FROM sessions s JOIN t
              ON s.parent_session_id = t.session_id AND s.session_id <> t.session_id
            WHERE t.depth < {MAX_DEPTH})
         SELECT DISTINCT t.above, s.session_id FROM t JOIN sessions s ON s.session_id = t.session_id
         WHERE t.session_id <> t.above"
    );
    let pairs: Vec<(String, String)> = conn
        .prepare_cached(&sql)?
        .query_map([ids_json], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if pairs.is_empty() {
        return Ok(out);
    }
    let mut below_ids: Vec<&str> = pairs.iter().map(|(_, s)| s.as_str()).collect();
    below_ids.sort_unstable();
    below_ids.dedup();
    let below_json = serde_json::to_string(&below_ids).unwrap_or_else(|_| "[]".into());
    let rows: Vec<Row> = conn
        .prepare_cached(&format!(
            "{SELECT} WHERE s.session_id IN (SELECT value FROM json_each(?1))"
        ))?
        .query_map([below_json], row)?
        .collect::<rusqlite::Result<_>>()?;
    let rows = with_journal(conn, rows)?;
    let status: HashMap<&str, Status> = rows
        .iter()
        .map(|r| (r.session_id.as_str(), r.status(now, gone)))
        .collect();
    for (above, session) in &pairs {
        if let Some(st) = status.get(session.as_str()) {
            *out.entry(above.clone())
                .or_default()
                .entry(*st)
                .or_default() += 1;
        }
    }
    Ok(out)
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

/// What a subtree adds up to: its usage and the statuses of its sessions (its root included).
#[derive(Default)]
struct Sub {
    usage: Usage,
    statuses: BTreeMap<Status, u64>,
}

impl Sub {
    fn add(&mut self, o: &Sub) {
        self.usage.add(&o.usage);
        for (st, n) in &o.statuses {
            *self.statuses.entry(*st).or_default() += n;
        }
    }
}

impl Build<'_> {
    fn node(&self, r: &Row, depth: usize) -> (TreeNode, Sub) {
        let mut below = Sub::default();
        let mut colonies: BTreeMap<String, (Vec<TreeNode>, Usage)> = BTreeMap::new();
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
            below.add(&sub);
            let entry = colonies.entry(r.session_id.clone()).or_default();
            entry.0.push(v);
            entry.1.add(&sub.usage);
        }
        let (session, own) = r.body(&below.usage, below.statuses.clone(), self.now, self.gone);
        let mut total = own;
        total.add(&below.usage);
        let node = TreeNode {
            session,
            usage: UsageSums::from(&own),
            colonies: colonies
                .into_iter()
                .map(|(colony_id, (workers, totals))| ColonyNode {
                    colony_id,
                    colony_key: None,
                    colony_label: None,
                    colony_name: None,
                    workers_by_status: None,
                    totals: UsageSums::from(&totals),
                    workers,
                })
                .collect(),
        };
        let mut sub = below;
        sub.usage = total;
        *sub.statuses.entry(node.session.status).or_default() += 1;
        (node, sub)
    }
}
