//! Ingest-only faults, with batches built here as an agent would build them: two replicas receiving the
//! same batch at the same moment, and an ingest SIGKILLed in the middle of a batch. Each ends with exact
//! rollups (nothing lost, nothing counted twice).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tests::expect::assert_fixture_usage;
use tests::fixture;
use tests::stack::{Api, Cloud};

const DEVICE: &str = "dev-e2e-test";

fn verdicts(v: &Value) -> (u64, u64, usize) {
    (
        v["accepted"].as_u64().unwrap_or(0),
        v["duplicates"].as_u64().unwrap_or(0),
        v["rejected"].as_array().map_or(0, Vec::len),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_receiving_the_same_batch_at_once_store_it_once() {
    let cloud = Cloud::start().await.unwrap();
    let replica = cloud.replica().await.unwrap();
    let events = fixture::canonical_events();
    let expected = tests::expect::Expected::load();
    assert_eq!(
        events.len() as i64,
        expected.durable_event_count(),
        "harness: fixture events"
    );
    let apis = [
        cloud.ingest_api(),
        Api::new(&replica.url(), &cloud.tenant.ingest_token),
    ];
    let mut bodies = vec![];
    for chunk in events.chunks(50) {
        let body = Arc::new(fixture::batch_body(chunk, DEVICE));
        bodies.push(body.clone());
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let sends = apis.iter().cloned().map(|api| {
            let (body, barrier) = (body.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                api.post_batch(&body).await
            })
        });
        let answers: Vec<(u16, Value)> = futures_join(sends.collect())
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let (mut acc, mut dup) = (0, 0);
        for (status, v) in &answers {
            assert_eq!(*status, 200, "{v}");
            let (a, d, r) = verdicts(v);
            assert_eq!((a + d, r), (chunk.len() as u64, 0), "{v}");
            acc += a;
            dup += d;
        }
        assert_eq!(
            (acc, dup),
            (chunk.len() as u64, chunk.len() as u64),
            "each event accepted by exactly one replica: {answers:?}"
        );
    }
    let n = expected.durable_event_count();
    assert_fixture_usage(
        &cloud.read_api(),
        &cloud.admin_api(),
        &cloud.tenant.id,
        DEVICE,
        n,
    )
    .await
    .unwrap();
    // A replay through either replica changes nothing.
    for body in &bodies {
        let (status, v) = apis[1].post_batch(body).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(verdicts(&v).0, 0, "replay accepted something: {v}");
    }
    assert_fixture_usage(
        &cloud.read_api(),
        &cloud.admin_api(),
        &cloud.tenant.id,
        DEVICE,
        n,
    )
    .await
    .unwrap();
    tests::scan::assert_day_clean(&cloud.db.url).await.unwrap();
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = vec![];
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_killed_mid_batch_and_restarted_stores_the_batch_once() {
    let mut cloud = Cloud::start().await.unwrap();
    let rounds: u64 = if tests::full_faults() { 20 } else { 10 };
    let per_batch = 3000u64;
    let session = "session_e2e_killed_ingest";
    let pool = cloud.db.pool().await.unwrap();
    let stored_rows = || async {
        let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM events WHERE session_id = $1")
            .bind(session)
            .fetch_one(&pool)
            .await
            .unwrap();
        n as u64
    };
    // Kills that land with the batch in flight are what this test is about; how long a batch takes
    // depends on the machine, so the kill moves earlier after a miss and keeps going (up to 4× the
    // rounds) until half the planned rounds were landed kills.
    let target = rounds / 2;
    let mut killed_in_flight = 0;
    let mut delay_ms: u64 = 30;
    let mut round = 0u64;
    while killed_in_flight < target && round < 4 * rounds {
        let events = fixture::synthetic_canonical(session, round * per_batch + 1, per_batch);
        let body = Arc::new(fixture::batch_body(&events, DEVICE));
        let api = cloud.ingest_api();
        let send = {
            let body = body.clone();
            tokio::spawn(async move { api.post_batch(&body).await })
        };
        // Kill somewhere in the request: earlier after a miss, at varied points after a hit.
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        cloud.ingest.kill();
        let first = send.await.unwrap();
        cloud.ingest.restart().await.unwrap();
        // The batch is one transaction: after the kill it is stored whole or not at all.
        let before = round * per_batch;
        let landed = stored_rows().await - before;
        assert!(
            landed == 0 || landed == per_batch,
            "round {round}: {landed} of {per_batch} events stored by the killed ingest"
        );
        match &first {
            Ok((200, v)) => {
                assert_eq!(verdicts(v), (per_batch, 0, 0), "round {round}: {v}");
                delay_ms = (delay_ms / 2).max(1);
            }
            Ok((s, v)) => panic!("round {round}: the first send answered {s}: {v}"),
            Err(_) => {
                killed_in_flight += 1;
                delay_ms = 5 + (delay_ms + 37) % 200;
            }
        }
        if first.is_ok() {
            assert_eq!(
                landed, per_batch,
                "round {round}: answered 200 but not stored"
            );
        }
        // The client re-sends; what the killed ingest stored comes back as duplicates, the rest as new.
        let (status, v) = cloud.ingest_api().post_batch(&body).await.unwrap();
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            verdicts(&v),
            (per_batch - landed, landed, 0),
            "round {round}: the re-send after {landed} landed"
        );
        let usage = cloud
            .read_api()
            .usage(
                "session",
                "total",
                "2026-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            )
            .await
            .unwrap();
        let t = &usage["totals"];
        let want = (round + 1) * per_batch;
        assert_eq!(stored_rows().await, want, "round {round}: stored rows");
        assert_eq!(t["llm_calls"].as_u64(), Some(want), "round {round}: {t}");
        assert_eq!(
            t["input_tokens"].as_u64(),
            Some(100 * want),
            "round {round}: {t}"
        );
        assert_eq!(t["events"].as_u64(), Some(want), "round {round}: {t}");
        round += 1;
    }
    eprintln!("ingest killed with the batch in flight in {killed_in_flight}/{round} rounds");
    assert!(
        killed_in_flight >= target,
        "only {killed_in_flight} of {round} kills hit a batch in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_disconnecting_mid_batch_does_not_break_later_requests() {
    let cloud = Cloud::start().await.unwrap();
    let big = fixture::batch_body(
        &fixture::synthetic_canonical("session_e2e_disconnect", 1, 8000),
        DEVICE,
    );
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for ms in (1..=10u64).map(|k| k * 80) {
        // Give up on the request (drop the connection) while the ingest is storing the batch.
        let _ = http
            .post(format!("{}/v1/batches", cloud.ingest.url()))
            .bearer_auth(&cloud.tenant.ingest_token)
            .header("content-type", "application/json")
            .timeout(Duration::from_millis(ms))
            .body(big.clone())
            .send()
            .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (api, read) = (cloud.ingest_api(), cloud.read_api());
    for k in 0..30u64 {
        let events = fixture::synthetic_canonical("session_e2e_after", 1 + k * 10, 10);
        let (status, v) = api
            .post_batch(&fixture::batch_body(&events, DEVICE))
            .await
            .unwrap();
        assert_eq!(status, 200, "batch {k} after disconnects: {v}");
        let (status, v) = read.get("/v1/devices").await.unwrap();
        assert_eq!(status, 200, "read {k} after disconnects: {v}");
    }
}
