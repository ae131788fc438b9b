//! The checks a batch's session bindings (`sessions[]`) pass before anything is stored: the same as an
//! event's ids and time, because a binding writes ids and a time into the session row just like an event.
//!
//! - Every id a binding stores (`session_id`, `user_id`, `device_id`, `parent_session_id`) and the batch's
//!   `agent.device_id` must be an id by the policy's own rule ([`apiary_schema::policy::is_id`], which
//!   includes the scrubber): an id that looks like an e-mail address, a path or an API key is refused,
//!   not hashed — the ingest never rewrites what it stores. (`tenant_id` is only compared with the
//!   token's tenant, never stored.)
//! - `first_seen_at` is corrected for the device clock like every `occurred_at` of the batch. Beyond
//!   `max_future_secs` it is refused. Before the retention cut it is raised to the cut, not refused: a
//!   session that has run (or been resumed) for longer than the retention window is real, and refusing
//!   its binding would dead-letter its new events on the device; the ingest keeps no facts from before
//!   its window, so the cut is the earliest time it can vouch for.
//! - Bindings count towards `max_batch_events` together with the events (checked in
//!   [`crate::intake`]).
//!
//! A binding that fails refuses the whole batch (422) with one detail per problem, e.g.
//! `sessions[0].user_id: looks like a secret, an e-mail address or a path`. The agent isolates such a
//! batch by halving it, so the binding's events end in its dead-letter table with this reason.

use apiary_schema::Batch;
use chrono::{DateTime, Duration, Utc};

/// Why `v` cannot be stored as an id, if it cannot.
fn id_problem(v: &str) -> Option<&'static str> {
    if apiary_schema::policy::is_id(v) {
        None
    } else if !apiary_schema::scrub::is_clean(v) {
        Some("looks like a secret, an e-mail address or a path")
    } else {
        Some("is not an id ([A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199})")
    }
}

/// Checks every binding's ids and time and the agent's device id; shifts `first_seen_at` by `shift`
/// (the batch's clock correction). Err lists every problem (the batch is refused with 422).
pub fn check(
    batch: &mut Batch,
    shift: Duration,
    (oldest, newest): (DateTime<Utc>, DateTime<Utc>),
) -> Result<(), Vec<String>> {
    let mut problems = vec![];
    if let Some(why) = batch.agent.device_id.as_deref().and_then(id_problem) {
        problems.push(format!("agent.device_id: {why}"));
    }
    for (i, b) in batch.sessions.iter_mut().enumerate() {
        let ids = [
            ("session_id", Some(&b.session_id)),
            ("user_id", b.user_id.as_ref()),
            ("device_id", b.device_id.as_ref()),
            ("parent_session_id", b.parent_session_id.as_ref()),
        ];
        for (field, v) in ids {
            if let Some(why) = v.and_then(|v| id_problem(v)) {
                problems.push(format!("sessions[{i}].{field}: {why}"));
            }
        }
        b.first_seen_at += shift;
        if b.first_seen_at < oldest {
            b.first_seen_at = oldest;
        } else if b.first_seen_at > newest {
            problems.push(format!(
                "sessions[{i}].first_seen_at: too far in the future (after {newest})"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(sessions: serde_json::Value) -> Batch {
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "batch_id": uuid::Uuid::nil(), "sent_at": "2026-11-03T10:00:00Z",
            "agent": { "agent_version": "0.1.0" }, "policy_hash": "x", "sessions": sessions, "events": [],
        }))
        .unwrap()
    }

    fn window() -> (DateTime<Utc>, DateTime<Utc>) {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        (t("2026-11-01T00:00:00Z"), t("2026-11-04T00:00:00Z"))
    }

    #[test]
    fn ids_the_scrubber_would_catch_are_refused_and_named() {
        let mut b = batch(serde_json::json!([
            { "session_id": "s1", "first_seen_at": "2026-11-03T09:00:00Z" },
            { "session_id": "s2", "user_id": "bob@example.com", "device_id": "/home/bob/x",
              "parent_session_id": "ghp_abcdefghijklmnopqrstuvwxyz", "first_seen_at": "2026-11-03T09:00:00Z" },
            { "session_id": "two words", "first_seen_at": "2026-11-03T09:00:00Z" },
        ]));
        let details = check(&mut b, Duration::zero(), window()).unwrap_err();
        assert_eq!(
            details,
            [
                "sessions[1].user_id: looks like a secret, an e-mail address or a path",
                "sessions[1].device_id: looks like a secret, an e-mail address or a path",
                "sessions[1].parent_session_id: looks like a secret, an e-mail address or a path",
                "sessions[2].session_id: is not an id ([A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199})",
            ]
        );
    }

    #[test]
    fn first_seen_is_corrected_by_the_clock_shift_then_checked_against_the_window() {
        let mut b = batch(serde_json::json!([
            { "session_id": "s1", "first_seen_at": "2026-11-05T09:00:00Z" },
        ]));
        // A device clock two days ahead: corrected into the window.
        check(&mut b, Duration::days(-2), window()).unwrap();
        assert_eq!(
            b.sessions[0].first_seen_at.to_rfc3339(),
            "2026-11-03T09:00:00+00:00"
        );
        let mut b = batch(serde_json::json!([
            { "session_id": "s1", "first_seen_at": "2026-11-05T09:00:00Z" },
            { "session_id": "s2", "first_seen_at": "2026-10-05T09:00:00Z" },
        ]));
        let text = check(&mut b, Duration::zero(), window())
            .unwrap_err()
            .join("; ");
        assert!(
            text.contains("sessions[0].first_seen_at: too far in the future"),
            "{text}"
        );
        assert!(!text.contains("sessions[1]"), "{text}");
        // A session first seen before the retention window is a long one, not an error: its time is
        // raised to the window's start and its events stay welcome.
        let mut b = batch(serde_json::json!([
            { "session_id": "s2", "first_seen_at": "2026-10-05T09:00:00Z" },
        ]));
        check(&mut b, Duration::zero(), window()).unwrap();
        assert_eq!(b.sessions[0].first_seen_at, window().0);
    }
}
