//! Ingest benchmark: 1k-event gzip batches with 10% duplicates, rollups included, posted over HTTP by
//! concurrent clients to the real server (in this process, port 0), against raw `COPY` of the same rows
//! into a plain table in the same run and database.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench ingest`
//! Knobs (env): BENCH_BATCHES (default 200), BENCH_CLIENTS (default 4), BENCH_GROUP_COMMIT (0 = off). Workload: one device, 200
//! sessions of which 20 are active in any batch, event times within ~30 s per batch (a streaming agent),
//! 60% llm.turn / 40% tool.call (completed, timed, four tool names); each batch = 900 new events + 100
//! already sent. Uses a fresh database
//! `apiary_bench_ingest_<random>` and drops it at the end.

use std::time::Instant;

use apiary_ingest::config::IngestSettings;
use chrono::Utc;
use common::{env_usize, gzip, pct, BenchDb};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use uuid::Uuid;

#[path = "common/mod.rs"]
mod common;

/// Event `k`-th batch: a streaming agent's window — 20 of 200 sessions active, times within ~30 s.
fn make_event(rng: &mut StdRng, now: chrono::DateTime<Utc>, k: usize) -> Value {
    let s = (k * 7 + rng.gen_range(0..20)) % 200;
    let at = now - chrono::Duration::seconds(3600)
        + chrono::Duration::milliseconds(k as i64 * 3000 + rng.gen_range(0..30_000));
    let (kind, data) = if rng.gen_bool(0.6) {
        let model = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"][s % 3];
        (
            "llm.turn",
            json!({ "model": model, "input_tokens": rng.gen_range(100..20_000),
            "output_tokens": rng.gen_range(10..2000), "cached_tokens": rng.gen_range(0..100), "cache_creation_tokens": 0,
            "cost_usd": rng.gen_range(1..50_000) as f64 / 1e6, "cost_source": "reported", "stop_reason": "tool_use" }),
        )
    } else {
        let tool = ["read_file", "grep", "bash", "web_search"][rng.gen_range(0..4)];
        (
            "tool.call",
            json!({ "tool_name": tool,
            "tool_use_id": format!("toolu_{}", rng.gen::<u32>()), "status": "completed", "is_error": rng.gen_bool(0.05),
            "duration_ms": rng.gen_range(1..20_000) }),
        )
    };
    let mut e = json!({ "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
        "runtime": "hive", "session_id": format!("session_{s}"), "agent_role": "queen", "native_type": "x", "data": data });
    if s.is_multiple_of(3) {
        e["agent_role"] = "worker".into();
        e["colony_id"] = format!("session_{}", s + 1).into();
    }
    e
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n_batches = env_usize("BENCH_BATCHES", 200);
    let clients = env_usize("BENCH_CLIENTS", 4);
    let db = BenchDb::create("ingest", 16).await?;
    let pool = db.pool.clone();
    let tenant = db.tenant("bench").await?;
    let token = db.ingest_token(tenant, None).await?;

    // Pre-build every body (gzip) so the clients measure the server, not JSON generation. Client `c` is
    // device `bench-dev-c` with its own 200 sessions (as separate agents would be); batch `k` belongs to
    // client `k % clients`; its 100 duplicates are re-sends of that client's earlier events.
    let mut rng = StdRng::seed_from_u64(1);
    let now = Utc::now();
    let mut sent: Vec<Vec<Value>> = vec![Vec::new(); clients];
    let mut bodies: Vec<Vec<Vec<u8>>> = vec![Vec::new(); clients];
    let mut rows_for_copy: Vec<Value> = Vec::new();
    for k in 0..n_batches {
        let c = k % clients;
        let mut events: Vec<Value> = (0..900)
            .map(|_| {
                let mut e = make_event(&mut rng, now, k);
                let sid = format!("dev{c}_{}", e["session_id"].as_str().unwrap());
                e["session_id"] = sid.into();
                if let Some(col) = e["colony_id"].as_str().map(|x| format!("dev{c}_{x}")) {
                    e["colony_id"] = col.into();
                }
                e
            })
            .collect();
        rows_for_copy.extend(events.iter().cloned());
        for _ in 0..100 {
            let pool = if sent[c].is_empty() {
                &events
            } else {
                &sent[c]
            };
            let dup = pool[rng.gen_range(0..pool.len())].clone();
            events.push(dup);
        }
        sent[c].extend(events.iter().take(900).cloned());
        let mut ids: Vec<&str> = events
            .iter()
            .filter_map(|e| e["session_id"].as_str())
            .collect();
        ids.sort();
        ids.dedup();
        let sessions: Vec<Value> = ids
            .iter()
            .map(|s| json!({ "session_id": s, "user_id": format!("user_{c}"), "first_seen_at": now }))
            .collect();
        let b = json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": now,
            "agent": { "device_id": format!("bench-dev-{c}"), "agent_version": "0.1.0" },
            "policy_hash": "bench", "sessions": sessions, "events": events });
        bodies[c].push(gzip(&serde_json::to_vec(&b)?));
    }
    let avg_kb = bodies.iter().flatten().map(Vec::len).sum::<usize>() / n_batches / 1024;

    // CPU cost of intake alone (decompress + JSON + JSON Schema + allowlist + usage), one core.
    let principal = apiary_ingest::auth::Principal::command_line(tenant);
    let policy = apiary_schema::Policy::default_policy();
    let rules = apiary_ingest::intake::IntakeRules::from_settings(&IngestSettings::default());
    let t0 = Instant::now();
    let sample = n_batches.min(20);
    for body in bodies.iter().flatten().take(sample) {
        let raw = apiary_ingest::intake::decode_body(Some("gzip"), body, 64 << 20)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        apiary_ingest::intake::check_batch(&raw, &principal, &policy, &rules, Utc::now(), true)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let intake_eps = (sample * 1000) as f64 / t0.elapsed().as_secs_f64();

    let settings = IngestSettings {
        pool_size: 16,
        group_commit: std::env::var("BENCH_GROUP_COMMIT").map_or(true, |v| v != "0"),
        ..IngestSettings::default()
    };
    let base = format!("{}/v1/batches", db.serve(settings).await?);

    let started = Instant::now();
    let mut tasks = vec![];
    for chunk in bodies {
        let (base, token) = (base.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            let mut lat = vec![];
            let mut dups = 0u64;
            for body in chunk {
                let (took, v) = common::post_gzip(&c, &base, &token, body).await;
                lat.push(took);
                dups += v["duplicates"].as_u64().unwrap();
            }
            (lat, dups)
        }));
    }
    let mut lat = vec![];
    let mut dups = 0;
    for t in tasks {
        let (l, d) = t.await?;
        lat.extend(l);
        dups += d;
    }
    let wall = started.elapsed();
    lat.sort();
    let total_events = (n_batches * 1000) as f64;
    let eps = total_events / wall.as_secs_f64();

    // Raw COPY of the same (new) rows into a plain uuid-keyed table, in 900-row chunks like the batches.
    sqlx::query("CREATE TABLE raw_copy (tenant_id uuid, event_id uuid PRIMARY KEY, occurred_at timestamptz, kind text, session_id text, data jsonb)").execute(&pool).await?;
    let mut conn = pool.acquire().await?;
    let mut copy_lat = vec![];
    let copy_started = Instant::now();
    for chunk in rows_for_copy.chunks(900) {
        let mut csv = String::new();
        for e in chunk {
            let data = e["data"].to_string().replace('"', "\"\"");
            csv.push_str(&format!(
                "{tenant},{},{},{},{},\"{data}\"\n",
                e["event_id"].as_str().unwrap(),
                e["occurred_at"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
                e["session_id"].as_str().unwrap()
            ));
        }
        let t0 = Instant::now();
        let mut copy = conn
            .copy_in_raw("COPY raw_copy FROM STDIN (FORMAT csv)")
            .await?;
        copy.send(csv.as_bytes()).await?;
        copy.finish().await?;
        copy_lat.push(t0.elapsed());
    }
    let copy_wall = copy_started.elapsed();
    copy_lat.sort();
    let copy_rps = rows_for_copy.len() as f64 / copy_wall.as_secs_f64();
    drop(conn);

    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await?;
    println!("ingest benchmark: {n_batches} batches x 1000 events (10% duplicates), {clients} concurrent clients, gzip ~{avg_kb} KiB/batch");
    println!("  stored {stored} new events, {dups} duplicates answered");
    println!("  ingest (HTTP + validation + dedup + events + rollups + sessions): {eps:.0} events/s over {:.2} s", wall.as_secs_f64());
    println!(
        "  batch latency: p50 {:?}  p95 {:?}  p99 {:?}  max {:?}",
        pct(&lat, 0.5),
        pct(&lat, 0.95),
        pct(&lat, 0.99),
        lat[lat.len() - 1]
    );
    println!("  raw COPY of the same {} rows (900-row chunks, one connection): {copy_rps:.0} rows/s; chunk p50 {:?}", rows_for_copy.len(), pct(&copy_lat, 0.5));
    println!("  ratio ingest / raw COPY: {:.2}", eps / copy_rps);
    println!("  intake CPU alone (decompress, JSON, JSON Schema, allowlist), one core: {intake_eps:.0} events/s");
    db.drop().await?;
    Ok(())
}
