//! Consent and air-gapped mode, black box: nothing reaches the ingest while sync is off — the agent knows
//! the endpoint (our proxy, which counts HTTP requests, not connections: the agent keeps connections
//! alive) and has used it, then consent is withdrawn and the agent restarted; an air-gapped agent with
//! consent still stored opens no connection at all; the backlog captured before consent stays local
//! unless `sync enable --include-backlog`; an air-gapped agent's `export` bundle, sealed by its device key
//! and loaded with `apiary-ingest import` once an admin registered that key, gives the fixture's totals,
//! and importing it twice changes nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;
use tests::agent::Agent;
use tests::expect::{self, assert_fixture_usage, Expected};
use tests::fixture;
use tests::proxy::FaultProxy;
use tests::scan;
use tests::stack::{ingest_cli, Cloud};

/// Settings that make a wrongly running push loop show up within the waits below.
const FAST_PUSH: &[(&str, &str)] = &[
    ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "1"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
];

async fn cloud_llm_calls(cloud: &Cloud) -> u64 {
    let v = cloud
        .read_api()
        .usage(
            "session",
            "total",
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        )
        .await
        .unwrap();
    v["totals"]["llm_calls"].as_u64().unwrap_or(0)
}

/// How long a wrongly running push loop has to show itself: four heartbeat intervals, eighty polls.
const QUIET: Duration = Duration::from_secs(4);

/// Waits until the proxy has seen a request (with sync enabled, a heartbeat comes within a second):
/// proof that the agent can reach the ingest through it, so silence later means something.
async fn reached(proxy: &FaultProxy) {
    let reached = tests::procs::wait_for(Duration::from_secs(20), || async {
        (proxy.requests() > 0).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "with sync enabled, no heartbeat reached the proxy: the test could not see a push either"
    );
}

/// An agent that knows the proxy's endpoint and has used it: sync enabled once (a heartbeat goes through
/// the proxy), then disabled, then the agent restarted (so nothing of the enabled state survives in
/// memory). Returns the agent and the proxy's request count after the restart.
async fn agent_that_knew_the_endpoint(cloud: &Cloud, proxy: &FaultProxy) -> (Agent, u64) {
    let data = cloud.dir.path().join("agent");
    let mut agent = Agent::start_with(&data, None, FAST_PUSH).await.unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(&proxy.url(), &token_file, false).unwrap();
    reached(proxy).await;
    agent.cli(&["sync", "disable"]).unwrap();
    let status = agent.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let agent = Agent::start_with(&data, None, FAST_PUSH).await.unwrap();
    let sync = agent.status().await.unwrap()["sync"].clone();
    assert_eq!(sync["enabled"], false, "{sync}");
    assert_eq!(
        sync["endpoint"],
        proxy.url().as_str(),
        "the agent still knows the endpoint: {sync}"
    );
    (agent, proxy.requests())
}

/// The requests the proxy saw after the first `from`.
fn requests_since(proxy: &FaultProxy, from: u64) -> String {
    tests::proxy::summary(&proxy.seen()[from as usize..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_reaches_the_ingest_before_consent() {
    let cloud = Cloud::start().await.unwrap();
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    let (agent, baseline) = agent_that_knew_the_endpoint(&cloud, &proxy).await;
    let (status, v) = agent
        .post_events(fixture::synthetic_turns("session_consent_a", 1, 200))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        requests_since(&proxy, baseline),
        "0 requests",
        "requests sent with sync off"
    );
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.delivered), (200, 0), "{c:?}");
    c.assert_balanced();
    assert_eq!(cloud_llm_calls(&cloud).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_airgapped_agent_with_stored_consent_opens_no_socket_to_the_ingest() {
    let cloud = Cloud::start().await.unwrap();
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    let data = cloud.dir.path().join("agent");
    let mut agent = Agent::start_with(&data, None, FAST_PUSH).await.unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(&proxy.url(), &token_file, false).unwrap();
    reached(&proxy).await;
    let status = agent.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    // The consent stays stored; the same device comes back air-gapped.
    let connections = proxy.connections.load(Ordering::SeqCst);
    let airgapped: Vec<(&str, &str)> = [FAST_PUSH, &[("APIARY_MODE", "airgapped")]].concat();
    let agent = Agent::start_with(&data, None, &airgapped).await.unwrap();
    let s = agent.status().await.unwrap();
    assert_eq!(
        (s["mode"].as_str(), s["sync"]["enabled"].as_bool()),
        (Some("airgapped"), Some(true)),
        "{s}"
    );
    let (status, v) = agent
        .post_events(fixture::synthetic_turns("session_airgapped", 1, 200))
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        proxy.connections.load(Ordering::SeqCst),
        connections,
        "an air-gapped agent connected to the ingest"
    );
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.delivered), (200, 0), "{c:?}");
    c.assert_balanced();
    assert_eq!(cloud_llm_calls(&cloud).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_reaches_the_ingest_after_sync_disable() {
    let cloud = Cloud::start().await.unwrap();
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST_PUSH)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(&proxy.url(), &token_file, false).unwrap();
    agent
        .post_events(fixture::synthetic_turns("session_consent_b", 1, 100))
        .await
        .unwrap();
    agent
        .wait_counters(Duration::from_secs(30), "delivered", |c| c.delivered == 100)
        .await
        .unwrap();
    agent.cli(&["sync", "disable"]).unwrap();
    // A request already in flight when the CLI committed the change may still finish; then nothing more.
    let settled = tests::procs::wait_for(Duration::from_secs(10), || async {
        (proxy.in_flight() == 0).then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "a request stayed in flight after disable"
    );
    let before = proxy.requests();
    agent
        .post_events(fixture::synthetic_turns("session_consent_b", 101, 100))
        .await
        .unwrap();
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        requests_since(&proxy, before),
        "0 requests",
        "requests sent after disable"
    );
    assert_eq!(cloud_llm_calls(&cloud).await, 100);
    let c = agent.counters().await.unwrap();
    assert_eq!((c.delivered, c.pending), (100, 100), "{c:?}");
    c.assert_balanced();
    // --purge deletes what is pending; the counters still add up.
    agent.cli(&["sync", "disable", "--purge"]).unwrap();
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.purged), (0, 100), "{c:?}");
    c.assert_balanced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_from_before_consent_stays_local_unless_include_backlog() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST_PUSH)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    // 300 events captured before consent.
    agent
        .post_events(fixture::synthetic_turns("session_backlog", 1, 300))
        .await
        .unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    // 50 after consent: only these go up.
    agent
        .post_events(fixture::synthetic_turns("session_after_consent", 1, 50))
        .await
        .unwrap();
    agent
        .wait_counters(
            Duration::from_secs(30),
            "post-consent events delivered",
            |c| c.delivered == 50,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        cloud_llm_calls(&cloud).await,
        50,
        "the backlog must stay local"
    );
    let c = agent.counters().await.unwrap();
    assert_eq!((c.delivered, c.pending), (50, 300), "{c:?}");
    c.assert_balanced();
    // Explicitly including the backlog sends it, once.
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, true)
        .unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(30), "backlog delivered", |c| {
            c.pending == 0
        })
        .await
        .unwrap();
    assert_eq!(c.delivered, 350, "{c:?}");
    c.assert_balanced();
    assert_eq!(cloud_llm_calls(&cloud).await, 350);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airgapped_export_then_import_gives_the_fixture_totals_once() {
    let cloud = Cloud::start().await.unwrap();
    let home = cloud.dir.path().join("hive");
    std::fs::create_dir_all(&home).unwrap();
    // Air-gapped; identity configured on the device (an import has no token user to fall back on).
    let env = [
        ("APIARY_MODE", "airgapped"),
        ("APIARY_IDENTITY_USER_ID", "alice"),
    ];
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), Some(&home), &env)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let refused = agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .expect_err("air-gapped mode must refuse sync enable");
    assert!(
        format!("{refused:#}").contains("mode is airgapped: sync cannot be enabled"),
        "{refused:#}"
    );
    let sync = agent.status().await.unwrap()["sync"].clone();
    assert_eq!(
        (sync["enabled"].as_bool(), sync["endpoint"].as_str()),
        (Some(false), None),
        "a refused enable stores nothing: {sync}"
    );
    let h = home.clone();
    tokio::task::spawn_blocking(move || fixture::write_day(&h, Duration::from_millis(2), 20))
        .await
        .unwrap()
        .unwrap();
    let durable = Expected::load().durable_event_count() as u64;
    let lines = expect::day_line_count();
    agent
        .wait_counters(Duration::from_secs(30), "day tailed", |c| {
            c.received >= lines && c.pending == durable
        })
        .await
        .unwrap();
    let bundle = cloud.dir.path().join("bundle.ndjson.gz");
    agent
        .cli(&["export", "--out", &bundle.to_string_lossy()])
        .unwrap();
    let c = agent.counters().await.unwrap();
    assert_eq!((c.exported, c.pending), (durable, 0), "{c:?}");
    c.assert_balanced();
    let device = agent.status().await.unwrap()["device_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The bundle is sealed by the device's key: an admin registers it for the device's user.
    let shown: Value =
        serde_json::from_str(&agent.cli(&["identity", "show", "--json"]).unwrap()).unwrap();
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let b = bundle.clone();
    let key = shown["public_key"].as_str().unwrap().to_string();
    let dev = device.clone();
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
                &dev,
                "--public-key",
                &key,
            ],
        )
        .unwrap();
        (0..2)
            .map(|_| {
                let out = ingest_cli(&url, &["import", &b.to_string_lossy(), "--tenant", &tenant])
                    .unwrap();
                serde_json::from_str(&tests::procs::last_line(&out)).unwrap()
            })
            .collect()
    })
    .await
    .unwrap();
    assert_eq!(
        summaries[0]["accepted"].as_u64(),
        Some(durable),
        "{summaries:?}"
    );
    assert_eq!(summaries[1]["accepted"].as_u64(), Some(0), "{summaries:?}");
    assert_eq!(
        summaries[1]["duplicates"].as_u64(),
        Some(durable),
        "{summaries:?}"
    );
    assert_fixture_usage(
        &cloud.read_api(),
        &cloud.admin_api(),
        &cloud.tenant.id,
        &device,
        durable as i64,
    )
    .await
    .unwrap();
    // Through an agent, each call is timed on the device.
    expect::assert_fixture_tool_durations(&cloud.read_api())
        .await
        .unwrap();
    scan::assert_day_clean(&cloud.db.url).await.unwrap();
    scan::assert_agent_day_clean(&agent.data_dir).unwrap();
    // The bundle is a copy of every event that left the device too.
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&bundle).unwrap()),
        &mut text,
    )
    .unwrap();
    assert!(scan::holds_the_day(&text), "the bundle holds the day");
    assert_eq!(
        scan::forbidden_in(&text),
        Vec::<String>::new(),
        "in the bundle"
    );
}
