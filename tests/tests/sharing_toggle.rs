//! Turning sharing on while the agent runs — the order a person takes: the agent starts with the desktop
//! session (sharing off) and records events; later sharing is turned on with an ingest token bound to a
//! user and a device (`token create --user U --device D`). By each of the three ways (the settings page's
//! form, `PUT /v1/sync`, `apiary-agent sync enable` from another process) the running agent adopts the
//! token's identity with no restart: the backlog is delivered, nothing pauses, and the ingest's rows
//! carry the token's device and user. Then the advice the agent gives for a pause, followed verbatim,
//! lifts it with nothing else done: a token file readable by others (`chmod 600`), a refused token
//! (a valid token put in the token file), a token for another device (a token for this one), a stored
//! endpoint the rules refuse (the `sync enable` command doctor and `status` name). A token that
//! contradicts the configured identity is refused by the settings page's form with the words
//! `sync enable` uses, and sharing stays as it was.

use std::time::Duration;

use serde_json::Value;
use tests::agent::Agent;
use tests::fixture::synthetic_turns;
use tests::procs::{last_line, wait_for};
use tests::stack::{client, ingest_cli, write_private, Cloud};

const FAST: &[(&str, &str)] = &[
    ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
    ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
    ("APIARY_PUSH_COALESCE_INTERVAL_MS", "0"),
    ("APIARY_PUSH_MIN_INTERVAL_MS", "0"),
    ("APIARY_PUSH_MAX_INTERVAL_MS", "0"),
];

/// The three ways to turn sharing on.
#[derive(Debug, Clone, Copy)]
enum Way {
    SettingsPage,
    PutSync,
    Cli,
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

async fn post_turns(agent: &Agent, session: &str, n: u64) {
    let (s, v) = agent
        .post_events(synthetic_turns(session, 1, n))
        .await
        .unwrap();
    assert_eq!(s, 200, "{v}");
}

/// The settings token of a running agent (`DIR/settings.token`).
fn settings_token(agent: &Agent) -> String {
    std::fs::read_to_string(agent.data_dir.join("settings.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// Signs in to the settings page with the settings token, as a browser does, and posts its sharing form
/// (sharing on, with the backlog); the answer, redirects not followed.
async fn post_settings_form(
    agent: &Agent,
    endpoint: &str,
    token_file: &std::path::Path,
) -> reqwest::Response {
    let base = format!("http://{}", agent.addr);
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http
        .post(format!("{base}/settings/sign-in"))
        .header("Origin", &base)
        .form(&[("token", settings_token(agent))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let tf = token_file.display().to_string();
    http.post(format!("{base}/settings/sync"))
        .header("Origin", &base)
        .header("Cookie", &cookie)
        .form(&[
            ("enabled", "true"),
            ("endpoint", endpoint),
            ("token_file", tf.as_str()),
            ("include_backlog", "on"),
        ])
        .send()
        .await
        .unwrap()
}

/// The text of an HTML page: tags dropped, maud's entities decoded, whitespace collapsed.
fn page_text(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Turns sharing on (with the backlog) the way `way` does it, against the running `agent`.
async fn turn_on(way: Way, agent: &Agent, endpoint: &str, token_file: &std::path::Path) {
    let tf = token_file.display().to_string();
    let base = format!("http://{}", agent.addr);
    match way {
        Way::PutSync => {
            let body = serde_json::json!({"enabled": true, "endpoint": endpoint,
                "token_file": tf, "include_backlog": true});
            let r = client()
                .put(format!("{base}/v1/sync"))
                .bearer_auth(settings_token(agent))
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            assert_eq!(status, 200, "{}", r.text().await.unwrap());
        }
        Way::SettingsPage => {
            let r = post_settings_form(agent, endpoint, token_file).await;
            let location = r.headers()["location"].to_str().unwrap().to_string();
            assert!(location.starts_with("/settings?done=on"), "{location}");
        }
        Way::Cli => {
            let out = agent
                .cli(&[
                    "sync",
                    "enable",
                    "--endpoint",
                    endpoint,
                    "--token-file",
                    &tf,
                    "--include-backlog",
                ])
                .unwrap();
            assert!(out.contains("sync enabled"), "{out}");
        }
    }
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

async fn sharing_turned_on_while_running_adopts_the_tokens_device(way: Way) {
    let cloud = Cloud::start().await.unwrap();
    let dir = cloud.dir.path().join("agent");
    let agent = Agent::start_with(&dir, None, FAST).await.unwrap();
    let session = format!("session_toggle_{way:?}").to_lowercase();
    post_turns(&agent, &session, 40).await;
    let before = agent.status().await.unwrap();
    let generated = before["device_id"].as_str().unwrap().to_string();
    assert!(generated.starts_with("dev-"), "{before}");

    let token = device_token(&cloud, "bob", "bob-desk");
    let token_file = cloud.dir.path().join("bob.token");
    write_private(&token_file, &format!("{token}\n")).unwrap();
    turn_on(way, &agent, &cloud.ingest.url(), &token_file).await;

    let c = agent
        .wait_counters(Duration::from_secs(30), "the backlog delivered", |c| {
            c.delivered == 40
        })
        .await
        .unwrap();
    c.assert_balanced();
    let status = agent.status().await.unwrap();
    assert!(status["sync"]["paused_reason"].is_null(), "{status}");
    assert_eq!(status["sync"]["enabled"], true, "{status}");
    assert_eq!(
        stored_identity(&cloud, &session).await,
        vec![("bob-desk".to_string(), "bob".to_string())],
        "the ingest's rows carry the token's device and user"
    );
    // The running agent itself now is that device: its heartbeat and its status say so.
    assert_eq!(status["device_id"], "bob-desk", "{status}");
    let seen = wait_for(Duration::from_secs(20), || async {
        let d = cloud.read_api().devices().await.ok()?;
        let text = d.to_string();
        text.contains("bob-desk").then_some(text)
    })
    .await;
    assert!(seen.is_some(), "the device never showed in /v1/devices");
    // New sessions after the switch are bound to it too.
    post_turns(&agent, "session_after_switch", 5).await;
    agent
        .wait_counters(Duration::from_secs(30), "new events delivered", |c| {
            c.delivered == 45
        })
        .await
        .unwrap();
    assert_eq!(
        stored_identity(&cloud, "session_after_switch").await,
        vec![("bob-desk".to_string(), "bob".to_string())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_turned_on_in_the_settings_page_adopts_the_tokens_device_without_a_restart() {
    sharing_turned_on_while_running_adopts_the_tokens_device(Way::SettingsPage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_turned_on_with_put_v1_sync_adopts_the_tokens_device_without_a_restart() {
    sharing_turned_on_while_running_adopts_the_tokens_device(Way::PutSync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_turned_on_with_the_cli_adopts_the_tokens_device_without_a_restart() {
    sharing_turned_on_while_running_adopts_the_tokens_device(Way::Cli).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_device_that_contradicts_the_token_is_refused_when_sharing_is_turned_on() {
    let cloud = Cloud::start().await.unwrap();
    let dir = cloud.dir.path().join("agent");
    let agent = Agent::start_with(&dir, None, &[("APIARY_IDENTITY_DEVICE_ID", "old-laptop")])
        .await
        .unwrap();
    let token = device_token(&cloud, "bob", "bob-desk");
    let token_file = cloud.dir.path().join("bob.token");
    write_private(&token_file, &format!("{token}\n")).unwrap();
    let tf = token_file.display().to_string();
    let cli = agent.cli(&[
        "sync",
        "enable",
        "--endpoint",
        &cloud.ingest.url(),
        "--token-file",
        &tf,
    ]);
    let cli = format!("{:#}", cli.expect_err("a contradiction is refused"));
    assert!(
        cli.contains("identity.device_id is \"old-laptop\""),
        "{cli}"
    );
    let body =
        serde_json::json!({"enabled": true, "endpoint": cloud.ingest.url(), "token_file": tf});
    let r = client()
        .put(format!("http://{}/v1/sync", agent.addr))
        .bearer_auth(settings_token(&agent))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("identity.device_id is \"old-laptop\"") && message.contains("bob-desk"),
        "{v}"
    );
    let status = agent.status().await.unwrap();
    assert_eq!(status["sync"]["enabled"], false, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_page_refuses_a_token_that_contradicts_the_configured_device_as_sync_enable_does(
) {
    let cloud = Cloud::start().await.unwrap();
    let dir = cloud.dir.path().join("agent");
    let agent = Agent::start_with(
        &dir,
        None,
        &[FAST, &[("APIARY_IDENTITY_DEVICE_ID", "old-laptop")]].concat(),
    )
    .await
    .unwrap();
    post_turns(&agent, "session_page_refused", 5).await;
    let token = device_token(&cloud, "bob", "bob-desk");
    let token_file = cloud.dir.path().join("bob.token");
    write_private(&token_file, &format!("{token}\n")).unwrap();
    // What `sync enable` says to the same contradiction.
    let tf = token_file.display().to_string();
    let cli = agent.cli(&[
        "sync",
        "enable",
        "--endpoint",
        &cloud.ingest.url(),
        "--token-file",
        &tf,
    ]);
    let cli = format!("{:#}", cli.expect_err("a contradiction is refused"));
    let at = cli
        .find("sync not enabled: ")
        .unwrap_or_else(|| panic!("{cli}"));
    let message = cli[at..].lines().next().unwrap().trim().to_string();
    assert!(
        message.contains("identity.device_id is \"old-laptop\""),
        "{message}"
    );

    let r = post_settings_form(&agent, &cloud.ingest.url(), &token_file).await;
    assert_eq!(r.status(), 409, "the form is refused, the page shown again");
    let page = page_text(&r.text().await.unwrap());
    assert!(
        page.contains(&message),
        "the page does not say what `sync enable` says ({message:?}):\n{page}"
    );
    // Sharing is as it was: off, not paused, this device's identity kept, nothing sent.
    let status = agent.status().await.unwrap();
    assert_eq!(status["sync"]["enabled"], false, "{status}");
    assert!(status["sync"]["paused_reason"].is_null(), "{status}");
    assert_eq!(status["device_id"], "old-laptop", "{status}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(agent.counters().await.unwrap().delivered, 0);
    assert!(stored_identity(&cloud, "session_page_refused")
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_the_rules_refuse_pauses_sync_and_its_advice_followed_verbatim_resumes_it() {
    let cloud = Cloud::start().await.unwrap();
    let mut agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    post_turns(&agent, "session_endpoint", 5).await;
    agent
        .wait_counters(Duration::from_secs(30), "first events delivered", |c| {
            c.delivered == 5
        })
        .await
        .unwrap();
    // The outbox as an older agent left it: the ingest named `localhost`, which the endpoint rule
    // refuses for plain http:// (only a loopback address is allowed).
    agent.terminate(Duration::from_secs(20));
    let port = cloud.ingest.url().rsplit(':').next().unwrap().to_string();
    let stale = format!("http://localhost:{port}");
    let db = rusqlite::Connection::open(agent.data_dir.join("outbox.db")).unwrap();
    let changed = db
        .execute("UPDATE sync_state SET endpoint = ?1 WHERE id = 1", [&stale])
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    agent.restart().await.unwrap();
    post_turns(&agent, "session_endpoint_2", 5).await;
    let reason = wait_for(Duration::from_secs(20), || async {
        let s = agent.status().await.ok()?;
        s["sync"]["paused_reason"].as_str().map(str::to_string)
    })
    .await
    .expect("sync paused over the stored endpoint");
    assert_eq!(reason, "invalid-endpoint");
    // The advice, as doctor gives it: the command in the fix line under the pause.
    let doctor = doctor_output(&agent);
    let mut lines = doctor.lines();
    lines
        .find(|l| l.contains("sync is paused: invalid-endpoint"))
        .unwrap_or_else(|| panic!("{doctor}"));
    let fix = lines.next().unwrap_or_else(|| panic!("{doctor}"));
    let command = fix
        .split('`')
        .nth(1)
        .filter(|c| c.starts_with("apiary-agent "))
        .unwrap_or_else(|| panic!("the fix names no command: {fix}"));
    // `status` gives the same advice.
    let status_text = agent.cli(&["status"]).unwrap();
    assert!(status_text.contains(command), "{status_text}");
    // Followed verbatim, with this ingest and this token file for its placeholders; nothing else.
    let tf = token_file.display().to_string();
    let url = cloud.ingest.url();
    let args: Vec<&str> = command
        .split_whitespace()
        .skip(1)
        .map(|a| match a {
            "https://INGEST" => url.as_str(),
            "FILE" => tf.as_str(),
            other => other,
        })
        .collect();
    let out = agent.cli(&args).unwrap();
    assert!(out.contains("sync enabled"), "{out}");
    let c = agent
        .wait_counters(Duration::from_secs(30), "delivery resumed", |c| {
            c.delivered == 10
        })
        .await
        .unwrap();
    c.assert_balanced();
    let s = agent.status().await.unwrap();
    assert!(s["sync"]["paused_reason"].is_null(), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_readable_by_others_pauses_sync_and_chmod_600_alone_resumes_it() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let out = agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    assert!(out.contains("sync enabled"), "{out}");
    post_turns(&agent, "session_chmod", 10).await;
    agent
        .wait_counters(Duration::from_secs(30), "first events delivered", |c| {
            c.delivered == 10
        })
        .await
        .unwrap();
    set_mode(&token_file, 0o644);
    post_turns(&agent, "session_chmod_2", 10).await;
    let reason = wait_for(Duration::from_secs(20), || async {
        let s = agent.status().await.ok()?;
        s["sync"]["paused_reason"].as_str().map(str::to_string)
    })
    .await
    .expect("sync paused over a token file readable by others");
    // The advice names chmod; doctor says the same.
    let doctor = doctor_output(&agent);
    assert!(doctor.contains("chmod 600"), "{doctor}");
    assert!(reason.contains("re-authenticate"), "{reason}");
    set_mode(&token_file, 0o600);
    let c = agent
        .wait_counters(
            Duration::from_secs(30),
            "delivery resumed after chmod",
            |c| c.delivered == 20,
        )
        .await
        .unwrap();
    c.assert_balanced();
    let s = agent.status().await.unwrap();
    assert!(s["sync"]["paused_reason"].is_null(), "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_pauses_sync_and_a_valid_token_in_the_token_file_alone_resumes_it() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST)
        .await
        .unwrap();
    let token_file = cloud.dir.path().join("ingest.token");
    write_private(&token_file, "apiary_not_a_real_token\n").unwrap();
    let tf = token_file.display().to_string();
    let url = cloud.ingest.url();
    // Without --force, a token the ingest refuses is not stored: exit status non-zero, with the fix.
    let refused = agent.cli(&["sync", "enable", "--endpoint", &url, "--token-file", &tf]);
    let refused = format!("{:#}", refused.expect_err("a refused token is not stored"));
    assert!(
        refused.contains("sync not enabled") && refused.contains("--force"),
        "{refused}"
    );
    assert_eq!(agent.status().await.unwrap()["sync"]["enabled"], false);
    // Stored anyway (as when a token is revoked later): sync pauses with the advice.
    let out = agent
        .cli(&[
            "sync",
            "enable",
            "--endpoint",
            &url,
            "--token-file",
            &tf,
            "--force",
        ])
        .unwrap();
    assert!(out.contains("sync enabled"), "{out}");
    post_turns(&agent, "session_refused", 10).await;
    let reason = wait_for(Duration::from_secs(20), || async {
        let s = agent.status().await.ok()?;
        s["sync"]["paused_reason"].as_str().map(str::to_string)
    })
    .await
    .expect("sync paused over a refused token");
    assert!(reason.contains("re-authenticate"), "{reason}");
    let doctor = doctor_output(&agent);
    assert!(
        doctor.contains("put a valid ingest token in the token file"),
        "{doctor}"
    );
    // Paused, nothing is retried: doctor must not say it is.
    assert!(!doctor.contains("retried"), "{doctor}");
    // The fix the advice names, and nothing else.
    write_private(&token_file, &format!("{}\n", cloud.tenant.ingest_token)).unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(30), "delivery resumed", |c| {
            c.delivered == 10
        })
        .await
        .unwrap();
    c.assert_balanced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_without_a_scheme_is_refused_with_the_fix() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start(&cloud.dir.path().join("agent"), None)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let bare = cloud.ingest.url().trim_start_matches("http://").to_string();
    let e = agent
        .sync_enable(&bare, &token_file, false)
        .expect_err("no scheme");
    let e = format!("{e:#}");
    assert!(e.contains("add https://"), "{e}");
    assert!(!e.contains("relative URL without a base"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_knows_the_hive_home_the_running_agent_follows() {
    let cloud = Cloud::start().await.unwrap();
    let home = cloud.dir.path().join("hive");
    std::fs::create_dir_all(&home).unwrap();
    let agent = Agent::start(&cloud.dir.path().join("agent"), Some(&home))
        .await
        .unwrap();
    let doctor = doctor_output(&agent);
    assert!(!doctor.contains("no Hive home is followed"), "{doctor}");
    assert!(doctor.contains(&home.display().to_string()), "{doctor}");
}

fn set_mode(path: &std::path::Path, mode: u32) {
    #[cfg(unix)]
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    #[cfg(not(unix))]
    let _ = (path, mode);
}

/// `apiary-agent doctor` (its exit status may be 1: something is wrong), stdout and stderr.
fn doctor_output(agent: &Agent) -> String {
    let out = std::process::Command::new(tests::bins::path("apiary-agent"))
        .args(["doctor", "--data-dir"])
        .arg(&agent.data_dir)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_another_device_pauses_sync_and_a_token_for_this_device_alone_resumes_it() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start_with(
        &cloud.dir.path().join("agent"),
        None,
        &[FAST, &[("APIARY_IDENTITY_DEVICE_ID", "old-laptop")]].concat(),
    )
    .await
    .unwrap();
    // A user-bound token (no device): agrees with the configured device.
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    post_turns(&agent, "session_swap", 5).await;
    agent
        .wait_counters(Duration::from_secs(30), "first events delivered", |c| {
            c.delivered == 5
        })
        .await
        .unwrap();
    // The token file now holds a token bound to another device.
    let other = device_token(&cloud, "alice", "bob-desk");
    write_private(&token_file, &format!("{other}\n")).unwrap();
    post_turns(&agent, "session_swap_2", 5).await;
    // A push may meet the new token first (a 403 pauses with `re-authenticate`); the loop's own
    // question then names the setting that contradicts the token.
    let last = std::sync::Mutex::new(None);
    let reason = wait_for(Duration::from_secs(20), || async {
        let s = agent.status().await.ok()?;
        let reason = s["sync"]["paused_reason"].as_str().map(str::to_string);
        last.lock().unwrap().clone_from(&reason);
        reason.filter(|r| r.starts_with("identity-mismatch"))
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "sync paused naming the setting that contradicts the token; last reason {:?}",
            last.lock().unwrap()
        )
    });
    assert!(
        reason.contains("identity.device_id is \"old-laptop\""),
        "{reason}"
    );
    let doctor = doctor_output(&agent);
    assert!(
        doctor.contains("put a token for this user and device in the token file"),
        "{doctor}"
    );
    // The fix the advice names: a token for this device, in the token file.
    let mine = device_token(&cloud, "alice", "old-laptop");
    write_private(&token_file, &format!("{mine}\n")).unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(30), "delivery resumed", |c| {
            c.delivered == 10
        })
        .await
        .unwrap();
    c.assert_balanced();
    assert_eq!(
        stored_identity(&cloud, "session_swap_2").await,
        vec![("old-laptop".to_string(), "alice".to_string())]
    );
}
