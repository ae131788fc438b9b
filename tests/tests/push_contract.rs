//! The push contract seen from outside: a refused token pauses sync with "re-authenticate" instead of
//! burning retries, and a new token resumes it; an ingest with a small batch limit answers 413 and the
//! agent splits until everything is delivered once; heartbeats make the device visible in
//! `/v1/devices` with its backlog and version; SIGTERM finishes the push in flight (caught in flight by
//! the proxy holding each request) and exits within the grace period: nothing the ingest stored is left
//! unsettled, so nothing is sent twice.

use std::time::{Duration, Instant};

use tests::agent::Agent;
use tests::fixture::synthetic_turns;
use tests::ingest::Ingest;
use tests::proxy::{Fault, FaultProxy};
use tests::stack::{write_private, Cloud};

const FAST_RETRY: &[(&str, &str)] = &[
    ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
    ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
    ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "3600"),
];

async fn post(agent: &Agent, session: &str, seq0: u64, n: u64) {
    let (s, v) = agent
        .post_events(synthetic_turns(session, seq0, n))
        .await
        .unwrap();
    assert_eq!(s, 200, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_pauses_sync_until_reauthentication() {
    let cloud = Cloud::start().await.unwrap();
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST_RETRY)
        .await
        .unwrap();
    let bad = cloud.dir.path().join("bad.token");
    write_private(&bad, "apiary_not_a_real_token\n").unwrap();
    // Stored anyway, as a token revoked after sharing was turned on would be.
    let bad_file = bad.display().to_string();
    let url = proxy.url();
    agent
        .cli(&[
            "sync",
            "enable",
            "--endpoint",
            &url,
            "--token-file",
            &bad_file,
            "--force",
        ])
        .unwrap();
    post(&agent, "session_reauth", 1, 100).await;
    let paused = tests::procs::wait_for(Duration::from_secs(20), || async {
        let s = agent.status().await.ok()?;
        let reason = s["sync"]["paused_reason"].as_str()?.to_string();
        Some(reason)
    })
    .await
    .expect("sync paused after 401");
    assert!(paused.contains("re-authenticate"), "{paused}");
    // Paused: no retries (and no heartbeats) burn against the ingest, over many poll intervals. Counted in
    // requests: the agent keeps its connection alive, so a connection count would not see a retry.
    let settled = tests::procs::wait_for(Duration::from_secs(10), || async {
        (proxy.in_flight() == 0).then_some(())
    })
    .await;
    assert!(
        settled.is_some(),
        "a request stayed in flight after the pause"
    );
    let tries = proxy.requests();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let retried = tests::proxy::summary(&proxy.seen()[tries as usize..]);
    assert_eq!(retried, "0 requests", "retried while paused");
    let c = agent.counters().await.unwrap();
    assert_eq!((c.pending, c.delivered, c.rejected), (100, 0, 0), "{c:?}");
    c.assert_balanced();
    // Re-authenticating (a valid token, sync enabled again) resumes and delivers everything once.
    let good = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(&proxy.url(), &good, false).unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(30), "delivered after re-auth", |c| {
            c.pending == 0
        })
        .await
        .unwrap();
    assert_eq!(c.delivered, 100, "{c:?}");
    c.assert_balanced();
    cloud.assert_exactly("session_reauth", 100).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_the_ingest_limit_are_split_and_delivered_once() {
    let cloud = Cloud::start().await.unwrap();
    // A second ingest on the same database that takes at most 64 events per batch.
    let small = Ingest::start_with(
        &cloud.db.url,
        cloud.dir.path(),
        &[("APIARY_MAX_BATCH_EVENTS", "64")],
    )
    .await
    .unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST_RETRY)
        .await
        .unwrap();
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    post(&agent, "session_split", 1, 1000).await;
    agent.sync_enable(&small.url(), &token, true).unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(60), "split batches delivered", |c| {
            c.pending == 0
        })
        .await
        .unwrap();
    assert_eq!((c.delivered, c.rejected), (1000, 0), "{c:?}");
    c.assert_balanced();
    cloud.assert_exactly("session_split", 1000).await.unwrap();
    // It did go through 413s: the small ingest refused whole batches and stored at least 1000/64.
    let (_, metrics) = tests::stack::Api::new(&small.url(), &cloud.tenant.read_token)
        .get("/metrics")
        .await
        .unwrap();
    let text = metrics.as_str().unwrap_or_default().to_string();
    let value = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(value("apiary_ingest_batches_refused_total") > 0, "{text}");
    assert!(value("apiary_ingest_batches_total") >= 16, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_show_the_device_backlog_and_version_in_the_cloud() {
    let cloud = Cloud::start().await.unwrap();
    let env = [
        ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "1"),
        ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
    ];
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &env)
        .await
        .unwrap();
    let device = agent.status().await.unwrap()["device_id"]
        .as_str()
        .unwrap()
        .to_string();
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    // A backlog that consent does not include: it stays local, and the heartbeat reports it.
    post(&agent, "session_heartbeat", 1, 30).await;
    agent
        .sync_enable(&cloud.ingest.url(), &token, false)
        .unwrap();
    let api = cloud.read_api();
    let row = tests::procs::wait_for(Duration::from_secs(20), || async {
        let v = api.devices().await.ok()?;
        let d = v["devices"]
            .as_array()?
            .iter()
            .find(|d| d["device_id"] == device.as_str())?
            .clone();
        (!d["last_heartbeat_at"].is_null()).then_some(d)
    })
    .await
    .expect("the device appears with a heartbeat");
    assert_eq!(row["agent_version"], "0.1.0", "{row}");
    assert_eq!(row["user_id"], tests::stack::USER, "{row}");
    assert_eq!(row["online"], true, "{row}");
    assert_eq!(row["backlog_events"].as_u64(), Some(30), "{row}");
    assert_eq!(row["sync_state"], "enabled", "{row}");
    let c = agent.counters().await.unwrap();
    assert_eq!(c.pending, 30, "the un-consented backlog stays: {c:?}");
}

/// How long the SIGTERM test's agent lets batches in flight finish.
const GRACE: Duration = Duration::from_millis(3000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_push_in_flight_and_exits_in_time() {
    let cloud = Cloud::start().await.unwrap();
    // Every request is held 700 ms on its way, so SIGTERM is sent with batches surely in flight.
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    proxy.set(Fault::Hold(Duration::from_millis(700)));
    let grace_ms = GRACE.as_millis().to_string();
    let env = [
        ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
        ("APIARY_PUSH_SHUTDOWN_GRACE_MS", grace_ms.as_str()),
        ("APIARY_PUSH_BATCH_MAX_EVENTS", "200"),
        ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "3600"),
    ];
    let mut agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &env)
        .await
        .unwrap();
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    post(&agent, "session_sigterm", 1, 4000).await;
    agent.sync_enable(&proxy.url(), &token, true).unwrap();
    let in_flight = tests::procs::wait_for(Duration::from_secs(30), || async {
        let seen = proxy.seen();
        let batches = seen
            .iter()
            .filter(|s| s.request == "POST /v1/batches")
            .count();
        (batches >= 2 && proxy.in_flight() > 0).then_some(proxy.in_flight())
    })
    .await
    .expect("batches in flight");
    let t = Instant::now();
    let status = agent.terminate(Duration::from_secs(30));
    let took = t.elapsed();
    assert!(
        status.is_some_and(|s| s.success()),
        "exit after SIGTERM: {status:?} in {took:?}; log:\n{}",
        tests::agent::tail(&agent.output(), 30)
    );
    assert!(
        took <= GRACE + Duration::from_secs(2),
        "SIGTERM with {in_flight} request(s) in flight took {took:?} (grace {GRACE:?})"
    );
    // Every batch the ingest stored was settled before exit: no row is in the cloud but still pending.
    // (A request the agent gave up on may still be on its way: let the proxy deliver what it holds.)
    let delivered = tests::procs::wait_for(Duration::from_secs(10), || async {
        (proxy.in_flight() == 0).then_some(())
    })
    .await;
    assert!(delivered.is_some(), "the proxy still holds requests");
    let stopped: tests::agent::Counters = serde_json::from_value(
        serde_json::from_str::<serde_json::Value>(&agent.cli(&["status", "--json"]).unwrap())
            .unwrap()["counters"]
            .clone(),
    )
    .unwrap();
    stopped.assert_balanced();
    let stored = cloud.stored("session_sigterm").await.unwrap();
    assert_eq!(
        (stored.rows, stopped.duplicate),
        (stopped.delivered as i64, 0),
        "stored in the cloud vs delivered on the device at exit: {stopped:?}"
    );
    assert!(
        stopped.pending > 0,
        "the test stopped too late to mean anything: {stopped:?}"
    );
    // After a restart everything arrives exactly once, and nothing is re-sent as a duplicate.
    proxy.set(Fault::Pass);
    agent.restart().await.unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(60), "delivered", |c| c.pending == 0)
        .await
        .unwrap();
    assert_eq!((c.delivered, c.duplicate), (4000, 0), "{c:?}");
    c.assert_balanced();
    cloud.assert_exactly("session_sigterm", 4000).await.unwrap();
}

/// Agent settings for a tiny outbox that evicts the oldest events when full.
const TINY_DROP_OLDEST: &[(&str, &str)] = &[
    ("APIARY_OUTBOX_MAX_BYTES", "1048576"),
    ("APIARY_OUTBOX_OVERFLOW", "drop_oldest"),
    ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "1"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_are_counted_and_reported_upstream_for_each_device() {
    let cloud = Cloud::start().await.unwrap();
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let mut agents = vec![];
    for name in ["laptop", "desktop"] {
        let agent = Agent::start_with(&cloud.dir.path().join(name), None, TINY_DROP_OLDEST)
            .await
            .unwrap();
        let session = format!("session_evict_{name}");
        for k in 0..8 {
            post(&agent, &session, 1 + k * 500, 500).await;
        }
        let c = agent.counters().await.unwrap();
        assert!(
            c.evicted > 0,
            "a 1 MiB outbox evicts under 4000 turns: {c:?}"
        );
        c.assert_balanced();
        agent
            .sync_enable(&cloud.ingest.url(), &token, true)
            .unwrap();
        agents.push((agent, session, c.evicted));
    }
    let pool = cloud.db.pool().await.unwrap();
    for (agent, session, evicted_before_sync) in &agents {
        let c = agent
            .wait_counters(Duration::from_secs(60), "delivered", |c| c.pending == 0)
            .await
            .unwrap();
        c.assert_balanced();
        // The drop report is enqueued into a full outbox, so it may evict one more turn: use the final count.
        assert!(c.evicted >= *evicted_before_sync, "{c:?}");
        if c.evicted != *evicted_before_sync {
            eprintln!(
                "{session}: {} evicted before sync, {} after",
                evicted_before_sync, c.evicted
            );
        }
        cloud
            .assert_exactly(session, 4000 - c.evicted as i64)
            .await
            .unwrap();
        let device = agent.status().await.unwrap()["device_id"]
            .as_str()
            .unwrap()
            .to_string();
        let last = std::sync::Mutex::new(vec![]);
        let reported = tests::procs::wait_for(Duration::from_secs(20), || {
            let (pool, device, last) = (&pool, &device, &last);
            async move {
                let rows: Vec<(serde_json::Value,)> = sqlx::query_as(
                    "SELECT data FROM events WHERE kind = 'outbox.dropped' AND device_id = $1",
                )
                .bind(device)
                .fetch_all(pool)
                .await
                .ok()?;
                let sum: i64 = rows.iter().filter_map(|(d,)| d["count"].as_i64()).sum();
                *last.lock().unwrap() = rows;
                (sum == c.evicted as i64).then_some(sum)
            }
        })
        .await;
        assert!(
            reported.is_some(),
            "device {device}: {} evictions, reported upstream: {:?}",
            c.evicted,
            last.lock().unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_identity_bound_on_the_device_is_what_the_cloud_groups_by() {
    let cloud = Cloud::start().await.unwrap();
    // A token bound to no user: the device decides who each session runs for.
    let unbound = tests::procs::last_line(
        &tests::stack::ingest_cli(
            &cloud.db.url,
            &[
                "token",
                "create",
                "--tenant",
                &cloud.tenant.id,
                "--scope",
                "ingest",
            ],
        )
        .unwrap(),
    );
    let token = cloud.dir.path().join("unbound.token");
    write_private(&token, &format!("{unbound}\n")).unwrap();
    let mut env = FAST_RETRY.to_vec();
    env.push(("APIARY_IDENTITY_USER_ID", "carol"));
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &env)
        .await
        .unwrap();
    let (s, v) = agent
        .register_session(&serde_json::json!({"session_id": "session_of_bob", "user_id": "bob"}))
        .await
        .unwrap();
    assert_eq!(s, 200, "{v}");
    agent
        .sync_enable(&cloud.ingest.url(), &token, false)
        .unwrap();
    post(&agent, "session_of_bob", 1, 30).await;
    post(&agent, "session_of_carol", 1, 20).await;
    agent
        .wait_counters(Duration::from_secs(30), "delivered", |c| c.delivered == 50)
        .await
        .unwrap();
    let v = cloud
        .read_api()
        .usage(
            "user",
            "total",
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        )
        .await
        .unwrap();
    let calls = |user: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["user_id"] == user)
            .map(|r| r["llm_calls"].as_i64().unwrap_or(0))
            .sum::<i64>()
    };
    assert_eq!((calls("bob"), calls("carol")), (30, 20), "{v}");
    for (session, user) in [("session_of_bob", "bob"), ("session_of_carol", "carol")] {
        let s = cloud.read_api().session(session).await.unwrap();
        assert_eq!(
            (s["session_id"].as_str(), s["user_id"].as_str()),
            (Some(session), Some(user)),
            "{s}"
        );
    }
}
