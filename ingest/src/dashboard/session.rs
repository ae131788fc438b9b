//! A session's page (`/sessions/{id}`): what it is doing now, the queen → colonies → workers tree with
//! statuses, the health timeline, tasks and triggers, its usage by model and calls and durations per
//! tool. The answers of `get_session`, `get_session_tree`, `get_session_history` and
//! `get_session_usage` (by model, and `group_by=tool`).
//!
//! The tree is the whole one the session belongs to (`get_session_tree` of its `root_session_id`), with
//! the session marked in it (`aria-current`): a worker's page shows its queen and colony above it. The
//! spend "with everything below" is the session's node of that tree (its `totals`), its own spend the
//! node's `usage`: the numbers the tree shows.

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::format::{self, path_segment};
use super::layout::{self, badge, opt, Nav};
use super::Viewer;
use crate::error::ApiError;
use crate::query::history::SessionHistory;
use crate::query::sessions::body::{SessionBody, TreeNode};
use crate::query::sessions::detail::SessionDetail;
use crate::query::usage::{Dim, GroupBy, UsageParams, UsageResponse};
use crate::query::ReadDb;
use crate::routes::extract::{Path, Query};
use crate::routes::sessions as api;

/// `GET /sessions/{id}`.
pub async fn page(State(db): State<ReadDb>, viewer: Viewer, Path(id): Path<String>) -> Response {
    match detail(db, &viewer, id).await {
        Ok(body) => layout::page("Session", Nav::Sessions, &viewer, body),
        Err(e) => layout::error_page(e),
    }
}

async fn detail(db: ReadDb, viewer: &Viewer, id: String) -> Result<Markup, ApiError> {
    let r = || viewer.reader.clone();
    let Json(d) = api::get_session(State(db.clone()), r(), Path(id.clone())).await?;
    let Json(tree) = api::get_session_tree(State(db.clone()), r(), Path(id.clone())).await?;
    // The whole tree, from the topmost session above (the session's own when nothing is above it, or
    // when it lies deeper below the top than a tree reaches).
    let whole = match d.root_session_id != id {
        true => Some(
            api::get_session_tree(State(db.clone()), r(), Path(d.root_session_id.clone()))
                .await?
                .0,
        ),
        false => None,
    };
    let shown = whole
        .as_ref()
        .filter(|w| find(w, &id).is_some())
        .unwrap_or(&tree);
    let Json(history) = api::get_session_history(State(db.clone()), r(), Path(id.clone())).await?;
    let tools = UsageParams {
        group_by: Some(GroupBy(vec![Dim::Tool])),
        ..UsageParams::default()
    };
    let Json(tools) =
        api::session_usage_json(State(db.clone()), r(), Path(id.clone()), Query(tools)).await?;
    let by_model = UsageParams::default();
    let Json(models) =
        api::session_usage_json(State(db), r(), Path(id.clone()), Query(by_model)).await?;
    let now = Utc::now();
    let s = &d.session;
    Ok(html! {
        h1 { "Session " code { (s.session_id) } " " (badge(s.status.as_str())) }
        p.cause { "Status since " @if let Some(t) = s.status_since { (format::time(t)) } @else { "–" } ": " (s.status_cause) }
        (facts(s, &tree, now))
        (doing_now(&d))
        section aria-labelledby="tree-title" {
            h2 #tree-title { "Queen, colonies and workers" }
            ul.tree { (node(shown, 0, &id)) }
        }
        (timeline(&history, now))
        (tasks(&d))
        (per_model(&models.usage))
        (per_tool(&tools.usage))
    })
}

/// The node of `id` in `tree`, if it is there.
fn find<'a>(tree: &'a TreeNode, id: &str) -> Option<&'a TreeNode> {
    if tree.session.session_id == id {
        return Some(tree);
    }
    tree.colonies
        .iter()
        .flat_map(|c| &c.workers)
        .find_map(|w| find(w, id))
}

/// The session's facts; `tree` is its own tree (its `totals` are of it and everything below, its
/// `usage` its own).
fn facts(s: &SessionBody, tree: &TreeNode, now: DateTime<Utc>) -> Markup {
    let t = &s.totals;
    let (all, own) = (tree.session.totals.cost_nanos.0, tree.usage.cost_nanos.0);
    html! {
        dl.facts {
            div { dt { "Role" } dd { (opt(&s.agent_role)) } }
            div { dt { "User" } dd { (opt(&s.user_id)) } }
            div { dt { "Device" } dd { (opt(&s.device_id)) } }
            div { dt { "Runtime" } dd { (opt(&s.runtime)) } }
            div { dt { "Phase" } dd { (opt(&s.phase)) } }
            div { dt { "Lifecycle" } dd { (opt(&s.lifecycle)) } }
            div { dt { "Started" } dd { @if let Some(t) = s.durations.started_at { (format::time(t)) } @else { "–" } } }
            div { dt { "Wall clock" } dd { (format::duration(s.durations.wall_clock_seconds)) } }
            div { dt { "Active" } dd { (format::duration(s.durations.active_seconds)) } }
            div { dt { "Last event" } dd { @if let Some(e) = s.last_event_at { (format::ago(e, now)) } @else { "–" } } }
            div { dt { "Spend (with everything below)" } dd data-field="cost_nanos_with_below" data-value=(all) title=(format::money_exact(all)) { (format::money(all)) } }
            div { dt { "Spend (this session)" } dd data-field="cost_nanos" data-value=(own) title=(format::money_exact(own)) { (format::money(own)) } }
            div { dt { "Input / output tokens" } dd { (format::sum(t.input_tokens)) " / " (format::sum(t.output_tokens)) } }
            div { dt { "LLM calls" } dd { (format::sum(t.llm_calls)) } }
            div { dt { "Tool calls (errors)" } dd { (format::sum(t.tool_calls)) " (" (format::sum(t.tool_errors)) ")" } }
        }
    }
}

fn doing_now(d: &SessionDetail) -> Markup {
    let w = &d.session.work;
    html! {
        section aria-labelledby="now-title" {
            h2 #now-title { "Now" }
            @if let Some(a) = &w.activity {
                p { "Running " (a.kind.replace('_', " ")) @if let Some(t) = &a.tool_name { " " code { (t) } }
                    " since " (format::time(a.since))
                    @if a.in_flight > 1 { " (" (a.in_flight) " calls in flight)" } }
            } @else {
                p { "Nothing in flight." }
            }
            @if let Some(t) = w.next_wake_at { p { "Next wake-up: " (format::time(t)) } }
        }
    }
}

/// A node of the tree and everything below it; the session `here` is marked (`aria-current`).
fn node(n: &TreeNode, depth: usize, here: &str) -> Markup {
    let s = &n.session;
    let current = s.session_id == here;
    html! {
        li.here[current] data-session=(s.session_id) {
            (badge(s.status.as_str())) " "
            @if current {
                a href={ "/sessions/" (path_segment(&s.session_id)) } aria-current="page" { code { (s.session_id) } }
                " " strong.here-note { "(this page)" }
            } @else {
                a href={ "/sessions/" (path_segment(&s.session_id)) } { code { (s.session_id) } }
            }
            " " span.role { (s.agent_role.as_deref().unwrap_or("session")) }
            " · " span title=(format::money_exact(n.usage.cost_nanos.0)) { (format::money(n.usage.cost_nanos.0)) }
            @if !n.colonies.is_empty() && depth < 8 {
                ul {
                    @for c in &n.colonies {
                        li.colony data-colony=(c.colony_key.as_deref().unwrap_or(&c.colony_id)) {
                            "colony "
                            @if let Some(shown) = c.colony_label.as_ref().or(c.colony_name.as_ref()) {
                                strong.colony-name { (shown) } " "
                            }
                            code { (c.colony_key.as_deref().unwrap_or(&c.colony_id)) }
                            " — workers: "
                            @for (i, (status, count)) in c.workers_by_status.iter().flatten().enumerate() {
                                @if i > 0 { ", " }
                                (count) " " (status.replace('_', " "))
                            }
                            " · " span title=(format::money_exact(c.totals.cost_nanos.0)) { (format::money(c.totals.cost_nanos.0)) }
                            @if !c.workers.is_empty() {
                                ul { @for w in &c.workers { (node(w, depth + 1, here)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Most transitions the band draws and the table lists (the newest; `/v1/sessions/{id}/history` has
/// them all), so a session that flapped for days still makes a light page.
const MAX_TRANSITIONS_SHOWN: usize = 300;

/// The health timeline: a band of the statuses over time (SVG, from the oldest transition shown to now)
/// and the transitions, newest first.
fn timeline(h: &SessionHistory, now: DateTime<Utc>) -> Markup {
    const W: f64 = 800.0;
    let skip = h.transitions.len().saturating_sub(MAX_TRANSITIONS_SHOWN);
    let shown = &h.transitions[skip..];
    let start = shown.first().map(|t| t.at);
    let span = start.map_or(0.0, |s| (now - s).num_milliseconds().max(1) as f64);
    let x = |t: DateTime<Utc>| start.map_or(0.0, |s| (t - s).num_milliseconds() as f64 / span * W);
    html! {
        section aria-labelledby="health-title" {
            h2 #health-title { "Health timeline" }
            @if shown.is_empty() {
                p.empty { "No transitions yet." }
            } @else {
                svg.band viewBox={ "0 0 " (W) " 24" } preserveAspectRatio="none" role="img" aria-labelledby="band-t" {
                    title #band-t { "Status over time, from " (format::time(shown[0].at)) " to now" }
                    @for (i, t) in shown.iter().enumerate() {
                        @let end = shown.get(i + 1).map_or(now, |n| n.at);
                        @let (x0, x1) = (x(t.at), x(end));
                        rect class={ "s-" (t.to) } x=(format!("{x0:.1}")) y="0" width=(format!("{:.1}", (x1 - x0).max(0.5))) height="24" {
                            title { (t.to.replace('_', " ")) " from " (format::time(t.at)) }
                        }
                    }
                }
                dl.legend-inline {
                    @for (status, secs) in &h.time_in_state {
                        @if *secs > 0.0 { div { dt { (badge(status.as_str())) } dd { (format::duration(*secs)) } } }
                    }
                }
                details {
                    summary {
                        (h.transitions.len()) " transitions" @if h.truncated { " (truncated)" }
                        @if skip > 0 { " — the newest " (shown.len()) " shown" }
                    }
                    div.scroll { table {
                        thead { tr { th scope="col" { "At" } th scope="col" { "From" } th scope="col" { "To" } th scope="col" { "Cause" } } }
                        tbody {
                            @for t in shown.iter().rev() {
                                tr {
                                    td { (format::time(t.at)) }
                                    td { @if let Some(f) = &t.from { (badge(f)) } }
                                    td { (badge(&t.to)) }
                                    td { (t.cause) }
                                }
                            }
                        }
                    } }
                }
            }
        }
    }
}

fn tasks(d: &SessionDetail) -> Markup {
    let c = &d.session.work.tasks;
    html! {
        section aria-labelledby="tasks-title" {
            h2 #tasks-title { "Tasks" }
            p { (c.pending) " pending · " (c.in_progress) " in progress · " (c.completed) " completed"
                @if c.other > 0 { " · " (c.other) " other" } }
            @if !d.task_list.is_empty() {
                details {
                    summary { "Task list" @if d.tasks_truncated { " (oldest forgotten)" } }
                    div.scroll { table {
                        thead { tr { th scope="col" { "Task" } th scope="col" { "State" } th scope="col" { "Created" } th scope="col" { "Updated" } } }
                        tbody { @for t in &d.task_list { tr {
                            td { code { (t.task_id) } }
                            td { (opt(&t.state)) }
                            td { (format::time(t.created_at)) }
                            td { (format::time(t.updated_at)) }
                        } } }
                    } }
                }
            }
            @if !d.triggers.is_empty() {
                h3 { "Triggers" }
                div.scroll { table {
                    thead { tr { th scope="col" { "Trigger" } th scope="col" { "Type" } th scope="col" { "State" } th scope="col" { "Fired" } th scope="col" { "Next" } } }
                    tbody { @for t in &d.triggers { tr {
                        td { code { (t.trigger_id) } }
                        td { (opt(&t.trigger_type)) }
                        td { (opt(&t.state)) }
                        td.num { (t.fire_count.unwrap_or(0)) }
                        td { @if let Some(n) = t.next_fire_at { (format::time(n)) } }
                    } } }
                } }
            }
        }
    }
}

/// The session's own usage by model (`/v1/sessions/{id}/usage`, all time). Rows whose every figure is
/// zero are left out (the "(none)" row of a session's tool calls, which have no model).
fn per_model(u: &UsageResponse) -> Markup {
    let rows: Vec<_> = u.rows.iter().filter(|r| !model_row_is_empty(r)).collect();
    html! {
        section aria-labelledby="models-title" {
            h2 #models-title { "Usage by model (this session)" }
            @if rows.is_empty() {
                p.empty { "No usage." }
            } @else {
                div.scroll { table {
                    thead { tr {
                        th scope="col" { "Model" } th.num scope="col" { "Spend" } th.num scope="col" { "Input tokens" }
                        th.num scope="col" { "Output tokens" } th.num scope="col" { "Cached tokens" } th.num scope="col" { "LLM calls" }
                    } }
                    tbody { @for r in &rows { tr {
                        th scope="row" { code { (r.model.clone().flatten().unwrap_or_else(|| "(none)".into())) } }
                        td.num title=(format::money_exact(r.sums.cost_nanos.0)) { (format::money(r.sums.cost_nanos.0)) }
                        td.num { (format::sum(r.sums.input_tokens)) }
                        td.num { (format::sum(r.sums.output_tokens)) }
                        td.num { (format::sum(r.sums.cached_tokens)) }
                        td.num { (format::sum(r.sums.llm_calls)) }
                    } } }
                } }
            }
        }
    }
}

/// True when every figure the model table shows is zero.
fn model_row_is_empty(r: &crate::query::usage::body::UsageRowBody) -> bool {
    let s = &r.sums;
    [
        s.cost_nanos.0,
        s.input_tokens.0,
        s.output_tokens.0,
        s.cached_tokens.0,
        s.llm_calls.0,
    ]
    .iter()
    .all(|v| *v == 0)
}

fn per_tool(u: &UsageResponse) -> Markup {
    let ms = |v: Option<Option<i64>>| v.flatten().map_or("–".to_string(), format::millis);
    html! {
        section aria-labelledby="tools-title" {
            h2 #tools-title { "Tools" }
            @if u.rows.is_empty() {
                p.empty { "No tool calls." }
            } @else {
                div.scroll { table {
                    thead { tr {
                        th scope="col" { "Tool" } th.num scope="col" { "Calls" } th.num scope="col" { "Errors" }
                        th.num scope="col" { "Total time" } th.num scope="col" { "p50" } th.num scope="col" { "p95" }
                    } }
                    tbody { @for r in &u.rows { tr {
                        th scope="row" { code { (r.tool_name.clone().flatten().unwrap_or_else(|| "(none)".into())) } }
                        td.num { (format::sum(r.sums.tool_calls)) }
                        td.num { (format::sum(r.sums.tool_errors)) }
                        td.num { (format::millis(r.sums.tool_duration_ms.0 as i64)) }
                        td.num { (ms(r.tool_duration_p50_ms)) }
                        td.num { (ms(r.tool_duration_p95_ms)) }
                    } } }
                } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::history::TransitionBody;
    use apiary_schema::status::Status;

    #[test]
    fn a_long_history_shows_its_newest_transitions_and_says_so() {
        let t0: DateTime<Utc> = "2026-11-01T00:00:00Z".parse().unwrap();
        let transitions: Vec<TransitionBody> = (0..10_000)
            .map(|i| TransitionBody {
                at: t0 + chrono::TimeDelta::seconds(i),
                from: Some(if i % 2 == 0 { "idle" } else { "active" }.into()),
                to: if i % 2 == 0 { "active" } else { "idle" }.into(),
                cause: "test".into(),
            })
            .collect();
        let h = SessionHistory {
            session_id: "s".into(),
            status: Status::Idle,
            transitions,
            truncated: false,
            time_in_state: Default::default(),
        };
        let page = timeline(&h, t0 + chrono::TimeDelta::seconds(10_000)).into_string();
        assert!(
            page.contains("10000 transitions — the newest 300 shown"),
            "{}",
            &page[..300]
        );
        assert_eq!(page.matches("<rect").count(), MAX_TRANSITIONS_SHOWN);
        assert!(page.len() < 200 * 1024, "{} bytes", page.len());
    }
}
