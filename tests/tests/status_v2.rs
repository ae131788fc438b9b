//! Status v2, black box: Hive event sequences (native lines, as the runtime writes them) posted to the
//! real agent, pushed by it to the real ingest, one session per rule of the health model. For each the
//! test asserts the ingest's status, history (`GET /v1/sessions/{id}/history`) and time in state, and that
//! the agent's local `GET /v1/sessions/{id}` (the same shared model, derived on the device) agrees.
//!
//! The erasures of the old model are here by name: `stream_nudge_sent` after `stream_inactive`,
//! `node_retry` / `escalation_requested` after a doom loop, and the tool calls of a continuing doom loop.
//! Event times are set relative to now, so the no-progress rule (300 s) is exercised without waiting.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::events;
use tests::stack::{Api, Cloud};

/// One native Hive line of `session`, `secs` seconds from `base`.
struct Line {
    secs: i64,
    kind: &'static str,
    data: Value,
}

fn line(secs: i64, kind: &'static str, data: Value) -> Line {
    Line { secs, kind, data }
}

fn llm(secs: i64, stop: &str) -> Line {
    line(
        secs,
        "llm_turn_complete",
        json!({"stop_reason": stop, "model": "claude-sonnet-4-5-20250929", "input_tokens": 100,
               "output_tokens": 10, "cost_usd": 0.001}),
    )
}

/// A tool call: started one second before it completes.
fn tool(secs: i64, name: &str, id: &str, is_error: bool) -> [Line; 2] {
    [
        line(
            secs - 1,
            "tool_call_started",
            json!({"tool_use_id": id, "tool_name": name, "tool_input": {"pattern": "x"}}),
        ),
        line(
            secs,
            "tool_call_completed",
            json!({"tool_use_id": id, "tool_name": name, "result": "r", "is_error": is_error}),
        ),
    ]
}

fn signal(secs: i64, kind: &'static str) -> Line {
    let data = match kind {
        "node_tool_doom_loop" => {
            json!({"description": "grep called 3 times with the same arguments"})
        }
        "node_retry" => json!({"retry_count": 1, "max_retries": 5, "error": "overloaded"}),
        "stream_inactive" => json!({"idle_seconds": 121.0, "limit_seconds": 120.0}),
        "stream_nudge_sent" => json!({"reason": "inactive", "nudge_count": 1}),
        "escalation_requested" => {
            json!({"reason": "Tool doom loop detected", "context": "c", "request_id": "r1"})
        }
        _ => json!({}),
    };
    line(secs, kind, data)
}

/// NDJSON of `lines` for `session`, times relative to `base` (naive UTC: the agent runs with zone UTC).
fn ndjson(session: &str, base: DateTime<Utc>, lines: &[Line]) -> Vec<u8> {
    let out: Vec<Value> = (1..)
        .zip(lines)
        .map(|(seq, l)| {
            let at = base + chrono::Duration::seconds(l.secs);
            events::hive(l.kind, session, at, seq, l.data.clone())
        })
        .collect();
    events::ndjson(&out)
}

/// A cloud and an agent syncing into it.
async fn stack() -> (Cloud, Agent) {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start_with(
        &cloud.dir.path().join("agent"),
        None,
        &[("APIARY_PUSH_POLL_INTERVAL_MS", "50")],
    )
    .await
    .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, true)
        .unwrap();
    (cloud, agent)
}

/// Posts every scenario and waits until the ingest has them all.
async fn replay(agent: &Agent, base: DateTime<Utc>, scenarios: &[(&str, Vec<Line>)]) {
    let mut total = 0;
    for (session, lines) in scenarios {
        let (s, v) = agent
            .post_events(ndjson(session, base, lines))
            .await
            .unwrap();
        assert_eq!(s, 200, "{session}: {v}");
        total += lines.len() as u64;
    }
    agent
        .wait_counters(Duration::from_secs(60), "every event delivered", |c| {
            c.delivered == total
        })
        .await
        .unwrap();
}

/// `(at, from, to, cause)` of a history.
fn transitions(v: &Value) -> Vec<(DateTime<Utc>, Option<String>, String, String)> {
    v["transitions"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|t| {
            (
                t["at"].as_str().unwrap_or("").parse().unwrap(),
                t["from"].as_str().map(str::to_string),
                t["to"].as_str().unwrap_or("").to_string(),
                t["cause"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The agent's local view of a session.
async fn local(agent: &Agent, id: &str) -> (u16, Value) {
    let r = tests::stack::client()
        .get(format!("http://{}/v1/sessions/{id}", agent.addr))
        .bearer_auth(&agent.token)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// What one session must show.
struct Expect {
    status: &'static str,
    cause: &'static str,
    /// The history as `(secs from base, from, to, cause)`.
    history: Vec<(i64, Option<&'static str>, &'static str, &'static str)>,
}

fn exp(
    status: &'static str,
    cause: &'static str,
    history: Vec<(i64, Option<&'static str>, &'static str, &'static str)>,
) -> Expect {
    Expect {
        status,
        cause,
        history,
    }
}

/// Checks one session on the ingest and on the agent; returns the problems found (so one run reports
/// every rule that fails, not only the first).
async fn check(api: &Api, agent: &Agent, base: DateTime<Utc>, id: &str, e: &Expect) -> Vec<String> {
    let mut bad = Vec::new();
    let s = api.session(id).await.unwrap();
    if s["status"] != e.status || s["status_cause"] != e.cause {
        bad.push(format!(
            "{id}: ingest status {} (cause {}), want {} (cause {})",
            s["status"], s["status_cause"], e.status, e.cause
        ));
    }
    let want: Vec<_> = e
        .history
        .iter()
        .map(|(secs, from, to, cause)| {
            (
                base + chrono::Duration::seconds(*secs),
                from.map(str::to_string),
                to.to_string(),
                cause.to_string(),
            )
        })
        .collect();
    let (code, h) = api
        .get(&format!("/v1/sessions/{id}/history"))
        .await
        .unwrap();
    if code != 200 || transitions(&h) != want {
        bad.push(format!("{id}: ingest history {code} {h}, want {want:?}"));
    }
    let (code, l) = local(agent, id).await;
    if code != 200 || l["status"] != s["status"] || l["status_cause"] != s["status_cause"] {
        bad.push(format!(
            "{id}: agent says {code} {l}, ingest {}",
            s["status"]
        ));
    } else if transitions(&l) != transitions(&h) {
        bad.push(format!(
            "{id}: agent history {l} differs from the ingest's {h}"
        ));
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_milder_later_signal_never_erases_an_alarm() {
    let (cloud, agent) = stack().await;
    let base = Utc::now().trunc_subsecs(0) - chrono::Duration::seconds(100);
    let looping = |extra: Vec<Line>| {
        let mut v: Vec<Line> = Vec::new();
        for (n, secs) in [10, 13, 16].into_iter().enumerate() {
            v.extend(tool(secs, "grep", &format!("t{n}"), false));
        }
        v.push(signal(20, "node_tool_doom_loop"));
        v.extend(extra);
        v
    };
    let mut continuing = vec![llm(30, "tool_use")];
    continuing.extend(tool(32, "grep", "t3", false));
    continuing.push(llm(34, "tool_use"));
    continuing.extend(tool(36, "grep", "t4", false));
    let mut broken = vec![llm(30, "tool_use")];
    broken.extend(tool(32, "grep", "t3", false));
    broken.extend(tool(40, "read_file", "t5", false));
    let scenarios = vec![
        (
            "s_nudge",
            vec![
                llm(10, "end_turn"),
                signal(20, "stream_inactive"),
                signal(21, "stream_nudge_sent"),
            ],
        ),
        ("s_doom_retry", looping(vec![signal(21, "node_retry")])),
        (
            "s_doom_escalation",
            looping(vec![signal(21, "escalation_requested")]),
        ),
        ("s_doom_continuing", looping(continuing)),
        ("s_doom_broken", looping(broken)),
    ];
    replay(&agent, base, &scenarios).await;
    let api = cloud.read_api();
    let doom = |extra: Vec<(i64, Option<&'static str>, &'static str, &'static str)>| {
        let mut h = vec![
            (9, None, "active", "tool_started"),
            (20, Some("active"), "stalled", "doom_loop"),
        ];
        h.extend(extra);
        h
    };
    let expects = [
        (
            "s_nudge",
            exp(
                "stalled",
                "inactive",
                vec![
                    (10, None, "active", "llm_turn"),
                    (20, Some("active"), "stalled", "inactive"),
                ],
            ),
        ),
        ("s_doom_retry", exp("stalled", "doom_loop", doom(vec![]))),
        (
            "s_doom_escalation",
            exp("stalled", "doom_loop", doom(vec![])),
        ),
        (
            "s_doom_continuing",
            exp("stalled", "doom_loop", doom(vec![])),
        ),
        (
            "s_doom_broken",
            exp(
                "active",
                "tool_call",
                doom(vec![(40, Some("stalled"), "active", "tool_call")]),
            ),
        ),
    ];
    let mut bad = Vec::new();
    for (id, e) in &expects {
        bad.extend(check(&api, &agent, base, id, e).await);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_has_its_status_history_and_time_in_state() {
    let (cloud, agent) = stack().await;
    // Events from 20 minutes ago to now.
    let base = Utc::now().trunc_subsecs(0) - chrono::Duration::seconds(1200);
    let recent = 1140; // one minute ago
    let mut degraded = vec![llm(recent - 10, "tool_use")];
    for (n, secs) in [recent - 6, recent - 4, recent - 2].into_iter().enumerate() {
        degraded.extend(tool(secs, "web_fetch", &format!("e{n}"), true));
    }
    let scenarios = vec![
        // No progress for 300 s after the turn: stalled at exactly turn + 300 s, derived, not stored.
        ("s_quiet", vec![llm(600, "end_turn")]),
        (
            "s_waiting",
            vec![
                llm(recent, "end_turn"),
                line(
                    recent + 1,
                    "client_input_requested",
                    json!({"prompt": "which repo?"}),
                ),
            ],
        ),
        (
            "s_attention",
            vec![
                llm(recent, "end_turn"),
                signal(recent + 1, "escalation_requested"),
            ],
        ),
        ("s_degraded", degraded),
        (
            "s_lifecycle",
            vec![
                line(0, "execution_started", json!({"input": {}})),
                llm(10, "end_turn"),
                signal(100, "stream_inactive"),
                llm(200, "end_turn"),
                line(300, "execution_completed", json!({"output": {}})),
            ],
        ),
    ];
    replay(&agent, base, &scenarios).await;
    let api = cloud.read_api();
    let expects = [
        (
            "s_quiet",
            exp(
                "stalled",
                "no_progress",
                vec![
                    (600, None, "active", "llm_turn"),
                    (900, Some("active"), "stalled", "no_progress"),
                ],
            ),
        ),
        (
            "s_waiting",
            exp(
                "waiting",
                "requested",
                vec![
                    (recent, None, "active", "llm_turn"),
                    (recent + 1, Some("active"), "waiting", "requested"),
                ],
            ),
        ),
        (
            "s_attention",
            exp(
                "needs_attention",
                "escalation_requested",
                vec![
                    (recent, None, "active", "llm_turn"),
                    (
                        recent + 1,
                        Some("active"),
                        "needs_attention",
                        "escalation_requested",
                    ),
                ],
            ),
        ),
        (
            "s_degraded",
            exp(
                "degraded",
                "tool_errors",
                vec![
                    (recent - 10, None, "active", "llm_turn"),
                    (recent - 2, Some("active"), "degraded", "tool_errors"),
                ],
            ),
        ),
        (
            "s_lifecycle",
            exp(
                "completed",
                "completed",
                vec![
                    (0, None, "active", "run_started"),
                    (100, Some("active"), "stalled", "inactive"),
                    (200, Some("stalled"), "active", "llm_turn"),
                    (300, Some("active"), "completed", "completed"),
                ],
            ),
        ),
    ];
    let mut bad = Vec::new();
    for (id, e) in &expects {
        bad.extend(check(&api, &agent, base, id, e).await);
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));

    // Time in state: closed intervals exactly, the open one up to now.
    let s = api.session("s_lifecycle").await.unwrap();
    let t = &s["time_in_state"];
    assert_eq!(
        (t["active"].as_f64(), t["stalled"].as_f64()),
        (Some(200.0), Some(100.0)),
        "{s}"
    );
    let open = t["completed"].as_f64().unwrap();
    assert!((900.0..1000.0).contains(&open), "{s}");
    let q = api.session("s_quiet").await.unwrap();
    assert_eq!(q["time_in_state"]["active"].as_f64(), Some(300.0), "{q}");

    // Tenant-wide: what went stalled in the window, stored and derived alike, oldest first.
    let from = (base + chrono::Duration::seconds(50)).to_rfc3339();
    let to = (base + chrono::Duration::seconds(1000)).to_rfc3339();
    let v = api
        .get_ok(&format!(
            "/v1/status/transitions?from={}&to={}&status=stalled",
            urlencode(&from),
            urlencode(&to)
        ))
        .await
        .unwrap();
    let got: Vec<(String, String)> = v["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["session_id"].as_str().unwrap().to_string(),
                t["cause"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("s_lifecycle".to_string(), "inactive".to_string()),
            ("s_quiet".to_string(), "no_progress".to_string())
        ],
        "{v}"
    );
    let (code, v) = api
        .get("/v1/status/transitions?status=asleep")
        .await
        .unwrap();
    assert_eq!(code, 400, "{v}");
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}
