use super::*;
use serde_json::json;

fn write_state(home: &Path, rel: &str, state: serde_json::Value) {
    let path = home.join(rel).join("state.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(&state).unwrap()).unwrap();
}

fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[cfg(target_os = "linux")]
#[test]
fn active_states_are_checked_by_their_pid_and_ended_ones_say_nothing() {
    let home = tempfile::tempdir().unwrap();
    let me = std::process::id();
    write_state(
        home.path(),
        "agents/a/sessions/session_live",
        json!({"session_id": "session_live", "status": "active", "pid": me}),
    );
    write_state(
        home.path(),
        "agents/a/sessions/session_dead",
        json!({"status": "active", "pid": dead_pid()}),
    );
    write_state(
        home.path(),
        "agents/a/sessions/session_done",
        json!({"status": "completed", "pid": 1}),
    );
    write_state(
        home.path(),
        "agents/a/sessions/session_nopid",
        json!({"status": "active"}),
    );
    write_state(
        home.path(),
        "agents/a/sessions/session_stale",
        json!({"status": "cancelled", "pid": me,
        "result": {"error": "Stale session: runtime restarted"}}),
    );
    write_state(
        home.path(),
        "agents/a/sessions/session_cancel",
        json!({"status": "cancelled", "pid": me,
        "result": {"error": "Execution cancelled"}}),
    );
    write_state(
        home.path(),
        "agents/a/not_sessions/session_x",
        json!({"status": "active", "pid": me}),
    );
    let mut found = scan(home.path(), SystemTime::now()).unwrap();
    found.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    let got: Vec<(&str, bool, &str)> = found
        .iter()
        .map(|f| (f.session_id.as_str(), f.alive, f.evidence))
        .collect();
    assert_eq!(
        got,
        vec![
            ("session_dead", false, "pid_exited"),
            ("session_live", true, "pid_running"),
            ("session_stale", false, "hive_marked_stale"),
        ]
    );
}

#[test]
fn a_gone_session_keeps_its_first_gone_time_and_the_report_puts_gone_ones_first() {
    let watch = RuntimeWatch::new();
    let t0: DateTime<Utc> = "2026-11-03T10:00:00Z".parse().unwrap();
    let found = |id: &str, alive: bool, age: u64| Found {
        session_id: id.into(),
        alive,
        evidence: if alive { "pid_running" } else { "pid_exited" },
        modified: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 - age),
    };
    watch.update(vec![found("a", true, 0), found("b", false, 5)], t0);
    let later = t0 + chrono::Duration::seconds(30);
    watch.update(
        vec![
            found("a", true, 0),
            found("b", false, 5),
            found("c", false, 1),
        ],
        later,
    );
    assert_eq!(watch.gone_at("b"), Some(t0));
    assert_eq!(watch.gone_at("c"), Some(later));
    assert_eq!(watch.gone_at("a"), None);
    let ids: Vec<String> = watch.report().into_iter().map(|r| r.session_id).collect();
    assert_eq!(ids, vec!["c", "b", "a"]);
    // Alive again (a resumed runtime rewrote its state): no longer gone.
    watch.update(vec![found("b", true, 0)], later);
    assert_eq!(watch.gone_at("b"), None);
    let many: Vec<Found> = (0..100).map(|i| found(&format!("s{i}"), true, i)).collect();
    watch.update(many, later);
    assert_eq!(watch.report().len(), MAX_RUNTIMES);
}
