//! The Windows agent, black box, under Wine: `apiary-agent.exe` (cross-compiled by
//! `scripts/windows.sh build`) started by the same harness as the Linux agent, with Windows paths
//! (`Z:\…`). What matters on a desktop: intake and ack after commit, a hard kill with nothing lost, the
//! Hive tailer on Windows paths (`\r\n` line ends, a log renamed while open), the settings page (sign-in,
//! the sharing toggle, Host and Origin checks), sharing with a device-bound token to a Linux ingest,
//! export bundles, the DACLs of the agent's private files, the default data directory under
//! `%LOCALAPPDATA%` and `apiary-agent stop`.
//!
//! Skipped (saying why) without `APIARY_WINDOWS_AGENT`; failing instead with `APIARY_REQUIRE_WINDOWS=1`
//! (CI: `scripts/windows.sh test`). What Wine cannot show (console close and logoff, a real Windows
//! user's ACL enforcement, Task Scheduler) is listed in docs/windows.md.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tests::agent::Agent;
use tests::fixture::synthetic_turns;
use tests::procs::{last_line, wait_for};
use tests::stack::{client, ingest_cli, write_private, Cloud};
use tests::wine::{windows_agent, windows_path, Launcher, Wine};

const FAST: &[(&str, &str)] = &[
    ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
    ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
    ("APIARY_PUSH_COALESCE_INTERVAL_MS", "0"),
];

/// Waits under Wine are longer: every process start also starts a Windows process.
const WAIT: Duration = Duration::from_secs(60);

async fn start(wine: &Wine, dir: &Path, home: Option<&Path>, env: &[(&str, &str)]) -> Agent {
    Agent::start_on(Launcher::Wine(wine.clone()), dir, home, env)
        .await
        .unwrap()
}

async fn post_turns(agent: &Agent, session: &str, seq0: u64, n: u64) -> Value {
    let (code, v) = agent
        .post_events(synthetic_turns(session, seq0, n))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
    v
}

fn settings_token(agent: &Agent) -> String {
    std::fs::read_to_string(agent.data_dir.join("settings.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// `token create --scope ingest --user USER --device DEVICE` for the cloud's tenant.
fn device_token(cloud: &Cloud, user: &str, device: &str) -> String {
    let out = ingest_cli(
        &cloud.db.url,
        &[
            "token",
            "create",
            "--tenant",
            &cloud.tenant.id,
            "--scope",
            "ingest",
            "--user",
            user,
            "--device",
            device,
        ],
    )
    .unwrap();
    last_line(&out)
}

/// Device and user of every row the ingest holds for `session`.
async fn stored_identity(cloud: &Cloud, session: &str) -> Vec<(String, String)> {
    let pool = cloud.db.pool().await.unwrap();
    sqlx::query_as::<_, (String, String)>(
        "SELECT DISTINCT coalesce(device_id, ''), coalesce(user_id, '') FROM events \
         WHERE session_id = $1",
    )
    .bind(session)
    .fetch_all(&pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_answers_after_the_commit_and_refuses_a_wrong_token() {
    let Some(wine) = windows_agent("intake_answers_after_the_commit_and_refuses_a_wrong_token")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut agent = start(&wine, &dir.path().join("agent"), None, &[]).await;
    let body = synthetic_turns("session_win_intake", 1, 25);
    let (code, v) = agent.post_events(body.clone()).await.unwrap();
    assert_eq!((code, v["accepted"].as_u64()), (200, Some(25)), "{v}");
    // The answer came after the commit: the counters already hold every event.
    let c = agent.counters().await.unwrap();
    assert_eq!((c.received, c.pending), (25, 25), "{c:?}");
    c.assert_balanced();
    let r = client()
        .post(format!("http://{}/v1/events", agent.addr))
        .bearer_auth("not-the-token")
        .body(synthetic_turns("session_win_intake", 100, 1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The same events again are recognised as duplicates, nothing counted twice.
    let (code, v) = agent.post_events(body).await.unwrap();
    assert_eq!((code, v["duplicates"].as_u64()), (200, Some(25)), "{v}");
    agent.restart().await.unwrap();
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.duplicate), (25, 25), "{c:?}");
    c.assert_balanced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_kill_right_after_the_answer_loses_nothing() {
    let Some(wine) = windows_agent("a_hard_kill_right_after_the_answer_loses_nothing") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut agent = start(&wine, &dir.path().join("agent"), None, &[]).await;
    let mut acked = 0;
    for round in 0..3u64 {
        let v = post_turns(&agent, "session_win_kill", 1 + round * 40, 40).await;
        acked += v["accepted"].as_u64().unwrap();
        // Ended hard (SIGKILL of the Wine process: no shutdown code runs), at once after the answer.
        agent.kill_hard();
        agent.restart().await.unwrap();
        let c = agent.counters().await.unwrap();
        assert_eq!(
            (c.received, c.pending),
            (acked, acked),
            "round {round}: {c:?}"
        );
        c.assert_balanced();
    }
    assert_eq!(acked, 120);
    let out = agent.cli(&["status", "--json"]).unwrap();
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["counters"]["pending"].as_u64(), Some(120), "{out}");
}

/// `lines` as Hive writes them on Windows: each ended by `\r\n`.
fn crlf(lines: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(lines).unwrap();
    text.lines()
        .flat_map(|l| format!("{l}\r\n").into_bytes())
        .collect()
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tailer_follows_a_windows_hive_home_with_crlf_lines_and_a_log_renamed_while_open() {
    let Some(wine) = windows_agent(
        "the_tailer_follows_a_windows_hive_home_with_crlf_lines_and_a_log_renamed_while_open",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // %USERPROFILE%\.hive, with a session below queens\default (backslashes in the agent's view).
    let home = dir.path().join("Users/ann/.hive");
    let session = "session_20261128_090000_win00001";
    let sdir = home.join("queens/default/sessions").join(session);
    std::fs::create_dir_all(&sdir).unwrap();
    let log = sdir.join("events.jsonl");
    append(&log, &crlf(synthetic_turns(session, 1, 10)));
    let agent = start(&wine, &dir.path().join("agent"), Some(&home), &[]).await;
    let c = agent
        .wait_counters(WAIT, "the first 10 lines tailed", |c| c.pending == 10)
        .await
        .unwrap();
    assert_eq!(c.received, 10, "{c:?}");
    // More lines, then the log renamed away while the agent holds it open and a new one started at the
    // same path: the agent drains the renamed file and follows the new one.
    append(&log, &crlf(synthetic_turns(session, 11, 5)));
    std::fs::rename(&log, sdir.join("events.1.jsonl.old")).unwrap();
    append(&log, &crlf(synthetic_turns(session, 16, 7)));
    let c = agent
        .wait_counters(WAIT, "22 lines from both files", |c| c.pending == 22)
        .await
        .unwrap();
    assert_eq!((c.received, c.rejected), (22, 0), "{c:?}");
    c.assert_balanced();
    // Another session's log appearing later, deeper, is discovered too.
    let later = home.join("queens/other/sessions/session_20261128_091500_win00002");
    std::fs::create_dir_all(&later).unwrap();
    append(
        &later.join("events.jsonl"),
        &crlf(synthetic_turns("session_20261128_091500_win00002", 1, 3)),
    );
    agent
        .wait_counters(WAIT, "the second session's 3 lines", |c| c.pending == 25)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_page_signs_in_turns_sharing_on_and_refuses_foreign_hosts_and_origins() {
    let Some(wine) = windows_agent(
        "the_settings_page_signs_in_turns_sharing_on_and_refuses_foreign_hosts_and_origins",
    ) else {
        return;
    };
    let cloud = Cloud::start().await.unwrap();
    let agent = start(&wine, &cloud.dir.path().join("agent"), None, FAST).await;
    post_turns(&agent, "session_win_settings", 1, 12).await;
    let status = agent.status().await.unwrap();
    assert_eq!(
        status["sync"]["enabled"], false,
        "consent is off by default: {status}"
    );
    let base = format!("http://{}", agent.addr);
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // DNS rebinding: a page asked for under another Host is refused.
    let r = http
        .get(format!("{base}/settings"))
        .header("Host", "evil.example:80")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // A form posted from another site's page is refused.
    let r = http
        .post(format!("{base}/settings/sign-in"))
        .header("Origin", "http://evil.example")
        .form(&[("token", settings_token(&agent))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = http
        .post(format!("{base}/settings/sign-in"))
        .header("Origin", &base)
        .form(&[("token", "wrong")])
        .send()
        .await
        .unwrap();
    assert_ne!(r.status(), 303, "a wrong settings token signs nobody in");
    let r = http
        .post(format!("{base}/settings/sign-in"))
        .header("Origin", &base)
        .form(&[("token", settings_token(&agent))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = http
        .get(format!("{base}/settings"))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    // The token file as a Windows user types it.
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let tf = windows_path(&token_file);
    let r = http
        .post(format!("{base}/settings/sync"))
        .header("Origin", &base)
        .header("Cookie", &cookie)
        .form(&[
            ("enabled", "true"),
            ("endpoint", cloud.ingest.url().as_str()),
            ("token_file", tf.as_str()),
            ("include_backlog", "on"),
        ])
        .send()
        .await
        .unwrap();
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with("/settings?done=on"), "{location}");
    let c = agent
        .wait_counters(WAIT, "the backlog delivered", |c| c.delivered == 12)
        .await
        .unwrap();
    c.assert_balanced();
    let status = agent.status().await.unwrap();
    assert_eq!(
        status["sync"]["token_file"].as_str(),
        Some(tf.as_str()),
        "{status}"
    );
    // Off again from the page: nothing more leaves.
    let r = http
        .post(format!("{base}/settings/sync"))
        .header("Origin", &base)
        .header("Cookie", &cookie)
        .form(&[("enabled", "false")])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_redirection(), "{}", r.status());
    let status = agent.status().await.unwrap();
    assert_eq!(status["sync"]["enabled"], false, "{status}");
    post_turns(&agent, "session_win_settings_off", 1, 3).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let c = agent.counters().await.unwrap();
    assert_eq!((c.delivered, c.pending), (12, 3), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_turned_on_from_the_windows_command_line_delivers_everything_as_the_tokens_device()
{
    let Some(wine) = windows_agent(
        "sharing_turned_on_from_the_windows_command_line_delivers_everything_as_the_tokens_device",
    ) else {
        return;
    };
    let cloud = Cloud::start().await.unwrap();
    let agent = start(&wine, &cloud.dir.path().join("agent"), None, FAST).await;
    let session = "session_win_sync";
    post_turns(&agent, session, 1, 40).await;
    let token = device_token(&cloud, "bob", "bob-desk");
    let token_file = cloud.dir.path().join("bob.token");
    write_private(&token_file, &format!("{token}\n")).unwrap();
    // `sync enable` from a second Windows process, while the agent runs.
    let out = agent
        .sync_enable(&cloud.ingest.url(), &token_file, true)
        .unwrap();
    assert!(out.contains("sync enabled"), "{out}");
    let c = agent
        .wait_counters(WAIT, "the backlog delivered", |c| c.delivered == 40)
        .await
        .unwrap();
    c.assert_balanced();
    assert_eq!(c.pending, 0, "{c:?}");
    post_turns(&agent, "session_win_sync_after", 1, 5).await;
    agent
        .wait_counters(WAIT, "new events delivered", |c| {
            c.delivered == 45 && c.pending == 0
        })
        .await
        .unwrap();
    for s in [session, "session_win_sync_after"] {
        assert_eq!(
            stored_identity(&cloud, s).await,
            vec![("bob-desk".to_string(), "bob".to_string())],
            "{s}: the ingest's rows carry the token's device and user"
        );
    }
    let status = agent.status().await.unwrap();
    assert_eq!(status["device_id"], "bob-desk", "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_bundle_written_to_a_windows_path_imports_once() {
    let Some(wine) = windows_agent("an_export_bundle_written_to_a_windows_path_imports_once")
    else {
        return;
    };
    let cloud = Cloud::start().await.unwrap();
    let env = [
        ("APIARY_MODE", "airgapped"),
        ("APIARY_IDENTITY_USER_ID", "alice"),
    ];
    let agent = start(&wine, &cloud.dir.path().join("agent"), None, &env).await;
    post_turns(&agent, "session_win_export", 1, 30).await;
    let bundle = cloud.dir.path().join("Exports/bundle.ndjson.gz");
    std::fs::create_dir_all(bundle.parent().unwrap()).unwrap();
    agent
        .cli(&["export", "--out", &windows_path(&bundle)])
        .unwrap();
    let c = agent.counters().await.unwrap();
    assert_eq!((c.exported, c.pending), (30, 0), "{c:?}");
    c.assert_balanced();
    let shown: Value =
        serde_json::from_str(&agent.cli(&["identity", "show", "--json"]).unwrap()).unwrap();
    let device = agent.status().await.unwrap()["device_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let key = shown["public_key"].as_str().unwrap().to_string();
    let b = bundle.clone();
    let summaries: Vec<Value> = tokio::task::spawn_blocking(move || {
        ingest_cli(
            &url,
            &[
                "device",
                "register",
                "--tenant",
                &tenant,
                "--user",
                "alice",
                "--device",
                &device,
                "--public-key",
                &key,
            ],
        )
        .unwrap();
        (0..2)
            .map(|_| {
                let out = ingest_cli(&url, &["import", &b.to_string_lossy(), "--tenant", &tenant])
                    .unwrap();
                serde_json::from_str(&last_line(&out)).unwrap()
            })
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(summaries[0]["accepted"].as_u64(), Some(30), "{summaries:?}");
    assert_eq!(summaries[1]["accepted"].as_u64(), Some(0), "{summaries:?}");
    assert_eq!(
        stored_identity(&cloud, "session_win_export").await,
        vec![(
            agent.status().await.unwrap()["device_id"]
                .as_str()
                .unwrap()
                .to_string(),
            "alice".to_string()
        )]
    );
}

/// The trustees (SIDs or SDDL aliases: `SY` SYSTEM, `WD` Everyone, `BU` Users) of an SDDL string's allow
/// entries.
fn allowed(sddl: &str) -> Vec<String> {
    let d = sddl.split_once("D:").map_or("", |(_, d)| d);
    d.split('(')
        .skip(1)
        .filter(|a| a.starts_with("A;"))
        .filter_map(|a| {
            a.trim_end_matches(')')
                .rsplit(';')
                .next()
                .map(str::to_string)
        })
        .collect()
}

/// Checks that `path` is owned by `me` and that its DACL, as Windows programs read it, lets nobody but
/// `me` and SYSTEM open it. (Wine 8 keeps no security descriptor of its own: it maps the DACL the agent
/// sets to the file's unix mode and builds the DACL it reports from that mode, always with SYSTEM. A file
/// left with the default mode 0644 reads back with an entry for Everyone, `WD`.)
fn assert_private(wine: &Wine, path: &Path, me: &str) {
    let sddl = wine.sddl(path).unwrap();
    assert!(
        sddl.starts_with(&format!("O:{me}D:")),
        "{}: owned by the user: {sddl}",
        path.display()
    );
    let who = allowed(&sddl);
    assert!(
        who.iter().any(|w| w == me) && who.iter().all(|w| w == me || w == "SY"),
        "{}: open to the user (and SYSTEM) only: {sddl}",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_secrets_and_outbox_are_private_to_the_user_by_their_dacl() {
    let Some(wine) =
        windows_agent("the_agents_secrets_and_outbox_are_private_to_the_user_by_their_dacl")
    else {
        return;
    };
    let cloud = Cloud::start().await.unwrap();
    let dir = cloud.dir.path().join("agent");
    let agent = start(&wine, &dir, None, &[]).await;
    post_turns(&agent, "session_win_dacl", 1, 5).await;
    let bundle = cloud.dir.path().join("bundle.ndjson.gz");
    // The Wine user's SID: the owner Wine reports for a directory this test made.
    let me = wine.user_sid(cloud.dir.path()).unwrap();
    let mut files: Vec<PathBuf> = [
        "agent.token",
        "settings.token",
        "device.key",
        "agent.addr",
        "outbox.db",
        "outbox.db-wal",
        "outbox.db-shm",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    files.push(dir.clone());
    for path in &files {
        assert_private(&wine, path, &me);
    }
    // What the same Wine reports for a file left to the default mode: the check above can fail.
    let loose = cloud.dir.path().join("loose.txt");
    std::fs::write(&loose, "x").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    assert!(
        allowed(&wine.sddl(&loose).unwrap()).contains(&"WD".to_string()),
        "Wine reports no Everyone entry for a 0644 file: this test could not see one"
    );
    // An export bundle written outside the data directory is private too.
    agent
        .cli(&["export", "--out", &windows_path(&bundle)])
        .unwrap();
    assert_private(&wine, &bundle, &me);

    // A token file that Everyone may read (what Wine reports for mode 0644) is refused, saying who can
    // open it and how to fix it; made private, it is taken.
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let refused = agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .expect_err("a token file others can read is refused");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("can be opened by Everyone") && refused.contains("icacls"),
        "{refused}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let out = agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    assert!(out.contains("sync enabled"), "{out}");
}

/// The Wine prefix's `%LOCALAPPDATA%` (`drive_c/users/<user>/AppData/Local`).
fn wine_local_app_data() -> PathBuf {
    let prefix = std::env::var_os("WINEPREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".wine"));
    let users = prefix.join("drive_c/users");
    let user = std::fs::read_dir(&users)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n != "Public") && p.join("AppData/Local").is_dir())
        .unwrap_or_else(|| panic!("no user profile under {}", users.display()));
    user.join("AppData/Local")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_data_dir_the_agent_uses_local_app_data_and_stop_ends_it_in_order() {
    let Some(wine) =
        windows_agent("without_a_data_dir_the_agent_uses_local_app_data_and_stop_ends_it_in_order")
    else {
        return;
    };
    let data = wine_local_app_data().join("Apiary");
    let _ = std::fs::remove_dir_all(&data);
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = wine.command();
    cmd.args([
        "run",
        "--listen",
        "127.0.0.1:0",
        "--otlp-listen",
        "127.0.0.1:0",
    ])
    .arg("--log-file")
    .arg(windows_path(&data.join("agent.log")))
    .env("RUST_LOG", "info")
    .env_remove("APIARY_DATA_DIR");
    let mut proc = tests::procs::Proc::spawn("apiary-agent.exe", cmd, log.path()).unwrap();
    let addr = wait_for(WAIT, || async {
        std::fs::read_to_string(data.join("agent.addr")).ok()
    })
    .await;
    assert!(
        addr.is_some(),
        "no agent.addr under %LOCALAPPDATA%\\Apiary ({}); log:\n{}",
        data.display(),
        proc.output()
    );
    // The log went to the file (as the logon task runs it), private like the rest.
    let logged = std::fs::read_to_string(data.join("agent.log")).unwrap();
    assert!(logged.contains("listening"), "{logged}");
    if wine.sddl.is_some() {
        let me = wine.user_sid(&wine_local_app_data()).unwrap();
        assert_private(&wine, &data.join("agent.log"), &me);
        assert_private(&wine, &data, &me);
    }
    // A second agent on the same data directory is refused.
    let second = wine
        .command()
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--otlp-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already running"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // `apiary-agent stop` (no --data-dir either): the agent ends in order and says so.
    let out = wine.command().arg("stop").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("stopped the agent"),
        "{said}"
    );
    let status = proc.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}; log:\n{}",
        proc.output()
    );
    // An ordered shutdown removes agent.addr (a hard kill leaves it).
    assert!(!data.join("agent.addr").exists(), "log:\n{}", proc.output());
    let out = wine.command().arg("stop").output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no agent is running"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&data);
}
