//! Tasks, triggers and activity, black box: the fixture day posted to the real
//! agent twice (first in reverse order of files, so the session logs come before the debug log; then
//! again, all duplicates), pushed by it to the real ingest. The ingest's `GET /v1/sessions/{id}`
//! and the agent's local one must show the same tasks (no subject or description anywhere), triggers and
//! next wake; and a tool call posted as started shows as the activity on both sides until its completion.

use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::fixture;
use tests::stack::Cloud;

const QUEEN: &str = "session_20261103_101433_51be07d2";
const WORKER: &str = "session_20261103_101818_b5220072";
const RESUMED: &str = "session_20261103_135512_04b64182";

async fn local(agent: &Agent, id: &str) -> Value {
    let r = tests::stack::client()
        .get(format!("http://{}/v1/sessions/{id}", agent.addr))
        .bearer_auth(&agent.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{id}");
    r.json().await.unwrap()
}

/// The work fields of a session detail.
fn work(v: &Value) -> Value {
    json!({
        "tasks": v["tasks"], "next_wake_at": v["next_wake_at"], "activity": v["activity"],
        "task_list": v["task_list"], "triggers": v["triggers"],
    })
}

fn ids_and_states(v: &Value) -> Vec<(String, String)> {
    v["task_list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap().to_string(),
                t["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

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

async fn wait_idle(agent: &Agent) {
    agent
        .wait_counters(Duration::from_secs(60), "everything delivered", |c| {
            c.pending == 0 && c.received > 0
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_days_tasks_and_triggers_agree_on_the_device_and_in_the_cloud() {
    let (cloud, agent) = stack().await;
    // Each file with its session (the directory of a per-session log), as a producer replaying it knows.
    let files = fixture::day_files();
    for f in files.iter().rev().chain(files.iter()) {
        let hint = f.session_hint();
        let (s, v) = agent
            .post_events_for(f.lines.concat(), hint.as_deref())
            .await
            .unwrap();
        assert_eq!(s, 200, "{v}");
    }
    wait_idle(&agent).await;

    let queen = cloud.read_api().session(QUEEN).await.unwrap();
    // Tasks 1..3 created, 1 in progress then completed, 3 deleted.
    assert_eq!(
        ids_and_states(&queen),
        [
            ("1".into(), "completed".into()),
            ("2".into(), "pending".into())
        ],
        "{queen}"
    );
    assert_eq!(
        queen["tasks"],
        json!({"pending": 1, "in_progress": 0, "completed": 1, "other": 0})
    );
    let trigger = &queen["triggers"][0];
    assert_eq!(trigger["trigger_id"], "nightly_billing_tests", "{queen}");
    assert_eq!(trigger["trigger_type"], "timer");
    assert_eq!(trigger["state"], "activated");
    assert_eq!(trigger["fire_count"], 1);
    // trigger_fired's next_fire_at (epoch ms 1793790000000), not trigger_activated's earlier one.
    assert_eq!(trigger["next_fire_at"], "2026-11-04T11:00:00Z");
    assert_eq!(queen["next_wake_at"], "2026-11-04T11:00:00Z");
    assert_eq!(
        queen["activity"],
        Value::Null,
        "the queen's execution completed"
    );

    let worker = cloud.read_api().session(WORKER).await.unwrap();
    assert_eq!(ids_and_states(&worker), [("1".into(), "completed".into())]);

    // Reset before task 1 was created; the trigger was deactivated, then removed: no next wake.
    let resumed = cloud.read_api().session(RESUMED).await.unwrap();
    assert_eq!(ids_and_states(&resumed), [("1".into(), "completed".into())]);
    assert_eq!(resumed["triggers"][0]["trigger_id"], "weekly_deps_audit");
    assert_eq!(resumed["triggers"][0]["state"], "removed");
    assert_eq!(resumed["triggers"][0]["fire_count"], 7);
    assert_eq!(resumed["next_wake_at"], Value::Null);

    for id in [QUEEN, WORKER, RESUMED] {
        let cloud_side = cloud.read_api().session(id).await.unwrap();
        let device = local(&agent, id).await;
        assert_eq!(work(&device), work(&cloud_side), "{id}");
        let text = format!("{cloud_side}{device}");
        assert!(
            !text.contains("zzcanary"),
            "task or trigger text leaked: {text}"
        );
    }
    // The session list has the compact form.
    let page = cloud
        .read_api()
        .get_ok("/v1/sessions?limit=100")
        .await
        .unwrap();
    let row = page["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == QUEEN)
        .unwrap()
        .clone();
    assert_eq!(row["tasks"], queen["tasks"]);
    assert_eq!(row["next_wake_at"], queen["next_wake_at"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_in_flight_is_the_activity_until_it_completes() {
    let (cloud, agent) = stack().await;
    let at = Utc::now() - chrono::Duration::seconds(30);
    let line = |seq: u64, secs: i64, ty: &str, data: Value| {
        let at = at + chrono::Duration::seconds(secs);
        tests::events::hive(ty, "s-act", at, seq, data).to_string() + "\n"
    };
    let started = line(
        1,
        0,
        "tool_call_started",
        json!({"tool_use_id": "toolu_1", "tool_name": "terminal_exec", "tool_input": {"cmd": "make zzcanary1"}, "tool_index": 1}),
    );
    let (s, v) = agent.post_events(started.into_bytes()).await.unwrap();
    assert_eq!(s, 200, "{v}");
    wait_idle(&agent).await;
    let cloud_side = cloud.read_api().session("s-act").await.unwrap();
    assert_eq!(cloud_side["activity"]["kind"], "tool_call", "{cloud_side}");
    assert_eq!(cloud_side["activity"]["tool_name"], "terminal_exec");
    assert_eq!(cloud_side["activity"]["in_flight"], 1);
    assert_eq!(work(&local(&agent, "s-act").await), work(&cloud_side));

    let done = line(
        2,
        5,
        "tool_call_completed",
        json!({"tool_use_id": "toolu_1", "tool_name": "terminal_exec", "result": "ok", "is_error": false, "tool_index": 1}),
    );
    let (s, v) = agent.post_events(done.into_bytes()).await.unwrap();
    assert_eq!(s, 200, "{v}");
    agent
        .wait_counters(Duration::from_secs(60), "both delivered", |c| {
            c.pending == 0 && c.delivered >= 2
        })
        .await
        .unwrap();
    let cloud_side = cloud.read_api().session("s-act").await.unwrap();
    assert_eq!(cloud_side["activity"], Value::Null, "{cloud_side}");
    assert_eq!(local(&agent, "s-act").await["activity"], Value::Null);
}
