//! Security of the agent, black box: the real `apiary-agent` attacked the way a
//! local process or a producer holding the intake token could.
//!
//! - memory amplification on `POST /v1/events`: a body of a million tiny values, bodies of garbage
//!   (bounded work, bounded dead letters, measured peak RSS);
//! - the settings API: only the settings token changes consent; endpoints and token files are checked
//!   and refused with the reason, by the API and by the CLI; a refused endpoint leaves nothing claimed;
//! - files: private whatever the umask, temporary files never follow what is planted and are removed on
//!   failure;
//! - every error body is JSON;
//! - a seeded run of hostile bodies against the real binary: never a 5xx, always JSON, counters that
//!   add up, dead letters bounded.

use std::path::Path;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::fixture;
use tests::hostile::{self, mode, names_in, peak_rss_kib, raw};
use tests::stack::{write_private, Cloud};

/// Per-request dead letters the agent writes at most (one more counts the rest).
const MAX_DEAD_LETTERS: u64 = 100;

fn json_error(status: u16, v: &Value) -> String {
    format!("{status} {v}")
}

async fn start(dir: &Path) -> Agent {
    Agent::start(&dir.join("agent"), None).await.unwrap()
}

async fn dead_letters(agent: &Agent) -> u64 {
    agent.status().await.unwrap()["dead_letters"]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_tiny_values_are_refused_without_amplifying_memory() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    let before = peak_rss_kib(agent.pid()).unwrap();
    // 2 MiB of `[0,0,…]`: a million events.
    let mut body = b"[0".to_vec();
    body.extend(",0".repeat(1024 * 1024 - 1).as_bytes());
    body.push(b']');
    let r = raw(&agent, "POST", "/v1/events", &agent.token, body)
        .await
        .unwrap();
    r.assert_json_error(413, "a million events");
    assert_eq!(r.body["error"]["code"], "too_many_events", "{r:?}");
    let after = peak_rss_kib(agent.pid()).unwrap();
    let c = agent.counters().await.unwrap();
    assert_eq!(c.received, 0, "nothing of a refused body is received");
    assert_eq!(dead_letters(&agent).await, 0);
    eprintln!("peak RSS {before} KiB before, {after} KiB after the 2 MiB [0,0,…] body");
    assert!(
        after - before < 24 * 1024,
        "a 2 MiB body raised the agent's peak RSS by {} KiB (from {before} to {after})",
        after - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_events_cost_a_bounded_number_of_dead_letters_and_good_ones_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    let mut body = fixture::synthetic_turns("session_garbage_a", 1, 3);
    body.extend("0\n".repeat(5_000).as_bytes());
    body.extend(fixture::synthetic_turns("session_garbage_a", 4, 2));
    let (status, v) = agent.post_events(body).await.unwrap();
    assert_eq!(status, 400, "{}", json_error(status, &v));
    assert_eq!(
        (v["accepted"].as_u64(), v["rejected"].as_u64()),
        (Some(5), Some(5_000)),
        "{v}"
    );
    assert_eq!(
        v["errors"].as_array().unwrap().len() as u64,
        MAX_DEAD_LETTERS,
        "{v}"
    );
    assert_eq!(v["errors"][0]["line"], 4, "{v}");
    assert_eq!(v["errors_not_listed"], 5_000 - MAX_DEAD_LETTERS, "{v}");
    let c = agent.counters().await.unwrap();
    assert_eq!((c.received, c.rejected, c.pending), (5_005, 5_000, 5));
    c.assert_balanced();
    let dl = dead_letters(&agent).await;
    assert!(
        dl <= MAX_DEAD_LETTERS + 1,
        "5,000 garbage lines wrote {dl} dead letters"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_size_body_of_hostile_events_costs_a_few_times_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    let before = peak_rss_kib(agent.pid()).unwrap();
    // Just under the 16 MiB body limit, under 100,000 events, as one array: deltas full of tiny values
    // (each parses into dozens of JSON values, is filtered, and must not stay in memory).
    let zeros = vec!["0"; 80].join(",");
    let event = format!("{{\"type\": \"llm_text_delta\", \"data\": {{\"x\": [{zeros}]}}}}");
    let n = ((16 * 1024 * 1024 - 2) / (event.len() + 1)).min(99_999);
    let body = format!("[{}]", vec![event; n].join(",")).into_bytes();
    let size = body.len() as u64;
    let (status, v) = agent.post_events(body).await.unwrap();
    assert_eq!(status, 200, "{}", json_error(status, &v));
    assert_eq!(v["filtered"].as_u64(), Some(n as u64), "{v}");
    let after = peak_rss_kib(agent.pid()).unwrap();
    eprintln!(
        "peak RSS {before} KiB before, {after} KiB after a {size}-byte array of {n} filtered events"
    );
    assert!(
        (after - before) * 1024 < 4 * size,
        "a {size}-byte body raised the peak RSS by {} KiB",
        after - before
    );
    // A full-size array of valid turns: each kept event is held, redacted, until the commit.
    let turns = fixture::synthetic_turns("session_full_size", 1, 60_000);
    let lines: Vec<&[u8]> = turns
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let n = lines
        .iter()
        .scan(2usize, |size, l| {
            *size += l.len() + 1;
            Some(*size)
        })
        .take_while(|size| *size < 16 * 1024 * 1024)
        .count();
    let body = [b"[".as_slice(), &lines[..n].join(b",".as_slice()), b"]"].concat();
    let (status, v) = agent.post_events(body).await.unwrap();
    assert_eq!(status, 200, "{}", json_error(status, &v));
    assert_eq!(v["accepted"].as_u64(), Some(n as u64), "{v}");
    let peak = peak_rss_kib(agent.pid()).unwrap();
    eprintln!("peak RSS {peak} KiB after a 16 MiB array of {n} valid turns");
    assert!(
        (peak - before) * 1024 < 6 * 16 * 1024 * 1024,
        "16 MiB of valid events raised the peak RSS by {} KiB",
        peak - before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_settings_token_changes_consent() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    let token_file = dir.path().join("ingest.token");
    write_private(&token_file, "tok\n").unwrap();
    let on = json!({"enabled": true, "endpoint": "https://ingest.example",
        "token_file": token_file})
    .to_string();
    let r = raw(&agent, "PUT", "/v1/sync", &agent.token, on.clone())
        .await
        .unwrap();
    r.assert_json_error(403, "the intake token on PUT /v1/sync");
    assert!(r.message().contains("settings.token"), "{r:?}");
    let status = agent.status().await.unwrap();
    assert_eq!(status["sync"]["enabled"], false, "{status}");
    let settings = hostile::settings_token(&agent.data_dir).unwrap();
    assert_eq!(mode(&agent.data_dir.join("settings.token")), 0o600);
    let r = raw(&agent, "PUT", "/v1/sync", &settings, on).await.unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // The settings token reads like the intake token.
    let r = raw(&agent, "GET", "/v1/status", &settings, "")
        .await
        .unwrap();
    assert_eq!((r.status, &r.body["sync"]["enabled"]), (200, &json!(true)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_targets_are_checked_and_refused_with_the_reason() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    // (Read when needed: an agent without a settings token fails on the CLI checks before.)
    let settings = hostile::settings_token(&agent.data_dir).unwrap_or_default();
    let good = dir.path().join("good.token");
    write_private(&good, "tok\n").unwrap();
    let open = dir.path().join("open.token");
    std::fs::write(&open, "tok\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let foreign = dir.path().join("foreign.token");
    write_private(&foreign, "tok\n").unwrap();
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    let cases: Vec<(&str, &Path, &str)> = vec![
        ("http://198.51.100.7:8080", &good, "https"),
        ("ftp://ingest.example", &good, "scheme ftp"),
        ("https://user:pw@ingest.example", &good, "credentials"),
        ("https://ingest.example", &open, "chmod 600"),
        ("https://ingest.example", dir.path(), "not a regular file"),
        ("https://ingest.example", &foreign, "owned by uid 65534"),
    ];
    for (endpoint, token_file, why) in cases {
        let tf = token_file.to_string_lossy();
        let cli = agent.cli(&[
            "sync",
            "enable",
            "--endpoint",
            endpoint,
            "--token-file",
            &tf,
        ]);
        let e = cli
            .expect_err(&format!("sync enable {endpoint} {tf} was accepted"))
            .to_string();
        assert!(e.contains(why), "CLI {endpoint} {tf}: {e}");
        let body = json!({"enabled": true, "endpoint": endpoint, "token_file": token_file});
        let r = raw(&agent, "PUT", "/v1/sync", &settings, body.to_string())
            .await
            .unwrap();
        r.assert_json_error(400, endpoint);
        assert!(
            r.message().contains(why),
            "{endpoint} {token_file:?}: {r:?}"
        );
    }
    let status = agent.status().await.unwrap();
    assert_eq!(
        status["sync"]["enabled"], false,
        "nothing was enabled: {status}"
    );
    // Loopback http is fine (local testing), and so is https.
    for endpoint in ["http://127.0.0.1:9", "https://ingest.example"] {
        let body = json!({"enabled": true, "endpoint": endpoint, "token_file": good});
        let r = raw(&agent, "PUT", "/v1/sync", &settings, body.to_string())
            .await
            .unwrap();
        assert_eq!(r.status, 200, "{endpoint}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_endpoint_leaves_no_rows_claimed() {
    let cloud = Cloud::start().await.unwrap();
    let fast = [("APIARY_PUSH_POLL_INTERVAL_MS", "50")];
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &fast)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let (status, v) = agent
        .post_events(fixture::synthetic_turns("session_refused_endpoint", 1, 50))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    let refused = agent.sync_enable("ftp://127.0.0.1/", &token_file, true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, true)
        .unwrap();
    // A claim left behind would hold its rows for the 5-minute lease.
    let c = agent
        .wait_counters(Duration::from_secs(30), "all 50 delivered", |c| {
            c.delivered == 50
        })
        .await
        .unwrap();
    c.assert_balanced();
    let e = refused
        .expect_err("an ftp endpoint was accepted")
        .to_string();
    assert!(e.contains("scheme ftp is not https"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_files_are_private_whatever_the_umask() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("fresh/agent");
    let log = root.path().join("agent.log");
    let mut proc = hostile::run_under_umask(&data, 0o000, &log).await.unwrap();
    let addr = std::fs::read_to_string(data.join("agent.addr")).unwrap();
    let token = std::fs::read_to_string(data.join("agent.token")).unwrap();
    let r = tests::stack::client()
        .post(format!("http://{}/v1/events", addr.trim()))
        .bearer_auth(token.trim())
        .body(fixture::synthetic_turns("session_private", 1, 5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(mode(&data), 0o700, "the data directory");
    for f in [
        "outbox.db",
        "outbox.db-wal",
        "outbox.db-shm",
        "agent.addr",
        "agent.token",
        "settings.token",
        "device.key",
    ] {
        assert_eq!(mode(&data.join(f)), 0o600, "{f}: {:?}", names_in(&data));
    }
    proc.terminate(Duration::from_secs(20));
    let bundle = root.path().join("bundle.ndjson.gz");
    hostile::cli_under_umask(&data, 0o000, &["export", "--out", bundle.to_str().unwrap()]).unwrap();
    assert_eq!(mode(&bundle), 0o600, "the export bundle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_symlinks_are_never_followed_and_failed_writes_leave_nothing() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("agent");
    std::fs::create_dir_all(&data).unwrap();
    let victim = root.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    // The fixed temporary names the agent once used.
    std::os::unix::fs::symlink(&victim, data.join(".agent.addr.tmp")).unwrap();
    std::os::unix::fs::symlink(&victim, root.path().join("bundle.tmp")).unwrap();
    let agent = Agent::start_with(&data, None, &[("APIARY_MODE", "airgapped")])
        .await
        .unwrap();
    agent
        .post_events(fixture::synthetic_turns("session_symlink", 1, 3))
        .await
        .unwrap();
    let bundle = root.path().join("bundle.gz");
    agent
        .cli(&["export", "--out", bundle.to_str().unwrap()])
        .unwrap();
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious",
        "a planted symlink was followed and its target overwritten"
    );
    assert!(bundle.exists());
    // An export whose rename fails (the target is a non-empty directory) leaves no temporary file.
    let blocked = root.path().join("out/bundle.gz");
    std::fs::create_dir_all(blocked.join("x")).unwrap();
    let e = agent
        .cli(&["export", "--out", blocked.to_str().unwrap()])
        .unwrap_err();
    assert!(e.to_string().contains("bundle.gz"), "{e}");
    assert_eq!(names_in(&root.path().join("out")), vec!["bundle.gz"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_error_is_json() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    let t = agent.token.clone();
    // (Read when needed: an agent without a settings token fails on the cases before.)
    let settings = hostile::settings_token(&agent.data_dir).unwrap_or_default();
    let big = vec![b'x'; 3 * 1024 * 1024];
    let cases: Vec<(&str, &str, &str, Vec<u8>, u16)> = vec![
        ("GET", "/nope", t.as_str(), vec![], 404),
        ("GET", "/nope", "", vec![], 401),
        ("DELETE", "/v1/status", t.as_str(), vec![], 405),
        ("GET", "/v1/events", t.as_str(), vec![], 405),
        ("POST", "/v1/sessions", t.as_str(), big.clone(), 413),
        ("PUT", "/v1/sync", settings.as_str(), big, 413),
        ("POST", "/v1/sessions", t.as_str(), b"{".to_vec(), 400),
        (
            "POST",
            "/v1/events?session=a&session=b",
            t.as_str(),
            b"{}".to_vec(),
            400,
        ),
        (
            "POST",
            "/v1/events?session=%FF",
            t.as_str(),
            b"{}".to_vec(),
            400,
        ),
        ("GET", "/v1/usage/sessions/%FF%FE", t.as_str(), vec![], 400),
    ];
    for (method, path, token, body, status) in cases {
        let r = raw(&agent, method, path, token, body).await.unwrap();
        r.assert_json_error(status, &format!("{method} {path}"));
    }
    // Over the body limit: the agent answers from the Content-Length alone and closes, so a client still
    // writing 17 MiB can meet a broken pipe before it reads the answer. Announce the size and send none.
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {t}\r\nContent-Length: {}\r\n\r\n",
        agent.addr,
        17 * 1024 * 1024
    );
    let answer =
        tests::hostile::raw_http(agent.addr, head.as_bytes(), Duration::from_secs(10)).await;
    let (status_line, rest) = answer.split_once("\r\n").unwrap_or((&answer, ""));
    assert!(status_line.contains(" 413 "), "{answer}");
    assert!(
        rest.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{answer}"
    );
    let body = rest.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    assert!(
        v.pointer("/error/code").is_some(),
        "413 body is not the JSON error: {answer}"
    );
}

/// Hostile bodies from a seeded generator (the seed is printed; `APIARY_HOSTILE_SEED` replays one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_hostile_bodies_never_break_the_agent() {
    let seed = std::env::var("APIARY_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("APIARY_HOSTILE_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let agent = start(dir.path()).await;
    let mut good_sent = 0u64;
    let mut requests = 0u64;
    for round in 0..40u64 {
        let (body, good) = hostile_body(&mut rng, round);
        let (status, v) = agent.post_events(body).await.unwrap();
        requests += 1;
        assert!(
            [200, 400, 413].contains(&status),
            "round {round} (seed {seed}): {}",
            json_error(status, &v)
        );
        assert!(
            v.get("error").is_some() || status == 200,
            "round {round}: {v}"
        );
        if status != 413 {
            assert_eq!(
                v["accepted"].as_u64(),
                Some(good),
                "round {round} (seed {seed}): {v}"
            );
            good_sent += good;
        }
        let listed = v["errors"].as_array().map_or(0, Vec::len) as u64;
        assert!(
            listed <= MAX_DEAD_LETTERS,
            "round {round}: {listed} errors listed"
        );
    }
    let c = agent.counters().await.unwrap();
    c.assert_balanced();
    assert_eq!(c.pending, good_sent, "every good event kept");
    let dl = dead_letters(&agent).await;
    assert!(
        dl <= requests * (MAX_DEAD_LETTERS + 1),
        "{dl} dead letters for {requests} requests"
    );
}

/// One hostile body and how many good (unique) events it holds.
fn hostile_body(rng: &mut rand::rngs::StdRng, round: u64) -> (Vec<u8>, u64) {
    let session = format!("session_hostile_{round}");
    let mut body = Vec::new();
    let mut good = 0;
    let shape = rng.gen_range(0..4);
    if shape == 0 {
        // Many tiny values in one array: refused as a whole, or many unreadable events.
        let n = rng.gen_range(1..300_000);
        body.push(b'[');
        body.extend(vec!["0"; n].join(",").as_bytes());
        body.push(b']');
        return (body, 0);
    }
    for k in 0..rng.gen_range(1..400u64) {
        match rng.gen_range(0..8) {
            0..=2 => {
                body.extend(fixture::synthetic_turns(&session, k, 1));
                good += 1;
                continue;
            }
            3 => body.extend(b"0"),
            4 => body.extend(format!("{}1{}", "[".repeat(200), "]".repeat(200)).as_bytes()),
            5 => body.extend(b"{\"type\": \"\xff\xfe\"}"),
            6 => body.extend(b"# not json {"),
            _ => body.extend(format!("{{\"type\": 5, \"seq\": {k}}}").as_bytes()),
        }
        body.push(b'\n');
    }
    (body, good)
}
