//! Push tests against a fake ingest (wiremock) and a real outbox in a temporary directory.

use std::io::Read;
use std::sync::Arc;

use apiary_schema::{Batch, BatchResponse, Policy, ProcessOptions};
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::*;
use crate::identity::IdentityDefaults;
use crate::outbox::{Item, OutboxSettings};

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) outbox: Outbox,
    token_file: std::path::PathBuf,
}

/// An outbox holding `n` redacted LLM turns; sync enabled against `endpoint` when given.
pub(super) async fn outbox_with_turns(n: usize, endpoint: Option<&str>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let policy = Policy::default_policy();
    let outbox = Outbox::open(
        &dir.path().join("outbox.db"),
        OutboxSettings::default(),
        IdentityDefaults::default(),
        &policy,
    )
    .unwrap();
    let token_file = dir.path().join("token");
    crate::private::write_atomic(&token_file, b"tok-123\n").unwrap();
    if let Some(endpoint) = endpoint {
        let enable = SyncChange::Enable {
            endpoint: endpoint.into(),
            token_file: token_file.display().to_string(),
            include_backlog: false,
        };
        outbox.set_sync(enable).await.unwrap();
    }
    outbox.submit(turns(0..n)).await.unwrap();
    Fixture {
        _dir: dir,
        outbox,
        token_file,
    }
}

/// Redacted LLM turns of `session_a` with these `seq`s (distinct seqs, distinct event ids).
pub(super) fn turns(seqs: std::ops::Range<usize>) -> Vec<Item> {
    let policy = Policy::default_policy();
    let opts = ProcessOptions::new(&policy);
    seqs.map(|i| {
        let native = serde_json::json!({"type": "llm_turn_complete", "stream_id": "queen", "node_id": "queen",
            "execution_id": "session_a", "data": {"model": "claude-sonnet-4-5-20250929", "input_tokens": 100, "output_tokens": 7,
            "cached_tokens": 0, "cache_creation_tokens": 0, "cost_usd": 0.001}, "timestamp": "2026-11-03T10:00:00.000001", "seq": i});
        Item::from_outcome(&apiary_schema::process_value(&native, &opts).unwrap())
    })
    .collect()
}

pub(super) fn settings() -> PushSettings {
    PushSettings {
        batch_max_events: 100,
        request_timeout_ms: 2_000,
        connect_timeout_ms: 500,
        ..PushSettings::default()
    }
}

/// The POSTs the fake ingest received (batches and heartbeats; the loop's `GET /v1/whoami` left out).
pub(super) async fn posts(ingest: &MockServer) -> Vec<Request> {
    ingest
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "POST")
        .collect()
}

pub(super) fn batch_of(req: &Request) -> Batch {
    let mut text = String::new();
    flate2::read::GzDecoder::new(&req.body[..])
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn accept_all(req: &Request) -> ResponseTemplate {
    let n = batch_of(req).events.len() as u64;
    ResponseTemplate::new(200).set_body_json(BatchResponse {
        accepted: n,
        duplicates: 0,
        rejected: vec![],
        quota: None,
        push_interval_ms: None,
    })
}

/// The dead letters as (event id, reason, whether the redacted event was kept), oldest first.
async fn dead_letters(outbox: &Outbox) -> Vec<(uuid::Uuid, String, bool)> {
    let mut letters = outbox.dead_letters(1000).await.unwrap();
    letters.reverse();
    letters
        .into_iter()
        .map(|d| (d.event_id.unwrap_or_default(), d.reason, d.body.is_some()))
        .collect()
}

async fn counters(outbox: &Outbox) -> crate::outbox::Counters {
    outbox.status().await.unwrap().stored.counters
}

#[tokio::test]
async fn push_sends_a_gzip_batch_with_the_bearer_token_and_settles_it() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/batches"))
        .and(header("authorization", "Bearer tok-123"))
        .and(header("content-encoding", "gzip"))
        .respond_with(accept_all)
        .expect(1)
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(5, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    let outcome = pusher.try_push_once().await.unwrap();
    assert_eq!(
        outcome,
        PushOutcome::Sent {
            events: 5,
            accepted: 5,
            duplicates: 0,
            rejected: 0
        }
    );
    let batch = batch_of(&posts(&ingest).await[0]);
    assert_eq!(batch.policy_hash, Policy::default_policy().hash());
    assert_eq!(
        batch.sessions.len(),
        1,
        "the session's identity binding travels with the batch"
    );
    let c = counters(&f.outbox).await;
    assert_eq!((c.delivered, c.pending), (5, 0));
    assert!(c.balanced());
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Idle(Idle::NothingDue)
    );
}

#[tokio::test]
async fn push_backs_off_on_503_and_honours_retry_after() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).insert_header("retry-after", "120"))
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(3, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    match pusher.try_push_once().await.unwrap() {
        PushOutcome::Backoff {
            events: 3, delay, ..
        } => assert!(delay >= Duration::from_secs(120), "{delay:?}"),
        other => panic!("expected backoff, got {other:?}"),
    }
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Idle(Idle::NothingDue),
        "not due before the delay"
    );
    let c = counters(&f.outbox).await;
    assert_eq!(
        (c.pending, c.delivered),
        (3, 0),
        "rows stay until the ingest confirms them"
    );
    let last = f.outbox.status().await.unwrap().stored.last_push.unwrap();
    assert_eq!(last["result"], "backoff");
}

#[tokio::test]
async fn push_retries_when_the_ingest_is_unreachable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let f = outbox_with_turns(2, Some(&format!("http://127.0.0.1:{port}"))).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    assert!(matches!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Backoff { events: 2, .. }
    ));
    assert_eq!(counters(&f.outbox).await.pending, 2);
}

#[tokio::test]
async fn push_splits_a_batch_the_ingest_finds_too_large() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(|req: &Request| {
            if batch_of(req).events.len() > 2 {
                ResponseTemplate::new(413)
            } else {
                accept_all(req)
            }
        })
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(7, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Sent {
            events: 7,
            accepted: 7,
            duplicates: 0,
            rejected: 0
        }
    );
    assert_eq!(counters(&f.outbox).await.delivered, 7);
}

#[tokio::test]
async fn push_isolates_and_dead_letters_the_one_event_a_4xx_refuses() {
    let ingest = MockServer::start().await;
    let f = outbox_with_turns(6, None).await;
    let poison = {
        let claimed = f
            .outbox
            .raw_read_for_test(|c| {
                c.query_row(
                    "SELECT event_id FROM events ORDER BY seq LIMIT 1 OFFSET 3",
                    [],
                    |r| r.get::<_, Vec<u8>>(0),
                )
            })
            .await
            .unwrap();
        uuid::Uuid::from_slice(&claimed).unwrap()
    };
    Mock::given(method("POST"))
        .respond_with(move |req: &Request| {
            if batch_of(req).events.iter().any(|e| e.event_id == poison) {
                ResponseTemplate::new(422)
                    .set_body_string(r#"{"error":{"code":"invalid","message":"bad event"}}"#)
            } else {
                accept_all(req)
            }
        })
        .mount(&ingest)
        .await;
    let enable = SyncChange::Enable {
        endpoint: ingest.uri(),
        token_file: f.token_file.display().to_string(),
        include_backlog: true,
    };
    f.outbox.set_sync(enable).await.unwrap();
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Sent {
            events: 6,
            accepted: 5,
            duplicates: 0,
            rejected: 1
        }
    );
    let status = f.outbox.status().await.unwrap().stored;
    assert_eq!(
        (
            status.counters.delivered,
            status.counters.rejected,
            status.dead_letters
        ),
        (5, 1, 1)
    );
    assert!(status.counters.balanced());
    assert_eq!(
        dead_letters(&f.outbox).await,
        [(poison, "HTTP 422: bad event".to_string(), true)],
        "the one refused event, with the ingest's reason"
    );
}

#[tokio::test]
async fn per_event_rejections_go_to_the_dead_letter_table() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(|req: &Request| {
            let b = batch_of(req);
            let rejected = vec![apiary_schema::Rejection {
                event_id: b.events[0].event_id,
                reason: "field outside the policy: data.x".into(),
            }];
            ResponseTemplate::new(200).set_body_json(BatchResponse {
                accepted: b.events.len() as u64 - 1,
                duplicates: 0,
                rejected,
                quota: None,
                push_interval_ms: None,
            })
        })
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(4, Some(&ingest.uri())).await;
    let first = f
        .outbox
        .raw_read_for_test(|c| {
            c.query_row(
                "SELECT event_id FROM events ORDER BY seq LIMIT 1",
                [],
                |r| r.get::<_, Vec<u8>>(0),
            )
        })
        .await
        .unwrap();
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Sent {
            events: 4,
            accepted: 3,
            duplicates: 0,
            rejected: 1
        }
    );
    let c = counters(&f.outbox).await;
    assert_eq!((c.delivered, c.rejected, c.pending), (3, 1, 0));
    assert_eq!(
        dead_letters(&f.outbox).await,
        [(
            uuid::Uuid::from_slice(&first).unwrap(),
            "field outside the policy: data.x".to_string(),
            true
        )]
    );
}

#[tokio::test]
async fn push_pauses_sync_on_401_instead_of_burning_retries() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_string(r#"{"error":{"code":"unauthorized","message":"token revoked"}}"#),
        )
        .expect(1)
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(3, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    assert!(
        matches!(pusher.try_push_once().await.unwrap(), PushOutcome::Paused { reason } if reason.contains("token revoked"))
    );
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Idle(Idle::Paused)
    );
    let status = f.outbox.status().await.unwrap().stored;
    assert_eq!(status.sync.paused_reason.as_deref(), Some(REAUTHENTICATE));
    assert_eq!(status.counters.pending, 3, "nothing is lost while paused");
}

#[tokio::test]
async fn a_stored_endpoint_the_rules_refuse_releases_its_rows_and_pauses_sync() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(accept_all)
        .mount(&ingest)
        .await;
    // Stored as an older agent (or a hand-edited outbox) could have it: the API refuses both now.
    for endpoint in ["ftp://127.0.0.1/", "http://203.0.113.9:8080"] {
        let f = outbox_with_turns(3, Some(endpoint)).await;
        let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
        let outcome = pusher.try_push_once().await.unwrap();
        assert!(
            matches!(&outcome, PushOutcome::Paused { reason } if reason.contains(endpoint)),
            "{endpoint}: {outcome:?}"
        );
        let status = f.outbox.status().await.unwrap().stored;
        assert_eq!(status.sync.paused_reason.as_deref(), Some(INVALID_ENDPOINT));
        // Enabling again with a good endpoint sends the rows at once: none is left claimed.
        let enable = SyncChange::Enable {
            endpoint: ingest.uri(),
            token_file: f.token_file.display().to_string(),
            include_backlog: false,
        };
        f.outbox.set_sync(enable).await.unwrap();
        assert!(matches!(
            pusher.try_push_once().await.unwrap(),
            PushOutcome::Sent { events: 3, .. }
        ));
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_token_file_others_can_read_pauses_sync_instead_of_being_sent() {
    use std::os::unix::fs::PermissionsExt;
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(accept_all)
        .expect(0)
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(2, Some(&ingest.uri())).await;
    std::fs::set_permissions(&f.token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    let outcome = pusher.try_push_once().await.unwrap();
    assert!(
        matches!(&outcome, PushOutcome::Paused { reason } if reason.contains("chmod 600")),
        "{outcome:?}"
    );
    let status = f.outbox.status().await.unwrap().stored;
    assert_eq!(status.sync.paused_reason.as_deref(), Some(REAUTHENTICATE));
    assert_eq!(status.counters.pending, 2);
}

#[tokio::test]
async fn nothing_reaches_the_ingest_while_sync_is_off() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(accept_all)
        .mount(&ingest)
        .await;
    // The outbox knows the mock's endpoint and token: consent was given once (a push goes through, so the
    // wiring works), then withdrawn.
    let f = outbox_with_turns(3, Some(&ingest.uri())).await;
    let pusher = Arc::new(
        Pusher::new(
            f.outbox.clone(),
            PushSettings {
                heartbeat_interval_secs: 1,
                poll_interval_ms: 10,
                ..settings()
            },
        )
        .unwrap(),
    );
    assert!(matches!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Sent { events: 3, .. }
    ));
    let reached = posts(&ingest).await.len();
    assert_eq!(reached, 1, "the endpoint works while sync is on");
    f.outbox
        .set_sync(SyncChange::Disable { purge: false })
        .await
        .unwrap();
    let more = (100..110)
        .map(|i| {
            let policy = Policy::default_policy();
            let native = serde_json::json!({"type": "llm_turn_complete", "stream_id": "queen",
                "execution_id": "session_b", "data": {"model": "m", "input_tokens": 1},
                "timestamp": "2026-11-03T10:00:00.000001", "seq": i});
            Item::from_outcome(
                &apiary_schema::process_value(&native, &ProcessOptions::new(&policy)).unwrap(),
            )
        })
        .collect();
    f.outbox.submit(more).await.unwrap();
    assert_eq!(
        pusher.try_push_once().await.unwrap(),
        PushOutcome::Idle(Idle::SyncOff)
    );
    assert_eq!(
        pusher.send_heartbeat().await.unwrap().map(|_| ()),
        None,
        "not even a heartbeat"
    );
    // The loop itself, over three heartbeat intervals and many polls.
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(pusher.clone().run_until_stopped(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    shutdown.cancel();
    task.await.unwrap();
    let requests = posts(&ingest).await;
    assert_eq!(
        requests.len(),
        reached,
        "requests after consent was withdrawn"
    );
    let c = counters(&f.outbox).await;
    assert_eq!((c.delivered, c.pending), (3, 10));
}

#[tokio::test]
async fn the_loop_drains_the_backlog_sends_heartbeats_and_stops_on_shutdown() {
    let ingest = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(accept_all)
        .mount(&ingest)
        .await;
    let f = outbox_with_turns(250, Some(&ingest.uri())).await;
    let pusher = Arc::new(
        Pusher::new(
            f.outbox.clone(),
            PushSettings {
                heartbeat_interval_secs: 1,
                ..settings()
            },
        )
        .unwrap(),
    );
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(pusher.clone().run_until_stopped(shutdown.clone()));
    let heartbeats_of = |requests: Vec<wiremock::Request>| -> Vec<Batch> {
        requests
            .iter()
            // The loop also asks GET /v1/whoami for the tenant's colony secret.
            .filter(|r| r.method.as_str() == "POST")
            .map(batch_of)
            .filter(|b| {
                b.events
                    .iter()
                    .any(|e| e.kind == apiary_schema::EventKind::AgentHeartbeat)
            })
            .collect()
    };
    // Until the backlog is delivered and a heartbeat went out (the backlog can drain before the first
    // heartbeat on a loaded machine), or 10 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline
        && (counters(&f.outbox).await.delivered < 250
            || heartbeats_of(posts(&ingest).await).is_empty())
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops promptly")
        .unwrap();
    assert_eq!(counters(&f.outbox).await.delivered, 250);
    let heartbeats = heartbeats_of(posts(&ingest).await);
    assert!(!heartbeats.is_empty(), "a heartbeat went out");
    let hb = heartbeats[0]
        .events
        .iter()
        .find(|e| e.kind == apiary_schema::EventKind::AgentHeartbeat)
        .unwrap();
    assert!(
        Policy::default_policy().check(hb).is_ok(),
        "the heartbeat passes the ingest's policy check"
    );
    assert!(hb.check_envelope().is_ok());
}
