//! The contract between the agent and the ingest, black box: both count the same usage for the same
//! events, a device takes the identity its token is bound to (the documented commands, verbatim), and
//! events pending under a wrong identity are delivered once the configuration is fixed.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tests::agent::Agent;
use tests::bins;
use tests::ingest::ingest_cli;
use tests::stack::{write_private, Cloud};

/// Runs a binary with the zone fixed; (exit code, stdout + stderr).
fn run_bin(name: &str, args: &[&str]) -> (i32, String) {
    bins::run(name, args, &[("APIARY_ZONE", "UTC")])
}

fn last_line(s: &str) -> String {
    s.lines().last().unwrap_or("").trim().to_string()
}

/// `apiary-ingest token create --tenant T --scope ingest --user alice --device alice-laptop` (the
/// documented line), written to `dir/name` with mode 0600.
fn device_token(cloud: &Cloud, name: &str) -> std::path::PathBuf {
    let args = [
        "token",
        "create",
        "--tenant",
        &cloud.tenant.id,
        "--scope",
        "ingest",
        "--user",
        "alice",
        "--device",
        "alice-laptop",
    ];
    let token = last_line(&ingest_cli(&cloud.db.url, &args).expect("token create"));
    let path = cloud.dir.path().join(name);
    write_private(&path, &format!("{token}\n")).unwrap();
    path
}

/// A canonical event of `session` with `data`.
fn canonical(session: &str, n: u64, kind: &str, data: Value) -> Value {
    json!({
        "schema_version": 1, "event_id": uuid::Uuid::new_v4(), "type": kind,
        "occurred_at": (chrono::Utc::now() - chrono::Duration::seconds(600 - n as i64)).to_rfc3339(),
        "runtime": "hive", "session_id": session, "agent_role": "queen", "native_type": "x", "data": data,
    })
}

/// The same events the drift was seen with: a turn with no cost source and zero tokens, many small costs
/// whose f64 sum drifts, out-of-range tokens, unreported costs, tool calls and errors.
fn drift_events(session: &str) -> Vec<Value> {
    let mut out = vec![
        canonical(session, 0, "llm.turn", json!({"model": "m", "cost_usd": 0})),
        canonical(
            session,
            1,
            "llm.turn",
            json!({"model": "m", "input_tokens": 9, "cost_usd": 0}),
        ),
        canonical(
            session,
            2,
            "llm.turn",
            json!({"model": "m", "input_tokens": 9}),
        ),
        canonical(
            session,
            3,
            "llm.turn",
            json!({"model": "m", "input_tokens": 5, "cost_usd": 0.5, "cost_source": "unreported"}),
        ),
        canonical(
            session,
            4,
            "llm.turn",
            json!({"model": "m", "output_tokens": 2_000_000_000_000u64}),
        ),
        canonical(
            session,
            5,
            "llm.turn",
            json!({"model": "m", "cost_usd": -1.0}),
        ),
        canonical(
            session,
            6,
            "tool.call",
            json!({"tool_name": "t", "status": "started"}),
        ),
        canonical(
            session,
            7,
            "tool.call",
            json!({"tool_name": "t", "status": "completed", "is_error": true}),
        ),
    ];
    for i in 0..30 {
        let data = json!({"model": "n", "input_tokens": 100, "output_tokens": 3, "cached_tokens": 40,
            "cost_usd": 0.1, "cost_source": "reported", "credits": 0.01});
        out.push(canonical(session, 10 + i, "llm.turn", data));
    }
    out
}

const COMPARED: [&str; 10] = [
    "llm_calls",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_creation_tokens",
    "cost_nanos",
    "unpriced_turns",
    "tool_calls",
    "tool_errors",
    "events",
];

/// Feeds the same events to the agent (its local API, sync off) and to the ingest (a batch with the
/// ingest token) and compares the agent's local usage with the ingest's rollups: equal, field by field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_and_the_ingest_count_the_same_usage_for_the_same_events() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start(&cloud.dir.path().join("agent"), None)
        .await
        .unwrap();
    let session = "session_contract_usage";
    let events = drift_events(session);
    let mut ndjson = Vec::new();
    for e in &events {
        serde_json::to_writer(&mut ndjson, e).unwrap();
        ndjson.push(b'\n');
    }
    let (code, v) = agent.post_events(ndjson).await.unwrap();
    // The agent refuses the two out-of-range turns at intake, as the ingest does in its verdicts.
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        (&v["rejected"], &v["accepted"]),
        (&json!(2), &json!(36)),
        "{v}"
    );
    let reasons: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        [
            "data.output_tokens is out of range",
            "data.cost_usd is out of range"
        ],
        "{v}"
    );
    let batch = json!({
        "schema_version": 1, "batch_id": uuid::Uuid::new_v4(), "sent_at": chrono::Utc::now(),
        "agent": {"agent_version": "0.1.0"}, "policy_hash": "test", "events": events,
    });
    let (code, verdicts) = cloud
        .ingest_api()
        .post_batch(batch.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(code, 200, "{verdicts}");
    let rejected = verdicts["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 2, "the out-of-range turns: {verdicts}");
    let local = tests::procs::wait_for(Duration::from_secs(10), || async {
        let r = tests::stack::client()
            .get(format!("http://{}/v1/usage/sessions/{session}", agent.addr))
            .bearer_auth(&agent.token)
            .send()
            .await
            .ok()?;
        let v: Value = r.json().await.ok()?;
        (v["totals"]["events"].as_i64()? == 36).then_some(v)
    })
    .await
    .expect("the agent counted the 36 countable events");
    let cloud_usage = cloud
        .read_api()
        .get_ok(&format!("/v1/sessions/{session}/usage"))
        .await
        .unwrap();
    for field in COMPARED {
        assert_eq!(
            local["totals"][field], cloud_usage["totals"][field],
            "{field}: agent {} vs ingest {}",
            local["totals"], cloud_usage["totals"]
        );
    }
    // 30 × 0.1 USD is exactly 3 USD (an f64 sum is 3.0000000000000013); 2 unpriced: no cost at all, and
    // zero cost with tokens (the zero-cost turn without tokens is free); the `unreported` turn is unpriced
    // and its 0.5 USD still counted as reported.
    assert_eq!(local["totals"]["cost_nanos"], 3_500_000_000i64);
    assert_eq!(local["totals"]["cost_usd"], 3.5);
    assert_eq!(local["totals"]["unpriced_turns"], 3);
    assert_eq!(local["totals"]["credits"], 0.3);
    assert_eq!(local["totals"]["tool_calls_started"], 1);
}

/// The documented commands, verbatim: `token create … --user alice --device alice-laptop`, `sync enable … --token-file
/// F`, `run` with no identity configured. The agent takes the token's user and device and delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_path_with_a_device_bound_token_delivers_without_configured_identity() {
    let cloud = Cloud::start().await.unwrap();
    let data = cloud.dir.path().join("agent");
    std::fs::create_dir_all(&data).unwrap();
    let token = device_token(&cloud, "F");
    let dir = data.to_string_lossy().into_owned();
    let (code, out) = run_bin(
        "apiary-agent",
        &[
            "sync",
            "enable",
            "--data-dir",
            &dir,
            "--endpoint",
            &cloud.ingest.url(),
            "--token-file",
            &token.to_string_lossy(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sync enabled"), "{out}");
    assert!(out.contains("device alice-laptop"), "{out}");
    let agent = Agent::start_with(&data, None, &[("APIARY_PUSH_POLL_INTERVAL_MS", "50")])
        .await
        .unwrap();
    let (code, v) = agent
        .post_events(tests::fixture::synthetic_turns(
            "session_readme_identity",
            1,
            3,
        ))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
    agent
        .wait_counters(Duration::from_secs(30), "3 delivered", |c| c.delivered == 3)
        .await
        .unwrap();
    cloud
        .assert_exactly("session_readme_identity", 3)
        .await
        .unwrap();
    let s = cloud
        .read_api()
        .session("session_readme_identity")
        .await
        .unwrap();
    assert_eq!(s["device_id"], "alice-laptop", "{s}");
    assert_eq!(s["user_id"], "alice", "{s}");
    let status = agent.status().await.unwrap();
    assert_eq!(status["device_id"], "alice-laptop", "{status}");
}

/// A configured device that contradicts the token: `sync enable` refuses, exits non-zero and names the
/// setting to change; with the agent already enabled (the token changed later), `run` pauses sync with
/// the same text instead of failing silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_device_that_contradicts_the_token_is_named_at_sync_enable_and_at_start() {
    let cloud = Cloud::start().await.unwrap();
    let data = cloud.dir.path().join("agent");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("agent.toml"),
        "[identity]\ndevice_id = \"old-laptop\"\n",
    )
    .unwrap();
    let token = device_token(&cloud, "F");
    let dir = data.to_string_lossy().into_owned();
    let enable = |token: &Path| {
        run_bin(
            "apiary-agent",
            &[
                "sync",
                "enable",
                "--data-dir",
                &dir,
                "--endpoint",
                &cloud.ingest.url(),
                "--token-file",
                &token.to_string_lossy(),
            ],
        )
    };
    let (code, out) = enable(&token);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("sync not enabled"), "{out}");
    assert!(
        out.contains("set identity.device_id = \"alice-laptop\""),
        "names the setting and the value: {out}"
    );
    // A user-bound token (no device) is accepted; then the file gets a device-bound token.
    let user_token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let (code, out) = enable(&user_token);
    assert_eq!(code, 0, "{out}");
    std::fs::copy(&token, &user_token).unwrap();
    let agent = Agent::start(&data, None).await.unwrap();
    let status = agent.status().await.unwrap();
    let reason = status["sync"]["paused_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("identity-mismatch"), "{status}");
    assert!(reason.contains("identity.device_id"), "{status}");
}

/// A device-bound token paused sync while events of a session first seen under another device
/// were pending. Setting `identity.device_id` to the token's device and restarting rebinds the session
/// (its binding never reached the ingest) and delivers every pending event exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_pending_under_the_wrong_device_are_delivered_once_after_the_fix() {
    let mut cloud = Cloud::start().await.unwrap();
    let data = cloud.dir.path().join("agent");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("agent.toml"),
        "[identity]\ndevice_id = \"old-laptop\"\n",
    )
    .unwrap();
    let token = device_token(&cloud, "F");
    // Enabled while the ingest is down: the agent cannot check the token and says so.
    cloud.ingest.kill();
    let dir = data.to_string_lossy().into_owned();
    let (code, out) = run_bin(
        "apiary-agent",
        &[
            "sync",
            "enable",
            "--data-dir",
            &dir,
            "--endpoint",
            &cloud.ingest.url(),
            "--token-file",
            &token.to_string_lossy(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("cannot reach the ingest"), "{out}");
    let env = [
        ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
        ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
        ("APIARY_PUSH_BACKOFF_CAP_MS", "200"),
    ];
    let mut agent = Agent::start_with(&data, None, &env).await.unwrap();
    let session = "session_rebind";
    let (code, v) = agent
        .post_events(tests::fixture::synthetic_turns(session, 1, 5))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
    cloud.ingest.restart().await.unwrap();
    let paused = tests::procs::wait_for(Duration::from_secs(30), || async {
        let s = agent.status().await.ok()?;
        s["sync"]["paused_reason"].as_str().map(str::to_string)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "sync never paused: {}",
            tests::agent::tail(&agent.output(), 30)
        )
    });
    // The agent asks the ingest who the token is once it answers: the pause names the setting to change.
    assert!(
        paused.starts_with("identity-mismatch") && paused.contains("identity.device_id"),
        "{paused}"
    );
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.delivered, c.rejected), (5, 0, 0), "{c:?}");
    // The fix: the token's device, then a restart.
    std::fs::write(
        data.join("agent.toml"),
        "[identity]\ndevice_id = \"alice-laptop\"\n",
    )
    .unwrap();
    agent.restart().await.unwrap();
    agent
        .wait_counters(Duration::from_secs(30), "5 delivered", |c| c.delivered == 5)
        .await
        .unwrap();
    cloud.assert_exactly(session, 5).await.unwrap();
    let s = cloud.read_api().session(session).await.unwrap();
    assert_eq!(s["device_id"], "alice-laptop", "{s}");
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.rejected, c.duplicate), (0, 0, 0), "{c:?}");
}
