//! Faults between the agent and the cloud, each ending with zero lost, zero double-counted, and the
//! agent's outcome counters adding up (`received = delivered + duplicate + rejected + filtered + evicted
//! + purged + exported + pending`):
//! - the agent SIGKILLed during intake and during push, N cycles;
//! - the ingest killed and restarted mid-batch;
//! - PostgreSQL restarted (a private cluster, never the shared server);
//! - our fault proxy between agent and ingest: delays, resets, blackholes, 503/429 bursts (Retry-After
//!   honoured).
//!
//! Cycle counts: 10 kill cycles by default (a count that means something, and the whole suite stays well
//! under 30 minutes on 2 cores); `APIARY_FULL_FAULTS=1` for 20. A kill counts only when it landed
//! mid-work: during intake, when a producer's request failed in that cycle; during a push, when the
//! proxy between agent and ingest had a request in flight at the moment of the kill.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::Rng;
use tests::agent::{Agent, Counters};
use tests::db::{PrivatePg, TestDb};
use tests::fixture::synthetic_turns;
use tests::proxy::{Fault, FaultProxy};
use tests::stack::Cloud;

/// Push settings that keep retries quick in tests (keys of the agent's `[push]` section).
const FAST_RETRY: &[(&str, &str)] = &[
    ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
    ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
    ("APIARY_PUSH_CONNECT_TIMEOUT_MS", "1000"),
    ("APIARY_PUSH_REQUEST_TIMEOUT_MS", "3000"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
    ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "3600"),
    ("APIARY_PUSH_SHUTDOWN_GRACE_MS", "1000"),
];

/// Kill cycles per fault loop.
fn cycles() -> usize {
    if tests::full_faults() {
        20
    } else {
        10
    }
}

/// Waits (polling every millisecond, up to 30 s) until the proxy has a request in flight; true if one
/// was seen.
async fn request_in_flight(proxy: &FaultProxy) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if proxy.in_flight() > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// An agent with sync enabled towards `endpoint`.
async fn synced_agent(cloud: &Cloud, endpoint: &str, extra: &[(&str, &str)]) -> Agent {
    let env: Vec<(&str, &str)> = FAST_RETRY.iter().chain(extra).copied().collect();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &env)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(endpoint, &token_file, false).unwrap();
    agent
}

/// Waits until nothing is pending and `n` events were delivered (or found duplicate) in total.
async fn drained(agent: &Agent, n: u64, timeout: Duration) -> Counters {
    let c = agent
        .wait_counters(timeout, "everything delivered", |c| {
            c.pending == 0 && c.delivered + c.duplicate >= n
        })
        .await
        .unwrap();
    c.assert_balanced();
    assert_eq!(c.rejected, 0, "{c:?}");
    c
}

/// Posts `n` turns of `session` from `seq0` in requests of `per`; retries a request the agent did not
/// acknowledge (as a producer must), restarting the agent if it is down. Returns the number of requests
/// and how many of them failed (no answer at all).
async fn produce(agent: &mut Agent, session: &str, seq0: u64, n: u64, per: u64) -> (u64, u64) {
    let (mut requests, mut failed) = (0, 0);
    let mut seq = seq0;
    while seq < seq0 + n {
        let k = per.min(seq0 + n - seq);
        // The same bytes on every retry (the turns carry their creation time, part of their identity).
        let body = synthetic_turns(session, seq, k);
        loop {
            requests += 1;
            match agent.post_events(body.clone()).await {
                Ok((200, _)) => break,
                Ok((s, v)) if s >= 500 => {
                    let _ = v;
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Ok((s, v)) => panic!("intake answered {s}: {v}"),
                Err(_) if !agent.is_running() => {
                    failed += 1;
                    agent.restart().await.unwrap()
                }
                Err(_) => {
                    failed += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
            }
        }
        seq += k;
    }
    (requests, failed)
}

/// SIGKILL by pid; true if the process existed.
fn kill_9(pid: u32) -> bool {
    // Never `kill 0` (the whole process group, this test included).
    if pid == 0 {
        return false;
    }
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sigkilled_during_intake_loses_and_doubles_nothing() {
    let cloud = Cloud::start().await.unwrap();
    let mut agent = synced_agent(&cloud, &cloud.ingest.url(), &[]).await;
    let session = "session_e2e_kill_intake";
    let (n, cycles) = (1000u64, cycles() as u64);
    let (mut mid_work, mut retries) = (0, 0);
    for cycle in 0..cycles {
        // A producer posts (retrying what was not acknowledged) while a killer strikes 10–60 ms in: a
        // cycle's 20 requests are often all answered within 150 ms, and a kill after them cuts nothing.
        let delay = Duration::from_millis(rand::thread_rng().gen_range(10..60));
        let pid = agent.pid();
        let killer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            kill_9(pid)
        });
        let (requests, failed) = produce(&mut agent, session, 1 + cycle * n, n, 50).await;
        retries += requests - n / 50;
        let landed = killer.await.unwrap();
        // It counts only if it cut a request: one of this cycle's requests got no answer.
        if landed && failed > 0 {
            mid_work += 1;
        }
        // kill(2) only queues the signal: a process killed just now can still look alive, so a landed
        // kill always means a restart (which reaps the old process first).
        if landed || !agent.is_running() {
            agent.restart().await.unwrap();
        }
        agent.counters().await.unwrap().assert_balanced();
    }
    eprintln!("{mid_work}/{cycles} kills cut a request; {retries} unacknowledged requests re-sent");
    assert!(
        mid_work >= cycles / 2,
        "only {mid_work} of {cycles} kills landed during intake"
    );
    drained(&agent, n * cycles, Duration::from_secs(120)).await;
    cloud
        .assert_exactly(session, (n * cycles) as i64)
        .await
        .unwrap();
}

/// An agent holding a backlog of `n` turns of `session`, taken in with sync off, then sync enabled with
/// `--include-backlog` towards `endpoint`: the push loop starts on a full outbox.
async fn agent_with_backlog(
    cloud: &Cloud,
    endpoint: &str,
    extra: &[(&str, &str)],
    session: &str,
    n: u64,
) -> Agent {
    let env: Vec<(&str, &str)> = FAST_RETRY.iter().chain(extra).copied().collect();
    let mut agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &env)
        .await
        .unwrap();
    produce(&mut agent, session, 1, n, 1000).await;
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent.sync_enable(endpoint, &token_file, true).unwrap();
    agent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sigkilled_during_push_loses_and_doubles_nothing() {
    let cloud = Cloud::start().await.unwrap();
    // Every request is held 300 ms on its way, so a kill can be aimed at a push in flight.
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    proxy.set(Fault::Hold(Duration::from_millis(300)));
    let cycles = cycles() as u64;
    let total = 1000 * cycles;
    let session = "session_e2e_kill_push";
    let extra = [("APIARY_PUSH_BATCH_MAX_EVENTS", "50")];
    let mut agent = agent_with_backlog(&cloud, &proxy.url(), &extra, session, total).await;
    let mut mid_push = 0;
    for _ in 0..cycles {
        assert!(request_in_flight(&proxy).await, "no push under way");
        agent.kill_hard();
        // The held request outlives the agent: the kill cut a push between its send and its settlement.
        if proxy.in_flight() > 0 {
            mid_push += 1;
        }
        agent.restart().await.unwrap();
        agent.counters().await.unwrap().assert_balanced();
    }
    eprintln!("{mid_push}/{cycles} kills landed with a push in flight");
    // A push is seen in flight at the start of its 300 ms hold, but on a loaded 2-core machine the kill
    // can land after the hold ended (CI saw 9 of 10 once): most kills must cut a push, as in the intake
    // test above; what must hold for every kill is the balance above and the exact count below.
    assert!(
        mid_push * 10 >= cycles * 7,
        "only {mid_push} of {cycles} kills landed with a push in flight"
    );
    proxy.set(Fault::Pass);
    drained(&agent, total, Duration::from_secs(120)).await;
    cloud.assert_exactly(session, total as i64).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_killed_and_restarted_while_the_agent_pushes() {
    let mut cloud = Cloud::start().await.unwrap();
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    let cycles = cycles() as u64;
    let total = 2000 * cycles;
    let session = "session_e2e_kill_ingest";
    let extra = [("APIARY_PUSH_BATCH_MAX_EVENTS", "200")];
    let agent = agent_with_backlog(&cloud, &proxy.url(), &extra, session, total).await;
    let mut mid_push = 0;
    for _ in 0..cycles {
        // Kill the ingest while the proxy has a batch on its way to it or back.
        assert!(request_in_flight(&proxy).await, "no push under way");
        let in_flight = proxy.in_flight() > 0;
        cloud.ingest.kill();
        if in_flight {
            mid_push += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        cloud.ingest.restart().await.unwrap();
    }
    eprintln!("{mid_push}/{cycles} ingest kills landed with a batch in flight");
    assert!(
        mid_push >= cycles - 1,
        "only {mid_push} of {cycles} ingest kills landed with a batch in flight"
    );
    drained(&agent, total, Duration::from_secs(120)).await;
    cloud.assert_exactly(session, total as i64).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_while_the_agent_pushes() {
    let mut pg = tokio::task::spawn_blocking(PrivatePg::start)
        .await
        .unwrap()
        .unwrap();
    let db = TestDb::create_on(&pg.url).await.unwrap();
    let cloud = Cloud::start_with(db).await.unwrap();
    let mut agent = synced_agent(
        &cloud,
        &cloud.ingest.url(),
        &[("APIARY_PUSH_BATCH_MAX_EVENTS", "200")],
    )
    .await;
    let session = "session_e2e_pg_restart";
    produce(&mut agent, session, 1, 1000, 500).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    pg = tokio::task::spawn_blocking(move || {
        pg.stop().unwrap();
        pg
    })
    .await
    .unwrap();
    // While the database is down, intake goes on and pushes fail and back off.
    produce(&mut agent, session, 1001, 1000, 500).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let down = agent.counters().await.unwrap();
    assert!(
        down.pending > 0,
        "nothing waited for the database: {down:?}"
    );
    down.assert_balanced();
    let _pg = tokio::task::spawn_blocking(move || {
        pg.start_again().unwrap();
        pg
    })
    .await
    .unwrap();
    drained(&agent, 2000, Duration::from_secs(120)).await;
    cloud.assert_exactly(session, 2000).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_faults_between_agent_and_ingest_end_with_everything_delivered_once() {
    let cloud = Cloud::start().await.unwrap();
    let proxy = FaultProxy::start(cloud.ingest.addr()).await.unwrap();
    let mut agent = synced_agent(
        &cloud,
        &proxy.url(),
        &[("APIARY_PUSH_BATCH_MAX_EVENTS", "100")],
    )
    .await;
    let session = "session_e2e_proxy";
    let mut sent = 0u64;
    let phases = [
        (Fault::Delay(Duration::from_millis(700)), 1500),
        (Fault::Reset, 1500),
        (Fault::Blackhole, 4000),
        (Fault::Pass, 500),
    ];
    for (fault, hold_ms) in phases {
        proxy.set(fault.clone());
        produce(&mut agent, session, sent + 1, 300, 100).await;
        sent += 300;
        tokio::time::sleep(Duration::from_millis(hold_ms)).await;
    }
    proxy.set(Fault::Pass);
    drained(&agent, sent, Duration::from_secs(60)).await;
    cloud.assert_exactly(session, sent as i64).await.unwrap();

    // Bursts of 503 and 429 with Retry-After: the next attempt waits at least that long.
    for (status, retry_after) in [(503u16, 1u32), (429, 2)] {
        proxy.set(Fault::Inject {
            status,
            count: 3,
            retry_after_secs: Some(retry_after),
        });
        let injected_before = proxy.injected.load(Ordering::Relaxed);
        let start = Instant::now();
        produce(&mut agent, session, sent + 1, 50, 50).await;
        sent += 50;
        drained(&agent, sent, Duration::from_secs(60)).await;
        let injected = proxy.injected.load(Ordering::Relaxed) - injected_before;
        assert_eq!(injected, 3, "{status}: the burst was answered");
        let seen = proxy.seen();
        let after: Vec<_> = seen.iter().filter(|s| s.at >= start).collect();
        let injections: Vec<Instant> = after
            .iter()
            .filter(|s| matches!(s.fault, Fault::Inject { .. }))
            .map(|s| s.at)
            .collect();
        let last = *injections.last().expect("injections were logged");
        let next_pass = after
            .iter()
            .find(|s| s.at > last && s.fault == Fault::Pass)
            .map(|s| s.at)
            .expect("a request after the burst");
        assert!(
            next_pass - last + Duration::from_millis(50) >= Duration::from_secs(u64::from(retry_after)),
            "{status}: retried {:?} after the last injected answer despite Retry-After: {retry_after}",
            next_pass - last
        );
        for pair in injections.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap + Duration::from_millis(50) >= Duration::from_secs(u64::from(retry_after)),
                "{status}: retried after {gap:?} despite Retry-After: {retry_after}"
            );
        }
        cloud.assert_exactly(session, sent as i64).await.unwrap();
    }
    assert!(proxy.requests() > 0);
}
