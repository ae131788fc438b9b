//! Usage by colony key equals a recomputation from the events sent: each event's colony is the key of
//! the run its colony id names, else the key of the forked run its own session is, else its colony id as
//! stored ("" for none) — with runs told before and after their usage arrives, a session that is both a
//! worker of one colony and a forked run of another, and colony ids no run names.

use std::collections::BTreeMap;

use chrono::{Duration, DurationRound, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// (input tokens, events, tool calls) per (day start as a Unix time, colony key).
type Sums = BTreeMap<(i64, String), (u64, u64, u64)>;

#[sqlx::test(migrations = "../migrations")]
async fn usage_by_colony_equals_the_events_resolved_by_hand(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut rng = StdRng::seed_from_u64(11);
    let keys: Vec<String> = (0..3)
        .map(|i| format!("ck_{}", format!("{i}").repeat(32)))
        .collect();
    let now = Utc::now();
    let base = now - Duration::days(3);
    // Six runs of three colonies: run-i forked from queen q{i % 2}.
    let run_key = |i: usize| keys[i % 3].clone();
    // Sessions: (session, colony id its events carry, the key the read must give it).
    let mut sessions: Vec<(String, String, String)> = vec![];
    for i in 0..6 {
        // The run's own session carries no colony id: its key comes from being a forked run.
        sessions.push((format!("run-{i}"), String::new(), run_key(i)));
        for w in 0..3 {
            sessions.push((format!("w-{i}-{w}"), format!("run-{i}"), run_key(i)));
        }
    }
    // A run (run-6, of colony 0) whose own events name run-1 (colony 1) as their colony: run-1's key
    // wins, in the grouping and in each colony's own usage.
    sessions.push(("run-6".into(), "run-1".into(), run_key(1)));
    // Queens, a colony id that no run names, and plain sessions.
    sessions.push(("q0".into(), String::new(), String::new()));
    sessions.push(("q1".into(), String::new(), String::new()));
    sessions.push((
        "orphan".into(),
        "unknown-queen".into(),
        "unknown-queen".into(),
    ));
    sessions.push(("plain".into(), String::new(), String::new()));

    let mut usage = vec![];
    let mut expected = Sums::new();
    for _ in 0..600 {
        let (sid, colony, key) = &sessions[rng.gen_range(0..sessions.len())];
        let at = base + Duration::seconds(rng.gen_range(0..3 * 86_400 - 600));
        let mut e = if rng.gen_bool(0.6) {
            llm(
                sid,
                at,
                "m1",
                rng.gen_range(1..5000),
                rng.gen_range(0..500),
                0.001,
            )
        } else {
            tool(sid, at, rng.gen_bool(0.2))
        };
        if !colony.is_empty() {
            e["colony_id"] = json!(colony);
            e["parent_session_id"] = json!(colony);
            e["agent_role"] = json!("worker");
        }
        let day = at.duration_trunc(Duration::days(1)).unwrap().timestamp();
        let s = expected.entry((day, key.clone())).or_default();
        s.0 += e["data"]["input_tokens"].as_u64().unwrap_or(0);
        s.1 += 1;
        s.2 += u64::from(e["type"] == "tool.call");
        usage.push(e);
    }
    let created = |i: usize| {
        event(
            "colony.created",
            Some(&format!("q{}", i % 2)),
            base - Duration::minutes(5),
            json!({ "source": "created", "colony_id": format!("run-{i}"), "queen_session_id": format!("q{}", i % 2),
                    "forked_session_id": format!("run-{i}"), "colony_key": run_key(i) }),
        )
    };
    // Runs 0, 2, 4 are told before their usage, 1, 3, 5 and 6 after it.
    let mut first: Vec<Value> = [0, 2, 4].into_iter().map(created).collect();
    first.extend(usage.drain(..300));
    let mut second = usage;
    second.extend([1, 3, 5, 6].into_iter().map(created));
    for events in [first, second] {
        let (s, v) = app.post_batch(&t.ingest, &batch(events, vec![])).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["rejected"], json!([]), "{v}");
    }

    let from = (base.duration_trunc(Duration::days(1)).unwrap()).to_rfc3339();
    let to = (now.duration_trunc(Duration::days(1)).unwrap() + Duration::days(1)).to_rfc3339();
    let query = |group: &str, gran: &str| {
        format!(
            "/v1/usage?from={}&to={}&group_by={group}&granularity={gran}",
            from.replace('+', "%2B"),
            to.replace('+', "%2B")
        )
    };
    let read = |v: &Value, day: bool| {
        let mut got = Sums::new();
        for r in v["rows"].as_array().unwrap() {
            let d = if day {
                chrono::DateTime::parse_from_rfc3339(r["bucket"].as_str().unwrap())
                    .unwrap()
                    .timestamp()
            } else {
                0
            };
            let key = r["colony_id"].as_str().unwrap_or("").to_string();
            let s = got.entry((d, key)).or_default();
            s.0 += r["input_tokens"].as_u64().unwrap();
            s.1 += r["events"].as_u64().unwrap();
            s.2 += r["tool_calls"].as_u64().unwrap();
        }
        got
    };
    let (s, v) = app.get(&t.read, &query("colony", "day")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(read(&v, true), expected, "{v}");
    // Per hour and in total (hour rows come from the 15-minute rollup, day rows mostly from the hourly).
    let mut totals = Sums::new();
    for ((_, k), s) in &expected {
        let e = totals.entry((0, k.clone())).or_default();
        (e.0, e.1, e.2) = (e.0 + s.0, e.1 + s.1, e.2 + s.2);
    }
    let (_, v) = app.get(&t.read, &query("colony", "total")).await;
    assert_eq!(read(&v, false), totals, "{v}");
    let (_, v) = app.get(&t.read, &query("colony,model", "hour")).await;
    let mut by_hour = Sums::new();
    for ((_, k), s) in read(&v, false) {
        let e = by_hour.entry((0, k)).or_default();
        (e.0, e.1, e.2) = (e.0 + s.0, e.1 + s.1, e.2 + s.2);
    }
    assert_eq!(by_hour, totals, "{v}");
    // Tool calls per colony from the tool rollup.
    let (s, v) = app.get(&t.read, &query("tool,colony", "total")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let mut calls: BTreeMap<String, u64> = BTreeMap::new();
    for r in v["rows"].as_array().unwrap() {
        *calls
            .entry(r["colony_id"].as_str().unwrap_or("").to_string())
            .or_default() += r["tool_calls"].as_u64().unwrap();
    }
    let want: BTreeMap<String, u64> = totals
        .iter()
        .filter(|(_, s)| s.2 > 0)
        .map(|((_, k), s)| (k.clone(), s.2))
        .collect();
    assert_eq!(calls, want, "{v}");
    // One colony's usage (`/v1/colonies/{key}/usage`) is the same rows the grouping gives its key.
    for key in &keys {
        let (s, v) = app
            .get(
                &t.read,
                &format!(
                    "/v1/colonies/{key}/usage?from={}&to={}",
                    from.replace('+', "%2B"),
                    to.replace('+', "%2B")
                ),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let want = totals[&(0, key.clone())];
        let got = &v["totals"];
        assert_eq!(
            (
                got["input_tokens"].as_u64().unwrap(),
                got["events"].as_u64().unwrap(),
                got["tool_calls"].as_u64().unwrap()
            ),
            want,
            "{key}: {v}"
        );
    }
}
