//! The live stream (`GET /v1/stream`) across ingest replicas, with the real binaries: two `serve`
//! processes on one database, batches posted to both at once. Every subscriber, whichever replica it
//! reads, gets the same events in the same order; a client that moves to the other replica with its
//! `Last-Event-ID` — because it reconnected, or because its replica was SIGKILLed — gets exactly the
//! events it had not seen, none twice.

use std::time::Duration;

use anyhow::Context;
use tests::fixture;
use tests::sse::{Sse, SseClient};
use tests::stack::{Api, Cloud};

const DEVICE: &str = "dev-stream-replicas";

/// A subscriber: the shared SSE reader ([`tests::sse`]) and every event it got after `ready`.
struct Subscriber {
    client: SseClient,
    /// Every event after `ready`, in arrival order.
    got: Vec<Sse>,
    /// The `ready` event's id (where the stream started).
    start: String,
}

impl Subscriber {
    async fn open(base: &str, token: &str, last_id: Option<&str>) -> anyhow::Result<Subscriber> {
        let url = format!("{base}/v1/stream");
        let mut client = SseClient::open(&url, token, last_id)
            .await
            .map_err(|r| anyhow::anyhow!("GET /v1/stream: {}", r.status()))?;
        let first = client
            .next(Duration::from_secs(20))
            .await
            .context("no first event")?;
        anyhow::ensure!(first.event == "ready", "first event: {first:?}");
        Ok(Subscriber {
            client,
            got: vec![],
            start: first.id,
        })
    }

    /// The next event within `wait`; None when nothing came; an error when the stream ended.
    async fn next(&mut self, wait: Duration) -> anyhow::Result<Option<Sse>> {
        self.client
            .try_next(wait)
            .await
            .map_err(|e| anyhow::anyhow!("the stream ended: {e:?}"))
    }

    /// Reads until `done(got)` holds (at most 60 s), keeping what arrives.
    async fn until(&mut self, done: impl Fn(&[Sse]) -> bool) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !done(&self.got) {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "timed out with {} events: {:?}",
                self.got.len(),
                self.got.last()
            );
            if let Some(e) = self.next(Duration::from_secs(1)).await? {
                self.got.push(e);
            }
        }
        Ok(())
    }

    /// Reads what else arrives within `quiet` of the last event.
    async fn settle(&mut self, quiet: Duration) -> anyhow::Result<()> {
        while let Some(e) = self.next(quiet).await? {
            self.got.push(e);
        }
        Ok(())
    }
}

/// Positions as (xid, id), ordered like the stream.
fn position(id: &str) -> (i64, i64) {
    let (x, i) = id.split_once('-').expect("xid-id");
    (x.parse().unwrap(), i.parse().unwrap())
}

/// The sessions that have both their first status transition and their final usage totals
/// (`llm_calls` = `turns`).
fn complete(got: &[Sse], sessions: &[String], turns: i64) -> bool {
    sessions.iter().all(|s| {
        let status = got
            .iter()
            .any(|e| e.event == "status" && e.data["session_id"] == s.as_str());
        let usage = got.iter().any(|e| {
            e.event == "usage" && e.data["session_id"] == s.as_str() && e.data["llm_calls"] == turns
        });
        status && usage
    })
}

/// Posts one batch of `turns` LLM turns per session, the sessions split over `apis` round-robin, two
/// batches in flight at once.
async fn post_sessions(apis: &[Api], sessions: &[String], turns: u64) -> anyhow::Result<()> {
    for pair in sessions.chunks(2) {
        let sends = pair.iter().enumerate().map(|(k, s)| {
            let api = apis[k % apis.len()].clone();
            let body = fixture::batch_body(&fixture::synthetic_canonical(s, 0, turns), DEVICE);
            tokio::spawn(async move { api.post_batch(&body).await })
        });
        for h in sends.collect::<Vec<_>>() {
            let (code, v) = h.await??;
            anyhow::ensure!(code == 200, "batch: {code} {v}");
            anyhow::ensure!(v["accepted"] == turns, "batch: {v}");
        }
    }
    Ok(())
}

fn sessions(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|k| format!("{prefix}-{k:03}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_of_two_replicas_get_the_same_events_and_a_client_can_move_between_them() {
    let mut cloud = Cloud::start().await.unwrap();
    let replica = cloud.replica().await.unwrap();
    let (a, b) = (cloud.ingest.url(), replica.url());
    let read = cloud.tenant.read_token.clone();
    let apis = [cloud.ingest_api(), Api::new(&b, &cloud.tenant.ingest_token)];
    const TURNS: i64 = 3;

    // Phase 1: a subscriber on each replica, a third on A that will move; batches to both replicas.
    let mut on_a = Subscriber::open(&a, &read, None).await.unwrap();
    let mut on_b = Subscriber::open(&b, &read, None).await.unwrap();
    let mut mover = Subscriber::open(&a, &read, None).await.unwrap();
    let first = sessions("s1", 10);
    post_sessions(&apis, &first, TURNS as u64).await.unwrap();
    for s in [&mut on_a, &mut on_b, &mut mover] {
        s.until(|got| complete(got, &first, TURNS)).await.unwrap();
    }
    // The mover leaves (a reconnect), remembering the last id it saw.
    let last_seen = mover.got.last().unwrap().id.clone();
    let seen_by_mover = std::mem::take(&mut mover.got);
    drop(mover);

    // Phase 2: more batches while the mover is away; then it resumes on the OTHER replica.
    let second = sessions("s2", 6);
    post_sessions(&apis, &second, TURNS as u64).await.unwrap();
    let mut moved = Subscriber::open(&b, &read, Some(&last_seen)).await.unwrap();
    assert_eq!(moved.start, last_seen, "ready names the resume position");
    moved
        .until(|got| complete(got, &second, TURNS))
        .await
        .unwrap();

    // Phase 3: replica A is SIGKILLed; its subscriber resumes on B; batches go to B only.
    on_a.until(|got| complete(got, &second, TURNS))
        .await
        .unwrap();
    cloud.ingest.kill();
    let err = loop {
        match on_a.next(Duration::from_secs(30)).await {
            Ok(Some(e)) => on_a.got.push(e),
            Ok(None) => panic!("A's stream neither ended nor sent anything after A died"),
            Err(e) => break e,
        }
    };
    let _ = err; // the stream ended with the process
    let a_last = on_a.got.last().unwrap().id.clone();
    let mut a_moved = Subscriber::open(&b, &read, Some(&a_last)).await.unwrap();
    let third = sessions("s3", 4);
    post_sessions(&apis[1..], &third, TURNS as u64)
        .await
        .unwrap();
    let all: Vec<String> = first.iter().chain(&second).chain(&third).cloned().collect();
    on_b.until(|got| complete(got, &all, TURNS)).await.unwrap();
    a_moved
        .until(|got| complete(got, &third, TURNS))
        .await
        .unwrap();
    moved
        .until(|got| complete(got, &third, TURNS))
        .await
        .unwrap();
    // Until a whole pass brings nothing new to any of them (late coalesced usage totals).
    loop {
        let before = on_b.got.len() + a_moved.got.len() + moved.got.len();
        for s in [&mut on_b, &mut a_moved, &mut moved] {
            s.settle(Duration::from_millis(1500)).await.unwrap();
        }
        if on_b.got.len() + a_moved.got.len() + moved.got.len() == before {
            break;
        }
    }

    // B's subscriber saw everything once, in stream order: one first transition (to `active`) per
    // session, and usage totals that end at the batch's sums.
    let reference = &on_b.got;
    let ids: Vec<(i64, i64)> = reference.iter().map(|e| position(&e.id)).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "positions strictly increase: {ids:?}"
    );
    for s in &all {
        let firsts: Vec<&Sse> = reference
            .iter()
            .filter(|e| e.event == "status" && e.data["session_id"] == s.as_str())
            .collect();
        assert_eq!(firsts.len(), 1, "{s}: {firsts:?}");
        assert_eq!(firsts[0].data["to"], "active", "{s}");
        assert_eq!(firsts[0].data["seq"], 0, "{s}");
        let usage = reference
            .iter()
            .rfind(|e| e.event == "usage" && e.data["session_id"] == s.as_str())
            .unwrap();
        assert_eq!(usage.data["llm_calls"], TURNS, "{s}");
        assert_eq!(usage.data["input_tokens"], 100 * TURNS, "{s}");
    }
    // The same events in the same order on every replica and across every move: A's subscriber before
    // A died + after it moved to B = the mover on A + the mover on B = B's subscriber.
    let a_whole: Vec<Sse> = on_a.got.iter().chain(&a_moved.got).cloned().collect();
    let mover_whole: Vec<Sse> = seen_by_mover.iter().chain(&moved.got).cloned().collect();
    let key = |v: &[Sse]| -> Vec<(String, String, String)> {
        v.iter()
            .map(|e| (e.id.clone(), e.event.clone(), e.data.to_string()))
            .collect()
    };
    assert_eq!(
        key(&a_whole),
        key(reference),
        "A's subscriber, then on B after A died"
    );
    assert_eq!(
        key(&mover_whole),
        key(reference),
        "the mover: A, then B with Last-Event-ID"
    );
    drop(replica);
}

/// The same resume rule on both streams, the ingest's and the agent's: a malformed `Last-Event-ID` is
/// a 400; a well-formed one the stream does not hold (ahead of everything it gave; on the agent also
/// another outbox file's) gets `reset` first — reload with the REST reads, then apply what follows —
/// and then the events that follow; the stream's own position gets `ready`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_streams_answer_a_position_they_do_not_hold_with_reset() {
    let cloud = Cloud::start().await.unwrap();
    let agent = tests::agent::Agent::start(&cloud.dir.path().join("agent"), None)
        .await
        .unwrap();
    let streams = [
        (
            "ingest",
            format!("{}/v1/stream", cloud.ingest.url()),
            cloud.tenant.read_token.clone(),
        ),
        (
            "agent",
            format!("http://{}/v1/stream", agent.addr),
            agent.token.clone(),
        ),
    ];
    // Each stream's own position.
    let mut own = vec![];
    for (_, url, token) in &streams {
        let mut s = SseClient::open(url, token, None).await.unwrap();
        let first = s.next(Duration::from_secs(20)).await.unwrap();
        assert_eq!(first.event, "ready");
        own.push(first.id);
    }
    for (i, (name, url, token)) in streams.iter().enumerate() {
        let malformed = SseClient::open(url, token, Some("not a position"))
            .await
            .err()
            .map(|r| r.status().as_u16());
        assert_eq!(malformed, Some(400), "{name}: a malformed Last-Event-ID");
        let not_held = match *name {
            "ingest" => vec!["99999999999999-1".to_string()],
            _ => {
                let epoch = own[i].split_once('-').unwrap().0;
                let other = if epoch == "deadbeef" {
                    "deadbee0"
                } else {
                    "deadbeef"
                };
                vec![format!("{epoch}-99999999999"), format!("{other}-1")]
            }
        };
        for asked in not_held {
            let mut s = SseClient::open(url, token, Some(&asked))
                .await
                .unwrap_or_else(|r| panic!("{name} refused {asked}: {}", r.status()));
            let first = s.next(Duration::from_secs(20)).await.unwrap();
            assert_eq!(
                first.event, "reset",
                "{name} answered {asked} with {first:?}"
            );
        }
        let mut s = SseClient::open(url, token, Some(&own[i])).await.unwrap();
        let first = s.next(Duration::from_secs(20)).await.unwrap();
        assert_eq!(
            (first.event.as_str(), first.id.as_str()),
            ("ready", own[i].as_str()),
            "{name}"
        );
    }
    // After a reset, the events that follow arrive (a session's usage, on both).
    let mut readers = vec![];
    for (name, url, token) in &streams {
        let ahead = match *name {
            "ingest" => "99999999999999-1".to_string(),
            _ => "deadbee1-1".to_string(),
        };
        let mut s = SseClient::open(url, token, Some(&ahead)).await.unwrap();
        assert_eq!(
            s.next(Duration::from_secs(20)).await.unwrap().event,
            "reset"
        );
        readers.push(s);
    }
    let turns = fixture::synthetic_turns("s-after-reset", 0, 3);
    let (code, _) = agent.post_events(turns).await.unwrap();
    assert_eq!(code, 200);
    let canonical = fixture::synthetic_canonical("s-after-reset", 0, 3);
    let (code, body) = cloud
        .ingest_api()
        .post_batch(&fixture::batch_body(&canonical, DEVICE))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    for ((name, _, _), s) in streams.iter().zip(readers.iter_mut()) {
        let got = s
            .until(Duration::from_secs(30), |e| {
                e.event == "usage" && e.data["session_id"] == "s-after-reset"
            })
            .await;
        assert!(got.is_some(), "{name}: nothing after the reset");
    }
}
