//! The push cadence through the real loop (`run_until_stopped`), a real outbox and a fake ingest that
//! records when each request arrived: a trickle is coalesced, the size trigger and shutdown send at once,
//! the heartbeat rides in batches instead of going alone, and no event is lost or sent twice.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use apiary_schema::{Batch, BatchResponse, EventKind};
use tokio_util::sync::CancellationToken;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::tests::{batch_of, outbox_with_turns, settings, turns, Fixture};
use super::*;

/// A fake ingest accepting every batch, keeping each one with its arrival time.
struct Recorder {
    server: MockServer,
    seen: Arc<Mutex<Vec<(Instant, Batch)>>>,
}

impl Recorder {
    async fn start() -> Recorder {
        Recorder::asking(None).await
    }

    /// A fake ingest whose answers ask for pushes every `interval_ms`.
    async fn asking(interval_ms: Option<u64>) -> Recorder {
        let server = MockServer::start().await;
        let seen: Arc<Mutex<Vec<(Instant, Batch)>>> = Arc::default();
        let log = seen.clone();
        Mock::given(method("POST"))
            .respond_with(move |req: &Request| {
                let batch = batch_of(req);
                let n = batch.events.len() as u64;
                log.lock().unwrap().push((Instant::now(), batch));
                ResponseTemplate::new(200).set_body_json(BatchResponse {
                    accepted: n,
                    duplicates: 0,
                    rejected: vec![],
                    quota: None,
                    push_interval_ms: interval_ms,
                })
            })
            .mount(&server)
            .await;
        Recorder { server, seen }
    }

    /// Waits (up to 5 s) until a request was answered — the heartbeat at start — and its answer read.
    async fn answered_once(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.seen.lock().unwrap().is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// Batches holding outbox events (not only a heartbeat): (arrival, their outbox event ids).
    fn event_batches(&self) -> Vec<(Instant, Vec<uuid::Uuid>)> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .map(|(at, b)| {
                let ids = b.events.iter().filter(|e| !is_beat(e)).map(|e| e.event_id);
                (*at, ids.collect::<Vec<_>>())
            })
            .filter(|(_, ids)| !ids.is_empty())
            .collect()
    }

    /// (standalone heartbeat requests, heartbeats that rode in a batch).
    fn heartbeats(&self) -> (usize, usize) {
        let seen = self.seen.lock().unwrap();
        let beats = |b: &Batch| b.events.iter().filter(|e| is_beat(e)).count();
        let alone = seen
            .iter()
            .filter(|(_, b)| b.events.len() == beats(b))
            .map(|(_, b)| beats(b))
            .sum();
        let ridden = seen
            .iter()
            .filter(|(_, b)| b.events.len() > beats(b))
            .map(|(_, b)| beats(b))
            .sum();
        (alone, ridden)
    }
}

fn is_beat(e: &apiary_schema::CanonicalEvent) -> bool {
    e.kind == EventKind::AgentHeartbeat
}

fn cadence(interval_ms: u64, events: usize, heartbeat_secs: u64) -> PushSettings {
    PushSettings {
        coalesce_interval_ms: interval_ms,
        coalesce_jitter_ms: 0,
        coalesce_events: events,
        heartbeat_interval_secs: heartbeat_secs,
        poll_interval_ms: 20,
        ..settings()
    }
}

fn start(f: &Fixture, s: PushSettings) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let pusher = Arc::new(Pusher::new(f.outbox.clone(), s).unwrap());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(pusher.run_until_stopped(shutdown.clone()));
    (shutdown, task)
}

async fn delivered(f: &Fixture) -> u64 {
    f.outbox.status().await.unwrap().stored.counters.delivered
}

/// Waits until `n` events are delivered, or 10 s.
async fn until_delivered(f: &Fixture, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while delivered(f).await < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop(shutdown: CancellationToken, task: tokio::task::JoinHandle<()>) {
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops promptly")
        .unwrap();
}

/// Every submitted event arrived exactly once, and the outbox's counters agree.
async fn assert_each_once(f: &Fixture, ingest: &Recorder, n: usize) {
    let ids: Vec<_> = ingest
        .event_batches()
        .into_iter()
        .flat_map(|(_, i)| i)
        .collect();
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!((ids.len(), unique.len()), (n, n), "sent once each");
    let c = f.outbox.status().await.unwrap().stored.counters;
    assert_eq!((c.delivered, c.pending), (n as u64, 0));
    assert!(c.balanced());
}

#[tokio::test]
async fn a_trickle_waits_for_the_interval_and_goes_as_one_batch() {
    let ingest = Recorder::start().await;
    let f = outbox_with_turns(0, Some(&ingest.server.uri())).await;
    let (shutdown, task) = start(&f, cadence(1_500, 100, 3600));
    let first = Instant::now();
    for i in 0..5 {
        f.outbox.submit(turns(i..i + 1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert!(
        ingest.event_batches().is_empty(),
        "nothing before the oldest waited the interval"
    );
    until_delivered(&f, 5).await;
    let batches = ingest.event_batches();
    assert_eq!(batches.len(), 1, "one batch for the trickle");
    assert_eq!(batches[0].1.len(), 5);
    let waited = batches[0].0 - first;
    assert!(waited >= Duration::from_millis(1_400), "{waited:?}");
    stop(shutdown, task).await;
    assert_each_once(&f, &ingest, 5).await;
}

fn bounded(interval_ms: u64, floor_ms: u64, ceiling_ms: u64) -> PushSettings {
    PushSettings {
        min_interval_ms: floor_ms,
        max_interval_ms: ceiling_ms,
        ..cadence(interval_ms, 100, 3600)
    }
}

#[tokio::test]
async fn the_interval_the_ingest_asks_for_replaces_the_configured_one() {
    // Configured to wait 100 ms; the ingest's answers (the heartbeat at start is the first) ask for 1.5 s.
    let ingest = Recorder::asking(Some(1_500)).await;
    let f = outbox_with_turns(0, Some(&ingest.server.uri())).await;
    let (shutdown, task) = start(&f, bounded(100, 100, 10_000));
    ingest.answered_once().await;
    let first = Instant::now();
    for i in 0..5 {
        f.outbox.submit(turns(i..i + 1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert!(
        ingest.event_batches().is_empty(),
        "the ingest's interval holds, not the configured 100 ms"
    );
    until_delivered(&f, 5).await;
    let batches = ingest.event_batches();
    assert_eq!(batches.len(), 1, "one batch for the trickle");
    let waited = batches[0].0 - first;
    assert!(waited >= Duration::from_millis(1_400), "{waited:?}");
    stop(shutdown, task).await;
    assert_each_once(&f, &ingest, 5).await;
}

#[tokio::test]
async fn the_agents_ceiling_bounds_the_interval_the_ingest_asks_for() {
    // The ingest asks for a minute; this agent waits 400 ms at most.
    let ingest = Recorder::asking(Some(60_000)).await;
    let f = outbox_with_turns(0, Some(&ingest.server.uri())).await;
    let (shutdown, task) = start(&f, bounded(100, 100, 400));
    ingest.answered_once().await;
    let first = Instant::now();
    f.outbox.submit(turns(0..1)).await.unwrap();
    until_delivered(&f, 1).await;
    let batches = ingest.event_batches();
    assert_eq!(batches.len(), 1);
    let waited = batches[0].0 - first;
    assert!(
        waited >= Duration::from_millis(350) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    stop(shutdown, task).await;
    assert_each_once(&f, &ingest, 1).await;
}

#[tokio::test]
async fn interval_zero_sends_each_poll_at_once_as_before() {
    let ingest = Recorder::start().await;
    let f = outbox_with_turns(0, Some(&ingest.server.uri())).await;
    let (shutdown, task) = start(&f, cadence(0, 100, 3600));
    for i in 0..3 {
        f.outbox.submit(turns(i..i + 1)).await.unwrap();
        until_delivered(&f, i as u64 + 1).await;
    }
    assert_eq!(ingest.event_batches().len(), 3, "one batch per event");
    stop(shutdown, task).await;
    assert_each_once(&f, &ingest, 3).await;
}

#[tokio::test]
async fn the_size_trigger_sends_at_once_and_shutdown_sends_what_waits() {
    let ingest = Recorder::start().await;
    let f = outbox_with_turns(0, Some(&ingest.server.uri())).await;
    // A minute's interval: only the size trigger or shutdown can send anything in this test.
    let (shutdown, task) = start(&f, cadence(60_000, 10, 3600));
    f.outbox.submit(turns(0..4)).await.unwrap();
    f.outbox.submit(turns(4..10)).await.unwrap();
    until_delivered(&f, 10).await;
    assert_eq!(
        delivered(&f).await,
        10,
        "sent at 10 events, long before the interval"
    );
    f.outbox.submit(turns(10..13)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(delivered(&f).await, 10, "3 wait for more");
    stop(shutdown, task).await;
    let sizes: Vec<usize> = ingest
        .event_batches()
        .iter()
        .map(|(_, i)| i.len())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 13);
    assert_eq!(
        sizes.last(),
        Some(&3),
        "shutdown sent the waiting 3: {sizes:?}"
    );
    assert_each_once(&f, &ingest, 13).await;
}

#[tokio::test]
async fn a_large_backlog_goes_in_full_batches_without_waiting() {
    let ingest = Recorder::start().await;
    let f = outbox_with_turns(350, Some(&ingest.server.uri())).await;
    let (shutdown, task) = start(&f, cadence(60_000, 1_000, 3600));
    until_delivered(&f, 300).await;
    let sizes: Vec<usize> = ingest
        .event_batches()
        .iter()
        .map(|(_, i)| i.len())
        .collect();
    assert_eq!(
        sizes,
        [100, 100, 100],
        "full batches at once; the rest of 50 waits"
    );
    stop(shutdown, task).await;
    assert_each_once(&f, &ingest, 350).await;
}

#[tokio::test]
async fn the_heartbeat_rides_in_batches_and_the_standalone_one_is_skipped() {
    let ingest = Recorder::start().await;
    let f = outbox_with_turns(0, Some(&ingest.server.uri())).await;
    let (shutdown, task) = start(&f, cadence(200, 100, 2));
    // 4.5 s of a trickle: a batch about every 250 ms, so none goes without a heartbeat due for 2 s.
    let mut n = 0;
    let until = Instant::now() + Duration::from_millis(4_500);
    while Instant::now() < until {
        f.outbox.submit(turns(n..n + 1)).await.unwrap();
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until_delivered(&f, n as u64).await;
    stop(shutdown, task).await;
    let (alone, ridden) = ingest.heartbeats();
    assert_eq!(alone, 1, "only the one at start, before any batch");
    assert!(ridden >= 2, "riding every half interval or so: {ridden}");
    assert!(ridden <= 5, "not in every batch: {ridden}");
    let beats: Vec<Instant> = (ingest.seen.lock().unwrap().iter())
        .filter(|(_, b)| b.events.iter().any(is_beat))
        .map(|(at, _)| *at)
        .collect();
    for pair in beats.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_millis(900), "{beats:?}");
        assert!(
            pair[1] - pair[0] <= Duration::from_millis(3_000),
            "{beats:?}"
        );
    }
    assert_each_once(&f, &ingest, n).await;
}

#[tokio::test]
async fn a_riding_heartbeat_is_neither_settled_nor_counted() {
    let ingest = MockServer::start().await;
    // Accepts everything, rejecting the heartbeat: its verdict must not reach the outbox or the outcome.
    Mock::given(method("POST"))
        .respond_with(|req: &Request| {
            let b = batch_of(req);
            let beat = b.events.iter().find(|e| is_beat(e)).unwrap();
            ResponseTemplate::new(200).set_body_json(BatchResponse {
                accepted: b.events.len() as u64 - 1,
                duplicates: 0,
                rejected: vec![apiary_schema::Rejection {
                    event_id: beat.event_id,
                    reason: "no".into(),
                }],
                quota: None,
                push_interval_ms: None,
            })
        })
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(3, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    let beat = pusher.heartbeat_event().await.unwrap();
    let claimed = f.outbox.claim(settings().limits()).await.unwrap();
    let (outcome, carried) = pusher.deliver_carrying(claimed, Some(&beat)).await.unwrap();
    assert!(carried);
    assert_eq!(
        outcome,
        PushOutcome::Sent {
            events: 3,
            accepted: 3,
            duplicates: 0,
            rejected: 0
        }
    );
    let sent = batch_of(&super::tests::posts(&ingest).await[0]);
    assert_eq!(sent.events.len(), 4);
    assert_eq!(
        sent.events[3].event_id, beat.event_id,
        "last, after the batch's own"
    );
    let s = f.outbox.status().await.unwrap().stored;
    assert_eq!((s.counters.delivered, s.dead_letters), (3, 0));
    assert!(s.counters.balanced());
}

#[tokio::test]
async fn a_refused_batch_carrying_the_heartbeat_goes_again_whole_without_it() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(|req: &Request| {
            let b = batch_of(req);
            if b.events.iter().any(is_beat) {
                ResponseTemplate::new(413)
            } else {
                ResponseTemplate::new(200).set_body_json(BatchResponse {
                    accepted: b.events.len() as u64,
                    duplicates: 0,
                    rejected: vec![],
                    quota: None,
                    push_interval_ms: None,
                })
            }
        })
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(1, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    let beat = pusher.heartbeat_event().await.unwrap();
    let claimed = f.outbox.claim(settings().limits()).await.unwrap();
    let (outcome, carried) = pusher.deliver_carrying(claimed, Some(&beat)).await.unwrap();
    assert!(!carried, "the heartbeat did not get through");
    assert_eq!(
        outcome,
        PushOutcome::Sent {
            events: 1,
            accepted: 1,
            duplicates: 0,
            rejected: 0
        },
        "the one event is not dead-lettered for the heartbeat's refusal"
    );
    let requests = super::tests::posts(&ingest).await;
    let sizes: Vec<usize> = requests.iter().map(|r| batch_of(r).events.len()).collect();
    assert_eq!(
        sizes,
        [2, 1],
        "once with the heartbeat, once without; no split loop"
    );
    let s = f.outbox.status().await.unwrap().stored;
    assert_eq!((s.counters.delivered, s.dead_letters), (1, 0));
}
