//! The agent answers a producer only after its events are committed — deterministically, not by
//! hoping a kill lands in a sub-millisecond window: the agent runs with its test hook (the cargo
//! feature `test-hooks`, which the test build of the binaries enables and a release build leaves out)
//! that parks the outbox writer between applying a group that writes events and committing it. The
//! producer's request must still be unanswered while the writer is parked; after `kill -9` and a
//! restart the events are absent, and the producer got no 2xx for them.

use std::time::Duration;

use tests::agent::Agent;
use tests::fixture::synthetic_turns;
use tests::procs::wait_for;

/// The hook's variable (`PARK_BEFORE_COMMIT_VAR` of the agent's outbox writer hook).
const PARK_VAR: &str = "TEST_HOOK_APIARY_PARK_BEFORE_COMMIT";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_is_answered_only_after_the_commit_and_a_kill_before_it_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("parked");
    let marker_s = marker.display().to_string();
    let mut agent = Agent::start_with(&dir.path().join("agent"), None, &[(PARK_VAR, &marker_s)])
        .await
        .unwrap();
    assert!(
        !marker.exists(),
        "the writer parked before the producer sent anything"
    );
    let before = agent.counters().await.unwrap();
    let (url, token) = (
        format!("http://{}/v1/events", agent.addr),
        agent.token.clone(),
    );
    let producer = tokio::spawn(async move {
        tests::stack::client()
            .post(url)
            .bearer_auth(token)
            .header("content-type", "application/x-ndjson")
            .timeout(Duration::from_secs(60))
            .body(synthetic_turns("session_parked_before_commit", 1, 10))
            .send()
            .await
            .map(|r| r.status().as_u16())
    });
    let parked = wait_for(Duration::from_secs(20), || async {
        marker.exists().then_some(())
    })
    .await;
    assert!(
        parked.is_some(),
        "the writer never reached the commit; log:\n{}",
        tests::agent::tail(&agent.output(), 30)
    );
    // Parked between the group's writes and its commit: the producer must not have an answer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !producer.is_finished(),
        "the producer was answered before the commit: {:?}",
        producer.await
    );
    agent.kill_hard();
    let answer = producer.await.unwrap();
    assert!(
        !matches!(answer, Ok(s) if (200..300).contains(&s)),
        "the producer got {answer:?} for events that were never committed"
    );
    // The restart finds the marker and writes on; nothing of the uncommitted group is there.
    agent.restart().await.unwrap();
    let after = agent.counters().await.unwrap();
    after.assert_balanced();
    assert_eq!(
        (after.received, after.pending),
        (before.received, before.pending),
        "events of the uncommitted group survived the kill: {after:?}"
    );
    let (status, v) = agent
        .post_events(synthetic_turns("session_parked_before_commit", 1, 10))
        .await
        .unwrap();
    assert_eq!(
        status, 200,
        "after the restart the producer's retry is taken: {v}"
    );
    let again = agent.counters().await.unwrap();
    assert_eq!(again.pending, before.pending + 10, "{again:?}");
}
