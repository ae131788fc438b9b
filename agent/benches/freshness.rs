//! Freshness and request rate of the push cadence (`cargo bench -p apiary-agent --bench freshness`):
//! the real agent binary, sync enabled against a receiver in this process that answers `POST
//! /v1/batches` as the ingest does and records when each event arrived, and a trickle of single Hive
//! events posted to the agent's intake (Poisson arrivals).
//!
//! Two arms in the same run, one after the other, each on a fresh data directory and receiver:
//! - **immediate**: `push.coalesce_interval_ms = 0` (the push cadence before coalescing: whatever a
//!   100 ms poll finds goes out at once);
//! - **default**: the shipped settings (coalesced: 1 s + up to 0.25 s of jitter, or 100 events).
//!
//! Per arm: freshness of each event (its ack by the agent's intake → its arrival at the receiver)
//! p50/p95/max, batch requests per minute, events per request, and heartbeats that went as requests of
//! their own vs riding in a batch. Figures only; nothing is asserted.
//!
//! Environment: `BENCH_SECS` (posting time per arm, default 60), `BENCH_RATE` (events/s, default 2),
//! `BENCH_BASELINE_BIN` (an agent binary from before coalescing, e.g. from `scripts/bench-baseline.sh
//! REV`: a third arm run with its defaults).

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Outcome, Policy, ProcessOptions};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use common::{env_usize, percentile, Agent};
use rand::Rng;
use serde_json::{json, Value};
use uuid::Uuid;

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Arrival of each outbox event (heartbeats excluded).
    arrivals: HashMap<Uuid, Instant>,
    /// Arrival of each batch request.
    requests: Vec<Instant>,
    /// Requests that held events (not only a heartbeat).
    event_requests: usize,
    /// Heartbeats in requests holding nothing else.
    beats_alone: usize,
    /// Heartbeats in requests that also held events.
    beats_ridden: usize,
}

type Shared = Arc<Mutex<Seen>>;

async fn batches(
    State(seen): State<Shared>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> axum::Json<Value> {
    let at = Instant::now();
    let mut text = Vec::new();
    if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut text)
            .unwrap();
    } else {
        text = body.to_vec();
    }
    let batch: Value = serde_json::from_slice(&text).unwrap();
    let events = batch["events"].as_array().cloned().unwrap_or_default();
    let is_beat = |e: &Value| e["type"] == "agent.heartbeat";
    let beats = events.iter().filter(|e| is_beat(e)).count();
    let mut seen = seen.lock().unwrap();
    seen.requests.push(at);
    if beats == events.len() {
        seen.beats_alone += beats;
    } else {
        seen.beats_ridden += beats;
        seen.event_requests += 1;
    }
    for e in events.iter().filter(|e| !is_beat(e)) {
        let id: Uuid = e["event_id"].as_str().unwrap().parse().unwrap();
        seen.arrivals.entry(id).or_insert(at);
    }
    axum::Json(json!({"accepted": events.len(), "duplicates": 0, "rejected": []}))
}

/// Starts the receiver; its base URL.
async fn receiver(seen: Shared) -> String {
    let app = axum::Router::new()
        .route("/v1/batches", post(batches))
        // `sync enable` asks the ingest who the token is before it stores them.
        .route(
            "/v1/whoami",
            get(|| async {
                axum::Json(json!({
                    "tenant_id": "bench", "scopes": ["ingest"], "user_id": null, "device_id": null
                }))
            }),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// One arm's figures.
struct Figures {
    name: String,
    events: usize,
    lost: usize,
    fresh_ms: Vec<f64>,
    requests_per_min: f64,
    events_per_request: f64,
    beats_alone: usize,
    beats_ridden: usize,
}

fn private(path: &Path, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}

async fn run_arm(name: &str, bin: &Path, env: &[(&str, &str)], secs: u64, rate: f64) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    private(dir.path(), 0o700);
    let seen = Shared::default();
    let endpoint = receiver(seen.clone()).await;
    let token_file = dir.path().join("ingest.token");
    std::fs::write(&token_file, "bench-token\n").unwrap();
    private(&token_file, 0o600);
    let enabled = std::process::Command::new(bin)
        .args(["sync", "enable", "--data-dir"])
        .arg(dir.path())
        .args(["--endpoint", &endpoint, "--token-file"])
        .arg(&token_file)
        .env("APIARY_ZONE", "UTC")
        .output()
        .unwrap();
    assert!(
        enabled.status.success(),
        "{}",
        String::from_utf8_lossy(&enabled.stderr)
    );
    let agent = Agent::start_env(bin, dir.path(), &[], env);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        zone: Zone::Utc,
        ..ProcessOptions::new(&policy)
    };
    let session = format!("session_bench_{}", Uuid::new_v4().simple());
    let mut acks: HashMap<Uuid, Instant> = HashMap::new();
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let mut seq = 0u64;
    while Instant::now() < until {
        let gap = -(1.0 - rand::thread_rng().gen::<f64>()).ln() / rate;
        tokio::time::sleep(Duration::from_secs_f64(gap)).await;
        let ts = chrono::Utc::now()
            .naive_utc()
            .format("%Y-%m-%dT%H:%M:%S%.6f");
        let native = json!({"type": "llm_turn_complete", "stream_id": "queen", "node_id": "queen",
            "execution_id": session, "data": {"model": "claude-sonnet-4-5-20250929", "input_tokens": 1000,
            "output_tokens": 50, "cached_tokens": 0, "cache_creation_tokens": 0, "cost_usd": 0.004},
            "timestamp": ts.to_string(), "correlation_id": null, "colony_id": null, "seq": seq});
        seq += 1;
        let Ok(Outcome::Kept { event, .. }) = process_value(&native, &opts) else {
            panic!("the bench's event is not durable");
        };
        let r = client
            .post(format!("{}/v1/events", agent.base))
            .bearer_auth(&agent.token)
            .header("content-type", "application/json")
            .body(native.to_string())
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        acks.insert(event.event_id, Instant::now());
    }
    let posted = start.elapsed();
    // Until every acked event arrived, or 30 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let arrived = seen.lock().unwrap().arrivals.len();
        if arrived >= acks.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.stop();
    let seen = seen.lock().unwrap();
    let mut fresh_ms: Vec<f64> = acks
        .iter()
        .filter_map(|(id, ack)| {
            let at = seen.arrivals.get(id)?;
            Some(at.saturating_duration_since(*ack).as_secs_f64() * 1000.0)
        })
        .collect();
    fresh_ms.sort_by(f64::total_cmp);
    let in_window = seen
        .requests
        .iter()
        .filter(|at| **at >= start && **at <= start + posted)
        .count();
    Figures {
        name: name.into(),
        events: acks.len(),
        lost: acks.len() - fresh_ms.len(),
        fresh_ms,
        requests_per_min: in_window as f64 * 60.0 / posted.as_secs_f64(),
        events_per_request: seen.arrivals.len() as f64 / seen.event_requests.max(1) as f64,
        beats_alone: seen.beats_alone,
        beats_ridden: seen.beats_ridden,
    }
}

fn print(f: &Figures) {
    let (p50, p95, max) = if f.fresh_ms.is_empty() {
        (f64::NAN, f64::NAN, f64::NAN)
    } else {
        (
            percentile(&f.fresh_ms, 0.5),
            percentile(&f.fresh_ms, 0.95),
            f.fresh_ms[f.fresh_ms.len() - 1],
        )
    };
    println!(
        "{:<10} events {:>5} (not arrived {}) | freshness ms p50 {:>6.0} p95 {:>6.0} max {:>6.0} | \
         requests/min {:>6.1} | events/request {:>5.1} | heartbeats alone {:>2} ridden {:>2}",
        f.name,
        f.events,
        f.lost,
        p50,
        p95,
        max,
        f.requests_per_min,
        f.events_per_request,
        f.beats_alone,
        f.beats_ridden,
    );
}

#[tokio::main]
async fn main() {
    let secs = env_usize("BENCH_SECS", 60) as u64;
    let rate = std::env::var("BENCH_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    println!("freshness: {rate} events/s (Poisson) for {secs} s per arm, single-event posts");
    let this = common::this_build();
    let mut arms = Vec::new();
    if let Ok(base) = std::env::var("BENCH_BASELINE_BIN") {
        arms.push(run_arm("baseline", Path::new(&base), &[], secs, rate).await);
        print(&arms[arms.len() - 1]);
    }
    // Sent at once whatever interval the ingest asks for.
    let immediate = [
        ("APIARY_PUSH_COALESCE_INTERVAL_MS", "0"),
        ("APIARY_PUSH_MIN_INTERVAL_MS", "0"),
        ("APIARY_PUSH_MAX_INTERVAL_MS", "0"),
    ];
    arms.push(run_arm("immediate", &this, &immediate, secs, rate).await);
    print(&arms[arms.len() - 1]);
    arms.push(run_arm("default", &this, &[], secs, rate).await);
    print(&arms[arms.len() - 1]);
    let (old, new) = (&arms[arms.len() - 2], &arms[arms.len() - 1]);
    println!(
        "default / immediate: requests/min {:.3}, freshness p95 {:.0} ms vs {:.0} ms",
        new.requests_per_min / old.requests_per_min.max(1e-9),
        percentile(&new.fresh_ms, 0.95),
        percentile(&old.fresh_ms, 0.95),
    );
}
