//! The fixture day end to end: written into a HIVE_HOME as the runtime writes it (both logs, lines
//! appended over time, partial lines) and tailed by the agent, or posted to its HTTP intake as NDJSON.
//! The agent must count every line once (counters add up), keep each durable event once, hold no
//! sensitive value in any file of its data directory (outbox, WAL, its own log), and — once sync is on —
//! the cloud's `/v1/usage` must equal the fixture's independently computed totals for every group_by,
//! with nothing sensitive in the database nor in any request on the wire; each scan must also have read
//! the day (a clean scan of nothing proves nothing).

use std::path::Path;
use std::time::Duration;

use tests::agent::{Agent, Counters};
use tests::expect::{self, assert_fixture_usage, assert_local_usage, Expected};
use tests::fixture;
use tests::proxy::FaultProxy;
use tests::scan;
use tests::stack::Cloud;

/// Writes the day into `home` on a blocking thread, as the runtime would (≈ 1 s).
async fn write_day(home: &Path) {
    let home = home.to_path_buf();
    tokio::task::spawn_blocking(move || fixture::write_day(&home, Duration::from_millis(3), 10))
        .await
        .unwrap()
        .unwrap();
}

/// Posts the day's files (debug log first, then the session logs) to the agent's intake.
async fn post_day(agent: &Agent) {
    for body in fixture::ndjson_bodies() {
        let (status, v) = agent.post_events(body).await.unwrap();
        assert_eq!(status, 200, "{v}");
    }
}

fn durable() -> u64 {
    Expected::load().durable_event_count() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hive_day_written_as_the_runtime_would_is_tailed_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("hive");
    std::fs::create_dir_all(&home).unwrap();
    let agent = Agent::start(&dir.path().join("agent"), Some(&home))
        .await
        .unwrap();
    write_day(&home).await;
    let lines = expect::day_line_count();
    let c = agent
        .wait_counters(Duration::from_secs(30), "every line read", |c| {
            c.received >= lines
        })
        .await
        .unwrap();
    assert_eq!(c.received, lines, "each line received once: {c:?}");
    assert_eq!(c.pending, durable(), "each durable event kept once: {c:?}");
    c.assert_balanced();
    assert_local_usage(&agent).await.unwrap();
    scan::assert_agent_day_clean(&agent.data_dir).unwrap();
    // Nothing more arrives later (no re-read of a file, no late partial line).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(agent.counters().await.unwrap(), c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hive_day_posted_to_http_intake_is_counted_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(&dir.path().join("agent"), None).await.unwrap();
    post_day(&agent).await;
    let c = agent.counters().await.unwrap();
    let unattributable = expect::durable_debug_events_without_session() as u64;
    assert_eq!(c.received, expect::day_line_count(), "{c:?}");
    assert_eq!(c.pending, durable() - unattributable, "{c:?}");
    c.assert_balanced();
    assert_local_usage(&agent).await.unwrap();
    scan::assert_agent_day_clean(&agent.data_dir).unwrap();
    // A producer re-sending everything changes nothing but the duplicate counter.
    post_day(&agent).await;
    let again = agent.counters().await.unwrap();
    assert_eq!(again.pending, c.pending, "{again:?}");
    again.assert_balanced();
}

/// Waits until every kept event is delivered; checks the counters.
async fn wait_delivered(agent: &Agent, kept: u64) -> Counters {
    let c = agent
        .wait_counters(Duration::from_secs(60), "everything delivered", |c| {
            c.pending == 0 && c.delivered + c.duplicate >= kept
        })
        .await
        .unwrap();
    c.assert_balanced();
    assert_eq!(c.rejected, 0, "{c:?}");
    c
}

async fn device_id(agent: &Agent) -> String {
    agent.status().await.unwrap()["device_id"]
        .as_str()
        .expect("device_id in status")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hive_day_tailed_by_the_agent_reaches_the_cloud_exactly() {
    let cloud = Cloud::start().await.unwrap();
    // The home directory's path holds a canary: it may be on the device, never in the cloud or on the wire.
    let home = cloud.dir.path().join(scan::HOME_CANARY).join("hive");
    std::fs::create_dir_all(&home).unwrap();
    let agent = Agent::start(&cloud.dir.path().join("agent"), Some(&home))
        .await
        .unwrap();
    // Through the proxy, which keeps every request body: the wire is scanned too.
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    proxy.capture_bodies(true);
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(&proxy.url(), &token_file, false).unwrap();
    write_day(&home).await;
    let lines = expect::day_line_count();
    agent
        .wait_counters(Duration::from_secs(30), "every line read", |c| {
            c.received >= lines
        })
        .await
        .unwrap();
    let c = wait_delivered(&agent, durable()).await;
    assert_eq!(c.delivered, durable(), "{c:?}");
    let device = device_id(&agent).await;
    assert_fixture_usage(
        &cloud.read_api(),
        &cloud.admin_api(),
        &cloud.tenant.id,
        &device,
        durable() as i64,
    )
    .await
    .unwrap();
    // Through an agent, each call is timed on the device.
    expect::assert_fixture_tool_durations(&cloud.read_api())
        .await
        .unwrap();
    let devices = cloud.read_api().devices().await.unwrap();
    assert!(devices.to_string().contains(&device), "{devices}");
    let s = cloud
        .read_api()
        .session("session_20261103_101433_51be07d2")
        .await
        .unwrap();
    assert_eq!(s["phase"], "reviewing", "{s}");
    scan::assert_day_clean(&cloud.db.url).await.unwrap();
    scan::assert_wire_day_clean(&proxy.seen()).unwrap();
    scan::assert_agent_day_clean(&agent.data_dir).unwrap();
    // The device does hold the path (its tail checkpoints): the canary was where it could leak from.
    let on_device = scan::assert_agent_files_clean(&agent.data_dir).unwrap();
    assert!(on_device.contains(scan::HOME_CANARY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hive_day_posted_to_http_intake_reaches_the_cloud_exactly() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start(&cloud.dir.path().join("agent"), None)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    post_day(&agent).await;
    let kept = durable() - expect::durable_debug_events_without_session() as u64;
    let c = wait_delivered(&agent, kept).await;
    assert_eq!(c.delivered, kept, "{c:?}");
    let device = device_id(&agent).await;
    // Usage sums are exact; only the session-less status events are missing from `events`.
    assert_fixture_usage(
        &cloud.read_api(),
        &cloud.admin_api(),
        &cloud.tenant.id,
        &device,
        kept as i64,
    )
    .await
    .unwrap();
    // Through an agent, each call is timed on the device.
    expect::assert_fixture_tool_durations(&cloud.read_api())
        .await
        .unwrap();
    scan::assert_day_clean(&cloud.db.url).await.unwrap();
    scan::assert_agent_day_clean(&agent.data_dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hive_day_posted_to_http_intake_keeps_every_durable_event() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start(&cloud.dir.path().join("agent"), None)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    // Each per-session log is posted with its session named (`?session=`), as its producer knows it.
    for file in fixture::day_files() {
        let hint = file.session_hint();
        let (status, v) = agent
            .post_events_for(file.lines.concat(), hint.as_deref())
            .await
            .unwrap();
        assert_eq!(status, 200, "{v}");
    }
    let c = agent.counters().await.unwrap();
    assert_eq!(c.pending + c.delivered, durable(), "{c:?}");
    wait_delivered(&agent, durable()).await;
    let s = cloud
        .read_api()
        .session("session_20261103_101433_51be07d2")
        .await
        .unwrap();
    assert_eq!(s["phase"], "reviewing", "{s}");
}
