//! The local API, in process on port 0: auth, intake formats, bad input, limits, sessions, usage,
//! status, metrics and the sync toggle.

use crate::support;

use std::path::Path;

use apiary_agent::app::Application;
use apiary_agent::config::{Mode, Settings};
use apiary_agent::outbox::{ClaimLimits, Delivery, Outbox, Overflow};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub(crate) struct App {
    pub(crate) base: String,
    pub(crate) token: String,
    /// `DIR/settings.token`: the only token `PUT /v1/sync` accepts.
    pub(crate) settings_token: String,
    /// A private (0600) ingest token file, for enabling sync.
    pub(crate) token_file: String,
    pub(crate) outbox: Outbox,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub(crate) client: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl App {
    pub(crate) async fn spawn(tweak: impl FnOnce(&mut Settings)) -> App {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings {
            listen: "127.0.0.1:0".parse().unwrap(),
            zone: "UTC".into(),
            ..Settings::default()
        };
        settings.identity.user_id = Some("alice".into());
        settings.identity.tenant_id = Some("acme".into());
        tweak(&mut settings);
        let app = Application::build(dir.path(), settings).await.unwrap();
        let base = format!("http://{}", app.local_addr());
        let outbox = app.outbox().clone();
        let token = std::fs::read_to_string(dir.path().join("agent.token")).unwrap();
        let settings_token = std::fs::read_to_string(dir.path().join("settings.token")).unwrap();
        let token_file = dir.path().join("ingest.token");
        apiary_agent::private::write_atomic(&token_file, b"tok\n").unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(app.run_until_stopped(stop.clone()));
        App {
            base,
            token,
            settings_token,
            token_file: token_file.display().to_string(),
            outbox,
            stop,
            task,
            client: support::client(),
            _dir: dir,
        }
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `GET /metrics` as text.
    pub(crate) async fn metrics_text(&self) -> String {
        let r = self
            .client
            .get(format!("{}/metrics", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        r.text().await.unwrap()
    }

    pub(crate) async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
    }

    /// Stops the agent and hands over its data directory, to be looked at by another process.
    pub(crate) async fn stop_keeping_dir(self) -> tempfile::TempDir {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
        self._dir
    }
}

fn fixture(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/hive")
        .join(rel);
    std::fs::read(p).unwrap()
}

#[tokio::test]
async fn requests_without_the_token_get_401() {
    let app = App::spawn(|_| {}).await;
    let r = app
        .client
        .get(format!("{}/v1/status", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth("wrong")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
}

#[tokio::test]
async fn the_token_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let token = apiary_agent::http::load_or_create_token(dir.path()).unwrap();
    let mode = std::fs::metadata(dir.path().join("agent.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(token.len(), 64);
    assert_eq!(
        apiary_agent::http::load_or_create_token(dir.path()).unwrap(),
        token
    );
}

#[tokio::test]
async fn one_object_an_array_and_ndjson_are_all_accepted() {
    let app = App::spawn(|_| {}).await;
    let one = support::hive_turn("session_a", 1);
    let (s, b) = app.post("/v1/events", one.clone()).await;
    assert_eq!(
        (s, b["accepted"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{b}"
    );
    let pretty =
        serde_json::to_string_pretty(&serde_json::from_str::<Value>(&one).unwrap()).unwrap();
    let (s, b) = app.post("/v1/events", pretty).await;
    assert_eq!(
        (s, b["duplicates"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{b}"
    );
    let arr = format!(
        "[{}, {}]",
        support::hive_turn("session_a", 2),
        support::hive_turn("session_a", 3)
    );
    let (s, b) = app.post("/v1/events", arr).await;
    assert_eq!(
        (s, b["accepted"].as_u64()),
        (StatusCode::OK, Some(2)),
        "{b}"
    );
    let (s, b) = app
        .post(
            "/v1/events",
            fixture("day/event_logs/20261103_090000.jsonl"),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(b["events"], 367);
    let st = app.outbox.status().await.unwrap().stored;
    assert!(st.balanced);
    assert_eq!(st.counters.received, 1 + 1 + 2 + 367);
    app.stop().await;
}

#[tokio::test]
async fn bad_lines_get_per_line_errors_and_good_lines_are_kept() {
    // Air-gapped: no push loop, so no `outbox.dropped` report joins the pending events mid-test.
    let app = App::spawn(|s| s.mode = Mode::Airgapped).await;
    let (s, b) = app.post("/v1/events", fixture("bad_lines.jsonl")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_eq!(b["committed"], true);
    // 4 distinct durable events, but the trigger_fired line names no session (only the tailer knows it
    // from the file's directory), so over HTTP it is filtered as no_session; line 13 duplicates line 1.
    assert_eq!(
        (b["accepted"].as_u64(), b["duplicates"].as_u64()),
        (Some(3), Some(1)),
        "{b}"
    );
    let lines: Vec<u64> = b["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![2, 3, 5, 6, 7, 9, 14]);
    let text = b.to_string();
    assert!(!text.contains("zzcanary"), "an error leaks content: {text}");
    let st = app.outbox.status().await.unwrap().stored;
    assert_eq!((st.pending_events, st.dead_letters), (3, 7), "{st:?}");
    // With the session named in the query, the session-less trigger_fired line is kept too.
    let (s, b) = app
        .post(
            "/v1/events?session=session_20261103_101433_51be07d2",
            fixture("bad_lines.jsonl"),
        )
        .await;
    assert_eq!(
        (s, b["accepted"].as_u64()),
        (StatusCode::BAD_REQUEST, Some(1)),
        "{b}"
    );
    assert!(st.balanced);
    let dl = app.outbox.dead_letters(100).await.unwrap();
    assert!(dl
        .iter()
        .all(|d| d.body.is_none() && !d.reason.contains("zzcanary")));
    app.stop().await;
}

#[tokio::test]
async fn hostile_input_is_refused_clearly_without_losing_committed_events() {
    let app = App::spawn(|s| s.mode = Mode::Airgapped).await;
    let (s, _) = app
        .post("/v1/events", support::hive_turn("session_keep", 1))
        .await;
    assert_eq!(s, StatusCode::OK);
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let (s, b) = app.post("/v1/events", deep).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let deep_obj = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    let (s, b) = app.post("/v1/events", deep_obj).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(
        b["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("recursion limit"),
        "{b}"
    );
    let big = format!(
        "{}\n{{\"type\": \"tool_call_completed\", \"data\": {{\"result\": \"{}\"}}}}\n",
        support::hive_turn("session_keep", 2),
        "x".repeat(10 * 1024 * 1024)
    );
    let (s, b) = app.post("/v1/events", big).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(
        b["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("over the limit"),
        "{b}"
    );
    assert_eq!(b["accepted"], 1);
    let mut utf8 = support::hive_turn("session_keep", 3).into_bytes();
    utf8.extend_from_slice(b"\n{\"type\": \"\xff\xfe\"}\n");
    let (s, b) = app.post("/v1/events", utf8).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert!(
        b["errors"][0]["error"].as_str().unwrap().contains("UTF-8"),
        "{b}"
    );
    let wrong = r#"{"type": 5, "seq": "x"}"#;
    let (s, b) = app.post("/v1/events", wrong).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    let (s, _) = app.post("/v1/events", "").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let st = app.outbox.status().await.unwrap().stored;
    assert_eq!(st.pending_events, 3);
    assert!(st.balanced, "{:?}", st.counters);
    app.stop().await;
}

/// Values the ingest would refuse (tokens above 10^12, a negative or too large cost) are refused at intake,
/// in the line's verdict naming the field, never committed to be dead-lettered after a push; the good line
/// beside them is kept, and the counters stay balanced.
#[tokio::test]
async fn out_of_range_values_are_refused_at_intake_naming_the_field() {
    let app = App::spawn(|s| s.mode = Mode::Airgapped).await;
    let good = support::hive_turn("session_range", 1);
    let tokens = support::hive_turn("session_range", 2).replace("18250", "2000000000000");
    let cost = support::hive_turn("session_range", 3).replace("0.02958", "-0.5");
    let canonical = json!({
        "schema_version": 1, "event_id": "0b5c8a5e-8d0f-4a43-9d53-1f4b6f3c1a01", "type": "llm.turn",
        "occurred_at": "2026-11-03T10:15:09Z", "runtime": "hive", "session_id": "session_range",
        "agent_role": "queen",
        "native_type": "llm_turn_complete",
        "data": {"model": "claude-sonnet-4-5", "input_tokens": 10, "output_tokens": 1,
                 "cost_usd": 2000000.0}
    });
    let body = format!("{good}\n{tokens}\n{cost}\n{canonical}\n");
    let (s, b) = app.post("/v1/events", body).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_eq!(b["accepted"], 1, "{b}");
    let errors: Vec<(u64, String)> = b["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["line"].as_u64().unwrap(),
                e["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            (2, "data.input_tokens is out of range".to_string()),
            (3, "data.cost_usd is out of range".to_string()),
            (4, "data.cost_usd is out of range".to_string()),
        ],
        "{b}"
    );
    let st = app.outbox.status().await.unwrap().stored;
    assert_eq!((st.pending_events, st.dead_letters), (1, 3), "{st:?}");
    assert!(st.balanced, "{:?}", st.counters);
    app.stop().await;
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let app = App::spawn(|s| {
        s.intake.max_body_bytes = 64 * 1024;
        s.intake.max_line_bytes = 16 * 1024;
    })
    .await;
    let body = vec![b' '; 100 * 1024];
    let (s, b) = app.post("/v1/events", body).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{b}");
    assert_eq!(b["error"]["code"], "too_large");
    let stream = futures::stream::iter((0..100).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024])));
    let (s, _) = app
        .post("/v1/events", reqwest::Body::wrap_stream(stream))
        .await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    app.stop().await;
}

/// A body that arrives in two parts: `first` now, the rest when the returned sender is dropped or sent
/// to (no `Content-Length`, so the agent reserves the whole body limit for it).
fn held_body(first: &[u8], rest: Vec<u8>) -> (reqwest::Body, tokio::sync::oneshot::Sender<()>) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let head = futures::stream::iter([Ok::<_, std::io::Error>(first.to_vec())]);
    let tail = futures::stream::once(async move {
        let _ = rx.await;
        Ok::<_, std::io::Error>(rest)
    });
    use futures::StreamExt;
    (reqwest::Body::wrap_stream(head.chain(tail)), tx)
}

#[tokio::test]
async fn bodies_in_flight_are_bounded_a_request_waits_for_room_then_gets_503() {
    // One body of the largest size fills the budget.
    let app = App::spawn(|s| {
        s.intake.max_body_bytes = 64 * 1024;
        s.intake.max_line_bytes = 16 * 1024;
        s.intake.max_bytes_in_flight = 64 * 1024;
    })
    .await;
    let turn = |session: &str, seq| support::hive_turn(session, seq).into_bytes();
    let post = |body: reqwest::Body| {
        let req = app
            .client
            .post(format!("{}/v1/events", app.base))
            .bearer_auth(&app.token)
            .body(body);
        async move {
            let r = req.send().await.unwrap();
            let retry = r.headers().get("retry-after").cloned();
            (
                r.status(),
                retry,
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    // 1. A waiting request is admitted once the holder is answered.
    let (held, release) = held_body(b"\n", turn("session_held", 1));
    let holder = tokio::spawn(post(held));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let waiter = tokio::spawn(post(turn("session_waiter", 1).into()));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "admitted while the budget was full");
    release.send(()).unwrap();
    let (s, _, b) = holder.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{b}");
    let (s, _, b) = waiter.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{b}");

    // 2. A request that finds no room for 5 s is refused with 503 + Retry-After; nothing of it is kept.
    let (held, release) = held_body(b"\n", turn("session_held", 2));
    let holder = tokio::spawn(post(held));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("apiary_intake_body_bytes_in_flight 65536"),
        "{metrics}"
    );
    let started = std::time::Instant::now();
    let (s, retry, b) = post(turn("session_refused", 1).into()).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert_eq!(b["error"]["code"], "busy", "{b}");
    assert!(retry.is_some(), "no Retry-After");
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    release.send(()).unwrap();
    let (s, _, b) = holder.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{b}");
    let st = app.outbox.status().await.unwrap().stored;
    assert_eq!(
        st.pending_events, 3,
        "the refused request left nothing: {st:?}"
    );
    assert!(st.balanced, "{:?}", st.counters);
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains("apiary_intake_requests_total{result=\"busy\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("apiary_intake_body_bytes_in_flight 0"),
        "{metrics}"
    );
    app.stop().await;
}

async fn fill(app: &App, session: &str, rounds: u64) -> (u64, Option<reqwest::Response>) {
    let mut ok = 0;
    for r in 0..rounds {
        let body: Vec<String> = (0..100)
            .map(|i| support::hive_turn(session, r * 100 + i))
            .collect();
        let resp = app
            .client
            .post(format!("{}/v1/events", app.base))
            .bearer_auth(&app.token)
            .body(body.join("\n"))
            .send()
            .await
            .unwrap();
        if resp.status() != StatusCode::OK {
            return (ok, Some(resp));
        }
        ok += 100;
    }
    (ok, None)
}

#[tokio::test]
async fn a_full_outbox_answers_503_with_retry_after_under_reject() {
    let app = App::spawn(|s| s.outbox.max_bytes = 1024 * 1024).await;
    let (ok, refused) = fill(&app, "session_full", 100).await;
    let resp = refused.expect("the cap was never reached");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(resp.headers().get("retry-after").is_some());
    let st = app.outbox.status().await.unwrap();
    assert_eq!(
        st.stored.pending_events, ok,
        "every acknowledged event is kept"
    );
    assert_eq!(
        (st.stored.counters.refused, st.stored.balanced),
        (100, true),
        "the refused body's 100 events counted as refused"
    );
    assert!(
        st.stored.used_bytes <= 1024 * 1024 + 64 * 1024,
        "{}",
        st.stored.used_bytes
    );
    app.stop().await;
}

#[tokio::test]
async fn drop_oldest_evicts_counts_and_reports_the_drops() {
    let app = App::spawn(|s| {
        s.outbox.max_bytes = 1024 * 1024;
        s.outbox.overflow = Overflow::DropOldest;
        s.mode = Mode::Airgapped; // the drop report is made by this test, not by a push loop
    })
    .await;
    let (ok, refused) = fill(&app, "session_drop", 60).await;
    assert!(refused.is_none() && ok == 6000);
    let st = app.outbox.status().await.unwrap().stored;
    assert!(st.counters.evicted > 0 && st.balanced, "{:?}", st.counters);
    assert!(
        st.used_bytes <= 1024 * 1024 + 128 * 1024,
        "{}",
        st.used_bytes
    );
    let ids = app.outbox.enqueue_drop_report().await.unwrap();
    assert_eq!(ids.len(), 1);
    let st2 = app.outbox.status().await.unwrap().stored;
    assert!(st2.drops_unreported.values().all(|n| *n == 0));
    assert!(st2.balanced);
    app.stop().await;
}

#[tokio::test]
async fn sessions_are_bound_on_first_sight_and_by_registration() {
    let app = App::spawn(|_| {}).await;
    let reg = json!({"session_id": "session_q", "user_id": "bob", "parent_session_id": null});
    let (s, b) = app.post("/v1/sessions", reg.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    assert_eq!(
        (b["user_id"].as_str(), b["tenant_id"].as_str()),
        (Some("bob"), Some("acme"))
    );
    let (s, _) = app
        .post(
            "/v1/sessions",
            json!({"session_id": "session_q", "user_id": "eve"}).to_string(),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = app
        .post("/v1/sessions", json!({"session_id": "bad id!"}).to_string())
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // A worker of session_q: its events name the queen in colony_id.
    let worker = tests::events::hive_worker(
        "llm_turn_complete",
        "session_w",
        "session_q",
        tests::events::hive_day(),
        7,
        json!({"model": "m", "input_tokens": 100, "output_tokens": 5, "cached_tokens": 0,
               "cache_creation_tokens": 0, "cost_usd": 0.5}),
    );
    let queen = support::hive_turn("session_q", 1);
    let (s, _) = app.post("/v1/events", format!("{queen}\n{worker}")).await;
    assert_eq!(s, StatusCode::OK);
    let sync = json!({"enabled": true, "endpoint": "https://x", "token_file": app.token_file, "include_backlog": true});
    let r = app
        .client
        .put(format!("{}/v1/sync", app.base))
        .bearer_auth(&app.settings_token)
        .body(sync.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The app's own push loop races this claim (sync is on, towards an endpoint that cannot answer):
    // when it wins, its failed push lets the events go after a backoff, so claim until they are ours.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let claimed = loop {
        let claimed = app
            .outbox
            .claim(ClaimLimits {
                max_events: 10,
                max_bytes: 1 << 20,
            })
            .await
            .unwrap();
        if !claimed.events.is_empty() {
            break claimed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the events never became claimable: {:?}",
            claimed.idle
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let w = claimed
        .sessions
        .iter()
        .find(|b| b.session_id == "session_w")
        .unwrap();
    assert_eq!(w.parent_session_id.as_deref(), Some("session_q"));
    assert_eq!(
        w.user_id.as_deref(),
        Some("bob"),
        "a worker inherits its queen's user"
    );
    assert!(claimed.sessions.iter().any(|b| b.session_id == "session_q"));
    // Usage keeps working after the rows are delivered.
    let acks = claimed
        .ids()
        .into_iter()
        .map(|id| (id, Delivery::Delivered))
        .collect();
    app.outbox.ack(acks).await.unwrap();
    let (s, u) = app.get("/v1/usage/sessions/session_q").await;
    assert_eq!(s, StatusCode::OK, "{u}");
    assert_eq!(u["totals"]["input_tokens"], 18250 + 100);
    assert_eq!(u["totals"]["llm_calls"], 2);
    assert_eq!(u["sessions"].as_array().unwrap().len(), 2);
    let (s, _) = app.get("/v1/usage/sessions/nope").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    app.stop().await;
}

#[tokio::test]
async fn status_metrics_and_the_sync_toggle() {
    let app = App::spawn(|_| {}).await;
    app.post("/v1/events", support::hive_turn("session_m", 1))
        .await;
    let (s, st) = app.get("/v1/status").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(st["sync"]["enabled"], false);
    assert_eq!(st["mode"], "online");
    assert_eq!(st["counters"]["pending"], 1);
    assert_eq!(st["health"]["state"], "ok");
    let r = app
        .client
        .get(format!("{}/metrics", app.base))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(text.contains("apiary_outbox_pending_events 1"), "{text}");
    assert!(
        text.contains("apiary_outbox_events_total{outcome=\"received\"} 1"),
        "{text}"
    );
    let put = |v: Value| {
        app.client
            .put(format!("{}/v1/sync", app.base))
            .bearer_auth(&app.settings_token)
            .body(v.to_string())
            .send()
    };
    assert_eq!(
        put(json!({"enabled": true})).await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    let on = json!({"enabled": true, "endpoint": "https://x", "token_file": app.token_file});
    assert_eq!(put(on).await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        put(json!({"enabled": false})).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        put(json!({"enabled": true})).await.unwrap().status(),
        StatusCode::OK,
        "endpoint remembered"
    );
    let (_, st) = app.get("/v1/status").await;
    assert_eq!(st["sync"]["enabled"], true);
    assert_eq!(st["held_events"], 1, "captured before consent");
    app.stop().await;
}

#[tokio::test]
async fn airgapped_mode_refuses_to_enable_sync() {
    let app = App::spawn(|s| s.mode = Mode::Airgapped).await;
    let on = json!({"enabled": true, "endpoint": "https://x", "token_file": app.token_file});
    let r = app
        .client
        .put(format!("{}/v1/sync", app.base))
        .bearer_auth(&app.settings_token)
        .body(on.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    app.stop().await;
}

/// The answer counts what became of every line — accepted, duplicates, filtered, rejected — past the
/// first 100 unreadable lines too (those are counted in one dead letter, not listed).
#[tokio::test]
async fn the_answer_counts_every_line_past_the_listed_errors_too() {
    let app = App::spawn(|s| s.mode = Mode::Airgapped).await;
    let mut lines: Vec<String> = (0..3)
        .map(|i| support::hive_turn("session_counts", i))
        .collect();
    lines.push(support::hive_turn("session_counts", 0));
    for _ in 0..5 {
        lines.push(
            r#"{"type": "llm_text_delta", "stream_id": "queen", "data": {"content": "x"}}"#.into(),
        );
    }
    for i in 0..150 {
        lines.push(format!("not json {i}"));
    }
    let (s, b) = app.post("/v1/events", lines.join("\n")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{b}");
    assert_eq!(
        (
            &b["accepted"],
            &b["duplicates"],
            &b["filtered"],
            &b["rejected"]
        ),
        (&json!(3), &json!(1), &json!(5), &json!(150)),
        "{b}"
    );
    app.stop().await;
}
