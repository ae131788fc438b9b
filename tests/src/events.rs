//! Wire events the tests send, one builder per shape: Hive-native lines (what the agent tails and takes at
//! its intake) and canonical events (what the ingest takes in a batch). The agent's and the ingest's own
//! test suites use these too, so a change to either wire form is made here once. What an event carries
//! (its `data`, its time, its sequence number) stays with each test: those are the test's inputs.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

/// The moment of the tests' fixed Hive lines: 2026-11-03 10:15:09.412338 (naive; the agents under test
/// read it as UTC).
pub fn hive_day() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(2026, 11, 3)
        .and_then(|d| d.and_hms_micro_opt(10, 15, 9, 412_338))
        .expect("a valid date")
        .and_utc()
}

/// Hive's `timestamp`: naive ISO 8601 with microseconds, in the runtime's local time (the agents under
/// test run with zone UTC, so `at` is written as its UTC wall time).
pub fn hive_time(at: DateTime<Utc>) -> String {
    at.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// A Hive-native event of a queen's stream (`stream_id` and `node_id` `queen`; no colony).
pub fn hive(kind: &str, session: &str, at: DateTime<Utc>, seq: u64, data: Value) -> Value {
    json!({
        "type": kind, "stream_id": "queen", "node_id": "queen", "execution_id": session, "data": data,
        "timestamp": hive_time(at), "correlation_id": null, "colony_id": null, "seq": seq,
    })
}

/// A Hive-native event of a worker's stream (`stream_id` `worker:<session>`, `node_id` the session) in
/// the colony `colony` (its queen's session).
pub fn hive_worker(
    kind: &str,
    session: &str,
    colony: &str,
    at: DateTime<Utc>,
    seq: u64,
    data: Value,
) -> Value {
    json!({
        "type": kind, "stream_id": format!("worker:{session}"), "node_id": session,
        "execution_id": session, "data": data, "timestamp": hive_time(at), "correlation_id": null,
        "colony_id": colony, "seq": seq,
    })
}

/// Hive events as NDJSON (one line each, each with its newline).
pub fn ndjson<'a>(events: impl IntoIterator<Item = &'a Value>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in events {
        serde_json::to_writer(&mut out, v).expect("JSON writes to memory");
        out.push(b'\n');
    }
    out
}

/// A canonical event (schema version 1, a fresh `event_id`, runtime `hive`) of `session` as its queen's
/// (`agent_role` `queen`), or a device-level one when `session` is None.
pub fn canonical(
    kind: &str,
    native_type: &str,
    session: Option<&str>,
    at: DateTime<Utc>,
    data: Value,
) -> Value {
    let mut e = json!({
        "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
        "runtime": "hive", "native_type": native_type, "data": data,
    });
    if let Some(s) = session {
        e["session_id"] = s.into();
        e["agent_role"] = "queen".into();
    }
    e
}

/// A canonical `llm.turn`: `input` input tokens of which half cached, `output` output tokens, `cost` USD
/// reported (unreported when 0).
pub fn llm(
    session: &str,
    at: DateTime<Utc>,
    model: &str,
    input: u64,
    output: u64,
    cost: f64,
) -> Value {
    canonical(
        "llm.turn",
        "test_event",
        Some(session),
        at,
        json!({ "model": model, "input_tokens": input, "output_tokens": output, "cached_tokens": input / 2,
                "cost_usd": cost, "cost_source": if cost > 0.0 { "reported" } else { "unreported" } }),
    )
}

/// A canonical completed `tool.call` of `read_file`.
pub fn tool(session: &str, at: DateTime<Utc>, is_error: bool) -> Value {
    canonical(
        "tool.call",
        "test_event",
        Some(session),
        at,
        json!({ "tool_name": "read_file", "status": "completed", "is_error": is_error }),
    )
}
