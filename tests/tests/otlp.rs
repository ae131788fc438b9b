//! The agent's OTLP receiver end to end, with the real binaries: a real OpenTelemetry SDK
//! (`opentelemetry-otlp`'s HTTP exporter, protobuf and JSON) and Claude Code's documented events reach
//! `/v1/usage` exactly (cache tokens inside input, the agent span's aggregate never added, the same
//! records sent twice counted once) with nothing sensitive stored; the receiver answers like an OTLP
//! collector (partial success, 400/401/404/413/415); and a kill -9 during OTLP intake loses no
//! acknowledged record.

use std::time::Duration;

use apiary_schema::otel::wire::Status;
use prost::Message;
use rand::Rng;
use serde_json::Value;
use tests::agent::{Agent, Counters};
use tests::otlp::{self, Turn, Usage};
use tests::stack::Cloud;

const PB: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// Push settings that keep retries quick in tests.
const FAST: &[(&str, &str)] = &[
    ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
    ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
    ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "3600"),
    ("APIARY_PUSH_SHUTDOWN_GRACE_MS", "1000"),
];

async fn synced_agent(cloud: &Cloud) -> Agent {
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, FAST)
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    agent
}

async fn drained(agent: &Agent, n: u64) -> Counters {
    let c = agent
        .wait_counters(Duration::from_secs(120), "everything delivered", |c| {
            c.pending == 0 && c.delivered >= n
        })
        .await
        .unwrap();
    c.assert_balanced();
    c
}

/// `/v1/usage` rows by session (total granularity) → (session → usage, totals).
async fn usage_by_session(cloud: &Cloud) -> (std::collections::BTreeMap<String, Usage>, Usage) {
    let v = cloud
        .read_api()
        .usage(
            "session",
            "total",
            "2026-01-01T00:00:00Z",
            "2027-12-01T00:00:00Z",
        )
        .await
        .unwrap();
    let rows = v["rows"].as_array().unwrap().iter().map(|r| {
        (
            r["session_id"].as_str().unwrap().to_string(),
            Usage::from_totals(r),
        )
    });
    (rows.collect(), Usage::from_totals(&v["totals"]))
}

fn turns_a() -> Vec<Turn> {
    vec![
        Turn {
            model: "claude-sonnet-4-5",
            input: 21_200,
            output: 350,
            cache_read: 18_000,
            cache_creation: 2_000,
        },
        Turn {
            model: "claude-sonnet-4-5",
            input: 4_100,
            output: 800,
            cache_read: 4_000,
            cache_creation: 0,
        },
        Turn {
            model: "claude-haiku-4-5",
            input: 900,
            output: 120,
            cache_read: 0,
            cache_creation: 0,
        },
    ]
}

fn turns_b() -> Vec<Turn> {
    vec![
        Turn {
            model: "claude-haiku-4-5",
            input: 1_500,
            output: 60,
            cache_read: 1_000,
            cache_creation: 500,
        },
        Turn {
            model: "gpt-4o",
            input: 3_000,
            output: 300,
            cache_read: 0,
            cache_creation: 0,
        },
    ]
}

/// Runs the SDK on a plain thread: its blocking HTTP client must not run on the test's runtime.
async fn sdk_run(
    endpoint: String,
    token: String,
    conv: &'static str,
    turns: Vec<Turn>,
    tools: usize,
    failed: usize,
    json: bool,
) {
    tokio::task::spawn_blocking(move || {
        std::thread::spawn(move || {
            otlp::emit_agent_run(&endpoint, &token, conv, &turns, tools, failed, json)
        })
        .join()
        .expect("the SDK thread")
    })
    .await
    .unwrap()
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_trace_and_a_claude_code_stream_reach_usage_exactly_once() {
    let cloud = Cloud::start().await.unwrap();
    let agent = synced_agent(&cloud).await;
    let addr = agent.otlp_addr.expect("the OTLP receiver listens");
    let endpoint = format!("http://{addr}");
    sdk_run(
        endpoint.clone(),
        agent.token.clone(),
        "conv-trip-a",
        turns_a(),
        3,
        1,
        false,
    )
    .await;
    sdk_run(
        endpoint,
        agent.token.clone(),
        "conv-trip-b",
        turns_b(),
        1,
        0,
        true,
    )
    .await;
    // Claude Code's events, then the same records again as protobuf and as gzip JSON (a retried export).
    for (ct, body, gz) in [
        (JSON, otlp::CLAUDE_JSON, false),
        (PB, otlp::CLAUDE_PB, false),
        (JSON, otlp::CLAUDE_JSON, true),
    ] {
        let a = otlp::post(addr, &agent.token, "/v1/logs", ct, body, gz)
            .await
            .unwrap();
        assert_eq!(
            (a.status, a.content_type.as_str()),
            (200, ct),
            "{:?}",
            String::from_utf8_lossy(&a.body)
        );
        assert!(
            a.body.len() <= 2,
            "a full success carries no partial_success: {:?}",
            a.body
        );
    }
    // Kept: 3 + 3 + 1 (run a) and 2 + 1 + 1 (run b) spans; 5 Claude Code events, twice more duplicates.
    let c = drained(&agent, 11 + 5).await;
    assert_eq!(c.duplicate, 10, "{c:?}");
    let (rows, totals) = usage_by_session(&cloud).await;
    let claude = otlp::claude_fixture_usage();
    assert_eq!(
        claude.input_tokens,
        1_200 + 18_000 + 2_000 + 900,
        "the fixture's normalised input"
    );
    rows[otlp::CLAUDE_SESSION].assert_eq(&claude, "the Claude Code session");
    let a = otlp::trace_usage(&turns_a(), 3, 1);
    let b = otlp::trace_usage(&turns_b(), 1, 0);
    rows["conv-trip-a"].assert_eq(&a, "SDK run a (protobuf)");
    rows["conv-trip-b"].assert_eq(&b, "SDK run b (JSON)");
    let mut all = claude;
    all.add(&a);
    all.add(&b);
    totals.assert_eq(&all, "totals");
    // Runtimes are told apart, and nothing sensitive reached the cloud or the agent's files.
    let pool = cloud.db.pool().await.unwrap();
    let runtimes: Vec<(String, i64)> =
        sqlx::query_as("SELECT runtime, count(*) FROM events GROUP BY runtime ORDER BY runtime")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        runtimes,
        [("claude_code".to_string(), 5), ("otel".to_string(), 11)]
    );
    pool.close().await;
    // ... and so is their usage (`group_by=runtime`).
    let v = cloud
        .read_api()
        .usage(
            "runtime",
            "total",
            "2026-01-01T00:00:00Z",
            "2027-12-01T00:00:00Z",
        )
        .await
        .unwrap();
    let by_runtime: std::collections::BTreeMap<String, Usage> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["runtime"].as_str().unwrap().to_string(),
                Usage::from_totals(r),
            )
        })
        .collect();
    assert_eq!(by_runtime.len(), 2, "{v}");
    by_runtime["claude_code"].assert_eq(&otlp::claude_fixture_usage(), "runtime claude_code");
    let mut otel = a;
    otel.add(&b);
    by_runtime["otel"].assert_eq(&otel, "runtime otel");
    // Quiet since the fixture's day, a Claude Code session waits for its user: idle, not stalled.
    let s = cloud
        .read_api()
        .get_ok(&format!("/v1/sessions/{}", otlp::CLAUDE_SESSION))
        .await
        .unwrap();
    assert_eq!(
        (s["status"].as_str(), s["status_cause"].as_str()),
        (Some("idle"), Some("quiet_interactive")),
        "{s}"
    );
    let stored = tests::scan::assert_clean(&cloud.db.url).await.unwrap();
    assert!(stored.contains("search_flights") && stored.contains("claude-sonnet-4-5-20250929"));
    for secret in ["payroll", "id_rsa", "passport", "a1b2c3d4-e5f6"] {
        assert!(!stored.contains(secret), "{secret} reached the cloud");
    }
    tests::scan::assert_agent_files_clean(&agent.data_dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_otlp_receiver_answers_like_a_collector() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("APIARY_INTAKE_MAX_EVENTS", "50"),
        ("APIARY_INTAKE_MAX_BODY_BYTES", "200000"),
        ("APIARY_INTAKE_MAX_LINE_BYTES", "200000"),
    ];
    let agent = Agent::start_with(dir.path(), None, &env).await.unwrap();
    let addr = agent.otlp_addr.unwrap();
    let t = agent.token.clone();
    let status = |a: &otlp::Answer| Status::decode(&a.body[..]).expect("a google.rpc.Status");
    let a = otlp::post(addr, "wrong", "/v1/traces", PB, b"", false)
        .await
        .unwrap();
    assert_eq!(a.status, 401);
    let a = otlp::post(addr, &t, "/v1/traces", "text/plain", b"hi", false)
        .await
        .unwrap();
    assert_eq!(a.status, 415);
    let a = otlp::post(addr, &t, "/v1/traces", PB, b"\x0a\xff\xff\xff", false)
        .await
        .unwrap();
    assert_eq!((a.status, status(&a).code), (400, 3), "{a:?}");
    let a = otlp::post(addr, &t, "/v1/profiles", PB, b"", false)
        .await
        .unwrap();
    assert_eq!(a.status, 404);
    // More spans than intake.max_events, and a gzip bomb: 413, nothing committed.
    let a = otlp::post(
        addr,
        &t,
        "/v1/traces",
        PB,
        &otlp::synthetic_spans("c", 0, 51),
        false,
    )
    .await
    .unwrap();
    assert_eq!((a.status, status(&a).code), (413, 8));
    let bomb = vec![b' '; 10_000_000];
    let a = otlp::post(addr, &t, "/v1/logs", JSON, &bomb, true)
        .await
        .unwrap();
    assert_eq!(a.status, 413);
    assert_eq!(agent.counters().await.unwrap().received, 0);
    // One unreadable record among readable ones: 200 with partial_success; the others are committed.
    let mut v: Value = serde_json::from_slice(otlp::CLAUDE_JSON).unwrap();
    let records = v["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
        .as_array_mut()
        .unwrap();
    let mut bad = records[2].clone();
    for a in bad["attributes"].as_array_mut().unwrap() {
        if a["key"] == "input_tokens" {
            a["value"] = serde_json::json!({"stringValue": "zzcanary many"});
        }
        if a["key"] == "request_id" {
            a["value"] = serde_json::json!({"stringValue": "req_other"});
        }
    }
    records.push(bad);
    let a = otlp::post(addr, &t, "/v1/logs", JSON, v.to_string().as_bytes(), false)
        .await
        .unwrap();
    assert_eq!(a.status, 200);
    let r: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(
        r["partialSuccess"]["rejectedLogRecords"]
            .to_string()
            .trim_matches('"'),
        "1",
        "{r}"
    );
    assert!(!r.to_string().contains("zzcanary"));
    let c = agent.counters().await.unwrap();
    assert_eq!(
        (c.received, c.pending, c.rejected, c.filtered),
        (9, 5, 1, 3),
        "{c:?}"
    );
    // Metrics are taken and counted, never usage.
    let m = serde_json::json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "claude_code.cost.usage",
        "sum": {"aggregationTemporality": 1, "dataPoints": [{"asDouble": 0.04}, {"asDouble": 0.01}]}}]}]}]});
    let a = otlp::post(
        addr,
        &t,
        "/v1/metrics",
        JSON,
        m.to_string().as_bytes(),
        false,
    )
    .await
    .unwrap();
    assert_eq!(a.status, 200);
    let c = agent.counters().await.unwrap();
    assert_eq!((c.received, c.filtered, c.pending), (11, 5, 5));
    c.assert_balanced();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_otlp_intake_loses_no_acknowledged_record() {
    let cloud = Cloud::start().await.unwrap();
    let mut agent = synced_agent(&cloud).await;
    let session = "conv-otlp-kill";
    let cycles: u64 = if tests::full_faults() { 20 } else { 10 };
    let per = 50u64;
    // Exports go on, back to back, until the kill has landed and cut one of them (a refused or broken
    // connection), so every kill falls on a running intake whatever the machine's speed; each export is
    // retried until acknowledged, so exactly `sent` spans must arrive.
    let mut sent = 0u64;
    let mut cut = 0;
    for _ in 0..cycles {
        let delay = Duration::from_millis(rand::thread_rng().gen_range(10..150));
        let pid = agent.pid();
        let killer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        });
        let mut failed = 0;
        let mut exports = 0;
        while !(killer.is_finished() && failed > 0) && exports < 400 {
            let body = otlp::synthetic_spans(session, sent, per);
            loop {
                let addr = agent.otlp_addr.expect("the OTLP receiver listens");
                match otlp::post(addr, &agent.token, "/v1/traces", PB, &body, false).await {
                    Ok(a) if a.status == 200 => break,
                    Ok(a) if a.status >= 500 => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    Ok(a) => panic!("OTLP intake answered {}", a.status),
                    Err(_) => {
                        failed += 1;
                        if !agent.is_running() {
                            agent.restart().await.unwrap();
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            sent += per;
            exports += 1;
        }
        let landed = killer.await.unwrap();
        cut += u64::from(landed && failed > 0);
        if landed || !agent.is_running() {
            agent.restart().await.unwrap();
        }
        agent.counters().await.unwrap().assert_balanced();
    }
    eprintln!("{cut}/{cycles} kills cut an OTLP export; {sent} spans acknowledged");
    assert_eq!(cut, cycles, "every kill must land during intake");
    let c = agent
        .wait_counters(Duration::from_secs(120), "everything delivered", |c| {
            c.pending == 0 && c.delivered + c.duplicate >= sent
        })
        .await
        .unwrap();
    c.assert_balanced();
    cloud.assert_exactly(session, sent as i64).await.unwrap();
}

/// The receiver shares the intake's bound on bodies in flight (`intake.max_bytes_in_flight`): while a
/// slow exporter's body holds all of it, another export waits, then gets 503 UNAVAILABLE with
/// Retry-After (what an OTLP exporter retries) and nothing of it is committed; once the slow one is
/// gone, the same export is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_that_finds_no_room_for_its_body_gets_503_unavailable_and_is_taken_later() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("APIARY_INTAKE_MAX_BODY_BYTES", "200000"),
        ("APIARY_INTAKE_MAX_LINE_BYTES", "200000"),
        ("APIARY_INTAKE_MAX_BYTES_IN_FLIGHT", "200000"),
    ];
    let agent = Agent::start_with(dir.path(), None, &env).await.unwrap();
    let addr = agent.otlp_addr.unwrap();
    let t = agent.token.clone();
    // A slow exporter: it announces 200,000 bytes and sends ten.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {t}\r\n\
         content-type: {JSON}\r\ncontent-length: 200000\r\n\r\n{{\"resource"
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let a = otlp::post(addr, &t, "/v1/logs", JSON, otlp::CLAUDE_JSON, false)
        .await
        .unwrap();
    let status: Value = serde_json::from_slice(&a.body).expect("a google.rpc.Status in JSON");
    assert_eq!(
        (a.status, &status["code"]),
        (503, &Value::from(14)),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_bytes_in_flight")),
        "{status}"
    );
    assert!(a.retry_after.is_some());
    assert!(started.elapsed() >= Duration::from_secs(4));
    assert_eq!(agent.counters().await.unwrap().received, 0);
    drop(slow);
    let a = otlp::post(addr, &t, "/v1/logs", JSON, otlp::CLAUDE_JSON, false)
        .await
        .unwrap();
    assert_eq!(a.status, 200);
    let c = agent.counters().await.unwrap();
    assert!(c.received > 0, "{c:?}");
    c.assert_balanced();
}
