//! The ingest's batch write path in instructions of the ingest process: what `scripts/ingest-path-guard.sh`
//! runs under valgrind's callgrind and checks against `ingest/benches/write-path.baseline`.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres write_path MODE` (the bench binary;
//! `cargo bench -p apiary-ingest --bench write_path -- MODE` builds and runs it), MODE one of:
//! - `warm`: a fresh migrated database, a tenant and its ingest token, the ingest's router (without its
//!   background tasks, whose timers would blur the counts) and three warm-up batches of 200 events;
//! - `large`: the same, then one batch of 1,000 events of one device (LLM turns and tool calls over 20
//!   sessions);
//! - `small`: the same, then 50 batches of 20 events from 50 devices (2 sessions each), one after the other.
//!
//! Every mode builds every body (JSON, gzip) before it sends any, so `large − warm` and `small − warm` are
//! what the ingest spent taking those batches: HTTP routing, decompression, parsing, validation, the token,
//! and its side of the database's protocol (not the database's own work: that is
//! `ingest/tests/write_costs.rs`, in statements, WAL bytes and buffers). Requests go to the router in this
//! process (`tower::ServiceExt::oneshot`), one at a time, on a single-threaded runtime (the body's
//! decoding and check on its blocking pool), with no sockets of their own: the counts do not depend on
//! how threads or sockets were scheduled. The mix is `ingest/tests/write_costs.rs`'s.

use std::net::SocketAddr;

use anyhow::{bail, Context};
use apiary_ingest::config::IngestSettings;
use axum::body::Body;
use axum::extract::ConnectInfo;
use chrono::{DateTime, DurationRound, Utc};
use common::{gzip, BenchDb};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;
use uuid::Uuid;

#[path = "common/mod.rs"]
mod common;

const MODELS: [&str; 3] = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"];
const TOOLS: [&str; 4] = ["read_file", "grep", "bash", "web_search"];

/// Event `i` of a session: three LLM turns in five, the rest tool calls (every seventh an error).
fn mixed_event(i: usize, session: &str, at: DateTime<Utc>) -> Value {
    let at = at + chrono::Duration::seconds((i % 1_200) as i64);
    let (kind, data) = if i % 5 < 3 {
        let input = 1_000 + (i as u64 * 37) % 9_000;
        let cost = ((i % 50) + 1) as f64 / 1_000.0;
        (
            "llm.turn",
            json!({ "model": MODELS[i % 3], "input_tokens": input,
                    "output_tokens": 100 + (i as u64 * 13) % 900, "cached_tokens": input / 2,
                    "cost_usd": cost, "cost_source": "reported" }),
        )
    } else {
        (
            "tool.call",
            json!({ "tool_name": TOOLS[i % 4], "status": "completed", "is_error": i.is_multiple_of(7),
                    "duration_ms": 10 + (i * 17) % 2_000 }),
        )
    };
    json!({
        "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
        "runtime": "hive", "native_type": "test_event", "session_id": session, "agent_role": "queen",
        "data": data,
    })
}

/// A gzip body of `n` events over `sessions` sessions of `device`, each session bound to its user.
fn device_batch(device: &str, n: usize, sessions: usize, at: DateTime<Utc>) -> Vec<u8> {
    let names: Vec<String> = (0..sessions).map(|s| format!("{device}-s{s}")).collect();
    let events: Vec<Value> = (0..n)
        .map(|i| mixed_event(i, &names[i % sessions], at))
        .collect();
    let bindings: Vec<Value> = names
        .iter()
        .map(|s| {
            json!({ "session_id": s, "user_id": format!("user-of-{device}"),
                         "first_seen_at": "2026-01-01T00:00:00Z" })
        })
        .collect();
    let batch = json!({
        "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": Utc::now(),
        "agent": { "device_id": device, "agent_version": "0.1.0" }, "policy_hash": "test",
        "sessions": bindings, "events": events,
    });
    gzip(&serde_json::to_vec(&batch).expect("a JSON value serialises"))
}

/// Posts one gzip body to the router; fails unless every event was accepted.
async fn post(router: &axum::Router, token: &str, body: Vec<u8>) -> anyhow::Result<()> {
    let mut req = axum::http::Request::post("/v1/batches")
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(Body::from(body))?;
    req.extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000))));
    let resp = router.clone().oneshot(req).await?;
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let v: Value = serde_json::from_slice(&bytes).context("the answer is JSON")?;
    if !status.is_success() || v["rejected"] != json!([]) {
        bail!("the batch was not taken whole: {status} {v}");
    }
    Ok(())
}

async fn run(mode: &str) -> anyhow::Result<()> {
    let db = BenchDb::create("write_path", 4).await?;
    let tenant = db.tenant("acme").await?;
    let token = db.ingest_token(tenant, None).await?;
    let settings = IngestSettings {
        listen: "127.0.0.1:0".into(),
        rate_limit_per_sec: 1e9,
        rate_limit_burst: 1e9,
        max_body_bytes: 16 * 1024 * 1024,
        max_decompressed_bytes: 64 * 1024 * 1024,
        max_batch_events: 2_000,
        group_commit_wait_ms: 0,
        ..IngestSettings::default()
    };
    let state = apiary_ingest::state::AppState::new(settings, db.pool.clone());
    state
        .store
        .ensure_ahead(Utc::now() - chrono::Duration::days(1), 3)
        .await?;
    let router = apiary_ingest::startup::router(state);

    // Two hours ago, on the hour (plus ten minutes): every event falls in one hour and one day.
    let at =
        Utc::now().duration_trunc(chrono::Duration::hours(1))? - chrono::Duration::minutes(110);
    let warm: Vec<Vec<u8>> = (0..3)
        .map(|d| device_batch(&format!("warm-{d}"), 200, 4, at))
        .collect();
    let large = device_batch("big-desk", 1_000, 20, at);
    let small: Vec<Vec<u8>> = (0..50)
        .map(|d| device_batch(&format!("desk-{d:02}"), 20, 2, at))
        .collect();

    for body in warm {
        post(&router, &token, body).await?;
    }
    match mode {
        "warm" => {}
        "large" => post(&router, &token, large).await?,
        "small" => {
            for body in small {
                post(&router, &token, body).await?;
            }
        }
        other => bail!("unknown mode {other:?}: warm, large or small"),
    }
    drop(router);
    db.drop().await?;
    println!("write_path {mode}: done");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let mode = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "large".into());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(&mode))
}
