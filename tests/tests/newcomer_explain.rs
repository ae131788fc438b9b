//! A new user's `policy explain`, black box: it shows what the agent would send — the tailer's session
//! for a per-session log, the policy of `--config FILE` alone, and the refusal `run` gives a widening
//! policy.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::agent::Agent;
use tests::{bins, fixture};

/// Runs `apiary-agent ARGS` (killed after 20 s); (exit code, stdout, stderr).
fn agent(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(bins::path("apiary-agent"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("APIARY_DATA_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start apiary-agent");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fixture session's log as Hive writes it for queen-level events: without `execution_id`, so only the
/// directory names the session. Returns the number of lines.
fn write_session_log(home: &Path, session: &str) -> u64 {
    let src = fixture::root().join(format!(
        "day/queens/default/sessions/{session}/events.jsonl"
    ));
    let mut text = String::new();
    let mut lines = 0;
    for line in std::fs::read_to_string(src).unwrap().lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if v["stream_id"] == "queen" {
            v.as_object_mut().unwrap().remove("execution_id");
        }
        text += &format!("{v}\n");
        lines += 1;
    }
    let log = home.join(format!("queens/default/sessions/{session}/events.jsonl"));
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, text).unwrap();
    lines
}

/// `policy explain ~/.hive/queens/default/sessions/<id>/events.jsonl`: the queen's events that name no
/// session are kept with the directory's session, exactly as many as the tailer keeps of that file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_explain_keeps_what_the_tailer_keeps_of_a_per_session_log() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("hive");
    let session = "session_20261103_090214_6a5aaeae";
    let lines = write_session_log(&home, session);
    let log = home.join(format!("queens/default/sessions/{session}/events.jsonl"));
    let log_arg = log.to_string_lossy().into_owned();

    let (code, out, err) = agent(&["policy", "explain", &log_arg, "--json", "--zone", "UTC"]);
    assert_eq!(code, 0, "{out}{err}");
    let rows: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = &rows.last().unwrap()["summary"];
    assert!(
        summary["filtered"].get("no_session").is_none(),
        "explain drops events the tailer keeps: {summary}"
    );
    let kept: Vec<&Value> = rows.iter().filter(|r| r["outcome"] == "kept").collect();
    assert!(kept.len() > 10, "{summary}");
    assert!(kept.iter().all(|r| r["session_id"] == session), "{out}");
    let sum = |m: &Value| {
        m.as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum::<u64>()
    };
    let (kept, filtered) = (sum(&summary["kept"]), sum(&summary["filtered"]));

    // The tailer, on the same file, keeps (and filters) the same number of events.
    let agent = Agent::start(&dir.path().join("agent"), Some(&home))
        .await
        .unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(60), "the log tailed", |c| {
            c.received == lines
        })
        .await
        .unwrap();
    assert_eq!(
        (c.pending, c.filtered),
        (kept, filtered),
        "{c:?} vs {summary}"
    );
}

const NARROW: &str =
    "policy_version = 1\nname = \"narrow\"\n[kinds.\"llm.turn\"]\nmodel = \"name\"\n";
const WIDE: &str = "policy_version = 1\nname = \"wide\"\n[kinds.\"llm.turn\"]\nmodel = \"name\"\nprompt = \"name\"\n";
const TURN: &str = "{\"type\": \"llm_turn_complete\", \"stream_id\": \"queen\", \"execution_id\": \"session_a\", \"data\": {\"model\": \"m1\", \"input_tokens\": 3, \"prompt\": \"zzsecret\"}, \"timestamp\": \"2026-11-03T10:00:00\", \"seq\": 1}\n";

/// `policy explain FILE --config agent.toml` (no `--data-dir`) uses that config's `policy_file`; a policy
/// that widens the default is refused by `explain` with the very message `run` gives.
#[test]
fn policy_explain_reads_the_config_alone_and_refuses_what_run_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    std::fs::write(path("events.jsonl"), TURN).unwrap();
    std::fs::write(path("narrow.toml"), NARROW).unwrap();
    std::fs::write(path("wide.toml"), WIDE).unwrap();
    let config = |policy: &str| {
        let file = path(&format!("agent-{policy}.toml"));
        let text = format!("zone = \"UTC\"\npolicy_file = \"{}\"\n", path(policy));
        std::fs::write(&file, text).unwrap();
        file
    };

    let narrow = config("narrow.toml");
    let (code, out, err) = agent(&[
        "policy",
        "explain",
        &path("events.jsonl"),
        "--config",
        &narrow,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("kept as llm.turn"), "{out}");
    let dropped = out.lines().find(|l| l.trim_start().starts_with("dropped:"));
    assert!(
        dropped.is_some_and(|l| l.contains("input_tokens") && l.contains("prompt")),
        "the config's policy_file was not applied:\n{out}"
    );
    assert!(!out.contains("zzsecret"), "{out}");

    let wide = config("wide.toml");
    let (code, out, explain_err) = agent(&[
        "policy",
        "explain",
        &path("events.jsonl"),
        "--config",
        &wide,
    ]);
    assert_eq!(
        code, 1,
        "explain accepted a widening policy:\n{out}{explain_err}"
    );
    let data = path("data");
    let (code, out, run_err) = agent(&[
        "run",
        "--data-dir",
        &data,
        "--config",
        &wide,
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, 1, "{out}{run_err}");
    assert!(
        run_err.contains("policy widens the default for llm.turn.prompt"),
        "{run_err}"
    );
    let last = |s: &str| s.trim_end().lines().last().unwrap_or("").to_string();
    assert_eq!(last(&explain_err), last(&run_err));
}
