//! The session and colony listings as CSV: one line per listed session or colony, built from the same
//! [`SessionPage`] and [`ColonyList`] the JSON carries, written by the usage CSV's rules
//! ([`super::usage::csv`]: RFC 4180, exact decimal costs, formula-like text neutralised).
//!
//! - A column's name is its JSON path: top-level fields by name, a nested object's fields as
//!   `parent.field` (`durations.wall_clock_seconds`, `tasks.pending`, `totals.cost_usd`), a status map
//!   (`time_in_state`, `below`) as one column per status (an empty cell where the JSON has no entry).
//! - `totals.*` are the usage CSV's sum columns: `totals.cost_usd` is the exact decimal of
//!   `totals.cost_nanos`, not the JSON's float.
//! - A colony's `runs` is their count; its `days` are left out (one line per colony; the days are
//!   `/v1/usage?group_by=colony&granularity=day&format=csv`). A colony's times are in the query's `tz`; a
//!   session's, like its JSON, in UTC (the listing has no zone).
//! - Every text cell (ids, names, labels, causes) goes through [`text_cell`].

use apiary_schema::status::Status;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;

use super::colonies::ColonyList;
use super::sessions::body::SessionPage;
use super::usage::csv::{line, sum_cells, text_cell, SUM_COLUMNS};

/// The page's sessions as CSV text (the cursor to the next page is not a line: see
/// `crate::routes::sessions`, which sends it as a header).
pub fn sessions(page: &SessionPage) -> String {
    let mut header: Vec<String> = [
        "session_id",
        "user_id",
        "device_id",
        "parent_session_id",
        "colony_id",
        "agent_role",
        "worker_id",
        "runtime",
        "phase",
        "status",
        "status_since",
        "status_cause",
        "durations.started_at",
        "durations.ended_at",
        "durations.wall_clock_seconds",
        "durations.active_seconds",
        "lifecycle",
        "input_state",
        "health.signal",
        "health.at",
        "first_seen_at",
        "last_event_at",
        "last_progress_at",
        "device_last_heard_at",
        "tasks.pending",
        "tasks.in_progress",
        "tasks.completed",
        "tasks.other",
        "next_wake_at",
        "activity.kind",
        "activity.tool_name",
        "activity.since",
        "activity.in_flight",
    ]
    .map(String::from)
    .to_vec();
    for map in ["time_in_state", "below"] {
        header.extend(Status::ALL.map(|s| format!("{map}.{}", s.as_str())));
    }
    header.extend(SUM_COLUMNS.map(|c| format!("totals.{c}")));
    let mut out = String::new();
    line(&mut out, header.into_iter());
    for s in &page.sessions {
        let text = |v: &Option<String>| text_cell(v.as_deref().unwrap_or(""));
        let at = |v: Option<DateTime<Utc>>| v.map(|t| time(t, &Utc)).unwrap_or_default();
        let d = &s.durations;
        let (tasks, activity) = (&s.work.tasks, s.work.activity.as_ref());
        let mut cells = vec![
            text_cell(&s.session_id),
            text(&s.user_id),
            text(&s.device_id),
            text(&s.parent_session_id),
            text(&s.colony_id),
            text(&s.agent_role),
            text(&s.worker_id),
            text(&s.runtime),
            text(&s.phase),
            s.status.as_str().to_string(),
            at(s.status_since),
            text_cell(&s.status_cause),
            at(d.started_at),
            at(d.ended_at),
            d.wall_clock_seconds.to_string(),
            d.active_seconds.to_string(),
            text(&s.lifecycle),
            text(&s.input_state),
            text(&s.health.signal),
            at(s.health.at),
            at(Some(s.first_seen_at)),
            at(s.last_event_at),
            at(s.last_progress_at),
            at(s.device_last_heard_at),
            tasks.pending.to_string(),
            tasks.in_progress.to_string(),
            tasks.completed.to_string(),
            tasks.other.to_string(),
            at(s.work.next_wake_at),
            activity.map(|a| text_cell(&a.kind)).unwrap_or_default(),
            text(&activity.and_then(|a| a.tool_name.clone())),
            at(activity.map(|a| a.since)),
            activity
                .map(|a| a.in_flight.to_string())
                .unwrap_or_default(),
        ];
        for st in Status::ALL {
            cells.push(
                s.time_in_state
                    .get(&st)
                    .map(f64::to_string)
                    .unwrap_or_default(),
            );
        }
        for st in Status::ALL {
            cells.push(s.below.get(&st).map(u64::to_string).unwrap_or_default());
        }
        cells.extend(sum_cells(&s.totals));
        line(&mut out, cells.into_iter());
    }
    out
}

/// The colonies as CSV text, their times in the list's `tz`.
pub fn colonies(list: &ColonyList) -> String {
    let tz: Tz = list.tz.parse().unwrap_or(Tz::UTC);
    let mut header: Vec<String> = [
        "colony_key",
        "label",
        "name",
        "first_seen_at",
        "last_seen_at",
        "sessions",
        "workers",
        "runs",
    ]
    .map(String::from)
    .to_vec();
    header.extend(SUM_COLUMNS.map(|c| format!("totals.{c}")));
    let mut out = String::new();
    line(&mut out, header.into_iter());
    for c in &list.colonies {
        let mut cells = vec![
            text_cell(&c.colony_key),
            text_cell(c.label.as_deref().unwrap_or("")),
            text_cell(c.name.as_deref().unwrap_or("")),
            time(c.first_seen_at, &tz),
            time(c.last_seen_at, &tz),
            c.sessions.to_string(),
            c.workers.to_string(),
            c.runs.len().to_string(),
        ];
        cells.extend(sum_cells(&c.totals));
        line(&mut out, cells.into_iter());
    }
    out
}

/// A file name for the colonies: `colonies-<from date>.csv`.
pub fn colonies_file_name(list: &ColonyList) -> String {
    format!("colonies-{}.csv", list.from.get(..10).unwrap_or("all"))
}

/// RFC 3339 in `tz`, as precise as the JSON (`Z` for UTC).
fn time<Z: TimeZone>(t: DateTime<Utc>, tz: &Z) -> String
where
    Z::Offset: std::fmt::Display,
{
    t.with_timezone(tz)
        .to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_in_the_zone_asked() {
        let t = DateTime::from_timestamp(1_764_000_000, 5_000).unwrap();
        assert_eq!(time(t, &Utc), "2025-11-24T16:00:00.000005Z");
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        assert_eq!(time(t, &berlin), "2025-11-24T17:00:00.000005+01:00");
    }

    #[test]
    fn an_empty_listing_is_its_header_line() {
        let page = SessionPage {
            sessions: vec![],
            next_cursor: None,
        };
        let text = sessions(&page);
        assert!(text.starts_with("session_id,user_id,"), "{text}");
        assert!(
            text.contains(",below.crashed,totals.input_tokens,"),
            "{text}"
        );
        assert_eq!(text.matches("\r\n").count(), 1);
    }
}
