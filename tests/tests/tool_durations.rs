//! Tool-call durations, active time and `group_by=tool`, black box: Hive tool events
//! with known times posted to the real agent — one call's start before a `kill -9` of the agent and its
//! completion after the restart, one completion before its start in the same request, one completion
//! without a start, one start never completed — pushed by it to the real ingest. The ingest's
//! `/v1/usage?group_by=tool` must give each tool's calls, errors, total duration and p50/p95 (by the
//! documented histogram rule), and the session its wall-clock and active time, the same on the device.
//! No tool argument or result leaves the device.

use std::time::Duration;

use chrono::{DurationRound, Utc};
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::stack::Cloud;

const SESSION: &str = "session_durations_1";

struct Lines {
    t0: chrono::DateTime<Utc>,
    seq: u64,
}

impl Lines {
    /// One Hive event line at `t0 + ms`.
    fn line(&mut self, ms: i64, ty: &str, data: Value) -> String {
        self.seq += 1;
        let at = self.t0 + chrono::Duration::milliseconds(ms);
        tests::events::hive(ty, SESSION, at, self.seq, data).to_string() + "\n"
    }

    fn start(&mut self, ms: i64, id: &str, tool: &str) -> String {
        let input = json!({"path": "/home/alice/zzcanary-input"});
        self.line(
            ms,
            "tool_call_started",
            json!({"tool_use_id": id, "tool_name": tool, "tool_input": input}),
        )
    }

    fn done(&mut self, ms: i64, id: &str, tool: &str, is_error: bool) -> String {
        self.line(
            ms,
            "tool_call_completed",
            json!({"tool_use_id": id, "tool_name": tool, "result": "zzcanary-result", "is_error": is_error}),
        )
    }

    /// A call taking `took` ms, started at `at`.
    fn call(&mut self, at: i64, took: i64, id: &str, tool: &str, is_error: bool) -> String {
        self.start(at, id, tool) + &self.done(at + took, id, tool, is_error)
    }
}

async fn post(agent: &Agent, body: String) {
    let (s, v) = agent.post_events(body.into_bytes()).await.unwrap();
    assert_eq!(s, 200, "{v}");
}

async fn local(agent: &Agent, path: &str) -> Value {
    let r = tests::stack::client()
        .get(format!("http://{}{path}", agent.addr))
        .bearer_auth(&agent.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{path}");
    r.json().await.unwrap()
}

fn row<'a>(v: &'a Value, tool: &str) -> &'a Value {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tool_name"] == tool)
        .unwrap_or_else(|| panic!("no row for {tool}: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_durations_survive_a_kill_and_give_per_tool_percentiles_and_active_time() {
    let cloud = Cloud::start().await.unwrap();
    let mut agent = Agent::start_with(
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

    let t0 = (Utc::now() - chrono::Duration::hours(2))
        .duration_trunc(chrono::TimeDelta::seconds(1))
        .unwrap();
    let mut l = Lines { t0, seq: 0 };
    let mut first = l.line(
        0,
        "execution_started",
        json!({"input": {"task": "zzcanary-task"}}),
    );
    // read_file: 120, 250, 900 and 4,000 ms (the last an error).
    first += &l.call(1_000, 120, "toolu_r1", "read_file", false);
    first += &l.call(2_000, 250, "toolu_r2", "read_file", false);
    first += &l.call(3_000, 900, "toolu_r3", "read_file", false);
    first += &l.call(5_000, 4_000, "toolu_r4", "read_file", true);
    // bash starts now; the agent is killed before its completion arrives.
    first += &l.start(10_000, "toolu_b1", "bash");
    post(&agent, first).await;
    agent.kill_hard();
    agent.restart().await.unwrap();
    let mut second = l.done(12_500, "toolu_b1", "bash", false);
    // grep: the completion before the start, in one request.
    let grep_start = l.start(20_000, "toolu_g1", "grep");
    second += &l.done(20_075, "toolu_g1", "grep", false);
    second += &grep_start;
    // web_search: a completion whose start never came; sleep: a start never completed.
    second += &l.done(30_000, "toolu_w1", "web_search", false);
    second += &l.start(40_000, "toolu_s1", "sleep");
    second += &l.line(60_000, "execution_completed", json!({"output": {}}));
    post(&agent, second).await;
    agent
        .wait_counters(Duration::from_secs(60), "everything delivered", |c| {
            c.pending == 0 && c.delivered >= 16
        })
        .await
        .unwrap();

    let api = cloud.read_api();
    let day = t0.format("%Y-%m-%d").to_string();
    let next = (t0 + chrono::Duration::days(2))
        .format("%Y-%m-%d")
        .to_string();
    let v = api.usage("tool", "total", &day, &next).await.unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 4, "{v}");
    let read = row(&v, "read_file");
    assert_eq!(
        (
            &read["tool_calls"],
            &read["tool_errors"],
            &read["tool_calls_timed"]
        ),
        (&json!(4), &json!(1), &json!(4)),
        "{read}"
    );
    assert_eq!(read["tool_duration_ms"], 120 + 250 + 900 + 4_000);
    // Nearest rank: p50 is the 2nd (250 ms, alone in [181, 256): its middle, 218); p95 the 4th
    // (4,000 ms, alone in [2896, 4096): 3496).
    assert_eq!(
        (&read["tool_duration_p50_ms"], &read["tool_duration_p95_ms"]),
        (&json!(218), &json!(3_496)),
        "{read}"
    );
    let bash = row(&v, "bash");
    assert_eq!(
        bash["tool_duration_ms"], 2_500,
        "paired across the kill: {bash}"
    );
    assert_eq!(
        bash["tool_duration_p50_ms"], 2_472,
        "in [2048, 2896): {bash}"
    );
    let grep = row(&v, "grep");
    assert_eq!(grep["tool_duration_ms"], 75, "paired out of order: {grep}");
    assert_eq!(grep["tool_duration_p95_ms"], 77, "in [64, 91): {grep}");
    let web = row(&v, "web_search");
    assert_eq!(
        (
            &web["tool_calls"],
            &web["tool_calls_timed"],
            &web["tool_duration_ms"]
        ),
        (&json!(1), &json!(0), &json!(0)),
        "no start, no duration: {web}"
    );
    assert_eq!(web["tool_duration_p50_ms"], Value::Null);
    assert_eq!(
        v["totals"]["tool_calls"], 7,
        "the never-completed sleep is no call"
    );
    assert_eq!(v["totals"]["tool_duration_ms"], 7_845);

    // The session: active from its start to its end, one minute; the same on the device.
    let session = api.session(SESSION).await.unwrap();
    let ended =
        (t0 + chrono::Duration::seconds(60)).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    assert_eq!(
        session["durations"],
        json!({"started_at": t0.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true), "ended_at": ended,
               "wall_clock_seconds": 60.0, "active_seconds": 60.0}),
        "{session}"
    );
    assert_eq!(session["totals"]["tool_duration_ms"], 7_845);
    assert_eq!(session["totals"]["active_seconds"], 60.0);
    let device = local(&agent, &format!("/v1/sessions/{SESSION}")).await;
    assert_eq!(device["durations"], session["durations"], "{device}");
    let usage = local(&agent, &format!("/v1/usage/sessions/{SESSION}")).await;
    assert_eq!(usage["totals"]["tool_duration_ms"], 7_845, "{usage}");
    let totals = api.usage("", "total", &day, &next).await.unwrap();
    assert_eq!(totals["totals"]["active_seconds"], 60.0, "{totals}");

    // Tool arguments and results never left the device.
    let stored: Vec<String> = sqlx::query_scalar("SELECT data::text FROM events")
        .fetch_all(&cloud.db.pool().await.unwrap())
        .await
        .unwrap();
    assert!(stored.iter().all(|d| !d.contains("zzcanary")), "{stored:?}");
}
