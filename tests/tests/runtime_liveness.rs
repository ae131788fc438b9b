//! Runtime liveness, black box: Hive sessions laid out in a HIVE_HOME as Hive leaves them — the
//! per-session `events.jsonl` and the `state.json` that names the owning process (`"status": "active"`,
//! `"pid"`) — with a real process standing in for each runtime. The real agent tails the home, checks the
//! processes and reports them in its heartbeat; the real ingest reads a session whose runtime died
//! without an end event as `crashed` (history cause `runtime_gone`, streamed on `/v1/stream`), while a
//! session that is merely slow (its process alive) stays `stalled`, and a later event clears the crash.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::sse::SseClient;
use tests::stack::{Api, Cloud};

const CRASH: &str = "session_20261125_000001_c0ffee01";
const SLOW: &str = "session_20261125_000002_c0ffee02";

fn sleeper() -> Child {
    Command::new("sleep").arg("600").spawn().unwrap()
}

/// The session's directory under the home, as an agent run lays it out.
fn dir(home: &Path, session: &str) -> std::path::PathBuf {
    home.join("agents/research_agent/sessions").join(session)
}

/// Writes `state.json` the way Hive does (a temporary file renamed over it).
fn write_state(home: &Path, session: &str, status: &str, pid: u32) {
    let d = dir(home, session);
    std::fs::create_dir_all(&d).unwrap();
    let now = Utc::now()
        .naive_utc()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string();
    let state = json!({
        "schema_version": "1.1", "session_id": session, "stream_id": "default", "status": status,
        "goal_id": "research", "agent_id": "research_agent", "entry_point": "start",
        "timestamps": {"started_at": now, "updated_at": now},
        "progress": {"current_node": "search", "path": ["search"]},
        "memory": {"notes": "private working memory that never leaves the device"},
        "input_data": {"task": "a private task"}, "pid": pid, "isolation_level": "shared"
    });
    let tmp = d.join(".state.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    std::fs::rename(tmp, d.join("state.json")).unwrap();
}

/// Appends native Hive lines (LLM turns at these times) to the session's `events.jsonl`.
fn append_turns(home: &Path, session: &str, first_seq: u64, times: &[DateTime<Utc>]) {
    use std::io::Write;
    let d = dir(home, session);
    std::fs::create_dir_all(&d).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(d.join("events.jsonl"))
        .unwrap();
    for (i, at) in times.iter().enumerate() {
        let v = json!({
            "type": "llm_turn_complete", "stream_id": "default", "node_id": "search",
            "execution_id": session,
            "data": {"stop_reason": "tool_use", "model": "claude-sonnet-4-5-20250929",
                     "input_tokens": 1000, "output_tokens": 50, "cost_usd": 0.004},
            "timestamp": at.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
            "correlation_id": null, "colony_id": null, "seq": first_seq + i as u64,
        });
        writeln!(f, "{v}").unwrap();
    }
}

async fn wait_status(api: &Api, id: &str, want: &str, within: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let s = api.session(id).await.unwrap();
        if s["status"] == want || tokio::time::Instant::now() > deadline {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn local_status(agent: &Agent, id: &str) -> Value {
    tests::stack::client()
        .get(format!("http://{}/v1/sessions/{id}", agent.addr))
        .bearer_auth(&agent.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_runtime_dies_reads_crashed_and_a_slow_one_stays_stalled() {
    let cloud = Cloud::start().await.unwrap();
    let home = tempfile::tempdir().unwrap();
    let now = Utc::now();
    let mut crash_runtime = sleeper();
    let mut slow_runtime = sleeper();
    write_state(home.path(), CRASH, "active", crash_runtime.id());
    write_state(home.path(), SLOW, "active", slow_runtime.id());
    let s = chrono::Duration::seconds;
    append_turns(home.path(), CRASH, 1, &[now - s(20), now - s(10)]);
    // Quiet for longer than stall_after (300 s), its process alive: slow, not dead.
    append_turns(home.path(), SLOW, 1, &[now - s(420), now - s(400)]);

    let agent = Agent::start_with(
        &cloud.dir.path().join("agent"),
        Some(home.path()),
        &[
            ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
            ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "1"),
        ],
    )
    .await
    .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, true)
        .unwrap();
    agent
        .wait_counters(Duration::from_secs(60), "four turns delivered", |c| {
            c.delivered == 4
        })
        .await
        .unwrap();
    let api = cloud.read_api();
    // Alive and reported alive: the event-driven status stands.
    let s = wait_status(&api, CRASH, "active", Duration::from_secs(10)).await;
    assert_eq!(s["status"], "active", "{s}");
    tokio::time::sleep(Duration::from_secs(3)).await; // heartbeats with both runtimes alive
    assert_eq!(api.session(CRASH).await.unwrap()["status"], "active");

    let mut stream = SseClient::open(
        &format!("{}/v1/stream", cloud.ingest.url()),
        &cloud.tenant.read_token,
        None,
    )
    .await
    .map_err(|r| r.status())
    .unwrap();

    let mut local_stream = SseClient::open(
        &format!("http://{}/v1/stream", agent.addr),
        &agent.token,
        None,
    )
    .await
    .map_err(|r| r.status())
    .unwrap();

    // The runtime dies without writing an end event or its final state.
    crash_runtime.kill().unwrap();
    crash_runtime.wait().unwrap();
    let s = wait_status(&api, CRASH, "crashed", Duration::from_secs(20)).await;
    assert_eq!(
        (s["status"].as_str(), s["status_cause"].as_str()),
        (Some("crashed"), Some("runtime_gone")),
        "{s}"
    );
    let h = api
        .get_ok(&format!("/v1/sessions/{CRASH}/history"))
        .await
        .unwrap();
    let last = h["transitions"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (
            last["from"].as_str(),
            last["to"].as_str(),
            last["cause"].as_str()
        ),
        (Some("active"), Some("crashed"), Some("runtime_gone")),
        "{h}"
    );
    let streamed = stream
        .until(Duration::from_secs(10), |e| {
            e.event == "status" && e.data["session_id"] == CRASH && e.data["to"] == "crashed"
        })
        .await;
    let streamed = streamed.expect("the crashed transition is streamed");
    assert_eq!(streamed.last().unwrap().data["cause"], "runtime_gone");
    // The device sees it too: its live stream and its local status (the same overlay).
    let local = local_stream
        .until(Duration::from_secs(10), |e| {
            e.event == "status" && e.data["session_id"] == CRASH && e.data["to"] == "crashed"
        })
        .await
        .expect("the crashed transition is on the local stream");
    assert_eq!(local.last().unwrap().data["cause"], "runtime_gone");
    let l = local_status(&agent, CRASH).await;
    assert_eq!(
        (l["status"].as_str(), l["status_cause"].as_str()),
        (Some("crashed"), Some("runtime_gone")),
        "{l}"
    );

    // Slow but alive: stalled by the no-progress rule, never crashed.
    let slow = api.session(SLOW).await.unwrap();
    assert_eq!(
        (slow["status"].as_str(), slow["status_cause"].as_str()),
        (Some("stalled"), Some("no_progress")),
        "{slow}"
    );
    assert_eq!(local_status(&agent, SLOW).await["status"], "stalled");

    // A later event of the session (its runtime resumed) clears the crash, although the state file
    // still names the dead process.
    append_turns(home.path(), CRASH, 3, &[Utc::now()]);
    let s = wait_status(&api, CRASH, "active", Duration::from_secs(20)).await;
    assert_eq!(s["status"], "active", "{s}");

    // Nothing of the state file but the evidence left the device: no memory, no task, no path.
    let scanned = tests::scan::dump(&cloud.db.url).await.unwrap();
    for secret in ["private working memory", "a private task", "research_agent"] {
        assert!(!scanned.contains(secret), "{secret} reached the cloud");
    }
    slow_runtime.kill().unwrap();
    let _ = slow_runtime.wait();
}
