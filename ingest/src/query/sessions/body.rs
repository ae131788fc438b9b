//! A session as the API answers it ([`SessionBody`]), the listing's page, and the queen → colonies →
//! workers tree ([`TreeNode`]) with usage rolled up. Built from [`SessionRow`]s; the OpenAPI schemas are
//! derived from these types.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::status::{Rules, Status};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::SessionRow;
use crate::query::usage::UsageSums;
use crate::rollups::Usage;

pub use apiary_schema::session::{
    below_schema, nullable_status_schema, status_schema, time_in_state_schema, ColonyNode,
    DurationsBody, HealthSignal, SessionBody, TreeNode,
};

fn none_if_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl SessionRow {
    /// The session's body at `now` with the given totals (`below` empty: the callers that show it fill
    /// it in).
    pub fn body(&self, now: DateTime<Utc>, rules: &Rules, totals: &Usage) -> SessionBody {
        let r = self;
        let (view, durations) = r.view_and_durations(now, rules);
        SessionBody {
            session_id: r.session_id.clone(),
            user_id: none_if_empty(&r.user_id),
            device_id: none_if_empty(&r.device_id),
            parent_session_id: r.parent_session_id.clone(),
            colony_id: r.colony_id.clone(),
            agent_role: r.agent_role.clone(),
            worker_id: r.worker_id.clone(),
            runtime: r.runtime.clone(),
            phase: r.phase.clone(),
            status: view.status,
            status_since: view.since,
            status_cause: view.cause,
            time_in_state: view.time_in_state,
            durations: durations.into(),
            lifecycle: r.status.clone(),
            input_state: r.input_state.clone(),
            health: HealthSignal {
                signal: r.health_signal.clone(),
                at: r.health_at,
            },
            first_seen_at: r.first_seen_at,
            last_event_at: r.last_event_at,
            last_progress_at: r.last_progress_at,
            device_last_heard_at: r.device_heard_at,
            totals: UsageSums::from(totals),
            work: super::work::stored(r.work.as_ref()).summary(),
            below: BTreeMap::new(),
        }
    }
}

/// True for the statuses a person should look at when a session below is in one: everything but
/// `active`, `idle` and `completed`.
pub fn needs_a_look(s: Status) -> bool {
    !matches!(s, Status::Active | Status::Idle | Status::Completed)
}

/// A page of the session listing.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionPage {
    pub sessions: Vec<SessionBody>,
    /// Pass as `cursor` for the next page; null at the end.
    pub next_cursor: Option<String>,
}

/// Most levels a tree shows below its root.
const MAX_DEPTH: usize = 8;

/// The links of a tree that the session rows do not hold: forks (`session_forked`, a colony's fork of
/// its queen) and the colony key of each colony run.
#[derive(Debug, Clone, Default)]
pub struct TreeLinks {
    /// Forked session → the session it was forked from.
    pub forked_from: HashMap<String, String>,
    /// Colony run session → its colony key.
    pub colony_key: HashMap<String, String>,
    /// Colony run session → the colony's name, when the run carried it.
    pub colony_name: HashMap<String, String>,
    /// Colony key → its admin-given label.
    pub colony_label: HashMap<String, String>,
}

/// What building a tree reads.
struct Tree<'a> {
    children: HashMap<&'a str, Vec<&'a SessionRow>>,
    links: &'a TreeLinks,
    usage: &'a HashMap<String, Usage>,
    now: DateTime<Utc>,
    rules: &'a Rules,
}

impl Tree<'_> {
    fn node(&self, r: &SessionRow, depth: usize) -> (TreeNode, Usage) {
        let own = self.usage.get(&r.session_id).copied().unwrap_or_default();
        let mut total = own;
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
            total.add(&sub);
            let forked_here = self.links.forked_from.get(&c.session_id) == Some(&r.session_id)
                && self.links.colony_key.contains_key(&c.session_id);
            let key = match forked_here {
                true => c.session_id.clone(),
                false => c.colony_id.clone().unwrap_or_else(|| r.session_id.clone()),
            };
            let entry = colonies.entry(key).or_default();
            entry.0.push(v);
            entry.1.add(&sub);
        }
        let mut session = r.body(self.now, self.rules, &total);
        for (workers, _) in colonies.values() {
            workers
                .iter()
                .for_each(|w| count_below(w, &mut session.below));
        }
        let node = TreeNode {
            session,
            usage: UsageSums::from(&own),
            colonies: colonies
                .into_iter()
                .map(|(colony_id, (workers, u))| {
                    let mut by_status = BTreeMap::new();
                    workers
                        .iter()
                        .for_each(|w| count_workers(w, &mut by_status));
                    let key = self.links.colony_key.get(&colony_id).cloned();
                    ColonyNode {
                        colony_label: key
                            .as_ref()
                            .and_then(|k| self.links.colony_label.get(k))
                            .cloned(),
                        colony_name: self.links.colony_name.get(&colony_id).cloned(),
                        colony_key: key,
                        colony_id,
                        workers_by_status: Some(by_status),
                        totals: UsageSums::from(&u),
                        workers,
                    }
                })
                .collect(),
        };
        (node, total)
    }
}

/// Counts `node` and everything below it, by status.
fn count_below(node: &TreeNode, out: &mut BTreeMap<Status, u64>) {
    *out.entry(node.session.status).or_default() += 1;
    for (status, n) in &node.session.below {
        *out.entry(*status).or_default() += n;
    }
}

/// Counts `node` and everything below it that is a worker, by status.
fn count_workers(node: &TreeNode, out: &mut BTreeMap<String, u64>) {
    if node.session.agent_role.as_deref() == Some("worker") {
        let status = serde_json::to_value(node.session.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *out.entry(status).or_default() += 1;
    }
    for c in &node.colonies {
        c.workers.iter().for_each(|w| count_workers(w, out));
    }
}

/// The tree under `root` (None when `rows` lack it): each node has its own `usage`, `totals` (itself
/// and everything below) and its children grouped by colony; a session forked from another (`links`)
/// is its child, in a colony of its own when it is a colony's run.
pub fn tree(
    root: &str,
    rows: &[SessionRow],
    usage: &HashMap<String, Usage>,
    now: DateTime<Utc>,
    rules: &Rules,
    links: &TreeLinks,
) -> Option<TreeNode> {
    let by_id: HashMap<&str, &SessionRow> =
        rows.iter().map(|r| (r.session_id.as_str(), r)).collect();
    let mut children: HashMap<&str, Vec<&SessionRow>> = HashMap::new();
    for r in rows {
        let parent = r
            .parent_session_id
            .as_deref()
            .or(r.colony_id.as_deref())
            .or(links.forked_from.get(&r.session_id).map(String::as_str));
        if let Some(p) = parent.filter(|p| *p != r.session_id && by_id.contains_key(p)) {
            if r.session_id != root {
                children.entry(p).or_default().push(r);
            }
        }
    }
    let tree = Tree {
        children,
        links,
        usage,
        now,
        rules,
    };
    by_id.get(root).map(|r| tree.node(r, 0).0)
}
